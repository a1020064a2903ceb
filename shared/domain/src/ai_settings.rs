//! Tenant AI settings (`/api/settings/ai`): the closed document, its validation and merge-patch
//! semantics. Provider keys never live in the document; a patch carries them out separately as
//! [`KeyChange`]s so the caller can encrypt them.
//!
//! Layering: compiled defaults, then the operator's config (`ai.*`), then the tenant's stored
//! document. Each layer is a sparse JSON object; [`resolve`] merges them (RFC 7396) and validates
//! the result in one place.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use pulse_providers::registry;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::alert_rules::AlertRule;

/// Provider ids a route may name, in the order settings list them: derived from the provider
/// table, which owns them.
pub use pulse_providers::registry::PROVIDER_IDS;

/// The Autopilot (`full`) acknowledgement text version an operator must have accepted.
pub const AUTOPILOT_ACK_VERSION: u32 = 1;

pub const PATROL_INTERVAL_MIN: u32 = 10;
pub const PATROL_INTERVAL_MAX: u32 = 10_080;
pub const DEFAULT_PATROL_INTERVAL_MINUTES: u32 = 360;
pub const MAX_BASE_URL_CHARS: usize = 2_048;
pub const MAX_API_KEY_CHARS: usize = 4_096;
pub const MAX_ROUTE_CHARS: usize = 512;
pub const MAX_ACKNOWLEDGED_BY_CHARS: usize = 200;
/// Bounds of a provider's `request_timeout_seconds`: a whole model turn, from sending to the last
/// byte (a small model on a CPU may need minutes).
pub const REQUEST_TIMEOUT_MIN_SECONDS: u32 = 5;
pub const REQUEST_TIMEOUT_MAX_SECONDS: u32 = 3_600;
/// The request timeout of a provider that sets none.
pub const DEFAULT_REQUEST_TIMEOUT_SECONDS: u32 = 300;
/// Bounds of Ollama's `num_ctx` (the context window, in tokens).
pub const NUM_CTX_MIN: u32 = 512;
pub const NUM_CTX_MAX: u32 = 1_048_576;
/// Longest Ollama `keep_alive` text (a Go duration like `10m` or `-1m`).
pub const MAX_KEEP_ALIVE_CHARS: usize = 32;

/// Why a settings document or patch was refused. Every variant names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("{field}: unknown field")]
    UnknownField { field: String },
    #[error("{field}: {reason}")]
    InvalidValue { field: String, reason: String },
    #[error("{field}: {reason}")]
    InvalidRoute { field: String, reason: String },
    #[error("{field}: unknown provider {provider:?}")]
    UnknownProvider { field: String, provider: String },
    #[error("{field}: must be between {min} and {max}")]
    OutOfRange { field: String, min: u64, max: u64 },
    #[error("{field}: {reason}")]
    InvalidUrl { field: String, reason: String },
    #[error("{field}: expected a non-negative decimal amount of dollars as text, like \"12.50\"")]
    InvalidAmount { field: String },
    #[error(
        "autonomy_level: full (Autopilot) requires autopilot_acknowledgement with version {required_version}"
    )]
    AutopilotNotAcknowledged { required_version: u32 },
}

impl SettingsError {
    /// The dotted path of the offending field.
    pub fn field(&self) -> &str {
        match self {
            Self::UnknownField { field }
            | Self::InvalidValue { field, .. }
            | Self::InvalidRoute { field, .. }
            | Self::UnknownProvider { field, .. }
            | Self::OutOfRange { field, .. }
            | Self::InvalidUrl { field, .. }
            | Self::InvalidAmount { field } => field,
            Self::AutopilotNotAcknowledged { .. } => "autonomy_level",
        }
    }
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> SettingsError {
    SettingsError::InvalidValue {
        field: field.into(),
        reason: reason.into(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum AutonomyLevel {
    /// Watch only: findings, no actions.
    Monitor,
    /// Ask first.
    Approval,
    /// Safe auto-fix.
    Assisted,
    /// Autopilot.
    Full,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum MinSeverity {
    Warning,
    Critical,
}

impl MinSeverity {
    pub const ALL: [MinSeverity; 2] = [Self::Warning, Self::Critical];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Warning => "warning",
            Self::Critical => "critical",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|level| level.as_str() == s)
    }
}

/// A human's acceptance of the Autopilot terms, versioned so a new text needs a new acceptance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Acknowledgement {
    pub version: u32,
    pub acknowledged_by: String,
    pub at: DateTime<Utc>,
}

/// Whether firing alerts start a Patrol investigation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct AlertTriggers {
    pub enabled: bool,
    pub min_severity: MinSeverity,
    /// Alert rules that trigger; empty means every rule.
    pub alert_types: Vec<String>,
}

/// Spending limits; `None` is unlimited. Dollars are decimal text so no float rounding applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Budgets {
    pub daily_usd: Option<String>,
    pub monthly_usd: Option<String>,
    pub daily_tokens: Option<u64>,
    pub monthly_tokens: Option<u64>,
}

/// A provider's non-secret settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ProviderSettings {
    pub base_url: Option<String>,
    #[serde(flatten)]
    pub options: ProviderOptions,
}

/// A three-way provider switch: `auto` lets Pulse decide by what the route is and how it
/// answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum AutoSwitch {
    #[default]
    Auto,
    On,
    Off,
}

impl AutoSwitch {
    pub const ALL: [AutoSwitch; 3] = [Self::Auto, Self::On, Self::Off];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::On => "on",
            Self::Off => "off",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// On or off, with `auto` taking `auto_means`.
    pub fn resolve(self, auto_means: bool) -> bool {
        match self {
            Self::Auto => auto_means,
            Self::On => true,
            Self::Off => false,
        }
    }
}

/// How Pulse talks to one provider, beyond its address and key. Absent fields take Pulse's
/// defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
// A reader of an answer without them (an older gateway) takes the defaults.
#[serde(default)]
pub struct ProviderOptions {
    /// Whether model turns are streamed: `auto` streams, and a server that refuses a streamed
    /// request with tools is asked again without streaming (remembered until the settings
    /// change); `off` never streams; `on` always does.
    pub streaming: AutoSwitch,
    /// Whether tool calls a model writes as text (a JSON object with `name` and `arguments`,
    /// `<tool_call>` tags, ...) become tool calls when they name an offered tool with valid
    /// arguments: `auto` is on for model servers the operator runs, off for hosted APIs.
    pub tool_calls_from_text: AutoSwitch,
    /// Bound of one whole model turn, in seconds; `null`: 300.
    pub request_timeout_seconds: Option<u32>,
    /// Ollama only: how long the server keeps the model loaded after a request (a Go duration,
    /// `10m`; negative keeps it loaded).
    pub keep_alive: Option<String>,
    /// Ollama only: the context window in tokens (`options.num_ctx`).
    pub num_ctx: Option<u32>,
    /// Ollama only: whether a thinking model thinks before answering.
    pub think: Option<bool>,
}

impl ProviderOptions {
    /// The request timeout in seconds, the default when unset.
    pub fn request_timeout_seconds(&self) -> u32 {
        self.request_timeout_seconds
            .unwrap_or(DEFAULT_REQUEST_TIMEOUT_SECONDS)
    }
}

/// A parsed `provider:model` route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRoute {
    pub provider: &'static str,
    pub model: String,
}

