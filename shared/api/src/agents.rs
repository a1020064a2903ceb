//! Agents: `DELETE /api/agents/{id}` forgets a decommissioned host's agent and its resources.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// What an agent id is written as (the relay accepts no other).
pub const AGENT_ID_PATTERN: &str = "^[A-Za-z0-9._-]{1,128}$";

/// An agent's id, as its host registered it (`DELETE /api/agents/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct AgentId(String);

impl AgentId {
    /// `text` as an agent id, when it can be one.
    pub fn parse(text: String) -> Option<Self> {
        let valid = (1..=128).contains(&text.len())
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        valid.then_some(AgentId(text))
    }

    /// What an agent id must be, for a refusal.
    pub fn requirement() -> &'static str {
        "must be 1 to 128 characters of letters, digits, '.', '_' and '-'"
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for AgentId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(text).ok_or_else(|| serde::de::Error::custom(Self::requirement()))
    }
}

impl JsonSchema for AgentId {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "AgentId".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "minLength": 1,
            "maxLength": 128,
            "pattern": AGENT_ID_PATTERN,
        })
    }
}

/// What forgetting an agent did.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgottenAgent {
    pub agent_id: String,
    /// The agent's status before: `online`, `offline` or `forgotten` (forgetting twice changes
    /// nothing). An agent that was online and still runs comes back with its next report.
    pub previous_status: String,
    /// How many of its resources were removed from the inventory (their alerts clear).
    pub resources_removed: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_id_is_what_the_relay_accepts() {
        for good in ["node-1", "m1.lan", "a_b", &"x".repeat(128)] {
            assert!(AgentId::parse(good.to_owned()).is_some(), "{good}");
        }
        for bad in ["", "a b", "a/b", "é", &"x".repeat(129)] {
            assert!(AgentId::parse(bad.to_owned()).is_none(), "{bad}");
        }
    }
}
