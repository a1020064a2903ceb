//! The Watch executor: a stateless Detection run over the seeded inventory.
//!
//! 1. Seed: the run's facts, the inventory and the deterministic triage flags with the active
//!    findings on the run's resources, all infrastructure text inside nonce-delimited untrusted
//!    blocks. No earlier run's messages.
//! 2. Investigation: the agentic loop offering the Watch tools ([`watch_policy`]) under the
//!    declining allowance ([`super::budget`]). The lifecycle tools are those the run's facts make
//!    usable ([`Offer`]): verdict tools only with an active finding in the seed, the clear only
//!    with a problem signal; the prompts name only what is offered.
//!    The opening turn admits the reads only.
//! 3. One repair-only turn (lifecycle tools only) when a lifecycle batch was partly refused.
//! 4. When the allowance or the turn budget runs out: one final decision turn admitting only the
//!    lifecycle writes (`patrol_report_finding`, and `patrol_assess_finding` and
//!    `patrol_clear_signal` when usable), never refused for prior usage.
//! 5. One review turn (lifecycle tools only) when the model answered with nothing or left a
//!    problem signal unaddressed ([`crate::tools::signals`]), naming what is left.
//!
//! Every request after the opening lists the same tools, the investigation's, whatever its turn
//! admits ([`ListedTools`]): the request's prefix, and with it a prompt cache, holds across
//! turns. A call to a tool the turn does not admit is refused with what the turn is for. The
//! opening lists its reads only: shown the report tool before it had read anything, a real
//! 1.5B model reported from the seed in every turn and never read. What each turn
//! may write is bounded by [`TurnCaps`], tighter on a route whose calls come as text.
//! 6. Accounting from the tools' ledger only (accepted outcomes; model prose never counts): an
//!    active finding shown to the run without a verdict, an empty answer and unaddressed signals
//!    are the model's analysis failures, then [`pulse_domain::patrol::outcome::conclude`] decides
//!    the status. The stored analysis is written by Pulse from the same accepted outcomes.
//!
//! Provider, tool and budget failures are classified onto the run; whatever the tools accepted
//! before a failure stays in the finding store and on the run record.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use pulse_bus::Bus;
use pulse_capabilities::{ExecutionProfile, PolicyError, ToolPolicy};
use pulse_domain::finding::{FindingId, ReportKind, Severity, Verdict};
use pulse_domain::patrol::outcome::RunAccounting;
use pulse_domain::patrol::run::{ErrorCause, FindingAssessment, RunType};
use pulse_domain::resource::truncate_chars;
use pulse_store::{Store, alerts};

use crate::export_audit::AuditedExports;
use crate::preflight::PreflightSettings;
use crate::redaction::redactor;
use pulse_agent_loop::agent_loop::{
    AgentLoop, BoxFuture, ListedTools, LoopInput, LoopLimits, LoopOutcome, LoopStop, ToolHandler,
};
use pulse_agent_loop::cost::{LedgerUsageSink, Usd};
use pulse_agent_loop::provider::pool::ProviderPool;
use pulse_agent_loop::provider::{Message, Usage};

use super::budget::{AllowanceStop, DecliningAllowance, FULL_TURNS, SCOPED_TURNS, TurnCaps};
use super::executor::{
    Ending, PATROL_SURFACE, RunFindings, RunUsage, Totals, WatchExecutor, WatchInput, WatchOutcome,
    error_cause, tool_call_records,
};
use super::offer::{self, Offer};
use super::seed::{
    DECISION_TURN_NOTE, FiringAlerts, READ_FIRST_INSTRUCTION, REPAIR_INSTRUCTION,
    decision_instruction, seed_context, system_prompt,
};
use crate::redaction::display_summary;
use crate::tools::signals::{SignalBook, Unaddressed, nudge_instruction};
use crate::tools::{
    BACKEND_TIMEOUT, RunLedger, ToolContext, Unjudged, WatchTools, canonical_reads_and, findings,
};

