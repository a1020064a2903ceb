//! Alerts: the lifecycle rows (`firing` -> `cleared`), the rule state kept per resource between
//! observations, and the reads the alert floor scans: agents with new reports or a new status,
//! and their resources with the agent's status and latest percentage metrics.
//!
//! The rules themselves live in [`pulse_domain::alert_rules`]; this module only maps stored
//! resources to [`ResourceObservation`]s ([`observation`]) and stores what the rules decided.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Duration, Utc};
use pulse_domain::TenantId;
use pulse_domain::alert_rules::{
    Alert, AlertKey, AlertLevel, AlertRule, AlertTransition, HealthState, ObservedResourceType,
    ResourceAlertState, ResourceObservation, RunState,
};
use pulse_domain::resource::{Health, ResourceStatus, ResourceType};
use serde::Serialize;
use uuid::Uuid;

use crate::{Store, StoreError, TenantTx};

/// Host memory in use, percent.
pub const MEMORY_PERCENT: &str = "memory_percent";
/// Filesystem space in use, percent.
pub const USED_PERCENT: &str = "used_percent";
/// Filesystem inodes in use, percent.
pub const INODES_PERCENT: &str = "inodes_percent";
/// Percent of an SSD's rated endurance left (a Proxmox disk's `wearout`).
pub const WEAROUT_REMAINING: &str = "wearout_remaining_percent";
/// The metrics [`observations`] reads for the rules.
pub const RULE_METRICS: [&str; 4] = [
    MEMORY_PERCENT,
    USED_PERCENT,
    INODES_PERCENT,
    WEAROUT_REMAINING,
];
/// A metric sample this much older than its resource's observation is not a current reading.
pub const METRIC_STALE_AFTER_SECS: i64 = 600;

/// Listing limits of [`list`].
pub const DEFAULT_LIST_LIMIT: i64 = 100;
pub const MAX_LIST_LIMIT: i64 = pulse_domain::listing::MAX_ALERTS;

fn invalid(e: impl std::fmt::Display) -> StoreError {
    StoreError::Invalid(e.to_string())
}

fn rule_str(rule: AlertRule) -> &'static str {
    rule.as_str()
}

fn level_str(level: AlertLevel) -> &'static str {
    match level {
        AlertLevel::Warning => "warning",
        AlertLevel::Critical => "critical",
    }
}

fn parse_rule(s: &str) -> Result<AlertRule, StoreError> {
    AlertRule::ALL
        .into_iter()
        .find(|r| r.as_str() == s)
        .ok_or_else(|| invalid(format!("unknown alert rule {s:?}")))
}

fn parse_level(s: &str) -> Result<AlertLevel, StoreError> {
    match s {
        "warning" => Ok(AlertLevel::Warning),
        "critical" => Ok(AlertLevel::Critical),
        other => Err(invalid(format!("unknown alert level {other:?}"))),
    }
}

/// Where an alert is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertStatus {
    Firing,
    Cleared,
}

impl AlertStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Firing => "firing",
            Self::Cleared => "cleared",
        }
    }
}

/// One stored alert, as the API lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredAlert {
    pub id: Uuid,
    pub key: AlertKey,
    #[serde(rename = "type")]
    pub rule: AlertRule,
    pub level: AlertLevel,
    pub value: f64,
    pub threshold: f64,
    pub resource_id: String,
    pub message: String,
    pub state: AlertStatus,
    pub fired_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub cleared_at: Option<DateTime<Utc>>,
}

/// Which alerts [`list`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StateFilter {
    #[default]
    Firing,
    Cleared,
    All,
}

impl std::str::FromStr for StateFilter {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "firing" => Ok(Self::Firing),
            "cleared" => Ok(Self::Cleared),
            "all" => Ok(Self::All),
            other => Err(format!(
                "unknown alert state {other:?} (expected firing, cleared or all)"
            )),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertFilter {
    pub state: StateFilter,
    /// Canonical resource id.
    pub resource_id: Option<String>,
    /// Clamped to `1..=MAX_LIST_LIMIT`.
    pub limit: i64,
}

impl Default for AlertFilter {
    fn default() -> Self {
        Self {
            state: StateFilter::Firing,
            resource_id: None,
            limit: DEFAULT_LIST_LIMIT,
        }
    }
}

const ALERT_COLUMNS: &str = "id, key, rule, level, value, threshold, resource_id, message, state, \
                             fired_at, updated_at, cleared_at";

fn alert_from_row(row: &tokio_postgres::Row) -> Result<StoredAlert, StoreError> {
    let state = match row.get::<_, &str>(8) {
        "firing" => AlertStatus::Firing,
        "cleared" => AlertStatus::Cleared,
        other => return Err(invalid(format!("unknown alert state {other:?}"))),
    };
    // `key` (column 1) is derived from these two; rebuilding it keeps one definition.
    let rule = parse_rule(row.get(2))?;
    let resource_id: String = row.get(6);
    Ok(StoredAlert {
        id: row.get(0),
        key: AlertKey::new(&resource_id, rule),
        rule,
        level: parse_level(row.get(3))?,
        value: row.get(4),
        threshold: row.get(5),
        resource_id,
        message: row.get(7),
        state,
        fired_at: row.get(9),
        updated_at: row.get(10),
        cleared_at: row.get(11),
    })
}

/// The tenant's alerts matching `filter`, newest first.
pub async fn list(tx: &TenantTx, filter: &AlertFilter) -> Result<Vec<StoredAlert>, StoreError> {
    let state = match filter.state {
        StateFilter::Firing => Some("firing"),
        StateFilter::Cleared => Some("cleared"),
        StateFilter::All => None,
    };
    let limit = filter.limit.clamp(1, MAX_LIST_LIMIT);
    let rows = tx
        .client()
        .query(
            &format!(
                "SELECT {ALERT_COLUMNS} FROM alerts
                 WHERE ($1::text IS NULL OR state = $1)
                   AND ($2::text IS NULL OR resource_id = $2)
                 ORDER BY fired_at DESC, id DESC LIMIT $3"
            ),
            &[&state, &filter.resource_id, &limit],
        )
        .await?;
    rows.iter().map(alert_from_row).collect()
}

/// The firing alert with `key`, if any.
pub async fn firing(tx: &TenantTx, key: &AlertKey) -> Result<Option<StoredAlert>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            &format!("SELECT {ALERT_COLUMNS} FROM alerts WHERE key = $1 AND state = 'firing'"),
            &[&key.as_str()],
        )
        .await?;
    row.as_ref().map(alert_from_row).transpose()
}

