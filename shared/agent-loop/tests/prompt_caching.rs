//! Prompt caching end to end: a multi-turn loop over the provider simulator (real HTTP, each
//! protocol's own cache reporting, streamed and not) writes one cost-ledger row per call with the
//! cached input tokens the provider reported, priced at the provider's cached price.

mod common;

use futures::future::BoxFuture;
use pulse_agent_loop::agent_loop::{
    AgentLoop, ExportsNotAudited, LoopInput, LoopLimits, LoopStop, ToolHandler,
};
use pulse_agent_loop::cost::{CallsNotCounted, LedgerUsageSink, Usd};
use pulse_agent_loop::pricing;
use pulse_agent_loop::provider::{Message, Protocol, ToolCall, ToolResult, Usage};
use pulse_agent_loop::registry::RouteClass;
use pulse_agent_loop::route::Route;
use pulse_capabilities::{AdmittedCall, ExecutionProfile, ToolPolicy};
use pulse_domain::TenantId;
use pulse_redaction::{Destination, RedactionConfig, Redactor};
use pulse_store::tenants;
use pulse_test_support::db::TestDb;
use pulse_test_support::provider_sim::{ProviderSim, Script, SimUsage, Turn};
use serde_json::json;

struct Reads;

impl ToolHandler for Reads {
    fn call<'a>(
        &'a self,
        call: &'a ToolCall,
        _admitted: &'a AdmittedCall,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move { ToolResult::ok(&call.id, r#"{"status":"running"}"#) })
    }
}

/// A system prompt well over the 1,024-token minimum every simulated cache applies.
fn long_system_prompt() -> String {
    let mut text = String::from("You are Pulse Patrol. Rules follow.\n");
    for i in 0..400 {
        text.push_str(&format!("Rule {i}: keep evidence. "));
    }
    text
}

fn usage_of(sim: SimUsage) -> Usage {
    Usage {
        input_tokens: sim.input_tokens,
        output_tokens: sim.output_tokens,
        cached_input_tokens: sim.cached_input_tokens,
        cache_write_input_tokens: sim.cache_write_input_tokens,
    }
}

/// (input, output, cached, cache_write, cost_usd) of every ledger row, in call order.
type Row = (i64, i64, i64, i64, Option<String>);

async fn rows(db: &TestDb, tenant: &TenantId) -> anyhow::Result<Vec<Row>> {
    let tx = db.store().tenant_tx(tenant).await?;
    let rows = tx
        .client()
        .query(
            "SELECT input_tokens, output_tokens, cached_input_tokens, cache_write_input_tokens, \
             cost_usd::text FROM cost_ledger ORDER BY occurred_at, id",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect())
}

fn count(n: u64) -> i64 {
    i64::try_from(n).expect("token count")
}

/// Runs three turns on `route` over `protocol` and returns the simulator's usage per request
/// with the ledger rows.
async fn three_turns(
    db: &TestDb,
    protocol: Protocol,
    route: &str,
    stream: bool,
) -> anyhow::Result<(Vec<Usage>, Vec<Row>)> {
    let model = Route::parse(route)?.model().to_owned();
    let sim = ProviderSim::start(Script::turns([
        Turn::tool("pulse_query", json!({"action": "list", "limit": 1})),
        Turn::tool("pulse_query", json!({"action": "list", "limit": 2})),
        Turn::text("Summary: all running."),
    ]))
    .await?;
    let tenant = TenantId::new(format!(
        "cache-{}-{}",
        pulse_agent_loop::registry::protocol_name(protocol),
        if stream { "s" } else { "n" }
    ))?;
    tenants::create(db.store(), &tenant, tenant.as_str()).await?;
    let sink = LedgerUsageSink::new(
        db.store().clone(),
        tenant.clone(),
        "patrol",
        &CallsNotCounted,
    );
    let provider = common::provider(&sim, protocol);
    let redactor = Redactor::new(Destination::external(route), &RedactionConfig::default())?;
    let outcome = AgentLoop::run(LoopInput {
        transport: &provider,
        route: Route::parse(route)?,
        route_class: RouteClass::MeteredApi,
        system_prompt: long_system_prompt(),
        messages: vec![Message::user("Check the fleet.")],
        policy: ToolPolicy::for_profile(ExecutionProfile::PatrolDetection)?,
        handler: &Reads,
        redactor: &redactor,
        exports: &ExportsNotAudited,
        usage: &sink,
        limits: LoopLimits::default(),
        compaction: None,
        allowance: None,
        stream,
        temperature: None,
        tool_calls_from_text: false,
        listed: None,
        observer: None,
    })
    .await;
    assert_eq!(outcome.stop, LoopStop::Completed, "{route}");
    let reported: Vec<Usage> = sim
        .requests()
        .iter()
        .filter(|r| r.model == model)
        .filter_map(|r| r.usage.map(usage_of))
        .collect();
    assert_eq!(reported.len(), 3, "{route}");
    // The loop's total is the sum of what the provider reported, cache counts included.
    let mut total = Usage::default();
    for u in &reported {
        total += *u;
    }
    assert_eq!(outcome.usage, total, "{route}");
    Ok((reported, rows(db, &tenant).await?))
}

