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

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
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

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
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

/// The view's own fields: the plan is flattened into the same object and refuses fields it does
/// not know, so the view is read as these fields first and the rest as the plan.
#[derive(Deserialize)]
struct ActionViewFields {
    state: ActionState,
    version: i64,
    decided_by: Option<String>,
    decided_by_name: Option<String>,
    decision_reason: Option<String>,
    human_approved: bool,
    lease_id: Option<String>,
    lease_expires_at: Option<DateTime<Utc>>,
    result: Option<Value>,
    updated_at: DateTime<Utc>,
    finding_id: Option<FindingId>,
    verification: Option<Verification>,
    verification_reason: Option<String>,
    verified_at: Option<DateTime<Utc>>,
}

impl ActionViewFields {
    const NAMES: [&str; 14] = [
        "state",
        "version",
        "decided_by",
        "decided_by_name",
        "decision_reason",
        "human_approved",
        "lease_id",
        "lease_expires_at",
        "result",
        "updated_at",
        "finding_id",
        "verification",
        "verification_reason",
        "verified_at",
    ];
}

impl<'de> Deserialize<'de> for ActionView {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut object = serde_json::Map::<String, Value>::deserialize(deserializer)?;
        let own: ActionViewFields =
            serde_json::from_value(Value::Object(object.clone())).map_err(D::Error::custom)?;
        for name in ActionViewFields::NAMES {
            object.remove(name);
        }
        let plan: ActionPlan =
            serde_json::from_value(Value::Object(object)).map_err(D::Error::custom)?;
        Ok(ActionView {
            plan,
            state: own.state,
            version: own.version,
            decided_by: own.decided_by,
            decided_by_name: own.decided_by_name,
            decision_reason: own.decision_reason,
            human_approved: own.human_approved,
            lease_id: own.lease_id,
            lease_expires_at: own.lease_expires_at,
            result: own.result,
            updated_at: own.updated_at,
            finding_id: own.finding_id,
            verification: own.verification,
            verification_reason: own.verification_reason,
            verified_at: own.verified_at,
        })
    }
}

/// A stored audit row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LockView {
    /// The canonical id the lock is kept on.
    pub resource_id: String,
    pub never_auto_remediate: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field the view writes is read back: the plan's and the view's own.
    #[test]
    fn an_action_view_reads_back_as_written() {
        let written = serde_json::json!({
            "action_id": "0193a1b2-0000-7000-8000-000000000001",
            "resource_id": "service:h1:nginx",
            "agent_id": "h1",
            "capability": "service.restart",
            "params": {"target": "nginx"},
            "reason": "nginx is down",
            "severity": "warning",
            "approval_floor": "none",
            "requested_by": "user:alice",
            "planned_at": "2026-11-29T11:00:00Z",
            "expires_at": "2026-11-29T12:00:00Z",
            "resource_version": "v1",
            "policy_decision": {"outcome": "needs_approval", "reason_codes": []},
            "plan_hash": "5d41402abc4b2a76b9719d911017c592",
            "state": "pending_approval",
            "version": 2,
            "decided_by": null,
            "decided_by_name": null,
            "decision_reason": null,
            "human_approved": false,
            "lease_id": null,
            "lease_expires_at": null,
            "result": {"exit_code": 0},
            "updated_at": "2026-11-29T11:00:01Z",
            "finding_id": null,
            "verification": null,
            "verification_reason": "not yet run",
            "verified_at": null,
        });
        let view: ActionView = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(serde_json::to_value(&view).unwrap(), written);
        let mut unknown = written;
        unknown["surprise"] = Value::Bool(true);
        assert!(serde_json::from_value::<ActionView>(unknown).is_err());
    }
}
