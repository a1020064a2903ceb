//! What the tenant's model calls cost, from the cost ledger (the only cost authority; prices were
//! applied by the model-runner's price table when each call was recorded).
//!
//! - `GET /api/ai/cost/summary?days=N` (`monitoring:read`): tokens and dollars over the last `N`
//!   UTC days (today included; default 30, 1 to 365): totals, per route, per day (with its
//!   routes) and per Patrol run (with its routes).
//! - `GET /api/ai/cost/export?days=N` (`monitoring:read`): the same window as CSV
//!   (`text/csv`), one row per UTC day, run, surface and route.
//!
//! An unknown price stays unknown: `cost_usd` is null (an empty CSV cell) with
//! `price_known: false` and the count of unpriced calls, and `known_cost_usd` is then a lower
//! bound. Dollar amounts are decimal text, exact to the ledger's precision. CSV cells are quoted
//! as RFC 4180 asks, and a cell a spreadsheet would read as a formula (starting with `=`, `+`,
//! `-`, `@`, tab or carriage return) is prefixed with `'`.

use axum::routing;
use pulse_api::system::{ActionMode, ApprovalPolicy, Category};
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Days, NaiveDate, Utc};
use pulse_api::cost::{
    CostQuery, CostSummary, DEFAULT_DAYS, DayView, MAX_RUNS, RouteView, RunView, TotalsView,
};
use pulse_store::cost_ledger::{self, CostLine, CostTotals, RouteCost};

use crate::authorized::{Authorized, MonitoringReadScope};
use crate::error::ApiError;
use crate::extract::ApiQuery;
use crate::route::{Answer, RouteSpec, schema};
use crate::state::AppState;

/// `[from, to)`: the `days` UTC days ending with today's.
fn window(days: u32, now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    let today = now.date_naive();
    let first = today - Days::new(u64::from(days - 1));
    let start = |d: NaiveDate| d.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc();
    (start(first), start(today + Days::new(1)))
}

/// Ledger totals as the API shows them.
fn totals_view(t: &CostTotals) -> TotalsView {
    TotalsView {
        calls: t.calls,
        input_tokens: t.input_tokens,
        output_tokens: t.output_tokens,
        total_tokens: t.input_tokens + t.output_tokens,
        cost_usd: t.cost_usd(),
        price_known: t.price_known(),
        known_cost_usd: t.known_cost_usd,
        unknown_price_calls: t.unknown_price_calls,
    }
}

/// A route's ledger totals as the API shows them.
fn route_view(r: RouteCost) -> RouteView {
    RouteView {
        totals: totals_view(&r.totals),
        route: r.route.route,
        provider: r.route.provider,
        model: r.route.model,
        route_class: r.route.route_class.to_owned(),
    }
}

fn totals<'a>(lines: impl IntoIterator<Item = &'a CostLine>) -> CostTotals {
    let mut sum = CostTotals::default();
    for line in lines {
        sum.add(&line.totals);
    }
    sum
}

fn routes<'a>(lines: impl IntoIterator<Item = &'a CostLine>) -> Vec<RouteView> {
    cost_ledger::by_route(lines)
        .into_iter()
        .map(route_view)
        .collect()
}

/// Builds the summary from the ledger lines of the window. Pure.
pub fn summarize(
    days: u32,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    lines: &[CostLine],
) -> CostSummary {
    let mut per_day: BTreeMap<NaiveDate, Vec<&CostLine>> = BTreeMap::new();
    let mut per_run: BTreeMap<&str, Vec<&CostLine>> = BTreeMap::new();
    for line in lines {
        per_day.entry(line.day).or_default().push(line);
        if let Some(run) = &line.run_id {
            per_run.entry(run).or_default().push(line);
        }
    }
    let by_day = per_day
        .into_iter()
        .map(|(date, lines)| DayView {
            date,
            totals: totals_view(&totals(lines.iter().copied())),
            routes: routes(lines.iter().copied()),
        })
        .collect();
    let mut by_run: Vec<RunView> = per_run
        .into_iter()
        .map(|(run_id, lines)| RunView {
            run_id: run_id.to_owned(),
            date: lines.iter().map(|l| l.day).min().unwrap_or_default(),
            totals: totals_view(&totals(lines.iter().copied())),
            routes: routes(lines.iter().copied()),
        })
        .collect();
    // Run ids are time-ordered (UUIDv7): newest first is descending id within the day order.
    by_run.sort_by(|a, b| b.date.cmp(&a.date).then(b.run_id.cmp(&a.run_id)));
    let runs_truncated = by_run.len() > MAX_RUNS;
    by_run.truncate(MAX_RUNS);
    CostSummary {
        days,
        from,
        to,
        totals: totals_view(&totals(lines)),
        by_route: routes(lines),
        by_day,
        by_run,
        runs_truncated,
    }
}

