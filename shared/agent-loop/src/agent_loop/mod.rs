//! The provider-neutral agentic loop: ask the model, admit its tool calls through the run's
//! [`RunGate`], execute the admitted ones, feed the results back, and stop on a final answer or a
//! limit.
//!
//! Order of work per turn: the usage sink's admission of the call (the tenant spend budgets),
//! compaction, request build, redaction and the export audit (the last
//! steps before transport), the provider call, its usage report, recovery of calls written as
//! text (when the run allows it and the answer has no native call), the batch plan (a call
//! identical to an earlier one of the same answer is not admitted or run again, and distinct
//! calls past [`LoopLimits::max_calls_per_turn`] are refused with a message the model can act
//! on; see `batch_plan`), admission of the whole batch (a terminal denial stops the run before
//! any handler runs), execution, and result assembly in the model's call order: every call id
//! gets exactly one result, a repeated call the note "same call as <id>; see its result" (a
//! note, not a copy, so forty repeats of a large read do not fill a small model's context).
//!
//! A call recovered from text is a call like any other from then on: it was only recovered
//! because the run's policy admits it (offered name, arguments valid against the offered schema),
//! it passes the run's gate again with the native calls' per-run rules, the assistant turn in the
//! history carries it as a tool call so its result pairs up, and the text that held it is no
//! longer the turn's answer. Its record says it came from text, and the outcome counts it.

mod batch_plan;
pub mod compaction;
mod dispatch;
pub mod export;
pub mod text_calls;
pub mod usage;

use std::sync::Arc;
use std::time::{Duration, Instant};

use pulse_capabilities::{CallRef, DenialCode, GateError, RunGate, TerminalDenial};
use pulse_redaction::{RedactionReport, Redactor, TrustBoundary};
use serde::Serialize;

use crate::provider::types::{
    ChatRequest, ChatResponse, INTERRUPTED_TOOL_RESULT, Message, StreamEvent, Tool, ToolCall,
    ToolChoice, ToolResult, Usage,
};
use crate::provider::{FailureCause, Provider, ProviderFailure};
use crate::registry::RouteClass;
use crate::route::Route;

use compaction::bounded_head;
// Re-exported so callers of the loop need no direct dependency for its signatures.
pub use futures::future::BoxFuture;
pub use pulse_capabilities::{AdmittedCall, ExecutionProfile, ToolPolicy};

use batch_plan::Disposition;
pub use compaction::{
    CharsPerToken, CompactionPolicy, CompactionReport, STUB_MARKER, TokenEstimator, compact,
};
use dispatch::Pending;
pub use export::{ExportAudit, ExportsNotAudited, ProviderExport};
pub use usage::{CallOutcome, ProviderCallUsage, UsageNotRecorded, UsageSink};

/// A run hook could not record what it was told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RecordError {
    pub message: String,
}

impl RecordError {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// Legacy service loops may call the provider at most this often (ARCHITECTURE §9).
pub const LEGACY_MAX_PROVIDER_CALLS: u32 = 10;
/// Admitted calls of one batch running at once.
pub const DEFAULT_MAX_PARALLEL_TOOLS: usize = 4;
/// Distinct calls of one answer that may run; see [`LoopLimits::max_calls_per_turn`].
pub const DEFAULT_MAX_CALLS_PER_TURN: usize = 16;
/// Characters of a call's input and output kept in its record.
pub const RECORD_BOUND_CHARS: usize = 2_000;

/// One model turn over some transport; [`Provider`] is the real one.
pub trait ChatTransport: Send + Sync {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderFailure>>;
}

impl ChatTransport for Provider {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
        on_event: &'a mut (dyn FnMut(StreamEvent) + Send),
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderFailure>> {
        Box::pin(Provider::chat(self, request, on_event))
    }
}

/// Executes admitted calls. Only ever sees calls that passed the run's gate.
pub trait ToolHandler: Send + Sync {
    fn call<'a>(
        &'a self,
        call: &'a ToolCall,
        admitted: &'a AdmittedCall,
    ) -> BoxFuture<'a, ToolResult>;
}

