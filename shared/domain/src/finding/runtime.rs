//! Synthetic Patrol runtime findings on the `ai-service` resource (slice 5 §9).
//!
//! When a Patrol run fails for a provider, tool or budget reason, Patrol is blind: the runtime
//! raises one finding on the synthetic [`AI_SERVICE_RESOURCE_ID`] resource (not an inventory
//! resource). It is a runtime condition, so:
//!
//! - operators cannot acknowledge, snooze, dismiss, resolve or suppress it
//!   ([`refuses_operator_action`]); the recovery path is fixing the provider settings;
//! - stale (absence) reconciliation never resolves it (its category is not
//!   performance/capacity);
//! - it clears only through [`clear_runtime_failure`]: after a successful run, or a preflight
//!   that observed a tool call.

use chrono::{DateTime, Utc};

use super::model::{Category, Finding, LifecycleEvent, LifecycleEventType, Severity};
use super::report::ReportedFinding;
use super::status::{OperatorAction, StatusEvent, transition};
use crate::patrol::run::ErrorCause;

/// The synthetic resource Patrol runtime failures are raised on.
pub const AI_SERVICE_RESOURCE_ID: &str = "ai-service";
/// The key of the runtime failure finding: one open finding whatever the cause.
pub const RUNTIME_FAILURE_KEY: &str = "patrol-runtime-failure";

/// Why a runtime failure finding cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeRecovery {
    /// A Patrol run (full, or provider-backed scoped) succeeded.
    SuccessfulRun,
    /// A tool-call preflight observed a tool call.
    PreflightToolCall,
}

impl RuntimeRecovery {
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeRecovery::SuccessfulRun => "successful_run",
            RuntimeRecovery::PreflightToolCall => "preflight_tool_call",
        }
    }

    fn message(self) -> &'static str {
        match self {
            RuntimeRecovery::SuccessfulRun => "a Patrol run succeeded",
            RuntimeRecovery::PreflightToolCall => {
                "a Patrol preflight reached the model and observed a tool call"
            }
        }
    }
}

/// Whether `finding` is a synthetic Patrol runtime finding.
pub fn is_runtime_finding(finding: &Finding) -> bool {
    finding.resource_id == AI_SERVICE_RESOURCE_ID
}

/// Whether a run failing with `cause` means Patrol's runtime (provider, tool calling, budget) is
/// failing. Refusals before any call (`not_ready`, `scope_empty`), lost runners, cancellations
/// and internal errors are not runtime failures of the provider path.
pub fn is_runtime_failure(cause: ErrorCause) -> bool {
    matches!(
        cause,
        ErrorCause::ProviderError
            | ErrorCause::ProviderAuth
            | ErrorCause::ProviderQuota
            | ErrorCause::RateLimited
            | ErrorCause::ContextWindow
            | ErrorCause::ToolCallingUnsupported
            | ErrorCause::Connectivity
            | ErrorCause::BudgetExhausted
            | ErrorCause::Timeout
    )
}

/// The report of a runtime failure: critical (Patrol cannot see the fleet), on
/// [`AI_SERVICE_RESOURCE_ID`], naming the cause and the run's stored detail.
pub fn runtime_failure_report(cause: ErrorCause, detail: &str) -> ReportedFinding {
    ReportedFinding {
        key: RUNTIME_FAILURE_KEY.to_owned(),
        severity: Severity::Critical,
        category: Category::General,
        resource_id: AI_SERVICE_RESOURCE_ID.to_owned(),
        resource_name: "Patrol AI service".to_owned(),
        resource_type: "ai-service".to_owned(),
        title: "Patrol runtime failure: the model provider path is failing".to_owned(),
        description: format!(
            "Patrol could not complete its run ({}): {}. Patrol is blind until a run succeeds.",
            cause.as_str(),
            cause.summary()
        ),
        recommendation: "Correct the Patrol provider and model in Pulse Intelligence > Provider \
                         & Models; the next run or preflight re-evaluates this finding."
            .to_owned(),
        evidence: format!("run error cause={}; detail: {detail}", cause.as_str()),
        impact: "No infrastructure problem is detected while Patrol cannot run.".to_owned(),
    }
}

/// Whether an operator action on `finding` is refused because it is a runtime finding
/// (acknowledge, snooze, dismiss, resolve and suppress are; notes and undos are not).
pub fn refuses_operator_action(finding: &Finding, action: &OperatorAction) -> bool {
    is_runtime_finding(finding)
        && matches!(
            action,
            OperatorAction::Acknowledge
                | OperatorAction::Snooze { .. }
                | OperatorAction::Dismiss { .. }
                | OperatorAction::Resolve { .. }
                | OperatorAction::Suppress { .. }
        )
}

