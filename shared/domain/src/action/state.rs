//! The action state machine.
//!
//! | from \ event | request_approval | auto_authorize | approve | reject | expire | start_execution | complete | fail | refuse |
//! |---|---|---|---|---|---|---|---|---|---|
//! | planned          | pending_approval | approved | -        | rejected | expired | -         | -         | -      | rejected |
//! | pending_approval | -                | -        | approved | rejected | expired | -         | -         | -      | rejected |
//! | approved         | -                | -        | -        | -        | expired | executing | -         | -      | failed   |
//! | executing        | -                | -        | -        | -        | -       | -         | completed | failed | -        |
//! | rejected, expired, completed, failed | - | - | - | - | - | - | - | - | - |
//!
//! `refuse` is a policy refusal: at planning or approval time (monitor mode, `mfa` floor) it
//! rejects the plan; at execution time (plan drift, remediation lock, capability no longer
//! advertised) it fails the approved action, so it never runs.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ActionState {
    Planned,
    PendingApproval,
    Approved,
    Rejected,
    Expired,
    Executing,
    Completed,
    Failed,
}

impl ActionState {
    pub const ALL: [ActionState; 8] = [
        ActionState::Planned,
        ActionState::PendingApproval,
        ActionState::Approved,
        ActionState::Rejected,
        ActionState::Expired,
        ActionState::Executing,
        ActionState::Completed,
        ActionState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ActionState::Planned => "planned",
            ActionState::PendingApproval => "pending_approval",
            ActionState::Approved => "approved",
            ActionState::Rejected => "rejected",
            ActionState::Expired => "expired",
            ActionState::Executing => "executing",
            ActionState::Completed => "completed",
            ActionState::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// No event leaves a terminal state.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            ActionState::Rejected
                | ActionState::Expired
                | ActionState::Completed
                | ActionState::Failed
        )
    }
}

impl std::fmt::Display for ActionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ActionEvent {
    RequestApproval,
    AutoAuthorize,
    Approve,
    Reject,
    Expire,
    StartExecution,
    Complete,
    Fail,
    Refuse,
}

impl ActionEvent {
    pub const ALL: [ActionEvent; 9] = [
        ActionEvent::RequestApproval,
        ActionEvent::AutoAuthorize,
        ActionEvent::Approve,
        ActionEvent::Reject,
        ActionEvent::Expire,
        ActionEvent::StartExecution,
        ActionEvent::Complete,
        ActionEvent::Fail,
        ActionEvent::Refuse,
    ];

    /// The audit kind of a transition driven by this event.
    pub fn audit_kind(self) -> &'static str {
        match self {
            ActionEvent::RequestApproval => "action.pending_approval",
            ActionEvent::AutoAuthorize => "action.auto_authorized",
            ActionEvent::Approve => "action.approved",
            ActionEvent::Reject => "action.rejected",
            ActionEvent::Expire => "action.expired",
            ActionEvent::StartExecution => "action.executing",
            ActionEvent::Complete => "action.completed",
            ActionEvent::Fail => "action.failed",
            ActionEvent::Refuse => "action.refused",
        }
    }
}

/// The state machine refuses `event` in state `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("action in state {from} does not accept {event:?}")]
pub struct IllegalTransition {
    pub from: ActionState,
    pub event: ActionEvent,
}

/// The action state machine (table in the module documentation).
pub fn transition(from: ActionState, event: ActionEvent) -> Result<ActionState, IllegalTransition> {
    use ActionEvent as E;
    use ActionState as S;
    let to = match (from, event) {
        (S::Planned, E::RequestApproval) => S::PendingApproval,
        (S::Planned, E::AutoAuthorize) => S::Approved,
        (S::PendingApproval, E::Approve) => S::Approved,
        (S::Planned | S::PendingApproval, E::Reject | E::Refuse) => S::Rejected,
        (S::Planned | S::PendingApproval | S::Approved, E::Expire) => S::Expired,
        (S::Approved, E::StartExecution) => S::Executing,
        (S::Approved, E::Refuse) => S::Failed,
        (S::Executing, E::Complete) => S::Completed,
        (S::Executing, E::Fail) => S::Failed,
        _ => return Err(IllegalTransition { from, event }),
    };
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table of the module documentation, row by row; `None` is a refusal.
    fn expected(from: ActionState, event: ActionEvent) -> Option<ActionState> {
        use ActionEvent as E;
        use ActionState as S;
        let row: [Option<S>; 9] = match from {
            S::Planned => [
                Some(S::PendingApproval),
                Some(S::Approved),
                None,
                Some(S::Rejected),
                Some(S::Expired),
                None,
                None,
                None,
                Some(S::Rejected),
            ],
            S::PendingApproval => [
                None,
                None,
                Some(S::Approved),
                Some(S::Rejected),
                Some(S::Expired),
                None,
                None,
                None,
                Some(S::Rejected),
            ],
            S::Approved => [
                None,
                None,
                None,
                None,
                Some(S::Expired),
                Some(S::Executing),
                None,
                None,
                Some(S::Failed),
            ],
            S::Executing => [
                None,
                None,
                None,
                None,
                None,
                None,
                Some(S::Completed),
                Some(S::Failed),
                None,
            ],
            S::Rejected | S::Expired | S::Completed | S::Failed => [None; 9],
        };
        let column = E::ALL.iter().position(|e| *e == event).unwrap();
        row[column]
    }

    #[test]
    fn every_state_and_event_follows_the_table() {
        for from in ActionState::ALL {
            for event in ActionEvent::ALL {
                let got = transition(from, event).ok();
                assert_eq!(got, expected(from, event), "{from} x {event:?}");
                if let Err(e) = transition(from, event) {
                    assert_eq!(e, IllegalTransition { from, event });
                }
            }
        }
    }

    #[test]
    fn terminal_states_accept_nothing() {
        for from in ActionState::ALL.into_iter().filter(|s| s.is_terminal()) {
            for event in ActionEvent::ALL {
                assert!(transition(from, event).is_err(), "{from} x {event:?}");
            }
        }
    }

    #[test]
    fn only_an_approved_action_starts_executing() {
        for from in ActionState::ALL {
            let ok = transition(from, ActionEvent::StartExecution).is_ok();
            assert_eq!(ok, from == ActionState::Approved, "{from}");
        }
    }

    #[test]
    fn wire_names_round_trip() {
        for state in ActionState::ALL {
            assert_eq!(ActionState::parse(state.as_str()), Some(state));
            let json = serde_json::to_value(state).unwrap();
            assert_eq!(json, serde_json::Value::String(state.as_str().to_owned()));
        }
        assert_eq!(ActionState::parse("running"), None);
    }
}
