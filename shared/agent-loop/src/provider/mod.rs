//! Provider transports behind one provider-neutral call; every streamed byte goes through the
//! one [`StreamParser`].
//!
//! Routes are fixed per call: a failure is retried at most once, on the same route, and only
//! before any output was shown; there is never a switch of provider or model.

#[cfg(test)]
mod wire_shapes_tests;

pub mod pool;

use std::time::Duration;

use futures::StreamExt as _;
use reqwest::header::HeaderMap;
use tokio::time::{Instant, timeout};

// The protocols themselves (request shapes, stream parsing, failure classification) are pure code
// in `pulse-providers`; this module adds the network.
pub use pulse_providers::{
    FailureCause, PATROL_STALL, Progress, Protocol, ProviderConfig, ProviderFailure, StreamParser,
    Timeouts, WireRequest, anthropic, failure, framing, gemini, ollama, openai, stream, types,
    types::*,
};

/// At most this many attempts per call: the first and one same-route retry.
pub const MAX_ATTEMPTS: u32 = 2;
/// The retry never waits longer than this, whatever the provider asks.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);
/// Error bodies are read up to this size for classification.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// A non-streaming response larger than this is refused.
const MAX_RESPONSE_BODY: usize = 32 * 1024 * 1024;

/// A client for one provider route.
#[derive(Debug, Clone)]
pub struct Provider {
    config: ProviderConfig,
    client: reqwest::Client,
}

impl Provider {
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderFailure> {
        let client = Self::http_client(config.timeouts.effective_header())?;
        Ok(Self { config, client })
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
        Self { config, client }
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
        pulse_providers::build(&self.config, request)
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
            .map_err(|e| transport_failure(&e))?;

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
            return pulse_providers::parse_response(self.config.protocol, &bytes, emit);
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
                Some(Err(e)) => return Err(transport_failure(&e)),
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
