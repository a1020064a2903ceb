//! Provider transports behind one provider-neutral call; every streamed byte goes through the
//! one [`StreamParser`].
//!
//! Routes are fixed per call: a failure is retried at most once, on the same route, and only
//! before any output was shown; there is never a switch of provider or model.

pub mod anthropic;
mod assembler;
pub mod failure;
pub mod framing;
pub mod gemini;
pub mod ollama;
pub mod openai;
pub mod stream;
pub mod types;
#[cfg(test)]
mod wire_shapes_tests;

use std::time::Duration;

use futures::StreamExt as _;
use reqwest::header::HeaderMap;
use serde_json::Value;
use tokio::time::{Instant, timeout};

use assembler::{Assembler, Delta};
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

    fn effective_stall(&self) -> Duration {
        self.stall.min(self.request)
    }

    fn effective_header(&self) -> Duration {
        self.response_header.min(self.request)
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Self::patrol(Duration::from_secs(300))
    }
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
}

impl std::fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("protocol", &self.protocol)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| ".."))
            .field("timeouts", &self.timeouts)
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
        }
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

/// At most this many attempts per call: the first and one same-route retry.
pub const MAX_ATTEMPTS: u32 = 2;
/// The retry never waits longer than this, whatever the provider asks.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);
/// Error bodies are read up to this size for classification.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// A non-streaming response larger than this is refused.
const MAX_RESPONSE_BODY: usize = 32 * 1024 * 1024;

/// A request ready for the wire.
pub struct WireRequest {
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Value,
}

/// A client for one provider route.
#[derive(Debug, Clone)]
pub struct Provider {
    config: ProviderConfig,
    client: reqwest::Client,
}

impl Provider {
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderFailure> {
        // reqwest is built without a default crypto back-end; make sure one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(config.timeouts.effective_header())
            .build()
            .map_err(|_| {
                ProviderFailure::new(
                    FailureCause::Connectivity,
                    "could not build the HTTP client",
                )
            })?;
        Ok(Self { config, client })
    }

    pub fn config(&self) -> &ProviderConfig {
        &self.config
    }