/// The cap on distinct calls in a one-answer turn (the repair turn and the final decision
/// turn). Investigation turns keep the loop's default
/// ([`DEFAULT_MAX_CALLS_PER_TURN`](pulse_agent_loop::agent_loop::DEFAULT_MAX_CALLS_PER_TURN),
/// 16): a weak model once wrote 45 calls in one answer, and a capped call can be made again in
/// the next answer. A one-answer turn has no next answer, and offers only the lifecycle tools
/// (reports and verdicts, which read nothing through the relay), so its cap is the run's
/// outstanding lifecycle work: one verdict per finding shown and one report per flagged
/// resource, and never less than the default. Identical calls still run once.
pub fn decision_call_cap(ledger: &RunLedger) -> usize {
    let outstanding = ledger.presented().len() + ledger.signals().resources();
    outstanding.max(pulse_agent_loop::agent_loop::DEFAULT_MAX_CALLS_PER_TURN)
}

/// The tools a Watch run offers: canonical reads, bounded logs, the finding lifecycle tools its
/// facts make usable ([`Offer`]).
pub fn watch_policy(offer: Offer) -> Result<Arc<ToolPolicy>, PolicyError> {
    // Only the arguments the Watch handlers read are offered (`tools::CANONICAL_READS`); the Watch
    // wording ([`offer::project`]) is applied to what is left.
    ToolPolicy::narrowed_projection(
        ExecutionProfile::PatrolDetection,
        &canonical_reads_and(&offer.investigation()),
        &offer::project,
    )
}

/// The final decision, repair and review turns: the usable lifecycle tools only.
pub fn decision_policy(offer: Offer) -> Result<Arc<ToolPolicy>, PolicyError> {
    ToolPolicy::narrowed_projection(
        ExecutionProfile::PatrolDetection,
        &offer.decision(),
        &offer::project,
    )
}

/// The opening turn of a Watch run: the reads only (the canonical reads, and the findings
/// snapshot when a finding is active).
pub fn opening_policy(offer: Offer) -> Result<Arc<ToolPolicy>, PolicyError> {
    ToolPolicy::narrowed_projection(
        ExecutionProfile::PatrolDetection,
        &canonical_reads_and(&offer.opening()),
        &offer::project,
    )
}

/// The real Watch executor.
#[derive(Clone)]
pub struct WatchRuntime {
    store: Store,
    bus: Option<Bus>,
    timeouts: PreflightSettings,
    backend_timeout: Duration,
    providers: Arc<ProviderPool>,
}

impl std::fmt::Debug for WatchRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchRuntime")
            .field("backend_timeout", &self.backend_timeout)
            .finish_non_exhaustive()
    }
}

impl WatchRuntime {
    /// An executor whose relay reads and verifier checks go over `bus` and whose provider
    /// calls use the clients of `providers`.
    pub fn new(store: Store, bus: Option<Bus>, providers: Arc<ProviderPool>) -> Self {
        Self {
            store,
            bus,
            timeouts: PreflightSettings::default(),
            backend_timeout: BACKEND_TIMEOUT,
            providers,
        }
    }
}

/// The run's totals over its loop phases.
#[derive(Default)]
struct Phases {
    turns: u32,
    provider_calls: u32,
    usage: Usage,
    records: Vec<pulse_agent_loop::agent_loop::ToolCallRecord>,
    tool_calls_recovered: u32,
    messages: Vec<Message>,
    repaired: bool,
    /// Whether the model was told once to read before concluding.
    read_first: bool,
    /// Whether the opening (reads only) turn was given.
    opened: bool,
    provider_time: Duration,
    /// The text of the last model answer.
    final_text: String,
}

