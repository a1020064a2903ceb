//! What a started Watch run does between its start and its one terminal write.
//!
//! [`WatchExecutor`] is the seam: the worker owns the lease, the run record and the events; an
//! executor only turns a run, its route and its inventory into a [`WatchOutcome`]. The real one
//! is [`super::runtime::WatchRuntime`]; this module keeps what every executor shares (the run's
//! usage sink, the display summary, the record of tool calls).

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use pulse_domain::TenantId;
use pulse_domain::patrol::outcome::RunAccounting;
use pulse_domain::patrol::run::{ErrorCause, FindingAssessment, PatrolRun, ToolCallRecord};
use pulse_domain::resource::Resource;

use crate::preflight::RouteConnection;
use crate::registry::RouteClass;
use pulse_agent_loop::agent_loop::{
    self, BoxFuture, CallOutcome, CallStatus, ProviderCallUsage, RecordError, UsageSink,
};
use pulse_agent_loop::cost::{LedgerUsageSink, Usd, cost_for_class};
use pulse_agent_loop::provider::{FailureCause, Usage};

/// Tool call records kept on a run; the count covers all of them. A repeat of an earlier call
/// of the same answer (run once; its result only points at that call's) is counted but not
/// kept, so a model that repeats itself cannot push the calls that did something off the run.
pub const MAX_RECORDED_TOOL_CALLS: usize = 64;
/// The cost-ledger surface of Patrol calls.
pub const PATROL_SURFACE: &str = "patrol";

/// Told the run's totals after every provider call, so the record and `events.run.progress`
/// follow a long run.
pub trait ProgressSink: Send + Sync {
    fn provider_call(&self, provider_calls: u32, total: Usage) -> BoxFuture<'_, ()>;
}

/// Everything an executor gets.
pub struct WatchInput<'a> {
    pub tenant: &'a TenantId,
    pub run: &'a PatrolRun,
    pub connection: &'a RouteConnection,
    /// The resources the run covers, read at start (the effective scope, or the whole
    /// inventory of a full run). Never empty.
    pub inventory: &'a [Resource],
    pub progress: &'a dyn ProgressSink,
}

/// How the model part of a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// The model gave its final answer; [`pulse_domain::patrol::outcome::conclude`] decides
    /// the status from the accounting.
    Answered {
        accounting: RunAccounting,
        /// Display-safe (sanitized, bounded) analysis.
        summary: String,
        /// What the accounting counted as errors, for the record's detail.
        errors: Vec<String>,
    },
    /// The run cannot succeed: a classified cause, and a detail safe to store.
    Failed { cause: ErrorCause, detail: String },
}

/// What the run did, for its terminal record.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchOutcome {
    pub ending: Ending,
    pub turns: u32,
    pub provider_calls: u32,
    pub usage: Usage,
    /// `None` when some call's price is unknown (never a made-up zero).
    pub cost: Option<Usd>,
    /// Bounded to [`MAX_RECORDED_TOOL_CALLS`].
    pub tool_calls: Vec<ToolCallRecord>,
    pub tool_call_count: u32,
    /// Of the run's calls, those the model wrote as text (see `pulse_agent_loop`'s text calls).
    pub tool_calls_recovered: u32,
    /// What the run's finding tools accepted and refused.
    pub findings: RunFindings,
    /// Time spent in provider calls (request sent to response assembled), summed over the
    /// run's turns; the rest of the wall time is Pulse's own work.
    pub provider_time: std::time::Duration,
}

/// The finding fields of a run's record, from accepted tool outcomes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFindings {
    pub new_findings: u32,
    /// Existing findings the run kept active (`present` or `uncertain`, or re-reported).
    pub existing_findings: u32,
    /// Lifecycle calls refused by their handler.
    pub rejected_findings: u32,
    pub resolved_findings: u32,
    /// Findings the run reported or kept active.
    pub finding_ids: Vec<String>,
    pub assessments: Vec<FindingAssessment>,
    pub error_count: u32,
}

impl WatchOutcome {
    /// An outcome with no model call.
    pub fn failed_before_any_call(cause: ErrorCause, detail: impl Into<String>) -> Self {
        Self {
            ending: Ending::Failed {
                cause,
                detail: detail.into(),
            },
            turns: 0,
            provider_calls: 0,
            usage: Usage::default(),
            cost: Some(Usd::ZERO),
            tool_calls: Vec::new(),
            tool_call_count: 0,
            tool_calls_recovered: 0,
            findings: RunFindings::default(),
            provider_time: std::time::Duration::ZERO,
        }
    }
}

/// Runs the model part of a started Watch run.
pub trait WatchExecutor: Send + Sync {
    fn execute<'a>(&'a self, input: WatchInput<'a>) -> BoxFuture<'a, WatchOutcome>;
}

/// The run's classified cause of a provider failure.
pub fn error_cause(cause: FailureCause) -> ErrorCause {
    match cause {
        FailureCause::Auth => ErrorCause::ProviderAuth,
        FailureCause::Quota => ErrorCause::ProviderQuota,
        FailureCause::RateLimit => ErrorCause::RateLimited,
        FailureCause::ContextWindow => ErrorCause::ContextWindow,
        FailureCause::NoToolSupport | FailureCause::ToolChoiceRejected => {
            ErrorCause::ToolCallingUnsupported
        }
        FailureCause::Connectivity => ErrorCause::Connectivity,
        FailureCause::Timeout => ErrorCause::Timeout,
        FailureCause::ModelNotFound
        | FailureCause::MalformedResponse
        | FailureCause::ProviderError => ErrorCause::ProviderError,
    }
}