    /// Runs one model turn. Events go to `on_event` as they happen; a call ends with exactly
    /// one `Done` or exactly one `Error`.
    pub async fn chat(
        &self,
        request: &ChatRequest,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ChatResponse, ProviderFailure> {
        let result = self.chat_inner(request, on_event).await;
        match &result {
            Ok(resp) => on_event(StreamEvent::Done {
                usage: resp.usage,
                stop_reason: resp.stop_reason.clone(),
            }),
            Err(failure) => on_event(StreamEvent::Error {
                failure: failure.clone(),
            }),
        }
        result
    }

    async fn chat_inner(
        &self,
        request: &ChatRequest,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ChatResponse, ProviderFailure> {
        let wire = self.build(request)?;
        let mut attempt = 1;
        loop {
            let mut shown = false;
            let mut forward = |ev: StreamEvent| {
                shown |= ev.is_visible_output();
                on_event(ev);
            };
            let result = self.attempt(&wire, request.stream, &mut forward).await;
            match result {
                Err(failure) if attempt < MAX_ATTEMPTS && !shown && failure.is_transient() => {
                    let wait = failure
                        .retry_after_ms
                        .map(Duration::from_millis)
                        .unwrap_or(self.config.retry_backoff)
                        .min(MAX_RETRY_WAIT);
                    attempt += 1;
                    tracing::warn!(
                        cause = %failure.cause,
                        attempt,
                        "provider call failed before output; retrying the same route"
                    );
                    on_event(StreamEvent::ProviderRetry {
                        attempt,
                        max_attempts: MAX_ATTEMPTS,
                        retry_after_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    });
                    tokio::time::sleep(wait).await;
                }
                other => return other,
            }
        }
    }

    /// The HTTP request this route's transport sends for `request` (URL, headers, JSON body),
    /// built by the route's protocol; public so tests can check exactly what would leave.
    pub fn build(&self, request: &ChatRequest) -> Result<WireRequest, ProviderFailure> {
        let mut request = request.clone();
        request.messages = repair_orphan_tool_calls(&request.messages);
        match self.config.protocol {
            Protocol::OpenAiCompatible => openai::build(&self.config, &request),
            Protocol::Anthropic => anthropic::build(&self.config, &request),
            Protocol::Gemini => gemini::build(&self.config, &request),
            Protocol::Ollama => ollama::build(&self.config, &request),
        }
    }

    fn decode_response(&self, body: &Value) -> Result<Vec<Delta>, ProviderFailure> {
        match self.config.protocol {
            Protocol::OpenAiCompatible => openai::decode_response(body),
            Protocol::Anthropic => anthropic::decode_response(body),
            Protocol::Gemini => gemini::decode_response(body),
            Protocol::Ollama => ollama::decode_response(body),
        }
    }

    async fn attempt(
        &self,
        wire: &WireRequest,
        stream: bool,
        emit: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ChatResponse, ProviderFailure> {
        let timeouts = self.config.timeouts;
        let deadline = Instant::now() + timeouts.request;
        let mut builder = self.client.post(&wire.url).json(&wire.body);
        for (name, value) in &wire.headers {
            builder = builder.header(*name, value);
        }
        let response = timeout(timeouts.effective_header(), builder.send())
            .await
            .map_err(|_| ProviderFailure::timeout("no response headers from the provider in time"))?
            .map_err(|e| ProviderFailure::from_transport(&e))?;

        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after_ms(response.headers());
            let body = read_error_body(response, deadline).await;
            return Err(ProviderFailure::from_status(
                status.as_u16(),
                &body,
                retry_after,
            ));
        }

        if !stream {
            let bytes = timeout(
                remaining(deadline),
                read_bounded(response, MAX_RESPONSE_BODY),
            )
            .await
            .map_err(|_| ProviderFailure::timeout("the provider request timed out"))??;
            let body: Value = serde_json::from_slice(&bytes).map_err(|_| {
                ProviderFailure::malformed("the provider response is not valid JSON")
            })?;
            let mut assembler = Assembler::default();
            for delta in self.decode_response(&body)? {
                assembler.apply(delta, emit);
            }
            return assembler.finish();
        }

        let mut body = response.bytes_stream();
        let mut parser = StreamParser::new(self.config.protocol);
        loop {
            let left = remaining(deadline);
            if left.is_zero() {
                return Err(ProviderFailure::timeout("the provider request timed out"));
            }
            let stall = timeouts.effective_stall();
            let next = match timeout(stall.min(left), body.next()).await {
                Ok(next) => next,
                Err(_) if stall < left => {
                    return Err(ProviderFailure::timeout(format!(
                        "the provider stream stalled: no data for {} s",
                        stall.as_secs_f32()
                    )));
                }
                Err(_) => return Err(ProviderFailure::timeout("the provider request timed out")),
            };
            match next {
                None => break,
                Some(Err(e)) => return Err(ProviderFailure::from_transport(&e)),
                Some(Ok(chunk)) => {
                    if parser.push(&chunk, emit)? == Progress::Terminal {
                        break;
                    }
                }
            }
        }
        parser.finish(emit)
    }
}

fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// `retry-after-ms`, or `retry-after` in seconds.
fn retry_after_ms(headers: &HeaderMap) -> Option<u64> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        return Some(ms.max(0.0) as u64);
    }
    text("retry-after")
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite())
        .map(|secs| (secs.max(0.0) * 1000.0) as u64)
}

/// Reads a whole body, refusing one larger than `limit`.
async fn read_bounded(
    response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, ProviderFailure> {
    let mut body = response.bytes_stream();
    let mut buf = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| ProviderFailure::from_transport(&e))?;
        if buf.len() + chunk.len() > limit {
            return Err(ProviderFailure::malformed(
                "the provider response is too large",
            ));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf)
}

async fn read_error_body(response: reqwest::Response, deadline: Instant) -> String {
    let mut body = response.bytes_stream();
    let mut buf = Vec::new();
    let read = async {
        while let Some(Ok(chunk)) = body.next().await {
            buf.extend_from_slice(&chunk);
            if buf.len() >= MAX_ERROR_BODY {
                buf.truncate(MAX_ERROR_BODY);
                break;
            }
        }
    };
    let _ = timeout(remaining(deadline).min(Duration::from_secs(10)), read).await;
    String::from_utf8_lossy(&buf).into_owned()
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
