//! The deterministic alert floor: every tick, the resource versions written since the last look
//! are evaluated by [`AlertRuleEngine`], the single owner of the rules.
//!
//! - **Finding work.** `alerts::pending` lists, across tenants, the agents whose row differs from
//!   the mark saved when they were last evaluated: a report advances `last_seen_at` in the same
//!   transaction as the agent's resources, going offline changes `status` in the same
//!   transaction as marking them unknown. The comparison is per agent, against what this
//!   service saw, so a report that commits late is found on the next tick; nothing depends on
//!   one global clock, and `resources` needs no index for it.
//! - **Evaluating.** Per tenant and batch, one transaction: a tenant-wide advisory lock (two
//!   scheduler instances never evaluate the same tenant at once), the agents' current marks,
//!   then their resources with agent status and latest metrics, the saved states, then the
//!   rules. A resource version already evaluated (same `received_at`) is left alone; an
//!   observation not newer than the last one (same `observed_at`, same agent status) is not
//!   fed again.
//! - **Storing.** In the same transaction: the alert rows (fired, level changed, cleared), the
//!   refreshed readings of firing alerts, the new states and marks, and one `events.alert.*`
//!   outbox row per transition.
//! - **Removed resources.** A resource its agent stops reporting is deleted by the relay; its
//!   firing alerts are cleared (with `events.alert.cleared`) by a periodic sweep, found through
//!   `pulse_alert_orphans`, and its rule state is forgotten.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use pulse_bus::events::alert_event;
use pulse_bus::{OutboxRow, Subjects};
use pulse_domain::TenantId;
use pulse_domain::alert_rules::{
    Alert, AlertRuleConfig, AlertRuleEngine, AlertTransition, ResourceAlertState,
};
use pulse_domain::backoff::Backoff;
use pulse_store::Store;
use pulse_store::alerts::{self, PendingAgent, SavedAlertState};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::floor_metrics::FloorMetrics;

