//! The action-broker's requests, reply and events, snapshotted: a changed snapshot is a changed
//! contract.

use chrono::{TimeZone, Utc};
use pulse_bus::actions_api::{
    ACTION_DECIDE_REQUEST, ACTION_EXECUTE_REQUEST, ACTION_PLAN_REQUEST, ACTIONS_QUEUE_GROUP,
    ActionDecisionRequest, ActionExecuteRequest, ActionPlanRequest, ActionReply, DecisionOutcome,
};
use pulse_bus::events::{ACTION_COMPLETED, APPROVAL_PENDING, ActionCompleted, ApprovalPending};
use pulse_bus::{Message, Subjects};
use pulse_domain::TenantId;
use pulse_domain::action::{
    ActionState, ApprovalFloor, PolicyDecision, PolicyOutcome, ReasonCode, Severity,
};
use serde_json::json;
use uuid::Uuid;

fn id() -> Uuid {
    Uuid::parse_str("0193a1b2-0000-7000-8000-000000000001").unwrap()
}

const HASH: &str = "5d41402abc4b2a76b9719d911017c5925d41402abc4b2a76b9719d911017c592";

#[test]
fn action_subjects_and_types() {
    let subjects = Subjects::new(Some("p"));
    let acme = TenantId::new("acme").unwrap();
    assert_eq!(
        subjects.tenant(&acme, ACTION_PLAN_REQUEST),
        "p.pulse.acme.actions.plan.request"
    );
    assert_eq!(
        subjects.any_tenant(ACTION_DECIDE_REQUEST),
        "p.pulse.*.actions.decide.request"
    );
    assert_eq!(
        subjects.tenant(&acme, ACTION_EXECUTE_REQUEST),
        "p.pulse.acme.actions.execute.request"
    );
    assert_eq!(ACTIONS_QUEUE_GROUP, "action-broker");
    let (domain, event) = APPROVAL_PENDING;
    assert_eq!(
        subjects.event(&acme, domain, event),
        "p.pulse.acme.events.approval.pending"
    );
    let (domain, event) = ACTION_COMPLETED;
    assert_eq!(
        subjects.event(&acme, domain, event),
        "p.pulse.acme.events.action.completed"
    );
    assert_eq!(ActionPlanRequest::TYPE, "pulse.actions.plan_request");
    assert_eq!(ActionDecisionRequest::TYPE, "pulse.actions.decide_request");
    assert_eq!(ActionExecuteRequest::TYPE, "pulse.actions.execute_request");
    assert_eq!(ActionReply::TYPE, "pulse.actions.reply");
    assert_eq!(ApprovalPending::TYPE, "pulse.actions.approval_pending");
    assert_eq!(ActionCompleted::TYPE, "pulse.actions.completed");
}

#[test]
fn action_plan_request() {
    insta::assert_json_snapshot!(ActionPlanRequest {
        resource_id: "service:h1:nginx".to_owned(),
        capability: "service.restart".to_owned(),
        params: json!({"target": "nginx"}),
        reason: "nginx stopped answering".to_owned(),
        severity: Severity::Critical,
        approval_floor: Some(ApprovalFloor::Admin),
        requested_by: "user:0193a1b2-0000-7000-8000-00000000000a".to_owned(),
        finding_id: None,
    });
}

#[test]
fn action_decision_and_execute_requests() {
    insta::assert_json_snapshot!(
        "action_decision_request",
        ActionDecisionRequest {
            action_id: id(),
            outcome: DecisionOutcome::Approved,
            reason: "checked the logs".to_owned(),
            decided_by: "user:0193a1b2-0000-7000-8000-00000000000b".to_owned(),
        }
    );
    insta::assert_json_snapshot!(
        "action_execute_request",
        ActionExecuteRequest {
            action_id: id(),
            requested_by: "token:0193a1b2-0000-7000-8000-00000000000c".to_owned(),
        }
    );
}

#[test]
fn action_reply_and_events() {
    insta::assert_json_snapshot!(
        "action_reply_failed_drift",
        ActionReply {
            action_id: id(),
            state: ActionState::Failed,
            plan_hash: HASH.to_owned(),
            policy_decision: PolicyDecision {
                outcome: PolicyOutcome::NeedsApproval,
                reason_codes: vec![ReasonCode::FloorRequiresApproval, ReasonCode::ApprovalMode],
            },
            message: Some("plan_drift: plan hash changed".to_owned()),
        }
    );
    let at = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
    insta::assert_json_snapshot!(
        "approval_pending",
        ApprovalPending {
            action_id: id(),
            resource_id: "service:h1:nginx".to_owned(),
            capability: "service.restart".to_owned(),
            severity: Severity::Warning,
            approval_floor: ApprovalFloor::None,
            plan_hash: HASH.to_owned(),
            expires_at: at,
        }
    );
    insta::assert_json_snapshot!(
        "action_completed",
        ActionCompleted {
            action_id: id(),
            state: ActionState::Completed,
            plan_hash: HASH.to_owned(),
            reason: None,
            at,
        }
    );
}