/// Watches a run as it happens, for surfaces that stream it (the Assistant). Every method has a
/// default that does nothing; the loop never waits on an observer except at
/// [`LoopObserver::turn_boundary`].
pub trait LoopObserver: Send + Sync {
    /// A provider stream event of model turn `turn` (from 1), as it arrives.
    fn stream_event(&self, _turn: u32, _event: &StreamEvent) {}
    /// A call the run's gate refused before dispatch; the model gets `message` as its result.
    fn call_denied(&self, _call: &ToolCall, _message: &str) {}
    /// An admitted call of the batch about to run.
    fn call_admitted(&self, _call: &ToolCall) {}
    /// A call's outcome (bounded and redacted).
    fn call_finished(&self, _record: &ToolCallRecord) {}
    /// Before every model turn after the first: messages to add to the history (operator
    /// steering applied at a turn boundary).
    fn turn_boundary(&self) -> BoxFuture<'_, Vec<Message>> {
        Box::pin(async { Vec::new() })
    }
}

/// What the token allowance says after a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllowanceDecision {
    Continue,
    /// One more turn without tools, for the final answer; then the run ends.
    FinalTurnOnly,
    /// End the run now.
    Stop,
}

/// A run's token allowance (Watch), told the usage after every turn.
pub trait TokenAllowance: Send {
    fn after_turn(&mut self, turn: u32, turn_usage: Usage, total: Usage) -> AllowanceDecision;
}

/// The bounds of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopLimits {
    /// Model turns (successful provider responses).
    pub max_turns: u32,
    /// HTTP requests to the provider, same-route retries included.
    pub max_provider_calls: u32,
    /// Output tokens per turn.
    pub max_output_tokens: Option<u32>,
    pub max_parallel_tools: usize,
    /// Distinct calls of one answer that go to admission; the rest get an error result asking
    /// the model to call them again in its next answer. The default, 16, is about what a
    /// 2,048-token answer holds in well-formed calls (Watch's structured turns have that
    /// bound), and four rounds of [`Self::max_parallel_tools`]; a 1.5B model was seen writing
    /// 45 and 61 calls in one answer, 41 of the 45 identical, and those tied up two CPU cores
    /// for 105 s. Repeats of a call in the same answer do not count (they never run).
    pub max_calls_per_turn: usize,
    /// Per tool call; a call that overruns gets an error result.
    pub tool_timeout: Duration,
}

impl Default for LoopLimits {
    fn default() -> Self {
        Self {
            max_turns: 8,
            max_provider_calls: LEGACY_MAX_PROVIDER_CALLS,
            max_output_tokens: Some(2_048),
            max_parallel_tools: DEFAULT_MAX_PARALLEL_TOOLS,
            max_calls_per_turn: DEFAULT_MAX_CALLS_PER_TURN,
            tool_timeout: Duration::from_secs(120),
        }
    }
}

/// Compaction settings with the estimator to count with.
#[derive(Clone)]
pub struct Compaction {
    pub policy: CompactionPolicy,
    pub estimator: Arc<dyn TokenEstimator>,
}

impl std::fmt::Debug for Compaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compaction")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Default for Compaction {
    fn default() -> Self {
        Self {
            policy: CompactionPolicy::default(),
            estimator: Arc::new(CharsPerToken::default()),
        }
    }
}

/// Everything one run needs.
pub struct LoopInput<'a> {
    pub transport: &'a dyn ChatTransport,
    /// The one route of the run; its model is the model every request names.
    pub route: Route,
    /// The route's class at its configured address (see `ProviderEntry::route_class_at`).
    pub route_class: RouteClass,
    pub system_prompt: String,
    /// The goal and any seed context, after the system prompt.
    pub messages: Vec<Message>,
    /// The execution profile's policy: its offered tools go into every request and a fresh
    /// [`RunGate`] over it admits every call.
    pub policy: Arc<ToolPolicy>,
    pub handler: &'a dyn ToolHandler,
    /// Applied to every request right before transport. Not optional.
    pub redactor: &'a Redactor,
    /// Told the redaction report of every request right before transport.
    pub exports: &'a dyn ExportAudit,
    /// Told the usage of every provider call right after it.
    pub usage: &'a dyn UsageSink,
    pub limits: LoopLimits,
    pub compaction: Option<Compaction>,
    pub allowance: Option<&'a mut dyn TokenAllowance>,
    pub stream: bool,
    pub temperature: Option<f32>,
    /// Whether calls a model wrote as text (see [`text_calls`]) become tool calls when an answer
    /// has no native one: the route's setting, decided by its caller.
    pub tool_calls_from_text: bool,
    /// The tools every request lists when the run lists more than this turn admits; `None`
    /// lists `policy`'s. See [`ListedTools`].
    pub listed: Option<ListedTools>,
    /// Told what happens as it happens; `None` for runs nobody watches live.
    pub observer: Option<&'a dyn LoopObserver>,
}

