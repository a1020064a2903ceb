//! Governed actions: `POST /api/actions/plan`, `GET /api/actions`, `GET /api/actions/pending`,
//! `GET /api/actions/{id}`, `POST /api/actions/{id}/decision`, `POST /api/actions/{id}/execute`
//! and `GET /api/actions/{id}/audit`.

use chrono::{DateTime, Utc};
use pulse_domain::action::plan::MAX_ID_CHARS;
use pulse_domain::action::{
    ActionPlan, ActionState, ApprovalFloor, MAX_REASON_CHARS, Severity, Verification,
};
use pulse_domain::finding::FindingId;
use pulse_domain::listing::MAX_ACTIONS;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::constraints::{IntegerIn, NotBlank, Printable, refuse};

uuid_id! {
    /// An action's id (`/api/actions/{id}/...`).
    ActionId
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanBody {
    #[schemars(with = "PlanId")]
    pub resource_id: String,
    #[schemars(with = "pulse_domain::action::Capability")]
    pub capability: String,
    /// `{"target": <the service or container>}`: see list_resource_capabilities.
    #[schemars(with = "PlanParams")]
    pub params: Value,
    #[schemars(with = "Reason")]
    pub reason: String,
    pub severity: Severity,
    #[serde(default)]
    pub approval_floor: Option<ApprovalFloor>,
    /// The finding the action is meant to fix; its fix outcome is written back to it.
    #[serde(default)]
    pub finding_id: Option<FindingId>,
}

/// A human's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecisionOutcome {
    Approved,
    Rejected,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionBody {
    pub outcome: DecisionOutcome,
    #[schemars(with = "Reason")]
    pub reason: String,
}

/// A plan's or a decision's reason.
pub type Reason = NotBlank<MAX_REASON_CHARS>;

/// A resource id or target of a plan.
type PlanId = PlanIdText;

/// Up to [`MAX_ID_CHARS`] characters, at least one.
pub struct PlanIdText;

impl schemars::JsonSchema for PlanIdText {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PlanId".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS})
    }
}

/// The params of a plan: the one `target` the command acts on (the capability catalogue's
/// closed params schema, whose `target` must be the resource's own).
pub struct PlanParams;

impl schemars::JsonSchema for PlanParams {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PlanParams".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "properties": {"target": generator.subschema_for::<Printable<1, MAX_ID_CHARS>>()},
            "required": ["target"],
            "additionalProperties": false,
        })
    }
}

#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ListQuery {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "list_limit"
    )]
    #[schemars(with = "Option<ListLimit>")]
    pub limit: Option<i64>,
}

/// A number (anything else is a malformed query), then one in range.
fn list_limit<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    let limit = i64::deserialize(deserializer)?;
    if ListLimit::contains(limit) {
        Ok(Some(limit))
    } else {
        Err(refuse(&ListLimit::requirement()))
    }
}

/// How many actions a list answers.
pub type ListLimit = IntegerIn<1, MAX_ACTIONS>;

/// An action as the API shows it.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ActionView {
    #[serde(flatten)]
    pub plan: ActionPlan,
    pub state: ActionState,
    pub version: i64,
    pub decided_by: Option<String>,
    /// The username behind `decided_by`.
    pub decided_by_name: Option<String>,
    pub decision_reason: Option<String>,
    pub human_approved: bool,
    pub lease_id: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub result: Option<Value>,
    pub updated_at: DateTime<Utc>,
    /// The finding the action is meant to fix.
    pub finding_id: Option<FindingId>,
    /// The verifier's judgement of a completed action: `verified`, `still_failing` or
    /// `inconclusive`; `null` until judged (and for actions that did not complete).
    pub verification: Option<Verification>,
    /// Why the verifier judged as it did (or why no judgement could be had).
    pub verification_reason: Option<String>,
    pub verified_at: Option<DateTime<Utc>>,
}

/// A stored audit row.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct AuditRecord {
    pub seq: i64,
    pub occurred_at: DateTime<Utc>,
    pub actor: String,
    pub kind: String,
    pub subject: String,
    pub payload: Value,
    // Hex, as the chain hashes them.
    pub prev_hash: String,
    pub row_hash: String,
}

// `PUT /api/resources/{id}/remediation-lock`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LockBody {
    pub never_auto_remediate: bool,
}

/// The lock as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct LockView {
    /// The canonical id the lock is kept on.
    pub resource_id: String,
    pub never_auto_remediate: bool,
}
