//! The tenant's AI settings: `GET /api/settings/ai` and `PUT /api/settings/ai` (the body is
//! the domain's [`pulse_domain::ai_settings::SettingsPatchSchema`]).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use pulse_domain::ai_settings;
use pulse_domain::patrol::readiness::{PreflightRecord, PreflightState, TurnTransport};
use serde::{Deserialize, Serialize};

/// Where a provider's key comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeySource {
    Settings,
    Environment,
}

impl KeySource {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Settings => "settings",
            Self::Environment => "environment",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProviderView {
    pub configured: bool,
    pub key_source: Option<KeySource>,
    pub base_url: Option<String>,
    /// How Pulse talks to the provider (streaming, tool calls from text, timeout, Ollama's own
    /// options).
    #[serde(flatten)]
    pub options: ai_settings::ProviderOptions,
}

/// The `/api/settings/ai` response. Holds no key by construction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SettingsView {
    pub version: i64,
    pub updated_at: Option<DateTime<Utc>>,
    pub updated_by: Option<String>,
    pub providers: BTreeMap<String, ProviderView>,
    pub model: Option<String>,
    pub chat_model: Option<String>,
    pub patrol_model: Option<String>,
    pub auto_fix_model: Option<String>,
    /// Whether the Patrol route names the provider simulator (a `sim:` model): no real AI.
    pub patrol_model_simulated: bool,
    pub patrol_interval_minutes: u32,
    pub autonomy_level: ai_settings::AutonomyLevel,
    pub autopilot_acknowledgement: Option<ai_settings::Acknowledgement>,
    /// The acknowledgement version `full` currently requires.
    pub autopilot_acknowledgement_version: u32,
    pub alert_triggers: ai_settings::AlertTriggers,
    pub budgets: ai_settings::Budgets,
    /// The tenant's Patrol switch: off, no run starts (scheduled, alert-triggered or requested).
    pub patrol_enabled: bool,
    /// The last Patrol preflight (safe fields only); `null` until one ran.
    pub patrol_preflight: Option<PreflightView>,
    pub preflight_state: SettingsPreflightState,
}

/// Where the tenant's Patrol preflight stands for its current route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SettingsPreflightState {
    /// No preflight ran.
    NotRun,
    Passed,
    Warning,
    Failed,
    /// The last preflight checked another route or address than the current one.
    Stale,
}

impl From<PreflightState> for SettingsPreflightState {
    fn from(state: PreflightState) -> Self {
        match state {
            PreflightState::Passed => Self::Passed,
            PreflightState::Warning => Self::Warning,
            PreflightState::Failed => Self::Failed,
        }
    }
}

/// The safe fields of the last preflight: what failed, why and what to do; never a key or the
/// provider's raw error. The base URL is shown once, with its provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PreflightView {
    pub route: String,
    pub model: String,
    pub ok: bool,
    pub tool_call_observed: bool,
    /// The preflight's call was written as text and recovered: "tool calls recovered from text".
    pub tool_calls_recovered: u32,
    pub cause: Option<String>,
    pub summary: String,
    pub recommendation: Option<String>,
    pub action: Option<String>,
    pub checked_at: DateTime<Utc>,
    /// How the model's answer came: `streamed`, or `buffered` when the route does not stream
    /// (its setting, or a server that refused a streamed request with tools); `null` when no
    /// answer came.
    pub transport: Option<TurnTransport>,
}

impl From<&PreflightRecord> for PreflightView {
    fn from(record: &PreflightRecord) -> Self {
        Self {
            route: record.route.clone(),
            model: record.model.clone(),
            ok: record.ok,
            tool_call_observed: record.tool_call_observed,
            tool_calls_recovered: record.tool_calls_recovered,
            cause: record.cause.clone(),
            summary: record.summary.clone(),
            recommendation: record.recommendation.clone(),
            action: record.action.clone(),
            checked_at: record.checked_at,
            transport: record.transport,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_source_names_are_the_wire_names() {
        for source in [KeySource::Settings, KeySource::Environment] {
            assert_eq!(
                serde_json::to_string(&source).unwrap(),
                format!("\"{}\"", source.as_str())
            );
        }
    }
}
