//! `patrol_report_finding`: what one report does to the finding store (FIND-14..22).
//!
//! Decision order, for a report whose normalized key gives id `I` on resource `R`:
//!
//! 1. a finding `I` exists and is not resolved: **re-detection**. Active/snoozed findings take
//!    the new text, evidence, severity and run ownership; `times_raised` and `last_seen_at`
//!    advance. That is a heartbeat and records no event, except `content_replaced` when the
//!    title shares essentially no keywords with the previous one (FIND-18), `unsnoozed` when a
//!    snooze has run out, and for a dismissal: `regressed` when the severity escalated,
//!    `reminded` when a `will_fix_later` reminder is due. Dismissed or suppressed findings
//!    otherwise stay silenced (heartbeat only).
//! 2. an open finding on `R` is the same problem (see [`super::equivalence::same_problem`]: the
//!    keys name the same symptom, or, where the words cannot tell, both reports cite the same
//!    deterministic signal of `R` in the reporting run): **merge** into it (no second row):
//!    highest severity kept, `recurrence` and `times_raised` advance, evidence and run ownership
//!    refresh, one `duplicate_merged` event naming the merged report and why it merged
//!    (`merged_by` `key` or `evidence`, with the `shared_signal`). A sibling matched by its key
//!    is preferred to one matched by evidence.
//! 3. a finding `I` exists and is resolved: **regression**: reopened with the new text,
//!    `regression_count` advances, acknowledgement and dismissal are cleared, `regressed` event
//!    (after `content_replaced` on an identity shift, FIND-19).
//! 4. otherwise a **new** finding with one `detected` event.
//!
//! A finding that ends up active (new or regressed) on a resource/category covered by an active
//! suppression rule is suppressed at once (`suppressed` event naming the rule).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::equivalence::{Claim, MergeBasis, ResourceSignals, is_identity_shift, same_problem};
use super::id::{FindingId, FindingKey, FindingKeyError};
use super::model::{
    Category, DismissedReason, Finding, FindingStatus, LifecycleEvent, LifecycleEventType, Severity,
};
use super::status::{StatusEvent, transition};
use super::suppression::SuppressionRule;
use crate::patrol::run::RunId;

/// Field limits of a report, in characters.
pub const MAX_RESOURCE_ID_CHARS: usize = 1024;
pub const MAX_RESOURCE_NAME_CHARS: usize = 256;
pub const MAX_RESOURCE_TYPE_CHARS: usize = 64;
pub const MAX_TITLE_CHARS: usize = 256;
pub const MAX_TEXT_CHARS: usize = 8192;
pub const MAX_EVIDENCE_CHARS: usize = 16_384;

/// One `patrol_report_finding` call, as the reporter sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ReportedFinding {
    /// Free kebab-case key; normalized with [`FindingKey::normalize`].
    pub key: String,
    pub severity: Severity,
    pub category: Category,
    pub resource_id: String,
    pub resource_name: String,
    pub resource_type: String,
    pub title: String,
    pub description: String,
    pub recommendation: String,
    pub evidence: String,
    /// Optional; an empty impact never overwrites an existing one.
    #[serde(default)]
    pub impact: String,
}

/// Why a report was refused. Nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    #[error("invalid finding key: {0}")]
    Key(#[from] FindingKeyError),
    #[error("severity {0} cannot be reported; use warning or critical")]
    SeverityNotReportable(Severity),
    #[error("{field} must not be empty")]
    Empty { field: &'static str },
    #[error("{field} is longer than {max} characters")]
    TooLong { field: &'static str, max: usize },
    #[error("resource_type must be lowercase letters, digits, '-' or '_'")]
    BadResourceType,
    /// `existing_same_id` does not carry the id this report derives (caller bug).
    #[error("existing finding {0} does not match the reported identity")]
    IdentityMismatch(FindingId),
    /// The tenant's `findings` quota is reached: no new finding is recorded.
    #[error(transparent)]
    Quota(crate::tenant::QuotaExceeded),
}

impl ReportedFinding {
    /// The normalized key and the id this report addresses, after validating every field.
    pub fn identity(&self) -> Result<(FindingKey, FindingId), ReportError> {
        let key = FindingKey::normalize(&self.key)?;
        if !self.severity.is_reportable() {
            return Err(ReportError::SeverityNotReportable(self.severity));
        }
        let fields: [(&'static str, &str, usize, bool); 8] = [
            (
                "resource_id",
                &self.resource_id,
                MAX_RESOURCE_ID_CHARS,
                true,
            ),
            (
                "resource_name",
                &self.resource_name,
                MAX_RESOURCE_NAME_CHARS,
                false,
            ),
            (
                "resource_type",
                &self.resource_type,
                MAX_RESOURCE_TYPE_CHARS,
                true,
            ),
            ("title", &self.title, MAX_TITLE_CHARS, true),
            ("description", &self.description, MAX_TEXT_CHARS, false),
            (
                "recommendation",
                &self.recommendation,
                MAX_TEXT_CHARS,
                false,
            ),
            ("evidence", &self.evidence, MAX_EVIDENCE_CHARS, true),
            ("impact", &self.impact, MAX_TEXT_CHARS, false),
        ];
        for (field, value, max, required) in fields {
            if required && value.trim().is_empty() {
                return Err(ReportError::Empty { field });
            }
            if value.chars().count() > max {
                return Err(ReportError::TooLong { field, max });
            }
        }
        if !self
            .resource_type
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Err(ReportError::BadResourceType);
        }
        let id = FindingId::derive(&self.resource_id, self.category, &key);
        Ok((key, id))
    }
}

/// What the store already holds that a report needs to see.
#[derive(Debug, Clone, Copy)]
pub struct ReportContext<'a> {
    /// The finding with the reported id, in any status.
    pub existing_same_id: Option<&'a Finding>,
    /// Open (active or snoozed) findings on the reported resource.
    pub active_on_resource: &'a [Finding],
    /// Active suppression rules of the tenant.
    pub suppressions: &'a [SuppressionRule],
}

/// Which path a report took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReportKind {
    New,
    Redetected,
    Merged,
    Regressed,
}