/// The tool list of a run whose turns admit different tools (Watch opens with reads only and
/// decides with reports and verdicts only). Every request of such a run lists the same tools,
/// so the request's prefix stays the same from one turn to the next: tool definitions come
/// first in every wire format (a local server's chat template renders them into the system
/// message), and a changed list makes a provider's prompt cache, or a local server's, miss for
/// the whole history. On 2 cores a 5,000-token history read again costs 130 to 160 s.
///
/// Admission does not change: only the turn's `policy` admits. A call to a listed tool the turn
/// does not admit is denied like any call outside `policy` (`tool_not_offered`, counted by the
/// run's gate), with `closed_note` saying what the turn is for.
#[derive(Debug, Clone)]
pub struct ListedTools {
    pub policy: Arc<ToolPolicy>,
    pub closed_note: String,
}

impl ListedTools {
    /// The model's message for a call to `tool`, listed but closed this turn; `None` when the
    /// run does not list it either.
    fn closed_message(&self, tool: &str) -> Option<String> {
        self.policy
            .offered_tools()
            .any(|t| t.name == tool)
            .then(|| {
                format!(
                    "denied ({}): {tool} is not open in this turn: {}. The call did not run.",
                    DenialCode::ToolNotOffered,
                    self.closed_note
                )
            })
    }
}

/// Why the run stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum LoopStop {
    Completed,
    TurnLimit,
    ProviderCallLimit,
    AllowanceExhausted,
    TerminalDenial(TerminalDenial),
    ProviderFailure {
        cause: FailureCause,
        message: String,
    },
    /// The export audit failed, so the request was not sent.
    ExportNotAudited {
        message: String,
    },
    /// A provider call's usage could not be recorded, so no further call is made.
    UsageNotRecorded {
        message: String,
    },
    /// A tenant spend budget refused the next provider call (the turn before it finished).
    BudgetExceeded {
        budget: pulse_domain::patrol::budget::BudgetKind,
        resets_at: chrono::DateTime<chrono::Utc>,
        /// What happened, when it resets and what to do (safe to show).
        message: String,
    },
}

impl LoopStop {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::TurnLimit => "turn_limit",
            Self::ProviderCallLimit => "provider_call_limit",
            Self::AllowanceExhausted => "allowance_exhausted",
            Self::TerminalDenial(_) => "terminal_denial",
            Self::ProviderFailure { .. } => "provider_failure",
            Self::ExportNotAudited { .. } => "export_not_audited",
            Self::UsageNotRecorded { .. } => "usage_not_recorded",
            Self::BudgetExceeded { .. } => "budget_exceeded",
        }
    }
}

/// What became of one tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CallStatus {
    /// Admitted and executed; `is_error` is the handler's verdict.
    Executed { is_error: bool, timed_out: bool },
    /// Denied before dispatch; the model got the denial as the call's result.
    Denied { code: DenialCode },
    /// The repeated denied call that ended the run.
    Terminal { code: DenialCode },
    /// Admitted but not run because a sibling call ended the run.
    NotRun,
    /// The provider never finished the call; it got a synthetic error result.
    Orphaned,
    /// Identical (name and JSON-equal arguments) to the earlier call `of` of the same answer:
    /// not admitted or run again; its result points at that call's.
    Duplicate { of: String },
    /// A distinct call past the answer's cap on calls: refused before admission; the model was
    /// told to call it again in its next answer.
    OverCap { cap: usize },
}

