//! Provider preflight: one real model turn with one minimal tool, through the same chat path a
//! Patrol run uses, classified into ready or not ready, and cached per route for the readiness
//! gate.
//!
//! Only the safe fields (cause, summary, recommendation, model, action) leave this module; the
//! provider's own error detail is logged, never returned.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use sha2::{Digest as _, Sha256};

use crate::registry::{ApiKey, RouteClass};
use pulse_agent_loop::agent_loop::text_calls;
use pulse_agent_loop::provider::pool::ProviderPool;
use pulse_agent_loop::provider::{
    ChatRequest, FailureCause, Message, PATROL_STALL, ProviderConfig, ProviderFailure, Streaming,
    Timeouts, Tool, ToolChoice, Usage,
};
use pulse_agent_loop::route::Route;
use pulse_capabilities::ArgumentSchema;
use pulse_domain::ai_settings::{AutoSwitch, ProviderOptions};
use pulse_domain::patrol::readiness::TurnTransport;

/// The name of the preflight's one tool.
pub const PREFLIGHT_TOOL: &str = "pulse_preflight_ping";

/// Where the settings to fix a provider live.
pub const PROVIDER_SETTINGS_ACTION: &str = "/settings/pulse-intelligence/provider";

/// A route with the connection settings the operator gave for its provider.
#[derive(Clone)]
pub struct RouteConnection {
    pub route: Route,
    /// Overrides the registry's default base URL.
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    /// The provider's options from the settings (streaming, timeout, Ollama's own).
    pub options: ProviderOptions,
    /// The version of the settings the route was read from, when it was.
    pub settings_version: Option<i64>,
}

impl std::fmt::Debug for RouteConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteConnection")
            .field("route", &self.route.to_string())
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| ".."))
            .field("options", &self.options)
            .finish()
    }
}

impl RouteConnection {
    pub fn new(route: Route) -> Self {
        Self {
            route,
            base_url: None,
            api_key: None,
            options: ProviderOptions::default(),
            settings_version: None,
        }
    }

    pub fn with_settings_version(mut self, version: i64) -> Self {
        self.settings_version = Some(version);
        self
    }

    pub fn with_options(mut self, options: ProviderOptions) -> Self {
        self.options = options;
        self
    }

    /// Whether tool calls the model writes as text may become tool calls on this route: the
    /// setting, with `auto` on for model servers the operator runs.
    pub fn tool_calls_from_text(&self) -> bool {
        self.options
            .tool_calls_from_text
            .resolve(self.route_class() == RouteClass::LocalModelServer)
    }

    pub fn with_base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = Some(url.into());
        self
    }

    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// The route class at the configured address.
    pub fn route_class(&self) -> RouteClass {
        self.route
            .provider()
            .route_class_at(self.base_url.as_deref())
    }

    /// What the cached outcome is valid for: the route, the address and the credential's
    /// identity (a digest, never the key), so a rotated key or a moved server is re-checked.
    pub fn cache_key(&self) -> String {
        let credential = match self.api_key() {
            Some(key) => {
                let digest = Sha256::digest(key.as_bytes());
                digest[..8].iter().map(|b| format!("{b:02x}")).collect()
            }
            None => "-".to_owned(),
        };
        // Whether text calls are recovered decides whether a model that writes its call as
        // text passes, so a changed setting is re-checked too.
        format!(
            "{}|{}|{credential}|{}",
            self.route,
            self.base_url().unwrap_or_default(),
            u8::from(self.tool_calls_from_text())
        )
    }

    fn base_url(&self) -> Option<&str> {
        self.base_url
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .or(self.route.provider().default_base_url)
    }

    fn api_key(&self) -> Option<&str> {
        self.api_key.as_deref().filter(|k| !k.trim().is_empty())
    }

    /// The transport settings for this route within `bounds`, or why it cannot be called at
    /// all: the provider's own request timeout (capped by `bounds`), streaming mode and Ollama
    /// options apply.
    pub fn provider_config(
        &self,
        bounds: &PreflightSettings,
    ) -> Result<ProviderConfig, NotConfigured> {
        let entry = self.route.provider();
        let base_url = self.base_url().ok_or(NotConfigured::BaseUrl)?;
        let request = self
            .options
            .request_timeout_seconds
            .map(|s| Duration::from_secs(s.into()))
            .map_or(bounds.request_timeout, |t| {
                t.min(bounds.request_timeout_cap)
            });
        let timeouts = PreflightSettings {
            request_timeout: request,
            ..*bounds
        }
        .timeouts(self.route_class());
        let mut config = ProviderConfig::new(entry.protocol, base_url)
            .with_timeouts(timeouts)
            .with_retry_backoff(bounds.retry_backoff)
            .with_streaming(match self.options.streaming {
                AutoSwitch::Auto => Streaming::Auto,
                AutoSwitch::On => Streaming::On,
                AutoSwitch::Off => Streaming::Off,
            });
        config.ollama_keep_alive = self.options.keep_alive.clone();
        config.ollama_num_ctx = self.options.num_ctx;
        config.ollama_think = self.options.think;
        config.settings_version = self.settings_version;
        match (self.api_key(), entry.api_key) {
            (Some(key), _) => config = config.with_api_key(key),
            (None, ApiKey::Required) => return Err(NotConfigured::ApiKey),
            (None, ApiKey::Optional) => {}
        }
        Ok(config)
    }
}

