//! `pulsectl approvals list | approve | reject` over the gateway's action API:
//! `GET /api/actions/pending[?limit=N]` and `POST /api/actions/{id}/decision`.
//!
//! Human text by default; `--json` prints the API's answer as it came. Answers are read
//! leniently (unknown fields ignored, missing ones shown as `-`). A refused decision prints one
//! line naming the code and what to do about it.

use pulse_capabilities::ErrorCode;
use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use crate::cli::{ApprovalsListArgs, DecisionArgs};
use crate::gateway_client::{ApiError, GatewayClient};
use crate::patrol::client_with_query;
use crate::text::{display_time, render_table};

/// An action as the API shows it (only what is printed).
#[derive(Debug, Clone, Deserialize)]
pub struct Action {
    pub action_id: String,
    #[serde(default)]
    pub resource_id: String,
    #[serde(default)]
    pub capability: String,
    #[serde(default)]
    pub params: serde_json::Value,
    #[serde(default)]
    pub severity: String,
    #[serde(default)]
    pub approval_floor: String,
    #[serde(default)]
    pub requested_by: String,
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default)]
    pub state: String,
    /// The decider's stable actor id (`user:<id>`).
    #[serde(default)]
    pub decided_by: Option<String>,
    /// The decider's username, when the gateway knows it.
    #[serde(default)]
    pub decided_by_name: Option<String>,
    #[serde(default)]
    pub decision_reason: Option<String>,
}

impl Action {
    /// Who decided, for people: the username, else the actor id, else `-`.
    pub fn decider(&self) -> &str {
        self.decided_by_name
            .as_deref()
            .filter(|name| !name.trim().is_empty())
            .or(self.decided_by.as_deref())
            .unwrap_or("-")
    }
}

/// `approvals list [--limit N]`. Takes the gateway and token: the limit is carried by the
/// client's base URL.
pub async fn list(gateway: &str, token: String, args: &ApprovalsListArgs) -> Result<(), ApiError> {
    let client = client_with_query(
        gateway,
        token,
        args.limit.map(|limit| format!("limit={limit}")),
    )?;
    let segments = ["api", "actions", "pending"];
    if let Some(pending) = client
        .fetch::<Vec<Action>>(Method::GET, &segments, None, args.json)
        .await?
    {
        if pending.is_empty() {
            println!("no actions waiting for a decision");
        } else {
            print!("{}", render_pending(&pending));
        }
    }
    Ok(())
}

/// `approvals approve|reject <id> --reason ..`: prints the state the decision left the action
/// in. `outcome` is the API's `approved` or `rejected`.
pub async fn decide(
    client: &GatewayClient,
    outcome: &str,
    args: &DecisionArgs,
) -> Result<(), ApiError> {
    let segments = ["api", "actions", args.id.as_str(), "decision"];
    let body = json!({"outcome": outcome, "reason": args.reason});
    let answer = client
        .fetch::<Action>(Method::POST, &segments, Some(&body), args.json)
        .await
        .map_err(|err| explain(err, &args.id))?;
    if let Some(action) = answer {
        println!("{}", describe_decision(&action, outcome));
    }
    Ok(())
}

/// `action <id> approved by <username>: now approved`; the state may already have moved on when
/// the approval started the execution. The stable actor id stays in `--json` and the audit.
pub fn describe_decision(action: &Action, outcome: &str) -> String {
    format!(
        "action {} {outcome} by {}: now {}",
        action.action_id,
        action.decider(),
        or_dash(&action.state)
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
fn capability(action: &Action) -> String {
    match action.params.get("target").and_then(|t| t.as_str()) {
        Some(target) if !action.capability.is_empty() => {
            format!("{} {target}", action.capability)
        }
        _ => or_dash(&action.capability),
    }
}

/// One action per line, in the API's order (soonest expiry first).
pub fn render_pending(actions: &[Action]) -> String {
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
        rows.push(vec![
            a.action_id.clone(),
            or_dash(&a.resource_id),
            capability(a),
            or_dash(&a.severity),
            or_dash(&a.approval_floor),
            display_time(a.expires_at.as_deref(), "-"),
            or_dash(&a.requested_by),
        ]);
    }
    render_table(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(state: &str) -> Action {
        serde_json::from_value(json!({
            "action_id": "0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000",
            "resource_id": "service:h1:web",
            "capability": "service.restart",
            "params": {"target": "web"},
            "severity": "critical",
            "approval_floor": "admin",
            "requested_by": "user:alice",
            "expires_at": "2026-11-29T18:32:03.123456Z",
            "state": state,
            "decided_by": (state != "pending_approval")
                .then_some("user:0190aaaa-0000-7000-8000-000000000b0b"),
            "decided_by_name": (state != "pending_approval").then_some("bob"),
            "policy_decision": {"outcome": "needs_approval", "reason_codes": []},
            "unknown_future_field": 1
        }))
        .expect("lenient")
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
            describe_decision(&action("executing"), "approved"),
            "action 0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000 approved by bob: now executing"
        );
        assert!(
            describe_decision(&action("rejected"), "rejected")
                .ends_with("rejected by bob: now rejected")
        );
        // A gateway that does not know the name (or an older one): the actor id.
        let mut unnamed = action("executing");
        unnamed.decided_by_name = None;
        assert!(
            describe_decision(&unnamed, "approved")
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
