//! Provider transports behind one provider-neutral call; every streamed byte goes through the
//! one [`StreamParser`].
//!
//! Routes are fixed per call: a failure is retried at most once, on the same route, and only
//! before any output was shown; there is never a switch of provider or model.

#[cfg(test)]
mod wire_shapes_tests;

pub mod pool;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use reqwest::header::HeaderMap;
use tokio::time::{Instant, timeout};

// The protocols themselves (request shapes, stream parsing, failure classification) are pure code
// in `pulse-providers`; this module adds the network.
pub use pulse_providers::{
    FailureCause, PATROL_STALL, Progress, Protocol, ProviderConfig, ProviderFailure, StreamParser,
    Streaming, Timeouts, WireRequest, anthropic, failure, framing, gemini, models, ollama, openai,
    stream, types, types::*,
};

/// At most this many attempts per call: the first and one same-route retry.
pub const MAX_ATTEMPTS: u32 = 2;
/// The retry never waits longer than this, whatever the provider asks.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);
/// Error bodies are read up to this size for classification.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// A non-streaming response larger than this is refused.
const MAX_RESPONSE_BODY: usize = 32 * 1024 * 1024;

/// The routes known to refuse streamed requests, by server identity
/// ([`ProviderConfig::server_identity`]) and model: with [`Streaming::Auto`] they are asked
/// without streaming from the start. A route leaves it when its address or streaming setting
/// changes (its identity is another); other settings changes keep it (the qualification harness
/// changed the settings version six times in one suite, and each change sent the next request
/// streamed again).
#[derive(Debug, Default)]
pub struct BufferedRoutes {
    routes: Mutex<HashSet<String>>,
}

impl BufferedRoutes {
    fn key(config: &ProviderConfig, model: &str) -> String {
        format!("{}|{model}", config.server_identity())
    }

    /// Whether the route of `config` and `model` is known to answer only unstreamed.
    pub fn is_buffered(&self, config: &ProviderConfig, model: &str) -> bool {
        self.routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&Self::key(config, model))
    }

    fn remember(&self, config: &ProviderConfig, model: &str) {
        self.routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(Self::key(config, model));
    }
}

/// A client for one provider route.
#[derive(Debug, Clone)]
pub struct Provider {
    config: ProviderConfig,
    client: reqwest::Client,
    buffered: Arc<BufferedRoutes>,
}

/// Why one attempt failed, and whether it was a stream that ended before any of the turn
/// arrived (what a server that cannot stream tool calls does).
struct AttemptFailure {
    failure: ProviderFailure,
    stream_without_turn: bool,
}

impl From<ProviderFailure> for AttemptFailure {
    fn from(failure: ProviderFailure) -> Self {
        Self {
            failure,
            stream_without_turn: false,
        }
    }
}

impl Provider {
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderFailure> {
        let client = Self::http_client(config.timeouts.effective_header())?;
        Ok(Self {
            config,
            client,
            buffered: Arc::default(),
        })
    }

    /// The HTTP client [`Provider::new`] builds, for callers that keep one (its connection
    /// pool and TLS set-up) across many providers with the same connect timeout.
    pub fn http_client(
        connect_timeout: std::time::Duration,
    ) -> Result<reqwest::Client, ProviderFailure> {
        // reqwest is built without a default crypto back-end; make sure one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .build()
            .map_err(|_| {
                ProviderFailure::new(
                    FailureCause::Connectivity,
                    "could not build the HTTP client",
                )
            })
    }

    /// A provider over an existing client (see [`Provider::http_client`]).
    pub fn with_client(config: ProviderConfig, client: reqwest::Client) -> Self {
        Self {
            config,
            client,
            buffered: Arc::default(),
        }
    }

    /// Shares `routes` (what this service learned about routes that refuse streaming).
    pub fn with_buffered_routes(mut self, routes: Arc<BufferedRoutes>) -> Self {
        self.buffered = routes;
        self
    }

