//! Operator state of a resource and what it does to findings (upstream
//! `ResourceOperatorStateProjection`, `findOperatorStateDismissCause`).
//!
//! One [`OperatorStateProjection`] carries every operator-set signal of a resource (maintenance
//! window, intentionally offline, never auto-remediate, criticality), read in one query by the
//! finding store and the action broker alike, so suppression and the remediation lock cannot
//! drift apart.
//!
//! Rules, applied by the finding store after [`super::report`] decided what a report writes:
//!
//! - a finding that ends up open (new, re-detected, merged or regressed) on a resource with an
//!   active suppression cause is recorded and at once **auto-dismissed** with reason
//!   `expected_behavior` and a `dismissed` event carrying `operator_state_cause`
//!   (`maintenance_window`, with `maintenance_end_at`, or `intentionally_offline`); an active
//!   maintenance window wins over intentionally offline (the time-bounded reason is the more
//!   honest one to show);
//! - a re-detection of a finding dismissed that way, once no cause is active any more, **wakes**
//!   it with a `suppression_lifted` event. The wake gate reads the lifecycle newest first and
//!   stops at the first `dismissed` event: only when that one carries `operator_state_cause`
//!   does the finding wake, so a later manual dismissal is never undone;
//! - a dismissed finding is not active, so the investigation gate never spends budget on it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::model::{DismissedReason, Finding, FindingStatus, LifecycleEvent, LifecycleEventType};
use super::report::{ReportDecision, ReportedFinding, take_content};
use super::runtime::is_runtime_finding;
use super::status::{StatusEvent, transition};

/// Lifecycle metadata key naming why operator state dismissed a finding.
pub const OPERATOR_STATE_CAUSE: &str = "operator_state_cause";
/// Lifecycle metadata key with the end of the maintenance window (RFC 3339).
pub const MAINTENANCE_END_AT: &str = "maintenance_end_at";
/// The actor recorded on operator-state transitions.
pub const OPERATOR_STATE_ACTOR: &str = "system:operator_state";
/// Longest operator note, in characters.
pub const MAX_OPERATOR_NOTE_CHARS: usize = 2000;

/// How much a resource matters to the operator. Orders attention among findings of the same
/// severity only; never changes a severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum Criticality {
    Low,
    Medium,
    High,
    Critical,
}

impl Criticality {
    pub const ALL: [Criticality; 4] = [
        Criticality::Low,
        Criticality::Medium,
        Criticality::High,
        Criticality::Critical,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Criticality::Low => "low",
            Criticality::Medium => "medium",
            Criticality::High => "high",
            Criticality::Critical => "critical",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// A maintenance window: from `starts_at` (or from when it was set) until `ends_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct MaintenanceWindow {
    #[serde(default)]
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: DateTime<Utc>,
}

/// Why a maintenance window was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("maintenance_window.ends_at must be after maintenance_window.starts_at")]
    EndsBeforeStart,
}

impl MaintenanceWindow {
    pub fn new(
        starts_at: Option<DateTime<Utc>>,
        ends_at: DateTime<Utc>,
    ) -> Result<Self, WindowError> {
        if starts_at.is_some_and(|start| ends_at <= start) {
            return Err(WindowError::EndsBeforeStart);
        }
        Ok(Self { starts_at, ends_at })
    }

    /// Whether `now` falls inside the window (`starts_at <= now < ends_at`).
    pub fn is_active(&self, now: DateTime<Utc>) -> bool {
        self.starts_at.is_none_or(|start| start <= now) && now < self.ends_at
    }
}

/// Every operator-set signal of one resource. A resource without stored state has the default:
/// nothing set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorStateProjection {
    #[serde(default)]
    pub maintenance_window: Option<MaintenanceWindow>,
    #[serde(default)]
    pub intentionally_offline: bool,
    #[serde(default)]
    pub never_auto_remediate: bool,
    #[serde(default)]
    pub criticality: Option<Criticality>,
}

/// Why operator state silences findings of a resource right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuppressionCause {
    MaintenanceWindow { ends_at: DateTime<Utc> },
    IntentionallyOffline,
}

impl SuppressionCause {
    /// The `operator_state_cause` word.
    pub fn as_str(self) -> &'static str {
        match self {
            SuppressionCause::MaintenanceWindow { .. } => "maintenance_window",
            SuppressionCause::IntentionallyOffline => "intentionally_offline",
        }
    }
}

