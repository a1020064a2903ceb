//! Alert-triggered scoped Patrol runs (`AlertTriggersInvestigation`).
//!
//! The alert floor publishes every committed transition as `events.alert.*` through the outbox.
//! This module reads them from a durable JetStream consumer on the EVENTS stream rather than
//! from a hook inside the floor: a transition committed just before a crash or restart is still
//! delivered afterwards, replicas share the work, and a failed accept (database down) is retried
//! with backoff instead of being lost.
//!
//! For a `fired` transition, or a level change that lifts the alert past the policy's floor, the
//! tenant's policy is applied with [`pulse_domain::patrol::trigger`]; an admitted alert becomes
//! one scoped run through the one accept path ([`crate::accept`]), whose readiness gate refuses
//! it before anything is written when the Patrol route is known not to work: trigger
//! `alert_fired`, the alert's resource as the scope, the alert identifier, type and breach facts
//! as context. The alert is never written as a finding.
//!
//! **One firing, at most one run.** A firing is one row of `alerts` (its id survives level
//! changes). The run records `alert:<alert id>` as the actor that requested it; under a
//! transaction lock on that firing, an existing run with that actor means the event was
//! delivered again (consumer redelivery after a crash between commit and ack, or an escalation
//! of an alert that already started a run), and nothing new is written.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use pulse_bus::async_nats::HeaderMap;
use pulse_bus::async_nats::jetstream::{self, consumer::PullConsumer};
use pulse_bus::redelivery::decode_for_subject;
use pulse_bus::{
    Bus, BusError, Delivery, ErrorCode, ErrorReply, EventConsumerConfig, JobError, Message,
    Redelivery, SerialPull, Subjects, ensure_event_consumer,
};
use pulse_domain::TenantId;
use pulse_domain::ai_settings::{AlertTriggers, MinSeverity};
use pulse_domain::alert_rules::{AlertLevel, AlertTransition};
use pulse_domain::patrol::run::RunId;
use pulse_domain::patrol::status::Blocked;
use pulse_domain::patrol::trigger::{
    AlertContext, AlertTriggerPolicy, Decision, RejectReason, WireAlertLevel, admits,
    admits_transition, scoped_run_for,
};
use pulse_store::settings::{self, ConfigLayer, SettingsStoreError};
use pulse_store::{StoreError, alerts, patrol_runs};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use crate::accept::{AcceptError, RunAcceptor, Submission};

/// The durable consumer's name on the EVENTS stream.
pub const CONSUMER: &str = "patrol-alert-triggers";
/// The `kind` of alert events dead-lettered after their last delivery.
pub const DLQ_KIND: &str = "alert_trigger";
/// A run for a firing is looked for from this long before the firing (clock skew between
/// replicas), which keeps the look-up on the recent end of the tenant's run index.
const SKEW_MARGIN: chrono::Duration = chrono::Duration::minutes(10);
/// Events pulled at once.
const BATCH: usize = 32;

/// How the consumer runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertTriggerSettings {
    /// How long a delivery may stay unacked before it is redelivered.
    pub ack_wait: Duration,
    /// Deliveries of one event before it is dead-lettered.
    pub max_deliver: i64,
    /// Nak delay after the first failed delivery; doubles with each delivery.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// How long one pull waits for events.
    pub pull_expires: Duration,
}

impl Default for AlertTriggerSettings {
    fn default() -> Self {
        Self {
            ack_wait: Duration::from_secs(30),
            max_deliver: 8,
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            pull_expires: Duration::from_secs(2),
        }
    }
}

impl AlertTriggerSettings {
    /// The redeliveries of one event, then its dead letter.
    pub fn redelivery(&self) -> Redelivery {
        Redelivery {
            dlq_kind: DLQ_KIND.to_owned(),
            max_deliver: self.max_deliver,
            backoff_base: self.backoff_base,
            backoff_max: self.backoff_max,
        }
    }
}