impl ModelRoute {
    /// Parses `provider:model`; only the first `:` separates (`ollama:llama3.1:8b`).
    pub fn parse(field: &str, input: &str) -> Result<Self, SettingsError> {
        let route_error = |reason: &str| SettingsError::InvalidRoute {
            field: field.to_owned(),
            reason: reason.to_owned(),
        };
        let input = input.trim();
        if input.is_empty() {
            return Err(route_error("the model route is empty"));
        }
        if input.chars().count() > MAX_ROUTE_CHARS {
            return Err(route_error("the model route is too long"));
        }
        if input.chars().any(char::is_control) {
            return Err(route_error("the model route contains control characters"));
        }
        let Some((provider, model)) = input.split_once(':') else {
            return Err(route_error(
                "expected provider:model, like openai:gpt-4.1-mini",
            ));
        };
        let Some(provider) = registry::lookup(provider).map(|entry| entry.id) else {
            return Err(SettingsError::UnknownProvider {
                field: field.to_owned(),
                provider: provider.to_owned(),
            });
        };
        if model.trim().is_empty() {
            return Err(route_error("the model route names no model"));
        }
        Ok(Self {
            provider,
            model: model.to_owned(),
        })
    }
}

/// Models named `sim:<behaviour>` are answered by the provider simulator, not by a real model;
/// the API and the logs say so.
pub const SIMULATED_MODEL_PREFIX: &str = "sim:";

impl ModelRoute {
    /// Whether this route reaches the provider simulator (no real AI).
    pub fn is_simulated(&self) -> bool {
        self.model.starts_with(SIMULATED_MODEL_PREFIX)
    }
}

impl std::fmt::Display for ModelRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.provider, self.model)
    }
}

/// The effective, validated settings of a tenant (no secrets).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct AiSettings {
    pub providers: BTreeMap<String, ProviderSettings>,
    pub model: Option<String>,
    pub chat_model: Option<String>,
    pub patrol_model: Option<String>,
    pub auto_fix_model: Option<String>,
    pub patrol_interval_minutes: u32,
    pub autonomy_level: AutonomyLevel,
    pub autopilot_acknowledgement: Option<Acknowledgement>,
    pub alert_triggers: AlertTriggers,
    pub budgets: Budgets,
    /// The tenant's Patrol switch: when off no run starts (scheduled, alert-triggered or
    /// requested). On unless the tenant turned it off.
    pub patrol_enabled: bool,
}

impl AiSettings {
    /// The route Patrol uses: `patrol_model`, else `model`.
    pub fn patrol_route(&self) -> Option<ModelRoute> {
        let (field, text) = match (&self.patrol_model, &self.model) {
            (Some(route), _) => ("patrol_model", route),
            (None, Some(route)) => ("model", route),
            (None, None) => return None,
        };
        ModelRoute::parse(field, text).ok()
    }

    /// The Assistant's route: `chat_model`, else `model`. No other fallback: a chat never runs
    /// on a route the operator did not choose for it.
    pub fn chat_route(&self) -> Option<ModelRoute> {
        let (field, text) = match (&self.chat_model, &self.model) {
            (Some(route), _) => ("chat_model", route),
            (None, Some(route)) => ("model", route),
            (None, None) => return None,
        };
        ModelRoute::parse(field, text).ok()
    }

    pub fn base_url(&self, provider: &str) -> Option<&str> {
        self.providers.get(provider)?.base_url.as_deref()
    }

    /// The provider's options, the defaults when it has none.
    pub fn provider_options(&self, provider: &str) -> ProviderOptions {
        self.providers
            .get(provider)
            .map(|p| p.options.clone())
            .unwrap_or_default()
    }

    /// Whether Patrol's transport differs between `self` and `next`: the route or its
    /// provider's base URL or options. Key changes are the caller's to add (see [`SettingsPatch`]).
    pub fn patrol_transport_differs(&self, next: &AiSettings) -> bool {
        let (before, after) = (self.patrol_route(), next.patrol_route());
        if before != after {
            return true;
        }
        match after {
            Some(route) => {
                self.base_url(route.provider) != next.base_url(route.provider)
                    || self.provider_options(route.provider)
                        != next.provider_options(route.provider)
            }
            None => false,
        }
    }
}

/// `events.settings.changed`: a tenant saved its AI settings. `patrol_route_changed` tells the
/// model-runner to run a preflight; routine saves carry `false`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct SettingsChanged {
    pub version: i64,
    pub patrol_route_changed: bool,
}

/// What a patch does to a provider's stored key.
#[derive(Clone, PartialEq, Eq)]
pub enum KeyChange {
    Set(String),
    Clear,
}

impl std::fmt::Debug for KeyChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Set(_) => f.write_str("Set(<redacted>)"),
            Self::Clear => f.write_str("Clear"),
        }
    }
}

/// A validated PUT body split into the secret-free document patch and the key changes.
#[derive(Debug, Clone, PartialEq)]
pub struct SettingsPatch {
    /// Merge patch over the stored document; never contains `api_key`.
    pub document: Value,
    pub keys: BTreeMap<String, KeyChange>,
}

impl SettingsPatch {
    /// Top-level and nested field paths this patch touches, for the audit record.
    pub fn changed_fields(&self) -> Vec<String> {
        let mut fields = Vec::new();
        if let Value::Object(map) = &self.document {
            collect_paths("", map, &mut fields);
        }
        for provider in self.keys.keys() {
            fields.push(format!("providers.{provider}.api_key"));
        }
        fields.sort();
        fields.dedup();
        fields
    }
}

fn collect_paths(prefix: &str, map: &Map<String, Value>, out: &mut Vec<String>) {
    for (key, value) in map {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            // Provider entries and the other sections are reported per leaf.
            Value::Object(inner) if !inner.is_empty() && key != "autopilot_acknowledgement" => {
                collect_paths(&path, inner, out)
            }
            _ => out.push(path),
        }
    }
}

/// A `PUT /api/settings/ai` body built field by field (a form does), read by [`parse_patch`]
/// like any JSON body: a field left `None` is unchanged, `Some(None)` resets it to the layer
/// below. It holds no Autopilot acknowledgement: the gateway binds that to the calling user, from
/// a JSON body.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PatchBody {
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub providers: BTreeMap<String, ProviderPatch>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat_model: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patrol_model: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_fix_model: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patrol_interval_minutes: Option<Option<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autonomy_level: Option<Option<AutonomyLevel>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alert_triggers: Option<AlertTriggersPatch>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budgets: Option<BudgetsPatch>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patrol_enabled: Option<Option<bool>>,
    /// The Autopilot acknowledgement, already bound to the person who gave it (the web UI binds
    /// it to the signed-in user; the JSON route binds a body's to the caller before parsing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autopilot_acknowledgement: Option<Acknowledgement>,
}

impl PatchBody {
    /// The patch this body asks for, checked as a JSON body is.
    pub fn parse(&self) -> Result<SettingsPatch, SettingsError> {
        let body = serde_json::to_value(self).map_err(|e| invalid("body", e.to_string()))?;
        parse_patch(&body)
    }
}

/// One provider's part of a [`PatchBody`]; `api_key: Some(None)` clears the stored key.
#[derive(Clone, Default, PartialEq, Serialize)]
pub struct ProviderPatch {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub streaming: Option<Option<AutoSwitch>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls_from_text: Option<Option<AutoSwitch>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_timeout_seconds: Option<Option<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_alive: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_ctx: Option<Option<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub think: Option<Option<bool>>,
}

impl std::fmt::Debug for ProviderPatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let api_key = match &self.api_key {
            None => "unchanged",
            Some(None) => "cleared",
            Some(Some(_)) => "<redacted>",
        };
        f.debug_struct("ProviderPatch")
            .field("api_key", &api_key)
            .field("base_url", &self.base_url)
            .field("streaming", &self.streaming)
            .field("tool_calls_from_text", &self.tool_calls_from_text)
            .field("request_timeout_seconds", &self.request_timeout_seconds)
            .field("keep_alive", &self.keep_alive)
            .field("num_ctx", &self.num_ctx)
            .field("think", &self.think)
            .finish()
    }
}

/// The alert triggers' part of a [`PatchBody`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AlertTriggersPatch {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<Option<bool>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_severity: Option<Option<MinSeverity>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alert_types: Option<Option<Vec<AlertRule>>>,
}

