//! Patrol run records and the run state machine.
//!
//! A run is accepted as `queued`, becomes `running` when a runner takes its job, and ends in
//! exactly one terminal status: `healthy`, `issues_found` or `error`. Terminal statuses accept no
//! event, so a store that applies [`transition`] as a compare-and-swap writes at most one terminal
//! record per run id, and a redelivered job that finds a terminal record never runs the model.
//!
//! | from | event | to |
//! |---|---|---|
//! | `queued` | `started` | `running` |
//! | `queued` | `failed{cause}` | `error` (refused before any model call: `not_ready`, `scope_empty`, ...) |
//! | `queued` | `runner_lost` | `error` (cause `runner_lost`) |
//! | `running` | `completed{issues_found}` | `healthy` or `issues_found` |
//! | `running` | `failed{cause}` | `error` |
//! | `running` | `runner_lost` | `error` (cause `runner_lost`) |
//! | terminal | any | illegal |

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::scope::{EffectiveScope, ScopedRequest};
use crate::resource::{ResourceType, truncate_chars};

/// Identity of one accepted Patrol run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(transparent)]
pub struct RunId(Uuid);

impl RunId {
    pub fn from_uuid(id: Uuid) -> Self {
        Self(id)
    }

    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid run id {0:?} (expected a UUID)")]
pub struct RunIdError(pub String);

impl FromStr for RunId {
    type Err = RunIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s)
            .map(Self)
            .map_err(|_| RunIdError(truncate_chars(s, 64)))
    }
}

/// Why a run was started (upstream `patrol_triggers.go` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum TriggerReason {
    Scheduled,
    Manual,
    AlertFired,
    AlertCleared,
    AlertFlapping,
    Anomaly,
    UserAction,
    ConfigChanged,
    Startup,
    Verification,
    ObjectiveChanged,
    ObjectiveEvidence,
}

impl TriggerReason {
    pub const ALL: [TriggerReason; 12] = [
        Self::Scheduled,
        Self::Manual,
        Self::AlertFired,
        Self::AlertCleared,
        Self::AlertFlapping,
        Self::Anomaly,
        Self::UserAction,
        Self::ConfigChanged,
        Self::Startup,
        Self::Verification,
        Self::ObjectiveChanged,
        Self::ObjectiveEvidence,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Manual => "manual",
            Self::AlertFired => "alert_fired",
            Self::AlertCleared => "alert_cleared",
            Self::AlertFlapping => "alert_flapping",
            Self::Anomaly => "anomaly",
            Self::UserAction => "user_action",
            Self::ConfigChanged => "config_changed",
            Self::Startup => "startup",
            Self::Verification => "verification",
            Self::ObjectiveChanged => "objective_changed",
            Self::ObjectiveEvidence => "objective_evidence",
        }
    }
}

impl fmt::Display for TriggerReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Fleet-wide sweep or a targeted check of named resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RunType {
    Full,
    Scoped,
}

impl RunType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Scoped => "scoped",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    Healthy,
    IssuesFound,
    Error,
}

