//! What the end of an action means for the finding it was meant to fix (issue 7).
//!
//! | action end | `investigation_outcome` / lifecycle event | finding status |
//! |---|---|---|
//! | completed, verifier `verified` | `fix_verified` | resolved (`auto_resolved`, reason names the action and the verifier) |
//! | completed, verifier `still_failing` | `fix_verification_failed` | unchanged (stays active) |
//! | completed, verifier `inconclusive` | `fix_verification_unknown` | unchanged (stays active) |
//! | rejected by a human | `fix_rejected` | unchanged |
//! | failed (the command failed, or never ran after approval) | `fix_failed` | unchanged |
//!
//! One lifecycle event per outcome, of the outcome's own type (`fix_verified`, ...), carrying the
//! action id in its metadata; for `fix_verified` on an open finding it also carries the status
//! change (`from` active/snoozed, `to` resolved), so no separate `auto_resolved` event is
//! written. A finding that is no longer open (resolved, dismissed, suppressed) keeps its status
//! and only records the outcome. Recording the same outcome of the same action twice changes
//! nothing.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::verification::Verification;
use crate::finding::{
    Finding, InvestigationOutcome, LifecycleEvent, LifecycleEventType, StatusEvent, transition,
};

/// Longest message recorded on the finding, in characters.
pub const MAX_FIX_MESSAGE_CHARS: usize = 1_000;

/// How an action meant to fix a finding ended, as far as the finding is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum FixOutcome {
    Verified,
    VerificationFailed,
    VerificationUnknown,
    Rejected,
    Failed,
}

impl FixOutcome {
    pub const ALL: [FixOutcome; 5] = [
        FixOutcome::Verified,
        FixOutcome::VerificationFailed,
        FixOutcome::VerificationUnknown,
        FixOutcome::Rejected,
        FixOutcome::Failed,
    ];

    /// The outcome of a completed action the verifier judged.
    pub fn from_verification(verification: Verification) -> Self {
        match verification {
            Verification::Verified => FixOutcome::Verified,
            Verification::StillFailing => FixOutcome::VerificationFailed,
            Verification::Inconclusive => FixOutcome::VerificationUnknown,
        }
    }

    pub fn investigation_outcome(self) -> InvestigationOutcome {
        match self {
            FixOutcome::Verified => InvestigationOutcome::FixVerified,
            FixOutcome::VerificationFailed => InvestigationOutcome::FixVerificationFailed,
            FixOutcome::VerificationUnknown => InvestigationOutcome::FixVerificationUnknown,
            FixOutcome::Rejected => InvestigationOutcome::FixRejected,
            FixOutcome::Failed => InvestigationOutcome::FixFailed,
        }
    }

    pub fn event_type(self) -> LifecycleEventType {
        match self {
            FixOutcome::Verified => LifecycleEventType::FixVerified,
            FixOutcome::VerificationFailed => LifecycleEventType::FixVerificationFailed,
            FixOutcome::VerificationUnknown => LifecycleEventType::FixVerificationUnknown,
            FixOutcome::Rejected => LifecycleEventType::FixRejected,
            FixOutcome::Failed => LifecycleEventType::FixFailed,
        }
    }

    /// The wire name (`fix_verified`, ...), the same as the lifecycle event's.
    pub fn as_str(self) -> &'static str {
        self.event_type().as_str()
    }
}

/// The resolve reason of a finding resolved by a verified fix.
pub fn verified_resolve_reason(action_id: Uuid, message: &str) -> String {
    bounded(&format!(
        "fix verified: action {action_id} confirmed by the verifier: {message}"
    ))
}

fn bounded(text: &str) -> String {
    text.chars().take(MAX_FIX_MESSAGE_CHARS).collect()
}