/// Batches one tick runs at most before yielding to the next tick.
pub const MAX_BATCHES_PER_TICK: usize = 20;
/// Largest batch `pulse_alert_scan` returns.
const MAX_BATCH: u32 = 10_000;
/// Every this many ticks (and on the first), alerts of removed resources are cleared.
pub const SWEEP_REMOVED_EVERY: u64 = 10;
/// Longest pause after failed ticks.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum FloorError {
    #[error(transparent)]
    Store(#[from] pulse_store::StoreError),
    #[error(transparent)]
    Outbox(#[from] pulse_bus::OutboxError),
}

/// How the floor runs.
#[derive(Debug, Clone, PartialEq)]
pub struct FloorSettings {
    pub tick: Duration,
    /// Agents per batch.
    pub batch_size: u32,
    pub rules: AlertRuleConfig,
}

impl FloorSettings {
    pub fn from_config(config: &pulse_config::AlertsConfig) -> Self {
        Self {
            tick: Duration::from_millis(config.tick_ms.max(10)),
            batch_size: config.batch_size.clamp(1, MAX_BATCH),
            rules: AlertRuleConfig::default(),
        }
    }
}

impl Default for FloorSettings {
    fn default() -> Self {
        Self::from_config(&pulse_config::PulseConfig::default().alerts)
    }
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Agents found with new reports or a new status.
    pub pending: usize,
    /// Observations fed to the rules.
    pub evaluated: usize,
    /// Versions skipped as not newer than the last evaluated observation.
    pub skipped: usize,
    pub transitions: usize,
    /// Tenants whose batch failed (retried next tick).
    pub failed_tenants: usize,
}

/// What one tenant batch did.
#[derive(Debug, Default)]
struct TenantOutcome {
    evaluated: usize,
    skipped: usize,
    transitions: usize,
}

/// The alert-floor task.
pub struct AlertFloor {
    store: Store,
    subjects: Subjects,
    engine: AlertRuleEngine,
    settings: FloorSettings,
    outbox_notify: Option<Arc<Notify>>,
    metrics: FloorMetrics,
    ticks: u64,
}

impl AlertFloor {
    pub fn new(store: Store, subjects: Subjects, settings: FloorSettings) -> Self {
        Self {
            store,
            subjects,
            engine: AlertRuleEngine::new(settings.rules.clone()),
            settings,
            outbox_notify: None,
            metrics: FloorMetrics::default(),
            ticks: 0,
        }
    }

    /// Wakes an outbox relay after a commit that enqueued events.
    pub fn with_outbox_notify(mut self, notify: Arc<Notify>) -> Self {
        self.outbox_notify = Some(notify);
        self
    }

    /// Counts evaluations and transitions in `metrics`.
    pub fn with_metrics(mut self, metrics: FloorMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Ticks until `shutdown`; a failed tick is logged and retried after a bounded backoff.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut backoff = Backoff::new(self.settings.tick, MAX_BACKOFF);
        loop {
            let pause = match self.tick().await {
                Ok(report) => {
                    let pause = if report.failed_tenants > 0 {
                        backoff.next_delay()
                    } else {
                        backoff.reset();
                        self.settings.tick
                    };
                    if report.transitions > 0 || report.failed_tenants > 0 {
                        tracing::info!(
                            pending = report.pending,
                            evaluated = report.evaluated,
                            transitions = report.transitions,
                            failed_tenants = report.failed_tenants,
                            "alert floor tick"
                        );
                    }
                    pause
                }
                Err(error) => {
                    let pause = backoff.next_delay();
                    tracing::warn!(%error, failures = backoff.attempts(), "alert floor tick failed; will retry");
                    pause
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// One look: evaluates the agents with new reports in batches until caught up (at most
    /// [`MAX_BATCHES_PER_TICK`] batches); every [`SWEEP_REMOVED_EVERY`] ticks first clears the
    /// alerts of removed resources.
    pub async fn tick(&mut self) -> Result<TickReport, FloorError> {
        let mut report = TickReport::default();
        if self.ticks % SWEEP_REMOVED_EVERY == 0 {
            match self.sweep_removed().await {
                Ok(cleared) => report.transitions += cleared,
                // Evaluation goes on; the sweep is retried on its next turn.
                Err(error) => {
                    self.metrics.failures.inc();
                    tracing::warn!(%error, "clearing alerts of removed resources failed")
                }
            }
        }
        self.ticks = self.ticks.wrapping_add(1);
        let batch = i32::try_from(self.settings.batch_size).unwrap_or(i32::MAX);
        let mut failed: HashSet<TenantId> = HashSet::new();
        for _ in 0..MAX_BATCHES_PER_TICK {
            let pending = alerts::pending(&self.store, batch).await?;
            let found = pending.len();
            // A failed tenant's agents stay pending; do not spin on them within this tick.
            let pending: Vec<PendingAgent> = pending
                .into_iter()
                .filter(|p| !failed.contains(&p.tenant))
                .collect();
            if pending.is_empty() {
                break;
            }
            report.pending += pending.len();
            let mut by_tenant: BTreeMap<TenantId, Vec<String>> = BTreeMap::new();
            for p in pending {
                by_tenant.entry(p.tenant).or_default().push(p.agent_id);
            }
            for (tenant, agents) in by_tenant {
                let ids: Vec<&str> = agents.iter().map(String::as_str).collect();
                match self.evaluate_tenant(&tenant, &ids).await {
                    Ok(outcome) => {
                        report.evaluated += outcome.evaluated;
                        report.skipped += outcome.skipped;
                        report.transitions += outcome.transitions;
                    }
                    Err(error) => {
                        tracing::warn!(tenant = %tenant, %error, agents = ids.len(), "alert evaluation failed; will retry");
                        report.failed_tenants += 1;
                        self.metrics.failures.inc();
                        failed.insert(tenant);
                    }
                }
            }
            if found < self.settings.batch_size as usize {
                break;
            }
        }
        Ok(report)
    }

    async fn evaluate_tenant(
        &self,
        tenant: &TenantId,
        agent_ids: &[&str],
    ) -> Result<TenantOutcome, FloorError> {
        let tx = self.store.tenant_tx(tenant).await?;
        alerts::lock_tenant(&tx).await?;
        let marks = alerts::agent_marks(&tx, agent_ids).await?;
        let scanned = alerts::scan_agents(&tx, agent_ids).await?;
        let ids: Vec<&str> = scanned.iter().map(|r| r.id.as_str()).collect();
        let saved = alerts::load_states(&tx, &ids).await?;
        let now = Utc::now();
        let mut outcome = TenantOutcome::default();
        let mut next_states = Vec::with_capacity(scanned.len());
        let mut transitions: Vec<AlertTransition> = Vec::new();
        let mut refreshed: Vec<Alert> = Vec::new();
        for resource in &scanned {
            let previous = saved.get(&resource.id);
            let observation = alerts::observation(resource);
            let evaluated_already = previous.is_some_and(|p| {
                p.received_at >= resource.received_at && p.agent_online == observation.agent_online
            });
            if evaluated_already {
                // The agent has other news, or another instance got here first.
                continue;
            }
            let not_newer = previous.is_some_and(|p| {
                observation.observed_at <= p.observed_at
                    && observation.agent_online == p.agent_online
            });
            if let (true, Some(previous)) = (not_newer, previous) {
                outcome.skipped += 1;
                next_states.push(SavedAlertState {
                    received_at: previous.received_at.max(resource.received_at),
                    ..previous.clone()
                });
                continue;
            }
            let empty = ResourceAlertState::default();
            let before = previous.map_or(&empty, |p| &p.state);
            let (after, changes) = self.engine.evaluate(before, &observation, now);
            outcome.evaluated += 1;
            // Readings of alerts that kept firing at the same level.
            for (rule, alert) in &after.firing {
                let changed_here = changes.iter().any(|t| t.alert().rule == *rule);
                let reading_moved = before.firing.get(rule).is_some_and(|old| {
                    old.value != alert.value
                        || old.threshold != alert.threshold
                        || old.message != alert.message
                });
                if !changed_here && reading_moved {
                    refreshed.push(alert.clone());
                }
            }
            next_states.push(SavedAlertState {
                resource_id: resource.id.clone(),
                state: after,
                observed_at: previous.map_or(observation.observed_at, |p| {
                    p.observed_at.max(observation.observed_at)
                }),
                agent_online: observation.agent_online,
                received_at: previous.map_or(resource.received_at, |p| {
                    p.received_at.max(resource.received_at)
                }),
            });
            transitions.extend(changes);
        }
        self.store_transitions(&tx, tenant, &transitions).await?;
        let refreshed: Vec<&Alert> = refreshed.iter().collect();
        alerts::refresh_readings(&tx, &refreshed).await?;
        alerts::save_states(&tx, &next_states).await?;
        alerts::save_agent_marks(&tx, &marks).await?;
        tx.commit().await?;
        outcome.transitions = transitions.len();
        self.metrics.evaluated.inc_by(outcome.evaluated as u64);
        self.announce(tenant, &transitions);
        Ok(outcome)
    }

    /// Clears the firing alerts of resources that no longer exist (their agent stopped
    /// reporting them) and forgets their rule state, so a resource that comes back starts
    /// afresh. Returns how many alerts cleared.
    pub async fn sweep_removed(&self) -> Result<usize, FloorError> {
        let max = i32::try_from(MAX_BATCH).unwrap_or(i32::MAX);
        let mut by_tenant: BTreeMap<TenantId, Vec<String>> = BTreeMap::new();
        for (tenant, resource_id) in alerts::orphaned(&self.store, max).await? {
            by_tenant.entry(tenant).or_default().push(resource_id);
        }
        let mut cleared = 0;
        for (tenant, ids) in by_tenant {
            let tx = self.store.tenant_tx(&tenant).await?;
            alerts::lock_tenant(&tx).await?;
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            // Checked again under the lock: the resource may be back.
            let gone = alerts::firing_of_removed(&tx, &ids).await?;
            let now = Utc::now();
            let transitions: Vec<AlertTransition> = gone
                .iter()
                .map(|stored| AlertTransition::Cleared {
                    alert: stored.to_alert(),
                    cleared_at: now,
                })
                .collect();
            let removed: BTreeSet<&str> = gone.iter().map(|a| a.resource_id.as_str()).collect();
            self.store_transitions(&tx, &tenant, &transitions).await?;
            alerts::delete_states(&tx, &removed.into_iter().collect::<Vec<_>>()).await?;
            tx.commit().await?;
            cleared += transitions.len();
            self.announce(&tenant, &transitions);
        }
        Ok(cleared)
    }

    /// Stores each transition and enqueues its `events.alert.*` row, in the caller's
    /// transaction.
    async fn store_transitions(
        &self,
        tx: &pulse_store::TenantTx,
        tenant: &TenantId,
        transitions: &[AlertTransition],
    ) -> Result<(), FloorError> {
        for transition in transitions {
            alerts::apply_transition(tx, transition).await?;
            let (domain, event) = alert_event(transition);
            let row = OutboxRow::event(&self.subjects, tenant, domain, event, transition)?;
            pulse_bus::enqueue(&**tx.client(), row).await?;
        }
        Ok(())
    }

    /// Logs committed transitions and wakes the outbox relay.
    fn announce(&self, tenant: &TenantId, transitions: &[AlertTransition]) {
        if transitions.is_empty() {
            return;
        }
        for transition in transitions {
            self.metrics.transition(alert_event(transition).1);
            let alert = transition.alert();
            tracing::info!(
                tenant = %tenant,
                key = %alert.key,
                level = ?alert.level,
                event = alert_event(transition).1,
                "alert transition"
            );
        }
        if let Some(notify) = &self.outbox_notify {
            notify.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, TimeZone};
    use pulse_domain::alert_rules::{AlertKey, AlertLevel, AlertRule};
    use serde_json::json;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 1, 12, 0, 0)
            .single()
            .unwrap_or_default()
            + chrono::Duration::seconds(secs)
    }

    fn alert(level: AlertLevel, value: f64, threshold: f64) -> Alert {
        Alert {
            key: AlertKey::new("storage:h1:/var", AlertRule::FilesystemUsage),
            rule: AlertRule::FilesystemUsage,
            level,
            value,
            threshold,
            resource_id: "storage:h1:/var".to_owned(),
            message: format!("storage storage:h1:/var filesystem usage {value:.1}%"),
            fired_at: at(0),
            updated_at: at(30),
        }
    }

    /// The wire identity and body of each `events.alert.*` transition, as the outbox stores it.
    #[test]
    fn alert_event_wire_shape() {
        let subjects = Subjects::new(None);
        let tenant = TenantId::default_tenant();
        let transitions = [
            AlertTransition::Fired {
                alert: alert(AlertLevel::Warning, 91.0, 90.0),
            },
            AlertTransition::LevelChanged {
                from: AlertLevel::Warning,
                alert: alert(AlertLevel::Critical, 96.0, 95.0),
            },
            AlertTransition::Cleared {
                alert: alert(AlertLevel::Warning, 84.0, 90.0),
                cleared_at: at(60),
            },
        ];
        let rows: Vec<serde_json::Value> = transitions
            .iter()
            .map(|t| {
                let (domain, event) = alert_event(t);
                let row = OutboxRow::event(&subjects, &tenant, domain, event, t)
                    .expect("a valid event row");
                json!({
                    "subject": row.subject,
                    "message_type": row.message_type,
                    "schema": row.schema,
                    "payload": row.payload,
                })
            })
            .collect();
        insta::assert_json_snapshot!(rows);
    }

    #[test]
    fn settings_come_from_the_alerts_section() {
        let mut config = pulse_config::PulseConfig::default().alerts;
        let defaults = FloorSettings::from_config(&config);
        assert_eq!(defaults.tick, Duration::from_secs(1));
        assert_eq!(defaults.rules, AlertRuleConfig::default());
        config.tick_ms = 0;
        config.batch_size = 0;
        let clamped = FloorSettings::from_config(&config);
        assert_eq!(clamped.tick, Duration::from_millis(10));
        assert_eq!(clamped.batch_size, 1);
    }
}