/// The budgets' part of a [`PatchBody`]; dollars are decimal text ([`is_dollar_amount`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BudgetsPatch {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daily_usd: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub monthly_usd: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daily_tokens: Option<Option<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub monthly_tokens: Option<Option<u64>>,
}

const TOP_FIELDS: &[&str] = &[
    "providers",
    "model",
    "chat_model",
    "patrol_model",
    "auto_fix_model",
    "patrol_interval_minutes",
    "autonomy_level",
    "autopilot_acknowledgement",
    "alert_triggers",
    "budgets",
    "patrol_enabled",
];
/// A provider entry's fields; the key comes first, so the rest are a stored layer's.
const PROVIDER_FIELDS: &[&str] = &[
    "api_key",
    "base_url",
    "streaming",
    "tool_calls_from_text",
    "request_timeout_seconds",
    "keep_alive",
    "num_ctx",
    "think",
];
/// The fields of a provider's entry in a stored layer: all but its key.
const PROVIDER_LAYER_FIELDS: &[&str] = PROVIDER_FIELDS.split_at(1).1;
/// The provider fields only Ollama reads.
const OLLAMA_FIELDS: &[&str] = &["keep_alive", "num_ctx", "think"];
const ALERT_TRIGGER_FIELDS: &[&str] = &["enabled", "min_severity", "alert_types"];
const BUDGET_FIELDS: &[&str] = &["daily_usd", "monthly_usd", "daily_tokens", "monthly_tokens"];

/// The body of `PUT /api/settings/ai` as [`parse_patch`] accepts it (RFC 7396: `null` resets a
/// field), as JSON Schema: every field and its rule, from the constants the parser checks with.
#[cfg(feature = "schemars")]
pub struct SettingsPatchSchema;

#[cfg(feature = "schemars")]
impl schemars::JsonSchema for SettingsPatchSchema {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SettingsPatch".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        use crate::text::{self, BLANK, CONTROL, WHITE_SPACE};
        use serde_json::json;
        let nullable = |schema: Value| json!({"anyOf": [schema, {"type": "null"}]});
        let blank = text::class(BLANK);
        let control = text::class(CONTROL);
        let ws = text::class(WHITE_SPACE);
        // `provider:model`, read trimmed: a known provider, a model with content.
        let providers = PROVIDER_IDS.join("|");
        let route = json!({
            "type": "string",
            "maxLength": MAX_ROUTE_CHARS,
            "pattern": format!("^[{ws}]*({providers}):[^{control}]*[^{blank}][^{control}]*[{ws}]*$"),
        });
        // An http(s) URL: a host (a name, or an IPv6 address in brackets), an optional port of 0
        // to 65535, no credentials, no white space.
        let port =
            "(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})";
        let url = json!({
            "type": "string",
            "maxLength": MAX_BASE_URL_CHARS,
            "pattern": format!(
                "^https?://(\\[{IPV6}\\]|[^\\[\\]:/?#@{blank}]+)(:{port})?([/?#][^{blank}]*)?$"
            ),
        });
        // An API key: no control characters, no surrounding white space; "" clears it.
        let key = json!({
            "type": "string",
            "maxLength": MAX_API_KEY_CHARS,
            "pattern": format!("^([^{blank}]([^{control}]*[^{blank}])?)?$"),
        });
        let switch = generator.subschema_for::<AutoSwitch>().to_value();
        // Every provider's fields; Ollama's entries add the three only Ollama reads.
        let mut common = Map::new();
        common.insert("api_key".into(), nullable(key));
        common.insert("base_url".into(), nullable(url));
        common.insert("streaming".into(), nullable(switch.clone()));
        common.insert("tool_calls_from_text".into(), nullable(switch));
        common.insert(
            "request_timeout_seconds".into(),
            nullable(json!({
                "type": "integer",
                "minimum": REQUEST_TIMEOUT_MIN_SECONDS,
                "maximum": REQUEST_TIMEOUT_MAX_SECONDS,
            })),
        );
        let mut ollama_fields = common.clone();
        ollama_fields.insert(
            "keep_alive".into(),
            nullable(json!({
                "type": "string",
                "maxLength": MAX_KEEP_ALIVE_CHARS,
                "pattern": KEEP_ALIVE_PATTERN,
            })),
        );
        ollama_fields.insert(
            "num_ctx".into(),
            nullable(json!({
                "type": "integer",
                "minimum": NUM_CTX_MIN,
                "maximum": NUM_CTX_MAX,
            })),
        );
        ollama_fields.insert("think".into(), nullable(json!({"type": "boolean"})));
        let provider = json!({
            "type": "object",
            "properties": common,
            "additionalProperties": false,
        });
        let ollama_provider = json!({
            "type": "object",
            "properties": ollama_fields,
            "additionalProperties": false,
        });
        let ollama_entries: Map<String, Value> = PROVIDER_IDS
            .iter()
            .filter(|id| is_ollama(id))
            .map(|id| ((*id).to_owned(), nullable(ollama_provider.clone())))
            .collect();
        let rules: Vec<&str> = AlertRule::ALL.iter().map(|r| r.as_str()).collect();
        let triggers = json!({
            "type": "object",
            "properties": {
                "enabled": nullable(json!({"type": "boolean"})),
                "min_severity": nullable(generator.subschema_for::<MinSeverity>().to_value()),
                "alert_types": nullable(json!({"type": "array", "items": {"enum": rules}})),
            },
            "additionalProperties": false,
        });
        let dollars =
            nullable(json!({"type": "string", "pattern": "^[0-9]{1,12}(\\.[0-9]{1,6})?$"}));
        let tokens = nullable(json!({"type": "integer", "minimum": 0, "maximum": u64::MAX}));
        let budgets = json!({
            "type": "object",
            "properties": {
                "daily_usd": dollars, "monthly_usd": dollars,
                "daily_tokens": tokens, "monthly_tokens": tokens,
            },
            "additionalProperties": false,
        });
        let acknowledgement = json!({
            "type": "object",
            "description": "acknowledged_by and at are set by the gateway to the calling user and now",
            "properties": {
                "version": {"type": "integer", "minimum": 0, "maximum": u32::MAX},
                "acknowledged_by": {},
                "at": {},
            },
            "required": ["version"],
            "additionalProperties": false,
        });
        let mut properties = Map::new();
        for field in TOP_FIELDS {
            let schema = match *field {
                "providers" => json!({
                    "type": "object",
                    "propertyNames": {"enum": PROVIDER_IDS},
                    "properties": ollama_entries.clone(),
                    "additionalProperties": nullable(provider.clone()),
                }),
                "model" | "chat_model" | "patrol_model" | "auto_fix_model" => route.clone(),
                "patrol_interval_minutes" => json!({
                    "type": "integer",
                    "minimum": PATROL_INTERVAL_MIN,
                    "maximum": PATROL_INTERVAL_MAX,
                }),
                "autonomy_level" => generator.subschema_for::<AutonomyLevel>().to_value(),
                "autopilot_acknowledgement" => acknowledgement.clone(),
                "alert_triggers" => triggers.clone(),
                "budgets" => budgets.clone(),
                "patrol_enabled" => json!({"type": "boolean"}),
                _ => json!({}),
            };
            properties.insert((*field).to_owned(), nullable(schema));
        }
        schemars::json_schema!({
            "type": "object",
            "description": format!(
                "Only the fields to change; null resets one. autonomy_level full needs an \
                 autopilot_acknowledgement of version {AUTOPILOT_ACK_VERSION} (in this body or \
                 already saved)."
            ),
            "properties": properties,
            "additionalProperties": false,
        })
    }
}