    /// Whether a turn of `request` is sent streamed, by the route's setting and what it is
    /// known to refuse.
    pub fn streams(&self, request: &ChatRequest) -> bool {
        request.stream
            && match self.config.streaming {
                Streaming::On => true,
                Streaming::Off => false,
                Streaming::Auto => !self.buffered.is_buffered(&self.config, &request.model),
            }
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
        let stream = self.streams(request);
        let wire = self.build_streamed(request, stream)?;
        let mut attempt = 1;
        loop {
            let mut shown = false;
            let mut forward = |ev: StreamEvent| {
                shown |= ev.is_visible_output();
                on_event(ev);
            };
            let result = self.attempt(&wire, stream, &mut forward).await;
            let result = match result {
                Err(failed)
                    if stream
                        && self.config.streaming == Streaming::Auto
                        && !shown
                        && (failed.stream_without_turn || failed.failure.refuses_streaming()) =>
                {
                    // The server cannot stream this request: ask again without streaming. Not
                    // the transient retry: the same question in the form the server takes.
                    tracing::warn!(
                        cause = %failed.failure.cause,
                        detail = %failed.failure.message,
                        "the provider refused a streamed request; asking again without streaming"
                    );
                    let wire = self.build_streamed(request, false)?;
                    let answered = self
                        .attempt(&wire, false, on_event)
                        .await
                        .map_err(|failed| failed.failure);
                    if answered.is_ok() {
                        self.buffered.remember(&self.config, &request.model);
                    }
                    return answered;
                }
                other => other.map_err(|failed| failed.failure),
            };
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
        self.build_streamed(request, self.streams(request))
    }

    fn build_streamed(
        &self,
        request: &ChatRequest,
        stream: bool,
    ) -> Result<WireRequest, ProviderFailure> {
        if request.stream == stream {
            return pulse_providers::build(&self.config, request);
        }
        let mut request = request.clone();
        request.stream = stream;
        pulse_providers::build(&self.config, &request)
    }

    async fn attempt(
        &self,
        wire: &WireRequest,
        stream: bool,
        emit: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ChatResponse, AttemptFailure> {
        let timeouts = self.config.timeouts;
        let deadline = Instant::now() + timeouts.request;
        let mut builder = self.client.post(&wire.url).json(&wire.body);
        for (name, value) in &wire.headers {
            builder = builder.header(*name, value);
        }
        let response = timeout(timeouts.effective_header(), builder.send())
            .await
            .map_err(|_| ProviderFailure::timeout("no response headers from the provider in time"))?
            .map_err(|e| transport_failure(&e))?;

        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after_ms(response.headers());
            let body = read_error_body(response, deadline).await;
            return Err(ProviderFailure::from_status(status.as_u16(), &body, retry_after).into());
        }

        if !stream {
            let bytes = timeout(
                remaining(deadline),
                read_bounded(response, MAX_RESPONSE_BODY),
            )
            .await
            .map_err(|_| ProviderFailure::timeout("the provider request timed out"))??;
            return Ok(pulse_providers::parse_response(
                self.config.protocol,
                &bytes,
                emit,
            )?);
        }

        let mut body = response.bytes_stream();
        let mut parser = StreamParser::new(self.config.protocol);
        // Whether any event of the turn arrived; a stream that ends (or breaks) before one did
        // is a server that could not stream this request.
        let mut events = 0_usize;
        let mut counted = |ev: StreamEvent| {
            events += 1;
            emit(ev);
        };
        let without_turn = |failure: ProviderFailure, events: usize| AttemptFailure {
            failure,
            stream_without_turn: events == 0,
        };
        loop {
            let left = remaining(deadline);
            if left.is_zero() {
                return Err(ProviderFailure::timeout("the provider request timed out").into());
            }
            let stall = timeouts.effective_stall();
            let next = match timeout(stall.min(left), body.next()).await {
                Ok(next) => next,
                Err(_) if stall < left => {
                    return Err(ProviderFailure::timeout(format!(
                        "the provider stream stalled: no data for {} s",
                        stall.as_secs_f32()
                    ))
                    .into());
                }
                Err(_) => {
                    return Err(ProviderFailure::timeout("the provider request timed out").into());
                }
            };
            match next {
                None => break,
                Some(Err(e)) => return Err(without_turn(transport_failure(&e), events)),
                Some(Ok(chunk)) => {
                    if parser.push(&chunk, &mut counted)? == Progress::Terminal {
                        break;
                    }
                }
            }
        }
        let finished = parser.finish(&mut counted);
        finished.map_err(|failure| without_turn(failure, events))
    }
}

/// Pages of a provider's model list followed at most: a list longer than this is cut.
pub const MAX_LIST_PAGES: usize = 5;
/// A model list answer larger than this is refused.
const MAX_LIST_BODY: usize = 8 * 1024 * 1024;

impl Provider {
    /// The models the provider lists at its own list endpoint, within the route's request
    /// timeout for the whole list. Not retried: an operator waiting on the answer retries.
    pub async fn list_models(&self) -> Result<Vec<models::ListedModel>, ProviderFailure> {
        let deadline = Instant::now() + self.config.timeouts.request;
        let mut listed = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let request = models::list_request(&self.config, cursor.as_deref());
            let page = timeout(remaining(deadline), self.list_page(&request, deadline))
                .await
                .map_err(|_| {
                    ProviderFailure::timeout("the provider did not list its models in time")
                })??;
            listed.extend(page.models);
            match page.next {
                // A cursor that does not move would loop to the bound for nothing.
                Some(next) if cursor.as_deref() != Some(next.as_str()) => cursor = Some(next),
                _ => break,
            }
        }
        Ok(listed)
    }

    async fn list_page(
        &self,
        request: &models::ListRequest,
        deadline: Instant,
    ) -> Result<models::ListPage, ProviderFailure> {
        let mut builder = self.client.get(&request.url);
        for (name, value) in &request.headers {
            builder = builder.header(*name, value);
        }
        let response = builder.send().await.map_err(|e| transport_failure(&e))?;
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
        let body = read_bounded(response, MAX_LIST_BODY).await?;
        models::parse_list(self.config.protocol, &body)
    }
}

/// Classifies a transport error from reqwest without echoing URLs.
fn transport_failure(err: &reqwest::Error) -> ProviderFailure {
    if err.is_timeout() {
        ProviderFailure::timeout("the provider request timed out")
    } else if err.is_decode() {
        ProviderFailure::malformed("the provider response body could not be decoded")
    } else if err.is_connect() {
        ProviderFailure::new(
            FailureCause::Connectivity,
            "could not connect to the provider",
        )
    } else if err.is_body() {
        ProviderFailure::new(
            FailureCause::Connectivity,
            "the connection to the provider was interrupted",
        )
    } else {
        ProviderFailure::new(FailureCause::Connectivity, "the provider request failed")
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
        let chunk = chunk.map_err(|e| transport_failure(&e))?;
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