/// The id of the firing an alert event belongs to: the latest alert of `key` that fired at or
/// before `fired_at`, whatever its state now (the floor keeps an alert already firing rather than
/// insert another, and the event may arrive after the alert cleared).
pub async fn firing_at(
    tx: &TenantTx,
    key: &str,
    fired_at: DateTime<Utc>,
) -> Result<Option<Uuid>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT id FROM alerts WHERE key = $1 AND fired_at <= $2
             ORDER BY fired_at DESC LIMIT 1",
            &[&key, &fired_at],
        )
        .await?;
    Ok(row.map(|row| row.get(0)))
}

/// Serializes the alert-triggered runs of one firing (`requested_by` is the run's actor,
/// `alert:<alert id>`) across consumers and replicas until the transaction ends.
pub async fn lock_firing_trigger(tx: &TenantTx, requested_by: &str) -> Result<(), StoreError> {
    tx.client()
        .execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('pulse.alert-trigger.' || $1 || '.' || $2, 0))",
            &[&tx.tenant().as_str(), &requested_by],
        )
        .await?;
    Ok(())
}

/// Records a newly fired alert under `id`. A second firing alert for the same key is refused by
/// the unique index (a unique violation).
pub async fn insert_fired(tx: &TenantTx, id: Uuid, alert: &Alert) -> Result<(), StoreError> {
    tx.client()
        .execute(
            "INSERT INTO alerts (tenant_id, id, key, rule, level, value, threshold, resource_id,
                                 message, state, fired_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'firing', $10, $11)",
            &[
                &tx.tenant().as_str(),
                &id,
                &alert.key.as_str(),
                &rule_str(alert.rule),
                &level_str(alert.level),
                &alert.value,
                &alert.threshold,
                &alert.resource_id,
                &alert.message,
                &alert.fired_at,
                &alert.updated_at,
            ],
        )
        .await?;
    Ok(())
}

/// Sets the level (and reading) of the firing alert with `alert.key`. Returns whether one was
/// firing.
pub async fn update_level(tx: &TenantTx, alert: &Alert) -> Result<bool, StoreError> {
    let n = tx
        .client()
        .execute(
            "UPDATE alerts SET level = $2, value = $3, threshold = $4, message = $5, updated_at = $6
             WHERE key = $1 AND state = 'firing'",
            &[
                &alert.key.as_str(),
                &level_str(alert.level),
                &alert.value,
                &alert.threshold,
                &alert.message,
                &alert.updated_at,
            ],
        )
        .await?;
    Ok(n > 0)
}

/// Clears the firing alert with `alert.key`. Returns whether one was firing.
pub async fn clear(
    tx: &TenantTx,
    alert: &Alert,
    cleared_at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = tx
        .client()
        .execute(
            "UPDATE alerts SET state = 'cleared', cleared_at = $2, updated_at = $2
             WHERE key = $1 AND state = 'firing'",
            &[&alert.key.as_str(), &cleared_at],
        )
        .await?;
    Ok(n > 0)
}

/// Stores one transition: inserts a fired alert, updates a level, or clears. Returns the id of
/// the alert row (a fresh one for `Fired`), or `None` when a level change or clear found no
/// firing alert (the state and the table disagreed; the state wins from here on).
pub async fn apply_transition(
    tx: &TenantTx,
    transition: &AlertTransition,
) -> Result<Option<Uuid>, StoreError> {
    match transition {
        AlertTransition::Fired { alert } => {
            // A row still firing means the saved state was lost; keep that alert rather than
            // fail on the one-firing-per-key index forever.
            if let Some(existing) = firing(tx, &alert.key).await? {
                update_level(tx, alert).await?;
                return Ok(Some(existing.id));
            }
            let id = Uuid::now_v7();
            insert_fired(tx, id, alert).await?;
            Ok(Some(id))
        }
        AlertTransition::LevelChanged { alert, .. } => {
            let row = firing(tx, &alert.key).await?;
            if update_level(tx, alert).await? {
                Ok(row.map(|r| r.id))
            } else {
                Ok(None)
            }
        }
        AlertTransition::Cleared { alert, cleared_at } => {
            let row = firing(tx, &alert.key).await?;
            if clear(tx, alert, *cleared_at).await? {
                Ok(row.map(|r| r.id))
            } else {
                Ok(None)
            }
        }
    }
}

