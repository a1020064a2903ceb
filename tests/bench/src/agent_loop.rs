//! Agent loop overhead: the loop's own work per turn (compaction check, request build, redaction,
//! admission, result assembly), excluding the provider round trip and the tool handlers, over a
//! 6-turn run with 20 tool calls against a zero-latency simulator.

use std::time::{Duration, Instant};

use pulse_model_runner::agent_loop::{
    AdmittedCall, AgentLoop, BoxFuture, Compaction, ExecutionProfile, ExportsNotAudited, LoopInput,
    LoopLimits, LoopStop, ToolHandler, ToolPolicy, UsageNotRecorded,
};
use pulse_model_runner::provider::{
    Message, Protocol, Provider, ProviderConfig, Timeouts, ToolCall, ToolResult,
};
use pulse_model_runner::redaction::{Destination, RedactionConfig, Redactor};
use pulse_model_runner::registry::RouteClass;
use pulse_model_runner::route::Route;
use pulse_test_support::provider_sim::{ProviderSim, Script, Turn};
use serde_json::json;

use crate::{BenchArgs, figure, quantile};

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
