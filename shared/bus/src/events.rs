//! Domain events published on `pulse.<tenant>.events.<domain>.<event>`. The event types live in
//! `pulse-domain`; this module gives them their wire identity.

use pulse_domain::ai_settings::SettingsChanged;
use pulse_domain::alert_rules::AlertTransition;
use pulse_domain::resource::ResourceChanged;

use crate::Message;

/// `events.resource.changed`: domain and event tokens of the subject.
pub const RESOURCE_CHANGED: (&str, &str) = ("resource", "changed");

impl Message for ResourceChanged {
    const TYPE: &'static str = "pulse.resource.changed";
}

/// `events.alert.fired`: an alert started firing.
pub const ALERT_FIRED: (&str, &str) = ("alert", "fired");
/// `events.alert.level_changed`: a firing alert changed level.
pub const ALERT_LEVEL_CHANGED: (&str, &str) = ("alert", "level_changed");
/// `events.alert.cleared`: a firing alert cleared.
pub const ALERT_CLEARED: (&str, &str) = ("alert", "cleared");

/// The event a lifecycle transition is published as.
pub fn alert_event(transition: &AlertTransition) -> (&'static str, &'static str) {
    match transition {
        AlertTransition::Fired { .. } => ALERT_FIRED,
        AlertTransition::LevelChanged { .. } => ALERT_LEVEL_CHANGED,
        AlertTransition::Cleared { .. } => ALERT_CLEARED,
    }
}

impl Message for AlertTransition {
    const TYPE: &'static str = "pulse.alert.transition";
}

/// `events.settings.changed`: a tenant's AI settings were saved.
pub const SETTINGS_CHANGED: (&str, &str) = ("settings", "changed");

impl Message for SettingsChanged {
    const TYPE: &'static str = "pulse.settings.changed";
}

/// `pulse.<tenant>.patrol.run.request`: ask the patrol-scheduler to accept a manual run.
pub const PATROL_RUN_REQUEST: &str = "patrol.run.request";
/// The queue group the patrol-scheduler replicas share run requests in.
pub const PATROL_RUN_QUEUE_GROUP: &str = "patrol-scheduler";
/// `events.run.accepted`: a Patrol run was accepted and recorded `queued`.
pub const RUN_ACCEPTED: (&str, &str) = ("run", "accepted");
/// `jobs.watch`: the job a runner takes to execute an accepted Patrol run.
pub const WATCH_JOB: &str = "watch";

/// A manual run request: the parsed body (`None` for a full run) and who asked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PatrolRunRequest {
    pub scope: Option<pulse_domain::patrol::scope::ScopedRequest>,
    /// The requesting actor (token name), recorded on the run.
    pub requested_by: String,
}

impl Message for PatrolRunRequest {
    const TYPE: &'static str = "pulse.patrol.run_request";
}

impl crate::Request for PatrolRunRequest {
    type Reply = PatrolRunAccepted;
}

/// The reply to [`PatrolRunRequest`], and the payload of `events.run.accepted`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PatrolRunAccepted {
    pub run_id: pulse_domain::patrol::run::RunId,
    pub trigger_reason: pulse_domain::patrol::run::TriggerReason,
    #[serde(rename = "type")]
    pub run_type: pulse_domain::patrol::run::RunType,
    pub queued_at: chrono::DateTime<chrono::Utc>,
    pub scope_resource_ids: Vec<String>,
    pub effective_scope_resource_ids: Vec<String>,
}

impl Message for PatrolRunAccepted {
    const TYPE: &'static str = "pulse.patrol.run_accepted";
}

/// The `jobs.watch` message: which accepted run to execute.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WatchJob {
    pub run_id: pulse_domain::patrol::run::RunId,
    #[serde(rename = "type")]
    pub run_type: pulse_domain::patrol::run::RunType,
    pub trigger_reason: pulse_domain::patrol::run::TriggerReason,
}

impl Message for WatchJob {
    const TYPE: &'static str = "pulse.patrol.watch";
}
