//! The outcome notes of the actions a session planned, read from the action record.

use pulse_store::actions;
use serde_json::{Value, json};
use uuid::Uuid;

/// One sentence on where an action stands, from its record; `None` while it has not ended.
pub(super) fn outcome_note(action: &actions::StoredAction) -> Option<(String, Value)> {
    let id = action.plan.action_id;
    let text = describe_outcome(
        id,
        &format!("{} on {}", action.plan.capability, action.plan.resource_id),
        action.state,
        action.verification,
        action.decision_reason.as_deref(),
    )?;
    Some((
        text,
        json!({
            "action_id": id, "state": action.state,
            "verification": action.verification.map(|v| v.as_str()),
            "resource_id": action.plan.resource_id, "capability": action.plan.capability,
        }),
    ))
}

/// The outcome sentence of an ended action. A completed action counts as ended only once the
/// verifier has judged it: its own success is not the outcome.
fn describe_outcome(
    id: Uuid,
    what: &str,
    state: pulse_domain::action::ActionState,
    verification: Option<pulse_domain::action::Verification>,
    reason: Option<&str>,
) -> Option<String> {
    use pulse_domain::action::ActionState;
    Some(match (state, verification) {
        (ActionState::Completed, Some(v)) => format!(
            "Action {id} ({what}) ran and the verifier recorded: {}.",
            v.as_str()
        ),
        (ActionState::Failed, _) => format!(
            "Action {id} ({what}) failed: {}.",
            reason.unwrap_or("see its audit trail")
        ),
        (ActionState::Rejected, _) => {
            format!("Action {id} ({what}) was rejected by a human; it did not run.")
        }
        (ActionState::Expired, _) => {
            format!("Action {id} ({what}) expired before it was approved; it did not run.")
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use pulse_domain::action::{ActionState, Verification};

    use super::*;

    #[test]
    fn an_outcome_is_the_verifiers_and_only_once_the_action_ended() {
        let id = Uuid::nil();
        let what = "service.restart on service:h:web";
        let said = |state, verification| describe_outcome(id, what, state, verification, None);
        for (verification, word) in [
            (Verification::Verified, "verified"),
            (Verification::StillFailing, "still_failing"),
            (Verification::Inconclusive, "inconclusive"),
        ] {
            let text = said(ActionState::Completed, Some(verification)).unwrap_or_default();
            assert!(
                text.ends_with(&format!("the verifier recorded: {word}.")),
                "{text}"
            );
        }
        // Completed but not yet judged, or not ended: nothing to report yet.
        for (state, verification) in [
            (ActionState::Completed, None),
            (ActionState::PendingApproval, None),
            (ActionState::Approved, None),
            (ActionState::Executing, None),
        ] {
            assert_eq!(said(state, verification), None, "{state:?}");
        }
        assert!(said(ActionState::Rejected, None).is_some_and(|t| t.contains("did not run")));
        let failed = describe_outcome(id, what, ActionState::Failed, None, Some("agent gone"));
        assert!(failed.is_some_and(|t| t.contains("failed: agent gone")));
    }
}
