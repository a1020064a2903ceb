//! The cost API through the real gateway binary, over cost-ledger rows written in its database
//! as the model-runner writes them (one per provider call, priced by the price table or with an
//! unknown price):
//!
//! - `GET /api/ai/cost/summary?days=N`: totals, per route, per UTC day and per Patrol run equal
//!   the ledger rows exactly; an unknown price stays unknown (`cost_usd` null,
//!   `price_known: false`), never zero; rows outside the window are left out;
//! - `GET /api/ai/cost/export?days=N`: `text/csv` that a CSV parser reads back to the same
//!   numbers, with hostile text (quotes, commas, line breaks, formula starts) kept intact but
//!   defused with a leading `'`;
//! - another tenant's calls never appear; `days` outside 1..=365 is `400 invalid_parameter`.

use chrono::{DateTime, Duration, Utc};
use pulse_domain::usd::Usd;
use pulse_domain::{Scope, TenantId};
use pulse_store::{TenantTx, tenants};
use pulse_test_support::action_api::{error_code, get, user_token};
use pulse_test_support::service::TestGateway;
use reqwest::StatusCode;
use serde_json::Value;

/// One ledger row: `cost` `None` is a metered call of unknown price.
#[allow(clippy::too_many_arguments)]
async fn call(
    tx: &TenantTx,
    at: DateTime<Utc>,
    surface: &str,
    provider: &str,
    model: &str,
    input: i64,
    output: i64,
    cost: Option<&str>,
    run_id: Option<&str>,
) -> anyhow::Result<()> {
    tx.client()
        .execute(
            "INSERT INTO cost_ledger (id, tenant_id, occurred_at, surface, route, provider, model, \
             route_class, input_tokens, output_tokens, cost_usd, price_known, run_id) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'metered_api', $8, $9, $10::text::numeric, $11, \
             $12)",
            &[
                &uuid::Uuid::now_v7(),
                &tx.tenant().as_str(),
                &at,
                &surface,
                &format!("{provider}:{model}"),
                &provider,
                &model,
                &input,
                &output,
                &cost,
                &cost.is_some(),
                &run_id,
            ],
        )
        .await?;
    Ok(())
}

fn usd(value: &Value) -> Usd {
    value
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a dollar amount: {value}"))
}

fn find<'a>(items: &'a Value, key: &str, value: &str) -> &'a Value {
    items
        .as_array()
        .and_then(|a| a.iter().find(|i| i[key] == value))
        .unwrap_or_else(|| panic!("no {key} = {value} in {items}"))
}

const HOSTILE_MODEL: &str = "=HYPERLINK(\"http://x\",\"y\"),\nnext";
const HOSTILE_SURFACE: &str = "@sum";

