//! Token scopes (ARCHITECTURE.md section 10).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What a token may do. `admin` does not imply the others: a route that needs `admin` and
/// `ai:execute` checks both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum Scope {
    #[serde(rename = "monitoring:read")]
    MonitoringRead,
    #[serde(rename = "ai:chat")]
    AiChat,
    #[serde(rename = "ai:execute")]
    AiExecute,
    #[serde(rename = "actions:plan")]
    ActionsPlan,
    #[serde(rename = "actions:approve")]
    ActionsApprove,
    #[serde(rename = "actions:execute")]
    ActionsExecute,
    #[serde(rename = "agent:report")]
    AgentReport,
    #[serde(rename = "agent:exec")]
    AgentExec,
    #[serde(rename = "admin")]
    Admin,
}

/// Scopes of this prefix name platform-operator authority. No tenant token carries one: they
/// are not [`Scope`]s, token creation refuses them by name, and the database refuses a tenant
/// token row holding one. Platform authority is a platform token (ADR 0010).
pub const PLATFORM_SCOPE_PREFIX: &str = "platform:";

/// Whether `value` names platform-operator authority rather than a tenant scope.
pub fn is_platform_scope(value: &str) -> bool {
    value
        .trim()
        .to_ascii_lowercase()
        .starts_with(PLATFORM_SCOPE_PREFIX)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown scope '{0}'")]
pub struct ScopeError(pub String);

impl Scope {
    pub const ALL: [Scope; 9] = [
        Scope::MonitoringRead,
        Scope::AiChat,
        Scope::AiExecute,
        Scope::ActionsPlan,
        Scope::ActionsApprove,
        Scope::ActionsExecute,
        Scope::AgentReport,
        Scope::AgentExec,
        Scope::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::MonitoringRead => "monitoring:read",
            Scope::AiChat => "ai:chat",
            Scope::AiExecute => "ai:execute",
            Scope::ActionsPlan => "actions:plan",
            Scope::ActionsApprove => "actions:approve",
            Scope::ActionsExecute => "actions:execute",
            Scope::AgentReport => "agent:report",
            Scope::AgentExec => "agent:exec",
            Scope::Admin => "admin",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = ScopeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s)
            .ok_or_else(|| ScopeError(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scope_round_trips_through_text_and_serde() {
        for scope in Scope::ALL {
            assert_eq!(scope.as_str().parse::<Scope>(), Ok(scope));
            let json = serde_json::to_string(&scope).unwrap();
            assert_eq!(json, format!("\"{}\"", scope.as_str()));
            assert_eq!(serde_json::from_str::<Scope>(&json).unwrap(), scope);
        }
        assert!("root".parse::<Scope>().is_err());
        for scope in Scope::ALL {
            assert!(!is_platform_scope(scope.as_str()), "{scope}");
        }
        assert!(is_platform_scope("platform:operator"));
        assert!(is_platform_scope(" Platform:admin"));
        assert!("platform:operator".parse::<Scope>().is_err());
    }
}
