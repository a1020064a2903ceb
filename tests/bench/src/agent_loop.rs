//! Agent loop overhead: the loop's own work per turn (compaction check, request build, redaction,
//! admission, result assembly), excluding the provider round trip and the tool handlers, over a
//! 6-turn run with 20 tool calls against a zero-latency simulator.

use std::time::{Duration, Instant};

use pulse_agent_loop::agent_loop::{
    AdmittedCall, AgentLoop, BoxFuture, Compaction, ExecutionProfile, ExportsNotAudited, LoopInput,
    LoopLimits, LoopStop, ToolHandler, ToolPolicy, UsageNotRecorded,
};
use pulse_agent_loop::provider::{
    Message, Protocol, Provider, ProviderConfig, Timeouts, ToolCall, ToolResult,
};
use pulse_agent_loop::route::Route;
use pulse_model_runner::registry::RouteClass;
use pulse_redaction::{Destination, RedactionConfig, Redactor};
use pulse_test_support::provider_sim::{ProviderSim, Script, Turn};
use serde_json::json;

use crate::{BenchArgs, figure, quantile};

/// The redaction corpora of the pulse-redaction tests: the bench redacts requests built from them.
#[path = "../../../shared/redaction/tests/corpus/corpus.rs"]
mod corpus;

const BENCH: &str = "loop";
const TOOL_TURNS: usize = 5;
const CALLS_PER_TURN: usize = 4;

/// Answers at once with a small read result.
struct Immediate;

impl ToolHandler for Immediate {
    fn call<'a>(
        &'a self,
        call: &'a ToolCall,
        _admitted: &'a AdmittedCall,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            ToolResult::ok(
                &call.id,
                json!({"resources": [{"id": "node/pve1", "status": "online", "cpu": 0.12}]})
                    .to_string(),
            )
        })
    }
}

fn script() -> Script {
    let mut turns = Vec::new();
    for t in 0..TOOL_TURNS {
        let mut turn = Turn::text(format!("checking batch {t}"));
        for c in 0..CALLS_PER_TURN {
            turn = turn.with_tool(
                "pulse_query",
                json!({"action": "list", "limit": t * 10 + c}),
            );
        }
        turns.push(turn);
    }
    turns.push(Turn::text("All resources are healthy."));
    Script::turns(turns)
}

pub async fn run(args: &BenchArgs) -> anyhow::Result<()> {
    redaction(args)?;
    let runs = if args.quick { 10 } else { 200 };
    let policy = ToolPolicy::for_profile(ExecutionProfile::PatrolDetection)?;
    let redactor = Redactor::new(
        Destination::external("openai:sim-model"),
        &RedactionConfig {
            secrets: vec!["bench-secret-0123456789".to_owned()],
            local_only: Vec::new(),
        },
    )?;
    let handler = Immediate;
    let route = Route::parse("openai:sim-model")?;

    let mut overheads_ms = Vec::with_capacity(runs * (TOOL_TURNS + 1));
    let mut provider_ms = Vec::with_capacity(runs * (TOOL_TURNS + 1));
    let mut run_ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        // The script is consumed request by request: one simulator per run.
        let sim = ProviderSim::start(script()).await?;
        let provider = Provider::new(
            ProviderConfig::new(Protocol::OpenAiCompatible, sim.openai_base_url())
                .with_api_key("sk-bench")
                .with_timeouts(Timeouts::patrol(Duration::from_secs(30))),
        )?;
        let started = Instant::now();
        let outcome = AgentLoop::run(LoopInput {
            transport: &provider,
            route: route.clone(),
            route_class: RouteClass::MeteredApi,
            system_prompt: "You are Pulse Patrol.".into(),
            messages: vec![Message::user("Check the fleet.")],
            policy: policy.clone(),
            handler: &handler,
            redactor: &redactor,
            exports: &ExportsNotAudited,
            usage: &UsageNotRecorded,
            limits: LoopLimits::default(),
            compaction: Some(Compaction::default()),
            allowance: None,
            stream: false,
            temperature: None,
            tool_calls_from_text: false,
            listed: None,
            observer: None,
        })
        .await;
        run_ms.push(started.elapsed().as_secs_f64() * 1e3);
        let calls = outcome.tool_calls.len();
        if outcome.stop != LoopStop::Completed
            || outcome.turns as usize != TOOL_TURNS + 1
            || calls != TOOL_TURNS * CALLS_PER_TURN
        {
            anyhow::bail!(
                "agent loop bench run ended {} after {} turns and {calls} calls",
                outcome.stop.as_str(),
                outcome.turns
            );
        }
        for t in &outcome.timings {
            overheads_ms.push(t.overhead.as_secs_f64() * 1e3);
            provider_ms.push(t.provider.as_secs_f64() * 1e3);
        }
    }
    let sort = |v: &mut Vec<f64>| v.sort_by(f64::total_cmp);
    sort(&mut overheads_ms);
    sort(&mut provider_ms);
    sort(&mut run_ms);
    figure(
        BENCH,
        "per-turn loop overhead p50",
        quantile(&overheads_ms, 0.5),
        "ms",
    );
    figure(
        BENCH,
        "per-turn loop overhead p99",
        quantile(&overheads_ms, 0.99),
        "ms",
    );
    figure(
        BENCH,
        "per-turn provider round trip p50",
        quantile(&provider_ms, 0.5),
        "ms",
    );
    figure(
        BENCH,
        "run wall time p50 (6 turns, 20 calls)",
        quantile(&run_ms, 0.5),
        "ms",
    );
    figure(
        BENCH,
        "run wall time p99 (6 turns, 20 calls)",
        quantile(&run_ms, 0.99),
        "ms",
    );
    Ok(())
}