async fn load(
    state: &AppState,
    auth: &Authorized<MonitoringReadScope>,
    query: CostQuery,
) -> Result<(u32, DateTime<Utc>, DateTime<Utc>, Vec<CostLine>), ApiError> {
    let days = query.days.unwrap_or(DEFAULT_DAYS);
    let (from, to) = window(days, Utc::now());
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let lines = cost_ledger::lines(&tx, from, to).await?;
    tx.rollback().await?;
    Ok((days, from, to, lines))
}

pub async fn summary(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    ApiQuery(query, _): ApiQuery<CostQuery>,
) -> Result<Json<CostSummary>, ApiError> {
    let (days, from, to, lines) = load(&state, &auth, query).await?;
    Ok(Json(summarize(days, from, to, &lines)))
}

/// The export's header row.
pub const CSV_HEADER: [&str; 14] = [
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
    "unknown_price_calls",
];

/// One CSV cell: formula-looking text is defused with a leading `'`, then the cell is quoted
/// when it holds a delimiter, a quote or a line break.
pub fn csv_cell(value: &str) -> String {
    let defused = if value.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{value}")
    } else {
        value.to_owned()
    };
    if defused.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", defused.replace('"', "\"\""))
    } else {
        defused
    }
}

fn csv_row(out: &mut String, cells: &[&str]) {
    let line: Vec<String> = cells.iter().map(|c| csv_cell(c)).collect();
    out.push_str(&line.join(","));
    out.push_str("\r\n");
}

/// The CSV document for `lines`. Pure.
pub fn to_csv(lines: &[CostLine]) -> String {
    let mut out = String::new();
    csv_row(&mut out, &CSV_HEADER);
    for line in lines {
        let t = &line.totals;
        let cost = t.cost_usd().map(|c| c.to_string()).unwrap_or_default();
        csv_row(
            &mut out,
            &[
                &line.day.to_string(),
                line.run_id.as_deref().unwrap_or(""),
                &line.surface,
                &line.route.route,
                &line.route.provider,
                &line.route.model,
                line.route.route_class,
                &t.calls.to_string(),
                &t.input_tokens.to_string(),
                &t.output_tokens.to_string(),
                &cost,
                if t.price_known() { "true" } else { "false" },
                &t.known_cost_usd.to_string(),
                &t.unknown_price_calls.to_string(),
            ],
        );
    }
    out
}

pub async fn export(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    ApiQuery(query, _): ApiQuery<CostQuery>,
) -> Result<Response, ApiError> {
    let (days, _, to, lines) = load(&state, &auth, query).await?;
    let last = to.date_naive() - Days::new(1);
    let filename = format!("attachment; filename=\"pulse-ai-cost-{days}d-{last}.csv\"");
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
            (header::CONTENT_DISPOSITION, filename),
        ],
        to_csv(&lines),
    )
        .into_response())
}