/// Refreshes the reading (value, threshold, message) of firing alerts, in one statement.
pub async fn refresh_readings(tx: &TenantTx, alerts: &[&Alert]) -> Result<u64, StoreError> {
    if alerts.is_empty() {
        return Ok(0);
    }
    let keys: Vec<&str> = alerts.iter().map(|a| a.key.as_str()).collect();
    let values: Vec<f64> = alerts.iter().map(|a| a.value).collect();
    let thresholds: Vec<f64> = alerts.iter().map(|a| a.threshold).collect();
    let messages: Vec<&str> = alerts.iter().map(|a| a.message.as_str()).collect();
    let n = tx
        .client()
        .execute(
            "UPDATE alerts a SET value = u.v, threshold = u.t, message = u.m
             FROM unnest($1::text[], $2::float8[], $3::float8[], $4::text[]) AS u(k, v, t, m)
             WHERE a.key = u.k AND a.state = 'firing'
               AND (a.value, a.threshold, a.message) IS DISTINCT FROM (u.v, u.t, u.m)",
            &[&keys, &values, &thresholds, &messages],
        )
        .await?;
    Ok(n)
}

/// What the rules last saw of one resource, and what they remember about it.
#[derive(Debug, Clone, PartialEq)]
pub struct SavedAlertState {
    pub resource_id: String,
    pub state: ResourceAlertState,
    pub observed_at: DateTime<Utc>,
    pub agent_online: Option<bool>,
    /// `resources.received_at` of the version evaluated.
    pub received_at: DateTime<Utc>,
}

/// The saved states of `resource_ids` (missing ones are absent).
pub async fn load_states(
    tx: &TenantTx,
    resource_ids: &[&str],
) -> Result<HashMap<String, SavedAlertState>, StoreError> {
    let rows = tx
        .client()
        .query(
            "SELECT resource_id, state, observed_at, agent_online, received_at
             FROM resource_alert_states WHERE resource_id = ANY($1)",
            &[&resource_ids],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let resource_id: String = row.get(0);
            let state: serde_json::Value = row.get(1);
            let saved = SavedAlertState {
                resource_id: resource_id.clone(),
                state: serde_json::from_value(state).map_err(invalid)?,
                observed_at: row.get(2),
                agent_online: row.get(3),
                received_at: row.get(4),
            };
            Ok((resource_id, saved))
        })
        .collect()
}

/// Inserts or replaces `states`, in one statement.
pub async fn save_states(tx: &TenantTx, states: &[SavedAlertState]) -> Result<u64, StoreError> {
    if states.is_empty() {
        return Ok(0);
    }
    let ids: Vec<&str> = states.iter().map(|s| s.resource_id.as_str()).collect();
    let docs = states
        .iter()
        .map(|s| serde_json::to_value(&s.state).map_err(invalid))
        .collect::<Result<Vec<_>, _>>()?;
    let observed: Vec<DateTime<Utc>> = states.iter().map(|s| s.observed_at).collect();
    let online: Vec<Option<bool>> = states.iter().map(|s| s.agent_online).collect();
    let received: Vec<DateTime<Utc>> = states.iter().map(|s| s.received_at).collect();
    let n = tx
        .client()
        .execute(
            "INSERT INTO resource_alert_states
                (tenant_id, resource_id, state, observed_at, agent_online, received_at, updated_at)
             SELECT $1, r, s, o, a, v, now()
             FROM unnest($2::text[], $3::jsonb[], $4::timestamptz[], $5::bool[], $6::timestamptz[])
                  AS u(r, s, o, a, v)
             ON CONFLICT (tenant_id, resource_id) DO UPDATE SET
                state = EXCLUDED.state, observed_at = EXCLUDED.observed_at,
                agent_online = EXCLUDED.agent_online, received_at = EXCLUDED.received_at,
                updated_at = now()",
            &[
                &tx.tenant().as_str(),
                &ids,
                &docs,
                &observed,
                &online,
                &received,
            ],
        )
        .await?;
    Ok(n)
}

/// Serializes alert evaluation of the transaction's tenant across scheduler instances (released
/// at commit or rollback).
pub async fn lock_tenant(tx: &TenantTx) -> Result<(), StoreError> {
    tx.client()
        .execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('pulse.alerts.' || $1, 0))",
            &[&tx.tenant().as_str()],
        )
        .await?;
    Ok(())
}

/// Firing alerts of `resource_ids` whose resource row no longer exists in the tenant.
pub async fn firing_of_removed(
    tx: &TenantTx,
    resource_ids: &[&str],
) -> Result<Vec<StoredAlert>, StoreError> {
    let rows = tx
        .client()
        .query(
            &format!(
                "SELECT {ALERT_COLUMNS} FROM alerts a
                 WHERE a.state = 'firing' AND a.resource_id = ANY($1)
                   AND NOT EXISTS (SELECT 1 FROM resources r WHERE r.id = a.resource_id)
                 ORDER BY a.resource_id, a.key"
            ),
            &[&resource_ids],
        )
        .await?;
    rows.iter().map(alert_from_row).collect()
}

/// Forgets the rule state of `resource_ids` (a resource that comes back starts afresh).
pub async fn delete_states(tx: &TenantTx, resource_ids: &[&str]) -> Result<u64, StoreError> {
    Ok(tx
        .client()
        .execute(
            "DELETE FROM resource_alert_states WHERE resource_id = ANY($1)",
            &[&resource_ids],
        )
        .await?)
}

