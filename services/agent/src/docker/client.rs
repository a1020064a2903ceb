use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use super::API_VERSION;
use super::endpoint::DockerEndpoint;
use super::error::DockerError;
use super::events::EventStream;
use super::logs::{LogDemuxer, LogTail};
use super::model::{ContainerDetails, ContainerSummary, RawDetails, RawSummary, bounded};
use super::projection::CompactInspect;

/// Bytes of an error body read to find the engine's `message`.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// `filters={"type":["container"]}`, percent-encoded.
const CONTAINER_EVENTS_FILTER: &str = "%7B%22type%22%3A%5B%22container%22%5D%7D";

#[derive(Debug, Clone)]
pub struct DockerClientConfig {
    pub connect_timeout: Duration,
    /// Whole request: connect, headers and body.
    pub request_timeout: Duration,
    /// Longest silence tolerated on the events stream before [`DockerError::Timeout`].
    pub event_idle_timeout: Duration,
    /// Largest JSON response accepted (list, inspect).
    pub max_response_bytes: usize,
}

impl Default for DockerClientConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(10),
            event_idle_timeout: Duration::from_secs(300),
            max_response_bytes: 16 * 1024 * 1024,
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

#[derive(Debug, Clone)]
pub struct DockerClient {
    endpoint: DockerEndpoint,
    config: DockerClientConfig,
}

#[derive(Deserialize)]
struct ApiMessage {
    message: String,
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

async fn handshake<S>(stream: S, operation: &str) -> Result<SendRequest<Empty<Bytes>>, DockerError>
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
        Self { endpoint, config }
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

    /// `GET /containers/json?all=1`.
    pub async fn list_containers(&self) -> Result<Vec<ContainerSummary>, DockerError> {
        let raw: Vec<RawSummary> = self
            .get_json(
                "list containers",
                None,
                format!("/{API_VERSION}/containers/json?all=1"),
            )
            .await?;
        Ok(raw.into_iter().map(ContainerSummary::from).collect())
    }

    /// `GET /containers/{id}/json`.
    pub async fn inspect_container(&self, id: &str) -> Result<ContainerDetails, DockerError> {
        let id = checked_id(id)?;
        let raw: RawDetails = self
            .get_json(
                "inspect",
                Some(id),
                format!("/{API_VERSION}/containers/{id}/json"),
            )
            .await?;
        Ok(ContainerDetails::from(raw))
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
        let operation = "logs";
        let deadline = Instant::now() + self.config.request_timeout;
        let path = format!(
            "/{API_VERSION}/containers/{id}/logs?stdout=1&stderr=1&tail={}",
            request.max_lines
        );
        let response = self.send(operation, path, deadline).await?;
        let response = self
            .check_status(operation, Some(id), response, deadline)
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
        let operation = action.as_str();
        // Stop and restart wait up to `t` seconds for the container to exit; the request
        // timeout covers that wait.
        let (path, timeout) = match action {
            ContainerAction::Start => (
                format!("/{API_VERSION}/containers/{id}/start"),
                self.config.request_timeout,
            ),
            ContainerAction::Stop | ContainerAction::Restart => (
                format!(
                    "/{API_VERSION}/containers/{id}/{operation}?t={}",
                    CONTAINER_STOP_GRACE_SECS
                ),
                self.config.request_timeout + Duration::from_secs(CONTAINER_STOP_GRACE_SECS),
            ),
        };
        let deadline = Instant::now() + timeout;
        let response = self
            .send_method(hyper::Method::POST, operation, path, deadline)
            .await?;
        if response.status() == StatusCode::NOT_MODIFIED {
            return Ok(false);
        }
        let response = self
            .check_status(operation, Some(id), response, deadline)
            .await?;
        let _ = self
            .collect(operation, response.into_body(), MAX_ERROR_BODY, deadline)
            .await;
        Ok(true)
    }

    /// Subscribes to container events, optionally replaying from `since`.
    pub async fn events(&self, since: Option<DateTime<Utc>>) -> Result<EventStream, DockerError> {
        let operation = "events";
        let deadline = Instant::now() + self.config.request_timeout;
        let mut path = format!("/{API_VERSION}/events?filters={CONTAINER_EVENTS_FILTER}");
        if let Some(since) = since {
            path.push_str(&format!("&since={}", since.timestamp()));
        }
        let response = self.send(operation, path, deadline).await?;
        let response = self
            .check_status(operation, None, response, deadline)
            .await?;
        Ok(EventStream::new(
            response.into_body(),
            self.config.event_idle_timeout,
        ))
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

    async fn connect(&self, operation: &str) -> Result<SendRequest<Empty<Bytes>>, DockerError> {
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
        self.send_method(hyper::Method::GET, operation, path, deadline)
            .await
    }

    async fn send_method(
        &self,
        method: hyper::Method,
        operation: &str,
        path: String,
        deadline: Instant,
    ) -> Result<Response<Incoming>, DockerError> {
        let mut sender = self.connect(operation).await?;
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, self.endpoint.host_header())
            .header(hyper::header::USER_AGENT, "pulse-agent")
            .body(Empty::<Bytes>::new())
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
        let response = self.send(operation, path, deadline).await?;
        let response = self.check_status(operation, id, response, deadline).await?;
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
