//! Exact US dollar amounts, for model prices, the cost ledger and spend budgets.
//!
//! Held as whole pico-dollars (10^-12 USD, the ledger column's scale) so sums and comparisons
//! are exact; floats appear only for display.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An amount of US dollars, held exactly in pico-dollars (10^-12 USD).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Usd {
    picos: u64,
}

const PICOS_PER_USD: u64 = 1_000_000_000_000;
const SCALE: usize = 12;

impl Usd {
    pub const ZERO: Self = Self { picos: 0 };

    pub const fn from_picos(picos: u64) -> Self {
        Self { picos }
    }

    pub const fn picos(self) -> u64 {
        self.picos
    }

    /// Whole micro-dollars, for budgets set in configuration.
    pub const fn from_micros(micros: u64) -> Self {
        Self {
            picos: micros.saturating_mul(1_000_000),
        }
    }

    pub fn saturating_add(self, other: Self) -> Self {
        Self {
            picos: self.picos.saturating_add(other.picos),
        }
    }

    /// For display only; sums and comparisons stay exact.
    pub fn as_f64(self) -> f64 {
        self.picos as f64 / PICOS_PER_USD as f64
    }
}

/// Twelve decimal places, the ledger column's scale: `0.002500000000`.
impl fmt::Display for Usd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:0width$}",
            self.picos / PICOS_PER_USD,
            self.picos % PICOS_PER_USD,
            width = SCALE
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a non-negative dollar amount with at most 12 decimals")]
pub struct ParseUsdError(String);

impl FromStr for Usd {
    type Err = ParseUsdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseUsdError(s.to_owned());
        let (whole, frac) = s.trim().split_once('.').unwrap_or((s.trim(), ""));
        if whole.is_empty() && frac.is_empty()
            || frac.len() > SCALE
            || !whole.bytes().all(|b| b.is_ascii_digit())
            || !frac.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(err());
        }
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| err())?
        };
        let frac: u64 = if frac.is_empty() {
            0
        } else {
            let padded = format!("{frac:0<SCALE$}");
            padded.parse().map_err(|_| err())?
        };
        whole
            .checked_mul(PICOS_PER_USD)
            .and_then(|p| p.checked_add(frac))
            .map(Self::from_picos)
            .ok_or_else(err)
    }
}

/// A decimal string with twelve places (`"0.002500000000"`), as it is serialized.
#[cfg(feature = "schemars")]
impl schemars::JsonSchema for Usd {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Usd".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^[0-9]+\\.[0-9]{12}$",
            "description": "US dollars, exact, twelve decimal places",
        })
    }
}

impl Serialize for Usd {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The decimal text [`Usd::from_str`] reads, so that an API answer reads back.
impl<'de> Deserialize<'de> for Usd {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
