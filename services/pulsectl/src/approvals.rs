//! `pulsectl approvals list | approve | reject` over the gateway's action API:
//! `GET /api/actions/pending[?limit=N]` and `POST /api/actions/{id}/decision`.
//!
//! Human text by default; `--json` prints the answer as JSON. Answers are the API's own types
//! (`pulse-api`), read through the typed client; enum values print as their wire names. A refused
//! decision prints one line naming the code and what to do about it.

use pulse_api::actions::{ActionView, DecisionBody, DecisionOutcome};
use pulse_capabilities::ErrorCode;

use crate::cli::{ApprovalsListArgs, DecisionArgs};
use crate::gateway_client::{ApiError, GatewayClient, print_json};
use crate::text::{render_table, show_time, wire_name};

/// Who decided, for people: the username, else the actor id, else `-`.
pub fn decider(action: &ActionView) -> &str {
    action
        .decided_by_name
        .as_deref()
        .filter(|name| !name.trim().is_empty())
        .or(action.decided_by.as_deref())
        .unwrap_or("-")
}

/// `approvals list [--limit N]`.
pub async fn list(client: &GatewayClient, args: &ApprovalsListArgs) -> Result<(), ApiError> {
    let pending = client
        .api()
        .actions(true, args.limit.map(i64::from))
        .await?;
    if args.json {
        print_json(&pending);
    } else if pending.is_empty() {
        println!("no actions waiting for a decision");
    } else {
        print!("{}", render_pending(&pending));
    }
    Ok(())
}

/// `approvals approve|reject <id> --reason ..`: prints the state the decision left the action
/// in.
pub async fn decide(
    client: &GatewayClient,
    outcome: DecisionOutcome,
    args: &DecisionArgs,
) -> Result<(), ApiError> {
    let body = DecisionBody {
        outcome,
        reason: args.reason.clone(),
    };
    let action = client
        .api()
        .decide_action(&args.id, &body)
        .await
        .map_err(|err| explain(err.into(), &args.id))?;
    if args.json {
        print_json(&action);
    } else {
        println!("{}", describe_decision(&action, outcome));
    }
    Ok(())
}

/// `action <id> approved by <username>: now approved`; the state may already have moved on when
/// the approval started the execution. The stable actor id stays in `--json` and the audit.
pub fn describe_decision(action: &ActionView, outcome: DecisionOutcome) -> String {
    format!(
        "action {} {} by {}: now {}",
        action.plan.action_id,
        wire_name(&outcome),
        decider(action),
        wire_name(&action.state)
    )
}

/// Replaces the API's message of a refused decision with one line saying what to do; the code
/// (and so the exit code) stays. Other errors pass unchanged.
pub fn explain(err: ApiError, id: &str) -> ApiError {
    let ApiError::Api {
        status,
        code,
        message,
    } = err
    else {
        return err;
    };
    let hint = match ErrorCode::from_code(&code) {
        Some(ErrorCode::ActionNotFound) => format!(
            "no action {id} in this tenant; `pulsectl approvals list` shows the pending ones"
        ),
        Some(ErrorCode::ActionDecisionNotAllowed) => {
            format!("{message}; `pulsectl approvals list` shows the actions waiting for a decision")
        }
        Some(ErrorCode::ActionSelfApprovalForbidden) => format!(
            "action {id} needs a human other than its requester; ask another user with \
             actions:approve to decide"
        ),
        Some(ErrorCode::ActionDecisionRequiresHuman) => {
            "this token belongs to no user; decisions are made by a human: use a token a user \
             created"
                .to_owned()
        }
        Some(ErrorCode::ActionStepUpUnavailable) => format!(
            "action {id} has the mfa floor, which this build can never approve; reject it or \
             plan it with a lower floor"
        ),
        Some(ErrorCode::ActionPlanExpired) => {
            format!("action {id} expired before it was decided; plan it again")
        }
        Some(ErrorCode::MissingScope) => {
            "this token lacks actions:approve; use a token that carries it".to_owned()
        }
        Some(ErrorCode::ActionExecutorUnavailable) => {
            "no action-broker answered; start pulse-action-broker \
             (or `pulsectl up`) and retry"
                .to_owned()
        }
        _ => message,
    };
    ApiError::Api {
        status,
        code,
        message: hint,
    }
}

fn or_dash(text: &str) -> String {
    if text.is_empty() {
        "-".to_owned()
    } else {
        text.to_owned()
    }
}