/// A Watch-shaped request whose history holds `reads` `pulse_read` `logs` results of
/// `lines_per_read` lines each, drawn from the corpora (one secret-bearing case in four lines)
/// starting at `offset`.
fn corpus_request(
    secret_lines: &[&str],
    ordinary: &[&str],
    reads: usize,
    lines_per_read: usize,
    offset: usize,
) -> pulse_agent_loop::provider::ChatRequest {
    use pulse_agent_loop::provider::ChatRequest;
    let mut messages = vec![
        Message::system("You are Pulse Patrol. ".repeat(80)),
        Message::user(format!(
            "Check the fleet.\n{}",
            ordinary[..ordinary.len().min(20)].join("\n")
        )),
    ];
    let mut n = offset;
    for r in 0..reads {
        let id = format!("call_{r}");
        let lines: Vec<serde_json::Value> = (0..lines_per_read)
            .map(|i| {
                n += 1;
                let text = if i % 4 == 0 {
                    secret_lines[n % secret_lines.len()]
                } else {
                    ordinary[n % ordinary.len()]
                };
                json!({"stream": "file", "text": text})
            })
            .collect();
        messages.push(Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall::new(
                &id,
                "pulse_read",
                json!({"action": "logs", "resource_id": "service:web01:shop-api", "lines": lines_per_read}),
            )],
            reasoning_content: None,
        });
        messages.push(Message::Tool(ToolResult::ok(
            &id,
            json!({"resource_id": "service:web01:shop-api", "read_at": "2024-05-02T10:30:00Z",
                   "truncated": false, "lines": lines})
            .to_string(),
        )));
    }
    ChatRequest {
        model: "sim-model".into(),
        messages,
        ..ChatRequest::default()
    }
}

/// The sanitizer's cost per model request over requests built from the redaction corpora: a
/// typical turn (one 50-line read) and a heavy one (four 200-line reads, the read maximum).
fn redaction(args: &BenchArgs) -> anyhow::Result<()> {
    let cases = corpus::secret_cases(corpus::SECRETS)
        .map_err(|e| anyhow::anyhow!("redaction corpus: {e}"))?;
    anyhow::ensure!(
        cases.iter().all(|c| !c.source.is_empty()),
        "every corpus case names its source"
    );
    let secret_lines: Vec<&str> = cases.iter().map(|c| c.text.as_str()).collect();
    let ordinary = corpus::ordinary_lines(corpus::ORDINARY);
    let new_redactor = || {
        Redactor::new(
            Destination::external("openai:sim-model"),
            &RedactionConfig {
                secrets: vec!["bench-secret-0123456789".to_owned()],
                local_only: Vec::new(),
            },
        )
    };
    let samples = if args.quick { 100 } else { 2_000 };
    for (label, reads, lines) in [
        ("1 read x 50 lines", 1, 50),
        ("4 reads x 200 lines", 4, 200),
    ] {
        let mut ms = Vec::with_capacity(samples);
        let mut bytes = 0usize;
        let mut redacted = 0u64;
        for i in 0..samples {
            let mut request = corpus_request(&secret_lines, &ordinary, reads, lines, i * 7);
            bytes = serde_json::to_string(&request)?.len();
            // A fresh redactor: every string is new to it (the cold cost of the whole request).
            let redactor = new_redactor()?;
            let started = Instant::now();
            let report = redactor.sanitize(&mut request);
            ms.push(started.elapsed().as_secs_f64() * 1e3);
            redacted += report.total;
        }
        anyhow::ensure!(redacted > 0, "the corpus requests redacted nothing");
        ms.sort_by(f64::total_cmp);
        figure(
            BENCH,
            &format!(
                "redaction per request p50 (cold, {label}, {} KB)",
                bytes / 1024
            ),
            quantile(&ms, 0.5),
            "ms",
        );
        figure(
            BENCH,
            &format!(
                "redaction per request p99 (cold, {label}, {} KB)",
                bytes / 1024
            ),
            quantile(&ms, 0.99),
            "ms",
        );
    }
    // As a run sends them: the history grows by one 200-line read per turn up to the maximum of
    // four, through one redactor per run, so earlier reads are not scanned again.
    let runs = samples / 4;
    let mut ms = Vec::with_capacity(runs * 4);
    let mut redacted = 0u64;
    for i in 0..runs {
        let redactor = new_redactor()?;
        for reads in 1..=4 {
            let mut request = corpus_request(&secret_lines, &ordinary, reads, 200, i * 7);
            let started = Instant::now();
            let report = redactor.sanitize(&mut request);
            ms.push(started.elapsed().as_secs_f64() * 1e3);
            redacted += report.total;
        }
    }
    anyhow::ensure!(redacted > 0, "the run requests redacted nothing");
    ms.sort_by(f64::total_cmp);
    figure(
        BENCH,
        "redaction per request p50 (run of 4 turns x 200-line reads)",
        quantile(&ms, 0.5),
        "ms",
    );
    figure(
        BENCH,
        "redaction per request p99 (run of 4 turns x 200-line reads)",
        quantile(&ms, 0.99),
        "ms",
    );
    Ok(())
}
