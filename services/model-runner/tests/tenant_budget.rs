//! Tenant spend budgets in the agentic loop, against the provider simulator over real HTTP and
//! the Postgres cost ledger: the call that crosses a budget finishes with its turn, the next
//! one is never sent (in a bare loop and in an investigation); a dollar budget on a model of
//! unknown price sends nothing; a tenant without a budget is not stopped by another tenant's
//! spend.

use chrono::Utc;
use futures::future::BoxFuture;
use pulse_agent_loop::agent_loop::{
    AgentLoop, CallStatus, ExportsNotAudited, LoopInput, LoopLimits, LoopOutcome, LoopStop,
    ToolHandler, UsageSink,
};
use pulse_agent_loop::cost::{CallsNotCounted, LedgerUsageSink};
use pulse_agent_loop::provider::{Message, Protocol, Provider, ToolCall, ToolResult};
use pulse_agent_loop::route::Route;
use pulse_capabilities::{AdmittedCall, ExecutionProfile, ToolPolicy};
use pulse_domain::TenantId;
use pulse_domain::patrol::budget::{BudgetKind, BudgetPeriod};
use pulse_model_runner::registry::RouteClass;
use pulse_redaction::{Destination, RedactionConfig, Redactor};
use pulse_store::{settings, tenants};
use pulse_test_support::db::TestDb;
use pulse_test_support::provider_sim::{ProviderSim, Script, Turn};
use serde_json::{Value, json};

struct Reads;

