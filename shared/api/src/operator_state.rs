//! A resource's operator state: `GET`, `PUT` and `DELETE /api/resources/{id}/operator-state`.

use chrono::{DateTime, Utc};
use pulse_domain::finding::FindingId;
use pulse_domain::finding::operator_state::{
    self, Criticality, MAX_OPERATOR_NOTE_CHARS, MaintenanceWindow,
};
use serde::{Deserialize, Serialize};

use crate::constraints::Note;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WindowBody {
    #[serde(default)]
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: DateTime<Utc>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OperatorStateBody {
    #[serde(default)]
    pub maintenance_window: Option<WindowBody>,
    pub intentionally_offline: bool,
    pub never_auto_remediate: bool,
    #[serde(default)]
    pub criticality: Option<Criticality>,
    /// Free text, tab and line feed allowed but no other control character.
    #[serde(default)]
    #[schemars(with = "Option<Note<MAX_OPERATOR_NOTE_CHARS>>")]
    pub note: Option<String>,
}

/// The state as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OperatorStateView {
    /// The canonical id the state is kept on.
    pub resource_id: String,
    pub maintenance_window: Option<MaintenanceWindow>,
    /// Whether the maintenance window covers now.
    pub maintenance_active: bool,
    pub intentionally_offline: bool,
    pub never_auto_remediate: bool,
    pub criticality: Option<Criticality>,
    pub note: String,
    /// What silences the resource's findings now; null when nothing does.
    pub suppression_cause: Option<SuppressionCause>,
    pub set_by: Option<String>,
    pub set_at: Option<DateTime<Utc>>,
    /// Open findings this change auto-dismissed (PUT only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dismissed_finding_ids: Option<Vec<FindingId>>,
}

/// What silences a resource's findings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SuppressionCause {
    MaintenanceWindow,
    IntentionallyOffline,
}

impl From<operator_state::SuppressionCause> for SuppressionCause {
    fn from(cause: operator_state::SuppressionCause) -> Self {
        match cause {
            operator_state::SuppressionCause::MaintenanceWindow { .. } => Self::MaintenanceWindow,
            operator_state::SuppressionCause::IntentionallyOffline => Self::IntentionallyOffline,
        }
    }
}
