//! What the tenant's model calls cost: `GET /api/ai/cost/summary` and `GET /api/ai/cost/export`
//! (the same window as CSV).

use chrono::{DateTime, NaiveDate, Utc};
use pulse_domain::usd::Usd;
use serde::{Deserialize, Serialize};

use crate::constraints::IntegerIn;

pub const DEFAULT_DAYS: u32 = 30;
pub const MAX_DAYS: u32 = 365;
/// Runs listed in a summary, newest first; older ones still count in the totals.
pub const MAX_RUNS: usize = 1_000;

#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CostQuery {
    /// UTC days, today's included (default 30).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "day_count"
    )]
    #[schemars(with = "Option<DayCount>")]
    pub days: Option<u32>,
}

fn day_count<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u32>, D::Error> {
    let days = crate::query::integer_in::<D, 1, { MAX_DAYS as i64 }>(deserializer)?;
    Ok(days.and_then(|d| u32::try_from(d).ok()))
}

/// The window a query may ask for, in UTC days.
pub type DayCount = IntegerIn<1, { MAX_DAYS as i64 }>;

/// Totals as the API shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TotalsView {
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    /// Null when a call's price was unknown.
    pub cost_usd: Option<Usd>,
    pub price_known: bool,
    pub known_cost_usd: Usd,
    pub unknown_price_calls: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RouteView {
    pub route: String,
    pub provider: String,
    pub model: String,
    pub route_class: String,
    #[serde(flatten)]
    pub totals: TotalsView,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DayView {
    pub date: NaiveDate,
    #[serde(flatten)]
    pub totals: TotalsView,
    pub routes: Vec<RouteView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunView {
    pub run_id: String,
    /// The first UTC day the run made a call.
    pub date: NaiveDate,
    #[serde(flatten)]
    pub totals: TotalsView,
    pub routes: Vec<RouteView>,
}

/// `GET /api/ai/cost/summary`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CostSummary {
    pub days: u32,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub totals: TotalsView,
    pub by_route: Vec<RouteView>,
    /// Days with calls, oldest first.
    pub by_day: Vec<DayView>,
    /// Patrol runs with calls, newest first, at most [`MAX_RUNS`].
    pub by_run: Vec<RunView>,
    pub runs_truncated: bool,
}