/// Resources of every tenant with a firing alert but no resource row any more, at most
/// `max_rows`. Identities only, through `pulse_alert_orphans`.
pub async fn orphaned(store: &Store, max_rows: i32) -> Result<Vec<(TenantId, String)>, StoreError> {
    let client = store.pool().get().await?;
    let rows = client
        .query(
            "SELECT tenant_id, resource_id FROM pulse_alert_orphans($1)",
            &[&max_rows],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let tenant: String = row.get(0);
            Ok((TenantId::new(tenant).map_err(invalid)?, row.get(1)))
        })
        .collect()
}

impl StoredAlert {
    /// The alert as the rules describe it.
    pub fn to_alert(&self) -> Alert {
        Alert {
            key: self.key.clone(),
            rule: self.rule,
            level: self.level,
            value: self.value,
            threshold: self.threshold,
            resource_id: self.resource_id.clone(),
            message: self.message.clone(),
            fired_at: self.fired_at,
            updated_at: self.updated_at,
        }
    }
}

/// An agent with resource versions the rules have not seen: it reported or changed status since
/// its mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingAgent {
    pub tenant: TenantId,
    pub agent_id: String,
}

/// Agents of every tenant that reported or changed status since their mark, least recently
/// seen first, at most `max_rows` (capped at 10 000). Identities only: the cross-tenant read,
/// through `pulse_alert_scan`.
pub async fn pending(store: &Store, max_rows: i32) -> Result<Vec<PendingAgent>, StoreError> {
    let client = store.pool().get().await?;
    let rows = client
        .query(
            "SELECT tenant_id, agent_id FROM pulse_alert_scan($1)",
            &[&max_rows],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let tenant: String = row.get(0);
            Ok(PendingAgent {
                tenant: TenantId::new(tenant).map_err(invalid)?,
                agent_id: row.get(1),
            })
        })
        .collect()
}

/// An agent's row as last evaluated (or about to be).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentMark {
    pub agent_id: String,
    pub last_seen_at: DateTime<Utc>,
    pub online: bool,
}

/// The current `last_seen_at` and status of `agent_ids`. Read before their resources: whatever
/// commits in between is evaluated now and found again next time (harmlessly), never missed.
pub async fn agent_marks(tx: &TenantTx, agent_ids: &[&str]) -> Result<Vec<AgentMark>, StoreError> {
    let rows = tx
        .client()
        .query(
            "SELECT id, last_seen_at, status FROM agents WHERE id = ANY($1) ORDER BY id",
            &[&agent_ids],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| AgentMark {
            agent_id: row.get(0),
            last_seen_at: row.get(1),
            online: row.get::<_, &str>(2) == "online",
        })
        .collect())
}

/// Records `marks` as evaluated, in one statement.
pub async fn save_agent_marks(tx: &TenantTx, marks: &[AgentMark]) -> Result<u64, StoreError> {
    if marks.is_empty() {
        return Ok(0);
    }
    let ids: Vec<&str> = marks.iter().map(|m| m.agent_id.as_str()).collect();
    let seen: Vec<DateTime<Utc>> = marks.iter().map(|m| m.last_seen_at).collect();
    let status: Vec<&str> = marks
        .iter()
        .map(|m| if m.online { "online" } else { "offline" })
        .collect();
    let n = tx
        .client()
        .execute(
            "INSERT INTO alert_agent_marks (tenant_id, agent_id, last_seen_at, status, updated_at)
             SELECT $1, a, l, s, now()
             FROM unnest($2::text[], $3::timestamptz[], $4::text[]) AS u(a, l, s)
             ON CONFLICT (tenant_id, agent_id) DO UPDATE SET
                last_seen_at = EXCLUDED.last_seen_at, status = EXCLUDED.status, updated_at = now()",
            &[&tx.tenant().as_str(), &ids, &seen, &status],
        )
        .await?;
    Ok(n)
}

/// A resource as the rules need it: its stored state, its agent's status and the latest rule
/// metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct ScannedResource {
    pub id: String,
    pub resource_type: ResourceType,
    pub status: ResourceStatus,
    pub health: Health,
    pub restart_count: Option<u32>,
    pub details: serde_json::Value,
    pub observed_at: DateTime<Utc>,
    pub received_at: DateTime<Utc>,
    /// `None` when the agent row is missing.
    pub agent_online: Option<bool>,
    /// Latest value of each of [`RULE_METRICS`] at or before `observed_at`, when not stale.
    pub metrics: BTreeMap<String, f64>,
    /// The operator has the resource in an active maintenance window.
    pub in_maintenance: bool,
    /// When Pulse last completed a `guest.shutdown` or `guest.stop` of this guest (now, while
    /// one is executing: a guest read stopped before its receipt arrives was stopped by it).
    pub stopped_by_action_at: Option<DateTime<Utc>>,
}

/// The wire names of the capabilities that power a guest off (the action model owns them).
fn guest_stops() -> Vec<&'static str> {
    pulse_domain::action::Capability::ALL
        .into_iter()
        .filter(|c| c.powers_guest_off())
        .map(|c| c.as_str())
        .collect()
}