/// A route that cannot be called because a setting is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotConfigured {
    #[error("the provider needs a base URL")]
    BaseUrl,
    #[error("the provider needs an API key")]
    ApiKey,
}

/// Why a preflight did not pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PreflightCause {
    /// A setting the call needs is missing.
    NotConfigured,
    /// The provider call failed, classified by the shared failure classifier.
    #[serde(untagged)]
    Provider(FailureCause),
}

impl PreflightCause {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotConfigured => "not_configured",
            Self::Provider(cause) => cause.as_str(),
        }
    }
}

/// The result of one preflight, holding only fields safe to show an operator.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PreflightOutcome {
    /// The `provider:model` route checked.
    pub route: String,
    pub model: String,
    pub route_class: RouteClass,
    pub ready: bool,
    /// Set when not ready.
    pub cause: Option<PreflightCause>,
    pub summary: String,
    pub recommendation: Option<String>,
    /// Where to fix it, when not ready.
    pub action: Option<&'static str>,
    /// The model called the preflight tool: the only outcome that proves tool calling works.
    pub observed_tool_call: bool,
    /// Calls the model wrote as text that were taken as the preflight's call (0 or 1): the route
    /// works only because Pulse recovers them.
    pub tool_calls_recovered: u32,
    pub checked_at: DateTime<Utc>,
    pub elapsed_ms: u64,
    /// How the answer came, when one came.
    pub transport: Option<TurnTransport>,
    /// What the provider reported, for the cost ledger.
    #[serde(skip)]
    pub usage: Option<Usage>,
}

const READY_SUMMARY: &str = "the model answered and called the preflight tool";
const NO_TOOL_CALL_SUMMARY: &str = "the model answered but did not call the preflight tool";
const RECOVERED_SUMMARY: &str =
    "the model answered and wrote the preflight tool call as text: tool calls recovered from text";
const RECOVERED_RECOMMENDATION: &str = "this model does not call tools natively on this server; \
     Pulse turns the calls it writes as text into tool calls, but a model or server with native \
     tool calling is more reliable";

/// Time bounds for preflights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreflightSettings {
    /// The operator's provider request timeout: the bound for the whole call.
    pub request_timeout: Duration,
    /// The longest a provider's own `request_timeout_seconds` may make a call here.
    pub request_timeout_cap: Duration,
    /// How long a hosted API may take to start answering. Local model servers are not held to
    /// it: a cold model may load for a minute before the first byte, which is slow, not broken.
    pub response_header_timeout: Duration,
    /// Wait before the one same-route retry when the provider gave no `retry-after`.
    pub retry_backoff: Duration,
}

impl Default for PreflightSettings {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(
                pulse_domain::ai_settings::DEFAULT_REQUEST_TIMEOUT_SECONDS.into(),
            ),
            request_timeout_cap: Duration::from_secs(
                pulse_domain::ai_settings::REQUEST_TIMEOUT_MAX_SECONDS.into(),
            ),
            response_header_timeout: Duration::from_secs(60),
            retry_backoff: Duration::from_secs(1),
        }
    }
}

impl PreflightSettings {
    /// The timeouts for a route of this class.
    pub fn timeouts(&self, class: RouteClass) -> Timeouts {
        let request = self.request_timeout;
        let response_header = match class {
            RouteClass::LocalModelServer => request,
            RouteClass::MeteredApi | RouteClass::CodingPlanAllowance => {
                self.response_header_timeout.min(request)
            }
        };
        Timeouts {
            request,
            response_header,
            stall: PATROL_STALL.min(request),
        }
    }
}

