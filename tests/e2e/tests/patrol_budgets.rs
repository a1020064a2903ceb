//! Tenant spend budgets end to end: the real gateway, patrol-scheduler and model-runner binaries,
//! the provider simulator as a diligent model (`sim:diligent`, several calls per run) behind an
//! OpenAI-compatible Patrol route, and a daily token budget far below one call.
//!
//! - A run in flight that crosses the budget finishes its current turn and ends `error` with
//!   cause `budget_exceeded` and the reset time; no further request reaches the provider.
//! - Then `GET /api/ai/patrol/status` is `blocked` with `blocked_cause` `budget_exceeded`,
//!   `blocked_until` the next UTC midnight and the `budget` readiness check failing with it.
//! - A new run is refused (409 `patrol_not_ready`, cause `budget_exceeded`) before anything is
//!   recorded or sent.
//! - Raising the budget lets runs start again.
//! - A run accepted while the budget had room, whose budget ran out before a runner took it,
//!   ends `error` (`budget_exceeded`, with the reset) at start, with no provider request.

use std::time::Duration;

use chrono::{DateTime, Utc};
use pulse_domain::TenantId;
use pulse_domain::ai_settings::BudgetsPatch;
use pulse_domain::patrol::budget::BudgetPeriod;
use pulse_domain::patrol::run::{ErrorCause, RunStatus};
use pulse_domain::patrol::scope::RawRunRequest;
use pulse_domain::patrol::status::{
    BlockedCause, CheckStatus, PatrolStatus, ReadinessCheck, ReadinessCheckId, RuntimeState,
};
use pulse_domain::resource::ObservedResource;
use pulse_test_support::patrol::{self, openai_route, save_settings};
use pulse_test_support::provider_sim::{PREFLIGHT_TOOL, ProviderSim, Script, preflight_reply};
use pulse_test_support::runner::TestModelRunner;
use pulse_test_support::scheduler::TestScheduler;
use pulse_test_support::seed::{self, service_resource};
use pulse_test_support::service::{TestGateway, scratch_dir};
use reqwest::Method;

const KEY: &str = "sk-budget-e2e-3c8d1f0a";
/// Time for a run to be picked up and answered on a loaded 2-core machine.
const RUN_DEADLINE: Duration = Duration::from_secs(60);

fn reset_times(before: DateTime<Utc>) -> [DateTime<Utc>; 2] {
    [
        BudgetPeriod::Day.window(before).reset_at,
        BudgetPeriod::Day.window(Utc::now()).reset_at,
    ]
}

/// Requests to the simulator made by runs (preflights offer the probe tool).
fn run_requests(sim: &ProviderSim) -> usize {
    sim.requests()
        .into_iter()
        .filter(|r| {
            !r.body
                .to_string()
                .contains(&format!("\"{PREFLIGHT_TOOL}\""))
        })
        .count()
}

async fn status(gateway: &TestGateway) -> anyhow::Result<PatrolStatus> {
    Ok(gateway.client()?.patrol_status().await?)
}

fn budget_check(status: &PatrolStatus) -> Option<&ReadinessCheck> {
    status
        .readiness_checks
        .iter()
        .find(|c| c.id == ReadinessCheckId::Budget)
}

