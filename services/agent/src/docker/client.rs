use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use super::endpoint::DockerEndpoint;
use super::error::DockerError;
use super::events::EventStream;
use super::logs::{LogDemuxer, LogTail};
use super::model::{ContainerDetails, ContainerSummary, RawDetails, RawSummary, bounded};
use super::projection::CompactInspect;
use super::scope::{self, LabelScope};
use super::version::{
    ApiVersion, CLIENT_API_VERSION, EngineVersion, MIN_API_VERSION, MIN_DOCKER_RELEASE,
    VersionRefusal, is_version_refusal, negotiate,
};

/// Bytes of an error body read to find the engine's `message`.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Bytes of a `GET /version` body accepted (a real one is under 2 KiB).
const MAX_VERSION_BODY: usize = 64 * 1024;
/// The response header in which the engine states its newest API version.
const API_VERSION_HEADER: &str = "api-version";

#[derive(Debug, Clone)]
pub struct DockerClientConfig {
    pub connect_timeout: Duration,
    /// Whole request: connect, headers and body.
    pub request_timeout: Duration,
    /// Longest silence tolerated on the events stream before [`DockerError::Timeout`].
    pub event_idle_timeout: Duration,
    /// Largest JSON response accepted (list, inspect).
    pub max_response_bytes: usize,
    /// Newest Engine API version asked for; negotiation goes lower for older engines, never
    /// below [`MIN_API_VERSION`].
    pub max_api_version: ApiVersion,
    /// Only containers carrying this label are listed, followed and acted on (see
    /// [`super::scope`]); `None`: every container of the engine.
    pub label_scope: Option<LabelScope>,
}

impl Default for DockerClientConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(10),
            event_idle_timeout: Duration::from_secs(300),
            max_response_bytes: 16 * 1024 * 1024,
            max_api_version: CLIENT_API_VERSION,
            label_scope: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogTailRequest {
    /// Lines asked of the engine (`tail=`) and kept.
    pub max_lines: usize,
    /// Bytes read from the stream at most; reading stops there and the tail is marked truncated.
    pub max_bytes: usize,
    /// `Some(tty)` from inspect when known; `None` detects the framing from the first bytes.
    pub tty: Option<bool>,
}

impl Default for LogTailRequest {
    fn default() -> Self {
        Self {
            max_lines: 100,
            max_bytes: 256 * 1024,
            tty: None,
        }
    }
}

/// Seconds a stopping container gets before the engine kills it.
pub const CONTAINER_STOP_GRACE_SECS: u64 = 10;

/// The container lifecycle calls the command channel may make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerAction {
    Start,
    Stop,
    Restart,
}

impl ContainerAction {
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerAction::Start => "start",
            ContainerAction::Stop => "stop",
            ContainerAction::Restart => "restart",
        }
    }
}

/// The body of a [`DockerClient::request`].
#[derive(Debug, Clone, PartialEq)]
pub enum RequestBody {
    /// Sent as `application/json`.
    Json(serde_json::Value),
    /// A tar archive (a build context), sent as `application/x-tar`.
    Tar(Vec<u8>),
}

impl RequestBody {
    fn content_type(&self) -> &'static str {
        match self {
            Self::Json(_) => "application/json",
            Self::Tar(_) => "application/x-tar",
        }
    }

    fn bytes(&self) -> Bytes {
        match self {
            Self::Json(value) => Bytes::from(value.to_string()),
            Self::Tar(archive) => Bytes::copy_from_slice(archive),
        }
    }
}