/// The source of "now" for cache ages, so tests can move time without sleeping.
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
}

#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    pub fn advance(&self, by: Duration) {
        if let Ok(mut now) = self.now.lock() {
            *now += chrono::Duration::from_std(by).unwrap_or(chrono::Duration::MAX);
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        self.now
            .lock()
            .map(|n| *n)
            .unwrap_or_else(|p| *p.into_inner())
    }
}

/// What the readiness gate knows about a route.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Readiness {
    Ready {
        checked_at: DateTime<Utc>,
    },
    NotReady {
        cause: PreflightCause,
        summary: String,
        recommendation: Option<String>,
        checked_at: DateTime<Utc>,
    },
    /// No preflight within the cache lifetime.
    NotAssessed,
}

impl Readiness {
    /// Admission refuses a route only when it is known not to work.
    pub fn is_known_not_ready(&self) -> bool {
        matches!(self, Self::NotReady { .. })
    }

    pub fn is_ready(&self) -> bool {
        matches!(self, Self::Ready { .. })
    }
}

/// The most recent preflight outcome per route, each valid for `ttl`.
pub struct PreflightCache {
    ttl: Duration,
    clock: Arc<dyn Clock>,
    entries: Mutex<HashMap<String, PreflightOutcome>>,
}

impl std::fmt::Debug for PreflightCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreflightCache")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl PreflightCache {
    pub fn new(ttl: Duration, clock: Arc<dyn Clock>) -> Self {
        Self {
            ttl,
            clock,
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    pub fn store(&self, connection: &RouteConnection, outcome: PreflightOutcome) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.insert(connection.cache_key(), outcome);
        }
    }

    /// The cached outcome for this route and its settings, unless older than the TTL.
    pub fn get(&self, connection: &RouteConnection) -> Option<PreflightOutcome> {
        let now = self.clock.now();
        let ttl = chrono::Duration::from_std(self.ttl).unwrap_or(chrono::Duration::MAX);
        let entries = self.entries.lock().ok()?;
        entries
            .get(&connection.cache_key())
            .filter(|o| now.signed_duration_since(o.checked_at) < ttl)
            .cloned()
    }

    pub fn readiness(&self, connection: &RouteConnection) -> Readiness {
        match self.get(connection) {
            None => Readiness::NotAssessed,
            Some(o) if o.ready => Readiness::Ready {
                checked_at: o.checked_at,
            },
            Some(o) => Readiness::NotReady {
                cause: o
                    .cause
                    .unwrap_or(PreflightCause::Provider(FailureCause::ProviderError)),
                summary: o.summary,
                recommendation: o.recommendation,
                checked_at: o.checked_at,
            },
        }
    }
}

/// Runs preflights and keeps their outcomes.
#[derive(Debug)]
pub struct Preflight {
    settings: PreflightSettings,
    cache: PreflightCache,
    providers: Arc<ProviderPool>,
}

impl Preflight {
    pub fn new(
        settings: PreflightSettings,
        cache: PreflightCache,
        providers: Arc<ProviderPool>,
    ) -> Self {
        Self {
            settings,
            cache,
            providers,
        }
    }

    pub fn cache(&self) -> &PreflightCache {
        &self.cache
    }

    pub fn readiness(&self, connection: &RouteConnection) -> Readiness {
        self.cache.readiness(connection)
    }

    /// Calls the route once (plus the transport's one same-route retry), records the outcome in
    /// the cache and returns it.
    pub async fn run(&self, connection: &RouteConnection) -> PreflightOutcome {
        let outcome = self.check(connection).await;
        self.cache.store(connection, outcome.clone());
        outcome
    }

