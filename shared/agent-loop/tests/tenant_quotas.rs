//! The platform operator's daily token and dollar quotas stop a tenant's next provider call at
//! the same check as its own spend budgets (real Postgres), and never the other tenant's.

use chrono::Utc;
use pulse_agent_loop::cost::{self, LedgerEntry, TenantBudgetCheck};
use pulse_agent_loop::provider::Usage;
use pulse_agent_loop::registry::RouteClass;
use pulse_agent_loop::route::Route;
use pulse_domain::TenantId;
use pulse_domain::tenant::TenantQuotas;
use pulse_store::{quotas, tenants};
use pulse_test_support::db::TestDb;

/// One local-model call of `tokens` prompt tokens, recorded now through the ledger writer.
async fn spend_tokens(db: &TestDb, tenant: &TenantId, tokens: u64) -> anyhow::Result<()> {
    let route = Route::parse("ollama:llama3.2").expect("route");
    let tx = db.store().tenant_tx(tenant).await?;
    cost::record(
        &tx,
        &LedgerEntry::new("patrol", &route, Usage::new(tokens, 0)),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

#[tokio::test]
async fn a_daily_token_quota_refuses_the_next_call_of_its_tenant_only() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    let globex = TenantId::new("globex")?;
    tenants::create(db.store(), &acme, "Acme").await?;
    tenants::create(db.store(), &globex, "Globex").await?;
    let route = Route::parse("ollama:llama3.2").expect("route");
    let class = RouteClass::LocalModelServer;
    for tenant in [&acme, &globex] {
        spend_tokens(&db, tenant, 1_000).await?;
        let tx = db.store().tenant_tx(tenant).await?;
        quotas::set(
            &tx,
            &TenantQuotas {
                tokens_per_day: Some(if *tenant == acme { 1_000 } else { 50_000 }),
                ..TenantQuotas::default()
            },
        )
        .await?;
        tx.commit().await?;
    }
    let refused = TenantBudgetCheck::new(db.store().clone(), acme.clone())
        .admit(&route, class, Utc::now())
        .await;
    assert!(
        refused.is_err(),
        "acme's token quota did not refuse the call"
    );
    let message = refused.unwrap_err().to_string();
    assert!(
        message.contains("1000") || message.contains("1,000"),
        "{message}"
    );
    TenantBudgetCheck::new(db.store().clone(), globex.clone())
        .admit(&route, class, Utc::now())
        .await?;
    // Without the quota the same spend is admitted.
    let tx = db.store().tenant_tx(&acme).await?;
    quotas::set(&tx, &TenantQuotas::default()).await?;
    tx.commit().await?;
    TenantBudgetCheck::new(db.store().clone(), acme)
        .admit(&route, class, Utc::now())
        .await?;
    db.cleanup().await
}