#[tokio::test]
async fn cost_summary_and_export_match_the_ledger_and_keep_unknown_prices_unknown()
-> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gw = TestGateway::start().await?;
    let store = gw.db.store();
    let tenant = TenantId::default_tenant();
    let reader = user_token(store, &tenant, None, &[Scope::MonitoringRead]).await?;
    let globex = TenantId::new("globex")?;
    tenants::create(store, &globex, "Globex").await?;
    let outsider = user_token(store, &globex, None, &[Scope::MonitoringRead]).await?;

    let now = Utc::now();
    let today = now.date_naive();
    // Noon of today and of yesterday, so the UTC day of each row is known.
    let noon = |days_ago: i64| {
        (today - Duration::days(days_ago))
            .and_hms_opt(12, 0, 0)
            .unwrap()
            .and_utc()
    };
    let run = "0193a000-0000-7000-8000-000000000001";
    let tx = store.tenant_tx(&tenant).await?;
    // Yesterday: one Patrol run on two routes, one of them unpriced.
    call(
        &tx,
        noon(1),
        "patrol",
        "openai",
        "gpt-4.1-mini",
        1000,
        200,
        Some("0.000720"),
        Some(run),
    )
    .await?;
    call(
        &tx,
        noon(1),
        "patrol",
        "openai",
        "gpt-4.1-mini",
        3000,
        100,
        Some("0.001360"),
        Some(run),
    )
    .await?;
    call(
        &tx,
        noon(1),
        "patrol",
        "openrouter",
        "mystery-model",
        500,
        50,
        None,
        Some(run),
    )
    .await?;
    // Today: a chat call outside any run, and a hostile model name.
    let earlier_today = now - Duration::seconds(1);
    call(
        &tx,
        earlier_today,
        "chat",
        "openai",
        "gpt-4.1-mini",
        10,
        5,
        Some("0.000012"),
        None,
    )
    .await?;
    call(
        &tx,
        earlier_today,
        HOSTILE_SURFACE,
        "openai",
        HOSTILE_MODEL,
        7,
        3,
        Some("0.5"),
        None,
    )
    .await?;
    // 40 days ago: outside the default window.
    call(
        &tx,
        noon(40),
        "patrol",
        "openai",
        "gpt-4.1-mini",
        99_999,
        1,
        Some("9"),
        None,
    )
    .await?;
    tx.commit().await?;
    // Another tenant's calls on the same route.
    let tx = store.tenant_tx(&globex).await?;
    call(
        &tx,
        noon(1),
        "patrol",
        "openai",
        "gpt-4.1-mini",
        5555,
        555,
        Some("1.25"),
        None,
    )
    .await?;
    tx.commit().await?;

    let (status, summary) = get(&gw, "/api/ai/cost/summary", &reader).await?;
    assert_eq!(status, StatusCode::OK, "{summary}");
    assert_eq!(summary["days"], 30, "{summary}");
    let totals = &summary["totals"];
    assert_eq!(totals["calls"], 5, "{summary}");
    assert_eq!(
        totals["input_tokens"],
        1000 + 3000 + 500 + 10 + 7,
        "{summary}"
    );
    assert_eq!(totals["output_tokens"], 200 + 100 + 50 + 5 + 3, "{summary}");
    // One call has no price: the total is unknown, not zero, and the known part is exact.
    assert_eq!(totals["cost_usd"], Value::Null, "{summary}");
    assert_eq!(totals["price_known"], false, "{summary}");
    assert_eq!(totals["unknown_price_calls"], 1, "{summary}");
    assert_eq!(
        usd(&totals["known_cost_usd"]),
        "0.502092".parse::<Usd>()?,
        "{summary}"
    );

    // Per route.
    let mini = find(&summary["by_route"], "route", "openai:gpt-4.1-mini");
    assert_eq!(mini["calls"], 3, "{mini}");
    assert_eq!(mini["price_known"], true, "{mini}");
    assert_eq!(usd(&mini["cost_usd"]), "0.002092".parse::<Usd>()?, "{mini}");
    let mystery = find(&summary["by_route"], "route", "openrouter:mystery-model");
    assert_eq!(mystery["cost_usd"], Value::Null, "{mystery}");
    assert_eq!(mystery["price_known"], false, "{mystery}");
    assert_eq!(mystery["input_tokens"], 500, "{mystery}");
    let hostile = find(&summary["by_route"], "model", HOSTILE_MODEL);
    assert_eq!(
        usd(&hostile["cost_usd"]),
        "0.5".parse::<Usd>()?,
        "{hostile}"
    );

    // Per day: yesterday's run and today's calls.
    let yesterday = find(
        &summary["by_day"],
        "date",
        &(today - Duration::days(1)).to_string(),
    );
    assert_eq!(yesterday["calls"], 3, "{yesterday}");
    assert_eq!(yesterday["cost_usd"], Value::Null, "{yesterday}");
    assert_eq!(yesterday["routes"].as_array().map(Vec::len), Some(2));
    let today_view = find(&summary["by_day"], "date", &today.to_string());
    assert_eq!(today_view["calls"], 2, "{today_view}");
    assert_eq!(
        usd(&today_view["cost_usd"]),
        "0.500012".parse::<Usd>()?,
        "{today_view}"
    );
    assert_eq!(summary["by_day"].as_array().map(Vec::len), Some(2));

    // Per run.
    let runs = summary["by_run"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{summary}");
    assert_eq!(runs[0]["run_id"], run);
    assert_eq!(runs[0]["calls"], 3);
    assert_eq!(runs[0]["input_tokens"], 4500);
    assert_eq!(runs[0]["cost_usd"], Value::Null);
    assert_eq!(usd(&runs[0]["known_cost_usd"]), "0.00208".parse::<Usd>()?);
    let run_mini = find(&runs[0]["routes"], "route", "openai:gpt-4.1-mini");
    assert_eq!(usd(&run_mini["cost_usd"]), "0.00208".parse::<Usd>()?);

    // A wider window takes in the old row.
    let (status, wide) = get(&gw, "/api/ai/cost/summary?days=60", &reader).await?;
    assert_eq!(status, StatusCode::OK, "{wide}");
    assert_eq!(wide["totals"]["calls"], 6, "{wide}");
    assert_eq!(wide["totals"]["input_tokens"], 4517 + 99_999, "{wide}");
    let (_, narrow) = get(&gw, "/api/ai/cost/summary?days=1", &reader).await?;
    assert_eq!(narrow["totals"]["calls"], 2, "{narrow}");

    // The other tenant sees only its own call.
    let (status, theirs) = get(&gw, "/api/ai/cost/summary", &outsider).await?;
    assert_eq!(status, StatusCode::OK, "{theirs}");
    assert_eq!(theirs["totals"]["calls"], 1, "{theirs}");
    assert_eq!(theirs["totals"]["input_tokens"], 5555, "{theirs}");
    assert_eq!(usd(&theirs["totals"]["cost_usd"]), "1.25".parse::<Usd>()?);
    assert_eq!(theirs["by_run"], serde_json::json!([]), "{theirs}");

    // Out-of-range windows are refused with a stable code, for both routes.
    for path in ["/api/ai/cost/summary", "/api/ai/cost/export"] {
        for days in ["0", "366", "-3", "week", "1.5"] {
            let (status, body) = get(&gw, &format!("{path}?days={days}"), &reader).await?;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {days}: {body}");
            assert_eq!(error_code(&body), "invalid_parameter", "{body}");
            assert!(
                body["message"].as_str().is_some_and(|m| m.contains("days")),
                "{body}"
            );
        }
        let (status, body) = get(&gw, &format!("{path}?dayz=3"), &reader).await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(error_code(&body), "invalid_parameter", "{body}");
    }
    // Reading costs needs a token.
    let response = gw.http.get(gw.url("/api/ai/cost/summary")).send().await?;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    // The export.
    let response = gw
        .http
        .get(gw.url("/api/ai/cost/export?days=30"))
        .bearer_auth(&reader)
        .send()
        .await?;
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(content_type.starts_with("text/csv"), "{content_type}");
    let text = response.text().await?;
    let mut reader_csv = csv::ReaderBuilder::new().from_reader(text.as_bytes());
    let header: Vec<String> = reader_csv.headers()?.iter().map(str::to_owned).collect();
    assert_eq!(
        header,
        [
            "date",
            "run_id",
            "surface",
            "route",
            "provider",
            "model",
            "route_class",
            "calls",
            "input_tokens",
            "output_tokens",
            "cost_usd",
            "price_known",
            "known_cost_usd",
            "unknown_price_calls"
        ]
    );
    let rows: Vec<csv::StringRecord> = reader_csv.records().collect::<Result<_, _>>()?;
    // Yesterday's run: one line per route; today: chat and the hostile surface.
    assert_eq!(rows.len(), 4, "{text}");
    let col = |name: &str| header.iter().position(|h| h == name).expect("column");
    let mut calls = 0;
    let mut input = 0;
    let mut known = Usd::ZERO;
    for row in &rows {
        calls += row[col("calls")].parse::<u64>()?;
        input += row[col("input_tokens")].parse::<u64>()?;
        known = known.saturating_add(row[col("known_cost_usd")].parse()?);
        if row[col("price_known")] == *"false" {
            assert_eq!(
                &row[col("cost_usd")],
                "",
                "an unknown price is an empty cell"
            );
            assert_eq!(&row[col("model")], "mystery-model");
        } else {
            assert_eq!(row[col("cost_usd")], row[col("known_cost_usd")]);
        }
    }
    assert_eq!(calls, 5);
    assert_eq!(input, 4517);
    assert_eq!(known, "0.502092".parse::<Usd>()?);
    // Hostile text survives intact, defused with a leading quote.
    let hostile = rows
        .iter()
        .find(|r| r[col("surface")].contains("sum"))
        .expect("hostile row");
    assert_eq!(&hostile[col("surface")], format!("'{HOSTILE_SURFACE}"));
    assert_eq!(&hostile[col("model")], format!("'{HOSTILE_MODEL}"));
    assert_eq!(&hostile[col("route")], format!("openai:{HOSTILE_MODEL}"));
    assert!(!text.contains("globex") && !text.contains("5555"), "{text}");

    // The other tenant's export holds only its own row.
    let theirs = gw
        .http
        .get(gw.url("/api/ai/cost/export"))
        .bearer_auth(&outsider)
        .send()
        .await?
        .text()
        .await?;
    let mut theirs_csv = csv::Reader::from_reader(theirs.as_bytes());
    let their_rows: Vec<csv::StringRecord> = theirs_csv.records().collect::<Result<_, _>>()?;
    assert_eq!(their_rows.len(), 1, "{theirs}");
    assert_eq!(&their_rows[0][col("input_tokens")], "5555");
    gw.stop().await
}
