//! Patrol findings and the operator actions on them: `GET /api/ai/patrol/findings`,
//! `GET /api/ai/patrol/findings/{id}`, `POST /api/ai/patrol/{acknowledge|snooze|dismiss|resolve|
//! suppress|findings/note}` and `POST /api/ai/patrol/{dismiss|suppress}/undo`.

use chrono::{DateTime, Utc};
use pulse_domain::finding::{
    Category, DismissedReason, Finding, FindingId, FindingStatus, InvestigationOutcome,
    MAX_NOTE_CHARS, Severity,
};
use pulse_domain::listing::MAX_FINDINGS;
use serde::{Deserialize, Deserializer, Serialize};
use uuid::Uuid;

use crate::constraints::{
    IntegerIn, MAX_REFERENCE_CHARS, NotBlank, OrEmpty, OrEvery, Text, refuse,
};
use crate::query;

#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// `1` (or `true`) for every finding, not only active ones.
    #[serde(
        default,
        skip_serializing_if = "std::ops::Not::not",
        deserialize_with = "include_resolved"
    )]
    #[schemars(with = "Option<Flag>")]
    pub include_resolved: bool,
    /// How many findings to answer; more than 500 answer 500.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "list_limit"
    )]
    #[schemars(with = "Option<ListLimit>")]
    pub limit: Option<i64>,
    /// Only findings of this severity (`info`, `watch`, `warning`, `critical`); empty for any.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "severity_filter"
    )]
    #[schemars(with = "Option<OrEmpty<Severity>>")]
    pub severity: Option<Severity>,
    /// Only findings of this category; empty for any.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "category_filter"
    )]
    #[schemars(with = "Option<OrEmpty<Category>>")]
    pub category: Option<Category>,
    /// Only findings in this status; a status other than active needs `include_resolved=1`;
    /// empty for any.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "status_filter"
    )]
    #[schemars(with = "Option<OrEmpty<FindingStatus>>")]
    pub status: Option<FindingStatus>,
    /// Only findings of this resource.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::query::trimmed_or_empty"
    )]
    pub resource_id: Option<String>,
}

fn include_resolved<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    let raw = String::deserialize(deserializer)?;
    Flag::parse(&raw).ok_or_else(|| refuse(&format!("expected 1 or 0, not {raw:?}")))
}

/// Any positive count; the handler answers at most [`MAX_FINDINGS`].
fn list_limit<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    let raw = String::deserialize(deserializer)?;
    ListLimit::parse(&raw).map(Some).ok_or_else(|| {
        refuse(&format!(
            "must be a positive integer (at most {MAX_FINDINGS} are returned), not {raw:?}"
        ))
    })
}

fn severity_filter<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Severity>, D::Error> {
    query::wire_name_or_empty(deserializer, "info, watch, warning, critical")
}

fn category_filter<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Category>, D::Error> {
    query::wire_name_or_empty(
        deserializer,
        "performance, capacity, reliability, backup, security, general",
    )
}

fn status_filter<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<FindingStatus>, D::Error> {
    query::wire_name_or_empty(
        deserializer,
        "active, resolved, snoozed, dismissed, suppressed",
    )
}

/// A limit is any positive count; the answer holds at most [`MAX_FINDINGS`].
pub type ListLimit = IntegerIn<1, { i64::MAX }>;

/// The spellings [`Flag::parse`] accepts: the first three are false, the last two true.
const FLAG_VALUES: [&str; 5] = ["", "0", "false", "1", "true"];

/// A flag as [`Flag::parse`] reads it.
pub struct Flag;

impl Flag {
    /// The flag `raw` spells, if it is one of the spellings.
    pub fn parse(raw: &str) -> Option<bool> {
        FLAG_VALUES.iter().position(|v| *v == raw).map(|i| i >= 3)
    }
}

impl schemars::JsonSchema for Flag {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Flag".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "enum": FLAG_VALUES})
    }
}

/// The answer of the list route.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FindingList {
    pub findings: Vec<Finding>,
    pub count: usize,
    pub limit: i64,
    pub include_resolved: bool,
}

/// One finding as stored: the record (lifecycle included), its version and the actions its
/// status accepts.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FindingAnswer {
    pub finding: Finding,
    pub version: i64,
    pub allowed_actions: Vec<String>,
    /// The newest investigation record of the finding (`GET /findings/{id}` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub investigation_record: Option<InvestigationRecord>,
}

/// `acknowledge`, `dismiss/undo`, `suppress/undo`.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FindingRef {
    #[schemars(with = "FindingId")]
    pub finding_id: String,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnoozeBody {
    #[schemars(with = "FindingId")]
    pub finding_id: String,
    /// Whole hours, 1 to 2160 (90 days).
    #[schemars(with = "SnoozeHours")]
    #[serde(deserialize_with = "crate::constraints::whole_number")]
    pub duration_hours: i64,
}