#[derive(Debug, Clone)]
pub struct DockerClient {
    endpoint: DockerEndpoint,
    config: DockerClientConfig,
    /// The version agreed with the engine, shared by every clone; `None` until the first
    /// request and again after the engine went away or stated another version.
    negotiated: Arc<Mutex<Option<Negotiated>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Negotiated {
    /// What requests are pinned to.
    version: ApiVersion,
    /// The engine's newest version as `GET /version` stated it; `None` when it did not answer
    /// that route (requests then go out at ours).
    engine_max: Option<ApiVersion>,
}

#[derive(Deserialize)]
struct ApiMessage {
    message: String,
}

/// `POST /containers/create` for errors: the method and the path without its query.
fn request_operation(method: &hyper::Method, path_and_query: &str) -> String {
    let path = path_and_query.split('?').next().unwrap_or_default();
    format!("{method} {}", bounded(path, 128))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Container ids and names only; anything else could change the request path.
fn checked_id(id: &str) -> Result<&str, DockerError> {
    let ok = !id.is_empty()
        && id.len() <= 256
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(id)
    } else {
        Err(DockerError::InvalidContainerId {
            id: bounded(id, 256),
        })
    }
}

async fn handshake<S>(stream: S, operation: &str) -> Result<SendRequest<Full<Bytes>>, DockerError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| DockerError::Transport {
            operation: operation.to_owned(),
            reason: e.to_string(),
        })?;
    // Drives the connection until the response body is finished or dropped.
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "docker connection ended with an error");
        }
    });
    Ok(sender)
}

impl DockerClient {
    pub fn new(endpoint: DockerEndpoint, config: DockerClientConfig) -> Self {
        Self {
            endpoint,
            config,
            negotiated: Arc::new(Mutex::new(None)),
        }
    }

    /// Endpoint from `DOCKER_HOST` (default unix socket), default timeouts.
    pub fn from_env() -> Result<Self, DockerError> {
        Ok(Self::new(
            DockerEndpoint::from_env()?,
            DockerClientConfig::default(),
        ))
    }

    pub fn endpoint(&self) -> &DockerEndpoint {
        &self.endpoint
    }

    /// `GET /_ping`: whether an engine answers at the endpoint.
    pub async fn ping(&self) -> Result<(), DockerError> {
        let deadline = Instant::now() + self.config.request_timeout;
        let response = self.send("ping", "/_ping".to_owned(), deadline).await?;
        let response = self.check_status("ping", None, response, deadline).await?;
        let body = self
            .collect("ping", response.into_body(), 1024, deadline)
            .await?;
        if body.as_ref().trim_ascii() == b"OK" {
            Ok(())
        } else {
            Err(DockerError::Decode {
                operation: "ping".to_owned(),
                reason: "engine did not answer OK".to_owned(),
            })
        }
    }

    /// The Engine API version requests are pinned to, negotiated with the engine on first use
    /// (see [`super::version`]); [`DockerError::UnsupportedApiVersion`] for an engine older
    /// than [`MIN_API_VERSION`].
    pub async fn api_version(&self) -> Result<ApiVersion, DockerError> {
        let deadline = Instant::now() + self.config.request_timeout;
        self.negotiated_version(deadline).await
    }

    /// The label scope, if any.
    pub fn label_scope(&self) -> Option<&LabelScope> {
        self.config.label_scope.as_ref()
    }

    /// `GET /containers/json?all=1`, with the label scope as the engine's filter.
    pub async fn list_containers(&self) -> Result<Vec<ContainerSummary>, DockerError> {
        let mut path = "/containers/json?all=1".to_owned();
        if let Some(filters) = scope::filters(self.label_scope(), false) {
            path.push_str(&format!("&filters={filters}"));
        }
        let raw: Vec<RawSummary> = self.get_json("list containers", None, path).await?;
        Ok(raw.into_iter().map(ContainerSummary::from).collect())
    }

    /// `GET /containers/{id}/json`; a container outside the label scope is not found.
    pub async fn inspect_container(&self, id: &str) -> Result<ContainerDetails, DockerError> {
        let id = checked_id(id)?;
        let raw: RawDetails = self
            .get_json("inspect", Some(id), format!("/containers/{id}/json"))
            .await?;
        let in_scope = self
            .label_scope()
            .is_none_or(|scope| scope.matches(raw.labels().unwrap_or(&BTreeMap::new())));
        if !in_scope {
            return Err(DockerError::NotFound { id: id.to_owned() });
        }
        Ok(ContainerDetails::from(raw))
    }

