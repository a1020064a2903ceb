//! The loop's usage hook over the Postgres cost ledger, against the provider simulator over real
//! HTTP: one row per completed provider call with the tokens the simulator counted, priced or
//! left unknown by route, scoped to the tenant.

mod common;

use std::sync::Mutex;

use chrono::Utc;
use futures::future::BoxFuture;
use pulse_agent_loop::agent_loop::{
    AgentLoop, CallOutcome, ExportsNotAudited, LoopInput, LoopLimits, LoopOutcome, LoopStop,
    ProviderCallUsage, RecordError, ToolHandler, UsageSink,
};
use pulse_agent_loop::cost::{
    BudgetDecision, CallMetrics, CallsNotCounted, DollarBudget, LedgerUsageSink, RefusalReason, Usd,
};
use pulse_agent_loop::provider::{FailureCause, Message, Protocol, ToolCall, ToolResult, Usage};
use pulse_agent_loop::registry::RouteClass;
use pulse_agent_loop::route::Route;
use pulse_capabilities::{AdmittedCall, ExecutionProfile, ToolPolicy};
use pulse_domain::TenantId;
use pulse_redaction::{Destination, RedactionConfig, Redactor};
use pulse_store::{cost_ledger, tenants};
use pulse_test_support::db::TestDb;
use pulse_test_support::provider_sim::{ProviderSim, Script, SimError, Step, Turn};
use serde_json::json;

/// Answers every admitted call at once.
struct Reads;

impl ToolHandler for Reads {
    fn call<'a>(
        &'a self,
        call: &'a ToolCall,
        _admitted: &'a AdmittedCall,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            ToolResult::ok(
                &call.id,
                json!({"resources": [{"id": "vm-101", "status": "running"}]}).to_string(),
            )
        })
    }
}

fn three_turns() -> Script {
    Script::turns([
        Turn::text("Listing first.")
            .with_tool("pulse_query", json!({"action": "list", "limit": 1})),
        Turn::tool("pulse_query", json!({"action": "list", "limit": 2})),
        Turn::text("Summary: vm-101 is running."),
    ])
}

async fn run(
    sim: &ProviderSim,
    protocol: Protocol,
    route: &str,
    route_class: RouteClass,
    usage: &dyn UsageSink,
) -> LoopOutcome {
    let provider = common::provider(sim, protocol);
    let redactor =
        Redactor::new(Destination::external(route), &RedactionConfig::default()).expect("redactor");
    AgentLoop::run(LoopInput {
        transport: &provider,
        route: Route::parse(route).expect("route"),
        route_class,
        system_prompt: "You are Pulse Patrol.".into(),
        messages: vec![Message::user("Check the fleet.")],
        policy: ToolPolicy::for_profile(ExecutionProfile::PatrolDetection).expect("policy"),
        handler: &Reads,
        redactor: &redactor,
        exports: &ExportsNotAudited,
        usage,
        limits: LoopLimits::default(),
        compaction: None,
        allowance: None,
        stream: true,
        temperature: None,
        tool_calls_from_text: false,
        listed: None,
        observer: None,
    })
    .await
}

async fn tenant(db: &TestDb, id: &str) -> anyhow::Result<TenantId> {
    let id = TenantId::new(id)?;
    tenants::create(db.store(), &id, id.as_str()).await?;
    Ok(id)
}

/// (route, route_class, surface, input, output, cost_usd, price_known, run_id)
type Row = (
    String,
    String,
    String,
    i64,
    i64,
    Option<String>,
    bool,
    Option<String>,
);

async fn rows(db: &TestDb, tenant: &TenantId) -> anyhow::Result<Vec<Row>> {
    let tx = db.store().tenant_tx(tenant).await?;
    let rows = tx
        .client()
        .query(
            "SELECT route, route_class, surface, input_tokens, output_tokens, cost_usd::text, \
             price_known, run_id FROM cost_ledger ORDER BY occurred_at, id",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            (
                r.get(0),
                r.get(1),
                r.get(2),
                r.get(3),
                r.get(4),
                r.get(5),
                r.get(6),
                r.get(7),
            )
        })
        .collect())
}

fn tokens(n: u64) -> i64 {
    i64::try_from(n).expect("token count")
}

