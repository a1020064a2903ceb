//! Cost-ledger sums for the spend budgets over the real Postgres: per tenant, per UTC day and
//! month, boundaries included in the new period, other tenants never counted; and the readiness
//! gate's `budget` check fed by them.

use chrono::{DateTime, TimeZone, Utc};
use pulse_domain::TenantId;
use pulse_domain::patrol::budget::{PeriodSpend, Spend};
use pulse_domain::patrol::status::{BlockedCause, ReadinessCheckId};
use pulse_domain::usd::Usd;
use pulse_providers::Usage;
use pulse_providers::registry::RouteClass;
use pulse_store::cost_ledger::LedgerCall;
use pulse_store::settings::{self, ConfigLayer};
use pulse_store::{TenantTx, cost_ledger, patrol_readiness, tenants};
use pulse_test_support::db::TestDb;
use serde_json::json;

fn at(y: i32, m: u32, d: u32, h: u32, min: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, m, d, h, min, s).unwrap()
}

/// One provider call as the model-runner records it; `cost` `None`: a metered call of unknown
/// price.
async fn call(
    tx: &TenantTx,
    occurred_at: DateTime<Utc>,
    input: u64,
    output: u64,
    cost: Option<&str>,
) -> anyhow::Result<()> {
    let cost_usd = cost.map(str::parse::<Usd>).transpose()?;
    cost_ledger::record(
        tx,
        &LedgerCall {
            occurred_at,
            surface: "patrol",
            route: "openai:gpt-4o-mini",
            provider: "openai",
            model: "gpt-4o-mini",
            route_class: RouteClass::MeteredApi,
            usage: Usage::new(input, output),
            cost_usd,
            run_id: None,
        },
    )
    .await?;
    Ok(())
}

fn spend(tokens: u64, known: &str, unknown: u64) -> PeriodSpend {
    PeriodSpend {
        tokens,
        dollars: Spend {
            known: known.parse::<Usd>().unwrap(),
            unknown_price_calls: unknown,
        },
    }
}

#[tokio::test]
async fn ledger_sums_per_tenant_per_utc_day_and_month() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    let globex = TenantId::new("globex")?;
    tenants::create(db.store(), &acme, "Acme").await?;
    tenants::create(db.store(), &globex, "Globex").await?;

    let tx = db.store().tenant_tx(&acme).await?;
    // Last month, the last second before the boundary.
    call(&tx, at(2026, 11, 30, 23, 59, 59), 1_000, 1_000, Some("1")).await?;
    // This month, an earlier day.
    call(&tx, at(2026, 12, 1, 0, 0, 0), 100, 20, Some("0.25")).await?;
    // Today (2026-12-15): at the boundary itself, and later, one of unknown price.
    call(&tx, at(2026, 12, 15, 0, 0, 0), 10, 5, Some("0.000001")).await?;
    call(&tx, at(2026, 12, 15, 22, 0, 0), 7, 3, None).await?;
    // Tomorrow: not in today's window.
    call(&tx, at(2026, 12, 16, 0, 0, 0), 40_000, 0, Some("5")).await?;
    tx.commit().await?;
    let tx = db.store().tenant_tx(&globex).await?;
    call(&tx, at(2026, 12, 15, 12, 0, 0), 99_999, 1, Some("99")).await?;
    tx.commit().await?;

    let tx = db.store().tenant_tx(&acme).await?;
    let now = at(2026, 12, 15, 23, 59, 59);
    let totals = cost_ledger::tenant_spend(&tx, now).await?;
    assert_eq!(totals.day, spend(25, "0.000001", 1));
    assert_eq!(totals.month, spend(40_145, "5.250001", 1));
    // On the first of the next month both periods start empty.
    let next_month = cost_ledger::tenant_spend(&tx, at(2027, 1, 1, 0, 0, 0)).await?;
    assert_eq!(next_month.day, PeriodSpend::default());
    assert_eq!(next_month.month, PeriodSpend::default());
    // Last month on its own.
    let november = cost_ledger::tenant_spend(&tx, at(2026, 11, 30, 12, 0, 0)).await?;
    assert_eq!(november.day, spend(2_000, "1", 0));
    assert_eq!(november.month, spend(2_000, "1", 0));
    tx.rollback().await?;

    // The other tenant sees only its own call.
    let tx = db.store().tenant_tx(&globex).await?;
    let theirs = cost_ledger::tenant_spend(&tx, now).await?;
    assert_eq!(theirs.day, spend(100_000, "99", 0));
    assert_eq!(theirs.month, spend(100_000, "99", 0));
    tx.rollback().await?;
    db.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn the_readiness_gate_blocks_a_tenant_whose_budget_is_used_up() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    let globex = TenantId::new("globex")?;
    tenants::create(db.store(), &acme, "Acme").await?;
    tenants::create(db.store(), &globex, "Globex").await?;
    let config = ConfigLayer {
        environment_keys: ["ollama".to_owned()].into(),
        ..ConfigLayer::default()
    };
    let document = json!({
        "patrol_model": "ollama:llama3.2",
        "budgets": {"daily_tokens": 100}
    });
    let now = Utc::now();
    for tenant in [&acme, &globex] {
        let tx = db.store().tenant_tx(tenant).await?;
        settings::put(&tx, 0, &document, "t").await?;
        tx.commit().await?;
    }
    let tx = db.store().tenant_tx(&acme).await?;
    assert!(patrol_readiness::gate(&tx, &config, now).await?.is_ok());
    call(&tx, now, 60, 40, Some("0.001")).await?;
    tx.commit().await?;

    let tx = db.store().tenant_tx(&acme).await?;
    let blocked = patrol_readiness::gate(&tx, &config, now)
        .await?
        .expect_err("the daily token budget is used up");
    assert_eq!(blocked.check, ReadinessCheckId::Budget);
    assert_eq!(blocked.cause, BlockedCause::BudgetExceeded);
    let tomorrow = pulse_domain::patrol::budget::BudgetPeriod::Day
        .window(now)
        .reset_at;
    assert_eq!(blocked.resets_at, Some(tomorrow));
    // The next UTC day has room again.
    assert!(
        patrol_readiness::gate(&tx, &config, tomorrow)
            .await?
            .is_ok()
    );
    tx.rollback().await?;
    // Another tenant with the same budget is not blocked by acme's spend.
    let tx = db.store().tenant_tx(&globex).await?;
    assert!(patrol_readiness::gate(&tx, &config, now).await?.is_ok());
    tx.rollback().await?;
    db.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn a_recorded_call_keeps_an_unknown_price_unknown_and_caps_its_cache_counts()
-> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    tenants::create(db.store(), &acme, "Acme").await?;
    let now = Utc::now();
    let base = LedgerCall {
        occurred_at: now,
        surface: "chat",
        route: "openrouter:some/model",
        provider: "openrouter",
        model: "some/model",
        route_class: RouteClass::MeteredApi,
        usage: Usage::new(0, 0),
        cost_usd: None,
        run_id: Some("run-1"),
    };

    let tx = db.store().tenant_tx(&acme).await?;
    // A provider reporting more cached and cache-written tokens than the prompt had.
    let overreported = Usage {
        cached_input_tokens: 150,
        cache_write_input_tokens: 70,
        ..Usage::new(100, 5)
    };
    let capped = cost_ledger::record(
        &tx,
        &LedgerCall {
            usage: overreported,
            ..base.clone()
        },
    )
    .await?;
    let split = Usage {
        cached_input_tokens: 60,
        cache_write_input_tokens: 70,
        ..Usage::new(100, 5)
    };
    let partly = cost_ledger::record(
        &tx,
        &LedgerCall {
            usage: split,
            cost_usd: Some("0.5".parse()?),
            ..base.clone()
        },
    )
    .await?;
    // A count the table cannot hold is refused, not wrapped.
    let too_many = cost_ledger::record(
        &tx,
        &LedgerCall {
            usage: Usage::new(u64::MAX, 0),
            ..base.clone()
        },
    )
    .await;
    assert!(
        matches!(&too_many, Err(pulse_store::StoreError::Invalid(m)) if m.contains("does not fit")),
        "{too_many:?}"
    );
    tx.commit().await?;

    let tx = db.store().tenant_tx(&acme).await?;
    let stored = |id: uuid::Uuid| {
        let tx = &tx;
        async move {
            let row = tx
                .client()
                .query_one(
                    "SELECT cached_input_tokens, cache_write_input_tokens, cost_usd::text, \
                     price_known FROM cost_ledger WHERE id = $1",
                    &[&id],
                )
                .await?;
            anyhow::Ok((
                row.get::<_, i64>(0),
                row.get::<_, i64>(1),
                row.get::<_, Option<String>>(2),
                row.get::<_, bool>(3),
            ))
        }
    };
    assert_eq!(stored(capped).await?, (100, 0, None, false));
    assert_eq!(
        stored(partly).await?,
        (60, 40, Some("0.500000000000".to_owned()), true)
    );
    let totals = cost_ledger::run_totals(&tx, "run-1").await?;
    assert_eq!(totals.calls, 2);
    assert_eq!(totals.unknown_price_calls, 1);
    assert_eq!(
        totals.cost_usd(),
        None,
        "one unknown price leaves the total unknown"
    );
    tx.rollback().await?;
    db.cleanup().await?;
    Ok(())
}
