//! Cost: tokens and dollars per day and per run, by route, from `GET /api/ai/cost/summary`;
//! unknown prices shown as unknown; the CSV export behind a link.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::response::Response;
use chrono::NaiveDate;
use maud::{Markup, html};
use pulse_api::cost::CostQuery;
use serde::Deserialize;
use serde_json::Value;

use super::layout::{self, Nav, raw, text, usd};
use super::session::WebUser;
use super::svg;
use crate::authorized::MonitoringReadScope;
use crate::extract::ApiQuery;
use crate::state::AppState;

/// The windows offered, in days.
const WINDOWS: &[u32] = &[7, 30, 90];

#[derive(Debug, Default, Deserialize)]
pub struct CostPageQuery {
    #[serde(default)]
    days: Option<u32>,
}

/// A totals object's dollars: the amount, or "unknown" when a call had no price (with the known
/// part as a lower bound).
fn dollars(totals: &Value) -> String {
    if totals["price_known"].as_bool() == Some(false) {
        let known = usd(&totals["known_cost_usd"]);
        return format!("unknown (at least {known})");
    }
    usd(&totals["cost_usd"])
}

fn amount(value: &Value) -> f64 {
    value
        .as_f64()
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0.0)
}

fn routes_table(routes: &[Value]) -> Markup {
    html! {
        div class="table-wrap" {
            table {
                thead { tr { th { "Route" } th { "Calls" } th { "Input tokens" } th { "Output tokens" } th { "Cost" } } }
                tbody {
                    @for r in routes {
                        tr {
                            td { code { (text(&r["route"])) } }
                            td { (text(&r["calls"])) }
                            td { (text(&r["input_tokens"])) }
                            td { (text(&r["output_tokens"])) }
                            td { (dollars(r)) }
                        }
                    }
                }
            }
        }
    }
}

pub async fn page(
    State(state): State<AppState>,
    user: WebUser,
    query: Result<Query<CostPageQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let days = query
        .ok()
        .and_then(|Query(q)| q.days)
        .filter(|d| WINDOWS.contains(d))
        .unwrap_or(30);
    let answer = match user.authorized::<MonitoringReadScope>() {
        Ok(auth) => layout::value(
            crate::cost::summary(
                State(state),
                auth,
                ApiQuery::new(CostQuery { days: Some(days) }),
            )
            .await,
        ),
        Err(error) => Err(error),
    };
    let summary = match answer {
        Ok(summary) => summary,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let totals = &summary["totals"];
    // Every day of the window, with nothing spent on the days the ledger has no line for.
    let mut per_day: BTreeMap<NaiveDate, (f64, f64)> = BTreeMap::new();
    if let (Some(from), Some(to)) = (
        summary["from"]
            .as_str()
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok()),
        summary["to"]
            .as_str()
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok()),
    ) {
        let mut day = from.date_naive();
        while day < to.date_naive() {
            per_day.insert(day, (0.0, 0.0));
            day = day.succ_opt().unwrap_or(to.date_naive());
        }
    }
    for day in summary["by_day"].as_array().into_iter().flatten() {
        if let Some(date) = day["date"]
            .as_str()
            .and_then(|s| NaiveDate::parse_from_str(s, "%Y-%m-%d").ok())
        {
            per_day.insert(
                date,
                (amount(&day["known_cost_usd"]), amount(&day["total_tokens"])),
            );
        }
    }
    let label = |d: &NaiveDate| d.format("%m-%d").to_string();
    let dollars_chart = svg::bars(
        "Dollars per day",
        &format!("Known dollars spent on each of the last {days} days"),
        &per_day
            .iter()
            .map(|(d, v)| (label(d), v.0))
            .collect::<Vec<_>>(),
        "$",
    );
    let tokens_chart = svg::bars(
        "Tokens per day",
        &format!("Input and output tokens used on each of the last {days} days"),
        &per_day
            .iter()
            .map(|(d, v)| (label(d), v.1))
            .collect::<Vec<_>>(),
        "",
    );
    let routes = summary["by_route"].as_array().cloned().unwrap_or_default();
    let runs = summary["by_run"].as_array().cloned().unwrap_or_default();
    let body = html! {
        h1 { "Cost" }
        form method="get" action="/cost" class="filters" {
            p {
                label for="days" { "Window" }
                select id="days" name="days" {
                    @for window in WINDOWS {
                        option value=(window) selected[*window == days] { "last " (window) " days" }
                    }
                }
            }
            p { button type="submit" class="secondary" { "Show" } }
            p { a href={"/api/ai/cost/export?days=" (days)} download { "Download CSV" } }
        }
        div id="cost" data-live {
            div class="grid" {
                div class="panel" {
                    h2 { "Total" }
                    dl class="facts" {
                        dt { "Dollars" } dd { (dollars(totals)) }
                        dt { "Tokens" } dd { (text(&totals["total_tokens"])) " (" (text(&totals["input_tokens"])) " in, " (text(&totals["output_tokens"])) " out)" }
                        dt { "Model calls" } dd { (text(&totals["calls"])) }
                        @if totals["unknown_price_calls"].as_u64().is_some_and(|n| n > 0) {
                            dt { "Calls without a price" } dd { (text(&totals["unknown_price_calls"])) }
                        }
                    }
                }
            }
            section class="panel" { h2 { "Dollars per day" } (raw(dollars_chart)) }
            section class="panel" { h2 { "Tokens per day" } (raw(tokens_chart)) }
            section class="panel" {
                h2 { "By route" }
                @if routes.is_empty() { p { "Nothing spent in this window." } } @else { (routes_table(&routes)) }
            }
            section class="panel" {
                h2 { "By run" }
                @if runs.is_empty() {
                    p { "No run spent anything in this window." }
                } @else {
                    div class="table-wrap" {
                        table {
                            thead { tr { th { "Run" } th { "Day" } th { "Calls" } th { "Tokens" } th { "Cost" } } }
                            tbody {
                                @for run in &runs {
                                    tr {
                                        td { a href={"/runs/" (text(&run["run_id"]))} { code { (text(&run["run_id"])) } } }
                                        td { (text(&run["date"])) }
                                        td { (text(&run["calls"])) }
                                        td { (text(&run["total_tokens"])) }
                                        td { (dollars(run)) }
                                    }
                                }
                            }
                        }
                    }
                    @if summary["runs_truncated"].as_bool() == Some(true) {
                        p class="hint" { "Only the newest runs are listed; the CSV has them all." }
                    }
                }
            }
        }
    };
    layout::page(&user, "Cost", Nav::Cost, body)
}