#[tokio::test]
async fn a_three_turn_run_writes_one_ledger_row_per_call_for_its_tenant_only() -> anyhow::Result<()>
{
    let db = TestDb::create().await?;
    let a = tenant(&db, "tenant-a").await?;
    let b = tenant(&db, "tenant-b").await?;
    let sim = ProviderSim::start(three_turns()).await?;
    let sink = LedgerUsageSink::new(db.store().clone(), a.clone(), "patrol", &CallsNotCounted)
        .with_run_id("run-7");

    let outcome = run(
        &sim,
        Protocol::OpenAiCompatible,
        "openai:sim-model",
        RouteClass::MeteredApi,
        &sink,
    )
    .await;
    assert_eq!(outcome.stop, LoopStop::Completed);
    assert_eq!(outcome.turns, 3);

    // The simulator counted each request with o200k_base; the ledger holds exactly those counts.
    let reported: Vec<(i64, i64)> = sim
        .requests()
        .iter()
        .map(|r| {
            let u = r.usage.expect("usage reported");
            (tokens(u.input_tokens), tokens(u.output_tokens))
        })
        .collect();
    assert_eq!(reported.len(), 3);
    assert!(reported.iter().all(|(i, o)| *i > 0 && *o > 0));
    // Later turns carry more history, so the rows are told apart by their counts.
    assert!(reported[0].0 < reported[1].0 && reported[1].0 < reported[2].0);
    let expected: Vec<Row> = reported
        .iter()
        .map(|(input, output)| {
            (
                "openai:sim-model".to_owned(),
                "metered_api".to_owned(),
                "patrol".to_owned(),
                *input,
                *output,
                // A metered model without an exact price row: unknown, never zero.
                None,
                false,
                Some("run-7".to_owned()),
            )
        })
        .collect();
    assert_eq!(rows(&db, &a).await?, expected);

    // The spend summary for the tenant is the sum of those calls.
    let now = Utc::now();
    let tx = db.store().tenant_tx(&a).await?;
    let (from, to) = (
        now - chrono::Duration::hours(1),
        now + chrono::Duration::hours(1),
    );
    let window = cost_ledger::summary(&tx, from, to).await?;
    // The spend a dollar budget checks, as the tenant budget reads it.
    let spent = cost_ledger::period_spend(&tx, from, to).await?.dollars;
    drop(tx);
    assert_eq!(window.len(), 1);
    let route = &window[0];
    assert_eq!(route.route.route, "openai:sim-model");
    assert_eq!(route.route.route_class, RouteClass::MeteredApi.as_str());
    let totals = &route.totals;
    assert_eq!(totals.calls, 3);
    assert_eq!(
        totals.input_tokens,
        reported.iter().map(|r| r.0 as u64).sum::<u64>()
    );
    assert_eq!(
        totals.output_tokens,
        reported.iter().map(|r| r.1 as u64).sum::<u64>()
    );
    assert_eq!(
        (outcome.usage.input_tokens, outcome.usage.output_tokens),
        (totals.input_tokens, totals.output_tokens)
    );
    assert_eq!(totals.known_cost_usd, Usd::ZERO);
    assert_eq!(totals.unknown_price_calls, 3);
    assert_eq!(spent.unknown_price_calls, 3);
    // Unknown spend fails a dollar budget closed.
    let priced = Route::parse("openai:gpt-4o")?;
    assert_eq!(
        DollarBudget::new("100".parse()?).check(
            &priced,
            RouteClass::MeteredApi,
            spent,
            Usage::new(10, 10)
        ),
        BudgetDecision::Refused {
            reason: RefusalReason::UnknownPrice
        }
    );

    // Another tenant sees none of it.
    assert!(rows(&db, &b).await?.is_empty());
    let tx = db.store().tenant_tx(&b).await?;
    let other = cost_ledger::summary(
        &tx,
        now - chrono::Duration::hours(1),
        now + chrono::Duration::hours(1),
    )
    .await?;
    assert!(other.is_empty());
    drop(tx);
    db.cleanup().await?;
    Ok(())
}

/// The service's call metrics as the ledger sink feeds them: surface and outcome of each call.
struct CountedCalls(Mutex<Vec<(String, CallOutcome)>>);

impl CallMetrics for CountedCalls {
    fn call(&self, surface: &str, call: &ProviderCallUsage<'_>) {
        if let Ok(mut calls) = self.0.lock() {
            calls.push((surface.to_owned(), call.outcome));
        }
    }
}

static COUNTED: CountedCalls = CountedCalls(Mutex::new(Vec::new()));