/// The row to write for one report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportDecision {
    pub kind: ReportKind,
    /// The id the report derived (for a merge, not the id written).
    pub reported_id: FindingId,
    /// The finding to write, lifecycle included (bounded). For a merge, the sibling.
    pub finding: Finding,
    /// Events appended by this report (also at the end of `finding.lifecycle`).
    pub new_events: Vec<LifecycleEvent>,
    /// For a merge, why the report was found to be the sibling's problem.
    pub merge_basis: Option<MergeBasis>,
}

impl ReportDecision {
    /// Whether the report created a finding (the tool's `is_new`).
    pub fn is_new(&self) -> bool {
        self.kind == ReportKind::New
    }
}

fn moved(mut finding: Finding, events: Vec<LifecycleEvent>) -> (Finding, Vec<LifecycleEvent>) {
    for e in &events {
        finding.push_event(e.clone());
    }
    (finding, events)
}

/// Takes the reporter's content: the latest report owns the text (FIND-22); an empty impact
/// keeps the existing one.
pub(super) fn take_content(f: &mut Finding, incoming: &ReportedFinding) {
    f.title = incoming.title.clone();
    f.description = incoming.description.clone();
    f.recommendation = incoming.recommendation.clone();
    f.evidence = incoming.evidence.clone();
    f.resource_name = incoming.resource_name.clone();
    f.resource_type = incoming.resource_type.clone();
    if !incoming.impact.is_empty() {
        f.impact = incoming.impact.clone();
    }
}

fn seen(f: &mut Finding, run: Option<RunId>, now: DateTime<Utc>) {
    f.times_raised = f.times_raised.saturating_add(1);
    f.last_seen_at = now;
    if run.is_some() {
        f.last_run_id = run;
    }
    // A fresh report supersedes an earlier `uncertain` verdict.
    f.last_assessment = None;
}

fn content_replaced(
    previous: &Finding,
    incoming: &ReportedFinding,
    now: DateTime<Utc>,
) -> Option<LifecycleEvent> {
    is_identity_shift(&previous.title, &incoming.title).then(|| {
        LifecycleEvent::new(LifecycleEventType::ContentReplaced, now)
            .message("Re-detected with different details")
            .meta("previous_title", previous.title.clone())
            .meta("new_title", incoming.title.clone())
    })
}

fn apply_suppression(
    f: &mut Finding,
    events: &mut Vec<LifecycleEvent>,
    suppressions: &[SuppressionRule],
    now: DateTime<Utc>,
) {
    if f.status != FindingStatus::Active {
        return;
    }
    let Some(rule) = suppressions
        .iter()
        .find(|r| r.matches(&f.resource_id, f.category))
    else {
        return;
    };
    if let Ok(to) = transition(f.status, StatusEvent::Suppress) {
        events.push(
            LifecycleEvent::new(LifecycleEventType::Suppressed, now)
                .statuses(f.status, to)
                .meta("suppression_id", rule.id.as_hex()),
        );
        f.status = to;
        f.suppression_id = Some(rule.id);
    }
}

/// Decides what one report writes, outside a run's evidence (nothing merges by evidence). Pure;
/// see the module documentation for the rules.
pub fn report(
    ctx: ReportContext<'_>,
    incoming: &ReportedFinding,
    run: Option<RunId>,
    now: DateTime<Utc>,
) -> Result<ReportDecision, ReportError> {
    report_with_signals(ctx, incoming, &ResourceSignals::default(), run, now)
}