impl CallStatus {
    /// Whether the call's own result is not an error: it ran without an error or a timeout, or
    /// it repeated an earlier call of the same answer (its result points at that call's, whose
    /// own status tells how it went).
    pub fn succeeded(&self) -> bool {
        matches!(
            self,
            CallStatus::Executed {
                is_error: false,
                timed_out: false
            } | CallStatus::Duplicate { .. }
        )
    }
}

/// One tool call as the run saw it. Input and output are bounded and redacted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolCallRecord {
    pub turn: u32,
    pub call_id: String,
    pub name: String,
    pub status: CallStatus,
    pub duration: Duration,
    pub input: String,
    pub output: String,
    /// The model wrote this call as text; the loop recovered it (see [`text_calls`]).
    pub recovered_from_text: bool,
}

/// Where one turn's time went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TurnTiming {
    /// The loop's own work: compaction, request build, redaction, admission, result assembly.
    pub overhead: Duration,
    /// The provider call, from request sent to response assembled.
    pub provider: Duration,
    /// The tool batch, from first dispatch to last result.
    pub tools: Duration,
}

/// The result of a run.
#[derive(Debug, Clone)]
pub struct LoopOutcome {
    pub stop: LoopStop,
    /// The last assistant turn's text (the answer when `Completed`).
    pub final_text: String,
    pub turns: u32,
    pub provider_calls: u32,
    pub tool_calls: Vec<ToolCallRecord>,
    /// Of `tool_calls`, how many the model wrote as text: a route that needs this is weak.
    pub tool_calls_recovered: u32,
    /// Of `tool_calls`, how many repeated an earlier call of the same answer and did not run.
    pub tool_calls_deduplicated: u32,
    /// Of `tool_calls`, how many were past their answer's cap and refused.
    pub tool_calls_over_cap: u32,
    pub usage: Usage,
    /// One per request sent, in order.
    pub redactions: Vec<RedactionReport>,
    pub compactions: Vec<CompactionReport>,
    pub timings: Vec<TurnTiming>,
    /// The history as it stands at the end (compacted where it was compacted).
    pub messages: Vec<Message>,
}

/// The agentic loop.
#[derive(Debug, Clone, Copy, Default)]
pub struct AgentLoop;

struct RunState {
    messages: Vec<Message>,
    turns: u32,
    provider_calls: u32,
    usage: Usage,
    records: Vec<ToolCallRecord>,
    redactions: Vec<RedactionReport>,
    compactions: Vec<CompactionReport>,
    timings: Vec<TurnTiming>,
    final_text: String,
    tool_calls_recovered: u32,
    tool_calls_deduplicated: u32,
    tool_calls_over_cap: u32,
}

