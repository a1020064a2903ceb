//! The finding record, its vocabularies (upstream wire names) and its bounded lifecycle.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::id::{FindingId, FindingKey};
use super::suppression::SuppressionId;
use crate::patrol::run::RunId;

/// Most lifecycle events a finding keeps; the oldest are dropped first.
pub const MAX_LIFECYCLE_EVENTS: usize = 50;

/// How bad a finding is. Ordered: `info < watch < warning < critical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Watch,
    Warning,
    Critical,
}

impl Severity {
    pub const ALL: [Severity; 4] = [
        Severity::Info,
        Severity::Watch,
        Severity::Warning,
        Severity::Critical,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Watch => "watch",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }

    /// Whether a Watch report may carry this severity: the model reports only `warning` and
    /// `critical`; `info` and `watch` are noise.
    pub fn is_reportable(self) -> bool {
        matches!(self, Severity::Warning | Severity::Critical)
    }
}

/// How many findings there are of each severity. `total` is the sum of the four.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct SeverityCounts {
    pub critical: u32,
    pub warning: u32,
    pub watch: u32,
    pub info: u32,
    pub total: u32,
}

impl SeverityCounts {
    /// Counts one finding of `severity`.
    pub fn add(&mut self, severity: Severity) {
        self.add_n(severity, 1);
    }

    /// Counts `n` findings of `severity`.
    pub fn add_n(&mut self, severity: Severity, n: u32) {
        let slot = match severity {
            Severity::Critical => &mut self.critical,
            Severity::Warning => &mut self.warning,
            Severity::Watch => &mut self.watch,
            Severity::Info => &mut self.info,
        };
        *slot = slot.saturating_add(n);
        self.total = self.total.saturating_add(n);
    }

    /// The counts of these findings.
    pub fn of<'a>(findings: impl IntoIterator<Item = &'a Finding>) -> Self {
        let mut counts = Self::default();
        for finding in findings {
            counts.add(finding.severity);
        }
        counts
    }

    /// The sum of two counts.
    pub fn merged(self, other: Self) -> Self {
        let mut sum = self;
        for severity in Severity::ALL {
            sum.add_n(severity, other.of_severity(severity));
        }
        sum
    }

    /// The count of one severity.
    pub fn of_severity(&self, severity: Severity) -> u32 {
        match severity {
            Severity::Critical => self.critical,
            Severity::Warning => self.warning,
            Severity::Watch => self.watch,
            Severity::Info => self.info,
        }
    }

    /// Findings that deny an all-clear: the reportable severities (`warning`, `critical`).
    pub fn alarming(&self) -> u32 {
        Severity::ALL
            .into_iter()
            .filter(|s| s.is_reportable())
            .map(|s| self.of_severity(s))
            .sum()
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of problem a finding is (upstream category names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Performance,
    Capacity,
    Reliability,
    Backup,
    Security,
    General,
}

impl Category {
    pub const ALL: [Category; 6] = [
        Category::Performance,
        Category::Capacity,
        Category::Reliability,
        Category::Backup,
        Category::Security,
        Category::General,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Category::Performance => "performance",
            Category::Capacity => "capacity",
            Category::Reliability => "reliability",
            Category::Backup => "backup",
            Category::Security => "security",
            Category::General => "general",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// Whether absence from a successful full run may resolve a finding of this category
    /// (upstream `CategorySupportsStaleAutoResolve`). Only continuous current-state metric
    /// categories qualify; backup, reliability, security and general findings are discrete
    /// events or persistent states that absence of a re-report says nothing about.
    pub fn supports_stale_auto_resolve(self) -> bool {
        matches!(self, Category::Performance | Category::Capacity)
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a finding is in its operator-facing lifecycle. Changes only through
/// [`super::status::transition`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum FindingStatus {
    Active,
    Resolved,
    Snoozed,
    Dismissed,
    Suppressed,
}

impl FindingStatus {
    pub const ALL: [FindingStatus; 5] = [
        FindingStatus::Active,
        FindingStatus::Resolved,
        FindingStatus::Snoozed,
        FindingStatus::Dismissed,
        FindingStatus::Suppressed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FindingStatus::Active => "active",
            FindingStatus::Resolved => "resolved",
            FindingStatus::Snoozed => "snoozed",
            FindingStatus::Dismissed => "dismissed",
            FindingStatus::Suppressed => "suppressed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// Active or snoozed: the problem is still considered real and open.
    pub fn is_open(self) -> bool {
        matches!(self, FindingStatus::Active | FindingStatus::Snoozed)
    }
}

impl fmt::Display for FindingStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an operator dismissed a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum DismissedReason {
    NotAnIssue,
    ExpectedBehavior,
    /// Reminds the operator after [`super::status::WILL_FIX_LATER_REMINDER`].
    WillFixLater,
}

impl DismissedReason {
    pub const ALL: [DismissedReason; 3] = [
        DismissedReason::NotAnIssue,
        DismissedReason::ExpectedBehavior,
        DismissedReason::WillFixLater,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DismissedReason::NotAnIssue => "not_an_issue",
            DismissedReason::ExpectedBehavior => "expected_behavior",
            DismissedReason::WillFixLater => "will_fix_later",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// Result of the investigation loop on a finding (upstream `InvestigationOutcome`). Written by
/// the investigation and verification services; carried on the record here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum InvestigationOutcome {
    Resolved,
    FixQueued,
    FixExecuted,
    FixFailed,
    /// A human denied the proposed fix (FIND-31).
    FixRejected,
    /// The independent postcondition check confirmed the fix.
    FixVerified,
    FixVerificationFailed,
    FixVerificationUnknown,
    NeedsAttention,
    CannotFix,
    TimedOut,
}

/// A Watch verdict on an existing finding (`patrol_assess_finding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Present,
    Resolved,
    Uncertain,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Present => "present",
            Verdict::Resolved => "resolved",
            Verdict::Uncertain => "uncertain",
        }
    }
}

/// The most recent accepted Watch verdict on a finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Assessment {
    pub verdict: Verdict,
    pub run_id: RunId,
    pub assessed_at: DateTime<Utc>,
}

/// Kinds of lifecycle event (upstream names). Heartbeats (identical re-detections, `present`
/// and `uncertain` verdicts) are not transitions and record no event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum LifecycleEventType {
    Detected,
    Acknowledged,
    Snoozed,
    Unsnoozed,
    Dismissed,
    Undismissed,
    Suppressed,
    SuppressionLifted,
    Reminded,
    Regressed,
    AutoResolved,
    /// Resolved by an operator (the model resolves through `auto_resolved`).
    Resolved,
    DuplicateMerged,
    /// "Re-detected with different details": a same-id re-detection whose title shares
    /// essentially no keywords with the previous one (FIND-18).
    ContentReplaced,
    UserNoteUpdated,
    /// The outcome of an action meant to fix the finding (`investigation_outcome` carries the
    /// same word): the verifier confirmed the fix (the finding is resolved with it) ...
    FixVerified,
    /// ... the verifier kept seeing the fault (the finding stays active) ...
    FixVerificationFailed,
    /// ... the verifier could not decide (the finding stays active) ...
    FixVerificationUnknown,
    /// ... a human rejected the fix ...
    FixRejected,
    /// ... or the fix ran and failed (or never ran after approval).
    FixFailed,
}