impl OperatorStateProjection {
    /// The cause that silences the resource's findings at `now`; an active maintenance window
    /// wins over intentionally offline.
    pub fn suppression_cause(&self, now: DateTime<Utc>) -> Option<SuppressionCause> {
        if let Some(window) = self.maintenance_window.filter(|w| w.is_active(now)) {
            return Some(SuppressionCause::MaintenanceWindow {
                ends_at: window.ends_at,
            });
        }
        self.intentionally_offline
            .then_some(SuppressionCause::IntentionallyOffline)
    }
}

/// The `operator_state_cause` of the newest `dismissed` event, if that event has one. Scans
/// newest first and stops at the first `dismissed` event: a manual dismissal after an automatic
/// one answers `None`.
pub fn operator_state_dismiss_cause(lifecycle: &[LifecycleEvent]) -> Option<&str> {
    lifecycle
        .iter()
        .rev()
        .find(|e| e.event_type == LifecycleEventType::Dismissed)
        .and_then(|e| e.metadata.get(OPERATOR_STATE_CAUSE))
        .map(String::as_str)
}

/// Auto-dismisses an open finding under `cause`. `None` when the finding is not open (or is a
/// Patrol runtime finding, which operator state of a resource never concerns).
pub fn operator_dismiss(
    finding: &Finding,
    cause: SuppressionCause,
    now: DateTime<Utc>,
) -> Option<(Finding, LifecycleEvent)> {
    if !finding.status.is_open() || is_runtime_finding(finding) {
        return None;
    }
    let to = transition(finding.status, StatusEvent::Dismiss).ok()?;
    let reason = DismissedReason::ExpectedBehavior;
    let mut event = LifecycleEvent::new(LifecycleEventType::Dismissed, now)
        .statuses(finding.status, to)
        .meta("actor", OPERATOR_STATE_ACTOR)
        .meta("reason", reason.as_str())
        .meta(OPERATOR_STATE_CAUSE, cause.as_str());
    if let SuppressionCause::MaintenanceWindow { ends_at } = cause {
        event = event.meta(MAINTENANCE_END_AT, ends_at.to_rfc3339());
    }
    let mut next = finding.clone();
    next.status = to;
    next.dismissed_reason = Some(reason);
    next.snoozed_until = None;
    next.remind_at = None;
    next.push_event(event.clone());
    Some((next, event))
}

/// Wakes a finding operator state dismissed, once no cause is active. `None` when the finding
/// is not dismissed or its newest dismissal was not operator state's.
pub fn wake_after_suppression(
    finding: &Finding,
    now: DateTime<Utc>,
) -> Option<(Finding, LifecycleEvent)> {
    if finding.status != FindingStatus::Dismissed {
        return None;
    }
    let cause = operator_state_dismiss_cause(&finding.lifecycle)?.to_owned();
    let to = transition(finding.status, StatusEvent::UndoDismiss).ok()?;
    let event = LifecycleEvent::new(LifecycleEventType::SuppressionLifted, now)
        .statuses(finding.status, to)
        .meta("actor", OPERATOR_STATE_ACTOR)
        .meta(OPERATOR_STATE_CAUSE, cause);
    let mut next = finding.clone();
    next.status = to;
    next.dismissed_reason = None;
    next.remind_at = None;
    next.push_event(event.clone());
    Some((next, event))
}