/// An IPv6 address in its hexadecimal forms (`std::net::Ipv6Addr` reads these and also the forms
/// with an embedded IPv4 address, which the document leaves out).
#[cfg(feature = "schemars")]
const IPV6: &str = "(([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,7}:|\
([0-9a-fA-F]{1,4}:){1,6}:[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,5}(:[0-9a-fA-F]{1,4}){1,2}|\
([0-9a-fA-F]{1,4}:){1,4}(:[0-9a-fA-F]{1,4}){1,3}|([0-9a-fA-F]{1,4}:){1,3}(:[0-9a-fA-F]{1,4}){1,4}|\
([0-9a-fA-F]{1,4}:){1,2}(:[0-9a-fA-F]{1,4}){1,5}|[0-9a-fA-F]{1,4}:(:[0-9a-fA-F]{1,4}){1,6}|\
:((:[0-9a-fA-F]{1,4}){1,7}|:))";

/// Numbers with no fractional part as integers (`600.0` is `600`), as JSON Schema's `integer`
/// reads them; only floats that stand for one integer exactly.
fn whole_numbers_as_integers(value: &mut Value) {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    match value {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => {
            if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < EXACT) {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_numbers_as_integers),
        Value::Object(map) => map.values_mut().for_each(whole_numbers_as_integers),
        _ => {}
    }
}

fn object<'a>(field: &str, value: &'a Value) -> Result<&'a Map<String, Value>, SettingsError> {
    value
        .as_object()
        .ok_or_else(|| invalid(field, "expected a JSON object"))
}