impl LifecycleEventType {
    pub fn as_str(self) -> &'static str {
        match self {
            LifecycleEventType::Detected => "detected",
            LifecycleEventType::Acknowledged => "acknowledged",
            LifecycleEventType::Snoozed => "snoozed",
            LifecycleEventType::Unsnoozed => "unsnoozed",
            LifecycleEventType::Dismissed => "dismissed",
            LifecycleEventType::Undismissed => "undismissed",
            LifecycleEventType::Suppressed => "suppressed",
            LifecycleEventType::SuppressionLifted => "suppression_lifted",
            LifecycleEventType::Reminded => "reminded",
            LifecycleEventType::Regressed => "regressed",
            LifecycleEventType::AutoResolved => "auto_resolved",
            LifecycleEventType::Resolved => "resolved",
            LifecycleEventType::DuplicateMerged => "duplicate_merged",
            LifecycleEventType::ContentReplaced => "content_replaced",
            LifecycleEventType::UserNoteUpdated => "user_note_updated",
            LifecycleEventType::FixVerified => "fix_verified",
            LifecycleEventType::FixVerificationFailed => "fix_verification_failed",
            LifecycleEventType::FixVerificationUnknown => "fix_verification_unknown",
            LifecycleEventType::FixRejected => "fix_rejected",
            LifecycleEventType::FixFailed => "fix_failed",
        }
    }
}

