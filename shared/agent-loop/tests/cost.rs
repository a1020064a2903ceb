//! Pricing, dollar budgets and the Postgres cost ledger (real database, row-level security).

use chrono::{TimeZone as _, Utc};
use pulse_agent_loop::cost::{
    self, BudgetDecision, Cost, DollarBudget, LedgerEntry, RefusalReason, Spend, Usd,
};
use pulse_agent_loop::pricing;
use pulse_agent_loop::provider::Usage;
use pulse_agent_loop::registry::RouteClass;
use pulse_agent_loop::route::Route;
use pulse_domain::TenantId;
use pulse_store::{cost_ledger, tenants};
use pulse_test_support::db::TestDb;

fn route(text: &str) -> Route {
    Route::parse(text).expect("valid route")
}

fn usage(input: u64, output: u64) -> Usage {
    Usage::new(input, output)
}

fn usd(text: &str) -> Usd {
    text.parse().expect("dollar amount")
}

#[test]
fn known_price_is_exact() {
    // gpt-4o: USD 2.50 per million input, 10.00 per million output.
    let cost = cost::cost_for(&route("openai:gpt-4o"), usage(104_528, 4_491));
    // 104528 * 2.5e-6 + 4491 * 10e-6 = 0.26132 + 0.04491
    assert_eq!(cost, Cost::Known(usd("0.30623")));
    assert_eq!(
        cost.amount().map(|u| u.to_string()),
        Some("0.306230000000".into())
    );

    let one_token = cost::cost_for(&route("openai:gpt-4o-mini"), usage(1, 0));
    assert_eq!(one_token, Cost::Known(Usd::from_picos(150_000)));
}

#[test]
fn unknown_metered_model_is_unknown_never_zero() {
    for text in [
        "openai:gpt-4o-2099-preview",
        "openrouter:openai/gpt-4o",
        "deepseek:deepseek-v4-flash",
        "litellm:gpt-4o",
    ] {
        let cost = cost::cost_for(&route(text), usage(1000, 100));
        assert_eq!(cost, Cost::Unknown, "{text}");
        assert_eq!(cost.amount(), None, "{text}");
    }
    assert!(
        pricing::price("openai", "GPT-4O").is_none(),
        "exact rows only"
    );
}

#[test]
fn local_and_plan_routes_are_not_metered() {
    assert_eq!(
        cost::cost_for(&route("ollama:qwen3:8b"), usage(50_000, 2_000)),
        Cost::NotMetered
    );
    assert_eq!(
        cost::cost_for(&route("lmstudio:gpt-4o"), usage(50_000, 2_000)),
        Cost::NotMetered,
        "a local server is not billed whatever the model is called"
    );
    assert_eq!(
        cost::cost_for(&route("zai-coding:glm-5.2"), usage(10, 10)),
        Cost::NotMetered
    );
    assert_eq!(Cost::NotMetered.amount(), Some(Usd::ZERO));
}

#[test]
fn usd_text_round_trips() {
    for text in ["0", "0.5", "12.000000000001", "3.25"] {
        let v = usd(text);
        assert_eq!(usd(&v.to_string()), v, "{text}");
    }
    assert_eq!(usd("0.5").picos(), 500_000_000_000);
    assert!("1.0000000000001".parse::<Usd>().is_err(), "13 decimals");
    assert!("-1".parse::<Usd>().is_err());
    assert!("".parse::<Usd>().is_err());
    assert!("1e3".parse::<Usd>().is_err());
}

