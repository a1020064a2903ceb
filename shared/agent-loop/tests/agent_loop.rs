//! The agentic loop against the provider simulator over real HTTP: admission before dispatch,
//! bounded parallel execution, result ordering, limits, redaction before transport, compaction.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use pulse_agent_loop::agent_loop::text_calls;
use pulse_agent_loop::agent_loop::{
    AgentLoop, AllowanceDecision, CallStatus, CharsPerToken, Compaction, CompactionPolicy,
    ExportsNotAudited, ListedTools, LoopInput, LoopLimits, LoopObserver, LoopOutcome, LoopStop,
    ProviderCallUsage, RecordError, STUB_MARKER, TokenAllowance, ToolHandler, UsageNotRecorded,
    UsageSink,
};
use pulse_agent_loop::provider::{
    FailureCause, INTERRUPTED_TOOL_RESULT, Message, Protocol, Provider, StreamEvent, Timeouts,
    ToolCall, ToolResult, Usage, repair_orphan_tool_calls,
};
use pulse_agent_loop::registry::RouteClass;
use pulse_agent_loop::route::Route;
use pulse_capabilities::{AdmittedCall, DenialCode, ExecutionProfile, ToolPolicy};
use pulse_redaction::{Destination, RedactionConfig, Redactor};
use pulse_test_support::provider_sim::{
    Delivery, ProviderSim, RecordedRequest, SimError, Step, Turn,
};
use pulse_test_support::provider_sim::{Script, TextCallForm};
use serde_json::{Value, json};

const SYSTEM: &str = "You are Pulse Patrol. Use the tools.";
const GOAL: &str = "Check the fleet for problems.";
const CANARY: &str = "pulse-canary-7f3a9c2e1b4d";

/// A handler that records what it saw, how many calls ran at once, and in which order calls
/// started and finished. Delays are per call id.
#[derive(Default)]
struct Recorder {
    delays: HashMap<String, Duration>,
    result_size: usize,
    result_suffix: String,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    started: Mutex<Vec<String>>,
    finished: Mutex<Vec<String>>,
    names: Mutex<Vec<String>>,
}

impl Recorder {
    fn with_delays(delays: &[(&str, u64)]) -> Self {
        Self {
            delays: delays
                .iter()
                .map(|(id, ms)| ((*id).to_owned(), Duration::from_millis(*ms)))
                .collect(),
            ..Self::default()
        }
    }

    fn started(&self) -> Vec<String> {
        self.started.lock().map(|v| v.clone()).unwrap_or_default()
    }

    fn finished(&self) -> Vec<String> {
        self.finished.lock().map(|v| v.clone()).unwrap_or_default()
    }

    fn names(&self) -> Vec<String> {
        self.names.lock().map(|v| v.clone()).unwrap_or_default()
    }

    fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }
}

impl ToolHandler for Recorder {
    fn call<'a>(
        &'a self,
        call: &'a ToolCall,
        _admitted: &'a AdmittedCall,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            if let Ok(mut v) = self.started.lock() {
                v.push(call.id.clone());
            }
            if let Ok(mut v) = self.names.lock() {
                v.push(call.name.clone());
            }
            if let Some(delay) = self.delays.get(&call.id) {
                // Simulated tool latency (not an assertion): makes handlers finish out of order.
                tokio::time::sleep(*delay).await;
            }
            if let Ok(mut v) = self.finished.lock() {
                v.push(call.id.clone());
            }
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            let mut content = format!("result of {}", call.id);
            content.push_str(&"x".repeat(self.result_size));
            content.push_str(&self.result_suffix);
            ToolResult::ok("handler-chosen-id", content)
        })
    }
}

fn redactor() -> Redactor {
    Redactor::new(
        Destination::external("openai:sim-model"),
        &RedactionConfig {
            secrets: vec![CANARY.to_owned()],
            local_only: Vec::new(),
        },
    )
    .expect("redactor")
}

fn watch_policy() -> Arc<ToolPolicy> {
    ToolPolicy::for_profile(ExecutionProfile::PatrolDetection).expect("policy")
}

fn provider(sim: &ProviderSim) -> Provider {
    common::provider(sim, Protocol::OpenAiCompatible)
}

fn query(limit: u64) -> Value {
    json!({"action": "list", "limit": limit})
}

async fn run_loop(
    sim: &ProviderSim,
    handler: &Recorder,
    limits: LoopLimits,
    compaction: Option<Compaction>,
    allowance: Option<&mut dyn TokenAllowance>,
    stream: bool,
) -> LoopOutcome {
    let provider = provider(sim);
    let redactor = redactor();
    AgentLoop::run(LoopInput {
        transport: &provider,
        route: Route::parse("openai:sim-model").expect("route"),
        route_class: RouteClass::MeteredApi,
        system_prompt: SYSTEM.into(),
        messages: vec![Message::user(GOAL)],
        policy: watch_policy(),
        handler,
        redactor: &redactor,
        exports: &ExportsNotAudited,
        usage: &UsageNotRecorded,
        limits,
        compaction,
        allowance: allowance.map(|a| -> &mut dyn TokenAllowance { a }),
        stream,
        temperature: None,
        tool_calls_from_text: false,
        listed: None,
        observer: None,
    })
    .await
}