#[tokio::test]
async fn a_small_token_budget_stops_the_run_in_flight_and_refuses_the_next_until_it_resets()
-> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gateway = TestGateway::start().await?;
    let dir = scratch_dir("budgets")?;
    let scheduler = TestScheduler::start(&gateway, &dir.join("scheduler"), &[]).await?;
    let sim =
        ProviderSim::start(Script::turns([]).with_tool_offer_reply(preflight_reply())).await?;
    let mut settings = openai_route("sim:diligent", KEY, &sim.openai_base_url());
    settings.budgets = Some(BudgetsPatch {
        daily_tokens: Some(Some(50)),
        ..BudgetsPatch::default()
    });
    save_settings(&gateway, &settings).await?;
    let host = pulse_test_support::agent::host_id("budget");
    {
        let tx = gateway
            .db
            .store()
            .tenant_tx(&TenantId::default_tenant())
            .await?;
        let observed: Vec<ObservedResource> =
            ["web", "db"].iter().map(|s| service_resource(s)).collect();
        seed::report(&tx, &host, "e2e", 10_000, &observed).await?;
        tx.commit().await?;
    }
    let runner = TestModelRunner::start(&gateway, &dir.join("runner"), &[]).await?;

    // Nothing spent yet: the budget check passes and the run is accepted.
    let before = status(&gateway).await?;
    assert_eq!(
        budget_check(&before).map(|c| c.status),
        Some(CheckStatus::Pass),
        "{before:?}"
    );
    let started = Utc::now();
    let run_id = patrol::request_run(&gateway, &RawRunRequest::default()).await?;
    let run = patrol::terminal_run(&gateway, run_id, RUN_DEADLINE)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(60)))?;

    // The first call crossed the budget: its turn finished, the next call was never sent.
    assert_eq!(run.status, RunStatus::Error, "{run:?}");
    assert_eq!(run.error_cause, Some(ErrorCause::BudgetExceeded), "{run:?}");
    assert_eq!(run.turns, 1, "{run:?}");
    assert!(run.input_tokens > 50, "{run:?}");
    assert_eq!(run_requests(&sim), 1, "one provider request for the run");
    let resets = reset_times(started);
    let detail = run.error_detail.as_deref().unwrap_or_default();
    assert!(
        resets
            .iter()
            .any(|r| detail.contains(&r.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))),
        "{run:?}"
    );
    assert!(detail.contains("budgets.daily_tokens"), "{run:?}");
    // The diligent model's first call (a read) ran in the finished turn.
    assert_eq!(run.tool_calls.len(), 1, "{run:?}");

    // Status shows the block, its cause and when it lifts.
    let blocked = status(&gateway).await?;
    assert_eq!(blocked.runtime_state, RuntimeState::Blocked, "{blocked:?}");
    assert_eq!(
        blocked.blocked_cause,
        Some(BlockedCause::BudgetExceeded),
        "{blocked:?}"
    );
    let until = blocked.blocked_until.expect("blocked_until is set");
    assert!(resets.contains(&until), "{blocked:?}");
    let check = budget_check(&blocked).expect("a budget check");
    assert_eq!(check.status, CheckStatus::Fail, "{blocked:?}");
    assert_eq!(
        check.cause,
        Some(BlockedCause::BudgetExceeded),
        "{blocked:?}"
    );
    assert_eq!(check.resets_at, Some(until), "{blocked:?}");
    assert!(
        blocked
            .blocked_reason
            .as_deref()
            .is_some_and(|r| r.contains("wait for the reset or raise budgets.daily_tokens")),
        "{blocked:?}"
    );

    // A new run does not start: refused before it is recorded, nothing sent.
    let (code, refused) = gateway
        .admin_json(Method::POST, "/api/ai/patrol/run", None)
        .await?;
    assert_eq!(code, 409, "{refused}");
    assert_eq!(refused["error"], "patrol_not_ready", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("budget_exceeded")),
        "{refused}"
    );
    let runs = gateway.client()?.patrol_runs(None).await?.runs;
    assert_eq!(runs.len(), 1, "only the stopped run is recorded: {runs:?}");
    assert_eq!(run_requests(&sim), 1);

    // Raising the budget lets runs start again.
    let mut settings = openai_route("sim:diligent", KEY, &sim.openai_base_url());
    settings.budgets = Some(BudgetsPatch {
        daily_tokens: Some(None),
        ..BudgetsPatch::default()
    });
    save_settings(&gateway, &settings).await?;
    let again = status(&gateway).await?;
    assert_eq!(again.blocked_cause, None, "{again:?}");
    assert_eq!(
        budget_check(&again).map(|c| c.status),
        Some(CheckStatus::Pass),
        "{again:?}"
    );
    let run_id = patrol::request_run(&gateway, &RawRunRequest::default()).await?;
    let run = patrol::terminal_run(&gateway, run_id, RUN_DEADLINE).await?;
    assert_ne!(run.error_cause, Some(ErrorCause::BudgetExceeded), "{run:?}");
    assert!(run_requests(&sim) > 2, "the diligent run made its calls");

    runner.stop().await?;
    scheduler.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    gateway.stop().await
}

#[tokio::test]
async fn a_queued_run_whose_budget_ran_out_before_it_started_ends_budget_exceeded_without_a_call()
-> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gateway = TestGateway::start().await?;
    let dir = scratch_dir("budgets-queued")?;
    let scheduler = TestScheduler::start(&gateway, &dir.join("scheduler"), &[]).await?;
    let sim =
        ProviderSim::start(Script::turns([]).with_tool_offer_reply(preflight_reply())).await?;
    let mut settings = openai_route("sim:diligent", KEY, &sim.openai_base_url());
    settings.budgets = Some(BudgetsPatch {
        monthly_tokens: Some(Some(1000)),
        ..BudgetsPatch::default()
    });
    save_settings(&gateway, &settings).await?;
    let host = pulse_test_support::agent::host_id("budget-queued");
    let tenant = TenantId::default_tenant();
    let tx = gateway.db.store().tenant_tx(&tenant).await?;
    seed::report(&tx, &host, "e2e", 10_000, &[service_resource("web")]).await?;
    tx.commit().await?;

    // Accepted while the budget has room; no runner yet, so it waits queued.
    let run_id = patrol::request_run(&gateway, &RawRunRequest::default()).await?;
    // Meanwhile other work of the tenant spends the month's budget.
    let tx = gateway.db.store().tenant_tx(&tenant).await?;
    tx.client()
        .execute(
            "INSERT INTO cost_ledger (id, tenant_id, occurred_at, surface, route, provider, model, \
             route_class, input_tokens, output_tokens, cost_usd, price_known) \
             VALUES ($1, $2, now(), 'patrol_investigation', 'openai:sim:diligent', 'openai', \
             'sim:diligent', 'metered_api', 900, 200, NULL, false)",
            &[&uuid::Uuid::now_v7(), &tenant.as_str()],
        )
        .await?;
    tx.commit().await?;

    let started = Utc::now();
    let runner = TestModelRunner::start(&gateway, &dir.join("runner"), &[]).await?;
    let run = patrol::terminal_run(&gateway, run_id, RUN_DEADLINE)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(60)))?;
    assert_eq!(run.status, RunStatus::Error, "{run:?}");
    assert_eq!(run.error_cause, Some(ErrorCause::BudgetExceeded), "{run:?}");
    let reset = BudgetPeriod::Month.window(started).reset_at;
    let detail = run.error_detail.as_deref().unwrap_or_default();
    assert!(
        detail.contains(&reset.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            || BudgetPeriod::Month.window(Utc::now()).reset_at != reset,
        "{run:?}"
    );
    assert!(detail.contains("budgets.monthly_tokens"), "{run:?}");
    assert_eq!(run_requests(&sim), 0, "no provider request for the run");

    runner.stop().await?;
    scheduler.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    gateway.stop().await
}