/// Decides what one report writes, with `signals`: the deterministic signals that hold for the
/// reported resource in the reporting run (its triage flags, the alerts firing on it), which
/// settle a merge the keys' words cannot decide. Pure.
pub fn report_with_signals(
    ctx: ReportContext<'_>,
    incoming: &ReportedFinding,
    signals: &ResourceSignals,
    run: Option<RunId>,
    now: DateTime<Utc>,
) -> Result<ReportDecision, ReportError> {
    let (key, id) = incoming.identity()?;
    if let Some(existing) = ctx.existing_same_id {
        if existing.id != id {
            return Err(ReportError::IdentityMismatch(existing.id));
        }
        if existing.status != FindingStatus::Resolved {
            let (finding, new_events) = redetect(existing, incoming, run, now);
            return Ok(ReportDecision {
                kind: ReportKind::Redetected,
                reported_id: id,
                finding,
                new_events,
                merge_basis: None,
            });
        }
    }
    if let Some((sibling, basis)) =
        equivalent_sibling(ctx.active_on_resource, incoming, &key, id, signals)
    {
        let (finding, new_events) = merge(sibling, incoming, &key, id, &basis, run, now);
        return Ok(ReportDecision {
            kind: ReportKind::Merged,
            reported_id: id,
            finding,
            new_events,
            merge_basis: Some(basis),
        });
    }
    if let Some(resolved) = ctx.existing_same_id {
        let (finding, new_events) = regress(resolved, incoming, ctx.suppressions, run, now);
        return Ok(ReportDecision {
            kind: ReportKind::Regressed,
            reported_id: id,
            finding,
            new_events,
            merge_basis: None,
        });
    }
    let mut finding = Finding {
        id,
        key,
        severity: incoming.severity,
        category: incoming.category,
        resource_id: incoming.resource_id.clone(),
        resource_name: String::new(),
        resource_type: String::new(),
        title: String::new(),
        description: String::new(),
        impact: String::new(),
        recommendation: String::new(),
        evidence: String::new(),
        status: FindingStatus::Active,
        detected_at: now,
        last_seen_at: now,
        resolved_at: None,
        auto_resolved: false,
        resolve_reason: String::new(),
        acknowledged_at: None,
        snoozed_until: None,
        dismissed_reason: None,
        remind_at: None,
        remind_count: 0,
        suppression_id: None,
        user_note: String::new(),
        times_raised: 1,
        recurrence: 0,
        regression_count: 0,
        last_regression_at: None,
        investigation_outcome: None,
        last_run_id: run,
        last_assessment: None,
        lifecycle: Vec::new(),
    };
    take_content(&mut finding, incoming);
    let mut events = vec![
        LifecycleEvent::new(LifecycleEventType::Detected, now)
            .meta("severity", incoming.severity.as_str()),
    ];
    apply_suppression(&mut finding, &mut events, ctx.suppressions, now);
    let (finding, new_events) = moved(finding, events);
    Ok(ReportDecision {
        kind: ReportKind::New,
        reported_id: id,
        finding,
        new_events,
        merge_basis: None,
    })
}

/// The open sibling to merge into, with why: the same problem, a different id; matched by its
/// key before matched by evidence, then highest severity first, then the earliest detected (the
/// long-standing issue keeps its identity).
fn equivalent_sibling<'a>(
    open: &'a [Finding],
    incoming: &ReportedFinding,
    key: &FindingKey,
    id: FindingId,
    signals: &ResourceSignals,
) -> Option<(&'a Finding, MergeBasis)> {
    let report = Claim {
        category: incoming.category,
        key,
        evidence: &incoming.evidence,
    };
    open.iter()
        .filter(|f| f.id != id && f.status.is_open() && f.resource_id == incoming.resource_id)
        .filter_map(|f| {
            let sibling = Claim {
                category: f.category,
                key: &f.key,
                evidence: &f.evidence,
            };
            same_problem(report, sibling, signals).map(|basis| (f, basis))
        })
        .min_by(|(a, a_basis), (b, b_basis)| {
            let by_key = |basis: &MergeBasis| !matches!(basis, MergeBasis::Wording);
            by_key(a_basis)
                .cmp(&by_key(b_basis))
                .then(b.severity.cmp(&a.severity))
                .then(a.detected_at.cmp(&b.detected_at))
                .then(a.id.cmp(&b.id))
        })
}