/// The resources of `agent_ids` with their agent's status and latest rule metrics, in two
/// statements whatever the number of agents and resources.
pub async fn scan_agents(
    tx: &TenantTx,
    agent_ids: &[&str],
) -> Result<Vec<ScannedResource>, StoreError> {
    if agent_ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows = tx
        .client()
        .query(
            "SELECT r.id, r.resource_type, r.status, r.health, r.restart_count, r.details,
                    r.observed_at, r.received_at, a.status,
                    coalesce(o.maintenance_ends_at > now()
                             AND coalesce(o.maintenance_starts_at, '-infinity') <= now(), false),
                    CASE WHEN r.resource_type IN ('vm', 'system-container') THEN
                        (SELECT max(CASE WHEN ac.state = 'executing' THEN now()
                                         ELSE ac.updated_at END)
                         FROM actions ac
                         WHERE ac.tenant_id = r.tenant_id AND ac.resource_id = r.id
                           AND ac.state IN ('executing', 'completed')
                           AND ac.capability = ANY($2))
                    END
             FROM resources r
             LEFT JOIN agents a ON a.tenant_id = r.tenant_id AND a.id = r.agent_id
             LEFT JOIN resource_operator_state o
                    ON o.tenant_id = r.tenant_id AND o.resource_id = r.id
             WHERE r.agent_id = ANY($1)
             ORDER BY r.id",
            &[&agent_ids, &guest_stops()],
        )
        .await?;
    let mut resources = rows
        .iter()
        .map(|row| {
            Ok(ScannedResource {
                id: row.get(0),
                resource_type: row.get::<_, String>(1).parse().map_err(invalid)?,
                status: row.get::<_, String>(2).parse().map_err(invalid)?,
                health: row.get::<_, String>(3).parse().map_err(invalid)?,
                restart_count: row
                    .get::<_, Option<i32>>(4)
                    .and_then(|n| u32::try_from(n).ok()),
                details: row.get(5),
                observed_at: row.get(6),
                received_at: row.get(7),
                agent_online: row.get::<_, Option<String>>(8).map(|s| s == "online"),
                metrics: BTreeMap::new(),
                in_maintenance: row.get(9),
                stopped_by_action_at: row.get(10),
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    let found: Vec<&str> = resources.iter().map(|r| r.id.as_str()).collect();
    let observed: Vec<DateTime<Utc>> = resources.iter().map(|r| r.observed_at).collect();
    // One index probe per (resource, metric): the newest sample at or before the observation.
    let samples = tx
        .client()
        .query(
            "SELECT r.id, m.metric, s.value, s.at
             FROM unnest($1::text[], $2::timestamptz[]) AS r(id, observed_at)
             CROSS JOIN unnest($3::text[]) AS m(metric)
             CROSS JOIN LATERAL (
                SELECT value, at FROM metric_samples
                WHERE resource_id = r.id AND metric = m.metric AND at <= r.observed_at
                ORDER BY at DESC LIMIT 1
             ) s",
            &[&found, &observed, &RULE_METRICS.as_slice()],
        )
        .await?;
    let mut by_id: HashMap<&str, usize> = HashMap::new();
    for (i, r) in resources.iter().enumerate() {
        by_id.insert(r.id.as_str(), i);
    }
    let mut readings: Vec<(usize, String, f64, DateTime<Utc>)> = Vec::new();
    for row in &samples {
        let id: &str = row.get(0);
        if let Some(&i) = by_id.get(id) {
            readings.push((i, row.get(1), row.get(2), row.get(3)));
        }
    }
    for (i, metric, value, at) in readings {
        let resource = &mut resources[i];
        if resource.observed_at - at <= Duration::seconds(METRIC_STALE_AFTER_SECS) {
            resource.metrics.insert(metric, value);
        }
    }
    Ok(resources)
}

/// Maps a stored resource to what the alert rules observe. Missing or unknown readings stay
/// `None` (no data never fires and never clears):
///
/// - status `running`/`exited`/`stopped` map to the run states of the same name; `stopped` means
///   the stop was asked for, so a non-zero exit code is expected; `unknown` is no reading.
/// - health `healthy`/`unhealthy` map as is. `unknown` is no health check, except for a service
///   whose check has results but none since it last started (`starting`), so a restart does not
///   read as "running without a check" and clear an unhealthy alert early.
/// - the exit code comes from `details.last_exit_code` (supervised services) or
///   `details.exit_code` (containers).
/// - `memory_percent` is memory usage; filesystem usage is the larger of `used_percent` and
///   `inodes_percent` (a filesystem out of inodes is as full as one out of space).
/// - the agent's online status feeds only the host resource (the `agent_offline` rule).
pub fn observation(resource: &ScannedResource) -> ResourceObservation {
    let resource_type = match resource.resource_type {
        ResourceType::Host => ObservedResourceType::Host,
        ResourceType::AppContainer => ObservedResourceType::AppContainer,
        ResourceType::Service => ObservedResourceType::Service,
        ResourceType::Storage => ObservedResourceType::Storage,
        ResourceType::Node => ObservedResourceType::Node,
        ResourceType::Vm => ObservedResourceType::Vm,
        ResourceType::SystemContainer => ObservedResourceType::SystemContainer,
        ResourceType::PhysicalDisk => ObservedResourceType::PhysicalDisk,
    };
    let mut obs = ResourceObservation::new(&resource.id, resource_type, resource.observed_at);
    obs.run_state = match resource.status {
        ResourceStatus::Running => Some(RunState::Running),
        ResourceStatus::Exited => Some(RunState::Exited),
        ResourceStatus::Stopped => Some(RunState::Stopped),
        ResourceStatus::Unknown => None,
    };
    obs.stop_requested = resource.status == ResourceStatus::Stopped;
    obs.health = match resource.health {
        Health::Healthy => Some(HealthState::Healthy),
        Health::Unhealthy => Some(HealthState::Unhealthy),
        Health::Unknown => {
            let has_check_results = resource.details["health_log"]
                .as_array()
                .is_some_and(|log| !log.is_empty());
            (resource.resource_type == ResourceType::Service
                && resource.status == ResourceStatus::Running
                && has_check_results)
                .then_some(HealthState::Starting)
        }
    };
    obs.exit_code = ["last_exit_code", "exit_code"]
        .iter()
        .find_map(|key| resource.details[*key].as_i64());
    obs.restart_count = resource.restart_count.map(u64::from);
    obs.mem_used_pct = resource.metrics.get(MEMORY_PERCENT).copied();
    obs.fs_used_pct = [USED_PERCENT, INODES_PERCENT]
        .iter()
        .filter_map(|m| resource.metrics.get(*m).copied())
        .filter(|v| v.is_finite())
        .reduce(f64::max);
    if resource.resource_type == ResourceType::Host {
        obs.agent_online = resource.agent_online;
    }
    obs.in_maintenance = resource.in_maintenance;
    obs.stopped_by_action_at = resource.stopped_by_action_at;
    platform_readings(&mut obs, resource);
    obs
}

/// The Proxmox readings the connector puts in a resource's details (`pulse_proxmox::inventory`):
/// a guest's template flag, lock and latest backups, a cluster's quorum, a node's membership, a
/// ZFS pool's health, a disk's SMART result and wearout; and of a Proxmox Backup Server
/// datastore, its failed jobs and the groups that failed verification. Resources of other
/// platforms have none.
fn platform_readings(obs: &mut ResourceObservation, resource: &ScannedResource) {
    let details = &resource.details;
    if details["platform"] == "proxmox-backup" {
        backup_server_readings(obs, resource);
        return;
    }
    if details["platform"] != "proxmox-ve" {
        return;
    }
    let text = |key: &str| {
        details[key]
            .as_str()
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let flag = |key: &str| match &details[key] {
        serde_json::Value::Bool(b) => Some(*b),
        serde_json::Value::Number(n) => n.as_i64().map(|n| n != 0),
        _ => None,
    };
    match resource.resource_type {
        ResourceType::Vm | ResourceType::SystemContainer => {
            obs.template = flag("template").unwrap_or(false);
            obs.lock = text("lock");
            obs.last_backup_ok = details["last_backup"]["ok"].as_bool();
            obs.last_backup_ok_at = details["last_backup_ok_at"]
                .as_str()
                .and_then(|at| DateTime::parse_from_rfc3339(at).ok())
                .map(|at| at.with_timezone(&Utc));
            // A guest's stop is not known to be asked for: Proxmox does not say who stopped it.
            obs.stop_requested = false;
        }
        ResourceType::Host => obs.quorate = flag("quorate"),
        ResourceType::Node => obs.node_online = flag("online"),
        ResourceType::Storage if details["kind"] == "zfs-pool" => {
            obs.pool_health = text("zfs_health");
        }
        ResourceType::Storage if details["kind"] == "ceph" => {
            obs.ceph_health = text("ceph_health");
        }
        ResourceType::PhysicalDisk => {
            obs.smart_failed =
                text("smart_health").and_then(|h| match h.to_ascii_uppercase().as_str() {
                    "PASSED" | "OK" => Some(false),
                    "FAILED" => Some(true),
                    _ => None,
                });
            obs.wearout_remaining_pct = resource.metrics.get(WEAROUT_REMAINING).copied();
        }
        _ => {}
    }
}

/// A Proxmox Backup Server datastore's `failed_jobs` and `verify_failed_groups`: an array reads
/// as the list of its strings (other entries skipped), an absent key or anything else as no
/// reading (the connector could not read them).
fn backup_server_readings(obs: &mut ResourceObservation, resource: &ScannedResource) {
    let details = &resource.details;
    if resource.resource_type != ResourceType::Storage || details["kind"] != "pbs-datastore" {
        return;
    }
    let strings = |key: &str| {
        details[key].as_array().map(|items| {
            items
                .iter()
                .filter_map(serde_json::Value::as_str)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
    };
    obs.failed_jobs = strings("failed_jobs");
    obs.verify_failed_groups = strings("verify_failed_groups");
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    fn resource(kind: ResourceType, status: ResourceStatus, health: Health) -> ScannedResource {
        ScannedResource {
            id: format!("{kind}:h1:x"),
            resource_type: kind,
            status,
            health,
            restart_count: None,
            details: json!({}),
            observed_at: Utc::now(),
            received_at: Utc::now(),
            agent_online: Some(true),
            metrics: BTreeMap::new(),
            in_maintenance: false,
            stopped_by_action_at: None,
        }
    }

    #[test]
    fn proxmox_details_become_the_platform_readings() {
        let pve = |kind, details: serde_json::Value| {
            let mut r = resource(kind, ResourceStatus::Stopped, Health::Unknown);
            r.details = details;
            r
        };
        let guest = observation(&pve(
            ResourceType::Vm,
            json!({"platform": "proxmox-ve", "template": 1, "lock": "backup"}),
        ));
        assert!(guest.template);
        assert_eq!(guest.lock.as_deref(), Some("backup"));
        let backed_up = observation(&pve(
            ResourceType::Vm,
            json!({"platform": "proxmox-ve", "last_backup": {"ok": false, "exit_status": "job errors"}}),
        ));
        assert_eq!(backed_up.last_backup_ok, Some(false));
        assert_eq!(
            backed_up.last_backup_ok_at, None,
            "no successful backup seen"
        );
        let backed_up_once = observation(&pve(
            ResourceType::SystemContainer,
            json!({"platform": "proxmox-ve", "last_backup": {"ok": false},
                   "last_backup_ok_at": "2024-03-01T02:10:00Z"}),
        ));
        assert_eq!(
            backed_up_once.last_backup_ok_at,
            Utc.with_ymd_and_hms(2024, 3, 1, 2, 10, 0).single()
        );
        let garbled = observation(&pve(
            ResourceType::Vm,
            json!({"platform": "proxmox-ve", "last_backup_ok_at": "yesterday"}),
        ));
        assert_eq!(garbled.last_backup_ok_at, None);
        assert!(
            !guest.stop_requested,
            "Proxmox does not say who stopped a guest"
        );
        let cluster = observation(&pve(
            ResourceType::Host,
            json!({"platform": "proxmox-ve", "quorate": false}),
        ));
        assert_eq!(cluster.quorate, Some(false));
        let node = observation(&pve(
            ResourceType::Node,
            json!({"platform": "proxmox-ve", "online": false}),
        ));
        assert_eq!(node.node_online, Some(false));
        let pool = observation(&pve(
            ResourceType::Storage,
            json!({"platform": "proxmox-ve", "kind": "zfs-pool", "zfs_health": "DEGRADED"}),
        ));
        assert_eq!(pool.pool_health.as_deref(), Some("DEGRADED"));
        let ceph = observation(&pve(
            ResourceType::Storage,
            json!({"platform": "proxmox-ve", "kind": "ceph", "ceph_health": "HEALTH_WARN"}),
        ));
        assert_eq!(ceph.ceph_health.as_deref(), Some("HEALTH_WARN"));
        assert_eq!(ceph.pool_health, None);
        let mut disk = pve(
            ResourceType::PhysicalDisk,
            json!({"platform": "proxmox-ve", "smart_health": "FAILED"}),
        );
        disk.metrics.insert(WEAROUT_REMAINING.to_owned(), 7.0);
        let disk = observation(&disk);
        assert_eq!(disk.smart_failed, Some(true));
        assert_eq!(disk.wearout_remaining_pct, Some(7.0));
        // A host agent's storage with the same words is not read as Proxmox's.
        let host_fs = observation(&pve(
            ResourceType::Storage,
            json!({"kind": "zfs-pool", "zfs_health": "DEGRADED"}),
        ));
        assert_eq!(host_fs.pool_health, None);
    }

    #[test]
    fn backup_server_details_become_the_datastore_readings() {
        let storage = |details: serde_json::Value| {
            let mut r = resource(
                ResourceType::Storage,
                ResourceStatus::Running,
                Health::Healthy,
            );
            r.details = details;
            r
        };
        let store = observation(&storage(json!({
            "platform": "proxmox-backup", "kind": "pbs-datastore",
            "failed_jobs": [
                "verify job v-3f2a (datastore store1): TASK ERROR: verification failed on 2 snapshots",
                42, null, "prune job p-1 (datastore store1): TASK ERROR: locked",
            ],
            "verify_failed_groups": ["vm/100", "ns1:ct/105"],
        })));
        assert_eq!(
            store.failed_jobs,
            Some(vec![
                "verify job v-3f2a (datastore store1): TASK ERROR: verification failed on 2 \
                 snapshots"
                    .to_owned(),
                "prune job p-1 (datastore store1): TASK ERROR: locked".to_owned(),
            ]),
            "entries that are not strings are skipped"
        );
        assert_eq!(
            store.verify_failed_groups,
            Some(vec!["vm/100".to_owned(), "ns1:ct/105".to_owned()])
        );
        let all_well = observation(&storage(json!({
            "platform": "proxmox-backup", "kind": "pbs-datastore",
            "failed_jobs": [], "verify_failed_groups": [],
        })));
        assert_eq!(all_well.failed_jobs, Some(vec![]));
        assert_eq!(all_well.verify_failed_groups, Some(vec![]));
        let not_read = observation(&storage(json!({
            "platform": "proxmox-backup", "kind": "pbs-datastore",
            "verify_failed_groups": "vm/100",
        })));
        assert_eq!(not_read.failed_jobs, None, "absent: the jobs were not read");
        assert_eq!(
            not_read.verify_failed_groups, None,
            "not an array: no reading"
        );
        // Only a PBS datastore carries them: not another platform's storage, not another kind,
        // not another resource type.
        let readings = json!({"failed_jobs": ["gc"], "verify_failed_groups": ["vm/100"]});
        let with = |extra: serde_json::Value| {
            let mut details = readings.clone();
            if let (Some(details), Some(extra)) = (details.as_object_mut(), extra.as_object()) {
                details.extend(extra.clone());
            }
            details
        };
        for details in [
            with(json!({"platform": "proxmox-ve", "kind": "pbs-datastore"})),
            with(json!({"platform": "proxmox-ve", "kind": "zfs-pool", "zfs_health": "ONLINE"})),
            with(json!({"kind": "pbs-datastore"})),
            with(json!({"platform": "proxmox-backup", "kind": "dir"})),
        ] {
            let obs = observation(&storage(details.clone()));
            assert_eq!(
                (obs.failed_jobs, obs.verify_failed_groups),
                (None, None),
                "{details}"
            );
        }
        let mut node = storage(with(
            json!({"platform": "proxmox-backup", "kind": "pbs-datastore"}),
        ));
        node.resource_type = ResourceType::Node;
        let node = observation(&node);
        assert_eq!((node.failed_jobs, node.verify_failed_groups), (None, None));
        // A Proxmox Backup Server resource is not read with Proxmox VE's words.
        let store = observation(&storage(with(json!({
            "platform": "proxmox-backup", "kind": "zfs-pool", "zfs_health": "DEGRADED",
        }))));
        assert_eq!(store.pool_health, None);
    }

    #[test]
    fn status_and_health_map_to_run_state_and_health() {
        let cases = [
            (
                ResourceStatus::Running,
                Health::Healthy,
                Some(RunState::Running),
                Some(HealthState::Healthy),
                false,
            ),
            (
                ResourceStatus::Running,
                Health::Unhealthy,
                Some(RunState::Running),
                Some(HealthState::Unhealthy),
                false,
            ),
            (
                ResourceStatus::Exited,
                Health::Unknown,
                Some(RunState::Exited),
                None,
                false,
            ),
            (
                ResourceStatus::Stopped,
                Health::Unknown,
                Some(RunState::Stopped),
                None,
                true,
            ),
            (ResourceStatus::Unknown, Health::Unknown, None, None, false),
        ];
        for (status, health, run_state, health_state, stop_requested) in cases {
            let obs = observation(&resource(ResourceType::Service, status, health));
            assert_eq!(obs.run_state, run_state, "{status:?}");
            assert_eq!(obs.health, health_state, "{health:?}");
            assert_eq!(obs.stop_requested, stop_requested, "{status:?}");
            assert_eq!(obs.resource_type, ObservedResourceType::Service);
        }
    }

    #[test]
    fn a_restarted_service_with_a_check_is_starting_not_unchecked() {
        let mut r = resource(
            ResourceType::Service,
            ResourceStatus::Running,
            Health::Unknown,
        );
        assert_eq!(observation(&r).health, None);
        r.details = json!({"health_log": [{"healthy": false}]});
        assert_eq!(observation(&r).health, Some(HealthState::Starting));
        let mut storage = resource(
            ResourceType::Storage,
            ResourceStatus::Running,
            Health::Unknown,
        );
        storage.details = json!({"health_log": [{"healthy": false}]});
        assert_eq!(observation(&storage).health, None);
    }

    #[test]
    fn exit_code_and_restart_count_come_from_the_report() {
        let mut r = resource(
            ResourceType::Service,
            ResourceStatus::Exited,
            Health::Unknown,
        );
        r.details = json!({"last_exit_code": 3, "pid": null});
        r.restart_count = Some(4);
        let obs = observation(&r);
        assert_eq!((obs.exit_code, obs.restart_count), (Some(3), Some(4)));
        let mut c = resource(
            ResourceType::AppContainer,
            ResourceStatus::Exited,
            Health::Unknown,
        );
        c.details = json!({"exit_code": 137});
        assert_eq!(observation(&c).exit_code, Some(137));
        c.details = json!({"last_exit_code": null});
        assert_eq!(observation(&c).exit_code, None);
    }

    #[test]
    fn metrics_feed_memory_and_filesystem_usage() {
        let mut host = resource(ResourceType::Host, ResourceStatus::Running, Health::Healthy);
        host.metrics.insert(MEMORY_PERCENT.to_owned(), 91.5);
        let obs = observation(&host);
        assert_eq!((obs.mem_used_pct, obs.fs_used_pct), (Some(91.5), None));

        let mut fs = resource(
            ResourceType::Storage,
            ResourceStatus::Running,
            Health::Healthy,
        );
        fs.metrics.insert(USED_PERCENT.to_owned(), 40.0);
        fs.metrics.insert(INODES_PERCENT.to_owned(), 96.0);
        let obs = observation(&fs);
        assert_eq!((obs.fs_used_pct, obs.mem_used_pct), (Some(96.0), None));
        fs.metrics.remove(INODES_PERCENT);
        assert_eq!(observation(&fs).fs_used_pct, Some(40.0));
    }

    #[test]
    fn agent_status_feeds_only_the_host() {
        let mut host = resource(ResourceType::Host, ResourceStatus::Unknown, Health::Unknown);
        host.agent_online = Some(false);
        assert_eq!(observation(&host).agent_online, Some(false));
        let mut service = resource(
            ResourceType::Service,
            ResourceStatus::Unknown,
            Health::Unknown,
        );
        service.agent_online = Some(false);
        assert_eq!(observation(&service).agent_online, None);
    }

    #[test]
    fn state_filter_parses_the_documented_values_only() {
        assert_eq!("firing".parse(), Ok(StateFilter::Firing));
        assert_eq!("cleared".parse(), Ok(StateFilter::Cleared));
        assert_eq!("all".parse(), Ok(StateFilter::All));
        assert!("FIRING".parse::<StateFilter>().is_err());
        assert!("".parse::<StateFilter>().is_err());
    }
}