/// The routes of this module, in the order the API lists them.
pub(crate) const ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: "GET",
        path: "/api/ai/cost/summary",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_cost_summary",
        title: "AI cost summary",
        description: "Tokens and dollars of the last `days` UTC days (1-365, default 30): totals, \
            by route, by day and by run; an unknown price stays unknown (null), never 0.",
        category: Category::Settings,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::cost::CostQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::cost::CostSummary>,
        },
        errors: &[ErrorCode::InvalidParameter],
        handler: || routing::get(summary),
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/cost/export",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "export_cost_ledger",
        title: "Export the AI cost ledger",
        description: "The same window as CSV (text/csv): one row per day, run, surface and route.",
        category: Category::Settings,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::cost::CostQuery>),
        body: None,
        response: Answer::Csv,
        errors: &[ErrorCode::InvalidParameter],
        handler: || routing::get(export),
    },
];

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use pulse_store::cost_ledger::CostRoute;

    use super::*;
    use pulse_domain::usd::Usd;

    fn line(day: u32, run: Option<&str>, model: &str, usd: Option<&str>) -> CostLine {
        CostLine {
            day: NaiveDate::from_ymd_opt(2026, 12, day).unwrap(),
            run_id: run.map(str::to_owned),
            surface: "patrol".to_owned(),
            route: CostRoute {
                route: format!("openai:{model}"),
                provider: "openai".to_owned(),
                model: model.to_owned(),
                route_class: "metered_api",
            },
            totals: CostTotals {
                calls: 1,
                input_tokens: 1000,
                output_tokens: 100,
                known_cost_usd: usd.map_or(Usd::ZERO, |u| u.parse().unwrap()),
                unknown_price_calls: u64::from(usd.is_none()),
            },
        }
    }

    #[test]
    fn days_are_bounded() {
        let read = |query: &str| ApiQuery::<CostQuery>::parse(query).map(|q| q.0.days);
        assert_eq!(read("").unwrap(), None);
        assert_eq!(read("days=1").unwrap(), Some(1));
        assert_eq!(read("days=365").unwrap(), Some(365));
        for bad in ["0", "366", "-1", "7.5", "week", ""] {
            let err = read(&format!("days={bad}")).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidParameter, "{bad}");
            assert_eq!(err.message, "days: must be an integer from 1 to 365");
        }
    }

    #[test]
    fn the_window_is_whole_utc_days_ending_today() {
        let now = Utc.with_ymd_and_hms(2026, 12, 2, 3, 4, 5).unwrap();
        let (from, to) = window(1, now);
        assert_eq!(from, Utc.with_ymd_and_hms(2026, 12, 2, 0, 0, 0).unwrap());
        assert_eq!(to, Utc.with_ymd_and_hms(2026, 12, 3, 0, 0, 0).unwrap());
        let (from, _) = window(30, now);
        assert_eq!(from, Utc.with_ymd_and_hms(2026, 11, 3, 0, 0, 0).unwrap());
    }

    #[test]
    fn an_unknown_price_makes_the_total_unknown_not_zero() {
        let lines = [
            line(1, Some("r1"), "gpt-4.1", Some("0.25")),
            line(1, Some("r1"), "mystery", None),
            line(2, None, "gpt-4.1", Some("0.5")),
        ];
        let from = Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap();
        let s = summarize(2, from, from + chrono::Duration::days(2), &lines);
        assert_eq!(s.totals.cost_usd, None);
        assert!(!s.totals.price_known);
        assert_eq!(s.totals.known_cost_usd, "0.75".parse().unwrap());
        assert_eq!(s.totals.unknown_price_calls, 1);
        assert_eq!(s.by_day.len(), 2);
        assert_eq!(s.by_day[0].totals.cost_usd, None);
        assert_eq!(s.by_day[1].totals.cost_usd, Some("0.5".parse().unwrap()));
        assert_eq!(s.by_run.len(), 1);
        assert_eq!(s.by_run[0].routes.len(), 2);
        assert_eq!(s.by_route.len(), 2);
        insta::assert_json_snapshot!("cost_summary", s);
    }

    #[test]
    fn csv_cells_are_quoted_and_defused() {
        assert_eq!(csv_cell("plain"), "plain");
        assert_eq!(csv_cell("a,b"), "\"a,b\"");
        assert_eq!(csv_cell("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_cell("two\nlines"), "\"two\nlines\"");
        assert_eq!(csv_cell("=SUM(A1)"), "'=SUM(A1)");
        assert_eq!(csv_cell("+1"), "'+1");
        assert_eq!(csv_cell("-1"), "'-1");
        assert_eq!(csv_cell("@cmd"), "'@cmd");
        assert_eq!(csv_cell("=1,\"2\""), "\"'=1,\"\"2\"\"\"");
        let csv = to_csv(&[line(1, None, "mystery", None)]);
        let mut rows = csv.split("\r\n");
        assert_eq!(rows.next().unwrap(), CSV_HEADER.join(","));
        assert_eq!(
            rows.next().unwrap(),
            "2026-12-01,,patrol,openai:mystery,openai,mystery,metered_api,1,1000,100,,false,0.000000000000,1"
        );
    }
}