#[tokio::test]
async fn local_route_calls_are_a_true_zero_and_failed_calls_write_no_row_but_are_counted()
-> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let a = tenant(&db, "tenant-a").await?;
    let sink = LedgerUsageSink::new(db.store().clone(), a.clone(), "chat", &COUNTED);

    let sim = ProviderSim::start(Script::turns([Turn::text("all fine")])).await?;
    let outcome = run(
        &sim,
        Protocol::Ollama,
        "ollama:sim-model",
        RouteClass::LocalModelServer,
        &sink,
    )
    .await;
    assert_eq!(outcome.stop, LoopStop::Completed);
    let u = sim.requests()[0].usage.expect("usage");
    assert_eq!(
        rows(&db, &a).await?,
        vec![(
            "ollama:sim-model".to_owned(),
            "local_model_server".to_owned(),
            "chat".to_owned(),
            tokens(u.input_tokens),
            tokens(u.output_tokens),
            Some("0.000000000000".to_owned()),
            true,
            None,
        )]
    );

    // The provider reported no usage for a rejected call: nothing is made up.
    let sim = ProviderSim::start(Script::steps([Step::Error(SimError::unauthorized())])).await?;
    let outcome = run(
        &sim,
        Protocol::OpenAiCompatible,
        "openai:sim-model",
        RouteClass::MeteredApi,
        &sink,
    )
    .await;
    assert!(matches!(
        outcome.stop,
        LoopStop::ProviderFailure {
            cause: FailureCause::Auth,
            ..
        }
    ));
    assert_eq!(rows(&db, &a).await?.len(), 1);
    // The metrics saw both calls, the one without a row included.
    let counted = COUNTED.0.lock().expect("counted calls").clone();
    assert_eq!(
        counted,
        vec![
            ("chat".to_owned(), CallOutcome::Completed),
            ("chat".to_owned(), CallOutcome::Failed(FailureCause::Auth)),
        ]
    );
    db.cleanup().await?;
    Ok(())
}

/// What the hook was told of one call: route, class, position, usage, outcome.
type ToldCall = (String, RouteClass, u32, Usage, CallOutcome);

/// Keeps what it is told; refuses from the `fail_from`th call on.
#[derive(Default)]
struct Told {
    calls: Mutex<Vec<ToldCall>>,
    fail_from: Option<u32>,
}

impl UsageSink for Told {
    fn record<'a>(
        &'a self,
        call: &'a ProviderCallUsage<'a>,
    ) -> BoxFuture<'a, Result<(), RecordError>> {
        Box::pin(async move {
            if let Ok(mut calls) = self.calls.lock() {
                calls.push((
                    call.route.to_string(),
                    call.route_class,
                    call.call,
                    call.usage,
                    call.outcome,
                ));
            }
            match self.fail_from {
                Some(n) if call.call >= n => Err(RecordError::new("ledger unavailable")),
                _ => Ok(()),
            }
        })
    }
}

#[tokio::test]
async fn the_hook_is_told_every_call_once_and_a_failed_record_stops_the_run() {
    let sim = ProviderSim::start(Script::steps([
        Step::Error(SimError::html_502()),
        Step::reply(Turn::tool(
            "pulse_query",
            json!({"action": "list", "limit": 1}),
        )),
        Step::reply(Turn::text("done")),
    ]))
    .await
    .expect("sim");
    let told = Told::default();
    let outcome = run(
        &sim,
        Protocol::Anthropic,
        "anthropic:sim-model",
        RouteClass::MeteredApi,
        &told,
    )
    .await;
    assert_eq!(outcome.stop, LoopStop::Completed);
    let calls = told.calls.lock().map(|c| c.clone()).unwrap_or_default();
    let usage_of = |i: usize| {
        let u = sim.requests()[i].usage.expect("usage");
        Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cached_input_tokens: u.cached_input_tokens,
            cache_write_input_tokens: u.cache_write_input_tokens,
        }
    };
    // The 502 and its same-route retry are one provider call of the run.
    assert_eq!(
        calls,
        vec![
            (
                "anthropic:sim-model".to_owned(),
                RouteClass::MeteredApi,
                1,
                usage_of(1),
                CallOutcome::Completed
            ),
            (
                "anthropic:sim-model".to_owned(),
                RouteClass::MeteredApi,
                2,
                usage_of(2),
                CallOutcome::Completed
            ),
        ]
    );

    // A failed call is reported too, with no usage and its cause.
    let sim = ProviderSim::start(Script::steps([Step::Error(SimError::unauthorized())]))
        .await
        .expect("sim");
    let told = Told::default();
    run(
        &sim,
        Protocol::Gemini,
        "gemini:sim-model",
        RouteClass::MeteredApi,
        &told,
    )
    .await;
    let calls = told.calls.lock().map(|c| c.clone()).unwrap_or_default();
    assert_eq!(
        calls,
        vec![(
            "gemini:sim-model".to_owned(),
            RouteClass::MeteredApi,
            1,
            Usage::default(),
            CallOutcome::Failed(FailureCause::Auth)
        )]
    );

    let sim = ProviderSim::start(three_turns()).await.expect("sim");
    let failing = Told {
        fail_from: Some(1),
        ..Told::default()
    };
    let outcome = run(
        &sim,
        Protocol::OpenAiCompatible,
        "openai:sim-model",
        RouteClass::MeteredApi,
        &failing,
    )
    .await;
    assert_eq!(
        outcome.stop,
        LoopStop::UsageNotRecorded {
            message: "ledger unavailable".into()
        }
    );
    assert_eq!(outcome.stop.as_str(), "usage_not_recorded");
    // No further call after spend that could not be recorded; the tool was not run either.
    assert_eq!(sim.requests().len(), 1);
    assert!(outcome.tool_calls.is_empty());
}
