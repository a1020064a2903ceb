//! Absence-based (stale) auto-resolution after a Watch run (FIND-13, slice 4 §3a).
//!
//! A finding resolves from absence only when all of these hold:
//!
//! - the run was a **successful full** run (never after an error run, never after a scoped run,
//!   which did not look at everything);
//! - its category supports stale auto-resolve (`performance`, `capacity` only);
//! - it is open (active or snoozed) and was already known when the run started;
//! - the run neither reported nor assessed it;
//! - its last verdict is not `uncertain`.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::id::FindingId;
use super::model::{Finding, LifecycleEvent, LifecycleEventType};
use super::status::{StatusEvent, transition};
use crate::patrol::run::RunId;

/// How the run that triggers reconciliation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RunOutcome {
    /// A full (unscoped) run that completed without error.
    SuccessfulFull {
        run_id: RunId,
        started_at: DateTime<Utc>,
    },
    /// A scoped run that completed without error.
    SuccessfulScoped { run_id: RunId },
    /// A run that ended in error.
    Error { run_id: RunId },
}

/// One finding resolved from absence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleResolution {
    pub finding: Finding,
    pub new_events: Vec<LifecycleEvent>,
}

/// The reason recorded on a stale resolution.
pub const STALE_RESOLVE_REASON: &str = "not re-detected by a successful full patrol run";

/// Which of `open` findings resolve from absence after the run (rules in the module
/// documentation). `touched` are the ids the run reported (after merging) or assessed.
pub fn stale_reconcile(
    open: &[Finding],
    outcome: &RunOutcome,
    touched: &HashSet<FindingId>,
    now: DateTime<Utc>,
) -> Vec<StaleResolution> {
    let RunOutcome::SuccessfulFull { run_id, started_at } = *outcome else {
        return Vec::new();
    };
    open.iter()
        .filter(|f| {
            f.status.is_open()
                && f.category.supports_stale_auto_resolve()
                && !touched.contains(&f.id)
                && !f.is_uncertain()
                && f.last_seen_at < started_at
        })
        .filter_map(|f| {
            let to = transition(f.status, StatusEvent::AutoResolve).ok()?;
            let event = LifecycleEvent::new(LifecycleEventType::AutoResolved, now)
                .statuses(f.status, to)
                .message(STALE_RESOLVE_REASON)
                .meta("reason", "stale")
                .meta("run_id", run_id.to_string());
            let mut next = f.clone();
            next.status = to;
            next.resolved_at = Some(now);
            next.auto_resolved = true;
            next.resolve_reason = STALE_RESOLVE_REASON.to_owned();
            next.snoozed_until = None;
            next.push_event(event.clone());
            Some(StaleResolution {
                finding: next,
                new_events: vec![event],
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::model::{Assessment, Category, FindingStatus, Verdict};
    use crate::finding::test_support::{finding, run_id, t0};
    use chrono::Duration;
    use proptest::prelude::*;

    fn full() -> RunOutcome {
        RunOutcome::SuccessfulFull {
            run_id: run_id(9),
            started_at: t0() + Duration::minutes(30),
        }
    }

    fn in_category(key: &str, category: Category) -> Finding {
        let mut f = finding(key);
        f.category = category;
        f
    }

    #[test]
    fn only_performance_and_capacity_resolve_from_absence() {
        let open: Vec<_> = Category::ALL
            .into_iter()
            .map(|c| in_category(&format!("k-{c}"), c))
            .collect();
        let now = t0() + Duration::hours(1);
        let resolved = stale_reconcile(&open, &full(), &HashSet::new(), now);
        let categories: Vec<_> = resolved.iter().map(|r| r.finding.category).collect();
        assert_eq!(categories, [Category::Performance, Category::Capacity]);
        for r in &resolved {
            assert_eq!(r.finding.status, FindingStatus::Resolved);
            assert!(r.finding.auto_resolved);
            assert_eq!(r.finding.resolved_at, Some(now));
            assert_eq!(r.new_events.len(), 1);
            assert_eq!(r.new_events[0].event_type, LifecycleEventType::AutoResolved);
            assert_eq!(r.new_events[0].metadata["reason"], "stale");
        }
    }

    #[test]
    fn nothing_resolves_after_an_error_or_scoped_run() {
        let open = [in_category("cpu-high", Category::Performance)];
        for outcome in [
            RunOutcome::Error { run_id: run_id(1) },
            RunOutcome::SuccessfulScoped { run_id: run_id(1) },
        ] {
            assert!(stale_reconcile(&open, &outcome, &HashSet::new(), t0()).is_empty());
        }
    }

    #[test]
    fn touched_uncertain_and_fresh_findings_are_kept() {
        let touched = in_category("cpu-high", Category::Performance);
        let mut uncertain = in_category("memory-high", Category::Performance);
        uncertain.last_assessment = Some(Assessment {
            verdict: Verdict::Uncertain,
            run_id: run_id(8),
            assessed_at: t0(),
        });
        let mut fresh = in_category("disk-high", Category::Capacity);
        fresh.last_seen_at = t0() + Duration::minutes(31);
        let mut dismissed = in_category("swap-high", Category::Performance);
        dismissed.status = FindingStatus::Dismissed;
        let open = [touched.clone(), uncertain, fresh, dismissed];
        let ids = HashSet::from([touched.id]);
        assert!(stale_reconcile(&open, &full(), &ids, t0() + Duration::hours(1)).is_empty());
    }

    proptest! {
        #[test]
        fn never_resolves_an_ineligible_category(cat in 0usize..6, status in 0usize..5, error in any::<bool>()) {
            let mut f = in_category("k", Category::ALL[cat]);
            f.status = FindingStatus::ALL[status];
            let outcome = if error { RunOutcome::Error { run_id: run_id(1) } } else { full() };
            let out = stale_reconcile(std::slice::from_ref(&f), &outcome, &HashSet::new(), t0() + Duration::hours(1));
            let eligible = !error && f.category.supports_stale_auto_resolve() && f.status.is_open();
            prop_assert_eq!(out.len(), usize::from(eligible));
        }
    }
}
