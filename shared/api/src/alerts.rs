//! `GET /api/alerts`: the alerts of the deterministic floor, firing by default.

use chrono::{DateTime, Utc};
use pulse_domain::alert_rules::{AlertKey, AlertLevel, AlertRule};
use pulse_domain::listing::MAX_ALERTS;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::constraints::{IntegerIn, ResourceRef};

#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertsQuery {
    /// `firing` (default), `cleared` or `all`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::query::parsed"
    )]
    pub state: Option<StateFilter>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_id: Option<ResourceRef>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::query::integer_in::<_, 1, MAX_ALERTS>"
    )]
    #[schemars(with = "Option<Limit>")]
    pub limit: Option<i64>,
}

/// How many alerts a list answers.
pub type Limit = IntegerIn<1, MAX_ALERTS>;

/// Which alerts a list answers, by state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(description = "Which alerts [`list`] returns.")]
pub enum StateFilter {
    #[default]
    Firing,
    Cleared,
    All,
}

impl std::str::FromStr for StateFilter {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "firing" => Ok(Self::Firing),
            "cleared" => Ok(Self::Cleared),
            "all" => Ok(Self::All),
            other => Err(format!(
                "unknown alert state {other:?} (expected firing, cleared or all)"
            )),
        }
    }
}

/// Where an alert is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AlertStatus {
    Firing,
    Cleared,
}

impl AlertStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Firing => "firing",
            Self::Cleared => "cleared",
        }
    }
}

/// One alert, as the API lists it (published as `StoredAlert`).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[schemars(
    rename = "StoredAlert",
    description = "One stored alert, as the API lists it."
)]
pub struct Alert {
    pub id: Uuid,
    pub key: AlertKey,
    #[serde(rename = "type")]
    pub rule: AlertRule,
    pub level: AlertLevel,
    pub value: f64,
    pub threshold: f64,
    pub resource_id: String,
    pub message: String,
    pub state: AlertStatus,
    pub fired_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub cleared_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct AlertList {
    pub alerts: Vec<Alert>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alert_status_names_are_the_wire_names() {
        for status in [AlertStatus::Firing, AlertStatus::Cleared] {
            assert_eq!(
                serde_json::to_string(&status).unwrap(),
                format!("\"{}\"", status.as_str())
            );
        }
    }
}
