//! Exact per-model prices and the cost of one call. A model without a row here has no known
//! price; nothing is guessed from a similar name, a provider average or another gateway's
//! listing.
//!
//! Three answers, never blurred: a known dollar amount, an unknown one (a metered model with no
//! exact price row), or not metered (a local model server or a plan allowance, where zero is
//! true). An unknown price is never reported as zero.

use pulse_domain::usd::Usd;
use serde::Serialize;

use crate::provider::Usage;
use crate::registry::RouteClass;
use crate::route::Route;

/// When the rows below were taken from the providers' public price pages. Prices change: a row
/// older than a provider's change is wrong, so re-check them against the pages when this date
/// ages.
pub const PRICES_AS_OF: &str = "2025-06-01";

/// USD per million tokens, for one model on one provider's own API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriceRow {
    pub provider: &'static str,
    pub model: &'static str,
    /// Micro-dollars per million input tokens (USD 2.50 is 2_500_000).
    pub input_micros_per_mtok: u64,
    /// Micro-dollars per million output tokens.
    pub output_micros_per_mtok: u64,
    /// Micro-dollars per million input tokens read from the provider's prompt cache (OpenAI
    /// "cached input", Anthropic "cache hits", Gemini "context caching").
    pub cached_input_micros_per_mtok: u64,
    /// Micro-dollars per million input tokens written to the prompt cache: Anthropic's
    /// five-minute cache write; the plain input price where writing costs nothing extra.
    pub cache_write_micros_per_mtok: u64,
}

impl PriceRow {
    /// The price of a call's tokens: the uncached input at the input price, cache reads and
    /// writes at theirs, the output at the output price. A micro-dollar per million tokens is a
    /// pico-dollar per token, so the product is exact.
    pub fn cost(&self, usage: Usage) -> Usd {
        let part = |tokens: u64, micros: u64| u128::from(tokens) * u128::from(micros);
        let picos = part(usage.uncached_input_tokens(), self.input_micros_per_mtok)
            + part(usage.cached_input_tokens, self.cached_input_micros_per_mtok)
            + part(
                usage.cache_write_input_tokens,
                self.cache_write_micros_per_mtok,
            )
            + part(usage.output_tokens, self.output_micros_per_mtok);
        Usd::from_picos(u64::try_from(picos).unwrap_or(u64::MAX))
    }

    /// What a cached input token costs relative to an uncached one (0.5 for gpt-4o, 0.1 for
    /// Claude): the weight of cache reads in billed-equivalent input tokens.
    pub fn cached_input_ratio(&self) -> f64 {
        self.cached_input_micros_per_mtok as f64 / self.input_micros_per_mtok.max(1) as f64
    }

    /// The weight of cache writes in billed-equivalent input tokens (1.25 for Claude).
    pub fn cache_write_ratio(&self) -> f64 {
        self.cache_write_micros_per_mtok as f64 / self.input_micros_per_mtok.max(1) as f64
    }

    /// The input tokens of `usage` as uncached tokens of the same bill: uncached input plus
    /// cache reads and writes at their price ratios.
    pub fn billed_equivalent_input(&self, usage: Usage) -> f64 {
        usage.uncached_input_tokens() as f64
            + usage.cached_input_tokens as f64 * self.cached_input_ratio()
            + usage.cache_write_input_tokens as f64 * self.cache_write_ratio()
    }
}

/// A row whose cache writes cost the plain input price (OpenAI, Gemini implicit caching).
const fn row(
    provider: &'static str,
    model: &'static str,
    input: u64,
    output: u64,
    cached_input: u64,
) -> PriceRow {
    PriceRow {
        provider,
        model,
        input_micros_per_mtok: input,
        output_micros_per_mtok: output,
        cached_input_micros_per_mtok: cached_input,
        cache_write_micros_per_mtok: input,
    }
}

/// A row with a cache-write surcharge (Anthropic).
const fn row_with_write(
    provider: &'static str,
    model: &'static str,
    input: u64,
    output: u64,
    cached_input: u64,
    cache_write: u64,
) -> PriceRow {
    PriceRow {
        cache_write_micros_per_mtok: cache_write,
        ..row(provider, model, input, output, cached_input)
    }
}

/// Only models whose price is one flat rate per token; models priced in tiers by prompt length
/// (for example Gemini 2.5 Pro) are left out rather than priced at one tier. Columns: input,
/// output, cached input (and Anthropic's cache write).
pub static PRICES: &[PriceRow] = &[
    row("openai", "gpt-4o", 2_500_000, 10_000_000, 1_250_000),
    row("openai", "gpt-4o-mini", 150_000, 600_000, 75_000),
    row("openai", "gpt-4.1", 2_000_000, 8_000_000, 500_000),
    row("openai", "gpt-4.1-mini", 400_000, 1_600_000, 100_000),
    row("openai", "gpt-4.1-nano", 100_000, 400_000, 25_000),
    row_with_write(
        "anthropic",
        "claude-sonnet-4-20250514",
        3_000_000,
        15_000_000,
        300_000,
        3_750_000,
    ),
    row_with_write(
        "anthropic",
        "claude-opus-4-20250514",
        15_000_000,
        75_000_000,
        1_500_000,
        18_750_000,
    ),
    row_with_write(
        "anthropic",
        "claude-3-5-haiku-20241022",
        800_000,
        4_000_000,
        80_000,
        1_000_000,
    ),
    row("gemini", "gemini-2.5-flash", 300_000, 2_500_000, 75_000),
];

/// The exact row for this provider and model, if there is one.
pub fn price(provider: &str, model: &str) -> Option<&'static PriceRow> {
    PRICES
        .iter()
        .find(|r| r.provider == provider && r.model == model)
}

/// What one call cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "usd", rename_all = "snake_case")]
pub enum Cost {
    /// Priced from an exact row.
    Known(Usd),
    /// Metered, but no exact price row for this model: the amount is not known.
    Unknown,
    /// Not billed per token (local model server, plan allowance).
    NotMetered,
}

impl Cost {
    /// The amount to record, `None` when it is not known. Not metered is a true zero.
    pub fn amount(self) -> Option<Usd> {
        match self {
            Self::Known(usd) => Some(usd),
            Self::NotMetered => Some(Usd::ZERO),
            Self::Unknown => None,
        }
    }

    pub fn is_known(self) -> bool {
        !matches!(self, Self::Unknown)
    }
}

/// The cost of `usage` on `route`, at the route's own class.
pub fn cost_for(route: &Route, usage: Usage) -> Cost {
    cost_for_class(route, route.route_class(), usage)
}

/// The cost of `usage` on `route` when the class was decided by its configured address (a Z.ai
/// base URL on the coding path is a plan allowance).
pub fn cost_for_class(route: &Route, class: RouteClass, usage: Usage) -> Cost {
    if !class.is_metered() {
        return Cost::NotMetered;
    }
    match price(route.provider_id(), route.model()) {
        Some(row) => Cost::Known(row.cost(usage)),
        None => Cost::Unknown,
    }
}
