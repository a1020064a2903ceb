//! The provider wire protocols as pure code: what a request to each protocol looks like, how a
//! response or a stream of bytes becomes events and a [`ChatResponse`], how failures are
//! classified, and the table of providers Pulse can route to.
//!
//! Nothing here does IO: no HTTP client, no async runtime. The model runner sends the
//! [`WireRequest`] [`build`] returns and hands every byte of the body to a [`StreamParser`] (or
//! the whole body to [`parse_response`]); the fuzz targets drive the same parser, and build only
//! this crate.

pub mod anthropic;
mod assembler;
pub mod failure;
pub mod framing;
pub mod gemini;
pub mod models;
pub mod ollama;
pub mod openai;
pub mod registry;
pub mod stream;
pub mod types;

use std::time::Duration;

use serde_json::Value;

use assembler::Assembler;
pub use failure::{FailureCause, ProviderFailure};
pub use stream::{Progress, StreamParser};
pub use types::*;

/// The wire protocol a route speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `/chat/completions` under the base URL (OpenAI, OpenRouter, DeepSeek, Groq, local servers).
    OpenAiCompatible,
    /// `/v1/messages` under the base URL.
    Anthropic,
    /// `/models/{model}:generateContent` under the base URL (which carries the API version).
    Gemini,
    /// `/api/chat` under the base URL.
    Ollama,
}

/// Time bounds for one provider call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// The whole attempt, from sending to the last byte.
    pub request: Duration,
    /// Until the response status and headers arrive.
    pub response_header: Duration,
    /// Longest silence between two chunks of a stream; never longer than `request`.
    pub stall: Duration,
}

/// Patrol streams may be silent this long between chunks (capped by the request timeout).
pub const PATROL_STALL: Duration = Duration::from_secs(60);

impl Timeouts {
    /// Patrol's bounds: a 60 s inter-chunk allowance capped by the operator's request timeout.
    pub fn patrol(request: Duration) -> Self {
        Self {
            request,
            response_header: Duration::from_secs(60).min(request),
            stall: PATROL_STALL.min(request),
        }
    }

    /// The stall bound actually applied: never longer than the whole request.
    pub fn effective_stall(&self) -> Duration {
        self.stall.min(self.request)
    }

    /// The header bound actually applied: never longer than the whole request.
    pub fn effective_header(&self) -> Duration {
        self.response_header.min(self.request)
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Self::patrol(Duration::from_secs(300))
    }
}

/// Whether model turns are streamed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Streaming {
    /// Stream as the request asks; a server that refuses a streamed request with tools is asked
    /// again without streaming, and the route remembers that.
    #[default]
    Auto,
    /// Stream as the request asks, never falling back.
    On,
    /// Never stream: every turn is one buffered answer.
    Off,
}

/// One provider route's connection settings.
#[derive(Clone)]
pub struct ProviderConfig {
    pub protocol: Protocol,
    /// Base URL without a trailing slash; see [`Protocol`] for what is appended.
    pub base_url: String,
    /// Optional for local OpenAI-compatible servers and Ollama.
    pub api_key: Option<String>,
    pub timeouts: Timeouts,
    /// Wait before the single same-route retry when the provider gave no `retry-after`.
    pub retry_backoff: Duration,
    pub anthropic_version: String,
    /// Ollama `keep_alive` (for example `"10m"`); omitted when unset.
    pub ollama_keep_alive: Option<String>,
    /// Ollama `options.num_ctx`.
    pub ollama_num_ctx: Option<u32>,
    /// Ollama `think`; omitted when unset.
    pub ollama_think: Option<bool>,
    pub streaming: Streaming,
    /// The version of the settings this route was read from, when it came from settings: what
    /// the route learned about its server (see [`Streaming::Auto`]) lasts until they change.
    pub settings_version: Option<i64>,
}