impl ToolHandler for Reads {
    fn call<'a>(
        &'a self,
        call: &'a ToolCall,
        _admitted: &'a AdmittedCall,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move { ToolResult::ok(&call.id, json!({"status": "running"}).to_string()) })
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

async fn run(sim: &ProviderSim, route: &str, usage: &dyn UsageSink) -> LoopOutcome {
    let provider = Provider::new(sim.route_config(Protocol::OpenAiCompatible)).expect("provider");
    let redactor =
        Redactor::new(Destination::external(route), &RedactionConfig::default()).expect("redactor");
    AgentLoop::run(LoopInput {
        transport: &provider,
        route: Route::parse(route).expect("route"),
        route_class: RouteClass::MeteredApi,
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

async fn tenant(db: &TestDb, id: &str, budgets: Option<Value>) -> anyhow::Result<TenantId> {
    let id = TenantId::new(id)?;
    tenants::create(db.store(), &id, id.as_str()).await?;
    if let Some(budgets) = budgets {
        let tx = db.store().tenant_tx(&id).await?;
        settings::put(&tx, 0, &json!({ "budgets": budgets }), "test").await?;
        tx.commit().await?;
    }
    Ok(id)
}

async fn ledger_rows(db: &TestDb, tenant: &TenantId) -> anyhow::Result<i64> {
    let tx = db.store().tenant_tx(tenant).await?;
    let row = tx
        .client()
        .query_one("SELECT count(*) FROM cost_ledger", &[])
        .await?;
    Ok(row.get(0))
}

#[tokio::test]
async fn a_run_crossing_its_token_budget_finishes_the_turn_and_stops_before_the_next_call()
-> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let small = tenant(&db, "small", Some(json!({"daily_tokens": 20}))).await?;
    let open = tenant(&db, "open", None).await?;

    let sim = ProviderSim::start(three_turns()).await?;
    let sink = LedgerUsageSink::new(
        db.store().clone(),
        small.clone(),
        "patrol",
        &CallsNotCounted,
    );
    let outcome = run(&sim, "openai:gpt-4o-mini", &sink).await;
    let LoopStop::BudgetExceeded {
        budget,
        resets_at,
        message,
    } = &outcome.stop
    else {
        panic!("expected a budget stop, got {:?}", outcome.stop);
    };
    assert_eq!(*budget, BudgetKind::DailyTokens);
    assert_eq!(*resets_at, BudgetPeriod::Day.window(Utc::now()).reset_at);
    assert!(message.contains("budgets.daily_tokens"), "{message}");
    // The first call was made and its turn finished: its tool ran and its row is in the ledger.
    assert_eq!(outcome.provider_calls, 1);
    assert_eq!(outcome.turns, 1);
    assert_eq!(outcome.tool_calls.len(), 1);
    assert!(matches!(
        outcome.tool_calls[0].status,
        CallStatus::Executed {
            is_error: false,
            ..
        }
    ));
    assert_eq!(sim.requests().len(), 1, "no second request was sent");
    assert_eq!(ledger_rows(&db, &small).await?, 1);

    // Another tenant, no budget, the same simulator script from the start: all three turns.
    let sim = ProviderSim::start(three_turns()).await?;
    let sink = LedgerUsageSink::new(db.store().clone(), open.clone(), "patrol", &CallsNotCounted);
    let outcome = run(&sim, "openai:gpt-4o-mini", &sink).await;
    assert_eq!(outcome.stop, LoopStop::Completed);
    assert_eq!(outcome.provider_calls, 3);
    db.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn a_dollar_budget_on_a_model_of_unknown_price_sends_nothing() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let priced_only = tenant(&db, "dollars", Some(json!({"monthly_usd": "50"}))).await?;
    let sim = ProviderSim::start(three_turns()).await?;
    let sink = LedgerUsageSink::new(
        db.store().clone(),
        priced_only.clone(),
        "patrol",
        &CallsNotCounted,
    );
    // A metered route with no exact price row.
    let outcome = run(&sim, "openai:gpt-unpriced-preview", &sink).await;
    let LoopStop::BudgetExceeded {
        budget, message, ..
    } = &outcome.stop
    else {
        panic!("expected a budget stop, got {:?}", outcome.stop);
    };
    assert_eq!(*budget, BudgetKind::MonthlyUsd);
    assert!(message.contains("no known price"), "{message}");
    assert_eq!(outcome.provider_calls, 0);
    assert!(sim.requests().is_empty());
    assert_eq!(ledger_rows(&db, &priced_only).await?, 0);

    // The same budget on a priced model runs to the end.
    let sim = ProviderSim::start(three_turns()).await?;
    let outcome = run(&sim, "openai:gpt-4o-mini", &sink).await;
    assert_eq!(outcome.stop, LoopStop::Completed);
    db.cleanup().await?;
    Ok(())
}

/// A catalogue that knows no resource: the investigation below never gets to a proposal.
struct NoCatalogue;

impl pulse_model_runner::investigation::tools::CapabilityCatalogue for NoCatalogue {
    fn capabilities<'a>(
        &'a self,
        _tenant: &'a TenantId,
        _resource_id: &'a str,
    ) -> BoxFuture<'a, Result<pulse_bus::actions_api::ActionCapabilitiesReply, String>> {
        Box::pin(async { Err("no resource in this tenant has that id".to_owned()) })
    }
}

#[tokio::test]
async fn an_investigation_crossing_its_tenants_budget_stops_after_the_turn() -> anyhow::Result<()> {
    use pulse_domain::finding::{Category, ReportedFinding, Severity};
    use pulse_model_runner::investigation::runtime::{Investigator, RunEnd, RunInput};
    use pulse_model_runner::preflight::RouteConnection;

    let db = TestDb::create().await?;
    let tenant = tenant(&db, "acme", Some(json!({"monthly_tokens": 30}))).await?;
    let tx = db.store().tenant_tx(&tenant).await?;
    let reported = ReportedFinding {
        key: "service-unhealthy".to_owned(),
        severity: Severity::Warning,
        category: Category::Reliability,
        resource_id: "service:h1:web".to_owned(),
        resource_name: "web".to_owned(),
        resource_type: "service".to_owned(),
        title: "web health check failing".to_owned(),
        description: "fails".to_owned(),
        recommendation: "look".to_owned(),
        evidence: "health=unhealthy".to_owned(),
        impact: String::new(),
    };
    let finding = pulse_store::findings::report(&tx, &reported, None, Utc::now())
        .await?
        .finding
        .finding;
    tx.commit().await?;

    // A model that would read forever.
    let sim =
        ProviderSim::start(Script::looping("pulse_query", json!({"action": "health"}))).await?;
    let connection = RouteConnection::new(Route::parse("openai:gpt-4o-mini").expect("route"))
        .with_base_url(sim.openai_base_url())
        .with_api_key("sk-test-key");
    let investigator = Investigator::new(
        db.store().clone(),
        None,
        std::sync::Arc::new(NoCatalogue),
        std::sync::Arc::new(pulse_agent_loop::provider::pool::ProviderPool::new()),
    );
    let result = investigator
        .run(RunInput {
            tenant: &tenant,
            investigation_id: uuid::Uuid::now_v7(),
            watch_run_id: pulse_domain::patrol::run::RunId::from_uuid(uuid::Uuid::now_v7()),
            finding: &finding,
            inventory: Vec::new(),
            connection: &connection,
        })
        .await;
    assert!(
        matches!(&result.end, RunEnd::Failed(detail)
            if detail.contains("budget_exceeded") && detail.contains("budgets.monthly_tokens")),
        "{result:?}"
    );
    // The first call's turn finished (its read is evidence); no second request was sent.
    assert_eq!(sim.requests().len(), 1);
    assert_eq!(result.evidence.len(), 1, "{result:?}");
    assert_eq!(ledger_rows(&db, &tenant).await?, 1);
    db.cleanup().await?;
    Ok(())
}