/// What became of one alert event.
#[derive(Debug, Clone, PartialEq)]
pub enum TriggerOutcome {
    /// One scoped run was accepted for the firing.
    Started { run_id: RunId, alert_id: Uuid },
    /// The tenant's policy does not start a run for it (or it is a clear / level drop).
    Rejected(RejectReason),
    /// The firing already started a run.
    Duplicate { run_id: RunId, alert_id: Uuid },
    /// The Patrol route is known not to work; nothing was written.
    NotReady(Blocked),
    /// The accept path refused the run (its resource is gone, the tenant's queue is full...).
    Refused { code: ErrorCode, message: String },
    /// No stored alert matches the event (its tenant's data is gone).
    UnknownAlert,
}

impl TriggerOutcome {
    /// The `outcome` label of `pulse_patrol_alert_triggers_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Started { .. } => "started",
            Self::Rejected(RejectReason::Disabled) => "disabled",
            Self::Rejected(RejectReason::BelowMinSeverity) => "below_min_severity",
            Self::Rejected(RejectReason::TypeNotAllowed) => "type_not_allowed",
            Self::Rejected(RejectReason::NotFiring) => "not_firing",
            Self::Duplicate { .. } => "duplicate",
            Self::NotReady(_) => "not_ready",
            Self::Refused { .. } => "refused",
            Self::UnknownAlert => "unknown_alert",
        }
    }
}

/// A failure worth another delivery.
#[derive(Debug, thiserror::Error)]
pub enum TriggerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the run could not be accepted: {0}")]
    Accept(String),
}

fn settings_error(error: SettingsStoreError) -> StoreError {
    match error {
        SettingsStoreError::Store(error) => error,
        other => StoreError::Invalid(other.to_string()),
    }
}

/// The payload of `events.alert.*` read leniently: levels and types this build does not know
/// still decode (an unknown level counts as critical).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct WireTransition {
    transition: String,
    alert: WireAlert,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct WireAlert {
    key: String,
    #[serde(rename = "type")]
    alert_type: String,
    level: WireAlertLevel,
    value: f64,
    threshold: f64,
    resource_id: String,
    message: String,
    fired_at: DateTime<Utc>,
}

impl Message for WireTransition {
    const TYPE: &'static str = <AlertTransition as Message>::TYPE;
    const SCHEMA: u32 = <AlertTransition as Message>::SCHEMA;
}

/// One alert transition as received: the typed transition when this build knows its every
/// field, and the breach payload a run is framed on.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedAlert {
    transition: Option<AlertTransition>,
    /// `fired`, `level_changed` or `cleared` (or a name a later build added).
    kind: String,
    pub context: AlertContext,
    pub fired_at: DateTime<Utc>,
}

impl ReceivedAlert {
    pub fn from_transition(transition: AlertTransition) -> Self {
        let alert = transition.alert();
        let kind = pulse_bus::events::alert_event(&transition).1.to_owned();
        Self {
            context: AlertContext::from(alert),
            fired_at: alert.fired_at,
            kind,
            transition: Some(transition),
        }
    }

    /// Decodes an `events.alert.*` message: its tenant (header, checked against the subject's
    /// tenant token) and the alert.
    pub fn decode(
        subjects: &Subjects,
        subject: &str,
        headers: Option<&HeaderMap>,
        payload: &[u8],
    ) -> Result<(TenantId, Self), String> {
        let (tenant, decoded) = decode_for_subject::<WireTransition>(
            subjects.tenant_token(subject),
            headers,
            payload,
            "alert event",
        )?;
        let wire = decoded.payload;
        let transition = serde_json::from_slice::<AlertTransition>(payload).ok();
        let received = Self {
            transition,
            kind: wire.transition,
            context: AlertContext {
                alert_identifier: wire.alert.key,
                alert_type: wire.alert.alert_type,
                level: wire.alert.level,
                value: wire.alert.value,
                threshold: wire.alert.threshold,
                resource_id: wire.alert.resource_id,
                message: wire.alert.message,
            },
            fired_at: wire.alert.fired_at,
        };
        Ok((tenant, received))
    }

