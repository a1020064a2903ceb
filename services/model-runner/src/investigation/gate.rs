//! The investigation gate: whether a finding a committed Watch run reported or reconfirmed is
//! investigated now. Pure: the dispatcher reads the inputs (the tenant's Patrol mode, the
//! finding, the attempts in `investigations`) under the tenant's gate lock and applies this.

use chrono::{DateTime, Duration, Utc};
use pulse_domain::action::ActionState;
use pulse_domain::ai_settings::AutonomyLevel;
use pulse_domain::finding::{FindingStatus, InvestigationOutcome, Severity};
use pulse_store::investigations::{GateState, InvestigationStatus};

/// Attempts per finding.
pub const MAX_ATTEMPTS: u32 = 3;
/// Attempts of one tenant running at once.
pub const MAX_CONCURRENT: u32 = 3;
/// Wait after an attempt before the next one.
pub const COOLDOWN: Duration = Duration::hours(1);
/// Wait after an attempt that timed out.
pub const TIMEOUT_COOLDOWN: Duration = Duration::minutes(10);
/// Wait after a fix that failed.
pub const FAILED_FIX_COOLDOWN: Duration = Duration::minutes(20);
/// How long the broker keeps an undecided plan (its `plan_ttl`): an attempt's `fix_queued`
/// blocks no longer than this, since a plan not decided by then has expired.
pub const PLAN_TTL: Duration = Duration::minutes(30);

/// What the gate decides from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateInput {
    pub mode: AutonomyLevel,
    pub severity: Severity,
    pub status: FindingStatus,
    /// The fix outcome written on the finding (by the broker or the verifier).
    pub finding_outcome: Option<InvestigationOutcome>,
    /// When the finding last regressed (reopened); an attempt started before it is about an
    /// earlier occurrence and its outcome does not count.
    pub last_regression_at: Option<DateTime<Utc>>,
    pub state: GateState,
    pub now: DateTime<Utc>,
}

/// Why a finding is not investigated now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Patrol mode `monitor`: findings only.
    MonitorMode,
    /// Only warning and critical findings are investigated.
    Severity,
    /// Resolved, dismissed, suppressed or snoozed.
    NotActive(FindingStatus),
    /// A fix is queued, running or ended for good.
    FixOutcome(InvestigationOutcome),
    AttemptsExhausted,
    CoolingDown {
        until: DateTime<Utc>,
    },
    TenantBusy,
}

impl Skip {
    pub fn as_str(&self) -> &'static str {
        match self {
            Skip::MonitorMode => "monitor_mode",
            Skip::Severity => "severity",
            Skip::NotActive(_) => "not_active",
            Skip::FixOutcome(_) => "fix_outcome",
            Skip::AttemptsExhausted => "attempts_exhausted",
            Skip::CoolingDown { .. } => "cooling_down",
            Skip::TenantBusy => "tenant_busy",
        }
    }
}

/// The gate's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Investigate now; this is attempt number `attempt`.
    Dispatch {
        attempt: u32,
    },
    Skip(Skip),
}

/// Outcomes after which a finding is not investigated again: a fix waits for approval or
/// runs, worked, was rejected by a human, or cannot be made.
fn blocks(outcome: InvestigationOutcome) -> bool {
    matches!(
        outcome,
        InvestigationOutcome::FixQueued
            | InvestigationOutcome::FixExecuted
            | InvestigationOutcome::FixVerified
            | InvestigationOutcome::FixRejected
            | InvestigationOutcome::CannotFix
    )
}

/// The outcome an attempt records for the broker's reply to its plan: `fix_queued` only while
/// the plan is alive or done; a plan the broker refused, expired or failed needs attention.
pub fn plan_outcome(state: ActionState) -> InvestigationOutcome {
    match state {
        ActionState::Planned
        | ActionState::PendingApproval
        | ActionState::Approved
        | ActionState::Executing
        | ActionState::Completed => InvestigationOutcome::FixQueued,
        ActionState::Rejected | ActionState::Expired | ActionState::Failed => {
            InvestigationOutcome::NeedsAttention
        }
    }
}

/// The last attempt's outcome as far as it still counts: not at all when the finding regressed
/// after the attempt started, and `fix_queued` only within the plan TTL.
fn attempt_outcome(input: &GateInput) -> Option<InvestigationOutcome> {
    let state = &input.state;
    let outcome = state.last_outcome?;
    if let (Some(regressed), Some(started)) = (input.last_regression_at, state.last_started_at)
        && regressed > started
    {
        return None;
    }
    if outcome == InvestigationOutcome::FixQueued
        && state
            .last_started_at
            .is_some_and(|started| input.now >= started + PLAN_TTL)
    {
        return None;
    }
    Some(outcome)
}

fn failed_fix(outcome: InvestigationOutcome) -> bool {
    matches!(
        outcome,
        InvestigationOutcome::FixFailed | InvestigationOutcome::FixVerificationFailed
    )
}

