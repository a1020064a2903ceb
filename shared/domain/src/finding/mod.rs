//! Patrol findings, pure parts: identity, the record and its bounded lifecycle, and the rules
//! every writer goes through. No IO and no clock: time and run identity are passed in, and each
//! function returns the record to write. `pulse-store::findings` is the only caller that
//! persists the results.
//!
//! - [`report`]: `patrol_report_finding` (new, heartbeat re-detection, merge of an equivalent
//!   sibling, `content_replaced`, regression);
//! - [`assess`]: `patrol_assess_finding` verdicts, with the fail-closed verifier gate keyed on
//!   [`has_deterministic_verifier`];
//! - [`stale_reconcile`]: absence-based resolution after a successful full run;
//! - [`apply_operator_action`] and [`transition`]: the status state machine and the operator
//!   actions (acknowledge, snooze, dismiss, resolve, suppress, note, undo);
//! - [`operator_state`]: a resource's operator state (maintenance window, intentionally
//!   offline) auto-dismissing its findings, and waking them once it lifted.

mod assess;
pub mod equivalence;
mod id;
mod model;
pub mod operator_state;
mod report;
mod runtime;
mod stale;
mod status;
mod suppression;

pub use assess::{AssessDecision, AssessRefusal, VerdictInput, VerifierOutcome, assess};
pub use id::{
    FindingId, FindingIdError, FindingKey, FindingKeyError, MAX_KEY_LEN, VerifierKey,
    has_deterministic_verifier,
};
pub use model::{
    Assessment, Category, DismissedReason, Finding, FindingStatus, InvestigationOutcome,
    LifecycleEvent, LifecycleEventType, MAX_LIFECYCLE_EVENTS, Severity, SeverityCounts, Verdict,
};
pub use report::{
    MAX_EVIDENCE_CHARS, MAX_RESOURCE_ID_CHARS, MAX_TEXT_CHARS, MAX_TITLE_CHARS, ReportContext,
    ReportDecision, ReportError, ReportKind, ReportedFinding, report, report_with_signals,
};
pub use runtime::{
    AI_SERVICE_RESOURCE_ID, RUNTIME_FAILURE_KEY, RuntimeRecovery, clear_runtime_failure,
    is_runtime_failure, is_runtime_finding, refuses_operator_action, runtime_failure_report,
};
pub use stale::{RunOutcome, STALE_RESOLVE_REASON, StaleResolution, stale_reconcile};
pub use status::{
    IllegalTransition, MAX_NOTE_CHARS, MAX_SNOOZE, MAX_SNOOZE_HOURS, MIN_SNOOZE, OperatorAction,
    OperatorDecision, OperatorRefusal, StatusEvent, WILL_FIX_LATER_REMINDER, apply_operator_action,
    lift_suppression, suppress_under, transition,
};
pub use suppression::{
    BroadScopeRefused, SuppressBreadth, SuppressionId, SuppressionIdError, SuppressionRule,
};

#[cfg(test)]
pub(crate) mod test_support {
    use chrono::{DateTime, TimeZone, Utc};
    use uuid::Uuid;

    use super::*;
    use crate::patrol::run::RunId;

    pub fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0)
            .single()
            .expect("valid time")
    }

    pub fn run_id(n: u128) -> RunId {
        RunId::from_uuid(Uuid::from_u128(n))
    }

    pub fn reported(key: &str) -> ReportedFinding {
        ReportedFinding {
            key: key.to_owned(),
            severity: Severity::Warning,
            category: Category::Performance,
            resource_id: "host:h1".to_owned(),
            resource_name: "h1".to_owned(),
            resource_type: "host".to_owned(),
            title: "CPU saturated on h1".to_owned(),
            description: "cpu above 95% for 20 minutes".to_owned(),
            recommendation: "find the process holding the cpu".to_owned(),
            evidence: "cpu_percent=97 over 20m".to_owned(),
            impact: String::new(),
        }
    }

    /// A new active finding under `key` detected at [`t0`] by run 1.
    pub fn finding(key: &str) -> Finding {
        let ctx = ReportContext {
            existing_same_id: None,
            active_on_resource: &[],
            suppressions: &[],
        };
        report(ctx, &reported(key), Some(run_id(1)), t0())
            .expect("valid report")
            .finding
    }
}

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::test_support::{reported, run_id, t0};
    use super::*;

    #[test]
    fn finding_wire_shape() {
        let ctx = ReportContext {
            existing_same_id: None,
            active_on_resource: &[],
            suppressions: &[],
        };
        let mut r = reported("high-cpu");
        r.impact = "checkout requests time out".to_owned();
        let first = report(ctx, &r, Some(run_id(1)), t0()).expect("new").finding;
        let acked = apply_operator_action(
            &first,
            &OperatorAction::Acknowledge,
            "ops",
            t0() + Duration::minutes(1),
        )
        .expect("ack")
        .finding;
        insta::assert_json_snapshot!("finding_wire_shape", acked);
    }
}