fn redetect(
    existing: &Finding,
    incoming: &ReportedFinding,
    run: Option<RunId>,
    now: DateTime<Utc>,
) -> (Finding, Vec<LifecycleEvent>) {
    let mut f = existing.clone();
    let mut events = Vec::new();
    seen(&mut f, run, now);
    match existing.status {
        FindingStatus::Active | FindingStatus::Snoozed => {
            events.extend(content_replaced(existing, incoming, now));
            take_content(&mut f, incoming);
            f.severity = incoming.severity;
            if existing.effective_status(now) != existing.status {
                // The snooze ran out: the re-detection brings the finding back.
                f.status = FindingStatus::Active;
                f.snoozed_until = None;
                events.push(
                    LifecycleEvent::new(LifecycleEventType::Unsnoozed, now)
                        .statuses(FindingStatus::Snoozed, FindingStatus::Active),
                );
            }
        }
        FindingStatus::Dismissed if incoming.severity > existing.severity => {
            events.extend(content_replaced(existing, incoming, now));
            take_content(&mut f, incoming);
            f.severity = incoming.severity;
            reopen(&mut f, now);
            events.push(
                LifecycleEvent::new(LifecycleEventType::Regressed, now)
                    .statuses(FindingStatus::Dismissed, FindingStatus::Active)
                    .meta("cause", "severity_escalated")
                    .meta("previous_severity", existing.severity.as_str())
                    .meta("severity", incoming.severity.as_str()),
            );
        }
        FindingStatus::Dismissed
            if existing.dismissed_reason == Some(DismissedReason::WillFixLater)
                && existing.remind_at.is_some_and(|at| at <= now) =>
        {
            take_content(&mut f, incoming);
            f.status = FindingStatus::Active;
            f.dismissed_reason = None;
            f.remind_at = None;
            f.remind_count = f.remind_count.saturating_add(1);
            events.push(
                LifecycleEvent::new(LifecycleEventType::Reminded, now)
                    .statuses(FindingStatus::Dismissed, FindingStatus::Active)
                    .meta("reason", DismissedReason::WillFixLater.as_str()),
            );
        }
        // Silenced by the operator: a heartbeat only, the text the operator saw stays.
        FindingStatus::Dismissed | FindingStatus::Suppressed | FindingStatus::Resolved => {}
    }
    moved(f, events)
}

/// Clears what an operator decided about the previous occurrence of the problem.
fn reopen(f: &mut Finding, now: DateTime<Utc>) {
    f.status = FindingStatus::Active;
    f.regression_count = f.regression_count.saturating_add(1);
    f.last_regression_at = Some(now);
    f.acknowledged_at = None;
    f.dismissed_reason = None;
    f.remind_at = None;
    f.snoozed_until = None;
    f.resolved_at = None;
    f.auto_resolved = false;
    f.resolve_reason = String::new();
    f.suppression_id = None;
    f.investigation_outcome = None;
}

fn regress(
    resolved: &Finding,
    incoming: &ReportedFinding,
    suppressions: &[SuppressionRule],
    run: Option<RunId>,
    now: DateTime<Utc>,
) -> (Finding, Vec<LifecycleEvent>) {
    let mut f = resolved.clone();
    let mut events = Vec::new();
    events.extend(content_replaced(resolved, incoming, now));
    seen(&mut f, run, now);
    take_content(&mut f, incoming);
    f.severity = incoming.severity;
    reopen(&mut f, now);
    events.push(
        LifecycleEvent::new(LifecycleEventType::Regressed, now)
            .statuses(FindingStatus::Resolved, FindingStatus::Active)
            .meta("regression_count", f.regression_count.to_string()),
    );
    apply_suppression(&mut f, &mut events, suppressions, now);
    moved(f, events)
}