/// The resource side of a suppression: a reference with content, or `*`.
pub type SuppressResource = Text<MAX_REFERENCE_CHARS>;

/// How long a snooze may last, in hours (up to [`pulse_domain::finding::MAX_SNOOZE`]).
pub type SnoozeHours = IntegerIn<1, { pulse_domain::finding::MAX_SNOOZE_HOURS }>;

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DismissBody {
    #[schemars(with = "FindingId")]
    pub finding_id: String,
    #[schemars(with = "DismissedReason")]
    pub reason: String,
    #[serde(default)]
    #[schemars(length(max = MAX_NOTE_CHARS))]
    pub note: String,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveBody {
    #[schemars(with = "FindingId")]
    pub finding_id: String,
    #[serde(default)]
    #[schemars(length(max = MAX_NOTE_CHARS))]
    pub note: String,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoteBody {
    #[schemars(with = "FindingId")]
    pub finding_id: String,
    /// Not only white space.
    #[schemars(with = "NotBlank<MAX_NOTE_CHARS>")]
    pub note: String,
}

/// `resource_id` and `category` name the rule's scope; `*` on one side makes it broad, which
/// needs `allow_broad_scope`. Without `finding_id` the rule is anchored on the most recently
/// seen open (or dismissed) finding it matches.
/// `*` on both sides is never accepted; `*` on one side needs `allow_broad_scope: true`.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("allOf" = [
    {"not": {
        "required": ["resource_id", "category"],
        "properties": {"resource_id": {"const": "*"}, "category": {"const": "*"}}
    }},
    {
        "if": {"anyOf": [
            {"required": ["resource_id"], "properties": {"resource_id": {"const": "*"}}},
            {"required": ["category"], "properties": {"category": {"const": "*"}}}
        ]},
        "then": {"required": ["allow_broad_scope"], "properties": {"allow_broad_scope": {"const": true}}}
    }
]))]
pub struct SuppressBody {
    #[serde(default)]
    #[schemars(with = "Option<FindingId>")]
    pub finding_id: Option<String>,
    /// A resource, or `*` for every resource.
    #[schemars(with = "SuppressResource")]
    pub resource_id: String,
    /// A category, or `*` for every category.
    #[schemars(with = "OrEvery<Category>")]
    pub category: String,
    #[serde(default)]
    pub allow_broad_scope: bool,
}

/// Where an attempt stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InvestigationStatus {
    Running,
    Completed,
    Failed,
    TimedOut,
}

impl InvestigationStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
        }
    }
}

/// The resource the investigation was about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InvestigationSubject {
    pub resource_id: String,
    pub resource_name: String,
    pub resource_type: String,
    #[serde(default)]
    pub node: String,
}

/// The finding that triggered it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InvestigationTrigger {
    pub finding_key: String,
    pub source: String,
    pub severity: String,
    pub category: String,
    pub title: String,
    pub detected_at: DateTime<Utc>,
    pub description: String,
    /// Why the investigation started (`watch_run:<id>`).
    pub cause: String,
}

/// One piece of evidence the investigation read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InvestigationEvidence {
    /// The tool call id.
    pub id: String,
    /// The tool.
    pub kind: String,
    pub summary: String,
}

/// The typed proposal the investigation captured, without its params (their durable home is
/// the canonical action and its audit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProposalSummary {
    pub resource_id: String,
    pub causal_resource_id: String,
    pub capability_name: String,
    pub reason: String,
}

/// The canonical action a proposal became.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ActionReference {
    pub action_id: Uuid,
    /// The action's state when it was submitted (`pending_approval`, `refused`, ...).
    pub state: String,
}

/// The durable, operator-facing record of one investigation attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InvestigationRecord {
    pub id: Uuid,
    pub finding_id: String,
    /// The execution session (internal detail): the Watch run that dispatched it.
    pub session_id: String,
    pub subject: InvestigationSubject,
    pub trigger: InvestigationTrigger,
    pub status: InvestigationStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<InvestigationOutcome>,
    /// `low`, `medium` or `high`.
    pub confidence: String,
    pub evidence: Vec<InvestigationEvidence>,
    pub conclusion: String,
    /// The finding's impact, unchanged; empty when it has none.
    pub impact: String,
    pub recommended_action: String,
    #[serde(default)]
    pub verification: Vec<String>,
    /// No remediation plan backs these investigations, so none is fabricated.
    #[serde(default)]
    pub rollback: Vec<String>,
    pub tools_used: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal: Option<ProposalSummary>,
    pub started_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<ActionReference>,
    #[serde(default)]
    pub error: String,
}