/// The gate.
pub fn decide(input: &GateInput) -> Decision {
    if input.mode == AutonomyLevel::Monitor {
        return Decision::Skip(Skip::MonitorMode);
    }
    if !matches!(input.severity, Severity::Warning | Severity::Critical) {
        return Decision::Skip(Skip::Severity);
    }
    if input.status != FindingStatus::Active {
        return Decision::Skip(Skip::NotActive(input.status));
    }
    // The finding's own outcome (written by the lifecycle) wins over the last attempt's.
    let outcome = input.finding_outcome.or(attempt_outcome(input));
    if let Some(outcome) = outcome.filter(|o| blocks(*o)) {
        return Decision::Skip(Skip::FixOutcome(outcome));
    }
    let state = &input.state;
    if state.attempts >= MAX_ATTEMPTS {
        return Decision::Skip(Skip::AttemptsExhausted);
    }
    if let Some(last) = state.last_started_at {
        let wait = if state.last_status == Some(InvestigationStatus::TimedOut) {
            TIMEOUT_COOLDOWN
        } else if outcome.is_some_and(failed_fix) {
            FAILED_FIX_COOLDOWN
        } else {
            COOLDOWN
        };
        let until = last + wait;
        if input.now < until {
            return Decision::Skip(Skip::CoolingDown { until });
        }
    }
    if state.running_in_tenant >= MAX_CONCURRENT {
        return Decision::Skip(Skip::TenantBusy);
    }
    Decision::Dispatch {
        attempt: state.attempts + 1,
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 2, 0, 0).unwrap()
    }

    fn fresh() -> GateInput {
        GateInput {
            mode: AutonomyLevel::Approval,
            severity: Severity::Warning,
            status: FindingStatus::Active,
            finding_outcome: None,
            last_regression_at: None,
            state: GateState::default(),
            now: now(),
        }
    }

    fn after(minutes: i64, status: InvestigationStatus) -> GateState {
        GateState {
            attempts: 1,
            last_started_at: Some(now() - Duration::minutes(minutes)),
            last_status: Some(status),
            last_outcome: None,
            running_in_tenant: 0,
        }
    }

    #[test]
    fn a_fresh_active_warning_in_approval_mode_is_dispatched_as_attempt_one() {
        assert_eq!(decide(&fresh()), Decision::Dispatch { attempt: 1 });
        let critical = GateInput {
            severity: Severity::Critical,
            mode: AutonomyLevel::Full,
            ..fresh()
        };
        assert_eq!(decide(&critical), Decision::Dispatch { attempt: 1 });
    }

    #[test]
    fn monitor_mode_dispatches_nothing() {
        let input = GateInput {
            mode: AutonomyLevel::Monitor,
            ..fresh()
        };
        assert_eq!(decide(&input), Decision::Skip(Skip::MonitorMode));
    }

    #[test]
    fn info_and_watch_findings_are_not_investigated() {
        for severity in [Severity::Info, Severity::Watch] {
            let input = GateInput {
                severity,
                ..fresh()
            };
            assert_eq!(decide(&input), Decision::Skip(Skip::Severity));
        }
    }

    #[test]
    fn only_active_findings_are_investigated() {
        for status in [
            FindingStatus::Resolved,
            FindingStatus::Dismissed,
            FindingStatus::Suppressed,
            FindingStatus::Snoozed,
        ] {
            let input = GateInput { status, ..fresh() };
            assert_eq!(decide(&input), Decision::Skip(Skip::NotActive(status)));
        }
    }

    #[test]
    fn a_queued_or_ended_fix_blocks_and_other_outcomes_do_not() {
        for outcome in [
            InvestigationOutcome::FixQueued,
            InvestigationOutcome::FixExecuted,
            InvestigationOutcome::FixVerified,
            InvestigationOutcome::FixRejected,
            InvestigationOutcome::CannotFix,
        ] {
            let on_finding = GateInput {
                finding_outcome: Some(outcome),
                ..fresh()
            };
            assert_eq!(
                decide(&on_finding),
                Decision::Skip(Skip::FixOutcome(outcome))
            );
            let on_attempt = GateInput {
                state: GateState {
                    last_outcome: Some(outcome),
                    ..GateState::default()
                },
                ..fresh()
            };
            assert_eq!(
                decide(&on_attempt),
                Decision::Skip(Skip::FixOutcome(outcome))
            );
        }
        let needs_attention = GateInput {
            finding_outcome: Some(InvestigationOutcome::NeedsAttention),
            ..fresh()
        };
        assert_eq!(decide(&needs_attention), Decision::Dispatch { attempt: 1 });
    }

    #[test]
    fn only_a_live_or_done_plan_is_a_queued_fix() {
        for state in ActionState::ALL {
            let expected = match state {
                ActionState::Rejected | ActionState::Expired | ActionState::Failed => {
                    InvestigationOutcome::NeedsAttention
                }
                _ => InvestigationOutcome::FixQueued,
            };
            assert_eq!(plan_outcome(state), expected, "{}", state.as_str());
        }
        // A refused plan does not block the finding.
        let mut input = fresh();
        input.state = after(120, InvestigationStatus::Completed);
        input.state.last_outcome = Some(plan_outcome(ActionState::Rejected));
        assert_eq!(decide(&input), Decision::Dispatch { attempt: 2 });
    }

    #[test]
    fn an_attempt_queued_fix_blocks_only_within_the_plan_ttl() {
        let mut input = fresh();
        input.state = after(29, InvestigationStatus::Completed);
        input.state.last_outcome = Some(InvestigationOutcome::FixQueued);
        assert_eq!(
            decide(&input),
            Decision::Skip(Skip::FixOutcome(InvestigationOutcome::FixQueued))
        );
        // Past the TTL the plan has expired: only the ordinary cooldown remains.
        input.state.last_started_at = Some(now() - Duration::minutes(31));
        assert!(matches!(
            decide(&input),
            Decision::Skip(Skip::CoolingDown { .. })
        ));
        input.state.last_started_at = Some(now() - Duration::minutes(61));
        assert_eq!(decide(&input), Decision::Dispatch { attempt: 2 });
        // The finding's own fix_queued (the broker's word) still blocks.
        input.finding_outcome = Some(InvestigationOutcome::FixQueued);
        assert_eq!(
            decide(&input),
            Decision::Skip(Skip::FixOutcome(InvestigationOutcome::FixQueued))
        );
    }

    #[test]
    fn a_regression_after_the_attempt_voids_its_outcome() {
        for outcome in [
            InvestigationOutcome::FixQueued,
            InvestigationOutcome::FixExecuted,
            InvestigationOutcome::CannotFix,
        ] {
            let mut input = fresh();
            input.state = after(10, InvestigationStatus::Completed);
            input.state.last_outcome = Some(outcome);
            // Regressed before the attempt started: the outcome still counts.
            input.last_regression_at = Some(now() - Duration::minutes(20));
            assert_eq!(decide(&input), Decision::Skip(Skip::FixOutcome(outcome)));
            // Regressed after it: a new occurrence, only the cooldown applies.
            input.last_regression_at = Some(now() - Duration::minutes(5));
            assert!(matches!(
                decide(&input),
                Decision::Skip(Skip::CoolingDown { .. })
            ));
            input.state = after(70, InvestigationStatus::Completed);
            input.state.last_outcome = Some(outcome);
            assert_eq!(decide(&input), Decision::Dispatch { attempt: 2 });
        }
    }

    #[test]
    fn three_attempts_are_the_most() {
        let mut input = fresh();
        input.state = after(120, InvestigationStatus::Completed);
        input.state.attempts = 2;
        assert_eq!(decide(&input), Decision::Dispatch { attempt: 3 });
        input.state.attempts = 3;
        assert_eq!(decide(&input), Decision::Skip(Skip::AttemptsExhausted));
    }

    #[test]
    fn cooldowns_follow_the_last_outcome() {
        let cooling =
            |input: &GateInput| matches!(decide(input), Decision::Skip(Skip::CoolingDown { .. }));
        // One hour after an ordinary attempt.
        let mut input = fresh();
        input.state = after(59, InvestigationStatus::Completed);
        assert!(cooling(&input));
        input.state = after(61, InvestigationStatus::Completed);
        assert_eq!(decide(&input), Decision::Dispatch { attempt: 2 });
        // Ten minutes after a timeout.
        input.state = after(9, InvestigationStatus::TimedOut);
        assert!(cooling(&input));
        input.state = after(11, InvestigationStatus::TimedOut);
        assert_eq!(decide(&input), Decision::Dispatch { attempt: 2 });
        // Twenty minutes after a failed fix.
        input.state = after(19, InvestigationStatus::Completed);
        input.finding_outcome = Some(InvestigationOutcome::FixFailed);
        assert!(cooling(&input));
        input.state = after(21, InvestigationStatus::Completed);
        assert_eq!(decide(&input), Decision::Dispatch { attempt: 2 });
        // The until is exact.
        input.state = after(5, InvestigationStatus::Completed);
        assert_eq!(
            decide(&input),
            Decision::Skip(Skip::CoolingDown {
                until: now() + Duration::minutes(15)
            })
        );
    }

    #[test]
    fn at_most_three_run_at_once_per_tenant() {
        let mut input = fresh();
        input.state.running_in_tenant = 2;
        assert_eq!(decide(&input), Decision::Dispatch { attempt: 1 });
        input.state.running_in_tenant = 3;
        assert_eq!(decide(&input), Decision::Skip(Skip::TenantBusy));
    }
}