impl AgentLoop {
    pub async fn run(input: LoopInput<'_>) -> LoopOutcome {
        let LoopInput {
            transport,
            route,
            route_class,
            system_prompt,
            messages,
            policy,
            handler,
            redactor,
            exports,
            usage: usage_sink,
            limits,
            compaction,
            mut allowance,
            stream,
            temperature,
            tool_calls_from_text,
            listed,
            observer,
        } = input;
        let tools: Vec<Tool> = listed
            .as_ref()
            .map_or(&policy, |l| &l.policy)
            .offered_tools()
            .map(|t| Tool {
                name: t.name.to_owned(),
                description: t.description.to_owned(),
                parameters: t.parameters.clone(),
            })
            .collect();
        let mut gate = RunGate::new(policy);
        let mut state = RunState {
            messages: std::iter::once(Message::system(system_prompt))
                .chain(messages)
                .collect(),
            turns: 0,
            provider_calls: 0,
            usage: Usage::default(),
            records: Vec::new(),
            redactions: Vec::new(),
            compactions: Vec::new(),
            timings: Vec::new(),
            final_text: String::new(),
            tool_calls_recovered: 0,
            tool_calls_deduplicated: 0,
            tool_calls_over_cap: 0,
        };
        let mut final_turn_only = false;

        let stop = loop {
            if state.turns >= limits.max_turns {
                break LoopStop::TurnLimit;
            }
            if state.provider_calls >= limits.max_provider_calls {
                break LoopStop::ProviderCallLimit;
            }
            if let Some(stop) = budget_stop(usage_sink.admit_call(&route, route_class).await) {
                break stop;
            }
            if let (Some(o), true) = (observer, state.turns > 0) {
                state.messages.extend(o.turn_boundary().await);
            }
            let mut timing = TurnTiming::default();
            let prep_started = Instant::now();

            if let Some(report) = compaction
                .as_ref()
                .and_then(|c| compact(&mut state.messages, &c.policy, &*c.estimator))
            {
                tracing::debug!(
                    tokens_before = report.tokens_before,
                    tokens_after = report.tokens_after,
                    stubbed = report.stubbed,
                    "agent loop compacted its history"
                );
                state.compactions.push(report);
            }
            let mut request = ChatRequest {
                model: route.model().to_owned(),
                messages: state.messages.clone(),
                tools: if final_turn_only {
                    Vec::new()
                } else {
                    tools.clone()
                },
                tool_choice: if final_turn_only || tools.is_empty() {
                    ToolChoice::None
                } else {
                    ToolChoice::Auto
                },
                max_output_tokens: limits.max_output_tokens,
                temperature,
                stream,
            };
            // The last things before transport: the sanitizer, then the audit of what it did.
            let report = redactor.sanitize(&mut request);
            // One report per request sent: this request's position in the run.
            let call_no = u32::try_from(state.redactions.len() + 1).unwrap_or(u32::MAX);
            let export = ProviderExport {
                call: call_no,
                report: &report,
            };
            if let Err(e) = exports.exported(&export).await {
                tracing::warn!(error = %e, "provider export could not be audited; request not sent");
                timing.overhead += prep_started.elapsed();
                state.timings.push(timing);
                break LoopStop::ExportNotAudited { message: e.message };
            }
            state.redactions.push(report);
            timing.overhead += prep_started.elapsed();

            let provider_started = Instant::now();
            let mut retries = 0u32;
            let model_turn = state.turns + 1;
            // Where calls may be written as text, a client is shown only the text that cannot
            // be one until the answer is complete and recovered.
            let may_recover = tool_calls_from_text && !final_turn_only && !tools.is_empty();
            let mut hold = may_recover.then(text_calls::StreamHold::default);
            let mut on_event = |event: StreamEvent| {
                if matches!(event, StreamEvent::ProviderRetry { .. }) {
                    retries += 1;
                }
                let Some(o) = observer else {
                    return;
                };
                match (&event, hold.as_mut()) {
                    (StreamEvent::Content { text }, Some(hold)) => {
                        let shown = hold.push(text);
                        if !shown.is_empty() {
                            o.stream_event(model_turn, &StreamEvent::Content { text: shown });
                        }
                    }
                    _ => o.stream_event(model_turn, &event),
                }
            };
            let result = transport.chat(&request, &mut on_event).await;
            timing.provider = provider_started.elapsed();
            state.provider_calls = state
                .provider_calls
                .saturating_add(1)
                .saturating_add(retries);
            let (call_usage, outcome) = match &result {
                Ok(response) => (response.usage, CallOutcome::Completed),
                Err(failure) => (Usage::default(), CallOutcome::Failed(failure.cause)),
            };
            let recorded = usage_sink
                .record(&ProviderCallUsage {
                    route: &route,
                    route_class,
                    call: call_no,
                    usage: call_usage,
                    outcome,
                })
                .await;
            let mut response = match result {
                Ok(response) => response,
                Err(failure) => {
                    state.timings.push(timing);
                    if let Err(e) = recorded {
                        tracing::warn!(error = %e, "usage of a failed provider call not recorded");
                    }
                    break LoopStop::ProviderFailure {
                        cause: failure.cause,
                        message: failure.message,
                    };
                }
            };
            if let Err(e) = recorded {
                tracing::warn!(error = %e, "provider call usage could not be recorded; run stops");
                state.turns += 1;
                state.usage += response.usage;
                state.timings.push(timing);
                break LoopStop::UsageNotRecorded { message: e.message };
            }

            let assembly_started = Instant::now();
            state.turns += 1;
            state.usage += response.usage;
            // Only a turn that offered tools can have called one.
            let recovered = may_recover
                && recover_text_calls(&mut response, gate.policy(), state.tool_calls_recovered);
            if let (Some(o), Some(hold)) = (observer, hold) {
                let rest = hold.finish(&response.content, recovered);
                if !rest.is_empty() {
                    o.stream_event(model_turn, &StreamEvent::Content { text: rest });
                }
            }
            if recovered {
                let count = u32::try_from(response.tool_calls.len()).unwrap_or(u32::MAX);
                state.tool_calls_recovered = state.tool_calls_recovered.saturating_add(count);
                tracing::info!(route = %route, count, "tool calls recovered from the model's text");
                usage_sink.tool_calls_recovered(&route, route_class, count);
            }
            state.final_text.clone_from(&response.content);
            state.messages.push(response.assistant_message());

            if final_turn_only {
                timing.overhead += assembly_started.elapsed();
                state.timings.push(timing);
                break if response.tool_calls.is_empty() {
                    LoopStop::Completed
                } else {
                    LoopStop::AllowanceExhausted
                };
            }
            if response.tool_calls.is_empty() && response.orphaned_tool_calls.is_empty() {
                timing.overhead += assembly_started.elapsed();
                state.timings.push(timing);
                break LoopStop::Completed;
            }

            // Admit the whole batch first: a terminal denial must leave no side effect.
            let turn = state.turns;
            let calls = &response.tool_calls;
            let plan = batch_plan::plan(calls, limits.max_calls_per_turn);
            let mut slots: Vec<Option<ToolResult>> = vec![None; calls.len()];
            let mut records: Vec<Option<ToolCallRecord>> = vec![None; calls.len()];
            let mut pending = Vec::new();
            let mut terminal = None;
            let mut over_cap = 0u32;
            for ((index, call), disposition) in calls.iter().enumerate().zip(&plan) {
                match disposition {
                    Disposition::Admit => {}
                    // Answered from the first call's result once it has one.
                    Disposition::DuplicateOf(_) => continue,
                    Disposition::OverCap => {
                        let cap = limits.max_calls_per_turn.max(1);
                        let result = ToolResult::error(&call.id, over_cap_message(cap));
                        if let Some(o) = observer {
                            o.call_denied(call, &result.content);
                        }
                        let status = CallStatus::OverCap { cap };
                        records[index] = Some(record(
                            redactor,
                            turn,
                            call,
                            status,
                            &result.content,
                            recovered,
                        ));
                        slots[index] = Some(result);
                        over_cap = over_cap.saturating_add(1);
                        continue;
                    }
                }
                let proposed = CallRef {
                    name: &call.name,
                    arguments: &call.arguments,
                };
                match gate.admit(&proposed) {
                    Ok(admitted) => pending.push(Pending {
                        index,
                        call,
                        admitted,
                    }),
                    Err(GateError::Denied(denial)) => {
                        let closed = (denial.code == DenialCode::ToolNotOffered)
                            .then(|| listed.as_ref()?.closed_message(&call.name))
                            .flatten();
                        let message = closed.unwrap_or_else(|| denial.model_message());
                        let result = ToolResult::error(&call.id, message);
                        if let Some(o) = observer {
                            o.call_denied(call, &result.content);
                        }
                        let status = CallStatus::Denied { code: denial.code };
                        records[index] = Some(record(
                            redactor,
                            turn,
                            call,
                            status,
                            &result.content,
                            recovered,
                        ));
                        slots[index] = Some(result);
                    }
                    Err(GateError::Terminal(t)) => {
                        let status = CallStatus::Terminal { code: t.code };
                        records[index] = Some(record(redactor, turn, call, status, "", recovered));
                        terminal = Some(t);
                        break;
                    }
                }
            }
            if over_cap > 0 {
                tracing::info!(route = %route, turn, over_cap, "calls past the answer's cap refused");
                state.tool_calls_over_cap = state.tool_calls_over_cap.saturating_add(over_cap);
            }
            if let Some(t) = terminal {
                for (call, slot) in calls.iter().zip(records) {
                    state.records.push(slot.unwrap_or_else(|| {
                        record(redactor, turn, call, CallStatus::NotRun, "", recovered)
                    }));
                }
                tracing::warn!(tool = %t.tool, code = %t.code, "repeated denied call ends the run");
                timing.overhead += assembly_started.elapsed();
                state.timings.push(timing);
                break LoopStop::TerminalDenial(t);
            }
            timing.overhead += assembly_started.elapsed();
            if let Some(o) = observer {
                for p in &pending {
                    o.call_admitted(p.call);
                }
            }

            let tools_started = Instant::now();
            let executed = dispatch::execute(
                handler,
                pending,
                limits.max_parallel_tools,
                limits.tool_timeout,
            )
            .await;
            timing.tools = tools_started.elapsed();

            let results_started = Instant::now();
            for done in executed {
                if let (Some(call), Some(slot)) =
                    (calls.get(done.index), records.get_mut(done.index))
                {
                    let status = CallStatus::Executed {
                        is_error: done.result.is_error,
                        timed_out: done.timed_out,
                    };
                    let mut rec = record(
                        redactor,
                        turn,
                        call,
                        status,
                        &done.result.content,
                        recovered,
                    );
                    rec.duration = done.duration;
                    if let Some(o) = observer {
                        o.call_finished(&rec);
                    }
                    *slot = Some(rec);
                }
                if let Some(slot) = slots.get_mut(done.index) {
                    *slot = Some(done.result);
                }
            }
            let repeats = answer_duplicates(&plan, calls, &mut slots, &mut records, |call, of| {
                let rec = record(
                    redactor,
                    turn,
                    call,
                    CallStatus::Duplicate { of: of.id.clone() },
                    &duplicate_note(of),
                    recovered,
                );
                if let Some(o) = observer {
                    o.call_finished(&rec);
                }
                rec
            });
            if repeats > 0 {
                tracing::info!(route = %route, turn, repeats, "repeated calls of one answer not run again");
                state.tool_calls_deduplicated =
                    state.tool_calls_deduplicated.saturating_add(repeats);
            }
            // In the model's call order, then the orphans in the order the assistant turn lists
            // them.
            for ((call, slot), rec) in calls.iter().zip(slots).zip(records) {
                let result = slot.unwrap_or_else(|| {
                    ToolResult::error(&call.id, "the tool call produced no result")
                });
                state.records.push(rec.unwrap_or_else(|| {
                    record(
                        redactor,
                        turn,
                        call,
                        CallStatus::NotRun,
                        &result.content,
                        recovered,
                    )
                }));
                state.messages.push(Message::Tool(result));
            }
            for call in &response.orphaned_tool_calls {
                state.records.push(record(
                    redactor,
                    turn,
                    call,
                    CallStatus::Orphaned,
                    INTERRUPTED_TOOL_RESULT,
                    false,
                ));
                state.messages.push(Message::Tool(ToolResult::error(
                    &call.id,
                    INTERRUPTED_TOOL_RESULT,
                )));
            }

            let decision = match allowance.as_deref_mut() {
                Some(a) => a.after_turn(state.turns, response.usage, state.usage),
                None => AllowanceDecision::Continue,
            };
            timing.overhead += results_started.elapsed();
            state.timings.push(timing);
            match decision {
                AllowanceDecision::Continue => {}
                AllowanceDecision::FinalTurnOnly => final_turn_only = true,
                AllowanceDecision::Stop => break LoopStop::AllowanceExhausted,
            }
        };

        LoopOutcome {
            stop,
            final_text: state.final_text,
            turns: state.turns,
            provider_calls: state.provider_calls,
            tool_calls: state.records,
            tool_calls_recovered: state.tool_calls_recovered,
            tool_calls_deduplicated: state.tool_calls_deduplicated,
            tool_calls_over_cap: state.tool_calls_over_cap,
            usage: state.usage,
            redactions: state.redactions,
            compactions: state.compactions,
            timings: state.timings,
            messages: state.messages,
        }
    }
}