    /// [`DockerError::NotFound`] unless the container is in the label scope (no call when
    /// unscoped).
    async fn ensure_in_scope(&self, id: &str) -> Result<(), DockerError> {
        if self.label_scope().is_some() {
            self.inspect_container(id).await?;
        }
        Ok(())
    }

    /// Inspect, compacted for evidence (INV-13/14).
    pub async fn inspect_compact(&self, id: &str) -> Result<CompactInspect, DockerError> {
        Ok(CompactInspect::from_details(
            &self.inspect_container(id).await?,
        ))
    }

    /// The last lines of stdout and stderr, bounded in lines and bytes.
    pub async fn logs_tail(
        &self,
        id: &str,
        request: LogTailRequest,
    ) -> Result<LogTail, DockerError> {
        let id = checked_id(id)?;
        self.ensure_in_scope(id).await?;
        let operation = "logs";
        let deadline = Instant::now() + self.config.request_timeout;
        let path = format!(
            "/containers/{id}/logs?stdout=1&stderr=1&tail={}",
            request.max_lines
        );
        let response = self
            .exchange(hyper::Method::GET, operation, Some(id), path, deadline)
            .await?;
        let mut body = response.into_body();
        let mut demuxer = LogDemuxer::new(request.tty, request.max_lines);
        let mut read = 0usize;
        loop {
            let frame = tokio::time::timeout_at(deadline, body.frame())
                .await
                .map_err(|_| self.timeout(operation))?;
            let Some(frame) = frame else { break };
            let frame = frame.map_err(|e| DockerError::Transport {
                operation: operation.to_owned(),
                reason: e.to_string(),
            })?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let take = data.len().min(request.max_bytes.saturating_sub(read));
            demuxer.push(&data[..take]);
            read += take;
            if take < data.len() {
                demuxer.mark_truncated();
                break;
            }
        }
        Ok(demuxer.finish())
    }

    /// `POST /containers/{id}/start|stop|restart`. `Ok(true)` when the engine acted,
    /// `Ok(false)` when the container already was in the asked state (HTTP 304).
    pub async fn container_action(
        &self,
        id: &str,
        action: ContainerAction,
    ) -> Result<bool, DockerError> {
        let id = checked_id(id)?;
        self.ensure_in_scope(id).await?;
        let operation = action.as_str();
        // Stop and restart wait up to `t` seconds for the container to exit; the request
        // timeout covers that wait.
        let (path, timeout) = match action {
            ContainerAction::Start => (
                format!("/containers/{id}/start"),
                self.config.request_timeout,
            ),
            ContainerAction::Stop | ContainerAction::Restart => (
                format!(
                    "/containers/{id}/{operation}?t={}",
                    CONTAINER_STOP_GRACE_SECS
                ),
                self.config.request_timeout + Duration::from_secs(CONTAINER_STOP_GRACE_SECS),
            ),
        };
        let deadline = Instant::now() + timeout;
        let response = self
            .exchange(hyper::Method::POST, operation, Some(id), path, deadline)
            .await?;
        if response.status() == StatusCode::NOT_MODIFIED {
            return Ok(false);
        }
        let _ = self
            .collect(operation, response.into_body(), MAX_ERROR_BODY, deadline)
            .await;
        Ok(true)
    }

    /// Subscribes to container events, optionally replaying from `since`.
    pub async fn events(&self, since: Option<DateTime<Utc>>) -> Result<EventStream, DockerError> {
        let operation = "events";
        let deadline = Instant::now() + self.config.request_timeout;
        let filters = scope::filters(self.label_scope(), true).unwrap_or_default();
        let mut path = format!("/events?filters={filters}");
        if let Some(since) = since {
            path.push_str(&format!("&since={}", since.timestamp()));
        }
        let response = self
            .exchange(hyper::Method::GET, operation, None, path, deadline)
            .await?;
        Ok(EventStream::new(
            response.into_body(),
            self.config.event_idle_timeout,
        ))
    }

