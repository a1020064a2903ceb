//! Admission under the tenant spend budgets, over the real Postgres: the one accept path (manual,
//! alert-triggered and scheduled runs all go through it) refuses a run of a tenant whose budget
//! is used up, before anything is written, with the cause `budget_exceeded`, the reset time and
//! what to do; another tenant is not affected; raising the budget lets runs in again.

use chrono::Utc;
use pulse_bus::ErrorCode;
use pulse_bus::Subjects;
use pulse_domain::TenantId;
use pulse_domain::patrol::budget::BudgetPeriod;
use pulse_domain::patrol::run::TriggerReason;
use pulse_domain::patrol::status::BlockedCause;
use pulse_domain::usd::Usd;
use pulse_patrol_scheduler::accept::{AcceptError, RunAcceptor, Submission};
use pulse_providers::Usage;
use pulse_providers::registry::RouteClass;
use pulse_store::cost_ledger::{self, LedgerCall};
use pulse_store::settings::{self, ConfigLayer};
use pulse_store::{TenantTx, patrol_runs, tenants};
use pulse_test_support::db::TestDb;
use serde_json::json;

fn full() -> Submission<'static> {
    Submission {
        trigger: TriggerReason::Scheduled,
        scope: None,
        requested_by: None,
    }
}

/// One local-model call of `tokens` prompt tokens, recorded now.
async fn spent_tokens(tx: &TenantTx, tokens: u64) -> anyhow::Result<()> {
    cost_ledger::record(
        tx,
        &LedgerCall {
            occurred_at: Utc::now(),
            surface: "patrol",
            route: "ollama:llama3.2",
            provider: "ollama",
            model: "llama3.2",
            route_class: RouteClass::LocalModelServer,
            usage: Usage::new(tokens, 0),
            cost_usd: Some(Usd::ZERO),
            run_id: None,
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_used_up_budget_refuses_the_run_before_anything_is_written() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    let globex = TenantId::new("globex")?;
    tenants::create(db.store(), &acme, "Acme").await?;
    tenants::create(db.store(), &globex, "Globex").await?;
    let acceptor = RunAcceptor::new(db.store().clone(), Subjects::new(None))
        .with_readiness_gate(ConfigLayer::default());
    let document = json!({
        "patrol_model": "ollama:llama3.2",
        "budgets": {"daily_tokens": 1000}
    });
    for tenant in [&acme, &globex] {
        let tx = db.store().tenant_tx(tenant).await?;
        settings::put(&tx, 0, &document, "t").await?;
        tx.commit().await?;
    }
    let tx = db.store().tenant_tx(&acme).await?;
    spent_tokens(&tx, 1_200).await?;
    tx.commit().await?;

    let before = Utc::now();
    let tx = db.store().tenant_tx(&acme).await?;
    let err = acceptor.accept(tx, full()).await.unwrap_err();
    let AcceptError::NotReady(blocked) = &err else {
        panic!("expected NotReady, got {err:?}");
    };
    assert_eq!(blocked.cause, BlockedCause::BudgetExceeded);
    let resets = [
        BudgetPeriod::Day.window(before).reset_at,
        BudgetPeriod::Day.window(Utc::now()).reset_at,
    ];
    assert!(
        blocked.resets_at.is_some_and(|r| resets.contains(&r)),
        "{blocked:?}"
    );
    let reply = serde_json::to_value(pulse_bus::ErrorReply::from(err))?;
    assert_eq!(reply["code"], ErrorCode::PatrolNotReady.code());
    let message = reply["message"].as_str().unwrap_or_default();
    assert!(message.contains("cause budget_exceeded"), "{message}");
    assert!(message.contains("1200 of 1000 tokens"), "{message}");
    assert!(message.contains("raise budgets.daily_tokens"), "{message}");
    let tx = db.store().tenant_tx(&acme).await?;
    assert!(patrol_runs::list(&tx, 10).await?.is_empty());
    tx.rollback().await?;

    // The other tenant's budget is its own.
    let tx = db.store().tenant_tx(&globex).await?;
    acceptor.accept(tx, full()).await?;

    // Raising the budget lets runs in again.
    let tx = db.store().tenant_tx(&acme).await?;
    let raised = json!({"patrol_model": "ollama:llama3.2", "budgets": {"daily_tokens": 5000}});
    settings::put(&tx, 1, &raised, "t").await?;
    tx.commit().await?;
    let tx = db.store().tenant_tx(&acme).await?;
    acceptor.accept(tx, full()).await?;
    db.cleanup().await?;
    Ok(())
}