impl RunStatus {
    pub const ALL: [RunStatus; 5] = [
        Self::Queued,
        Self::Running,
        Self::Healthy,
        Self::IssuesFound,
        Self::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Healthy => "healthy",
            Self::IssuesFound => "issues_found",
            Self::Error => "error",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Healthy | Self::IssuesFound | Self::Error)
    }

    /// Ended without error (the run produced a verdict on its scope).
    pub fn is_success(self) -> bool {
        matches!(self, Self::Healthy | Self::IssuesFound)
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Classified reason a run ended `error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ErrorCause {
    /// The job lease expired: the runner died or lost contact mid-run.
    RunnerLost,
    /// The requested scope resolved to no resource by the time the run started.
    ScopeEmpty,
    /// The readiness gate knew the Patrol route was not ready; no model call was made.
    NotReady,
    /// The provider rejected or failed the request for a reason not listed below.
    ProviderError,
    /// The provider refused the credentials.
    ProviderAuth,
    /// The provider account is out of quota or credit.
    ProviderQuota,
    /// The provider rate-limited the run beyond its retries.
    RateLimited,
    /// The prompt exceeded the model's context window.
    ContextWindow,
    /// The model or endpoint cannot make tool calls.
    ToolCallingUnsupported,
    /// The provider could not be reached.
    Connectivity,
    /// A turn, token or cost budget ran out before the run finished.
    BudgetExhausted,
    /// The run exceeded its wall-clock limit.
    Timeout,
    /// The run was cancelled by an operator or by shutdown.
    Cancelled,
    /// An unexpected failure inside Pulse; the detail is logged.
    Internal,
    /// A tenant budget (daily or monthly, dollars or tokens) is used up; runs resume when the
    /// period resets or the budget is raised.
    BudgetExceeded,
    /// The model ended without an explicit verdict on an active finding in scope.
    ModelMissingVerdict,
    /// The model answered with no text and no tool call: no analysis was made.
    ModelEmptyAnswer,
    /// The model ended while a resource in scope carried a deterministic triage flag or a
    /// firing alert that it neither reported, reconfirmed, nor judged benign.
    ModelUnaddressedFlags,
    /// No runner took the dispatched job before its deadline, after every re-dispatch.
    RunnerUnavailable,
}

impl ErrorCause {
    pub const ALL: [ErrorCause; 19] = [
        Self::RunnerLost,
        Self::ScopeEmpty,
        Self::NotReady,
        Self::ProviderError,
        Self::ProviderAuth,
        Self::ProviderQuota,
        Self::RateLimited,
        Self::ContextWindow,
        Self::ToolCallingUnsupported,
        Self::Connectivity,
        Self::BudgetExhausted,
        Self::Timeout,
        Self::Cancelled,
        Self::Internal,
        Self::BudgetExceeded,
        Self::ModelMissingVerdict,
        Self::ModelEmptyAnswer,
        Self::ModelUnaddressedFlags,
        Self::RunnerUnavailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::RunnerLost => "runner_lost",
            Self::ScopeEmpty => "scope_empty",
            Self::NotReady => "not_ready",
            Self::ProviderError => "provider_error",
            Self::ProviderAuth => "provider_auth",
            Self::ProviderQuota => "provider_quota",
            Self::RateLimited => "rate_limited",
            Self::ContextWindow => "context_window",
            Self::ToolCallingUnsupported => "tool_calling_unsupported",
            Self::Connectivity => "connectivity",
            Self::BudgetExhausted => "budget_exhausted",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::Internal => "internal",
            Self::BudgetExceeded => "budget_exceeded",
            Self::ModelMissingVerdict => "model_missing_verdict",
            Self::ModelEmptyAnswer => "model_empty_answer",
            Self::ModelUnaddressedFlags => "model_unaddressed_flags",
            Self::RunnerUnavailable => "runner_unavailable",
        }
    }

    /// One-line operator summary stored as `error_summary`.
    pub fn summary(self) -> &'static str {
        match self {
            Self::RunnerLost => "the runner stopped before the run finished",
            Self::ScopeEmpty => "none of the requested resources exist any more",
            Self::NotReady => "Patrol is not ready: check the provider and model settings",
            Self::ProviderError => "the model provider failed the request",
            Self::ProviderAuth => "the model provider rejected the credentials",
            Self::ProviderQuota => "the model provider account is out of quota",
            Self::RateLimited => "the model provider rate-limited the run",
            Self::ContextWindow => "the request exceeded the model's context window",
            Self::ToolCallingUnsupported => "the selected model cannot call tools",
            Self::Connectivity => "the model provider could not be reached",
            Self::BudgetExhausted => "the run used up its budget before finishing",
            Self::Timeout => "the run took longer than its time limit",
            Self::Cancelled => "the run was cancelled",
            Self::Internal => "an internal error stopped the run",
            Self::BudgetExceeded => "a model spend budget of this organization is used up",
            Self::ModelMissingVerdict => "the model ended without a verdict on an active finding",
            Self::ModelEmptyAnswer => "the model answered with nothing: no analysis was made",
            Self::ModelUnaddressedFlags => {
                "the model left flagged resources unaddressed: no all-clear is given"
            }
            Self::RunnerUnavailable => "no model-runner took the run before its deadline",
        }
    }

    /// Whether the cause lies in the model's analysis (it skipped work it was given), as opposed
    /// to the provider path or Pulse itself.
    pub fn is_model_analysis(self) -> bool {
        matches!(
            self,
            Self::ModelMissingVerdict | Self::ModelEmptyAnswer | Self::ModelUnaddressedFlags
        )
    }

    /// What the operator should do about it.
    pub fn recommendation(self) -> &'static str {
        match self {
            Self::RunnerLost => "check that the model-runner is running; the next run retries",
            Self::ScopeEmpty => "run Patrol on resources that exist",
            Self::NotReady => "fix the provider and model in the AI settings, then run again",
            Self::ProviderError
            | Self::ProviderAuth
            | Self::ProviderQuota
            | Self::RateLimited
            | Self::Connectivity => {
                "check the provider's status, credentials and quota in the AI settings"
            }
            Self::ContextWindow => {
                "choose a model with a larger context window, or narrow the scope"
            }
            Self::ToolCallingUnsupported => "choose a Patrol model that supports tool calling",
            Self::BudgetExhausted => "narrow the scope or raise the run's turn and token limits",
            Self::Timeout => "check the provider's latency, or raise the run's time limit",
            Self::Cancelled => "run Patrol again when ready",
            Self::Internal => "see the service logs for the detail; the next run retries",
            Self::BudgetExceeded => {
                "wait for the budget period to reset, or raise the budget in the AI settings"
            }
            Self::ModelMissingVerdict | Self::ModelEmptyAnswer | Self::ModelUnaddressedFlags => {
                "check the Patrol model, or change it to a stronger model that follows tool instructions"
            }
            Self::RunnerUnavailable => {
                "check that the model-runner service is running and connected to NATS"
            }
        }
    }
}

impl fmt::Display for ErrorCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happened to a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    /// A runner took the job and is about to call the model.
    Started,
    /// The model loop finished; `issues_found` when the run accepted any finding.
    Completed { issues_found: bool },
    /// The run ended with a classified error (before or after it started).
    Failed { cause: ErrorCause },
    /// The job lease expired without a terminal report.
    RunnerLost,
}

impl RunEvent {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::Completed { .. } => "completed",
            Self::Failed { .. } => "failed",
            Self::RunnerLost => "runner_lost",
        }
    }

    /// The error cause this event records, if it ends the run in `error`.
    pub fn error_cause(&self) -> Option<ErrorCause> {
        match self {
            Self::Failed { cause } => Some(*cause),
            Self::RunnerLost => Some(ErrorCause::RunnerLost),
            Self::Started | Self::Completed { .. } => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("illegal run transition: {event} in status {from}", event = .event.as_str())]
pub struct IllegalTransition {
    pub from: RunStatus,
    pub event: RunEvent,
}

/// The run state machine.
pub fn transition(from: RunStatus, event: RunEvent) -> Result<RunStatus, IllegalTransition> {
    use RunEvent as E;
    use RunStatus as S;
    match (from, event) {
        (S::Queued, E::Started) => Ok(S::Running),
        (S::Running, E::Completed { issues_found }) => Ok(if issues_found {
            S::IssuesFound
        } else {
            S::Healthy
        }),
        (S::Queued | S::Running, E::Failed { .. } | E::RunnerLost) => Ok(S::Error),
        _ => Err(IllegalTransition { from, event }),
    }
}

/// Resources checked per type (upstream `*_checked` names where one exists).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct CheckedCounts {
    pub resources_checked: u32,
    pub hosts_checked: u32,
    /// Application containers (upstream `docker_checked`).
    pub docker_checked: u32,
    pub services_checked: u32,
    pub storage_checked: u32,
}

/// The run's verdict on one existing finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct FindingAssessment {
    pub finding_id: String,
    pub verdict: String,
    pub evidence: String,
    pub reason: String,
    pub assessed_at: DateTime<Utc>,
}

/// One tool call the model made, with input and output cut to [`ToolCallRecord::MAX_IO_CHARS`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ToolCallRecord {
    pub id: String,
    pub tool_name: String,
    pub input: String,
    pub output: String,
    pub success: bool,
    pub start_time: DateTime<Utc>,
    pub end_time: DateTime<Utc>,
    pub duration_ms: u64,
    /// The model wrote this call as text and Pulse recovered it (absent when it did not).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recovered_from_text: bool,
}

impl ToolCallRecord {
    pub const MAX_IO_CHARS: usize = 4_096;

    /// A record whose input and output are bounded; the duration comes from the two times.
    pub fn new(
        id: impl Into<String>,
        tool_name: impl Into<String>,
        input: &str,
        output: &str,
        success: bool,
        start_time: DateTime<Utc>,
        end_time: DateTime<Utc>,
    ) -> Self {
        let duration_ms = (end_time - start_time).num_milliseconds().max(0) as u64;
        Self {
            id: id.into(),
            tool_name: tool_name.into(),
            input: truncate_chars(input, Self::MAX_IO_CHARS),
            output: truncate_chars(output, Self::MAX_IO_CHARS),
            success,
            start_time,
            end_time,
            duration_ms,
            recovered_from_text: false,
        }
    }

    /// Marks the call as one the model wrote as text.
    pub fn recovered_from_text(mut self, recovered: bool) -> Self {
        self.recovered_from_text = recovered;
        self
    }
}

/// The durable record of one Patrol run (`patrol_runs`), upstream `PatrolRunRecord` names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct PatrolRun {
    pub id: RunId,
    pub trigger_reason: TriggerReason,
    #[serde(rename = "type")]
    pub run_type: RunType,
    pub status: RunStatus,
    pub queued_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub duration_ms: Option<u64>,
    /// Requested scope, as the caller named it.
    pub scope_resource_ids: Vec<String>,
    /// Canonical ids the requested scope resolved to.
    pub effective_scope_resource_ids: Vec<String>,
    pub scope_resource_types: Vec<ResourceType>,
    pub scope_context: Option<String>,
    pub alert_identifier: Option<String>,
    pub alert_type: Option<String>,
    #[serde(flatten)]
    pub counts: CheckedCounts,
    pub new_findings: u32,
    pub existing_findings: u32,
    pub rejected_findings: u32,
    pub resolved_findings: u32,
    pub finding_ids: Vec<String>,
    pub finding_assessments: Vec<FindingAssessment>,
    pub tool_calls: Vec<ToolCallRecord>,
    pub tool_call_count: u32,
    /// Of `tool_call_count`, the calls the model wrote as text that Pulse turned into tool calls:
    /// a route that needs this has no working native tool calling (absent in records written
    /// before it was counted).
    #[serde(default)]
    pub tool_calls_recovered: u32,
    /// Model turns (answered provider calls) the run took; absent in records written before
    /// runs were executed.
    #[serde(default)]
    pub turns: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// `None` when the route has no known price (local models).
    pub cost_usd: Option<f64>,
    pub error_count: u32,
    pub error_cause: Option<ErrorCause>,
    pub error_summary: Option<String>,
    pub error_detail: Option<String>,
    /// What the operator should do about the error (absent in records written before it was
    /// recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_recommendation: Option<String>,
    /// Display-safe analysis text.
    pub ai_analysis: Option<String>,
}

impl PatrolRun {
    pub const MAX_ERROR_DETAIL_CHARS: usize = 2_000;

    /// A freshly accepted run.
    pub fn queued(
        id: RunId,
        trigger_reason: TriggerReason,
        run_type: RunType,
        queued_at: DateTime<Utc>,
    ) -> Self {
        Self {
            id,
            trigger_reason,
            run_type,
            status: RunStatus::Queued,
            queued_at,
            started_at: None,
            completed_at: None,
            duration_ms: None,
            scope_resource_ids: Vec::new(),
            effective_scope_resource_ids: Vec::new(),
            scope_resource_types: Vec::new(),
            scope_context: None,
            alert_identifier: None,
            alert_type: None,
            counts: CheckedCounts::default(),
            new_findings: 0,
            existing_findings: 0,
            rejected_findings: 0,
            resolved_findings: 0,
            finding_ids: Vec::new(),
            finding_assessments: Vec::new(),
            tool_calls: Vec::new(),
            tool_call_count: 0,
            tool_calls_recovered: 0,
            turns: 0,
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: None,
            error_count: 0,
            error_cause: None,
            error_summary: None,
            error_recommendation: None,
            error_detail: None,
            ai_analysis: None,
        }
    }

    /// A freshly accepted scoped run, carrying the requested scope and alert identity.
    pub fn scoped(
        id: RunId,
        trigger_reason: TriggerReason,
        request: &ScopedRequest,
        queued_at: DateTime<Utc>,
    ) -> Self {
        let mut run = Self::queued(id, trigger_reason, RunType::Scoped, queued_at);
        run.scope_resource_ids = request.scope.resource_ids.clone();
        run.scope_resource_types = request.scope.resource_types.clone();
        run.scope_context = request.context.clone();
        run.alert_identifier = request.alert_identifier.clone();
        run.alert_type = request.alert_type.clone();
        run
    }

    /// Records the canonical resources the requested scope resolved to.
    pub fn set_effective_scope(&mut self, scope: &EffectiveScope) {
        self.effective_scope_resource_ids = scope
            .resource_ids()
            .iter()
            .map(|id| id.as_str().to_owned())
            .collect();
    }

    /// Applies `event` at `at`: the status moves by [`transition`], and the timings and the
    /// classified error follow. An illegal event leaves the record untouched.
    pub fn apply(
        &mut self,
        event: RunEvent,
        at: DateTime<Utc>,
        detail: Option<&str>,
    ) -> Result<RunStatus, IllegalTransition> {
        let to = transition(self.status, event)?;
        self.status = to;
        if event == RunEvent::Started {
            self.started_at = Some(at);
        }
        if to.is_terminal() {
            self.completed_at = Some(at);
            let from = self.started_at.unwrap_or(self.queued_at);
            self.duration_ms = Some((at - from).num_milliseconds().max(0) as u64);
        }
        if let Some(cause) = event.error_cause() {
            self.error_count = self.error_count.saturating_add(1);
            self.error_cause = Some(cause);
            self.error_summary = Some(cause.summary().to_owned());
            self.error_recommendation = Some(cause.recommendation().to_owned());
            self.error_detail = detail.map(|d| truncate_chars(d, Self::MAX_ERROR_DETAIL_CHARS));
        }
        Ok(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn all_events() -> Vec<RunEvent> {
        let mut events = vec![
            RunEvent::Started,
            RunEvent::Completed {
                issues_found: false,
            },
            RunEvent::Completed { issues_found: true },
            RunEvent::RunnerLost,
        ];
        events.extend(ErrorCause::ALL.map(|cause| RunEvent::Failed { cause }));
        events
    }

    fn expected(from: RunStatus, event: RunEvent) -> Option<RunStatus> {
        match (from, event) {
            (RunStatus::Queued, RunEvent::Started) => Some(RunStatus::Running),
            (RunStatus::Running, RunEvent::Completed { issues_found: true }) => {
                Some(RunStatus::IssuesFound)
            }
            (
                RunStatus::Running,
                RunEvent::Completed {
                    issues_found: false,
                },
            ) => Some(RunStatus::Healthy),
            (RunStatus::Queued | RunStatus::Running, RunEvent::Failed { .. })
            | (RunStatus::Queued | RunStatus::Running, RunEvent::RunnerLost) => {
                Some(RunStatus::Error)
            }
            _ => None,
        }
    }

    #[test]
    fn transition_table_is_exhaustive() {
        let mut legal = 0;
        for from in RunStatus::ALL {
            for event in all_events() {
                let got = transition(from, event);
                match expected(from, event) {
                    Some(to) => {
                        legal += 1;
                        assert_eq!(got, Ok(to), "{from} + {}", event.as_str());
                    }
                    None => assert_eq!(
                        got,
                        Err(IllegalTransition { from, event }),
                        "{from} + {}",
                        event.as_str()
                    ),
                }
            }
        }
        // queued: started + every failure + runner_lost; running: 2 completions + every failure
        // + runner_lost.
        let failures = ErrorCause::ALL.len();
        assert_eq!(legal, (failures + 2) + (failures + 3));
    }

    #[test]
    fn terminal_statuses_accept_no_event() {
        for from in RunStatus::ALL.into_iter().filter(|s| s.is_terminal()) {
            for event in all_events() {
                assert!(
                    transition(from, event).is_err(),
                    "{from} accepted {event:?}"
                );
            }
        }
        assert!(!RunStatus::Queued.is_terminal());
        assert!(!RunStatus::Running.is_terminal());
    }

    fn event_strategy() -> impl proptest::strategy::Strategy<Value = RunEvent> {
        let events = all_events();
        proptest::sample::select(events)
    }

    proptest::proptest! {
        /// Whatever events arrive, in whatever order or number (redeliveries, a lost runner
        /// reporting late), at most one of them ends the run, and nothing moves it afterwards.
        #[test]
        fn at_most_one_terminal_transition(
            events in proptest::collection::vec(event_strategy(), 0..12)
        ) {
            let mut status = RunStatus::Queued;
            let mut terminal_writes = 0;
            let mut starts = 0;
            for event in events {
                if let Ok(to) = transition(status, event) {
                    if to.is_terminal() {
                        terminal_writes += 1;
                    }
                    if to == RunStatus::Running {
                        starts += 1;
                    }
                    status = to;
                }
            }
            proptest::prop_assert!(terminal_writes <= 1);
            proptest::prop_assert!(starts <= 1, "the model would run twice");
        }
    }

    #[test]
    fn redelivered_job_cannot_start_a_finished_run() {
        for done in [RunStatus::Healthy, RunStatus::IssuesFound, RunStatus::Error] {
            assert!(transition(done, RunEvent::Started).is_err());
        }
        // A second runner picking up a job already running is refused as well.
        assert!(transition(RunStatus::Running, RunEvent::Started).is_err());
    }

    #[test]
    fn runner_lost_ends_in_error_with_runner_lost_cause() {
        let t0 = Utc.with_ymd_and_hms(2026, 3, 1, 10, 0, 0).unwrap();
        let mut run = PatrolRun::queued(
            RunId::from_uuid(Uuid::from_u128(7)),
            TriggerReason::Scheduled,
            RunType::Full,
            t0,
        );
        run.apply(RunEvent::Started, t0 + chrono::Duration::seconds(2), None)
            .unwrap();
        let to = run
            .apply(
                RunEvent::RunnerLost,
                t0 + chrono::Duration::seconds(62),
                Some("lease expired"),
            )
            .unwrap();
        assert_eq!(to, RunStatus::Error);
        assert_eq!(run.error_cause, Some(ErrorCause::RunnerLost));
        assert_eq!(run.duration_ms, Some(60_000));
        assert_eq!(run.error_detail.as_deref(), Some("lease expired"));
        // A late completion from the lost runner is refused and changes nothing.
        let before = run.clone();
        assert!(
            run.apply(
                RunEvent::Completed { issues_found: true },
                t0 + chrono::Duration::seconds(90),
                None
            )
            .is_err()
        );
        assert_eq!(run, before);
    }

    #[test]
    fn wire_names_round_trip() {
        for reason in TriggerReason::ALL {
            let json = serde_json::to_value(reason).unwrap();
            assert_eq!(json, serde_json::json!(reason.as_str()));
            assert_eq!(
                serde_json::from_value::<TriggerReason>(json).unwrap(),
                reason
            );
        }
        for status in RunStatus::ALL {
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::json!(status.as_str())
            );
        }
        for cause in ErrorCause::ALL {
            let json = serde_json::to_value(cause).unwrap();
            assert_eq!(json, serde_json::json!(cause.as_str()));
            assert_eq!(serde_json::from_value::<ErrorCause>(json).unwrap(), cause);
        }
        assert_eq!(serde_json::to_value(RunType::Scoped).unwrap(), "scoped");
    }

    #[test]
    fn run_id_parses_uuids_only() {
        let id: RunId = "0190f5a2-0000-7000-8000-000000000001".parse().unwrap();
        assert_eq!(id.to_string(), "0190f5a2-0000-7000-8000-000000000001");
        assert!("not-a-run".parse::<RunId>().is_err());
    }

    #[test]
    fn tool_call_io_is_bounded() {
        let t0 = Utc.with_ymd_and_hms(2026, 3, 1, 10, 0, 0).unwrap();
        let big = "é".repeat(ToolCallRecord::MAX_IO_CHARS + 10);
        let call = ToolCallRecord::new(
            "call-1",
            "read_logs",
            &big,
            &big,
            true,
            t0,
            t0 + chrono::Duration::milliseconds(250),
        );
        assert_eq!(call.input.chars().count(), ToolCallRecord::MAX_IO_CHARS);
        assert_eq!(call.output.chars().count(), ToolCallRecord::MAX_IO_CHARS);
        assert_eq!(call.duration_ms, 250);
    }

    #[test]
    fn patrol_run_wire_shape() {
        let t0 = Utc.with_ymd_and_hms(2026, 3, 1, 10, 0, 0).unwrap();
        let request = ScopedRequest {
            scope: crate::patrol::scope::RequestedScope {
                resource_ids: vec!["web".to_owned()],
                resource_types: vec![ResourceType::AppContainer],
            },
            alert_identifier: Some("app-container:h1:abc:memory_usage".to_owned()),
            alert_type: Some("memory_usage".to_owned()),
            context: Some("memory_usage critical on web".to_owned()),
        };
        let mut run = PatrolRun::scoped(
            RunId::from_uuid(Uuid::from_u128(0x0190_f5a2_0000_7000_8000_0000_0000_0001)),
            TriggerReason::AlertFired,
            &request,
            t0,
        );
        assert_eq!(run.run_type, RunType::Scoped);
        run.set_effective_scope(
            &EffectiveScope::new([crate::resource::ResourceId::app_container("h1", "abc")])
                .unwrap(),
        );
        run.apply(RunEvent::Started, t0 + chrono::Duration::seconds(1), None)
            .unwrap();
        run.counts = CheckedCounts {
            resources_checked: 1,
            hosts_checked: 0,
            docker_checked: 1,
            services_checked: 0,
            storage_checked: 0,
        };
        run.new_findings = 1;
        run.finding_ids = vec!["0123456789abcdef".to_owned()];
        run.finding_assessments = vec![FindingAssessment {
            finding_id: "fedcba9876543210".to_owned(),
            verdict: "still_present".to_owned(),
            evidence: "rss 1.9 GiB of 2 GiB".to_owned(),
            reason: "memory still near the limit".to_owned(),
            assessed_at: t0 + chrono::Duration::seconds(20),
        }];
        run.tool_calls = vec![ToolCallRecord::new(
            "call-1",
            "get_resource",
            r#"{"resource_id":"app-container:h1:abc"}"#,
            r#"{"status":"running"}"#,
            true,
            t0 + chrono::Duration::seconds(2),
            t0 + chrono::Duration::seconds(3),
        )];
        run.tool_call_count = 1;
        run.turns = 3;
        run.input_tokens = 5_000;
        run.output_tokens = 400;
        run.cost_usd = Some(0.0125);
        run.ai_analysis = Some("web is close to its memory limit".to_owned());
        run.apply(
            RunEvent::Completed { issues_found: true },
            t0 + chrono::Duration::seconds(31),
            None,
        )
        .unwrap();
        insta::assert_json_snapshot!("patrol_run_issues_found", run);

        let mut failed = PatrolRun::queued(
            RunId::from_uuid(Uuid::from_u128(2)),
            TriggerReason::Scheduled,
            RunType::Full,
            t0,
        );
        failed
            .apply(
                RunEvent::Failed {
                    cause: ErrorCause::NotReady,
                },
                t0,
                Some("no provider configured"),
            )
            .unwrap();
        insta::assert_json_snapshot!("patrol_run_refused_not_ready", failed);
        let back: PatrolRun = serde_json::from_value(serde_json::to_value(&run).unwrap()).unwrap();
        assert_eq!(back, run);
    }
}