/// Resolves an open runtime finding on `recovery`. `None` when `finding` is not an open runtime
/// finding.
pub fn clear_runtime_failure(
    finding: &Finding,
    recovery: RuntimeRecovery,
    now: DateTime<Utc>,
) -> Option<(Finding, LifecycleEvent)> {
    if !is_runtime_finding(finding) || !finding.status.is_open() {
        return None;
    }
    let to = transition(finding.status, StatusEvent::AutoResolve).ok()?;
    let event = LifecycleEvent::new(LifecycleEventType::AutoResolved, now)
        .statuses(finding.status, to)
        .message(recovery.message())
        .meta("reason", recovery.as_str());
    let mut next = finding.clone();
    next.status = to;
    next.resolved_at = Some(now);
    next.auto_resolved = true;
    next.resolve_reason = recovery.message().to_owned();
    next.snoozed_until = None;
    next.push_event(event.clone());
    Some((next, event))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use chrono::Duration;

    use super::*;
    use crate::finding::model::FindingStatus;
    use crate::finding::report::{ReportContext, report};
    use crate::finding::stale::{RunOutcome, stale_reconcile};
    use crate::finding::status::{OperatorRefusal, apply_operator_action};
    use crate::finding::suppression::SuppressBreadth;
    use crate::finding::test_support::{finding, run_id, t0};

    fn runtime() -> Finding {
        let ctx = ReportContext {
            existing_same_id: None,
            active_on_resource: &[],
            suppressions: &[],
        };
        let r = runtime_failure_report(ErrorCause::ProviderAuth, "401 from the provider");
        report(ctx, &r, Some(run_id(1)), t0())
            .expect("a valid report")
            .finding
    }

    #[test]
    fn the_report_is_a_valid_critical_finding_on_the_ai_service() {
        let f = runtime();
        assert!(is_runtime_finding(&f));
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(f.status, FindingStatus::Active);
        assert!(f.evidence.contains("provider_auth"), "{}", f.evidence);
        assert!(!is_runtime_finding(&finding("cpu-high")));
    }

    #[test]
    fn only_provider_tool_and_budget_causes_are_runtime_failures() {
        let runtime: Vec<_> = ErrorCause::ALL
            .into_iter()
            .filter(|c| is_runtime_failure(*c))
            .collect();
        assert_eq!(runtime.len(), 9);
        for cause in [
            ErrorCause::RunnerLost,
            ErrorCause::ScopeEmpty,
            ErrorCause::NotReady,
            ErrorCause::Cancelled,
            ErrorCause::Internal,
        ] {
            assert!(!is_runtime_failure(cause), "{cause}");
        }
    }

    #[test]
    fn operators_cannot_triage_it_away() {
        let f = runtime();
        let refused = [
            OperatorAction::Acknowledge,
            OperatorAction::Snooze {
                duration_seconds: 3600,
            },
            OperatorAction::Dismiss {
                reason: crate::finding::DismissedReason::NotAnIssue,
                note: String::new(),
            },
            OperatorAction::Resolve {
                note: "fixed".to_owned(),
            },
            OperatorAction::Suppress {
                breadth: SuppressBreadth::default(),
                allow_broad_scope: true,
            },
        ];
        for action in &refused {
            assert_eq!(
                apply_operator_action(&f, action, "ops", t0()),
                Err(OperatorRefusal::RuntimeFinding),
                "{action:?}"
            );
        }
        let note = OperatorAction::Note {
            text: "provider key rotated".to_owned(),
        };
        assert!(apply_operator_action(&f, &note, "ops", t0()).is_ok());
        // Ordinary findings are unaffected.
        assert!(apply_operator_action(&finding("cpu-high"), &refused[0], "ops", t0()).is_ok());
    }

    #[test]
    fn stale_reconcile_never_resolves_it() {
        let f = runtime();
        let outcome = RunOutcome::SuccessfulFull {
            run_id: run_id(2),
            started_at: t0() + Duration::hours(1),
        };
        let resolved = stale_reconcile(&[f], &outcome, &HashSet::new(), t0() + Duration::hours(2));
        assert!(resolved.is_empty());
    }

    #[test]
    fn a_recovery_resolves_it_once() {
        let f = runtime();
        let now = t0() + Duration::minutes(5);
        let (cleared, event) =
            clear_runtime_failure(&f, RuntimeRecovery::PreflightToolCall, now).expect("cleared");
        assert_eq!(cleared.status, FindingStatus::Resolved);
        assert!(cleared.auto_resolved);
        assert_eq!(cleared.resolved_at, Some(now));
        assert_eq!(event.event_type, LifecycleEventType::AutoResolved);
        assert_eq!(event.metadata["reason"], "preflight_tool_call");
        assert!(clear_runtime_failure(&cleared, RuntimeRecovery::SuccessfulRun, now).is_none());
        assert!(
            clear_runtime_failure(&finding("cpu-high"), RuntimeRecovery::SuccessfulRun, now)
                .is_none()
        );
    }
}
