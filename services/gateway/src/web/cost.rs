//! Cost: tokens and dollars per day and per run, by route, from `GET /api/ai/cost/summary`;
//! unknown prices shown as unknown; the CSV export behind a link.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::response::Response;
use chrono::NaiveDate;
use maud::{Markup, html};
use pulse_api::cost::{CostQuery, RouteView, TotalsView};
use serde::Deserialize;

use super::layout::{self, Nav, raw, shown, usd_of};
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

/// Totals' dollars: the amount, or "unknown" when a call had no price (with the known part as a
/// lower bound).
fn dollars(totals: &TotalsView) -> String {
    if !totals.price_known {
        let known = usd_of(Some(totals.known_cost_usd));
        return format!("unknown (at least {known})");
    }
    usd_of(totals.cost_usd)
}

fn routes_table(routes: &[RouteView]) -> Markup {
    html! {
        div class="table-wrap" {
            table {
                thead { tr { th { "Route" } th { "Calls" } th { "Input tokens" } th { "Output tokens" } th { "Cost" } } }
                tbody {
                    @for r in routes {
                        tr {
                            td { code { (shown(Some(&r.route))) } }
                            td { (r.totals.calls) }
                            td { (r.totals.input_tokens) }
                            td { (r.totals.output_tokens) }
                            td { (dollars(&r.totals)) }
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
        Ok(auth) => layout::answer(
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
    let totals = &summary.totals;
    // Every day of the window, with nothing spent on the days the ledger has no line for.
    let mut per_day: BTreeMap<NaiveDate, (f64, f64)> = BTreeMap::new();
    let (from, to) = (summary.from.date_naive(), summary.to.date_naive());
    let mut day = from;
    while day < to {
        per_day.insert(day, (0.0, 0.0));
        day = day.succ_opt().unwrap_or(to);
    }
    for day in &summary.by_day {
        per_day.insert(
            day.date,
            (
                day.totals.known_cost_usd.as_f64(),
                day.totals.total_tokens as f64,
            ),
        );
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
    let routes = &summary.by_route;
    let runs = &summary.by_run;
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
                        dt { "Tokens" } dd { (totals.total_tokens) " (" (totals.input_tokens) " in, " (totals.output_tokens) " out)" }
                        dt { "Model calls" } dd { (totals.calls) }
                        @if totals.unknown_price_calls > 0 {
                            dt { "Calls without a price" } dd { (totals.unknown_price_calls) }
                        }
                    }
                }
            }
            section class="panel" { h2 { "Dollars per day" } (raw(dollars_chart)) }
            section class="panel" { h2 { "Tokens per day" } (raw(tokens_chart)) }
            section class="panel" {
                h2 { "By route" }
                @if routes.is_empty() { p { "Nothing spent in this window." } } @else { (routes_table(routes)) }
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
                                @for run in runs {
                                    tr {
                                        td { a href={"/runs/" (shown(Some(&run.run_id)))} { code { (shown(Some(&run.run_id))) } } }
                                        td { (run.date) }
                                        td { (run.totals.calls) }
                                        td { (run.totals.total_tokens) }
                                        td { (dollars(&run.totals)) }
                                    }
                                }
                            }
                        }
                    }
                    @if summary.runs_truncated {
                        p class="hint" { "Only the newest runs are listed; the CSV has them all." }
                    }
                }
            }
        }
    };
    layout::page(&user, "Cost", Nav::Cost, body)
}