fn assert_rows_priced(route: &str, reported: &[Usage], rows: &[Row]) {
    let route = Route::parse(route).expect("route");
    let row = pricing::price(route.provider_id(), route.model()).expect("a price row");
    assert_eq!(rows.len(), reported.len());
    for (usage, (input, output, cached, written, cost)) in reported.iter().zip(rows) {
        assert_eq!(
            (*input, *output, *cached, *written),
            (
                count(usage.input_tokens),
                count(usage.output_tokens),
                count(usage.cached_input_tokens),
                count(usage.cache_write_input_tokens)
            ),
            "{route}"
        );
        let recorded: Usd = cost.as_deref().expect("priced").parse().expect("usd");
        assert_eq!(recorded, row.cost(*usage), "{route}");
        if usage.cached_input_tokens > 0 {
            let uncached = row.cost(Usage::new(usage.input_tokens, usage.output_tokens));
            assert!(recorded < uncached, "{route}: {recorded} !< {uncached}");
        }
    }
}

#[tokio::test]
async fn openai_wire_records_automatic_prefix_cache_hits_at_the_cached_price() -> anyhow::Result<()>
{
    let db = TestDb::create().await?;
    for stream in [false, true] {
        let route = "openai:gpt-4.1";
        let (reported, rows) = three_turns(&db, Protocol::OpenAiCompatible, route, stream).await?;
        assert_eq!(reported[0].cached_input_tokens, 0, "a first prompt is new");
        for later in &reported[1..] {
            assert!(later.cached_input_tokens >= 1024, "{later:?}");
            assert_eq!((later.cached_input_tokens - 1024) % 128, 0, "{later:?}");
            assert_eq!(later.cache_write_input_tokens, 0);
        }
        assert_rows_priced(route, &reported, &rows);
    }
    db.cleanup().await
}

#[tokio::test]
async fn anthropic_wire_records_cache_reads_and_writes_at_their_prices() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    for stream in [false, true] {
        let route = "anthropic:claude-sonnet-4-20250514";
        let (reported, rows) = three_turns(&db, Protocol::Anthropic, route, stream).await?;
        // The first request writes its breakpoints; each later one reads what the one before
        // wrote and writes only what it appended.
        assert_eq!(reported[0].cached_input_tokens, 0);
        assert!(
            reported[0].cache_write_input_tokens > 1024,
            "{:?}",
            reported[0]
        );
        for pair in reported.windows(2) {
            let (before, after) = (pair[0], pair[1]);
            assert!(
                after.cached_input_tokens
                    >= before.cached_input_tokens + before.cache_write_input_tokens,
                "{before:?} then {after:?}"
            );
            assert!(after.cache_write_input_tokens < 200, "{after:?}");
        }
        assert_rows_priced(route, &reported, &rows);
    }
    db.cleanup().await
}

#[tokio::test]
async fn gemini_wire_records_implicit_cache_hits() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let route = "gemini:gemini-2.5-flash";
    let (reported, rows) = three_turns(&db, Protocol::Gemini, route, true).await?;
    assert_eq!(reported[0].cached_input_tokens, 0);
    assert!(reported[2].cached_input_tokens >= 1024, "{:?}", reported[2]);
    assert_rows_priced(route, &reported, &rows);
    db.cleanup().await
}

#[test]
fn cached_tokens_cost_the_cached_price_and_writes_the_write_price() {
    let sonnet = pricing::price("anthropic", "claude-sonnet-4-20250514").expect("row");
    // 1M uncached at 3.00, 1M cache reads at 0.30, 1M cache writes at 3.75, 1M out at 15.00.
    let usage = Usage {
        input_tokens: 3_000_000,
        output_tokens: 1_000_000,
        cached_input_tokens: 1_000_000,
        cache_write_input_tokens: 1_000_000,
    };
    assert_eq!(sonnet.cost(usage), "22.05".parse::<Usd>().expect("usd"));
    assert!((sonnet.cached_input_ratio() - 0.1).abs() < 1e-9);
    assert!((sonnet.billed_equivalent_input(usage) - 2_350_000.0).abs() < 1e-6);
    let gpt = pricing::price("openai", "gpt-4o").expect("row");
    assert!((gpt.cached_input_ratio() - 0.5).abs() < 1e-9);
    assert!((gpt.cache_write_ratio() - 1.0).abs() < 1e-9);
    // Every row prices cache reads below, and cache writes at or above, the plain input.
    for row in pricing::PRICES {
        assert!(
            row.cached_input_micros_per_mtok < row.input_micros_per_mtok,
            "{row:?}"
        );
        assert!(
            row.cache_write_micros_per_mtok >= row.input_micros_per_mtok,
            "{row:?}"
        );
    }
}