    /// Any Engine API call: `method` to `path_and_query` (starting with `/`) under the
    /// negotiated version prefix, with an optional body, the whole exchange (negotiation,
    /// headers and the full response body, up to `max_response_bytes`) bounded by `timeout`.
    /// A success or 304 comes back with its body; any other status is
    /// [`DockerError::Api`] carrying the engine's message.
    pub async fn request(
        &self,
        method: hyper::Method,
        path_and_query: &str,
        body: Option<RequestBody>,
        timeout: Duration,
    ) -> Result<(StatusCode, Bytes), DockerError> {
        let operation = request_operation(&method, path_and_query);
        if !path_and_query.starts_with('/') {
            return Err(DockerError::Transport {
                operation,
                reason: "the request path must start with /".to_owned(),
            });
        }
        let deadline = Instant::now() + timeout;
        let timed_out = || DockerError::Timeout {
            operation: operation.clone(),
            timeout_ms: millis(timeout),
        };
        let response = tokio::time::timeout_at(
            deadline,
            self.exchange_with_body(
                method,
                &operation,
                None,
                path_and_query.to_owned(),
                body.as_ref(),
                deadline,
            ),
        )
        .await
        .map_err(|_| timed_out())??;
        let status = response.status();
        let body = self
            .collect(
                &operation,
                response.into_body(),
                self.config.max_response_bytes,
                deadline,
            )
            .await
            .map_err(|error| match error {
                DockerError::Timeout { .. } => timed_out(),
                other => other,
            })?;
        Ok((status, body))
    }

    /// Sends `method` to `path` under the negotiated version prefix and checks the status
    /// (a 304 is passed through for the lifecycle calls). Forgets the version when the engine
    /// is lost or states another one, and retries once when the engine refuses the version
    /// (it was replaced by an older one between two requests). The engine refuses a version
    /// before routing the request, so a retried start, stop or restart cannot act twice.
    async fn exchange(
        &self,
        method: hyper::Method,
        operation: &str,
        id: Option<&str>,
        path: String,
        deadline: Instant,
    ) -> Result<Response<Incoming>, DockerError> {
        self.exchange_with_body(method, operation, id, path, None, deadline)
            .await
    }

    /// [`Self::exchange`] with an optional request body (sent again on the version retry;
    /// the engine refused the first one before reading it).
    async fn exchange_with_body(
        &self,
        method: hyper::Method,
        operation: &str,
        id: Option<&str>,
        path: String,
        body: Option<&RequestBody>,
        deadline: Instant,
    ) -> Result<Response<Incoming>, DockerError> {
        let mut retried = false;
        loop {
            let version = self.negotiated_version(deadline).await?;
            let versioned = format!("{}{path}", version.path_prefix());
            let response = match self
                .send_method(method.clone(), operation, versioned, body, deadline)
                .await
            {
                Ok(response) => response,
                Err(error) => {
                    if error.is_connection_loss() {
                        self.forget_version();
                    }
                    return Err(error);
                }
            };
            self.note_engine_version(&response);
            if response.status() == StatusCode::NOT_MODIFIED {
                return Ok(response);
            }
            match self.check_status(operation, id, response, deadline).await {
                Err(DockerError::Api {
                    status: 400,
                    message,
                    ..
                }) if !retried && is_version_refusal(&message) => {
                    tracing::info!(endpoint = %self.endpoint, %version, %message, "docker engine refused the negotiated api version; negotiating again");
                    self.forget_version();
                    retried = true;
                }
                other => return other,
            }
        }
    }