    /// A clear (or a transition this build does not know) never starts a run, whatever the
    /// policy.
    fn can_start(&self) -> bool {
        match &self.transition {
            Some(AlertTransition::Cleared { .. }) => false,
            Some(_) => true,
            None => self.kind == "fired",
        }
    }

    /// The policy's answer: on the typed transition when it decoded, else (a level or type
    /// this build does not know) on the fired payload.
    pub fn decide(&self, policy: &AlertTriggerPolicy) -> Decision {
        match &self.transition {
            Some(transition) => admits_transition(policy, transition),
            None if self.kind == "fired" => admits(policy, &self.context),
            None => Decision::Reject {
                reason: RejectReason::NotFiring,
            },
        }
    }
}

/// The tenant's alert-trigger settings as the domain policy.
pub fn policy_of(triggers: &AlertTriggers) -> AlertTriggerPolicy {
    AlertTriggerPolicy {
        enabled: triggers.enabled,
        min_severity: match triggers.min_severity {
            MinSeverity::Warning => AlertLevel::Warning,
            MinSeverity::Critical => AlertLevel::Critical,
        },
        alert_types: (!triggers.alert_types.is_empty()).then(|| {
            triggers
                .alert_types
                .iter()
                .cloned()
                .collect::<BTreeSet<_>>()
        }),
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// [`TriggerOutcome::label`].
    pub outcome: String,
}

/// `pulse_patrol_alert_triggers_total{outcome}` (alert events handled, by what became of them)
/// and `pulse_patrol_alert_trigger_failures_total` (deliveries that failed and are retried or
/// dead-lettered).
#[derive(Clone, Default)]
pub struct AlertTriggerMetrics {
    pub outcomes: Family<OutcomeLabels, Counter>,
    pub failures: Counter,
}

impl AlertTriggerMetrics {
    pub fn register(metrics: &pulse_telemetry::Metrics) -> Self {
        let this = Self::default();
        let (outcomes, failures) = (this.outcomes.clone(), this.failures.clone());
        metrics.register(|registry| {
            registry.register(
                "patrol_alert_triggers",
                "Alert events handled by the alert trigger, by outcome",
                outcomes,
            );
            registry.register(
                "patrol_alert_trigger_failures",
                "Alert event deliveries that failed and will be retried or dead-lettered",
                failures,
            );
        });
        this
    }

    fn outcome(&self, outcome: &TriggerOutcome) {
        self.outcomes
            .get_or_create(&OutcomeLabels {
                outcome: outcome.label().to_owned(),
            })
            .inc();
    }
}

/// Starts scoped runs for the alerts the tenant's policy admits.
#[derive(Clone)]
pub struct AlertTrigger {
    acceptor: RunAcceptor,
    config: Arc<ConfigLayer>,
    settings: AlertTriggerSettings,
    metrics: AlertTriggerMetrics,
}

impl AlertTrigger {
    /// `acceptor`: the accept path, with its readiness gate. `config`: the `[ai]` config layer
    /// the tenant settings (and so the policy) resolve over.
    pub fn new(acceptor: RunAcceptor, config: ConfigLayer) -> Self {
        Self {
            acceptor,
            config: Arc::new(config),
            settings: AlertTriggerSettings::default(),
            metrics: AlertTriggerMetrics::default(),
        }
    }

    pub fn with_settings(mut self, settings: AlertTriggerSettings) -> Self {
        self.settings = settings;
        self
    }

    pub fn with_metrics(mut self, metrics: AlertTriggerMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Handles one alert of `tenant`: policy, dedupe, then the accept path (readiness gate,
    /// scope, record).
    pub async fn handle(
        &self,
        tenant: &TenantId,
        alert: &ReceivedAlert,
    ) -> Result<TriggerOutcome, TriggerError> {
        if !alert.can_start() {
            return Ok(TriggerOutcome::Rejected(RejectReason::NotFiring));
        }
        let tx = self.acceptor.store().tenant_tx(tenant).await?;
        let stored = settings::get(&tx, false).await.map_err(settings_error)?;
        // Settings that do not resolve leave the policy unknown; the accept path's readiness
        // gate refuses with that cause, which the status reports too.
        if let Ok(resolved) = self.config.resolve(&stored)
            && let Decision::Reject { reason } = alert.decide(&policy_of(&resolved.alert_triggers))
        {
            return Ok(TriggerOutcome::Rejected(reason));
        }
        let Some(alert_id) =
            alerts::firing_at(&tx, &alert.context.alert_identifier, alert.fired_at).await?
        else {
            return Ok(TriggerOutcome::UnknownAlert);
        };
        let requested_by = format!("alert:{alert_id}");
        alerts::lock_firing_trigger(&tx, &requested_by).await?;
        let since = alert.fired_at - SKEW_MARGIN;
        if let Some(run_id) = patrol_runs::alert_run_requested_by(&tx, &requested_by, since).await?
        {
            return Ok(TriggerOutcome::Duplicate { run_id, alert_id });
        }
        let framed = scoped_run_for(&alert.context);
        let submission = Submission {
            trigger: framed.trigger_reason,
            scope: Some(&framed.request),
            requested_by: Some(&requested_by),
        };
        match self.acceptor.accept(tx, submission).await {
            Ok(accepted) => Ok(TriggerOutcome::Started {
                run_id: accepted.run_id,
                alert_id,
            }),
            Err(AcceptError::NotReady(blocked)) => Ok(TriggerOutcome::NotReady(blocked)),
            Err(AcceptError::Unprocessable(message)) => Ok(TriggerOutcome::Refused {
                code: ErrorCode::UnprocessableScope,
                message,
            }),
            // A full queue drops the alert's run (the tenant's scoped work is already
            // backed up); a retry would only add to it.
            Err(
                refused @ (AcceptError::QueueFull { .. }
                | AcceptError::RunInProgress(_)
                | AcceptError::Disabled
                | AcceptError::Suspended { .. }
                | AcceptError::Quota(_)),
            ) => {
                let reply = ErrorReply::from(refused);
                Ok(TriggerOutcome::Refused {
                    code: reply.code,
                    message: reply.message,
                })
            }
            Err(error @ (AcceptError::Store(_) | AcceptError::Outbox(_))) => {
                Err(TriggerError::Accept(error.to_string()))
            }
        }
    }

    /// Ensures the durable consumer (before any event it must see is published: call it before
    /// the outbox relay starts) and consumes alert events until `shutdown`.
    pub async fn consume(
        self,
        bus: &Bus,
        shutdown: CancellationToken,
    ) -> Result<tokio::task::JoinHandle<()>, BusError> {
        let consumer = ensure_consumer(bus, &self.settings).await?;
        let bus = bus.clone();
        Ok(tokio::spawn(async move {
            self.run(&bus, consumer, shutdown).await
        }))
    }

    async fn run(&self, bus: &Bus, consumer: PullConsumer, shutdown: CancellationToken) {
        let mut events = SerialPull::new(consumer, CONSUMER, BATCH, self.settings.pull_expires);
        while let Some(message) = events.next(shutdown.cancelled()).await {
            self.process(bus, message).await;
        }
    }

    /// Handles one delivery: ack after the commit, Nak with backoff on failure, dead letter
    /// after the last delivery or at once when the event cannot be read.
    async fn process(&self, bus: &Bus, message: jetstream::Message) {
        let Some(delivery) = Delivery::new(bus.subjects(), message) else {
            return;
        };
        let redelivery = self.settings.redelivery();
        let message = delivery.message();
        let decoded = ReceivedAlert::decode(
            bus.subjects(),
            &delivery.subject,
            message.headers.as_ref(),
            &message.payload,
        );
        let (tenant, alert) = match decoded {
            Ok(decoded) => decoded,
            Err(reason) => {
                self.metrics.failures.inc();
                delivery.dead_letter(bus, &redelivery, &reason).await;
                return;
            }
        };
        let result = match self.handle(&tenant, &alert).await {
            Ok(outcome) => {
                self.metrics.outcome(&outcome);
                log_outcome(&tenant, &alert, &outcome);
                Ok(())
            }
            Err(error) => {
                self.metrics.failures.inc();
                Err(JobError::retry(error))
            }
        };
        let span = tracing::info_span!("alert_trigger", tenant = %tenant, key = %alert.context.alert_identifier);
        delivery
            .settle(bus, &redelivery, result)
            .instrument(span)
            .await;
    }
}

fn log_outcome(tenant: &TenantId, alert: &ReceivedAlert, outcome: &TriggerOutcome) {
    let key = alert.context.alert_identifier.as_str();
    match outcome {
        TriggerOutcome::Started { run_id, alert_id } => {
            tracing::info!(tenant = %tenant, key, %alert_id, run_id = %run_id, "alert started a scoped patrol run")
        }
        TriggerOutcome::Duplicate { run_id, alert_id } => {
            tracing::info!(tenant = %tenant, key, %alert_id, run_id = %run_id, "alert already started a run")
        }
        TriggerOutcome::NotReady(blocked) => {
            tracing::warn!(tenant = %tenant, key, cause = ?blocked.cause, reason = %blocked.reason, "alert-triggered run skipped: patrol is not ready")
        }
        TriggerOutcome::Refused { code, message } => {
            tracing::warn!(tenant = %tenant, key, code = %code, message = %message, "alert-triggered run refused")
        }
        TriggerOutcome::UnknownAlert => {
            tracing::warn!(tenant = %tenant, key, "alert event names no stored alert")
        }
        TriggerOutcome::Rejected(_) => {
            tracing::debug!(tenant = %tenant, key, outcome = outcome.label(), "alert does not trigger a run")
        }
    }
}

/// The durable consumer of `events.alert.*` of every tenant. A consumer created for the first
/// time starts at new events (old alerts are not investigated on a first deploy); afterwards
/// its position survives restarts.
pub async fn ensure_consumer(
    bus: &Bus,
    settings: &AlertTriggerSettings,
) -> Result<PullConsumer, BusError> {
    ensure_event_consumer(
        bus,
        &EventConsumerConfig {
            durable_name: CONSUMER.to_owned(),
            description: "patrol-scheduler alert-triggered runs".to_owned(),
            filter_subject: bus.subjects().event_any_tenant("alert", ">"),
            ack_wait: settings.ack_wait,
            max_deliver: settings.max_deliver,
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use pulse_domain::alert_rules::{Alert, AlertKey, AlertRule};

    fn alert(rule: AlertRule, level: AlertLevel) -> Alert {
        let at = Utc.with_ymd_and_hms(2026, 11, 1, 12, 0, 0).unwrap();
        Alert {
            key: AlertKey::new("service:h1:web", rule),
            rule,
            level,
            value: 4.0,
            threshold: 3.0,
            resource_id: "service:h1:web".to_owned(),
            message: "service:h1:web restarted 4 times".to_owned(),
            fired_at: at,
            updated_at: at,
        }
    }

    fn triggers(min: MinSeverity, types: &[&str]) -> AlertTriggers {
        AlertTriggers {
            enabled: true,
            min_severity: min,
            alert_types: types.iter().map(|t| (*t).to_owned()).collect(),
        }
    }

    #[test]
    fn settings_become_the_domain_policy() {
        let policy = policy_of(&triggers(MinSeverity::Critical, &[]));
        assert_eq!(policy, AlertTriggerPolicy::default());
        let policy = policy_of(&triggers(MinSeverity::Warning, &["restart_loop"]));
        assert_eq!(policy.min_severity, AlertLevel::Warning);
        assert_eq!(
            policy.alert_types,
            Some(BTreeSet::from(["restart_loop".to_owned()]))
        );
        let disabled = AlertTriggers {
            enabled: false,
            ..triggers(MinSeverity::Critical, &[])
        };
        assert!(!policy_of(&disabled).enabled);
    }

    #[test]
    fn clears_never_start_and_fired_alerts_follow_the_policy() {
        let policy = AlertTriggerPolicy::default();
        let cleared = ReceivedAlert::from_transition(AlertTransition::Cleared {
            alert: alert(AlertRule::RestartLoop, AlertLevel::Critical),
            cleared_at: Utc::now(),
        });
        assert!(!cleared.can_start());
        let fired = ReceivedAlert::from_transition(AlertTransition::Fired {
            alert: alert(AlertRule::RestartLoop, AlertLevel::Critical),
        });
        assert!(fired.can_start());
        assert_eq!(fired.decide(&policy), Decision::Admit);
        assert_eq!(
            fired.context.alert_identifier,
            "service:h1:web:restart_loop"
        );
        let warning = ReceivedAlert::from_transition(AlertTransition::Fired {
            alert: alert(AlertRule::Unhealthy, AlertLevel::Warning),
        });
        assert_eq!(
            warning.decide(&policy),
            Decision::Reject {
                reason: RejectReason::BelowMinSeverity
            }
        );
    }

    fn wire(tenant: &TenantId, body: &serde_json::Value) -> HeaderMap {
        let encoded = pulse_bus::encode(
            tenant,
            &serde_json::from_value::<WireTransition>(body.clone()).unwrap(),
            None,
        )
        .unwrap();
        encoded.headers
    }

    #[test]
    fn an_unknown_level_decodes_and_counts_as_critical() {
        let subjects = Subjects::new(None);
        let tenant = TenantId::default_tenant();
        let body = serde_json::json!({
            "transition": "fired",
            "alert": {
                "key": "host:h1:agent_offline", "type": "agent_offline", "level": "page",
                "value": 1.0, "threshold": 1.0, "resource_id": "host:h1",
                "message": "agent offline", "fired_at": "2026-11-01T12:00:00.123456789Z",
                "updated_at": "2026-11-01T12:00:00.123456789Z"
            }
        });
        let headers = wire(&tenant, &body);
        let subject = subjects.event(&tenant, "alert", "fired");
        let payload = serde_json::to_vec(&body).unwrap();
        let (from, received) =
            ReceivedAlert::decode(&subjects, &subject, Some(&headers), &payload).unwrap();
        assert_eq!(from, tenant);
        assert!(
            received.transition.is_none(),
            "the typed decode refuses the level"
        );
        assert_eq!(received.context.level.effective(), AlertLevel::Critical);
        assert_eq!(
            received.decide(&AlertTriggerPolicy::default()),
            Decision::Admit
        );
        // An unknown transition name never starts a run.
        let mut other = body.clone();
        other["transition"] = "acknowledged".into();
        let payload = serde_json::to_vec(&other).unwrap();
        let (_, received) =
            ReceivedAlert::decode(&subjects, &subject, Some(&headers), &payload).unwrap();
        assert!(!received.can_start());
        // The subject's tenant must be the header's.
        let elsewhere = subjects.event(&TenantId::new("acme").unwrap(), "alert", "fired");
        assert!(ReceivedAlert::decode(&subjects, &elsewhere, Some(&headers), &payload).is_err());
        assert!(ReceivedAlert::decode(&subjects, &subject, None, &payload).is_err());
    }
}