/// Applies the resource's operator state to what a report decided: auto-dismiss under an
/// active cause, or wake a re-detected finding whose operator-state suppression has lifted (it
/// takes the report's content, as a reopened finding does).
pub fn apply_to_report(
    decision: &mut ReportDecision,
    incoming: &ReportedFinding,
    cause: Option<SuppressionCause>,
    now: DateTime<Utc>,
) {
    let change = match cause {
        Some(cause) => operator_dismiss(&decision.finding, cause, now),
        None => wake_after_suppression(&decision.finding, now).map(|(mut woken, event)| {
            take_content(&mut woken, incoming);
            woken.severity = incoming.severity;
            (woken, event)
        }),
    };
    if let Some((finding, event)) = change {
        decision.finding = finding;
        decision.new_events.push(event);
    }
}

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::*;
    use crate::finding::report::{ReportContext, ReportKind, report};
    use crate::finding::status::{OperatorAction, apply_operator_action};
    use crate::finding::test_support::{reported, run_id, t0};

    fn maintenance(hours: i64) -> OperatorStateProjection {
        OperatorStateProjection {
            maintenance_window: Some(
                MaintenanceWindow::new(
                    Some(t0() - Duration::hours(1)),
                    t0() + Duration::hours(hours),
                )
                .unwrap(),
            ),
            ..Default::default()
        }
    }

    fn offline() -> OperatorStateProjection {
        OperatorStateProjection {
            intentionally_offline: true,
            ..Default::default()
        }
    }

    /// Reports `key` against `existing` under `state` at `now`, as the store does.
    fn report_under(
        existing: Option<&Finding>,
        state: &OperatorStateProjection,
        now: DateTime<Utc>,
    ) -> ReportDecision {
        let incoming = reported("high-cpu");
        let open: Vec<Finding> = existing
            .filter(|f| f.status.is_open())
            .cloned()
            .into_iter()
            .collect();
        let ctx = ReportContext {
            existing_same_id: existing,
            active_on_resource: &open,
            suppressions: &[],
        };
        let mut decision = report(ctx, &incoming, Some(run_id(2)), now).expect("valid");
        apply_to_report(&mut decision, &incoming, state.suppression_cause(now), now);
        decision
    }

    #[test]
    fn a_window_is_active_from_its_start_until_its_end() {
        let w = MaintenanceWindow::new(Some(t0()), t0() + Duration::hours(1)).unwrap();
        assert!(!w.is_active(t0() - Duration::seconds(1)));
        assert!(w.is_active(t0()));
        assert!(!w.is_active(t0() + Duration::hours(1)));
        let open_start = MaintenanceWindow::new(None, t0()).unwrap();
        assert!(open_start.is_active(t0() - Duration::days(300)));
        assert_eq!(
            MaintenanceWindow::new(Some(t0()), t0()),
            Err(WindowError::EndsBeforeStart)
        );
        assert_eq!(
            MaintenanceWindow::new(Some(t0()), t0() - Duration::seconds(1)),
            Err(WindowError::EndsBeforeStart)
        );
    }

    #[test]
    fn maintenance_wins_over_intentionally_offline() {
        let mut both = maintenance(2);
        both.intentionally_offline = true;
        assert_eq!(
            both.suppression_cause(t0()),
            Some(SuppressionCause::MaintenanceWindow {
                ends_at: t0() + Duration::hours(2)
            })
        );
        // After the window only the indefinite cause remains.
        assert_eq!(
            both.suppression_cause(t0() + Duration::hours(3)),
            Some(SuppressionCause::IntentionallyOffline)
        );
        assert_eq!(
            OperatorStateProjection::default().suppression_cause(t0()),
            None
        );
    }

    #[test]
    fn a_new_finding_in_maintenance_is_recorded_and_auto_dismissed() {
        let d = report_under(None, &maintenance(2), t0());
        assert_eq!(d.kind, ReportKind::New);
        assert_eq!(d.finding.status, FindingStatus::Dismissed);
        assert_eq!(
            d.finding.dismissed_reason,
            Some(DismissedReason::ExpectedBehavior)
        );
        let types: Vec<_> = d.new_events.iter().map(|e| e.event_type).collect();
        assert_eq!(
            types,
            [LifecycleEventType::Detected, LifecycleEventType::Dismissed]
        );
        let dismissed = &d.new_events[1];
        assert_eq!(
            dismissed.metadata[OPERATOR_STATE_CAUSE],
            "maintenance_window"
        );
        assert_eq!(
            dismissed.metadata[MAINTENANCE_END_AT],
            (t0() + Duration::hours(2)).to_rfc3339()
        );
        assert_eq!(d.finding.lifecycle, d.new_events);
        // Dismissed is not active: the investigation gate skips it.
        assert!(!d.finding.status.is_open());
    }

    #[test]
    fn intentionally_offline_dismisses_without_an_end() {
        let d = report_under(None, &offline(), t0());
        assert_eq!(d.finding.status, FindingStatus::Dismissed);
        let dismissed = d.new_events.last().unwrap();
        assert_eq!(
            dismissed.metadata[OPERATOR_STATE_CAUSE],
            "intentionally_offline"
        );
        assert!(!dismissed.metadata.contains_key(MAINTENANCE_END_AT));
    }

    #[test]
    fn an_active_finding_re_detected_in_maintenance_is_dismissed() {
        let first = report_under(None, &OperatorStateProjection::default(), t0()).finding;
        assert_eq!(first.status, FindingStatus::Active);
        let d = report_under(Some(&first), &maintenance(2), t0() + Duration::minutes(5));
        assert_eq!(d.kind, ReportKind::Redetected);
        assert_eq!(d.finding.status, FindingStatus::Dismissed);
        // Still dismissed on the next heartbeat inside the window: no second dismissal.
        let again = report_under(
            Some(&d.finding),
            &maintenance(2),
            t0() + Duration::minutes(10),
        );
        assert_eq!(again.finding.status, FindingStatus::Dismissed);
        assert!(again.new_events.is_empty(), "{:?}", again.new_events);
    }

    #[test]
    fn a_suppressed_finding_wakes_once_the_suppression_lifted() {
        let held = report_under(None, &maintenance(1), t0()).finding;
        let after = t0() + Duration::hours(2);
        let d = report_under(Some(&held), &maintenance(1), after);
        assert_eq!(d.finding.status, FindingStatus::Active);
        assert_eq!(d.finding.dismissed_reason, None);
        let lifted = d.new_events.last().unwrap();
        assert_eq!(lifted.event_type, LifecycleEventType::SuppressionLifted);
        assert_eq!(lifted.metadata[OPERATOR_STATE_CAUSE], "maintenance_window");
        assert_eq!(lifted.from, Some(FindingStatus::Dismissed));
        assert_eq!(lifted.to, Some(FindingStatus::Active));
    }

    #[test]
    fn a_manual_dismissal_after_the_automatic_one_is_never_woken() {
        let held = report_under(None, &maintenance(1), t0()).finding;
        // The operator undoes the automatic dismissal and dismisses it by hand.
        let undone = apply_operator_action(&held, &OperatorAction::UndoDismiss, "ops", t0())
            .unwrap()
            .finding;
        let manual = apply_operator_action(
            &undone,
            &OperatorAction::Dismiss {
                reason: DismissedReason::NotAnIssue,
                note: String::new(),
            },
            "ops",
            t0() + Duration::minutes(1),
        )
        .unwrap()
        .finding;
        assert_eq!(operator_state_dismiss_cause(&manual.lifecycle), None);
        let d = report_under(
            Some(&manual),
            &OperatorStateProjection::default(),
            t0() + Duration::hours(2),
        );
        assert_eq!(d.finding.status, FindingStatus::Dismissed);
        assert_eq!(
            d.finding.dismissed_reason,
            Some(DismissedReason::NotAnIssue)
        );
        assert!(
            d.new_events
                .iter()
                .all(|e| e.event_type != LifecycleEventType::SuppressionLifted)
        );
    }

    #[test]
    fn a_resolved_finding_regressing_in_maintenance_is_dismissed() {
        let first = report_under(None, &OperatorStateProjection::default(), t0()).finding;
        let resolved = apply_operator_action(
            &first,
            &OperatorAction::Resolve {
                note: "fixed".to_owned(),
            },
            "ops",
            t0(),
        )
        .unwrap()
        .finding;
        let d = report_under(Some(&resolved), &offline(), t0() + Duration::hours(1));
        assert_eq!(d.kind, ReportKind::Regressed);
        assert_eq!(d.finding.status, FindingStatus::Dismissed);
        assert_eq!(
            d.new_events.last().unwrap().metadata[OPERATOR_STATE_CAUSE],
            "intentionally_offline"
        );
    }

    #[test]
    fn operator_dismiss_leaves_closed_findings_alone() {
        let first = report_under(None, &OperatorStateProjection::default(), t0()).finding;
        let (dismissed, _) =
            operator_dismiss(&first, SuppressionCause::IntentionallyOffline, t0()).unwrap();
        assert_eq!(
            operator_dismiss(&dismissed, SuppressionCause::IntentionallyOffline, t0()),
            None
        );
        assert_eq!(wake_after_suppression(&first, t0()), None);
    }

    #[test]
    fn criticality_round_trips() {
        for c in Criticality::ALL {
            assert_eq!(Criticality::parse(c.as_str()), Some(c));
        }
        assert_eq!(Criticality::parse("urgent"), None);
    }
}