impl fmt::Display for LifecycleEventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One lifecycle fact (`{at, type, message, from, to, metadata}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct LifecycleEvent {
    pub at: DateTime<Utc>,
    #[serde(rename = "type")]
    pub event_type: LifecycleEventType,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<FindingStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<FindingStatus>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

impl LifecycleEvent {
    /// An event with no message, statuses or metadata; fill them with the builder methods.
    pub fn new(event_type: LifecycleEventType, at: DateTime<Utc>) -> Self {
        Self {
            at,
            event_type,
            message: String::new(),
            from: None,
            to: None,
            metadata: BTreeMap::new(),
        }
    }

    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    pub fn statuses(mut self, from: FindingStatus, to: FindingStatus) -> Self {
        self.from = Some(from);
        self.to = Some(to);
        self
    }

    pub fn meta(mut self, key: &str, value: impl Into<String>) -> Self {
        self.metadata.insert(key.to_owned(), value.into());
        self
    }
}

/// A Patrol finding. The JSON shape is the wire shape (`snake_case`, upstream names); optional
/// timestamps are omitted when unset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Finding {
    pub id: FindingId,
    pub key: FindingKey,
    pub severity: Severity,
    pub category: Category,
    pub resource_id: String,
    pub resource_name: String,
    pub resource_type: String,
    pub title: String,
    pub description: String,
    /// Concrete consequences as the reporter wrote them; empty when unknown. Never synthesized
    /// from severity or category (FIND-25).
    #[serde(default)]
    pub impact: String,
    pub recommendation: String,
    pub evidence: String,
    pub status: FindingStatus,
    pub detected_at: DateTime<Utc>,
    pub last_seen_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<DateTime<Utc>>,
    /// Resolved by Patrol (verdict or stale reconcile) rather than by an operator.
    #[serde(default)]
    pub auto_resolved: bool,
    #[serde(default)]
    pub resolve_reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snoozed_until: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dismissed_reason: Option<DismissedReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remind_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub remind_count: u32,
    /// The suppression rule that holds this finding in `suppressed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suppression_id: Option<SuppressionId>,
    #[serde(default)]
    pub user_note: String,
    /// Reports and `present` reconfirmations, including the first detection.
    pub times_raised: u32,
    /// Equivalent duplicate reports merged into this finding (FIND-16).
    #[serde(default)]
    pub recurrence: u32,
    pub regression_count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_regression_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub investigation_outcome: Option<InvestigationOutcome>,
    /// Run ownership: the last run that reported or reconfirmed this finding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_id: Option<RunId>,
    /// The last accepted Watch verdict. An `uncertain` one protects the finding from
    /// absence-based stale resolution until a later report or verdict replaces it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_assessment: Option<Assessment>,
    /// At most [`MAX_LIFECYCLE_EVENTS`], oldest first.
    #[serde(default)]
    pub lifecycle: Vec<LifecycleEvent>,
}

impl Finding {
    /// Appends an event, dropping the oldest beyond [`MAX_LIFECYCLE_EVENTS`].
    pub fn push_event(&mut self, event: LifecycleEvent) {
        self.lifecycle.push(event);
        if self.lifecycle.len() > MAX_LIFECYCLE_EVENTS {
            let excess = self.lifecycle.len() - MAX_LIFECYCLE_EVENTS;
            self.lifecycle.drain(..excess);
        }
    }

    /// The status an operator sees at `now`: a snooze that has run out reads as `active`.
    pub fn effective_status(&self, now: DateTime<Utc>) -> FindingStatus {
        match (self.status, self.snoozed_until) {
            (FindingStatus::Snoozed, Some(until)) if until <= now => FindingStatus::Active,
            (status, _) => status,
        }
    }

    /// Whether the last accepted verdict was `uncertain` (stale-resolution protection).
    pub fn is_uncertain(&self) -> bool {
        self.last_assessment
            .as_ref()
            .is_some_and(|a| a.verdict == Verdict::Uncertain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severity_orders_by_badness() {
        assert!(Severity::Info < Severity::Watch);
        assert!(Severity::Watch < Severity::Warning);
        assert!(Severity::Warning < Severity::Critical);
        let reportable: Vec<_> = Severity::ALL
            .into_iter()
            .filter(|s| s.is_reportable())
            .collect();
        assert_eq!(reportable, [Severity::Warning, Severity::Critical]);
    }

    #[test]
    fn only_performance_and_capacity_support_stale_auto_resolve() {
        for c in Category::ALL {
            assert_eq!(
                c.supports_stale_auto_resolve(),
                matches!(c, Category::Performance | Category::Capacity),
                "{c}"
            );
        }
    }

    #[test]
    fn vocabularies_round_trip_their_wire_names() {
        for c in Category::ALL {
            assert_eq!(Category::parse(c.as_str()), Some(c));
            assert_eq!(serde_json::to_value(c).expect("ser"), c.as_str());
        }
        for s in FindingStatus::ALL {
            assert_eq!(FindingStatus::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).expect("ser"), s.as_str());
        }
        for r in DismissedReason::ALL {
            assert_eq!(DismissedReason::parse(r.as_str()), Some(r));
            assert_eq!(serde_json::to_value(r).expect("ser"), r.as_str());
        }
        for s in Severity::ALL {
            assert_eq!(serde_json::to_value(s).expect("ser"), s.as_str());
        }
        assert_eq!(Category::parse("Performance"), None);
        assert_eq!(
            serde_json::to_value(InvestigationOutcome::FixVerified).expect("ser"),
            "fix_verified"
        );
        assert_eq!(
            serde_json::to_value(LifecycleEventType::SuppressionLifted).expect("ser"),
            LifecycleEventType::SuppressionLifted.as_str()
        );
    }

    #[test]
    fn severity_counts_add_up_and_only_warning_and_critical_alarm() {
        let mut counts = SeverityCounts::default();
        counts.add(Severity::Critical);
        counts.add(Severity::Warning);
        counts.add_n(Severity::Info, 2);
        assert_eq!(
            (counts.critical, counts.warning, counts.info, counts.total),
            (1, 1, 2, 4)
        );
        assert_eq!(counts.alarming(), 2);
        let mut notes = SeverityCounts::default();
        notes.add(Severity::Watch);
        notes.add(Severity::Info);
        assert_eq!(notes.alarming(), 0);
        let sum = counts.merged(notes);
        assert_eq!(
            (sum.watch, sum.info, sum.total, sum.alarming()),
            (1, 3, 6, 2)
        );
    }
}