    /// Calls the route once (plus the transport's one same-route retry) and returns the
    /// outcome without recording it anywhere: what a provider test answers.
    pub async fn check(&self, connection: &RouteConnection) -> PreflightOutcome {
        let route = &connection.route;
        let class = connection.route_class();
        let started = tokio::time::Instant::now();
        let checked_at = self.cache.now();
        let base = PreflightOutcome {
            route: route.to_string(),
            model: route.model().to_owned(),
            route_class: class,
            ready: false,
            cause: None,
            summary: String::new(),
            recommendation: None,
            action: Some(PROVIDER_SETTINGS_ACTION),
            observed_tool_call: false,
            tool_calls_recovered: 0,
            checked_at,
            elapsed_ms: 0,
            transport: None,
            usage: None,
        };
        let config = match connection.provider_config(&self.settings) {
            Ok(config) => config,
            Err(missing) => {
                return PreflightOutcome {
                    cause: Some(PreflightCause::NotConfigured),
                    summary: missing.to_string(),
                    recommendation: Some(match missing {
                        NotConfigured::BaseUrl => "set the base URL for this provider".to_owned(),
                        NotConfigured::ApiKey => "set the API key for this provider".to_owned(),
                    }),
                    ..base
                };
            }
        };
        let result = match self.providers.provider(config) {
            Ok(provider) => provider.chat(&request(route), &mut |_| {}).await,
            Err(failure) => Err(failure),
        };
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match result {
            Ok(response) => {
                let transport = Some(if response.buffered {
                    TurnTransport::Buffered
                } else {
                    TurnTransport::Streamed
                });
                let base = PreflightOutcome { transport, ..base };
                let called = response
                    .tool_calls
                    .iter()
                    .any(|call| call.name == PREFLIGHT_TOOL);
                let recovered = response.tool_calls.is_empty()
                    && connection.tool_calls_from_text()
                    && wrote_preflight_call(&response.content);
                if recovered {
                    PreflightOutcome {
                        ready: true,
                        summary: RECOVERED_SUMMARY.to_owned(),
                        recommendation: Some(RECOVERED_RECOMMENDATION.to_owned()),
                        action: None,
                        observed_tool_call: true,
                        tool_calls_recovered: 1,
                        elapsed_ms,
                        usage: Some(response.usage),
                        ..base
                    }
                } else if called {
                    PreflightOutcome {
                        ready: true,
                        summary: READY_SUMMARY.to_owned(),
                        action: None,
                        observed_tool_call: true,
                        elapsed_ms,
                        usage: Some(response.usage),
                        ..base
                    }
                } else {
                    PreflightOutcome {
                        cause: Some(PreflightCause::Provider(FailureCause::NoToolSupport)),
                        summary: NO_TOOL_CALL_SUMMARY.to_owned(),
                        recommendation: Some(FailureCause::NoToolSupport.recommendation().into()),
                        elapsed_ms,
                        usage: Some(response.usage),
                        ..base
                    }
                }
            }
            Err(failure) => {
                log_failure(route, &failure);
                PreflightOutcome {
                    cause: Some(PreflightCause::Provider(failure.cause)),
                    summary: failure.summary().to_owned(),
                    recommendation: Some(failure.recommendation().to_owned()),
                    elapsed_ms,
                    ..base
                }
            }
        }
    }
}

fn log_failure(route: &Route, failure: &ProviderFailure) {
    tracing::warn!(
        route = %route,
        cause = %failure.cause,
        status = ?failure.status,
        detail = %failure.message,
        "provider preflight failed"
    );
}

/// Whether `text` holds the preflight call written as text, with arguments that pass the same
/// schema check a native call's would.
fn wrote_preflight_call(text: &str) -> bool {
    static SCHEMA: OnceLock<Option<ArgumentSchema>> = OnceLock::new();
    let Some(schema) = SCHEMA
        .get_or_init(|| ArgumentSchema::compile(&preflight_tool().parameters).ok())
        .as_ref()
    else {
        return false;
    };
    text_calls::recover(text, |call| {
        call.name == PREFLIGHT_TOOL && schema.violations(&call.arguments).is_empty()
    })
    .is_some()
}

/// The minimal tool: no arguments to get wrong, so any tool-capable model can call it.
pub fn preflight_tool() -> Tool {
    Tool {
        name: PREFLIGHT_TOOL.to_owned(),
        description: "Confirms that tool calling works. Call it once with ok set to true."
            .to_owned(),
        parameters: json!({
            "type": "object",
            "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"],
            "additionalProperties": false
        }),
    }
}

/// A fixed, identifier-free request: nothing about the tenant reaches the provider.
fn request(route: &Route) -> ChatRequest {
    ChatRequest {
        model: route.model().to_owned(),
        messages: vec![
            Message::system(
                "You are checking that tool calling works. Call the provided tool exactly once.",
            ),
            Message::user(format!("Call {PREFLIGHT_TOOL} with ok set to true.")),
        ],
        tools: vec![preflight_tool()],
        tool_choice: ToolChoice::Auto,
        max_output_tokens: Some(256),
        temperature: Some(0.0),
        stream: true,
    }
}