#[test]
fn budget_fails_closed_on_unknown_price() {
    let budget = DollarBudget::new(usd("10"));
    let unknown = route("openrouter:some/new-model");
    assert_eq!(
        budget.check(
            &unknown,
            RouteClass::MeteredApi,
            Spend::default(),
            usage(10, 10)
        ),
        BudgetDecision::Refused {
            reason: RefusalReason::UnknownPrice
        }
    );
    assert_eq!(RefusalReason::UnknownPrice.as_str(), "unknown_price");

    let known = route("openai:gpt-4o");
    assert_eq!(
        budget.check(
            &known,
            RouteClass::MeteredApi,
            Spend::default(),
            usage(1000, 100)
        ),
        BudgetDecision::Allowed
    );
    // A known call after spend that could not be priced cannot be shown to fit either.
    let unpriced_spend = Spend {
        known: Usd::ZERO,
        unknown_price_calls: 1,
    };
    assert_eq!(
        budget.check(&known, RouteClass::MeteredApi, unpriced_spend, usage(1, 1)),
        BudgetDecision::Refused {
            reason: RefusalReason::UnknownPrice
        }
    );
    // Over the limit.
    let spent = Spend {
        known: usd("9.999"),
        unknown_price_calls: 0,
    };
    assert_eq!(
        budget.check(&known, RouteClass::MeteredApi, spent, usage(1000, 0)),
        BudgetDecision::Refused {
            reason: RefusalReason::Exceeded
        }
    );
    // Local routes are never refused by a dollar budget.
    assert_eq!(
        budget.check(
            &route("ollama:qwen3:8b"),
            RouteClass::LocalModelServer,
            unpriced_spend,
            usage(1_000_000, 1_000_000)
        ),
        BudgetDecision::Allowed
    );
    assert_eq!(
        serde_json::to_value(BudgetDecision::Refused {
            reason: RefusalReason::UnknownPrice
        })
        .ok(),
        Some(serde_json::json!({"decision": "refused", "reason": "unknown_price"}))
    );
}

/// route, route_class, cost_usd as text, price_known, run_id
type LedgerRow = (String, String, Option<String>, bool, Option<String>);

async fn tenant(db: &TestDb, id: &str) -> anyhow::Result<TenantId> {
    let id = TenantId::new(id)?;
    tenants::create(db.store(), &id, id.as_str()).await?;
    Ok(id)
}

#[tokio::test]
async fn ledger_records_known_unknown_and_local_calls() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let a = tenant(&db, "tenant-a").await?;
    let at = Utc
        .with_ymd_and_hms(2026, 11, 29, 12, 0, 0)
        .single()
        .ok_or_else(|| anyhow::anyhow!("time"))?;
    let (known, unknown, local) = (
        route("openai:gpt-4o"),
        route("openrouter:meta-llama/llama-3-70b"),
        route("ollama:llama3.1:8b"),
    );

    let tx = db.store().tenant_tx(&a).await?;
    for (r, u, run) in [
        (&known, usage(104_528, 4_491), Some("run-1")),
        (&known, usage(1_000, 100), None),
        (&unknown, usage(2_000, 200), Some("run-1")),
        (&local, usage(5_000, 500), None),
    ] {
        let entry = LedgerEntry {
            occurred_at: at,
            run_id: run,
            ..LedgerEntry::new("patrol", r, u)
        };
        cost::record(&tx, &entry).await?;
    }
    tx.commit().await?;

    let tx = db.store().tenant_tx(&a).await?;
    let rows = tx
        .client()
        .query(
            "SELECT route, route_class, cost_usd::text, price_known, run_id \
             FROM cost_ledger ORDER BY route, input_tokens",
            &[],
        )
        .await?;
    let got: Vec<LedgerRow> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "ollama:llama3.1:8b".into(),
                "local_model_server".into(),
                Some("0.000000000000".into()),
                true,
                None
            ),
            (
                "openai:gpt-4o".into(),
                "metered_api".into(),
                Some("0.003500000000".into()),
                true,
                None
            ),
            (
                "openai:gpt-4o".into(),
                "metered_api".into(),
                Some("0.306230000000".into()),
                true,
                Some("run-1".into())
            ),
            (
                "openrouter:meta-llama/llama-3-70b".into(),
                "metered_api".into(),
                None,
                false,
                Some("run-1".into())
            ),
        ]
    );

    let (from, to) = (
        at - chrono::Duration::hours(1),
        at + chrono::Duration::hours(1),
    );
    let window = cost_ledger::summary(&tx, from, to).await?;
    let by_route = |r: &str| window.iter().find(|s| s.route.route == r).cloned();
    let gpt = by_route("openai:gpt-4o").ok_or_else(|| anyhow::anyhow!("gpt-4o row"))?;
    assert_eq!(gpt.totals.calls, 2);
    assert_eq!(gpt.totals.input_tokens, 105_528);
    assert_eq!(gpt.totals.output_tokens, 4_591);
    assert_eq!(gpt.totals.known_cost_usd, usd("0.30973"));
    assert_eq!(gpt.totals.unknown_price_calls, 0);
    let open = by_route("openrouter:meta-llama/llama-3-70b")
        .ok_or_else(|| anyhow::anyhow!("openrouter row"))?;
    assert_eq!(open.totals.unknown_price_calls, 1);
    assert_eq!(open.totals.known_cost_usd, Usd::ZERO);
    assert_eq!(open.totals.input_tokens, 2_000);
    let ollama = by_route("ollama:llama3.1:8b").ok_or_else(|| anyhow::anyhow!("ollama row"))?;
    assert_eq!(
        ollama.route.route_class,
        RouteClass::LocalModelServer.as_str()
    );
    assert_eq!(ollama.totals.unknown_price_calls, 0);

    // The spend a dollar budget checks, as the tenant budget reads it.
    let spent = cost_ledger::period_spend(&tx, from, to).await?.dollars;
    assert_eq!(spent.known, usd("0.30973"));
    assert_eq!(spent.unknown_price_calls, 1);
    // The unpriced OpenRouter call keeps a generous budget from admitting more metered work.
    assert_eq!(
        DollarBudget::new(usd("100")).check(&known, RouteClass::MeteredApi, spent, usage(10, 10)),
        BudgetDecision::Refused {
            reason: RefusalReason::UnknownPrice
        }
    );

    // Outside the window nothing is counted.
    let later = cost_ledger::summary(
        &tx,
        at + chrono::Duration::hours(1),
        at + chrono::Duration::hours(2),
    )
    .await?;
    assert!(later.is_empty());
    Ok(())
}

