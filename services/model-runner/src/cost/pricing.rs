//! Exact per-model prices. A model without a row here has no known price; nothing is guessed
//! from a similar name, a provider average or another gateway's listing.

use super::Usd;

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
}

impl PriceRow {
    /// The price of these tokens. A micro-dollar per million tokens is a pico-dollar per token,
    /// so the product is exact.
    pub fn cost(&self, input_tokens: u64, output_tokens: u64) -> Usd {
        let input = u128::from(input_tokens) * u128::from(self.input_micros_per_mtok);
        let output = u128::from(output_tokens) * u128::from(self.output_micros_per_mtok);
        Usd::from_picos(u64::try_from(input + output).unwrap_or(u64::MAX))
    }
}

const fn row(provider: &'static str, model: &'static str, input: u64, output: u64) -> PriceRow {
    PriceRow {
        provider,
        model,
        input_micros_per_mtok: input,
        output_micros_per_mtok: output,
    }
}

/// Only models whose price is one flat rate per token; models priced in tiers by prompt length
/// (for example Gemini 2.5 Pro) are left out rather than priced at one tier.
pub static PRICES: &[PriceRow] = &[
    row("openai", "gpt-4o", 2_500_000, 10_000_000),
    row("openai", "gpt-4o-mini", 150_000, 600_000),
    row("openai", "gpt-4.1", 2_000_000, 8_000_000),
    row("openai", "gpt-4.1-mini", 400_000, 1_600_000),
    row("openai", "gpt-4.1-nano", 100_000, 400_000),
    row(
        "anthropic",
        "claude-sonnet-4-20250514",
        3_000_000,
        15_000_000,
    ),
    row(
        "anthropic",
        "claude-opus-4-20250514",
        15_000_000,
        75_000_000,
    ),
    row("anthropic", "claude-3-5-haiku-20241022", 800_000, 4_000_000),
    row("gemini", "gemini-2.5-flash", 300_000, 2_500_000),
];

/// The exact row for this provider and model, if there is one.
pub fn price(provider: &str, model: &str) -> Option<&'static PriceRow> {
    PRICES
        .iter()
        .find(|r| r.provider == provider && r.model == model)
}
