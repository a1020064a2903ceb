//! Hosted tenants: their standing (active or suspended) and their quotas.
//!
//! A quota bounds one thing a tenant creates or consumes. `None` is no quota. Each quota is
//! enforced where the thing is created (docs/tenants.md names the place); every refusal names
//! the quota, its limit and what to do through [`QuotaExceeded`], so the message is the same
//! whichever service refuses.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest suspension reason accepted (the column's bound).
pub const MAX_SUSPENSION_REASON_CHARS: usize = 500;

/// The limits of one tenant; `None` leaves a dimension unbounded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TenantQuotas {
    /// Patrol runs accepted per rolling hour (every trigger).
    #[serde(default)]
    pub patrol_runs_per_hour: Option<u32>,
    /// Model tokens (input + output) per UTC day.
    #[serde(default)]
    pub tokens_per_day: Option<u64>,
    /// Model spend per UTC day, in whole micro-dollars.
    #[serde(default)]
    pub usd_micros_per_day: Option<u64>,
    /// Registered agents.
    #[serde(default)]
    pub agents: Option<u32>,
    /// Inventory resources.
    #[serde(default)]
    pub resources: Option<u32>,
    /// Open (unresolved) findings.
    #[serde(default)]
    pub findings: Option<u32>,
    /// API requests per second through the gateway (per gateway replica).
    #[serde(default)]
    pub api_requests_per_sec: Option<u32>,
}

impl TenantQuotas {
    /// The limit of `quota`, if one is set.
    pub fn limit(&self, quota: Quota) -> Option<u64> {
        match quota {
            Quota::PatrolRunsPerHour => self.patrol_runs_per_hour.map(u64::from),
            Quota::TokensPerDay => self.tokens_per_day,
            Quota::UsdMicrosPerDay => self.usd_micros_per_day,
            Quota::Agents => self.agents.map(u64::from),
            Quota::Resources => self.resources.map(u64::from),
            Quota::Findings => self.findings.map(u64::from),
            Quota::ApiRequestsPerSec => self.api_requests_per_sec.map(u64::from),
        }
    }

    /// Refuses `quota` when `used` already reached its limit (the next one would exceed it).
    pub fn admit(&self, quota: Quota, used: u64) -> Result<(), QuotaExceeded> {
        match self.limit(quota) {
            Some(limit) if used >= limit => Err(QuotaExceeded { quota, limit }),
            _ => Ok(()),
        }
    }
}

/// One quota dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Quota {
    PatrolRunsPerHour,
    TokensPerDay,
    UsdMicrosPerDay,
    Agents,
    Resources,
    Findings,
    ApiRequestsPerSec,
}

impl Quota {
    pub const ALL: [Quota; 7] = [
        Quota::PatrolRunsPerHour,
        Quota::TokensPerDay,
        Quota::UsdMicrosPerDay,
        Quota::Agents,
        Quota::Resources,
        Quota::Findings,
        Quota::ApiRequestsPerSec,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Quota::PatrolRunsPerHour => "patrol_runs_per_hour",
            Quota::TokensPerDay => "tokens_per_day",
            Quota::UsdMicrosPerDay => "usd_micros_per_day",
            Quota::Agents => "agents",
            Quota::Resources => "resources",
            Quota::Findings => "findings",
            Quota::ApiRequestsPerSec => "api_requests_per_sec",
        }
    }

    /// What to do when the quota is reached.
    pub fn remedy(self) -> &'static str {
        match self {
            Quota::PatrolRunsPerHour => "wait for older runs to leave the one-hour window",
            Quota::TokensPerDay | Quota::UsdMicrosPerDay => "wait for the next UTC day",
            Quota::Agents => "remove an agent you no longer need",
            Quota::Resources => "stop reporting resources you no longer need",
            Quota::Findings => "resolve or dismiss open findings",
            Quota::ApiRequestsPerSec => "slow down and retry after the Retry-After delay",
        }
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal by a quota: the one message every enforcing service answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "quota {quota} of this tenant is reached (limit {limit}); {}, or ask the platform operator \
     to raise it",
    .quota.remedy()
)]
pub struct QuotaExceeded {
    pub quota: Quota,
    pub limit: u64,
}

/// The message a suspended tenant's callers get.
pub fn suspended_message(reason: &str) -> String {
    format!("this tenant is suspended by the platform operator: {reason}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_refuses_at_its_limit_and_names_it() {
        let quotas = TenantQuotas {
            agents: Some(2),
            ..TenantQuotas::default()
        };
        assert!(quotas.admit(Quota::Agents, 1).is_ok());
        let refused = quotas.admit(Quota::Agents, 2).unwrap_err();
        assert_eq!(refused.limit, 2);
        let message = refused.to_string();
        assert!(
            message.contains("quota agents") && message.contains("limit 2"),
            "{message}"
        );
        // No limit is no quota.
        assert!(quotas.admit(Quota::Resources, u64::MAX).is_ok());
        let zero = TenantQuotas {
            findings: Some(0),
            ..TenantQuotas::default()
        };
        assert!(zero.admit(Quota::Findings, 0).is_err());
    }

    #[test]
    fn names_are_stable() {
        for quota in Quota::ALL {
            assert_eq!(
                serde_json::to_value(quota).unwrap(),
                serde_json::Value::String(quota.as_str().to_owned())
            );
            assert!(!quota.remedy().is_empty());
        }
        let parsed: TenantQuotas =
            serde_json::from_str(r#"{"agents": 3, "api_requests_per_sec": 5}"#).unwrap();
        assert_eq!(parsed.limit(Quota::Agents), Some(3));
        assert!(serde_json::from_str::<TenantQuotas>(r#"{"agentz": 3}"#).is_err());
    }
}