    fn cached_version(&self) -> Option<Negotiated> {
        *self.negotiated.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn forget_version(&self) {
        *self.negotiated.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Every engine response states the engine's newest version; a different one than
    /// negotiated means the engine was upgraded or replaced.
    fn note_engine_version(&self, response: &Response<Incoming>) {
        let stated = response
            .headers()
            .get(API_VERSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(ApiVersion::parse);
        let mut cached = self.negotiated.lock().unwrap_or_else(|e| e.into_inner());
        let known = cached.and_then(|n| n.engine_max);
        match (stated, known) {
            (Some(stated), Some(known)) if stated != known => {
                tracing::info!(endpoint = %self.endpoint, %known, %stated, "docker engine api version changed; negotiating again");
                *cached = None;
            }
            _ => {}
        }
    }

    async fn negotiated_version(&self, deadline: Instant) -> Result<ApiVersion, DockerError> {
        if let Some(negotiated) = self.cached_version() {
            return Ok(negotiated.version);
        }
        let negotiated = self.negotiate_now(deadline).await?;
        *self.negotiated.lock().unwrap_or_else(|e| e.into_inner()) = Some(negotiated);
        Ok(negotiated.version)
    }

    /// `GET /version` (unversioned) and [`negotiate`]. An endpoint that answers that route with
    /// an HTTP error (a proxy that filters it) is spoken to at our version.
    async fn negotiate_now(&self, deadline: Instant) -> Result<Negotiated, DockerError> {
        let operation = "version";
        let response = self
            .send(operation, "/version".to_owned(), deadline)
            .await?;
        let status = response.status();
        if !status.is_success() {
            let _ = self
                .collect(operation, response.into_body(), MAX_ERROR_BODY, deadline)
                .await;
            let version = self.config.max_api_version.max(MIN_API_VERSION);
            tracing::debug!(endpoint = %self.endpoint, status = status.as_u16(), %version, "docker engine did not answer /version; using our api version");
            return Ok(Negotiated {
                version,
                engine_max: None,
            });
        }
        let body = self
            .collect(operation, response.into_body(), MAX_VERSION_BODY, deadline)
            .await?;
        let engine = EngineVersion::from_json(&body).map_err(|reason| DockerError::Decode {
            operation: operation.to_owned(),
            reason,
        })?;
        match negotiate(&engine, self.config.max_api_version) {
            Ok(version) => {
                tracing::debug!(endpoint = %self.endpoint, engine = %engine.api_version, %version, "docker engine api version negotiated");
                Ok(Negotiated {
                    version,
                    engine_max: Some(engine.api_version),
                })
            }
            Err(VersionRefusal::EngineTooOld { engine: too_old }) => {
                Err(DockerError::UnsupportedApiVersion {
                    endpoint: self.endpoint.to_string(),
                    release: engine.release,
                    engine: too_old.to_string(),
                    minimum: MIN_API_VERSION.to_string(),
                    min_release: MIN_DOCKER_RELEASE.to_owned(),
                })
            }
        }
    }

    fn timeout(&self, operation: &str) -> DockerError {
        DockerError::Timeout {
            operation: operation.to_owned(),
            timeout_ms: millis(self.config.request_timeout),
        }
    }

    fn unavailable(&self, reason: String) -> DockerError {
        DockerError::EngineUnavailable {
            endpoint: self.endpoint.to_string(),
            reason,
        }
    }

    async fn connect(&self, operation: &str) -> Result<SendRequest<Full<Bytes>>, DockerError> {
        let timeout = self.config.connect_timeout;
        let timed_out =
            || self.unavailable(format!("connect timed out after {} ms", millis(timeout)));
        match &self.endpoint {
            DockerEndpoint::Unix(path) => {
                let stream = tokio::time::timeout(timeout, tokio::net::UnixStream::connect(path))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| self.unavailable(e.to_string()))?;
                handshake(stream, operation).await
            }
            DockerEndpoint::Tcp { host, port } => {
                let stream = tokio::time::timeout(
                    timeout,
                    tokio::net::TcpStream::connect((host.as_str(), *port)),
                )
                .await
                .map_err(|_| timed_out())?
                .map_err(|e| self.unavailable(e.to_string()))?;
                handshake(stream, operation).await
            }
        }
    }

    async fn send(
        &self,
        operation: &str,
        path: String,
        deadline: Instant,
    ) -> Result<Response<Incoming>, DockerError> {
        self.send_method(hyper::Method::GET, operation, path, None, deadline)
            .await
    }

    async fn send_method(
        &self,
        method: hyper::Method,
        operation: &str,
        path: String,
        body: Option<&RequestBody>,
        deadline: Instant,
    ) -> Result<Response<Incoming>, DockerError> {
        let mut sender = self.connect(operation).await?;
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, self.endpoint.host_header())
            .header(hyper::header::USER_AGENT, "pulse-agent");
        // An empty `Full` ends the stream at once, so a request without a body goes out
        // exactly as before (no body, no content type).
        let payload = match body {
            Some(body) => {
                request = request.header(hyper::header::CONTENT_TYPE, body.content_type());
                body.bytes()
            }
            None => Bytes::new(),
        };
        let request = request
            .body(Full::new(payload))
            .map_err(|e| DockerError::Transport {
                operation: operation.to_owned(),
                reason: e.to_string(),
            })?;
        tokio::time::timeout_at(deadline, sender.send_request(request))
            .await
            .map_err(|_| self.timeout(operation))?
            .map_err(|e| DockerError::Transport {
                operation: operation.to_owned(),
                reason: e.to_string(),
            })
    }

    async fn check_status(
        &self,
        operation: &str,
        id: Option<&str>,
        response: Response<Incoming>,
        deadline: Instant,
    ) -> Result<Response<Incoming>, DockerError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = self
            .collect(operation, response.into_body(), MAX_ERROR_BODY, deadline)
            .await
            .unwrap_or_default();
        let message = serde_json::from_slice::<ApiMessage>(&body)
            .map(|m| m.message)
            .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned());
        if let (StatusCode::NOT_FOUND, Some(id)) = (status, id) {
            return Err(DockerError::NotFound { id: id.to_owned() });
        }
        Err(DockerError::Api {
            operation: operation.to_owned(),
            status: status.as_u16(),
            message: bounded(message.trim(), 512),
        })
    }

    async fn collect(
        &self,
        operation: &str,
        mut body: Incoming,
        limit: usize,
        deadline: Instant,
    ) -> Result<Bytes, DockerError> {
        let mut out = Vec::new();
        loop {
            let frame = tokio::time::timeout_at(deadline, body.frame())
                .await
                .map_err(|_| self.timeout(operation))?;
            let Some(frame) = frame else { break };
            let frame = frame.map_err(|e| DockerError::Transport {
                operation: operation.to_owned(),
                reason: e.to_string(),
            })?;
            if let Ok(data) = frame.into_data() {
                if out.len() + data.len() > limit {
                    return Err(DockerError::ResponseTooLarge {
                        operation: operation.to_owned(),
                        limit,
                    });
                }
                out.extend_from_slice(&data);
            }
        }
        Ok(Bytes::from(out))
    }

    async fn get_json<T: DeserializeOwned>(
        &self,
        operation: &str,
        id: Option<&str>,
        path: String,
    ) -> Result<T, DockerError> {
        let deadline = Instant::now() + self.config.request_timeout;
        let response = self
            .exchange(hyper::Method::GET, operation, id, path, deadline)
            .await?;
        let body = self
            .collect(
                operation,
                response.into_body(),
                self.config.max_response_bytes,
                deadline,
            )
            .await?;
        serde_json::from_slice(&body).map_err(|e| DockerError::Decode {
            operation: operation.to_owned(),
            reason: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_that_could_change_the_path_are_refused() {
        assert!(checked_id("3f4e1a2b").is_ok());
        assert!(checked_id("my_app-web.1").is_ok());
        for bad in ["", "../../images", "a/b", "a?x=1", "a b", "é"] {
            assert!(matches!(
                checked_id(bad),
                Err(DockerError::InvalidContainerId { .. })
            ));
        }
    }

    /// One recorded request of the fake engine: request line, content type, body.
    type Seen = (String, Option<String>, Vec<u8>);

    /// A fake engine on a unix socket: `/version` states 1.41, `/fail` answers 409 with a
    /// message, anything else echoes 201 `{"ok":true}`; every request is recorded.
    async fn fake_engine() -> (
        std::path::PathBuf,
        tokio::sync::mpsc::UnboundedReceiver<Seen>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let dir = std::env::temp_dir().join(format!(
            "pulse-agent-docker-request-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let socket = dir.join("docker.sock");
        let listener = tokio::net::UnixListener::bind(&socket).expect("bind");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let head_end = loop {
                        let n = stream.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
                    let header = |name: &str| {
                        head.lines().find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
                        })
                    };
                    let length: usize = header("content-length")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    while buf.len() < head_end + length {
                        let n = stream.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            break;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    let line = head.lines().next().unwrap_or_default().to_owned();
                    let body = buf[head_end..].to_vec();
                    let (status, answer) = if line.starts_with("GET /version ") {
                        ("200 OK", r#"{"ApiVersion":"1.41","Version":"20.10.24"}"#)
                    } else if line.contains("/fail") {
                        (
                            "409 Conflict",
                            r#"{"message":"the name is already in use"}"#,
                        )
                    } else {
                        ("201 Created", r#"{"ok":true}"#)
                    };
                    let _ = tx.send((line, header("content-type"), body));
                    let response = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                        answer.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                });
            }
        });
        (socket, rx)
    }

    #[tokio::test]
    async fn request_sends_its_body_under_the_negotiated_version_and_reports_engine_errors() {
        let (socket, mut seen) = fake_engine().await;
        let client = DockerClient::new(DockerEndpoint::Unix(socket), DockerClientConfig::default());
        let timeout = Duration::from_secs(5);

        let (status, body) = client
            .request(
                hyper::Method::POST,
                "/containers/create?name=x",
                Some(RequestBody::Json(serde_json::json!({"Image": "lab:1"}))),
                timeout,
            )
            .await
            .expect("create");
        assert_eq!(status, StatusCode::CREATED);
        assert_eq!(body.as_ref(), br#"{"ok":true}"#);
        let (line, _, _) = seen.recv().await.expect("version request");
        assert!(line.starts_with("GET /version "), "{line}");
        let (line, content_type, sent) = seen.recv().await.expect("create request");
        assert_eq!(line, "POST /v1.41/containers/create?name=x HTTP/1.1");
        assert_eq!(content_type.as_deref(), Some("application/json"));
        assert_eq!(sent, br#"{"Image":"lab:1"}"#);

        client
            .request(
                hyper::Method::POST,
                "/build?t=lab:1",
                Some(RequestBody::Tar(vec![1, 2, 3])),
                timeout,
            )
            .await
            .expect("build");
        let (line, content_type, sent) = seen.recv().await.expect("build request");
        assert_eq!(line, "POST /v1.41/build?t=lab:1 HTTP/1.1");
        assert_eq!(content_type.as_deref(), Some("application/x-tar"));
        assert_eq!(sent, [1, 2, 3]);

        client
            .request(hyper::Method::DELETE, "/volumes/v1", None, timeout)
            .await
            .expect("delete");
        let (line, content_type, sent) = seen.recv().await.expect("delete request");
        assert_eq!(line, "DELETE /v1.41/volumes/v1 HTTP/1.1");
        assert_eq!(content_type, None);
        assert!(sent.is_empty());

        match client
            .request(hyper::Method::POST, "/fail?x=1", None, timeout)
            .await
        {
            Err(DockerError::Api {
                operation,
                status,
                message,
            }) => {
                assert_eq!(operation, "POST /fail");
                assert_eq!(status, 409);
                assert_eq!(message, "the name is already in use");
            }
            other => panic!("expected the engine's refusal, got {other:?}"),
        }
        assert!(matches!(
            client
                .request(hyper::Method::GET, "containers/json", None, timeout)
                .await,
            Err(DockerError::Transport { .. })
        ));
    }

    #[tokio::test]
    async fn missing_socket_is_engine_unavailable() {
        let client = DockerClient::new(
            DockerEndpoint::Unix("/nonexistent/pulse-test/docker.sock".into()),
            DockerClientConfig::default(),
        );
        match client.list_containers().await {
            Err(DockerError::EngineUnavailable { endpoint, reason }) => {
                assert_eq!(endpoint, "unix:///nonexistent/pulse-test/docker.sock");
                assert!(!reason.is_empty());
            }
            other => panic!("expected EngineUnavailable, got {other:?}"),
        }
    }
}