fn merge(
    sibling: &Finding,
    incoming: &ReportedFinding,
    key: &FindingKey,
    id: FindingId,
    basis: &MergeBasis,
    run: Option<RunId>,
    now: DateTime<Utc>,
) -> (Finding, Vec<LifecycleEvent>) {
    let mut f = sibling.clone();
    seen(&mut f, run, now);
    f.recurrence = f.recurrence.saturating_add(1);
    f.severity = f.severity.max(incoming.severity);
    f.evidence = incoming.evidence.clone();
    if f.impact.is_empty() && !incoming.impact.is_empty() {
        f.impact = incoming.impact.clone();
    }
    let mut event = LifecycleEvent::new(LifecycleEventType::DuplicateMerged, now)
        .message(incoming.title.clone())
        .meta("merged_id", id.as_hex())
        .meta("merged_key", key.as_str())
        .meta("merged_severity", incoming.severity.as_str())
        .meta("merged_by", basis.as_str());
    if let MergeBasis::Evidence(signal) = basis {
        event = event.meta("shared_signal", signal.clone());
    }
    let events = vec![event];
    moved(f, events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::model::MAX_LIFECYCLE_EVENTS;
    use crate::finding::suppression::SuppressBreadth;
    use crate::finding::test_support::{reported, run_id, t0};
    use chrono::Duration;
    use proptest::prelude::*;

    const NONE: ReportContext<'static> = ReportContext {
        existing_same_id: None,
        active_on_resource: &[],
        suppressions: &[],
    };

    fn new_finding(key: &str) -> Finding {
        report(NONE, &reported(key), Some(run_id(1)), t0())
            .expect("valid")
            .finding
    }

    fn same_id(f: &Finding) -> ReportContext<'_> {
        ReportContext {
            existing_same_id: Some(f),
            active_on_resource: std::slice::from_ref(f),
            suppressions: &[],
        }
    }

    fn types(events: &[LifecycleEvent]) -> Vec<LifecycleEventType> {
        events.iter().map(|e| e.event_type).collect()
    }

    #[test]
    fn a_first_report_is_new_with_one_detected_event() {
        let d = report(NONE, &reported("high-cpu"), Some(run_id(1)), t0()).expect("ok");
        assert!(d.is_new());
        let f = &d.finding;
        assert_eq!(f.key.as_str(), "cpu-high");
        assert_eq!(
            f.id,
            FindingId::derive("host:h1", Category::Performance, &f.key)
        );
        assert_eq!(f.status, FindingStatus::Active);
        assert_eq!(
            (f.times_raised, f.recurrence, f.regression_count),
            (1, 0, 0)
        );
        assert_eq!(f.detected_at, t0());
        assert_eq!(f.last_run_id, Some(run_id(1)));
        assert_eq!(types(&d.new_events), [LifecycleEventType::Detected]);
        assert_eq!(f.lifecycle, d.new_events);
    }

    #[test]
    fn invalid_reports_are_refused() {
        let mut r = reported("cpu-high");
        r.severity = Severity::Info;
        assert_eq!(
            report(NONE, &r, None, t0()),
            Err(ReportError::SeverityNotReportable(Severity::Info))
        );
        let mut r = reported("cpu.high");
        r.key = "cpu.high".into();
        assert!(matches!(
            report(NONE, &r, None, t0()),
            Err(ReportError::Key(_))
        ));
        let mut r = reported("cpu-high");
        r.title = "  ".into();
        assert_eq!(
            report(NONE, &r, None, t0()),
            Err(ReportError::Empty { field: "title" })
        );
        let mut r = reported("cpu-high");
        r.evidence = "x".repeat(MAX_EVIDENCE_CHARS + 1);
        assert_eq!(
            report(NONE, &r, None, t0()),
            Err(ReportError::TooLong {
                field: "evidence",
                max: MAX_EVIDENCE_CHARS
            })
        );
        let mut r = reported("cpu-high");
        r.resource_type = "App Container".into();
        assert_eq!(
            report(NONE, &r, None, t0()),
            Err(ReportError::BadResourceType)
        );
        let other = new_finding("memory-high");
        let ctx = ReportContext {
            existing_same_id: Some(&other),
            ..NONE
        };
        assert_eq!(
            report(ctx, &reported("cpu-high"), None, t0()),
            Err(ReportError::IdentityMismatch(other.id))
        );
    }

    #[test]
    fn identical_and_rephrased_redetections_are_heartbeats_without_events() {
        let f = new_finding("cpu-high");
        let later = t0() + Duration::minutes(10);
        let mut again = reported("cpu-high");
        again.title = "CPU usage high on web host".into();
        again.description = "new description".into();
        again.recommendation = "new recommendation".into();
        again.impact = "checkout latency".into();
        let d = report(same_id(&f), &again, Some(run_id(2)), later).expect("ok");
        assert_eq!(d.kind, ReportKind::Redetected);
        assert!(d.new_events.is_empty(), "{:?}", d.new_events);
        assert_eq!(d.finding.times_raised, 2);
        assert_eq!(d.finding.last_seen_at, later);
        assert_eq!(d.finding.detected_at, t0());
        assert_eq!(d.finding.last_run_id, Some(run_id(2)));
        assert_eq!(d.finding.description, "new description");
        assert_eq!(d.finding.recommendation, "new recommendation");
        assert_eq!(d.finding.impact, "checkout latency");
        assert_eq!(d.finding.lifecycle, f.lifecycle);

        // An empty impact never erases an authored one.
        let mut no_impact = again.clone();
        no_impact.impact = String::new();
        let d2 = report(same_id(&d.finding), &no_impact, None, later).expect("ok");
        assert_eq!(d2.finding.impact, "checkout latency");
    }

    #[test]
    fn a_collision_with_a_different_title_records_content_replaced() {
        let f = new_finding("cpu-high");
        let mut other = reported("cpu-high");
        other.title = "Backup job failing nightly".into();
        let d = report(same_id(&f), &other, None, t0()).expect("ok");
        assert_eq!(d.kind, ReportKind::Redetected);
        assert_eq!(types(&d.new_events), [LifecycleEventType::ContentReplaced]);
        let e = &d.new_events[0];
        assert_eq!(e.metadata["previous_title"], f.title);
        assert_eq!(e.metadata["new_title"], "Backup job failing nightly");
        assert_eq!(e.message, "Re-detected with different details");
        assert_eq!(d.finding.title, "Backup job failing nightly");
    }

    #[test]
    fn an_equivalent_sibling_is_merged_not_duplicated() {
        let mut existing = new_finding("cpu-high");
        existing.severity = Severity::Warning;
        let mut sibling = reported("cpu-pressure");
        sibling.severity = Severity::Critical;
        sibling.evidence = "load 31 on 4 cores".into();
        let ctx = ReportContext {
            existing_same_id: None,
            active_on_resource: std::slice::from_ref(&existing),
            suppressions: &[],
        };
        let d = report(ctx, &sibling, Some(run_id(3)), t0()).expect("ok");
        assert_eq!(d.kind, ReportKind::Merged);
        assert!(!d.is_new());
        assert_eq!(d.finding.id, existing.id, "written to the sibling");
        assert_ne!(d.reported_id, existing.id);
        assert_eq!(d.finding.severity, Severity::Critical, "highest kept");
        assert_eq!(d.finding.recurrence, 1);
        assert_eq!(d.finding.times_raised, 2);
        assert_eq!(d.finding.evidence, "load 31 on 4 cores");
        assert_eq!(
            d.finding.key, existing.key,
            "the sibling keeps its identity"
        );
        assert_eq!(types(&d.new_events), [LifecycleEventType::DuplicateMerged]);
        assert_eq!(d.new_events[0].metadata["merged_key"], "cpu-pressure");
        assert_eq!(
            d.new_events[0].metadata["merged_id"],
            d.reported_id.as_hex()
        );
        assert_eq!(d.new_events[0].metadata["merged_by"], "key");
        assert!(!d.new_events[0].metadata.contains_key("shared_signal"));
        assert_eq!(d.merge_basis, Some(MergeBasis::Wording));

        // A lower severity report does not lower the merged finding.
        let mut lower = reported("cpu-pressure");
        lower.severity = Severity::Warning;
        let ctx = ReportContext {
            existing_same_id: None,
            active_on_resource: std::slice::from_ref(&d.finding),
            suppressions: &[],
        };
        let d2 = report(ctx, &lower, None, t0()).expect("ok");
        assert_eq!(d2.finding.severity, Severity::Critical);
        assert_eq!(d2.finding.recurrence, 2);
    }

    fn service(key: &str, evidence: &str) -> ReportedFinding {
        let mut r = reported(key);
        r.category = Category::Reliability;
        r.resource_id = "service:h1:web".into();
        r.resource_name = "web".into();
        r.resource_type = "service".into();
        r.title = "web fails its health check".into();
        r.evidence = evidence.into();
        r
    }

    fn open_on(f: &Finding) -> ReportContext<'_> {
        ReportContext {
            existing_same_id: None,
            active_on_resource: std::slice::from_ref(f),
            suppressions: &[],
        }
    }

    #[test]
    fn one_unhealthy_service_reported_under_two_keys_is_one_finding() {
        let first = report(
            NONE,
            &service("service-unhealthy", "health=unhealthy"),
            Some(run_id(1)),
            t0(),
        )
        .expect("ok")
        .finding;
        let d = report(
            open_on(&first),
            &service("health-check-failing", "health check fails"),
            Some(run_id(1)),
            t0(),
        )
        .expect("ok");
        assert_eq!(d.kind, ReportKind::Merged);
        assert_eq!(d.finding.id, first.id);
        assert_eq!(d.finding.key.as_str(), "service-unhealthy");
        assert_eq!(
            d.new_events[0].metadata["merged_key"],
            "health-check-failing"
        );
        // A different problem on the same service stays a finding of its own.
        let d = report(
            open_on(&first),
            &service("certificate-expiring", "health=unhealthy"),
            None,
            t0(),
        )
        .expect("ok");
        assert_eq!(d.kind, ReportKind::New);
    }

    #[test]
    fn a_report_the_words_cannot_place_merges_on_shared_run_evidence_only() {
        let first = report(
            NONE,
            &service("service-unhealthy", "triage health_check_failing"),
            Some(run_id(1)),
            t0(),
        )
        .expect("ok")
        .finding;
        let vague = service("request-timeouts", "clients time out; health_check_failing");
        // Outside a run (no signals) the words decide alone: a new finding.
        let d = report(open_on(&first), &vague, None, t0()).expect("ok");
        assert_eq!(d.kind, ReportKind::New);
        // The flag holds for the resource in this run and both reports cite it: one problem.
        let live = ResourceSignals::new(["health_check_failing", "not_running"]);
        let d =
            report_with_signals(open_on(&first), &vague, &live, Some(run_id(2)), t0()).expect("ok");
        assert_eq!(d.kind, ReportKind::Merged);
        assert_eq!(d.finding.id, first.id);
        assert_eq!(
            d.merge_basis,
            Some(MergeBasis::Evidence("health_check_failing".into()))
        );
        let event = &d.new_events[0];
        assert_eq!(event.metadata["merged_by"], "evidence");
        assert_eq!(event.metadata["shared_signal"], "health_check_failing");
        // Citing a signal the sibling does not cite is no shared evidence.
        let other = service("request-timeouts", "not_running");
        let d = report_with_signals(open_on(&first), &other, &live, None, t0()).expect("ok");
        assert_eq!(d.kind, ReportKind::New);
    }

    #[test]
    fn a_key_match_is_preferred_to_an_evidence_match() {
        let mut by_evidence = report(
            NONE,
            &service("nginx-failed", "health_check_failing"),
            None,
            t0(),
        )
        .expect("ok")
        .finding;
        // Older and more severe, but only the evidence ties it to the report.
        by_evidence.severity = Severity::Critical;
        by_evidence.detected_at = t0() - Duration::hours(1);
        let by_key = report(
            NONE,
            &service("container-crash-loop", "restarts=9"),
            None,
            t0(),
        )
        .expect("ok")
        .finding;
        let open = [by_evidence.clone(), by_key.clone()];
        let ctx = ReportContext {
            existing_same_id: None,
            active_on_resource: &open,
            suppressions: &[],
        };
        let live = ResourceSignals::new(["health_check_failing"]);
        let d = report_with_signals(
            ctx,
            &service("restart-loop", "health_check_failing"),
            &live,
            None,
            t0(),
        )
        .expect("ok");
        assert_eq!(d.finding.id, by_key.id);
        assert_eq!(d.merge_basis, Some(MergeBasis::Wording));
    }

    #[test]
    fn distinct_symptoms_on_one_resource_stay_separate() {
        let cpu = new_finding("cpu-high");
        let ctx = ReportContext {
            existing_same_id: None,
            active_on_resource: std::slice::from_ref(&cpu),
            suppressions: &[],
        };
        let d = report(ctx, &reported("memory-high"), None, t0()).expect("ok");
        assert_eq!(d.kind, ReportKind::New);
        assert_ne!(d.finding.id, cpu.id);
        // The same key on another resource is another finding too.
        let mut elsewhere = reported("cpu-high");
        elsewhere.resource_id = "host:h2".into();
        let d = report(ctx, &elsewhere, None, t0()).expect("ok");
        assert_eq!(d.kind, ReportKind::New);
    }

    #[test]
    fn a_resolved_finding_regresses_and_clears_operator_state() {
        let mut f = new_finding("restart-loop");
        f.status = FindingStatus::Resolved;
        f.resolved_at = Some(t0());
        f.auto_resolved = true;
        f.acknowledged_at = Some(t0());
        f.resolve_reason = "verified".into();
        let later = t0() + Duration::hours(2);
        let d = report(
            ReportContext {
                existing_same_id: Some(&f),
                active_on_resource: &[],
                suppressions: &[],
            },
            &reported("restart-loop"),
            Some(run_id(4)),
            later,
        )
        .expect("ok");
        assert_eq!(d.kind, ReportKind::Regressed);
        assert_eq!(d.finding.status, FindingStatus::Active);
        assert_eq!(d.finding.regression_count, 1);
        assert_eq!(d.finding.last_regression_at, Some(later));
        assert_eq!(d.finding.acknowledged_at, None);
        assert_eq!(d.finding.resolved_at, None);
        assert!(!d.finding.auto_resolved);
        assert_eq!(d.finding.times_raised, 2);
        assert_eq!(types(&d.new_events), [LifecycleEventType::Regressed]);
    }

    #[test]
    fn a_collision_on_a_resolved_finding_records_content_replaced_and_regressed() {
        let mut f = new_finding("restart-loop");
        f.status = FindingStatus::Resolved;
        let mut other = reported("restart-loop");
        other.title = "Certificate expired yesterday".into();
        let d = report(
            ReportContext {
                existing_same_id: Some(&f),
                active_on_resource: &[],
                suppressions: &[],
            },
            &other,
            None,
            t0(),
        )
        .expect("ok");
        assert_eq!(
            types(&d.new_events),
            [
                LifecycleEventType::ContentReplaced,
                LifecycleEventType::Regressed
            ]
        );
    }

    #[test]
    fn a_resolved_finding_with_an_active_equivalent_sibling_merges_instead_of_regressing() {
        let mut resolved = new_finding("cpu-high");
        resolved.status = FindingStatus::Resolved;
        let mut open = reported("cpu-pressure");
        open.title = "CPU pressure".into();
        let open = report(NONE, &open, None, t0()).expect("ok").finding;
        let d = report(
            ReportContext {
                existing_same_id: Some(&resolved),
                active_on_resource: std::slice::from_ref(&open),
                suppressions: &[],
            },
            &reported("cpu-high"),
            None,
            t0(),
        )
        .expect("ok");
        assert_eq!(d.kind, ReportKind::Merged);
        assert_eq!(d.finding.id, open.id);
    }

    #[test]
    fn dismissed_findings_stay_dismissed_unless_severity_escalates_or_a_reminder_is_due() {
        let mut f = new_finding("cpu-high");
        f.status = FindingStatus::Dismissed;
        f.dismissed_reason = Some(DismissedReason::NotAnIssue);
        f.acknowledged_at = Some(t0());
        let d = report(same_id(&f), &reported("cpu-high"), None, t0()).expect("ok");
        assert_eq!(d.finding.status, FindingStatus::Dismissed);
        assert!(d.new_events.is_empty());
        assert_eq!(d.finding.times_raised, 2);

        let mut critical = reported("cpu-high");
        critical.severity = Severity::Critical;
        let d = report(same_id(&f), &critical, None, t0()).expect("ok");
        assert_eq!(d.finding.status, FindingStatus::Active);
        assert_eq!(d.finding.dismissed_reason, None);
        assert_eq!(d.finding.acknowledged_at, None, "regression clears the ack");
        assert_eq!(d.finding.regression_count, 1);
        assert_eq!(types(&d.new_events), [LifecycleEventType::Regressed]);

        let mut later = f.clone();
        later.dismissed_reason = Some(DismissedReason::WillFixLater);
        later.remind_at = Some(t0() + Duration::days(7));
        let before = report(
            same_id(&later),
            &reported("cpu-high"),
            None,
            t0() + Duration::days(6),
        )
        .expect("ok");
        assert_eq!(before.finding.status, FindingStatus::Dismissed);
        let due = report(
            same_id(&later),
            &reported("cpu-high"),
            None,
            t0() + Duration::days(7),
        )
        .expect("ok");
        assert_eq!(due.finding.status, FindingStatus::Active);
        assert_eq!(due.finding.remind_count, 1);
        assert_eq!(types(&due.new_events), [LifecycleEventType::Reminded]);
    }

    #[test]
    fn an_expired_snooze_is_lifted_by_a_redetection() {
        let mut f = new_finding("cpu-high");
        f.status = FindingStatus::Snoozed;
        f.snoozed_until = Some(t0() + Duration::hours(1));
        let d = report(same_id(&f), &reported("cpu-high"), None, t0()).expect("ok");
        assert_eq!(d.finding.status, FindingStatus::Snoozed);
        assert!(d.new_events.is_empty());
        let d = report(
            same_id(&f),
            &reported("cpu-high"),
            None,
            t0() + Duration::hours(1),
        )
        .expect("ok");
        assert_eq!(d.finding.status, FindingStatus::Active);
        assert_eq!(types(&d.new_events), [LifecycleEventType::Unsnoozed]);
    }

    #[test]
    fn suppression_rules_hold_new_findings_and_suppressed_ones_stay_quiet() {
        let rule = SuppressionRule::for_finding(
            "host:h1",
            Category::Performance,
            SuppressBreadth::ResourceAndCategory,
            false,
            "ops",
            t0(),
        )
        .expect("rule");
        let rules = [rule.clone()];
        let ctx = ReportContext {
            suppressions: &rules,
            ..NONE
        };
        let d = report(ctx, &reported("cpu-high"), None, t0()).expect("ok");
        assert_eq!(d.kind, ReportKind::New);
        assert_eq!(d.finding.status, FindingStatus::Suppressed);
        assert_eq!(d.finding.suppression_id, Some(rule.id));
        assert_eq!(
            types(&d.new_events),
            [LifecycleEventType::Detected, LifecycleEventType::Suppressed]
        );
        let again = report(same_id(&d.finding), &reported("cpu-high"), None, t0()).expect("ok");
        assert_eq!(again.finding.status, FindingStatus::Suppressed);
        assert!(again.new_events.is_empty());
    }

    proptest! {
        #[test]
        fn repeated_redetections_only_advance_times_raised_and_keep_events_bounded(n in 1usize..120, collide in proptest::collection::vec(any::<bool>(), 120)) {
            let mut f = new_finding("cpu-high");
            let titles = ["Web host CPU saturated", "Nightly backup job broken"];
            for (i, c) in collide.iter().take(n).enumerate() {
                let mut r = reported("cpu-high");
                r.title = titles[usize::from(*c)].into();
                let now = t0() + Duration::minutes(i as i64 + 1);
                let d = report(same_id(&f), &r, None, now).expect("ok");
                prop_assert_eq!(d.kind, ReportKind::Redetected);
                prop_assert_eq!(d.finding.times_raised, f.times_raised + 1);
                prop_assert!(d.new_events.len() <= 1);
                prop_assert!(d.finding.lifecycle.len() <= MAX_LIFECYCLE_EVENTS);
                if let Some(e) = d.new_events.last() {
                    prop_assert_eq!(d.finding.lifecycle.last(), Some(e), "newest kept");
                }
                f = d.finding;
            }
            prop_assert_eq!(f.times_raised as usize, n + 1);
            prop_assert_eq!(f.status, FindingStatus::Active);
        }

        #[test]
        fn a_merge_keeps_the_highest_severity(a in 0usize..2, b in 0usize..2) {
            let sev = [Severity::Warning, Severity::Critical];
            let mut existing = new_finding("cpu-high");
            existing.severity = sev[a];
            let mut r = reported("cpu-pressure");
            r.severity = sev[b];
            let ctx = ReportContext { existing_same_id: None, active_on_resource: std::slice::from_ref(&existing), suppressions: &[] };
            let d = report(ctx, &r, None, t0()).expect("ok");
            prop_assert_eq!(d.finding.severity, sev[a].max(sev[b]));
        }
    }
}