/// The stop for a call the usage sink did not admit.
fn budget_stop(admitted: Result<(), usage::BudgetCheckError>) -> Option<LoopStop> {
    match admitted {
        Ok(()) => None,
        Err(usage::BudgetCheckError::Exceeded(refused)) => Some(LoopStop::BudgetExceeded {
            budget: refused.kind,
            resets_at: refused.resets_at,
            message: refused.message(),
        }),
        Err(e @ usage::BudgetCheckError::Unchecked(_)) => {
            tracing::warn!(error = %e, "spend budgets could not be checked; run stops");
            Some(LoopStop::UsageNotRecorded {
                message: e.to_string(),
            })
        }
    }
}

/// Turns the calls an answer without native calls wrote as text into its tool calls, keeping
/// only those the run's policy admits (the same check a native call passes), and takes their
/// text out of the answer. Ids continue the run's count of recovered calls, so they are unique
/// in the run (nine alphanumerics, which every provider's id rules accept). Returns whether any
/// call was recovered.
fn recover_text_calls(
    response: &mut ChatResponse,
    policy: &ToolPolicy,
    recovered_so_far: u32,
) -> bool {
    if !response.tool_calls.is_empty() || !response.orphaned_tool_calls.is_empty() {
        return false;
    }
    let Some(found) = text_calls::recover(&response.content, |call| {
        let proposed = CallRef {
            name: &call.name,
            arguments: &call.arguments,
        };
        policy.admit(&proposed).is_ok()
    }) else {
        return false;
    };
    response.tool_calls = found
        .calls
        .into_iter()
        .zip(recovered_so_far..)
        .map(|(call, n)| {
            ToolCall::new(
                format!("txt{:06}", n % 1_000_000),
                call.name,
                call.arguments,
            )
        })
        .collect();
    response.content = found.remaining_text;
    true
}

