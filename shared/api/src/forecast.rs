//! `GET /api/resources/{id}/forecast`: the capacity forecast of one percent-used metric of a
//! resource from its recent history.

use pulse_domain::forecast::ForecastOutcome;
use pulse_domain::resource::ResourceId;
use serde::{Deserialize, Serialize};

use crate::constraints::{IntegerIn, refuse};

/// Default history window: one week.
pub const DEFAULT_WINDOW_HOURS: i64 = 168;
/// Longest history window: 90 days.
pub const MAX_WINDOW_HOURS: i64 = 2_160;
/// Longest metric name.
pub const MAX_METRIC_CHARS: usize = 128;

/// The history window a query may ask for, in hours.
pub type WindowHours = IntegerIn<1, MAX_WINDOW_HOURS>;

#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForecastQuery {
    /// The metric to forecast; storage and hosts have a default, other types must name one.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "metric_name"
    )]
    #[schemars(with = "Option<MetricName>")]
    pub metric: Option<String>,
    /// Hours of history (default 168).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::query::integer_in::<_, 1, MAX_WINDOW_HOURS>"
    )]
    #[schemars(with = "Option<WindowHours>")]
    pub window_hours: Option<i64>,
}

fn metric_name<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    let metric = String::deserialize(deserializer)?;
    if MetricName::check(&metric) {
        Ok(Some(metric))
    } else {
        Err(refuse(&MetricName::requirement()))
    }
}

/// A metric name as [`MetricName::check`] accepts it.
pub struct MetricName;

impl MetricName {
    fn pattern() -> String {
        format!("^[A-Za-z0-9_.-]{{1,{MAX_METRIC_CHARS}}}$")
    }

    /// Whether `metric` is a metric name (what the pattern accepts).
    pub fn check(metric: &str) -> bool {
        !metric.is_empty()
            && metric.len() <= MAX_METRIC_CHARS
            && metric
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    }

    /// What a metric name must be, for a refusal.
    pub fn requirement() -> String {
        format!("must be 1 to {MAX_METRIC_CHARS} characters of letters, digits, '_', '.' or '-'")
    }
}

impl schemars::JsonSchema for MetricName {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "MetricName".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "pattern": Self::pattern()})
    }
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ForecastResponse {
    pub resource_id: ResourceId,
    pub window_hours: i64,
    #[serde(flatten)]
    pub outcome: ForecastOutcome,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_metric_pattern_is_the_check() {
        assert_eq!(MetricName::pattern(), "^[A-Za-z0-9_.-]{1,128}$");
        for (metric, valid) in [
            ("used_percent", true),
            ("a.b-c_9", true),
            ("", false),
            ("with space", false),
            ("a/b", false),
            ("é", false),
        ] {
            assert_eq!(MetricName::check(metric), valid, "{metric:?}");
        }
        assert!(MetricName::check(&"m".repeat(MAX_METRIC_CHARS)));
        assert!(!MetricName::check(&"m".repeat(MAX_METRIC_CHARS + 1)));
    }
}