/// `(tool_call_id, content)` of every tool message in a recorded OpenAI request, in order.
fn tool_messages(request: &RecordedRequest) -> Vec<(String, String)> {
    request.body["messages"]
        .as_array()
        .map(|msgs| {
            msgs.iter()
                .filter(|m| m["role"] == "tool")
                .map(|m| {
                    (
                        m["tool_call_id"].as_str().unwrap_or_default().to_owned(),
                        m["content"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn three_turn_run_executes_admitted_calls_and_keeps_call_order() {
    let sim = ProviderSim::start(Script::turns([
        Turn::default()
            .with_tool_id("a", "pulse_query", query(1))
            .with_tool_id("b", "pulse_query", query(2))
            .with_tool_id("c", "pulse_query", query(3)),
        Turn::default().with_tool_id("d", "pulse_metrics", json!({"type": "performance"})),
        Turn::text("All hosts are healthy."),
    ]))
    .await
    .expect("sim");
    let handler = Recorder::with_delays(&[("a", 120), ("b", 60)]);

    let outcome = run_loop(&sim, &handler, LoopLimits::default(), None, None, false).await;

    assert_eq!(outcome.stop, LoopStop::Completed);
    assert_eq!(outcome.final_text, "All hosts are healthy.");
    assert_eq!(outcome.turns, 3);
    assert_eq!(outcome.provider_calls, 3);
    assert_eq!(handler.started(), ["a", "b", "c", "d"]);
    // The handlers really finished out of order...
    assert_eq!(&handler.finished()[..3], ["c", "b", "a"]);
    // ...and the results still reached the model in call order, paired by the loop's ids.
    let requests = sim.requests();
    assert_eq!(requests.len(), 3);
    let second = tool_messages(&requests[1]);
    let ids: Vec<&str> = second.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert_eq!(second[0].1, "result of a");
    let third = tool_messages(&requests[2]);
    assert_eq!(third.len(), 4);
    assert_eq!(third[3].0, "d");
    // Every request offered the Watch tools.
    assert!(requests[0].body["tools"].as_array().is_some_and(|t| {
        t.iter()
            .any(|t| t["function"]["name"] == "patrol_report_finding")
    }));
    assert_eq!(outcome.tool_calls.len(), 4);
    assert!(outcome.tool_calls.iter().all(|r| matches!(
        r.status,
        CallStatus::Executed {
            is_error: false,
            timed_out: false
        }
    )));
    assert!(outcome.usage.input_tokens > 0 && outcome.usage.output_tokens > 0);
    assert_eq!(outcome.redactions.len(), 3);
    assert_eq!(outcome.timings.len(), 3);
}

#[tokio::test]
async fn six_independent_reads_run_at_most_four_at_once() {
    let mut turn = Turn::default();
    let mut delays = Vec::new();
    let ids: Vec<String> = (0..6).map(|i| format!("r{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        turn = turn.with_tool_id(id.as_str(), "pulse_query", query(i as u64));
        delays.push((id.as_str(), 80));
    }
    let sim = ProviderSim::start(Script::turns([turn, Turn::text("done")]))
        .await
        .expect("sim");
    let handler = Recorder::with_delays(&delays);

    let outcome = run_loop(&sim, &handler, LoopLimits::default(), None, None, false).await;

    assert_eq!(outcome.stop, LoopStop::Completed);
    assert_eq!(handler.started().len(), 6);
    assert_eq!(handler.max_in_flight(), 4);
    let results = tool_messages(&sim.requests()[1]);
    let got: Vec<&str> = results.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(got, ids);
}

fn report_args() -> Value {
    json!({
        "key": "disk-full",
        "severity": "warning",
        "category": "capacity",
        "resource_id": "node/pve1",
        "resource_name": "pve1",
        "resource_type": "node",
        "title": "Root disk almost full",
        "description": "The root filesystem is 93% used.",
        "recommendation": "Prune old images.",
        "evidence": "df: / 93%"
    })
}

#[tokio::test]
async fn findings_read_with_finding_writes_runs_sequentially_in_model_order() {
    let sim = ProviderSim::start(Script::turns([
        Turn::default()
            .with_tool_id("g", "patrol_get_findings", json!({}))
            .with_tool_id("w", "patrol_report_finding", report_args())
            .with_tool_id(
                "s",
                "patrol_assess_finding",
                json!({"finding_id": "f-1", "verdict": "resolved", "evidence": "ok", "reason": "ok"}),
            )
            .with_tool_id("q", "pulse_query", query(1)),
        Turn::text("recorded"),
    ]))
    .await
    .expect("sim");
    // Were these run in parallel, the later calls would finish (and start) before `g` ends.
    let handler = Recorder::with_delays(&[("g", 80), ("w", 40)]);

    let outcome = run_loop(&sim, &handler, LoopLimits::default(), None, None, false).await;

    assert_eq!(outcome.stop, LoopStop::Completed);
    assert_eq!(handler.max_in_flight(), 1);
    assert_eq!(handler.started(), ["g", "w", "s", "q"]);
    assert_eq!(handler.finished(), ["g", "w", "s", "q"]);
}

#[tokio::test]
async fn fabricated_control_call_is_denied_before_dispatch_and_repeat_is_terminal() {
    let control = json!({"type": "resource", "resource_id": "vm/101", "action": "restart"});
    let sim = ProviderSim::start(Script::turns([
        Turn::default()
            .with_tool_id("q1", "pulse_query", query(1))
            .with_tool_id("x1", "pulse_control", control.clone()),
        Turn::default()
            .with_tool_id("q2", "pulse_query", query(2))
            .with_tool_id("x2", "pulse_control", control),
        Turn::text("unreachable"),
    ]))
    .await
    .expect("sim");
    let handler = Recorder::default();

    let outcome = run_loop(&sim, &handler, LoopLimits::default(), None, None, false).await;

    // The handler never saw pulse_control, and the terminal turn ran nothing at all.
    assert_eq!(handler.names(), ["pulse_query"]);
    let LoopStop::TerminalDenial(terminal) = &outcome.stop else {
        panic!("expected terminal_denial, got {:?}", outcome.stop);
    };
    assert_eq!(outcome.stop.as_str(), "terminal_denial");
    assert_eq!(terminal.tool, "pulse_control");
    assert_eq!(terminal.code, DenialCode::ToolNotOffered);
    // The first denial went back to the model as the call's error result.
    let requests = sim.requests();
    assert_eq!(requests.len(), 2);
    let results = tool_messages(&requests[1]);
    assert_eq!(results[1].0, "x1");
    // OpenAI has no error flag on tool messages; the transport marks it in the text.
    assert!(results[1].1.contains("denied (tool_not_offered)"));
    let statuses: Vec<(&str, &CallStatus)> = outcome
        .tool_calls
        .iter()
        .map(|r| (r.call_id.as_str(), &r.status))
        .collect();
    assert_eq!(
        statuses,
        [
            (
                "q1",
                &CallStatus::Executed {
                    is_error: false,
                    timed_out: false
                }
            ),
            (
                "x1",
                &CallStatus::Denied {
                    code: DenialCode::ToolNotOffered
                }
            ),
            ("q2", &CallStatus::NotRun),
            (
                "x2",
                &CallStatus::Terminal {
                    code: DenialCode::ToolNotOffered
                }
            ),
        ]
    );
}

/// A turn that admits only reads, in a run that lists the Watch tools.
async fn run_listed(sim: &ProviderSim, handler: &Recorder, listed: bool) -> LoopOutcome {
    let provider = provider(sim);
    let redactor = redactor();
    let reads = ToolPolicy::narrowed(
        ExecutionProfile::PatrolDetection,
        &[(pulse_capabilities::ToolName::PulseQuery, &[][..])],
    )
    .expect("reads");
    AgentLoop::run(LoopInput {
        transport: &provider,
        route: Route::parse("openai:sim-model").expect("route"),
        route_class: RouteClass::MeteredApi,
        system_prompt: SYSTEM.into(),
        messages: vec![Message::user(GOAL)],
        policy: reads,
        handler,
        redactor: &redactor,
        exports: &ExportsNotAudited,
        usage: &UsageNotRecorded,
        limits: LoopLimits::default(),
        compaction: None,
        allowance: None,
        stream: false,
        temperature: None,
        tool_calls_from_text: false,
        listed: listed.then(|| ListedTools {
            policy: watch_policy(),
            closed_note: "this turn only reads".to_owned(),
        }),
        observer: None,
    })
    .await
}

fn listed_names(request: &RecordedRequest) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_run_that_lists_more_than_its_turn_admits_lists_it_and_refuses_the_closed_tools() {
    let report = json!({"resource_id": "vm/1", "category": "reliability", "severity": "warning",
        "key": "down", "title": "down", "description": "down", "evidence": "down"});
    let script = || {
        Script::turns([
            Turn::default()
                .with_tool_id("r1", "patrol_report_finding", report.clone())
                .with_tool_id("q1", "pulse_query", query(1)),
            Turn::text("done"),
        ])
    };
    let everything: Vec<String> = watch_policy()
        .offered_tools()
        .map(|t| t.name.to_owned())
        .collect();
    assert!(everything.len() > 1);

    // Listed: every request names the run's tools, the same list in every request.
    let sim = ProviderSim::start(script()).await.expect("sim");
    let handler = Recorder::default();
    let outcome = run_listed(&sim, &handler, true).await;
    assert_eq!(outcome.stop, LoopStop::Completed);
    let requests = sim.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(listed_names(request), everything);
    }
    // The closed tool never ran, its result says why, and its record is a denial.
    assert_eq!(handler.names(), ["pulse_query"]);
    let results = tool_messages(&requests[1]);
    assert_eq!(results[0].0, "r1");
    assert!(
        results[0].1.contains(
            "denied (tool_not_offered): patrol_report_finding is not open in this turn: \
             this turn only reads"
        ),
        "{}",
        results[0].1
    );
    assert_eq!(
        outcome.tool_calls[0].status,
        CallStatus::Denied {
            code: DenialCode::ToolNotOffered
        }
    );

    // Not listed: the request names only what the turn admits, and the denial is the gate's.
    let sim = ProviderSim::start(script()).await.expect("sim");
    let handler = Recorder::default();
    run_listed(&sim, &handler, false).await;
    let requests = sim.requests();
    assert_eq!(listed_names(&requests[0]), ["pulse_query"]);
    assert_eq!(handler.names(), ["pulse_query"]);
    let results = tool_messages(&requests[1]);
    assert!(
        results[0].1.contains("not offered in this run"),
        "{}",
        results[0].1
    );
}

#[tokio::test]
async fn looping_model_stops_at_the_turn_limit() {
    let sim = ProviderSim::start(Script::looping("pulse_query", query(1)))
        .await
        .expect("sim");
    let handler = Recorder::default();
    let limits = LoopLimits {
        max_turns: 3,
        ..LoopLimits::default()
    };

    let outcome = run_loop(&sim, &handler, limits, None, None, false).await;

    assert_eq!(outcome.stop, LoopStop::TurnLimit);
    assert_eq!(outcome.turns, 3);
    assert_eq!(sim.requests().len(), 3);
    assert_eq!(handler.started().len(), 3);
}

#[tokio::test]
async fn provider_call_limit_is_honoured_and_counts_retries() {
    let sim = ProviderSim::start(Script::looping("pulse_query", query(1)))
        .await
        .expect("sim");
    let handler = Recorder::default();
    let limits = LoopLimits {
        max_turns: 50,
        max_provider_calls: 4,
        ..LoopLimits::default()
    };
    let outcome = run_loop(&sim, &handler, limits, None, None, false).await;
    assert_eq!(outcome.stop, LoopStop::ProviderCallLimit);
    assert_eq!(outcome.provider_calls, 4);
    assert_eq!(sim.requests().len(), 4);

    // A same-route retry is a provider call too.
    let sim = ProviderSim::start(Script::steps([
        Step::Error(SimError::message(503, "overloaded_error", "overloaded")),
        Step::reply(Turn::tool("pulse_query", query(1))),
        Step::reply(Turn::tool("pulse_query", query(2))),
    ]))
    .await
    .expect("sim");
    let limits = LoopLimits {
        max_turns: 50,
        max_provider_calls: 3,
        ..LoopLimits::default()
    };
    let outcome = run_loop(&sim, &handler, limits, None, None, false).await;
    assert_eq!(outcome.stop, LoopStop::ProviderCallLimit);
    assert_eq!(outcome.turns, 2);
    assert_eq!(outcome.provider_calls, 3);
    assert_eq!(sim.requests().len(), 3);
}

#[tokio::test]
async fn provider_failure_ends_the_run_with_its_cause() {
    let sim = ProviderSim::start(Script::steps([Step::Error(SimError::unauthorized())]))
        .await
        .expect("sim");
    let handler = Recorder::default();
    let outcome = run_loop(&sim, &handler, LoopLimits::default(), None, None, false).await;
    assert!(matches!(
        outcome.stop,
        LoopStop::ProviderFailure {
            cause: FailureCause::Auth,
            ..
        }
    ));
    assert_eq!(outcome.stop.as_str(), "provider_failure");
    assert_eq!(outcome.turns, 0);
    assert_eq!(outcome.provider_calls, 1);
}

#[tokio::test]
async fn canary_secret_in_a_tool_result_never_reaches_the_provider() {
    let sim = ProviderSim::start(Script::turns([
        Turn::tool(
            "pulse_read",
            json!({"action": "file", "path": "/etc/app.env"}),
        ),
        Turn::text("checked"),
    ]))
    .await
    .expect("sim");
    let handler = Recorder {
        result_suffix: format!("\nAPP_TOKEN_VALUE {CANARY}\n"),
        ..Recorder::default()
    };

    let outcome = run_loop(&sim, &handler, LoopLimits::default(), None, None, false).await;

    assert_eq!(outcome.stop, LoopStop::Completed);
    let requests = sim.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert!(!request.body.to_string().contains(CANARY));
    }
    let results = tool_messages(&requests[1]);
    assert!(results[0].1.contains("[REDACTED:"));
    assert!(outcome.redactions[1].total >= 1);
    assert!(
        outcome
            .tool_calls
            .iter()
            .all(|r| !r.output.contains(CANARY))
    );
}

fn assert_paired(messages: &[Message]) {
    // No call lacks a result, and every result follows its call's assistant turn directly.
    assert_eq!(repair_orphan_tool_calls(messages), messages);
    let mut open: Vec<String> = Vec::new();
    for message in messages {
        match message {
            Message::Assistant { tool_calls, .. } => {
                open = tool_calls.iter().map(|c| c.id.clone()).collect();
            }
            Message::Tool(result) => assert!(
                open.contains(&result.call_id),
                "result {} does not follow its call",
                result.call_id
            ),
            _ => open.clear(),
        }
    }
}

#[tokio::test]
async fn compaction_keeps_prompt_goal_recent_turns_and_pairing() {
    let sim = ProviderSim::start(Script::turns([
        Turn::default()
            .with_tool_id("t1a", "pulse_query", query(1))
            .with_tool_id("t1b", "pulse_query", query(2)),
        Turn::default().with_tool_id("t2", "pulse_query", query(3)),
        Turn::default().with_tool_id("t3", "pulse_query", query(4)),
        Turn::default().with_tool_id("t4", "pulse_query", query(5)),
        Turn::text("summary"),
    ]))
    .await
    .expect("sim");
    let handler = Recorder {
        result_size: 4_000,
        ..Recorder::default()
    };
    let compaction = Compaction {
        policy: CompactionPolicy {
            budget_tokens: 2_500,
            keep_recent_turns: 1,
            stub_head_chars: 32,
        },
        estimator: Arc::new(CharsPerToken(4)),
    };

    let outcome = run_loop(
        &sim,
        &handler,
        LoopLimits::default(),
        Some(compaction),
        None,
        false,
    )
    .await;

    assert_eq!(outcome.stop, LoopStop::Completed);
    assert!(!outcome.compactions.is_empty());
    let last = sim.requests().pop().expect("requests");
    let msgs = last.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(msgs[0]["content"], SYSTEM);
    assert_eq!(msgs[1]["content"], GOAL);
    let results = tool_messages(&last);
    let ids: Vec<&str> = results.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["t1a", "t1b", "t2", "t3", "t4"]);
    assert!(results[0].1.starts_with(STUB_MARKER));
    assert!(
        results[0]
            .1
            .contains("tool=pulse_query call_id=t1a original_chars=")
    );
    assert!(results[0].1.contains("head: result of t1a"));
    // The most recent turn is verbatim.
    assert!(!results[4].1.starts_with(STUB_MARKER));
    assert!(results[4].1.len() > 4_000);
    assert_paired(&outcome.messages);
}

struct FinalAfterFirst(AllowanceDecision);

impl TokenAllowance for FinalAfterFirst {
    fn after_turn(&mut self, _turn: u32, _turn_usage: Usage, _total: Usage) -> AllowanceDecision {
        self.0
    }
}

#[tokio::test]
async fn allowance_can_force_a_final_tool_free_turn_or_stop() {
    let script = || {
        Script::turns([
            Turn::tool("pulse_query", query(1)),
            Turn::text("final decision"),
        ])
    };
    let sim = ProviderSim::start(script()).await.expect("sim");
    let handler = Recorder::default();
    let mut allowance = FinalAfterFirst(AllowanceDecision::FinalTurnOnly);
    let outcome = run_loop(
        &sim,
        &handler,
        LoopLimits::default(),
        None,
        Some(&mut allowance),
        false,
    )
    .await;
    assert_eq!(outcome.stop, LoopStop::Completed);
    assert_eq!(outcome.final_text, "final decision");
    let requests = sim.requests();
    assert!(requests[0].body.get("tools").is_some());
    assert!(requests[1].body.get("tools").is_none());

    let sim = ProviderSim::start(script()).await.expect("sim");
    let mut allowance = FinalAfterFirst(AllowanceDecision::Stop);
    let outcome = run_loop(
        &sim,
        &handler,
        LoopLimits::default(),
        None,
        Some(&mut allowance),
        false,
    )
    .await;
    assert_eq!(outcome.stop, LoopStop::AllowanceExhausted);
    assert_eq!(sim.requests().len(), 1);
}

#[tokio::test]
async fn orphaned_calls_get_synthetic_error_results_and_never_run() {
    let sim = ProviderSim::start(Script::steps([
        Step::delivered(
            Turn::default().with_tool_id("o1", "pulse_query", query(1)),
            Delivery {
                orphan_tool_calls: true,
                ..Delivery::default()
            },
        ),
        Step::reply(Turn::text("sorry")),
    ]))
    .await
    .expect("sim");
    let handler = Recorder::default();

    let outcome = run_loop(&sim, &handler, LoopLimits::default(), None, None, true).await;

    assert_eq!(outcome.stop, LoopStop::Completed);
    assert!(handler.started().is_empty());
    let results = tool_messages(&sim.requests()[1]);
    assert_eq!(results.len(), 1);
    assert!(results[0].1.ends_with(INTERRUPTED_TOOL_RESULT));
    assert!(matches!(
        outcome.tool_calls.first().map(|r| &r.status),
        Some(CallStatus::Orphaned)
    ));
    assert_paired(&outcome.messages);
}

#[tokio::test]
async fn identical_calls_of_one_answer_run_once_and_each_id_gets_one_result() {
    let sim = ProviderSim::start(Script::turns([
        Turn::default()
            .with_tool_id("a", "pulse_query", query(1))
            .with_tool_id("b", "pulse_query", json!({"limit": 1, "action": "list"}))
            .with_tool_id("c", "pulse_query", query(2))
            .with_tool_id("d", "pulse_query", query(1)),
        Turn::default().with_tool_id("e", "pulse_query", query(1)),
        Turn::text("done"),
    ]))
    .await
    .expect("sim");
    let handler = Recorder::default();

    let outcome = run_loop(&sim, &handler, LoopLimits::default(), None, None, false).await;

    assert_eq!(outcome.stop, LoopStop::Completed);
    // Key order does not make a repeat new; a later turn's repeat is a new read.
    assert_eq!(handler.started(), ["a", "c", "e"]);
    let results = tool_messages(&sim.requests()[1]);
    assert_eq!(
        results,
        [
            ("a".to_owned(), "result of a".to_owned()),
            ("b".to_owned(), "same call as a; see its result".to_owned()),
            ("c".to_owned(), "result of c".to_owned()),
            ("d".to_owned(), "same call as a; see its result".to_owned()),
        ]
    );
    let statuses: Vec<(&str, &CallStatus)> = outcome
        .tool_calls
        .iter()
        .map(|r| (r.call_id.as_str(), &r.status))
        .collect();
    let executed = CallStatus::Executed {
        is_error: false,
        timed_out: false,
    };
    let repeat_of_a = CallStatus::Duplicate { of: "a".into() };
    assert_eq!(
        statuses,
        [
            ("a", &executed),
            ("b", &repeat_of_a),
            ("c", &executed),
            ("d", &repeat_of_a),
            ("e", &executed),
        ]
    );
    assert_eq!(outcome.tool_calls_deduplicated, 2);
    // A repeat is not a failed call: surfaces show it as done, pointing at the first.
    assert!(repeat_of_a.succeeded() && executed.succeeded());
    assert!(
        !CallStatus::OverCap { cap: 16 }.succeeded()
            && !CallStatus::Executed {
                is_error: true,
                timed_out: false
            }
            .succeeded()
    );
    assert_paired(&outcome.messages);
}

#[tokio::test]
async fn an_answer_repeating_a_once_per_run_read_runs_it_once_and_goes_on() {
    // The shape seen from a 1.5B model: the same findings read dozens of times in one answer.
    // Each repeat through the gate would be a call-limit denial, then a terminal one.
    let mut turn = Turn::default();
    for i in 0..41 {
        turn = turn.with_tool_id(format!("g{i}"), "patrol_get_findings", json!({}));
    }
    let sim = ProviderSim::start(Script::turns([turn, Turn::text("nothing new")]))
        .await
        .expect("sim");
    let handler = Recorder::default();

    let outcome = run_loop(&sim, &handler, LoopLimits::default(), None, None, false).await;

    assert_eq!(outcome.stop, LoopStop::Completed);
    assert_eq!(handler.started(), ["g0"]);
    assert_eq!(outcome.tool_calls_deduplicated, 40);
    let results = tool_messages(&sim.requests()[1]);
    assert_eq!(results.len(), 41);
    assert!(
        results[1..]
            .iter()
            .all(|(_, content)| content == "same call as g0; see its result")
    );
    assert_paired(&outcome.messages);
}

#[tokio::test]
async fn distinct_calls_past_the_answer_cap_are_refused_with_a_message_the_model_can_read() {
    // 20 distinct reads, then repeats of one that ran and one past the cap.
    let mut turn = Turn::default();
    for i in 0..20 {
        turn = turn.with_tool_id(format!("r{i}"), "pulse_query", query(i));
    }
    turn = turn
        .with_tool_id("again0", "pulse_query", query(0))
        .with_tool_id("again17", "pulse_query", query(17));
    let sim = ProviderSim::start(Script::turns([turn, Turn::text("done")]))
        .await
        .expect("sim");
    let handler = Recorder::default();

    let outcome = run_loop(&sim, &handler, LoopLimits::default(), None, None, false).await;

    assert_eq!(outcome.stop, LoopStop::Completed);
    assert_eq!(LoopLimits::default().max_calls_per_turn, 16);
    let ran: Vec<String> = (0..16).map(|i| format!("r{i}")).collect();
    assert_eq!(handler.started(), ran);
    assert_eq!(outcome.tool_calls_over_cap, 4);
    assert_eq!(outcome.tool_calls_deduplicated, 2);
    let results = tool_messages(&sim.requests()[1]);
    assert_eq!(results.len(), 22);
    let refusal = "too many tool calls in one answer: at most 16 run; ask again for the rest";
    for (id, content) in &results[16..20] {
        // OpenAI has no error flag on tool messages; the transport marks it in the text.
        assert!(content.ends_with(refusal), "{id}: {content}");
    }
    assert_eq!(results[20].1, "same call as r0; see its result");
    assert_eq!(results[21].1, "same call as r17; see its result");
    let over_cap: Vec<&str> = outcome
        .tool_calls
        .iter()
        .filter(|r| r.status == CallStatus::OverCap { cap: 16 })
        .map(|r| r.call_id.as_str())
        .collect();
    assert_eq!(over_cap, ["r16", "r17", "r18", "r19"]);
    assert_paired(&outcome.messages);
}

#[tokio::test]
async fn the_answer_cap_is_a_loop_limit() {
    let turn = Turn::default()
        .with_tool_id("a", "pulse_query", query(1))
        .with_tool_id("b", "pulse_query", query(2))
        .with_tool_id("c", "pulse_query", query(3));
    let sim = ProviderSim::start(Script::turns([turn, Turn::text("done")]))
        .await
        .expect("sim");
    let handler = Recorder::default();
    let limits = LoopLimits {
        max_calls_per_turn: 2,
        ..LoopLimits::default()
    };

    let outcome = run_loop(&sim, &handler, limits, None, None, false).await;

    assert_eq!(handler.started(), ["a", "b"]);
    assert_eq!(outcome.tool_calls_over_cap, 1);
    let results = tool_messages(&sim.requests()[1]);
    assert!(results[2].1.contains("at most 2 run"), "{}", results[2].1);
}

/// A buffered (non-streamed) run on `model` (a simulator persona) over a route whose whole
/// request may take `request`, as a local model server's route is set up (no shorter header
/// bound).
async fn run_buffered_within(sim: &ProviderSim, model: &str, request: Duration) -> LoopOutcome {
    pulse_test_support::install_crypto_provider();
    let provider = Provider::new(
        sim.route_config(Protocol::OpenAiCompatible)
            .with_timeouts(Timeouts::patrol(request)),
    )
    .expect("provider");
    let redactor = redactor();
    let handler = Recorder::default();
    AgentLoop::run(LoopInput {
        transport: &provider,
        route: Route::parse(&format!("openai:{model}")).expect("route"),
        route_class: RouteClass::LocalModelServer,
        system_prompt: SYSTEM.into(),
        messages: vec![Message::user(GOAL)],
        policy: watch_policy(),
        handler: &handler,
        redactor: &redactor,
        exports: &ExportsNotAudited,
        usage: &UsageNotRecorded,
        limits: LoopLimits::default(),
        compaction: None,
        allowance: None,
        stream: false,
        temperature: None,
        tool_calls_from_text: false,
        listed: None,
        observer: None,
    })
    .await
}

#[tokio::test]
async fn a_buffered_answer_slower_than_the_request_timeout_is_a_timeout_failure_not_a_hang() {
    // Half the body, then silence; and no headers until long after the request timeout (a
    // local server that answers only when the whole turn is written).
    for model in ["sim:stall", "sim:cold-start:30s"] {
        let sim = ProviderSim::start(Script::turns([Turn::text("unused")]))
            .await
            .expect("sim");
        let started = std::time::Instant::now();

        let outcome = tokio::time::timeout(
            Duration::from_secs(20),
            run_buffered_within(&sim, model, Duration::from_millis(800)),
        )
        .await
        .unwrap_or_else(|_| panic!("{model}: the run hung"));

        let LoopStop::ProviderFailure { cause, message } = &outcome.stop else {
            panic!(
                "{model}: expected a provider failure, got {:?}",
                outcome.stop
            );
        };
        assert_eq!(*cause, FailureCause::Timeout, "{model}: {message}");
        assert_eq!(outcome.stop.as_str(), "provider_failure");
        assert_eq!(outcome.turns, 0, "{model}");
        // At most the one same-route retry, each bounded by the request timeout.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{model}: {:?}",
            started.elapsed()
        );
        let requests = sim.requests();
        assert!(
            !requests.is_empty() && requests.iter().all(|r| !r.stream),
            "{model}"
        );
    }
}

/// A run over the Watch policy with text-call recovery `enabled`.
async fn run_text_calls(sim: &ProviderSim, handler: &Recorder, enabled: bool) -> LoopOutcome {
    run_text_calls_told(sim, handler, enabled, &UsageNotRecorded).await
}

async fn run_text_calls_told(
    sim: &ProviderSim,
    handler: &Recorder,
    enabled: bool,
    usage: &dyn UsageSink,
) -> LoopOutcome {
    run_text_calls_as(sim, handler, enabled, usage, "sim-model").await
}

async fn run_text_calls_as(
    sim: &ProviderSim,
    handler: &Recorder,
    enabled: bool,
    usage: &dyn UsageSink,
    model: &str,
) -> LoopOutcome {
    run_text_calls_observed(sim, handler, enabled, usage, model, None).await
}

async fn run_text_calls_observed(
    sim: &ProviderSim,
    handler: &Recorder,
    enabled: bool,
    usage: &dyn UsageSink,
    model: &str,
    observer: Option<&dyn LoopObserver>,
) -> LoopOutcome {
    let provider = provider(sim);
    let redactor = redactor();
    AgentLoop::run(LoopInput {
        transport: &provider,
        route: Route::new(
            pulse_agent_loop::registry::lookup("llamacpp").expect("llamacpp"),
            model,
        ),
        route_class: RouteClass::LocalModelServer,
        system_prompt: SYSTEM.into(),
        messages: vec![Message::user(GOAL)],
        policy: watch_policy(),
        handler,
        redactor: &redactor,
        exports: &ExportsNotAudited,
        usage,
        limits: LoopLimits::default(),
        compaction: None,
        allowance: None,
        stream: true,
        temperature: None,
        tool_calls_from_text: enabled,
        listed: None,
        observer,
    })
    .await
}

/// The text a client was shown, as the loop streamed it.
#[derive(Default)]
struct ShownText(Mutex<String>);

impl LoopObserver for ShownText {
    fn stream_event(&self, _turn: u32, event: &StreamEvent) {
        if let StreamEvent::Content { text } = event {
            self.0.lock().expect("shown").push_str(text);
        }
    }
}

#[tokio::test]
async fn a_client_is_never_shown_a_call_written_as_text_that_was_recovered() {
    let sim = ProviderSim::start(Script::turns([])).await.expect("sim");
    for form in TextCallForm::ALL {
        let handler = Recorder::default();
        let shown = ShownText::default();
        let model = format!("sim:text-calls:{}", form.as_str());
        let outcome = run_text_calls_observed(
            &sim,
            &handler,
            true,
            &UsageNotRecorded,
            &model,
            Some(&shown),
        )
        .await;
        assert!(outcome.tool_calls_recovered > 0, "{model}");
        let shown = shown.0.lock().expect("shown").clone();
        for marker in ["<tool_call", "<function", "\"name\"", "```", "pulse_query"] {
            assert!(
                !shown.contains(marker),
                "{model} showed {marker}: {shown:?}"
            );
        }
        // The prose around the calls still reaches the client.
        assert!(
            shown.contains("I will use the tools."),
            "{model}: {shown:?}"
        );
        assert!(shown.contains("Summary:"), "{model}: {shown:?}");
    }
    // Text that held no call is shown whole once the answer is complete.
    let handler = Recorder::default();
    let shown = ShownText::default();
    run_text_calls_observed(
        &sim,
        &handler,
        true,
        &UsageNotRecorded,
        "sim:text-calls-invalid",
        Some(&shown),
    )
    .await;
    let shown = shown.0.lock().expect("shown").clone();
    assert!(shown.contains("_v2"), "{shown:?}");
}

/// The assistant messages of a recorded OpenAI request: `(content, [(call id, name)])`.
fn assistant_messages(request: &RecordedRequest) -> Vec<(String, Vec<(String, String)>)> {
    request.body["messages"]
        .as_array()
        .map(|msgs| {
            msgs.iter()
                .filter(|m| m["role"] == "assistant")
                .map(|m| {
                    let calls = m["tool_calls"]
                        .as_array()
                        .map(|calls| {
                            calls
                                .iter()
                                .map(|c| {
                                    (
                                        c["id"].as_str().unwrap_or_default().to_owned(),
                                        c["function"]["name"]
                                            .as_str()
                                            .unwrap_or_default()
                                            .to_owned(),
                                    )
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    (m["content"].as_str().unwrap_or_default().to_owned(), calls)
                })
                .collect()
        })
        .unwrap_or_default()
}

const FENCED_CALL: &str = "Let me look.\n```json\n{\"name\": \"pulse_query\", \"arguments\": {\"action\": \"list\", \"limit\": 1}}\n```";

#[tokio::test]
async fn a_call_written_as_text_runs_as_a_tool_call_and_its_result_pairs_up() {
    let sim = ProviderSim::start(Script::turns([
        Turn::text(FENCED_CALL),
        Turn::text("All hosts are healthy."),
    ]))
    .await
    .expect("sim");
    let handler = Recorder::default();

    let outcome = run_text_calls(&sim, &handler, true).await;

    assert_eq!(outcome.stop, LoopStop::Completed);
    assert_eq!(outcome.final_text, "All hosts are healthy.");
    assert_eq!(outcome.turns, 2);
    assert_eq!(handler.names(), ["pulse_query"]);
    assert_eq!(outcome.tool_calls_recovered, 1);
    let [record] = outcome.tool_calls.as_slice() else {
        panic!("one record expected: {:?}", outcome.tool_calls);
    };
    assert!(record.recovered_from_text);
    assert_eq!(
        record.status,
        CallStatus::Executed {
            is_error: false,
            timed_out: false
        }
    );
    assert_eq!(
        serde_json::from_str::<Value>(&record.input).expect("input"),
        query(1)
    );
    // The next request carries the call as a tool call, without its text, and its result.
    let requests = sim.requests();
    let assistant = assistant_messages(&requests[1]);
    assert_eq!(
        assistant,
        [(
            "Let me look.".to_owned(),
            vec![(record.call_id.clone(), "pulse_query".to_owned())]
        )]
    );
    let results = tool_messages(&requests[1]);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].0, record.call_id);
    assert!(results[0].1.starts_with("result of"), "{results:?}");
}

/// Counts what the loop tells a usage sink about recovered calls, per turn.
#[derive(Default)]
struct RecoveredTold(Mutex<Vec<(String, u32)>>);

impl UsageSink for RecoveredTold {
    fn record<'a>(
        &'a self,
        _call: &'a ProviderCallUsage<'a>,
    ) -> BoxFuture<'a, Result<(), RecordError>> {
        Box::pin(async { Ok(()) })
    }

    fn tool_calls_recovered(&self, route: &Route, _class: RouteClass, count: u32) {
        if let Ok(mut told) = self.0.lock() {
            told.push((route.to_string(), count));
        }
    }
}

#[tokio::test]
async fn recovered_calls_get_ids_unique_in_the_run_and_each_turn_is_told_to_the_sink() {
    let sim = ProviderSim::start(Script::turns([
        Turn::text(
            "<tool_call>{\"name\": \"pulse_query\", \"arguments\": {\"action\": \"list\", \"limit\": 1}}</tool_call>\n\
             <tool_call>{\"name\": \"pulse_query\", \"arguments\": {\"action\": \"list\", \"limit\": 2}}</tool_call>",
        ),
        Turn::text("<function=pulse_query>{\"action\": \"list\", \"limit\": 3}</function>"),
        Turn::text("done"),
    ]))
    .await
    .expect("sim");
    let handler = Recorder::default();
    let told = RecoveredTold::default();

    let outcome = run_text_calls_told(&sim, &handler, true, &told).await;

    assert_eq!(outcome.stop, LoopStop::Completed);
    assert_eq!(outcome.tool_calls_recovered, 3);
    assert_eq!(
        told.0.lock().map(|t| t.clone()).unwrap_or_default(),
        [
            ("llamacpp:sim-model".to_owned(), 2),
            ("llamacpp:sim-model".to_owned(), 1)
        ]
    );
    let ids: std::collections::BTreeSet<&str> = outcome
        .tool_calls
        .iter()
        .map(|r| r.call_id.as_str())
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert!(
        ids.iter()
            .all(|id| id.len() == 9 && id.chars().all(|c| c.is_ascii_alphanumeric())),
        "{ids:?}"
    );
}

#[tokio::test]
async fn with_recovery_off_a_call_written_as_text_is_the_answer() {
    let sim = ProviderSim::start(Script::turns([Turn::text(FENCED_CALL)]))
        .await
        .expect("sim");
    let handler = Recorder::default();

    let outcome = run_text_calls(&sim, &handler, false).await;

    assert_eq!(outcome.stop, LoopStop::Completed);
    assert_eq!(outcome.final_text, FENCED_CALL);
    assert!(handler.names().is_empty());
    assert!(outcome.tool_calls.is_empty());
    assert_eq!(outcome.tool_calls_recovered, 0);
}

#[tokio::test]
async fn a_text_call_to_an_unoffered_tool_or_with_invalid_arguments_stays_text() {
    let text = "{\"name\": \"shell_exec\", \"arguments\": {\"cmd\": \"uptime\"}}\n\
                {\"name\": \"pulse_query\", \"arguments\": {\"action\": \"list\", \"bogus\": 1}}";
    let sim = ProviderSim::start(Script::turns([Turn::text(text)]))
        .await
        .expect("sim");
    let handler = Recorder::default();

    let outcome = run_text_calls(&sim, &handler, true).await;

    assert_eq!(outcome.stop, LoopStop::Completed);
    assert_eq!(outcome.final_text, text);
    assert!(handler.names().is_empty());
    assert!(outcome.tool_calls.is_empty());
    assert_eq!(outcome.tool_calls_recovered, 0);
    assert_eq!(sim.requests().len(), 1);
}

#[tokio::test]
async fn an_answer_with_a_native_call_is_not_searched_for_text_calls() {
    let sim = ProviderSim::start(Script::turns([
        Turn::text(FENCED_CALL).with_tool_id("native", "pulse_query", query(7)),
        Turn::text("done"),
    ]))
    .await
    .expect("sim");
    let handler = Recorder::default();

    let outcome = run_text_calls(&sim, &handler, true).await;

    assert_eq!(outcome.stop, LoopStop::Completed);
    assert_eq!(handler.started(), ["native"]);
    assert_eq!(outcome.tool_calls_recovered, 0);
    assert!(outcome.tool_calls.iter().all(|r| !r.recovered_from_text));
}

#[test]
fn every_form_a_simulator_persona_writes_is_found_as_the_calls_it_wrote() {
    let calls = vec![
        (
            "pulse_query".to_owned(),
            json!({"action": "list", "limit": 2}),
        ),
        (
            "patrol_report_finding".to_owned(),
            json!({"title": "web's health check fails", "evidence": "a & b"}),
        ),
    ];
    for form in TextCallForm::ALL {
        let text = form.write(&calls);
        let found: Vec<(String, Value)> = text_calls::find(&text)
            .into_iter()
            .flat_map(|site| site.calls)
            .map(|call| (call.name, call.arguments))
            .collect();
        assert_eq!(found, calls, "{}: {text}", form.as_str());
        let recovered = text_calls::recover(&text, |_| true).expect("recovered");
        assert_eq!(
            recovered.remaining_text,
            "I will use the tools.",
            "{}",
            form.as_str()
        );
    }
}

#[tokio::test]
async fn each_text_call_persona_runs_its_reads_through_recovered_calls() {
    let sim = ProviderSim::start(Script::turns([])).await.expect("sim");
    for form in TextCallForm::ALL {
        let handler = Recorder::default();
        let model = format!("sim:text-calls:{}", form.as_str());
        let outcome = run_text_calls_as(&sim, &handler, true, &UsageNotRecorded, &model).await;
        assert_eq!(outcome.stop, LoopStop::Completed, "{model}");
        assert!(!handler.names().is_empty(), "{model}: no call ran");
        assert_eq!(
            outcome.tool_calls_recovered as usize,
            outcome.tool_calls.len(),
            "{model}"
        );
        assert!(
            outcome.tool_calls.iter().all(|r| r.recovered_from_text),
            "{model}"
        );
        assert!(
            outcome.final_text.starts_with("Summary:"),
            "{model}: {}",
            outcome.final_text
        );
    }
}

#[tokio::test]
async fn the_invalid_text_call_persona_runs_nothing() {
    let sim = ProviderSim::start(Script::turns([])).await.expect("sim");
    let handler = Recorder::default();
    let outcome = run_text_calls_as(
        &sim,
        &handler,
        true,
        &UsageNotRecorded,
        "sim:text-calls-invalid",
    )
    .await;
    assert_eq!(outcome.stop, LoopStop::Completed);
    assert!(handler.names().is_empty(), "{:?}", handler.names());
    assert_eq!(outcome.tool_calls_recovered, 0);
    assert_eq!(outcome.turns, 1);
}