fn check_known(
    prefix: &str,
    map: &Map<String, Value>,
    known: &[&str],
) -> Result<(), SettingsError> {
    match map.keys().find(|key| !known.contains(&key.as_str())) {
        Some(key) => Err(SettingsError::UnknownField {
            field: join(prefix, key),
        }),
        None => Ok(()),
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

/// Checks the shape of a PUT body (closed, typed, valid values) and separates the keys.
/// Absent fields are unchanged, `null` resets to the layer below; for `api_key` a string sets
/// it and `""` or `null` clears it.
pub fn parse_patch(body: &Value) -> Result<SettingsPatch, SettingsError> {
    let mut document = object("body", body)?.clone();
    document.values_mut().for_each(whole_numbers_as_integers);
    check_known("", &document, TOP_FIELDS)?;
    let mut keys = BTreeMap::new();
    if let Some(providers) = document.get_mut("providers")
        && !providers.is_null()
    {
        let providers = providers
            .as_object_mut()
            .ok_or_else(|| invalid("providers", "expected a JSON object"))?;
        for (id, entry) in providers.iter_mut() {
            let field = format!("providers.{id}");
            if registry::lookup(id).is_none() {
                return Err(SettingsError::UnknownProvider {
                    field,
                    provider: id.clone(),
                });
            }
            if entry.is_null() {
                // Resets the base URL; the key is cleared only when named.
                continue;
            }
            let entry = entry
                .as_object_mut()
                .ok_or_else(|| invalid(&field, "expected a JSON object"))?;
            check_known(&field, entry, PROVIDER_FIELDS)?;
            if let Some(key) = entry.remove("api_key") {
                keys.insert(id.clone(), key_change(&format!("{field}.api_key"), &key)?);
            }
        }
        providers.retain(|_, entry| !matches!(entry, Value::Object(map) if map.is_empty()));
    }
    if matches!(document.get("providers"), Some(Value::Object(map)) if map.is_empty()) {
        document.remove("providers");
    }
    let document = Value::Object(document);
    // Each present field must be valid on its own; cross-field rules apply after merging.
    validate_layer(&document)?;
    Ok(SettingsPatch { document, keys })
}

fn key_change(field: &str, value: &Value) -> Result<KeyChange, SettingsError> {
    match value {
        Value::Null => Ok(KeyChange::Clear),
        Value::String(text) if text.is_empty() => Ok(KeyChange::Clear),
        Value::String(text) => {
            if text.chars().count() > MAX_API_KEY_CHARS {
                return Err(invalid(
                    field,
                    format!("at most {MAX_API_KEY_CHARS} characters"),
                ));
            }
            if text.chars().any(char::is_control) || text.trim() != text {
                return Err(invalid(
                    field,
                    "must not contain control characters or surrounding whitespace",
                ));
            }
            Ok(KeyChange::Set(text.clone()))
        }
        _ => Err(invalid(field, "expected a string, \"\" or null")),
    }
}

/// Validates every non-null field of one sparse layer (a stored document, a config layer or a
/// patch without keys).
pub fn validate_layer(layer: &Value) -> Result<(), SettingsError> {
    let map = object("body", layer)?;
    check_known("", map, TOP_FIELDS)?;
    for (key, value) in map {
        if value.is_null() {
            continue;
        }
        match key.as_str() {
            "providers" => {
                for (id, entry) in object("providers", value)? {
                    let field = format!("providers.{id}");
                    if registry::lookup(id).is_none() {
                        return Err(SettingsError::UnknownProvider {
                            field,
                            provider: id.clone(),
                        });
                    }
                    if entry.is_null() {
                        continue;
                    }
                    let entry = object(&field, entry)?;
                    // A layer holds no keys: they were separated or belong to credentials.
                    check_known(&field, entry, PROVIDER_LAYER_FIELDS)?;
                    provider_layer(id, &field, entry)?;
                }
            }
            "model" | "chat_model" | "patrol_model" | "auto_fix_model" => {
                let text = value
                    .as_str()
                    .ok_or_else(|| invalid(key, "expected a provider:model string or null"))?;
                ModelRoute::parse(key, text)?;
            }
            "patrol_interval_minutes" => {
                let minutes = value.as_u64().filter(|m| {
                    (u64::from(PATROL_INTERVAL_MIN)..=u64::from(PATROL_INTERVAL_MAX)).contains(m)
                });
                if minutes.is_none() {
                    return Err(SettingsError::OutOfRange {
                        field: key.clone(),
                        min: PATROL_INTERVAL_MIN.into(),
                        max: PATROL_INTERVAL_MAX.into(),
                    });
                }
            }
            "autonomy_level" => {
                serde_json::from_value::<AutonomyLevel>(value.clone()).map_err(|_| {
                    invalid(key, "expected one of monitor, approval, assisted, full")
                })?;
            }
            "autopilot_acknowledgement" => {
                let ack =
                    serde_json::from_value::<Acknowledgement>(value.clone()).map_err(|e| {
                        invalid(
                            key,
                            format!("expected {{version, acknowledged_by, at}}: {e}"),
                        )
                    })?;
                let by = ack.acknowledged_by.trim();
                if by.is_empty()
                    || by.chars().count() > MAX_ACKNOWLEDGED_BY_CHARS
                    || by.chars().any(char::is_control)
                {
                    return Err(invalid(
                        "autopilot_acknowledgement.acknowledged_by",
                        format!("1 to {MAX_ACKNOWLEDGED_BY_CHARS} printable characters"),
                    ));
                }
            }
            "alert_triggers" => alert_triggers_layer(value)?,
            "budgets" => budgets_layer(value)?,
            "patrol_enabled" => {
                value
                    .as_bool()
                    .ok_or_else(|| invalid(key, "expected true or false"))?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn alert_triggers_layer(value: &Value) -> Result<(), SettingsError> {
    let map = object("alert_triggers", value)?;
    check_known("alert_triggers", map, ALERT_TRIGGER_FIELDS)?;
    for (key, value) in map.iter().filter(|(_, v)| !v.is_null()) {
        let field = join("alert_triggers", key);
        match key.as_str() {
            "enabled" => {
                value
                    .as_bool()
                    .ok_or_else(|| invalid(&field, "expected true or false"))?;
            }
            "min_severity" => {
                serde_json::from_value::<MinSeverity>(value.clone())
                    .map_err(|_| invalid(&field, "expected warning or critical"))?;
            }
            "alert_types" => {
                let items = value
                    .as_array()
                    .ok_or_else(|| invalid(&field, "expected an array of alert rule names"))?;
                for item in items {
                    let known = item
                        .as_str()
                        .is_some_and(|name| AlertRule::ALL.iter().any(|r| r.as_str() == name));
                    if !known {
                        let names: Vec<&str> = AlertRule::ALL.iter().map(|r| r.as_str()).collect();
                        return Err(invalid(
                            &field,
                            format!("{item} is not one of {}", names.join(", ")),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn budgets_layer(value: &Value) -> Result<(), SettingsError> {
    let map = object("budgets", value)?;
    check_known("budgets", map, BUDGET_FIELDS)?;
    for (key, value) in map.iter().filter(|(_, v)| !v.is_null()) {
        let field = join("budgets", key);
        match key.as_str() {
            "daily_usd" | "monthly_usd" => {
                if !value.as_str().is_some_and(is_dollar_amount) {
                    return Err(SettingsError::InvalidAmount { field });
                }
            }
            _ => {
                if value.as_u64().is_none() {
                    return Err(invalid(
                        &field,
                        "expected a non-negative whole number of tokens or null",
                    ));
                }
            }
        }
    }
    Ok(())
}

/// `digits[.digits]`, at most 12 integer and 6 fractional digits.
pub fn is_dollar_amount(text: &str) -> bool {
    let (whole, fraction) = match text.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (text, None),
    };
    let digits = |s: &str, max: usize| {
        !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_digit())
    };
    digits(whole, 12) && fraction.is_none_or(|f| digits(f, 6))
}

/// A Go duration as Ollama's `keep_alive` reads it: `10m`, `1h30m`, `-1m`, `0s`.
pub const KEEP_ALIVE_PATTERN: &str = "^-?([0-9]+(\\.[0-9]+)?(ns|us|ms|s|m|h))+$";

/// Whether `text` is a Go duration Ollama's `keep_alive` reads (see [`KEEP_ALIVE_PATTERN`]).
pub fn is_keep_alive(text: &str) -> bool {
    if text.is_empty() || text.len() > MAX_KEEP_ALIVE_CHARS {
        return false;
    }
    let mut rest = text.strip_prefix('-').unwrap_or(text);
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        if let Some(fraction) = rest.strip_prefix('.') {
            let digits = fraction
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(fraction.len());
            if digits == 0 {
                return false;
            }
            rest = &fraction[digits..];
        }
        let Some(unit) = ["ns", "us", "ms", "s", "m", "h"]
            .into_iter()
            .find(|unit| rest.starts_with(unit))
        else {
            return false;
        };
        rest = &rest[unit.len()..];
    }
    true
}

/// Whether provider `id` speaks Ollama's protocol, the one that reads `keep_alive`, `num_ctx`
/// and `think`.
pub fn is_ollama(id: &str) -> bool {
    registry::lookup(id).is_some_and(|p| p.protocol == pulse_providers::Protocol::Ollama)
}

/// The address provider `id` is reached at when its settings give none.
pub fn default_base_url(id: &str) -> Option<&'static str> {
    registry::lookup(id).and_then(|p| p.default_base_url)
}

/// The non-key fields of provider `id`'s entry in one layer.
fn provider_layer(id: &str, field: &str, entry: &Map<String, Value>) -> Result<(), SettingsError> {
    let ollama =
        registry::lookup(id).is_some_and(|p| p.protocol == pulse_providers::Protocol::Ollama);
    for (key, value) in entry {
        if value.is_null() {
            continue;
        }
        let path = format!("{field}.{key}");
        if OLLAMA_FIELDS.contains(&key.as_str()) && !ollama {
            return Err(invalid(
                path,
                format!("only Ollama reads {key}; set it on the ollama provider"),
            ));
        }
        match key.as_str() {
            "base_url" => base_url(&path, value)?,
            "streaming" | "tool_calls_from_text"
                if value.as_str().and_then(AutoSwitch::parse).is_none() =>
            {
                return Err(invalid(path, "expected \"auto\", \"on\" or \"off\""));
            }
            "request_timeout_seconds" => {
                let seconds = value.as_u64().filter(|s| {
                    (u64::from(REQUEST_TIMEOUT_MIN_SECONDS)
                        ..=u64::from(REQUEST_TIMEOUT_MAX_SECONDS))
                        .contains(s)
                });
                if seconds.is_none() {
                    return Err(SettingsError::OutOfRange {
                        field: path,
                        min: REQUEST_TIMEOUT_MIN_SECONDS.into(),
                        max: REQUEST_TIMEOUT_MAX_SECONDS.into(),
                    });
                }
            }
            "num_ctx" => {
                let tokens = value
                    .as_u64()
                    .filter(|n| (u64::from(NUM_CTX_MIN)..=u64::from(NUM_CTX_MAX)).contains(n));
                if tokens.is_none() {
                    return Err(SettingsError::OutOfRange {
                        field: path,
                        min: NUM_CTX_MIN.into(),
                        max: NUM_CTX_MAX.into(),
                    });
                }
            }
            "keep_alive" if !value.as_str().is_some_and(is_keep_alive) => {
                return Err(invalid(
                    path,
                    "expected a duration like \"10m\", \"1h30m\" or \"-1m\" (kept loaded)",
                ));
            }
            "think" if !value.is_boolean() => {
                return Err(invalid(path, "expected true, false or null"));
            }
            _ => {}
        }
    }
    Ok(())
}

fn base_url(field: &str, value: &Value) -> Result<(), SettingsError> {
    let bad = |reason: &str| SettingsError::InvalidUrl {
        field: field.to_owned(),
        reason: reason.to_owned(),
    };
    let text = value
        .as_str()
        .ok_or_else(|| bad("expected an http(s) URL string or null"))?;
    if text.chars().count() > MAX_BASE_URL_CHARS {
        return Err(bad("the URL is too long"));
    }
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("the URL must not contain whitespace"));
    }
    let rest = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://"))
        .ok_or_else(|| bad("expected an http:// or https:// URL"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    if authority.contains('@') {
        return Err(bad("credentials belong in api_key, not in the URL"));
    }
    let host_only = if host.starts_with('[') {
        host.split(']').next().unwrap_or_default()
    } else {
        host.split(':').next().unwrap_or_default()
    };
    if host_only.is_empty() || host_only == "[" {
        return Err(bad("the URL names no host"));
    }
    if let Some(literal) = host_only.strip_prefix('[')
        && (!host.starts_with(&format!("{host_only}]"))
            || literal.parse::<std::net::Ipv6Addr>().is_err())
    {
        return Err(bad("a bracketed host is an IPv6 address"));
    }
    if let Some(port) = host.strip_prefix(host_only).and_then(|p| {
        p.strip_prefix(']')
            .unwrap_or(p)
            .strip_prefix(':')
            .map(str::to_owned)
    }) && port.parse::<u16>().is_err()
    {
        return Err(bad("the port is not a number between 0 and 65535"));
    }
    Ok(())
}

/// RFC 7396: `patch` over `target`; `null` removes.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target) = target {
        for (key, value) in patch {
            if value.is_null() {
                target.remove(key);
            } else {
                merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// Applies a patch to the tenant's stored (sparse) document.
pub fn apply_patch(stored: &Value, patch: &SettingsPatch) -> Value {
    let mut next = if stored.is_object() {
        stored.clone()
    } else {
        Value::Object(Map::new())
    };
    merge_patch(&mut next, &patch.document);
    // A provider left with nothing set disappears instead of lingering as `{}`.
    if let Some(Value::Object(providers)) = next.get_mut("providers") {
        providers.retain(|_, entry| !matches!(entry, Value::Object(map) if map.is_empty()));
    }
    if matches!(next.get("providers"), Some(Value::Object(map)) if map.is_empty())
        && let Value::Object(map) = &mut next
    {
        map.remove("providers");
    }
    next
}

/// The effective settings: defaults, then each layer in order (later wins), validated.
pub fn resolve(layers: &[&Value]) -> Result<AiSettings, SettingsError> {
    let mut merged = Value::Object(Map::new());
    for layer in layers {
        validate_layer(layer)?;
        merge_patch(&mut merged, layer);
    }
    let get = |key: &str| merged.get(key).filter(|v| !v.is_null());
    let route = |key: &str| {
        get(key)
            .and_then(Value::as_str)
            .map(|s| s.trim().to_owned())
    };
    let providers = get("providers")
        .and_then(Value::as_object)
        .map(|map| {
            map.iter()
                .map(|(id, entry)| {
                    let base_url = entry
                        .get("base_url")
                        .and_then(Value::as_str)
                        .map(|s| s.trim_end_matches('/').to_owned());
                    let switch = |key: &str| {
                        entry
                            .get(key)
                            .and_then(Value::as_str)
                            .and_then(AutoSwitch::parse)
                            .unwrap_or_default()
                    };
                    let number = |key: &str| {
                        entry
                            .get(key)
                            .and_then(Value::as_u64)
                            .and_then(|n| u32::try_from(n).ok())
                    };
                    let options = ProviderOptions {
                        streaming: switch("streaming"),
                        tool_calls_from_text: switch("tool_calls_from_text"),
                        request_timeout_seconds: number("request_timeout_seconds"),
                        keep_alive: entry
                            .get("keep_alive")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                        num_ctx: number("num_ctx"),
                        think: entry.get("think").and_then(Value::as_bool),
                    };
                    (id.clone(), ProviderSettings { base_url, options })
                })
                .collect()
        })
        .unwrap_or_default();
    let autonomy_level = get("autonomy_level")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or(AutonomyLevel::Monitor);
    let autopilot_acknowledgement: Option<Acknowledgement> =
        get("autopilot_acknowledgement").and_then(|v| serde_json::from_value(v.clone()).ok());
    if autonomy_level == AutonomyLevel::Full
        && autopilot_acknowledgement
            .as_ref()
            .is_none_or(|ack| ack.version != AUTOPILOT_ACK_VERSION)
    {
        return Err(SettingsError::AutopilotNotAcknowledged {
            required_version: AUTOPILOT_ACK_VERSION,
        });
    }
    let triggers = get("alert_triggers");
    let trigger = |key: &str| triggers.and_then(|t| t.get(key)).filter(|v| !v.is_null());
    let alert_triggers = AlertTriggers {
        enabled: trigger("enabled").and_then(Value::as_bool).unwrap_or(true),
        min_severity: trigger("min_severity")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or(MinSeverity::Critical),
        alert_types: trigger("alert_types")
            .and_then(Value::as_array)
            .map(|items| {
                let mut names: Vec<String> = items
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect();
                names.sort();
                names.dedup();
                names
            })
            .unwrap_or_default(),
    };
    let budgets = get("budgets");
    let budget = |key: &str| budgets.and_then(|b| b.get(key)).filter(|v| !v.is_null());
    let budgets = Budgets {
        daily_usd: budget("daily_usd")
            .and_then(Value::as_str)
            .map(str::to_owned),
        monthly_usd: budget("monthly_usd")
            .and_then(Value::as_str)
            .map(str::to_owned),
        daily_tokens: budget("daily_tokens").and_then(Value::as_u64),
        monthly_tokens: budget("monthly_tokens").and_then(Value::as_u64),
    };
    Ok(AiSettings {
        providers,
        model: route("model"),
        chat_model: route("chat_model"),
        patrol_model: route("patrol_model"),
        auto_fix_model: route("auto_fix_model"),
        patrol_interval_minutes: get("patrol_interval_minutes")
            .and_then(Value::as_u64)
            .and_then(|m| u32::try_from(m).ok())
            .unwrap_or(DEFAULT_PATROL_INTERVAL_MINUTES),
        autonomy_level,
        autopilot_acknowledgement,
        alert_triggers,
        budgets,
        patrol_enabled: get("patrol_enabled")
            .and_then(Value::as_bool)
            .unwrap_or(true),
    })
}

/// Whether Patrol is switched on in a stored settings document (the switch comes only from the
/// tenant's document; no config layer sets it). A document without the field is on.
pub fn patrol_enabled_in(document: &Value) -> bool {
    document
        .get("patrol_enabled")
        .and_then(Value::as_bool)
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patch_err(body: Value) -> SettingsError {
        parse_patch(&body).unwrap_err()
    }

    #[test]
    fn a_typed_body_names_only_fields_the_parser_knows() {
        let body = PatchBody {
            providers: BTreeMap::from([
                (
                    "openai".to_owned(),
                    ProviderPatch {
                        api_key: Some(Some("sk-test".to_owned())),
                        base_url: Some(None),
                        streaming: Some(Some(AutoSwitch::Off)),
                        tool_calls_from_text: Some(None),
                        request_timeout_seconds: Some(Some(600)),
                        ..ProviderPatch::default()
                    },
                ),
                (
                    "ollama".to_owned(),
                    ProviderPatch {
                        keep_alive: Some(Some("10m".to_owned())),
                        num_ctx: Some(Some(8_192)),
                        think: Some(Some(false)),
                        ..ProviderPatch::default()
                    },
                ),
            ]),
            model: Some(None),
            chat_model: Some(None),
            patrol_model: Some(Some("openai:gpt-4.1-mini".to_owned())),
            auto_fix_model: Some(None),
            patrol_interval_minutes: Some(Some(60)),
            autonomy_level: Some(Some(AutonomyLevel::Approval)),
            alert_triggers: Some(AlertTriggersPatch {
                enabled: Some(Some(true)),
                min_severity: Some(Some(MinSeverity::Critical)),
                alert_types: Some(Some(vec![AlertRule::MemoryUsage])),
            }),
            budgets: Some(BudgetsPatch {
                daily_usd: Some(Some("2.50".to_owned())),
                monthly_usd: Some(None),
                daily_tokens: Some(Some(1_000)),
                monthly_tokens: Some(None),
            }),
            patrol_enabled: Some(Some(false)),
            autopilot_acknowledgement: None,
        };
        let patch = body.parse().expect("every typed field is a known one");
        assert_eq!(
            patch.keys.get("openai"),
            Some(&KeyChange::Set("sk-test".to_owned()))
        );
        let mut expected: Vec<String> = TOP_FIELDS
            .iter()
            .filter(|f| {
                !matches!(
                    **f,
                    "providers" | "alert_triggers" | "budgets" | "autopilot_acknowledgement"
                )
            })
            .map(|f| (*f).to_owned())
            .chain(
                ALERT_TRIGGER_FIELDS
                    .iter()
                    .map(|f| format!("alert_triggers.{f}")),
            )
            .chain(BUDGET_FIELDS.iter().map(|f| format!("budgets.{f}")))
            .chain(PROVIDER_FIELDS.iter().map(|f| {
                let provider = if OLLAMA_FIELDS.contains(f) {
                    "ollama"
                } else {
                    "openai"
                };
                format!("providers.{provider}.{f}")
            }))
            .collect();
        expected.sort();
        assert_eq!(patch.changed_fields(), expected);
        assert_eq!(
            PatchBody::default().parse().unwrap().changed_fields(),
            Vec::<String>::new()
        );
        assert!(format!("{body:?}").contains("<redacted>"));
        assert!(!format!("{body:?}").contains("sk-test"));
    }

    #[test]
    fn min_severity_names_are_the_wire_names() {
        for level in MinSeverity::ALL {
            assert_eq!(json!(level), json!(level.as_str()));
            assert_eq!(MinSeverity::parse(level.as_str()), Some(level));
        }
    }

    #[test]
    fn bracketed_hosts_are_ipv6_addresses() {
        let check = |url: &str| base_url("base_url", &json!(url)).is_ok();
        assert!(check("http://[::1]:8080/v1"));
        assert!(check("https://[2001:db8::7]"));
        assert!(!check("http://[0]"));
        assert!(!check("http://[]/"));
        assert!(!check("http://[::1/v1"));
        assert!(check("http://localhost:11434"));
    }

    #[test]
    fn whole_floats_are_integers() {
        let patch = parse_patch(&json!({"patrol_interval_minutes": 60.0})).expect("valid");
        assert_eq!(patch.document["patrol_interval_minutes"], json!(60));
        assert!(parse_patch(&json!({"patrol_interval_minutes": 60.5})).is_err());
    }

    #[test]
    fn patrol_is_on_unless_switched_off() {
        assert!(resolve(&[&json!({})]).unwrap().patrol_enabled);
        let off = parse_patch(&json!({"patrol_enabled": false})).unwrap();
        assert!(!resolve(&[&off.document]).unwrap().patrol_enabled);
        assert!(!patrol_enabled_in(&off.document));
        assert!(patrol_enabled_in(&json!({"patrol_enabled": null})));
        assert_eq!(
            patch_err(json!({"patrol_enabled": "no"})).field(),
            "patrol_enabled"
        );
        // null resets to the default: on.
        let reset = apply_patch(
            &off.document,
            &parse_patch(&json!({"patrol_enabled": null})).unwrap(),
        );
        assert!(resolve(&[&reset]).unwrap().patrol_enabled);
    }

    #[test]
    fn unknown_fields_are_named() {
        assert_eq!(
            patch_err(json!({"modle": "openai:x"})),
            SettingsError::UnknownField {
                field: "modle".into()
            }
        );
        assert_eq!(
            patch_err(json!({"budgets": {"yearly_usd": "1"}})).field(),
            "budgets.yearly_usd"
        );
        assert_eq!(
            patch_err(json!({"alert_triggers": {"on": true}})).field(),
            "alert_triggers.on"
        );
        assert_eq!(
            patch_err(json!({"providers": {"openai": {"token": "x"}}})).field(),
            "providers.openai.token"
        );
        assert!(matches!(
            patch_err(json!([1])),
            SettingsError::InvalidValue { .. }
        ));
    }

    #[test]
    fn routes_are_provider_model_with_known_providers() {
        assert!(matches!(
            patch_err(json!({"model": "gpt-4.1"})),
            SettingsError::InvalidRoute { field, .. } if field == "model"
        ));
        assert_eq!(
            patch_err(json!({"patrol_model": "nosuch:model"})),
            SettingsError::UnknownProvider {
                field: "patrol_model".into(),
                provider: "nosuch".into()
            }
        );
        assert!(matches!(
            patch_err(json!({"chat_model": "openai:"})),
            SettingsError::InvalidRoute { field, .. } if field == "chat_model"
        ));
        assert!(matches!(
            patch_err(json!({"auto_fix_model": 3})),
            SettingsError::InvalidValue { field, .. } if field == "auto_fix_model"
        ));
        let ok = parse_patch(&json!({"patrol_model": "ollama:llama3.1:8b"})).unwrap();
        let settings = resolve(&[&ok.document]).unwrap();
        let route = settings.patrol_route().unwrap();
        assert_eq!(
            (route.provider, route.model.as_str()),
            ("ollama", "llama3.1:8b")
        );
        assert_eq!(
            patch_err(json!({"providers": {"acme": {"base_url": "http://x"}}})).field(),
            "providers.acme"
        );
    }

    #[test]
    fn interval_autonomy_and_triggers_are_checked() {
        for minutes in [json!(9), json!(10_081), json!(-1), json!(1.5), json!("60")] {
            assert_eq!(
                patch_err(json!({"patrol_interval_minutes": minutes})),
                SettingsError::OutOfRange {
                    field: "patrol_interval_minutes".into(),
                    min: 10,
                    max: 10_080
                }
            );
        }
        assert_eq!(
            patch_err(json!({"autonomy_level": "yolo"})).field(),
            "autonomy_level"
        );
        assert_eq!(
            patch_err(json!({"alert_triggers": {"min_severity": "info"}})).field(),
            "alert_triggers.min_severity"
        );
        assert_eq!(
            patch_err(json!({"alert_triggers": {"alert_types": ["cpu_usage"]}})).field(),
            "alert_triggers.alert_types"
        );
        assert_eq!(
            patch_err(json!({"alert_triggers": {"enabled": "yes"}})).field(),
            "alert_triggers.enabled"
        );
    }

    #[test]
    fn budgets_are_non_negative_with_decimal_dollars() {
        for bad in [
            json!("-1"),
            json!("1e3"),
            json!(12.5),
            json!("1.2345678"),
            json!(""),
        ] {
            assert_eq!(
                patch_err(json!({"budgets": {"daily_usd": bad}})),
                SettingsError::InvalidAmount {
                    field: "budgets.daily_usd".into()
                }
            );
        }
        assert_eq!(
            patch_err(json!({"budgets": {"monthly_tokens": -5}})).field(),
            "budgets.monthly_tokens"
        );
        let ok =
            parse_patch(&json!({"budgets": {"daily_usd": "12.50", "daily_tokens": 0}})).unwrap();
        let settings = resolve(&[&ok.document]).unwrap();
        assert_eq!(settings.budgets.daily_usd.as_deref(), Some("12.50"));
        assert_eq!(settings.budgets.daily_tokens, Some(0));
    }

    #[test]
    fn base_urls_must_be_http_urls() {
        for bad in [
            "ftp://example.com",
            "example.com",
            "http://",
            "https://user:pw@example.com",
            "http://exa mple.com",
            "http://host:99999/v1",
        ] {
            let err = patch_err(json!({"providers": {"openai": {"base_url": bad}}}));
            assert!(
                matches!(&err, SettingsError::InvalidUrl { field, .. } if field == "providers.openai.base_url"),
                "{bad}: {err:?}"
            );
        }
        for good in [
            "http://127.0.0.1:8080/v1",
            "https://api.example.com",
            "http://[::1]:11434",
        ] {
            parse_patch(&json!({"providers": {"openai": {"base_url": good}}})).unwrap();
        }
    }

    #[test]
    fn full_autonomy_needs_a_current_acknowledgement() {
        let full = parse_patch(&json!({"autonomy_level": "full"})).unwrap();
        assert_eq!(
            resolve(&[&full.document]).unwrap_err(),
            SettingsError::AutopilotNotAcknowledged {
                required_version: AUTOPILOT_ACK_VERSION
            }
        );
        let stale = parse_patch(&json!({"autonomy_level": "full", "autopilot_acknowledgement": {
            "version": AUTOPILOT_ACK_VERSION + 1, "acknowledged_by": "ops", "at": "2026-11-29T10:00:00Z"}}))
        .unwrap();
        assert!(resolve(&[&stale.document]).is_err());
        let current = parse_patch(&json!({"autonomy_level": "full", "autopilot_acknowledgement": {
            "version": AUTOPILOT_ACK_VERSION, "acknowledged_by": "ops", "at": "2026-11-29T10:00:00Z"}}))
        .unwrap();
        assert_eq!(
            resolve(&[&current.document]).unwrap().autonomy_level,
            AutonomyLevel::Full
        );
        assert_eq!(
            patch_err(json!({"autopilot_acknowledgement": {"version": 1, "acknowledged_by": " ", "at": "2026-11-29T10:00:00Z"}})).field(),
            "autopilot_acknowledgement.acknowledged_by"
        );
    }

    #[test]
    fn merge_patch_absent_keeps_null_resets() {
        let stored = json!({"model": "openai:gpt-4.1-mini", "patrol_interval_minutes": 30,
            "providers": {"openai": {"base_url": "http://127.0.0.1:9/v1"}}});
        let patch =
            parse_patch(&json!({"patrol_interval_minutes": null, "chat_model": "groq:llama"}))
                .unwrap();
        let next = apply_patch(&stored, &patch);
        assert_eq!(
            next,
            json!({"model": "openai:gpt-4.1-mini", "chat_model": "groq:llama",
                "providers": {"openai": {"base_url": "http://127.0.0.1:9/v1"}}})
        );
        let settings = resolve(&[&next]).unwrap();
        assert_eq!(
            settings.patrol_interval_minutes,
            DEFAULT_PATROL_INTERVAL_MINUTES
        );
        let reset = parse_patch(&json!({"providers": {"openai": {"base_url": null}}})).unwrap();
        assert_eq!(
            apply_patch(&next, &reset),
            json!({"model": "openai:gpt-4.1-mini", "chat_model": "groq:llama"})
        );
        // Stored layers override config layers; null in the stored layer falls back to config.
        let config = json!({"model": "ollama:qwen3:8b", "patrol_interval_minutes": 60});
        let effective = resolve(&[&config, &next]).unwrap();
        assert_eq!(effective.model.as_deref(), Some("openai:gpt-4.1-mini"));
        assert_eq!(effective.patrol_interval_minutes, 60);
    }

    #[test]
    fn keys_are_separated_from_the_document() {
        let patch = parse_patch(&json!({"providers": {
            "openai": {"api_key": "sk-1", "base_url": "https://api.openai.com/v1"},
            "groq": {"api_key": ""},
            "anthropic": {"api_key": null}
        }}))
        .unwrap();
        assert_eq!(
            patch.document,
            json!({"providers": {"openai": {"base_url": "https://api.openai.com/v1"}}})
        );
        assert_eq!(patch.keys["openai"], KeyChange::Set("sk-1".into()));
        assert_eq!(patch.keys["groq"], KeyChange::Clear);
        assert_eq!(patch.keys["anthropic"], KeyChange::Clear);
        assert!(!format!("{patch:?}").contains("sk-1"));
        assert_eq!(
            patch.changed_fields(),
            vec![
                "providers.anthropic.api_key",
                "providers.groq.api_key",
                "providers.openai.api_key",
                "providers.openai.base_url"
            ]
        );
        assert_eq!(
            patch_err(json!({"providers": {"openai": {"api_key": 5}}})).field(),
            "providers.openai.api_key"
        );
        // A stored layer never holds a key.
        assert_eq!(
            validate_layer(&json!({"providers": {"openai": {"api_key": "x"}}}))
                .unwrap_err()
                .field(),
            "providers.openai.api_key"
        );
    }

    #[test]
    fn patrol_transport_change_is_detected() {
        let base = json!({"model": "openai:gpt-4.1-mini"});
        let before = resolve(&[&base]).unwrap();
        let routine = resolve(&[
            &base,
            &json!({"chat_model": "groq:llama", "patrol_interval_minutes": 20}),
        ])
        .unwrap();
        assert!(!before.patrol_transport_differs(&routine));
        let moved = resolve(&[&base, &json!({"patrol_model": "openai:gpt-5"})]).unwrap();
        assert!(before.patrol_transport_differs(&moved));
        let rebased = resolve(&[
            &base,
            &json!({"providers": {"openai": {"base_url": "http://127.0.0.1:1/v1"}}}),
        ])
        .unwrap();
        assert!(before.patrol_transport_differs(&rebased));
        let other_provider = resolve(&[
            &base,
            &json!({"providers": {"groq": {"base_url": "http://127.0.0.1:1/v1"}}}),
        ])
        .unwrap();
        assert!(!before.patrol_transport_differs(&other_provider));
    }

    #[test]
    fn settings_changed_wire_shape() {
        insta::assert_json_snapshot!(
            "settings_changed",
            SettingsChanged {
                version: 4,
                patrol_route_changed: true
            }
        );
    }

    #[test]
    fn defaults() {
        let settings = resolve(&[]).unwrap();
        assert_eq!(settings.autonomy_level, AutonomyLevel::Monitor);
        assert_eq!(settings.alert_triggers.min_severity, MinSeverity::Critical);
        assert_eq!(
            settings.patrol_interval_minutes,
            DEFAULT_PATROL_INTERVAL_MINUTES
        );
        assert!(settings.patrol_route().is_none());
    }

    #[test]
    fn provider_options_validate_and_resolve_with_their_defaults() {
        let patch = parse_patch(&json!({"providers": {
            "ollama": {"streaming": "off", "tool_calls_from_text": "on",
                       "request_timeout_seconds": 900, "keep_alive": "-1m",
                       "num_ctx": 16384, "think": false},
            "openai": {"base_url": "http://127.0.0.1:9/v1"}
        }}))
        .unwrap();
        let settings = resolve(&[&apply_patch(&json!({}), &patch)]).unwrap();
        let ollama = settings.provider_options("ollama");
        assert_eq!(ollama.streaming, AutoSwitch::Off);
        assert_eq!(ollama.tool_calls_from_text, AutoSwitch::On);
        assert_eq!(ollama.request_timeout_seconds(), 900);
        assert_eq!(ollama.keep_alive.as_deref(), Some("-1m"));
        assert_eq!(ollama.num_ctx, Some(16_384));
        assert_eq!(ollama.think, Some(false));
        let openai = settings.provider_options("openai");
        assert_eq!(openai, ProviderOptions::default());
        assert_eq!(
            openai.request_timeout_seconds(),
            DEFAULT_REQUEST_TIMEOUT_SECONDS
        );
        assert_eq!(
            settings.provider_options("anthropic"),
            ProviderOptions::default()
        );
    }

    #[test]
    fn bad_provider_options_are_refused_naming_the_field() {
        let refused = |body: Value| parse_patch(&body).unwrap_err();
        let err = refused(json!({"providers": {"openai": {"streaming": "sometimes"}}}));
        assert_eq!(err.field(), "providers.openai.streaming");
        let err = refused(json!({"providers": {"openai": {"tool_calls_from_text": true}}}));
        assert_eq!(err.field(), "providers.openai.tool_calls_from_text");
        for seconds in [json!(4), json!(3_601), json!(-1), json!("60")] {
            let err =
                refused(json!({"providers": {"ollama": {"request_timeout_seconds": seconds}}}));
            assert!(
                matches!(&err, SettingsError::OutOfRange { field, min: 5, max: 3_600 }
                    if field == "providers.ollama.request_timeout_seconds"),
                "{err:?}"
            );
        }
        for keep in ["10", "m", "-", "10 m", "1d", "", "1.m"] {
            let err = refused(json!({"providers": {"ollama": {"keep_alive": keep}}}));
            assert_eq!(err.field(), "providers.ollama.keep_alive", "{keep:?}");
        }
        for keep in ["10m", "1h30m", "-1m", "0s", "1.5h", "300ms"] {
            parse_patch(&json!({"providers": {"ollama": {"keep_alive": keep}}}))
                .unwrap_or_else(|e| panic!("{keep}: {e}"));
        }
        let err = refused(json!({"providers": {"ollama": {"num_ctx": 100}}}));
        assert_eq!(err.field(), "providers.ollama.num_ctx");
        let err = refused(json!({"providers": {"ollama": {"think": "yes"}}}));
        assert_eq!(err.field(), "providers.ollama.think");
        // Ollama's own options on another provider would be stored and never read.
        for field in ["keep_alive", "num_ctx", "think"] {
            let value = match field {
                "keep_alive" => json!("10m"),
                "num_ctx" => json!(8192),
                _ => json!(true),
            };
            let err = refused(json!({"providers": {"openai": {field: value}}}));
            assert_eq!(err.field(), format!("providers.openai.{field}"));
            assert!(err.to_string().contains("only Ollama"), "{err}");
        }
    }

    #[test]
    fn a_provider_option_of_the_patrol_route_moves_its_transport() {
        let before = resolve(&[&json!({"patrol_model": "ollama:qwen2.5"})]).unwrap();
        let after = resolve(&[&json!({"patrol_model": "ollama:qwen2.5",
            "providers": {"ollama": {"streaming": "off"}}})])
        .unwrap();
        assert!(before.patrol_transport_differs(&after));
        let other = resolve(&[&json!({"patrol_model": "ollama:qwen2.5",
            "providers": {"openai": {"streaming": "off"}}})])
        .unwrap();
        assert!(!before.patrol_transport_differs(&other));
    }
}