/// What a distinct call past the answer's cap of `cap` calls gets as its (error) result.
fn over_cap_message(cap: usize) -> String {
    format!("too many tool calls in one answer: at most {cap} run; ask again for the rest")
}

/// What a call identical to the earlier call `first` of the same answer gets as its result.
fn duplicate_note(first: &ToolCall) -> String {
    format!("same call as {}; see its result", first.id)
}

/// Gives every call the plan marks as a duplicate its note and its record (made by
/// `record_for(call, first)`), and returns how many there were.
fn answer_duplicates(
    plan: &[Disposition],
    calls: &[ToolCall],
    slots: &mut [Option<ToolResult>],
    records: &mut [Option<ToolCallRecord>],
    mut record_for: impl FnMut(&ToolCall, &ToolCall) -> ToolCallRecord,
) -> u32 {
    let mut repeats = 0u32;
    for (index, disposition) in plan.iter().enumerate() {
        let Disposition::DuplicateOf(first) = *disposition else {
            continue;
        };
        let (Some(call), Some(first)) = (calls.get(index), calls.get(first)) else {
            continue;
        };
        // Not an error: the first call's result carries its own verdict.
        if let Some(slot) = slots.get_mut(index) {
            *slot = Some(ToolResult::ok(&call.id, duplicate_note(first)));
        }
        if let Some(slot) = records.get_mut(index) {
            *slot = Some(record_for(call, first));
        }
        repeats = repeats.saturating_add(1);
    }
    repeats
}

/// A bounded, redacted record of one call.
fn record(
    redactor: &Redactor,
    turn: u32,
    call: &ToolCall,
    status: CallStatus,
    output: &str,
    recovered_from_text: bool,
) -> ToolCallRecord {
    // Records may be persisted; they get the same sanitizer as provider-bound text.
    let destination = redactor.destination();
    let mut scratch = RedactionReport {
        route: destination.route.clone(),
        boundary: destination.boundary,
        local_only_withheld: destination.boundary == TrustBoundary::External,
        counts: Default::default(),
        total: 0,
    };
    let mut input = bounded_head(&call.arguments.to_string(), RECORD_BOUND_CHARS);
    redactor.sanitize_string(&mut input, &mut scratch);
    let mut output = bounded_head(output, RECORD_BOUND_CHARS);
    redactor.sanitize_string(&mut output, &mut scratch);
    ToolCallRecord {
        turn,
        call_id: call.id.clone(),
        name: bounded_head(&call.name, 64),
        status,
        duration: Duration::ZERO,
        input,
        output,
        recovered_from_text,
    }
}