impl std::fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("protocol", &self.protocol)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| ".."))
            .field("timeouts", &self.timeouts)
            .field("streaming", &self.streaming)
            .finish_non_exhaustive()
    }
}

impl ProviderConfig {
    pub fn new(protocol: Protocol, base_url: impl Into<String>) -> Self {
        Self {
            protocol,
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key: None,
            timeouts: Timeouts::default(),
            retry_backoff: Duration::from_secs(1),
            anthropic_version: "2023-06-01".to_owned(),
            ollama_keep_alive: None,
            ollama_num_ctx: None,
            ollama_think: None,
            streaming: Streaming::Auto,
            settings_version: None,
        }
    }

    pub fn with_streaming(mut self, streaming: Streaming) -> Self {
        self.streaming = streaming;
        self
    }

    /// What identifies the server that answers this route, for what is learned about how it
    /// answers (whether it streams tool requests): its protocol, address and streaming setting.
    /// Not the settings version: an unrelated settings change (a Patrol interval) must not make
    /// a route forget what its server does. Never holds the key.
    pub fn server_identity(&self) -> String {
        format!("{:?}|{}|{:?}", self.protocol, self.base_url, self.streaming)
    }

    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    pub fn with_retry_backoff(mut self, backoff: Duration) -> Self {
        self.retry_backoff = backoff;
        self
    }
}

/// A request ready for the wire.
pub struct WireRequest {
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Value,
}

/// The HTTP request `config`'s protocol sends for `request` (URL, headers, JSON body). Tool calls
/// without a result get a synthetic error result first, so no provider sees a dangling call.
pub fn build(
    config: &ProviderConfig,
    request: &ChatRequest,
) -> Result<WireRequest, ProviderFailure> {
    let mut request = request.clone();
    request.messages = repair_orphan_tool_calls(&request.messages);
    match config.protocol {
        Protocol::OpenAiCompatible => openai::build(config, &request),
        Protocol::Anthropic => anthropic::build(config, &request),
        Protocol::Gemini => gemini::build(config, &request),
        Protocol::Ollama => ollama::build(config, &request),
    }
}

/// Parses a whole non-streaming response body. Events go to `emit` as if it had streamed.
pub fn parse_response(
    protocol: Protocol,
    body: &[u8],
    emit: &mut dyn FnMut(StreamEvent),
) -> Result<ChatResponse, ProviderFailure> {
    let body: Value = serde_json::from_slice(body)
        .map_err(|_| ProviderFailure::malformed("the provider response is not valid JSON"))?;
    let deltas = match protocol {
        Protocol::OpenAiCompatible => openai::decode_response(&body),
        Protocol::Anthropic => anthropic::decode_response(&body),
        Protocol::Gemini => gemini::decode_response(&body),
        Protocol::Ollama => ollama::decode_response(&body),
    }?;
    let mut assembler = Assembler::default();
    for delta in deltas {
        assembler.apply(delta, emit);
    }
    let mut response = assembler.finish()?;
    response.buffered = true;
    Ok(response)
}

/// Decodes a payload as JSON or reports a malformed response.
pub(crate) fn parse_payload(payload: &str) -> Result<Value, ProviderFailure> {
    serde_json::from_str(payload)
        .map_err(|_| ProviderFailure::malformed("the provider sent a chunk that is not valid JSON"))
}

/// An error object inside a 200 response or stream chunk.
pub(crate) fn embedded_error(value: &Value) -> Option<ProviderFailure> {
    let err = value.get("error")?;
    if err.is_null() {
        return None;
    }
    let status = err
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .unwrap_or(500);
    Some(ProviderFailure::from_status(
        status,
        &value.to_string(),
        None,
    ))
}

pub(crate) fn bearer(config: &ProviderConfig) -> Option<(&'static str, String)> {
    config
        .api_key
        .as_ref()
        .filter(|k| !k.is_empty())
        .map(|k| ("authorization", format!("Bearer {k}")))
}