impl Phases {
    fn absorb(&mut self, outcome: LoopOutcome) -> LoopStop {
        self.turns += outcome.turns;
        self.provider_calls += outcome.provider_calls;
        self.usage += outcome.usage;
        self.records.extend(outcome.tool_calls);
        self.tool_calls_recovered += outcome.tool_calls_recovered;
        self.provider_time += outcome.timings.iter().map(|t| t.provider).sum::<Duration>();
        self.final_text = outcome.final_text;
        // The loop returns its system message first; the next phase brings its own.
        self.messages = outcome
            .messages
            .into_iter()
            .filter(|m| !matches!(m, Message::System { .. }))
            .collect();
        // An empty answer says nothing, and kept in the history it shows the model answering
        // nothing: on a real 1.5B model the turn after one was often empty again.
        if self.messages.last().is_some_and(is_empty_answer) {
            self.messages.pop();
        }
        outcome.stop
    }
}

/// An assistant message with no text and no tool call.
fn is_empty_answer(message: &Message) -> bool {
    matches!(message, Message::Assistant { content, tool_calls, .. }
        if content.trim().is_empty() && tool_calls.is_empty())
}

/// What the loop phases ended with, before accounting.
enum PhaseEnd {
    /// The model finished (answered, or its final decision turn ran).
    Finished,
    Failed {
        cause: ErrorCause,
        detail: String,
    },
}

fn failed_stop(stop: &LoopStop, run_id: &str) -> Option<PhaseEnd> {
    match stop {
        LoopStop::ProviderFailure { cause, message } => {
            tracing::warn!(run_id, %cause, detail = %message, "provider call failed");
            Some(PhaseEnd::Failed {
                cause: error_cause(*cause),
                detail: cause.summary().to_owned(),
            })
        }
        LoopStop::TerminalDenial(denial) => Some(PhaseEnd::Failed {
            cause: ErrorCause::ProviderError,
            detail: format!(
                "the model repeated a denied call to {}",
                truncate_chars(&denial.tool, 64)
            ),
        }),
        LoopStop::ExportNotAudited { message } | LoopStop::UsageNotRecorded { message } => {
            tracing::error!(run_id, stop = stop.as_str(), %message, "run stopped by its records");
            Some(PhaseEnd::Failed {
                cause: ErrorCause::Internal,
                detail: format!("the run stopped: {}", stop.as_str()),
            })
        }
        // A tenant spend budget: the turn before finished; no further provider call.
        LoopStop::BudgetExceeded { message, .. } => Some(PhaseEnd::Failed {
            cause: ErrorCause::BudgetExceeded,
            detail: message.clone(),
        }),
        LoopStop::ProviderCallLimit => Some(PhaseEnd::Failed {
            cause: ErrorCause::BudgetExhausted,
            detail: "the run used up its provider calls".to_owned(),
        }),
        LoopStop::Completed | LoopStop::TurnLimit | LoopStop::AllowanceExhausted => None,
    }
}

/// The accounting, analysis and record fields from what the tools accepted.
struct Accounted {
    accounting: RunAccounting,
    errors: Vec<String>,
    findings: RunFindings,
    analysis: String,
}

/// What the model left undone at the end of its answer: signals nobody addressed, and whether
/// the answer was empty (no text, no accepted lifecycle call).
struct Review {
    unaddressed: Vec<Unaddressed>,
    unjudged: Vec<Unjudged>,
    empty_answer: bool,
}

impl Review {
    fn of(ledger: &RunLedger, final_text: &str) -> Self {
        Self {
            unaddressed: ledger.unaddressed(),
            unjudged: ledger.unjudged(),
            empty_answer: final_text.trim().is_empty()
                && ledger.reports().is_empty()
                && ledger.verdicts().is_empty()
                && ledger.cleared().is_empty(),
        }
    }

    /// Nothing is left for the review turn: every signal addressed, every finding shown
    /// judged, and an answer given.
    fn is_complete(&self) -> bool {
        self.unaddressed.is_empty() && self.unjudged.is_empty() && !self.empty_answer
    }
}