#[tokio::test]
async fn ledger_rows_are_isolated_per_tenant() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let a = tenant(&db, "tenant-a").await?;
    let b = tenant(&db, "tenant-b").await?;
    let r = route("openai:gpt-4o");

    let tx = db.store().tenant_tx(&b).await?;
    cost::record(&tx, &LedgerEntry::new("chat", &r, usage(10, 10))).await?;
    tx.commit().await?;
    let tx = db.store().tenant_tx(&a).await?;
    cost::record(&tx, &LedgerEntry::new("chat", &r, usage(20, 20))).await?;
    tx.commit().await?;

    let tx = db.store().tenant_tx(&a).await?;
    // Deliberately unfiltered: row-level security is the only filter.
    let tenants_seen: Vec<String> = tx
        .client()
        .query("SELECT tenant_id FROM cost_ledger", &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(tenants_seen, vec!["tenant-a".to_owned()]);
    let now = Utc::now();
    let window = cost_ledger::summary(
        &tx,
        now - chrono::Duration::hours(1),
        now + chrono::Duration::hours(1),
    )
    .await?;
    assert_eq!(window.len(), 1);
    assert_eq!(window[0].totals.input_tokens, 20);

    // Writing a row for another tenant is refused by the policy.
    let forged = tx
        .client()
        .execute(
            "INSERT INTO cost_ledger (id, tenant_id, occurred_at, surface, route, provider, \
             model, route_class, input_tokens, output_tokens, cost_usd, price_known) \
             VALUES (gen_random_uuid(), 'tenant-b', now(), 'chat', 'openai:gpt-4o', 'openai', \
             'gpt-4o', 'metered_api', 1, 1, NULL, false)",
            &[],
        )
        .await;
    assert!(forged.is_err(), "insert for another tenant must be refused");
    drop(tx);

    let tx = db.store().tenant_tx(&b).await?;
    let count: i64 = tx
        .client()
        .query_one("SELECT count(*) FROM cost_ledger", &[])
        .await?
        .get(0);
    assert_eq!(count, 1);
    Ok(())
}

#[test]
fn prices_are_dated_and_rows_are_unique() {
    assert_eq!(pricing::PRICES_AS_OF.len(), 10);
    let mut keys: Vec<(&str, &str)> = pricing::PRICES
        .iter()
        .map(|r| (r.provider, r.model))
        .collect();
    let n = keys.len();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), n);
}