/// The run's usage sink: the cost ledger first (the real [`LedgerUsageSink`]), then the run's
/// own totals and its progress.
pub(super) struct RunUsage<'a> {
    pub(super) ledger: LedgerUsageSink,
    pub(super) progress: &'a dyn ProgressSink,
    pub(super) totals: Mutex<Totals>,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Totals {
    pub(super) calls: u32,
    pub(super) usage: Usage,
    pub(super) cost: Option<Usd>,
}

impl RunUsage<'_> {
    pub(super) fn totals(&self) -> Totals {
        match self.totals.lock() {
            Ok(t) => *t,
            Err(p) => *p.into_inner(),
        }
    }
}

impl UsageSink for RunUsage<'_> {
    fn record<'a>(
        &'a self,
        call: &'a ProviderCallUsage<'a>,
    ) -> BoxFuture<'a, Result<(), RecordError>> {
        Box::pin(async move {
            self.ledger.record(call).await?;
            let snapshot = {
                let mut totals = self.totals.lock().unwrap_or_else(|p| p.into_inner());
                totals.calls = totals.calls.saturating_add(1);
                if call.outcome == CallOutcome::Completed {
                    totals.usage += call.usage;
                    // The same pricing the ledger row got: one owner of the cost of a call.
                    let cost = cost_for_class(call.route, call.route_class, call.usage).amount();
                    totals.cost = match (totals.cost, cost) {
                        (Some(sum), Some(c)) => Some(sum.saturating_add(c)),
                        _ => None,
                    };
                }
                *totals
            };
            self.progress
                .provider_call(snapshot.calls, snapshot.usage)
                .await;
            Ok(())
        })
    }

    fn tool_calls_recovered(
        &self,
        route: &pulse_agent_loop::route::Route,
        route_class: RouteClass,
        count: u32,
    ) {
        self.ledger.tool_calls_recovered(route, route_class, count);
    }

    /// The tenant spend budgets, checked by the ledger.
    fn admit_call<'a>(
        &'a self,
        route: &'a pulse_agent_loop::route::Route,
        route_class: RouteClass,
    ) -> BoxFuture<'a, Result<(), pulse_agent_loop::agent_loop::usage::BudgetCheckError>> {
        self.ledger.admit_call(route, route_class)
    }
}

/// The run's record of the loop's calls; the loop knows durations, not wall times, so each call
/// is placed to end when the loop ended.
pub(super) fn tool_call_records(
    calls: &[agent_loop::ToolCallRecord],
    ended_at: DateTime<Utc>,
) -> Vec<ToolCallRecord> {
    calls
        .iter()
        .filter(|call| !matches!(call.status, CallStatus::Duplicate { .. }))
        .take(MAX_RECORDED_TOOL_CALLS)
        .map(|call| {
            let duration = chrono::Duration::from_std(call.duration).unwrap_or_default();
            let success = call.status.succeeded();
            ToolCallRecord::new(
                &call.call_id,
                &call.name,
                &call.input,
                &call.output,
                success,
                ended_at - duration,
                ended_at,
            )
            .recovered_from_text(call.recovered_from_text)
        })
        .collect()
}

/// A shareable executor.
pub type SharedExecutor = Arc<dyn WatchExecutor>;

#[cfg(test)]
mod tests {
    use super::*;

    fn loop_record(id: &str, status: CallStatus) -> agent_loop::ToolCallRecord {
        agent_loop::ToolCallRecord {
            turn: 1,
            call_id: id.to_owned(),
            name: "pulse_query".to_owned(),
            status,
            duration: std::time::Duration::ZERO,
            input: "{}".to_owned(),
            output: "answer".to_owned(),
            recovered_from_text: false,
        }
    }

    #[test]
    fn repeats_are_not_kept_so_they_cannot_push_real_calls_off_the_run() {
        let executed = CallStatus::Executed {
            is_error: false,
            timed_out: false,
        };
        let mut calls = vec![loop_record("first", executed.clone())];
        calls.extend((0..100).map(|i| {
            loop_record(
                &format!("repeat-{i}"),
                CallStatus::Duplicate {
                    of: "first".to_owned(),
                },
            )
        }));
        calls.push(loop_record("report", executed));
        let kept = tool_call_records(&calls, Utc::now());
        let ids: Vec<&str> = kept.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["first", "report"]);
        assert!(kept.iter().all(|r| r.success));
    }

    #[test]
    fn every_provider_failure_has_a_run_cause() {
        let all = [
            FailureCause::Auth,
            FailureCause::Quota,
            FailureCause::RateLimit,
            FailureCause::ContextWindow,
            FailureCause::ModelNotFound,
            FailureCause::NoToolSupport,
            FailureCause::ToolChoiceRejected,
            FailureCause::Connectivity,
            FailureCause::Timeout,
            FailureCause::MalformedResponse,
            FailureCause::ProviderError,
        ];
        for cause in all {
            let run_cause = error_cause(cause);
            assert!(
                !matches!(
                    run_cause,
                    ErrorCause::RunnerLost | ErrorCause::ScopeEmpty | ErrorCause::Internal
                ),
                "{cause} -> {run_cause}"
            );
        }
        assert_eq!(error_cause(FailureCause::Auth), ErrorCause::ProviderAuth);
        assert_eq!(error_cause(FailureCause::Timeout), ErrorCause::Timeout);
    }
}