/// The capability with its target: `service.restart nginx`.
fn capability(action: &ActionView) -> String {
    let capability = action.plan.capability.as_str();
    match action.plan.params.get("target").and_then(|t| t.as_str()) {
        Some(target) => format!("{capability} {target}"),
        None => capability.to_owned(),
    }
}

/// One action per line, in the API's order (soonest expiry first).
pub fn render_pending(actions: &[ActionView]) -> String {
    let mut rows = vec![
        [
            "ID",
            "RESOURCE",
            "CAPABILITY",
            "SEVERITY",
            "FLOOR",
            "EXPIRES",
            "REQUESTED BY",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for a in actions {
        let plan = &a.plan;
        rows.push(vec![
            plan.action_id.to_string(),
            or_dash(&plan.resource_id),
            capability(a),
            wire_name(&plan.severity),
            wire_name(&plan.approval_floor),
            show_time(Some(plan.expires_at), "-"),
            or_dash(&plan.requested_by),
        ]);
    }
    render_table(&rows)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn action(state: &str) -> ActionView {
        serde_json::from_value(json!({
            "action_id": "0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000",
            "resource_id": "service:h1:web",
            "agent_id": "h1",
            "capability": "service.restart",
            "params": {"target": "web"},
            "reason": "web is down",
            "severity": "critical",
            "approval_floor": "admin",
            "requested_by": "user:alice",
            "planned_at": "2026-11-29T18:02:03Z",
            "expires_at": "2026-11-29T18:32:03.123456Z",
            "resource_version": "v1",
            "policy_decision": {"outcome": "needs_approval", "reason_codes": []},
            "plan_hash": "5d41402abc4b2a76b9719d911017c592",
            "state": state,
            "version": 1,
            "decided_by": (state != "pending_approval")
                .then_some("user:0190aaaa-0000-7000-8000-000000000b0b"),
            "decided_by_name": (state != "pending_approval").then_some("bob"),
            "decision_reason": null,
            "human_approved": state != "pending_approval",
            "lease_id": null,
            "lease_expires_at": null,
            "result": null,
            "updated_at": "2026-11-29T18:02:03Z",
            "finding_id": null,
            "verification": null,
            "verification_reason": null,
            "verified_at": null,
        }))
        .expect("an action")
    }

    #[test]
    fn pending_rows_show_resource_capability_floor_and_expiry() {
        let text = render_pending(&[action("pending_approval")]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].starts_with("ID") && lines[0].contains("FLOOR"),
            "{text}"
        );
        for cell in [
            "service:h1:web",
            "service.restart web",
            "critical",
            "admin",
            "2026-11-29 18:32:03",
            "user:alice",
        ] {
            assert!(lines[1].contains(cell), "{cell} missing: {text}");
        }
    }

    #[test]
    fn decisions_print_the_decider_by_name_and_the_resulting_state() {
        assert_eq!(
            describe_decision(&action("executing"), DecisionOutcome::Approved),
            "action 0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000 approved by bob: now executing"
        );
        assert!(
            describe_decision(&action("rejected"), DecisionOutcome::Rejected)
                .ends_with("rejected by bob: now rejected")
        );
        // A gateway that does not know the name (or an older one): the actor id.
        let mut unnamed = action("executing");
        unnamed.decided_by_name = None;
        assert!(
            describe_decision(&unnamed, DecisionOutcome::Approved)
                .contains("approved by user:0190aaaa-0000-7000-8000-000000000b0b:")
        );
    }

    #[test]
    fn refusals_keep_their_code_and_get_a_hint() {
        let refused = ApiError::Api {
            status: 403,
            code: "action_self_approval_forbidden".to_owned(),
            message: "the admin floor needs a human other than the requester".to_owned(),
        };
        let explained = explain(refused, "0190");
        let text = explained.to_string();
        assert!(
            text.starts_with("action_self_approval_forbidden: action 0190 needs a human"),
            "{text}"
        );
        assert_eq!(explained.exit_code(), 2);
        assert_eq!(text.lines().count(), 1, "{text}");
        let other = ApiError::Api {
            status: 422,
            code: "invalid_action_request".to_owned(),
            message: "reason: must be 1..=1000 characters".to_owned(),
        };
        assert_eq!(
            explain(other, "x").to_string(),
            "invalid_action_request: reason: must be 1..=1000 characters"
        );
    }
}