/// The finding after `outcome` of action `action_id` at `now`, with the one event to append;
/// `None` when this outcome of this action is already recorded (nothing to write). Pure: the
/// finding store writes the result.
pub fn apply_fix_outcome(
    finding: &Finding,
    outcome: FixOutcome,
    action_id: Uuid,
    message: &str,
    now: DateTime<Utc>,
) -> Option<(Finding, LifecycleEvent)> {
    let id = action_id.to_string();
    let recorded = finding.lifecycle.iter().any(|e| {
        e.event_type == outcome.event_type()
            && e.metadata.get("action_id").is_some_and(|a| *a == id)
    });
    if recorded {
        return None;
    }
    let mut next = finding.clone();
    next.investigation_outcome = Some(outcome.investigation_outcome());
    let mut event = LifecycleEvent::new(outcome.event_type(), now)
        .message(bounded(message))
        .meta("action_id", id);
    if outcome == FixOutcome::Verified
        && let Ok(to) = transition(finding.status, StatusEvent::AutoResolve)
    {
        event = event.statuses(finding.status, to);
        next.status = to;
        next.resolved_at = Some(now);
        next.auto_resolved = true;
        next.resolve_reason = verified_resolve_reason(action_id, message);
        next.snoozed_until = None;
    }
    next.push_event(event.clone());
    Some((next, event))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::{
        Category, FindingStatus, ReportContext, ReportedFinding, Severity, report,
    };
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 1, 0, 0).unwrap()
    }

    fn finding() -> Finding {
        let reported = ReportedFinding {
            key: "service-down".to_owned(),
            severity: Severity::Critical,
            category: Category::Reliability,
            resource_id: "service:h1:nginx".to_owned(),
            resource_name: "nginx".to_owned(),
            resource_type: "service".to_owned(),
            title: "nginx is down".to_owned(),
            description: "nginx exited".to_owned(),
            recommendation: "restart nginx".to_owned(),
            evidence: "status=failed".to_owned(),
            impact: String::new(),
        };
        let ctx = ReportContext {
            existing_same_id: None,
            active_on_resource: &[],
            suppressions: &[],
        };
        report(ctx, &reported, None, t0()).unwrap().finding
    }

    #[test]
    fn verified_resolves_an_open_finding_naming_the_action() {
        let action = Uuid::from_u128(7);
        let before = finding();
        let now = t0() + chrono::Duration::minutes(5);
        let (after, event) =
            apply_fix_outcome(&before, FixOutcome::Verified, action, "restarted", now).unwrap();
        assert_eq!(after.status, FindingStatus::Resolved);
        assert!(after.auto_resolved);
        assert_eq!(after.resolved_at, Some(now));
        assert!(after.resolve_reason.contains(&action.to_string()));
        assert!(after.resolve_reason.contains("verifier"));
        assert_eq!(
            after.investigation_outcome,
            Some(InvestigationOutcome::FixVerified)
        );
        assert_eq!(event.event_type, LifecycleEventType::FixVerified);
        assert_eq!(event.from, Some(FindingStatus::Active));
        assert_eq!(event.to, Some(FindingStatus::Resolved));
        assert_eq!(event.metadata["action_id"], action.to_string());
        assert_eq!(after.lifecycle.last(), Some(&event));
    }

    #[test]
    fn other_outcomes_leave_the_status_alone() {
        let action = Uuid::from_u128(8);
        let before = finding();
        for outcome in FixOutcome::ALL
            .into_iter()
            .filter(|o| *o != FixOutcome::Verified)
        {
            let (after, event) = apply_fix_outcome(&before, outcome, action, "why", t0()).unwrap();
            assert_eq!(after.status, FindingStatus::Active, "{outcome:?}");
            assert!(!after.auto_resolved);
            assert_eq!(after.resolved_at, None);
            assert_eq!(
                after.investigation_outcome,
                Some(outcome.investigation_outcome())
            );
            assert_eq!(event.event_type, outcome.event_type());
            assert_eq!((event.from, event.to), (None, None));
        }
    }

    #[test]
    fn a_finding_no_longer_open_only_records_the_outcome() {
        let mut dismissed = finding();
        dismissed.status = FindingStatus::Dismissed;
        let (after, event) = apply_fix_outcome(
            &dismissed,
            FixOutcome::Verified,
            Uuid::from_u128(9),
            "ok",
            t0(),
        )
        .unwrap();
        assert_eq!(after.status, FindingStatus::Dismissed);
        assert!(!after.auto_resolved);
        assert_eq!(event.to, None);
    }

    #[test]
    fn the_same_outcome_of_the_same_action_is_recorded_once() {
        let action = Uuid::from_u128(10);
        let (once, _) =
            apply_fix_outcome(&finding(), FixOutcome::Rejected, action, "no", t0()).unwrap();
        assert!(apply_fix_outcome(&once, FixOutcome::Rejected, action, "no", t0()).is_none());
        // Another action's outcome is a new fact.
        assert!(
            apply_fix_outcome(&once, FixOutcome::Rejected, Uuid::from_u128(11), "no", t0())
                .is_some()
        );
    }

    #[test]
    fn outcomes_map_to_their_wire_names() {
        let names = [
            (FixOutcome::Verified, "fix_verified"),
            (FixOutcome::VerificationFailed, "fix_verification_failed"),
            (FixOutcome::VerificationUnknown, "fix_verification_unknown"),
            (FixOutcome::Rejected, "fix_rejected"),
            (FixOutcome::Failed, "fix_failed"),
        ];
        for (outcome, name) in names {
            assert_eq!(outcome.as_str(), name);
            assert_eq!(
                serde_json::to_value(outcome.investigation_outcome()).unwrap(),
                name
            );
            assert_eq!(serde_json::to_value(outcome.event_type()).unwrap(), name);
        }
        assert_eq!(
            FixOutcome::from_verification(Verification::Verified),
            FixOutcome::Verified
        );
        assert_eq!(
            FixOutcome::from_verification(Verification::StillFailing),
            FixOutcome::VerificationFailed
        );
        assert_eq!(
            FixOutcome::from_verification(Verification::Inconclusive),
            FixOutcome::VerificationUnknown
        );
    }
}