fn account(ledger: &RunLedger, scope_resources: usize, final_text: &str) -> Accounted {
    let reports = ledger.reports();
    let verdicts = ledger.verdicts();
    let review = Review::of(ledger, final_text);
    let mut errors = ledger.errors();
    let tool_errors = errors.len();
    let missing = ledger.unjudged();
    for finding in &missing {
        errors.push(format!(
            "active finding {} ({}) was shown to the run without a verdict",
            finding.finding_id,
            truncate_chars(&finding.title, 120)
        ));
    }
    let is_new = |k: ReportKind| matches!(k, ReportKind::New | ReportKind::Regressed);
    let new: BTreeSet<FindingId> = reports
        .iter()
        .filter(|r| is_new(r.kind))
        .map(|r| r.finding_id)
        .collect();
    let mut reconfirmed: BTreeSet<FindingId> = reports
        .iter()
        .filter(|r| !is_new(r.kind) && !new.contains(&r.finding_id))
        .map(|r| r.finding_id)
        .collect();
    let mut uncertain = BTreeSet::new();
    let mut resolved = BTreeSet::new();
    for verdict in &verdicts {
        match verdict.verdict {
            Verdict::Present => {
                reconfirmed.insert(verdict.finding_id);
            }
            Verdict::Uncertain => {
                uncertain.insert(verdict.finding_id);
            }
            Verdict::Resolved => {
                resolved.insert(verdict.finding_id);
            }
        }
    }
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let accounting = RunAccounting {
        collection_completed: true,
        scope_resources: count(scope_resources),
        errors: count(tool_errors),
        new_findings: count(new.len()),
        reconfirmed_findings: count(reconfirmed.len()),
        uncertain_verdicts: count(uncertain.len()),
        missing_verdicts: count(missing.len()),
        unaddressed_signals: count(review.unaddressed.len()),
        empty_answer: review.empty_answer,
    };
    if review.empty_answer {
        errors.push("the model answered with no text and no tool call".to_owned());
    }
    // Unaddressed signals stop only an all-clear; a run with active findings lists them in its
    // analysis.
    if accounting.active_findings() == 0 {
        for left in review.unaddressed.iter().take(20) {
            errors.push(format!(
                "{} carries {} and the model neither reported, assessed nor cleared it",
                left.resource_id, left.signal
            ));
        }
    }
    let finding_ids: Vec<String> = new
        .iter()
        .chain(reconfirmed.iter())
        .chain(uncertain.iter())
        .map(FindingId::as_hex)
        .collect();
    let assessments = verdicts
        .iter()
        .map(|v| FindingAssessment {
            finding_id: v.finding_id.as_hex(),
            verdict: v.verdict.as_str().to_owned(),
            evidence: truncate_chars(&v.evidence, 1_000),
            reason: truncate_chars(&v.reason, 1_000),
            assessed_at: Utc::now(),
        })
        .collect();
    let findings = RunFindings {
        new_findings: accounting.new_findings,
        existing_findings: count(reconfirmed.len() + uncertain.len()),
        rejected_findings: ledger.rejected(),
        resolved_findings: count(resolved.len()),
        finding_ids,
        assessments,
        error_count: accounting.errors,
    };

    // The analysis lists what was accepted, never what was only attempted.
    let mut lines = vec![format!("Patrol checked {scope_resources} resource(s).")];
    for report in &reports {
        let label = match report.kind {
            ReportKind::New => "New",
            ReportKind::Regressed => "Returned",
            ReportKind::Redetected | ReportKind::Merged => "Still present",
        };
        let severity = match report.severity {
            Severity::Critical => "critical",
            _ => "warning",
        };
        lines.push(format!(
            "{label} {severity}: {} ({}).",
            truncate_chars(&report.title, 200),
            report.resource_id
        ));
    }
    for verdict in &verdicts {
        let label = match verdict.verdict {
            Verdict::Present => "Still present",
            Verdict::Resolved => "Resolved",
            Verdict::Uncertain => "Uncertain, kept active",
        };
        lines.push(format!("{label}: {}.", truncate_chars(&verdict.title, 200)));
    }
    for ((resource, signal), why) in ledger.cleared() {
        lines.push(format!(
            "Judged expected: {signal} on {resource}: {}.",
            truncate_chars(&why, 300)
        ));
    }
    for left in &review.unaddressed {
        lines.push(format!(
            "Not addressed: {} on {}.",
            left.signal, left.resource_id
        ));
    }
    for capability in ledger.unavailable() {
        lines.push(format!("Unavailable during the run: {capability}."));
    }
    if !errors.is_empty() {
        lines.push(format!(
            "The review is incomplete: {}.",
            errors
                .iter()
                .map(|e| truncate_chars(e, 200))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    } else if accounting.active_findings() == 0 && review.is_complete() {
        lines.push("No warning or critical problem was recorded.".to_owned());
    }
    Accounted {
        accounting,
        errors,
        findings,
        analysis: lines.join("\n"),
    }
}

/// The firing alerts on these resources, by resource id.
pub(crate) async fn firing_alerts(
    store: &Store,
    tenant: &pulse_domain::TenantId,
    inventory: &[pulse_domain::resource::Resource],
) -> Result<FiringAlerts, pulse_store::StoreError> {
    let tx = store.tenant_tx(tenant).await?;
    let listed = alerts::list(
        &tx,
        &alerts::AlertFilter {
            state: alerts::StateFilter::Firing,
            resource_id: None,
            limit: alerts::MAX_LIST_LIMIT,
        },
    )
    .await?;
    tx.commit().await?;
    let in_scope: BTreeSet<&str> = inventory.iter().map(|r| r.id.as_str()).collect();
    let mut firing = FiringAlerts::new();
    for alert in listed {
        if in_scope.contains(alert.resource_id.as_str()) {
            let rules = firing.entry(alert.resource_id.clone()).or_default();
            let rule = alert.rule.as_str().to_owned();
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        }
    }
    Ok(firing)
}

impl WatchExecutor for WatchRuntime {
    fn execute<'a>(&'a self, input: WatchInput<'a>) -> BoxFuture<'a, WatchOutcome> {
        Box::pin(async move {
            let run_id = input.run.id.to_string();
            let connection = input.connection;
            let class = connection.route_class();
            let config = match connection.provider_config(&self.timeouts) {
                Ok(config) => config,
                Err(missing) => {
                    return WatchOutcome::failed_before_any_call(
                        ErrorCause::NotReady,
                        missing.to_string(),
                    );
                }
            };
            let provider = match self.providers.provider(config) {
                Ok(provider) => provider,
                Err(failure) => {
                    tracing::warn!(run_id, cause = %failure.cause, detail = %failure.message, "provider transport could not be built");
                    return WatchOutcome::failed_before_any_call(
                        error_cause(failure.cause),
                        failure.summary(),
                    );
                }
            };
            let redactor = match redactor(connection, class) {
                Ok(redactor) => redactor,
                Err(reason) => {
                    tracing::error!(run_id, %reason, "redaction is misconfigured; no request sent");
                    return WatchOutcome::failed_before_any_call(
                        ErrorCause::Internal,
                        "the request sanitizer could not be configured",
                    );
                }
            };
            let ledger = Arc::new(RunLedger::new());
            let tools = WatchTools::new(
                ToolContext {
                    store: self.store.clone(),
                    bus: self.bus.clone(),
                    tenant: input.tenant.clone(),
                    run_id: input.run.id,
                    scope: Arc::new(input.inventory.to_vec()),
                    backend_timeout: self.backend_timeout,
                },
                ledger.clone(),
            );
            // The active findings on the run's resources are part of the seed: each needs a
            // verdict whether or not the model reads them again.
            let active = match findings::active_in_scope(&tools.ctx).await {
                Ok(active) => active,
                Err(error) => {
                    tracing::warn!(run_id, %error, "active findings could not be read");
                    return WatchOutcome::failed_before_any_call(
                        ErrorCause::Internal,
                        "the active findings could not be read",
                    );
                }
            };
            ledger.present(active.iter().map(|f| (f.id, f.title.clone())));
            ledger.locate_findings(
                active
                    .iter()
                    .map(|f| (f.id, f.resource_id.clone()))
                    .collect(),
            );
            // Firing alerts are signals the run must address, like the triage flags.
            let alerts = match firing_alerts(&self.store, input.tenant, input.inventory).await {
                Ok(alerts) => alerts,
                Err(error) => {
                    tracing::warn!(run_id, %error, "firing alerts could not be read");
                    return WatchOutcome::failed_before_any_call(
                        ErrorCause::Internal,
                        "the firing alerts could not be read",
                    );
                }
            };
            let signals = SignalBook::new(input.inventory, &alerts);
            let offer = Offer {
                findings: !active.is_empty(),
                signals: !signals.is_empty(),
            };
            ledger.set_signals(signals);
            let policies = (
                watch_policy(offer),
                decision_policy(offer),
                opening_policy(offer),
            );
            let (policy, decision, opening_policy) = match policies {
                (Ok(policy), Ok(decision), Ok(opening)) => (policy, decision, opening),
                (Err(error), _, _) | (_, Err(error), _) | (_, _, Err(error)) => {
                    tracing::error!(run_id, %error, "watch tool policy could not be built");
                    return WatchOutcome::failed_before_any_call(
                        ErrorCause::Internal,
                        "the Watch tool policy could not be built",
                    );
                }
            };

            let usage = RunUsage {
                ledger: LedgerUsageSink::new(
                    self.store.clone(),
                    input.tenant.clone(),
                    PATROL_SURFACE,
                    crate::metrics::ModelMetrics::shared(),
                )
                .with_run_id(run_id.clone()),
                progress: input.progress,
                totals: Mutex::new(Totals {
                    calls: 0,
                    usage: Usage::default(),
                    cost: Some(Usd::ZERO),
                }),
            };
            let exports = AuditedExports::new(self.store.clone(), input.tenant.clone())
                .with_run_id(run_id.clone());
            // The nonce only has to be unknown to whoever wrote the inventory text.
            let nonce = uuid::Uuid::new_v4().simple().to_string();
            let nonce = &nonce[..16];
            let seed = seed_context(input.run, input.inventory, &active, &alerts, nonce);
            let turn_budget = match input.run.run_type {
                RunType::Scoped => SCOPED_TURNS,
                RunType::Full => FULL_TURNS,
            };
            let caps = TurnCaps::for_route(connection.tool_calls_from_text());
            let mut allowance = DecliningAllowance::new(ledger.clone()).with_caps(caps);
            // Every request after the opening lists the investigation's tools, whatever its
            // turn admits: the prompt's prefix, and a prompt cache, hold across turns.
            let listed = |closed_note: &str| {
                Some(ListedTools {
                    policy: policy.clone(),
                    closed_note: closed_note.to_owned(),
                })
            };
            let mut phases = Phases {
                messages: vec![Message::user(seed)],
                ..Phases::default()
            };
            let handler: &dyn ToolHandler = &tools;
            // One structured turn with report and assess only: the repair turn and the final
            // decision turn.
            let single_turn = |messages: Vec<Message>| {
                ledger.set_reads_open(false);
                let outstanding = decision_call_cap(&ledger);
                AgentLoop::run(LoopInput {
                    transport: &provider,
                    route: connection.route.clone(),
                    route_class: class,
                    system_prompt: system_prompt(offer),
                    messages,
                    policy: decision.clone(),
                    handler,
                    redactor: &redactor,
                    exports: &exports,
                    usage: &usage,
                    limits: LoopLimits {
                        max_turns: 1,
                        max_output_tokens: Some(caps.decision_output),
                        max_calls_per_turn: outstanding,
                        ..LoopLimits::default()
                    },
                    compaction: None,
                    allowance: None,
                    stream: true,
                    temperature: Some(0.0),
                    tool_calls_from_text: connection.tool_calls_from_text(),
                    listed: listed(DECISION_TURN_NOTE),
                    observer: None,
                })
            };
            let end = loop {
                // Investigation, keeping one turn for the final decision.
                let investigate = turn_budget.saturating_sub(1).saturating_sub(phases.turns);
                // The opening turn offers the reads only: whatever the run concludes rests on
                // at least one read, and a weak model was seen reporting from the seed alone.
                let opening = !phases.opened;
                phases.opened = true;
                let (turn_policy, max_turns) = if opening {
                    (opening_policy.clone(), investigate.min(1))
                } else {
                    (policy.clone(), investigate)
                };
                let mut stop = LoopStop::TurnLimit;
                if investigate > 0 {
                    ledger.set_reads_open(true);
                    let outcome = AgentLoop::run(LoopInput {
                        transport: &provider,
                        route: connection.route.clone(),
                        route_class: class,
                        system_prompt: system_prompt(offer),
                        messages: std::mem::take(&mut phases.messages),
                        policy: turn_policy,
                        handler,
                        redactor: &redactor,
                        exports: &exports,
                        usage: &usage,
                        limits: LoopLimits {
                            max_turns,
                            max_output_tokens: Some(if opening {
                                caps.opening_output
                            } else {
                                caps.investigate_output
                            }),
                            max_calls_per_turn: caps.investigate_calls,
                            ..LoopLimits::default()
                        },
                        compaction: None,
                        allowance: Some(&mut allowance),
                        stream: true,
                        temperature: Some(0.0),
                        tool_calls_from_text: connection.tool_calls_from_text(),
                        // The opening lists what it admits: a weak model shown the report tool
                        // before it has read anything reports from the seed.
                        listed: None,
                        observer: None,
                    })
                    .await;
                    stop = phases.absorb(outcome);
                }
                if let Some(failed) = failed_stop(&stop, &run_id) {
                    break failed;
                }
                if opening && stop == LoopStop::TurnLimit {
                    continue;
                }
                if stop == LoopStop::Completed {
                    // A conclusion before any read: once, the model is sent back to read while
                    // a turn to read is left (besides the decision turn).
                    if !ledger.has_read()
                        && !phases.read_first
                        && turn_budget.saturating_sub(1) > phases.turns
                    {
                        phases.read_first = true;
                        phases.messages.push(Message::user(READ_FIRST_INSTRUCTION));
                        continue;
                    }
                    break PhaseEnd::Finished;
                }
                let reason = allowance.take_stop();
                if stop == LoopStop::AllowanceExhausted
                    && reason == Some(AllowanceStop::Repair)
                    && !phases.repaired
                {
                    phases.repaired = true;
                    let mut messages = std::mem::take(&mut phases.messages);
                    messages.push(Message::user(REPAIR_INSTRUCTION));
                    let outcome = single_turn(messages).await;
                    // The repair turn extends the budget by one turn.
                    let stop = phases.absorb(outcome);
                    phases.turns = phases.turns.saturating_sub(1);
                    if let Some(failed) = failed_stop(&stop, &run_id) {
                        break failed;
                    }
                    if stop == LoopStop::Completed {
                        break PhaseEnd::Finished;
                    }
                    if allowance.funds_a_turn() && turn_budget.saturating_sub(1) > phases.turns {
                        continue;
                    }
                }
                // The final decision turn: report and assess only, whatever was spent.
                let mut messages = std::mem::take(&mut phases.messages);
                messages.push(Message::user(decision_instruction(offer)));
                let outcome = single_turn(messages).await;
                let stop = phases.absorb(outcome);
                break failed_stop(&stop, &run_id).unwrap_or(PhaseEnd::Finished);
            };
            // One review turn when the answer was empty or left a signal unaddressed.
            let end = match end {
                PhaseEnd::Finished => {
                    let review = Review::of(&ledger, &phases.final_text);
                    if review.is_complete() {
                        PhaseEnd::Finished
                    } else {
                        let mut messages = std::mem::take(&mut phases.messages);
                        messages.push(Message::user(nudge_instruction(
                            &review.unaddressed,
                            &review.unjudged,
                            review.empty_answer,
                            input.inventory,
                        )));
                        let outcome = single_turn(messages).await;
                        let stop = phases.absorb(outcome);
                        failed_stop(&stop, &run_id).unwrap_or(PhaseEnd::Finished)
                    }
                }
                failed => failed,
            };

            let ended_at = Utc::now();
            let totals = usage.totals();
            let accounted = account(&ledger, input.inventory.len(), &phases.final_text);
            let ending = match end {
                PhaseEnd::Finished => Ending::Answered {
                    accounting: accounted.accounting,
                    summary: display_summary(&redactor, &accounted.analysis),
                    errors: accounted.errors,
                },
                PhaseEnd::Failed { cause, detail } => Ending::Failed { cause, detail },
            };
            WatchOutcome {
                ending,
                turns: phases.turns,
                provider_calls: phases.provider_calls,
                usage: phases.usage,
                cost: totals.cost,
                tool_calls: tool_call_records(&phases.records, ended_at),
                tool_call_count: u32::try_from(phases.records.len()).unwrap_or(u32::MAX),
                tool_calls_recovered: phases.tool_calls_recovered,
                findings: accounted.findings,
                provider_time: phases.provider_time,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::test_support::resource;
    use pulse_agent_loop::agent_loop::DEFAULT_MAX_CALLS_PER_TURN;
    use pulse_domain::finding::{Category, FindingKey};
    use pulse_domain::resource::Health;
    use std::collections::BTreeMap;

    #[test]
    fn a_finding_shown_without_a_verdict_leaves_the_review_incomplete() {
        let ledger = RunLedger::new();
        assert!(Review::of(&ledger, "Nothing is wrong.").is_complete());
        let key = FindingKey::normalize("health-check-failing").expect("key");
        let id = FindingId::derive("service:h:web", Category::Reliability, &key);
        ledger.present([(id, "web fails".to_owned())]);
        ledger.locate_findings(BTreeMap::from([(id, "service:h:web".to_owned())]));
        // No signal is left, but the finding shown has no verdict: the review turn asks for it.
        let review = Review::of(&ledger, "Nothing is wrong.");
        assert!(review.unaddressed.is_empty());
        assert!(!review.is_complete());
        assert_eq!(
            review.unjudged,
            [Unjudged {
                finding_id: id,
                title: "web fails".to_owned(),
                resource_id: Some("service:h:web".to_owned()),
            }]
        );
    }

    #[test]
    fn a_one_answer_turn_may_address_every_finding_shown_and_every_flagged_resource() {
        let ledger = RunLedger::new();
        assert_eq!(decision_call_cap(&ledger), DEFAULT_MAX_CALLS_PER_TURN);

        let flagged: Vec<_> = (0..12)
            .map(|i| resource("h", &format!("svc{i}"), Health::Unhealthy))
            .collect();
        ledger.set_signals(SignalBook::new(&flagged, &BTreeMap::new()));
        ledger.present((0..10).map(|i| {
            let key = FindingKey::normalize(&format!("fault-{i}")).expect("key");
            let id = FindingId::derive("service:h:web", Category::Reliability, &key);
            (id, "shown".to_owned())
        }));
        assert_eq!(decision_call_cap(&ledger), 22);
    }
}
