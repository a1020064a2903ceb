//! Contract tests for the Docker Engine API client: hand-written Engine API v1.43 fixtures
//! (tests/fixtures/docker) are served by a real HTTP/1.1 server on a unix socket in a temp dir,
//! so the client's whole HTTP path runs. Version negotiation runs against fake engines that
//! serve a chosen API version range the way the real engine does. One test talks to the real
//! engine at `/var/run/docker.sock` (CI starts one; `tests/docker_live.rs` covers it in depth).

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, RawQuery};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::sync::Arc;

use pulse_agent::commands::{Commands, HostExecutor};
use pulse_agent::containers::ContainerCollector;
use pulse_agent::docker::{
    ApiVersion, CLIENT_API_VERSION, CompactInspect, ContainerAction, ContainerRunState,
    DockerClient, DockerClientConfig, DockerEndpoint, DockerError, EventAction, HealthStatus,
    LogStream, LogTailRequest, MIN_API_VERSION,
};
use pulse_agent::host_files::HostFiles;
use pulse_agent::read_exec::ReadExec;
use pulse_agent::reads::Reader;
use pulse_agent::report::Reporter;
use pulse_agent::supervisor::Supervisor;
use pulse_domain::agent_protocol::{Command, LogSource, ReadOutput, ReadRequest, ReceiptStatus};
use pulse_domain::resource::{Health, ResourceStatus, ResourceType};
use tokio::sync::Notify;

const WEB: &str = "4c1f0e8d2b7a41c39e5d6f8a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c";
const API: &str = "9d2e1f0a3b4c45d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e";
const WORKER: &str = "0b7d3c2a1e4f46a5b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f7081920a1b2c";
const CRON: &str = "e5a4b3c2d1f047e8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2";

/// The lines logs-web.bin was built from, in order, with their streams.
const EXPECTED_WEB_LOG: [(LogStream, &str); 5] = [
    (
        LogStream::Stdout,
        "2026/11/29 06:30:00 [notice] 1#1: start worker processes",
    ),
    (
        LogStream::Stderr,
        "2026/11/29 06:30:01 [error] 29#29: *1 connect() failed (111: Connection refused) while connecting to upstream",
    ),
    (
        LogStream::Stdout,
        "172.20.0.1 - - [29/Nov/2026:06:30:02 +0000] \"GET / HTTP/1.1\" 502 157",
    ),
    (
        LogStream::Stdout,
        "172.20.0.1 - - [29/Nov/2026:06:30:03 +0000] \"GET /healthz HTTP/1.1\" 200 2",
    ),
    (
        LogStream::Stderr,
        "2026/11/29 06:30:04 [warn] 29#29: upstream response buffered to a temporary file",
    ),
];

fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/docker")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
}

fn json(name: &str) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], fixture(name)).into_response()
}

fn not_found(id: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "application/json")],
        format!(r#"{{"message":"No such container: {id}"}}"#),
    )
        .into_response()
}

fn inspect_fixture(id: &str) -> Option<&'static str> {
    match id {
        WEB | "shop-web-1" => Some("inspect-web.json"),
        API => Some("inspect-api.json"),
        WORKER => Some("inspect-worker.json"),
        CRON => Some("inspect-cron.json"),
        _ => None,
    }
}

async fn list(RawQuery(query): RawQuery) -> Response {
    // The collector needs stopped containers too: refuse a list without all=1.
    if query.as_deref() != Some("all=1") {
        return (StatusCode::BAD_REQUEST, "expected all=1").into_response();
    }
    json("containers-list.json")
}

async fn inspect(UrlPath(id): UrlPath<String>) -> Response {
    match id.as_str() {
        "boom" => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "application/json")],
            r#"{"message":"error while inspecting: devmapper is sad"}"#,
        )
            .into_response(),
        "slow" => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            json("inspect-web.json")
        }
        _ => match inspect_fixture(&id) {
            Some(name) => json(name),
            None => not_found(&id),
        },
    }
}

async fn logs(UrlPath(id): UrlPath<String>, RawQuery(query): RawQuery) -> Response {
    if id != WEB {
        return not_found(&id);
    }
    let query = query.unwrap_or_default();
    if !(query.contains("stdout=1") && query.contains("stderr=1") && query.contains("tail=")) {
        return (StatusCode::BAD_REQUEST, "expected stdout, stderr and tail").into_response();
    }
    // Small HTTP chunks so frame headers straddle chunk boundaries.
    let chunks: Vec<Result<Vec<u8>, Infallible>> = fixture("logs-web.bin")
        .chunks(5)
        .map(|c| Ok(c.to_vec()))
        .collect();
    (
        [(
            header::CONTENT_TYPE,
            "application/vnd.docker.multiplexed-stream",
        )],
        Body::from_stream(futures::stream::iter(chunks)),
    )
        .into_response()
}

async fn events(RawQuery(query): RawQuery) -> Response {
    let query = query.unwrap_or_default();
    if !query.contains("filters=%7B%22type%22%3A%5B%22container%22%5D%7D") {
        return (StatusCode::BAD_REQUEST, "expected a container type filter").into_response();
    }
    if query.contains("since=1") {
        // Replays nothing and then stays silent: exercises the idle timeout.
        return Body::from_stream(futures::stream::pending::<Result<Vec<u8>, Infallible>>())
            .into_response();
    }
    let chunks: Vec<Result<Vec<u8>, Infallible>> = fixture("events-container.jsonl")
        .chunks(7)
        .map(|c| Ok(c.to_vec()))
        .collect();
    Body::from_stream(futures::stream::iter(chunks)).into_response()
}

/// Lifecycle calls the fake engine received, as `<action> <id> <query>`.
static ACTIONS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn actions() -> Vec<String> {
    ACTIONS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// `POST /containers/{id}/start|stop|restart` as the engine answers them: 204 when it acted,
/// 304 when the container already is in that state, 404 for an unknown id.
async fn lifecycle(
    UrlPath((id, action)): UrlPath<(String, String)>,
    RawQuery(query): RawQuery,
) -> Response {
    let Some(name) = inspect_fixture(&id) else {
        return not_found(&id);
    };
    if !matches!(action.as_str(), "start" | "stop" | "restart") {
        return StatusCode::NOT_FOUND.into_response();
    }
    ACTIONS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(format!("{action} {id} {}", query.unwrap_or_default()));
    let running = name == "inspect-web.json" || name == "inspect-api.json";
    match (action.as_str(), running) {
        ("start", true) | ("stop", false) => StatusCode::NOT_MODIFIED.into_response(),
        _ => StatusCode::NO_CONTENT.into_response(),
    }
}

fn router() -> Router {
    Router::new()
        .route("/_ping", get(|| async { "OK" }))
        .route(
            "/version",
            get(|| async {
                axum::Json(serde_json::json!({"Version": "24.0.7", "ApiVersion": "1.43", "MinAPIVersion": "1.12"}))
            }),
        )
        .route("/v1.43/containers/{id}/{action}", post(lifecycle))
        .route("/v1.43/containers/json", get(list))
        .route("/v1.43/containers/{id}/json", get(inspect))
        .route("/v1.43/containers/{id}/logs", get(logs))
        .route("/v1.43/events", get(events))
}

/// A fake engine on a unix socket in its own temp dir; removed on drop.
struct FakeEngine {
    dir: PathBuf,
    socket: PathBuf,
    server: tokio::task::JoinHandle<()>,
}

impl FakeEngine {
    async fn start() -> Self {
        let dir = temp_dir("engine");
        let socket = dir.join("docker.sock");
        let listener = tokio::net::UnixListener::bind(&socket)
            .unwrap_or_else(|e| panic!("bind {}: {e}", socket.display()));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router()).await;
        });
        Self {
            dir,
            socket,
            server,
        }
    }

    fn client(&self) -> DockerClient {
        self.client_with(DockerClientConfig::default())
    }

    fn client_with(&self, config: DockerClientConfig) -> DockerClient {
        DockerClient::new(DockerEndpoint::Unix(self.socket.clone()), config)
    }
}

impl Drop for FakeEngine {
    fn drop(&mut self) {
        self.server.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A supervisor with no services (the reqwest client it builds needs the crypto provider).
fn supervisor(dir: &Path) -> Supervisor {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Supervisor::new(dir.join("services.d"), None, Arc::new(Notify::new())).expect("supervisor")
}

fn temp_dir(tag: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "pulse-docker-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("temp dir {}: {e}", dir.display()));
    dir
}

#[tokio::test]
async fn ping_answers_over_the_unix_socket() {
    let engine = FakeEngine::start().await;
    engine.client().ping().await.expect("ping");
}

#[tokio::test]
async fn list_maps_the_four_container_states() {
    let engine = FakeEngine::start().await;
    let containers = engine.client().list_containers().await.expect("list");
    let rows: Vec<_> = containers
        .iter()
        .map(|c| (c.names[0].as_str(), c.state, c.health))
        .collect();
    assert_eq!(
        rows,
        vec![
            (
                "shop-web-1",
                ContainerRunState::Running,
                Some(HealthStatus::Healthy)
            ),
            (
                "shop-api-1",
                ContainerRunState::Running,
                Some(HealthStatus::Unhealthy)
            ),
            ("shop-worker-1", ContainerRunState::Exited, None),
            ("backup-cron", ContainerRunState::Restarting, None),
        ]
    );
    let web = &containers[0];
    assert_eq!(web.id, WEB);
    assert_eq!(web.image, "nginx:1.25");
    assert_eq!(
        web.image_id,
        "sha256:a8758716bb6aa4d90071160d27028fe4eaee7ce8166221a97d30440c8eac2be6"
    );
    assert_eq!(
        web.labels
            .get("com.docker.compose.service")
            .map(String::as_str),
        Some("web")
    );
    assert_eq!(web.created.map(|t| t.timestamp()), Some(1_764_380_000));
}

#[tokio::test]
async fn inspect_healthy_container() {
    let engine = FakeEngine::start().await;
    let web = engine
        .client()
        .inspect_container(WEB)
        .await
        .expect("inspect");
    assert_eq!(web.name, "shop-web-1");
    assert_eq!(web.state, ContainerRunState::Running);
    assert!(web.running && !web.oom_killed && !web.dead && !web.restarting);
    assert_eq!(web.exit_code, Some(0));
    assert_eq!(web.error, None);
    let health = web.health.as_ref().expect("health");
    assert_eq!(health.status, HealthStatus::Healthy);
    assert_eq!(health.log.len(), 2);
    assert_eq!(health.log[1].output, "ok");
    assert_eq!(web.restart_policy.name, "unless-stopped");
    assert!(web.started_at.is_some());
    assert_eq!(web.finished_at, None, "docker's zero time means never");
    assert!(!web.tty);
    // Names work as well as ids.
    let by_name = engine.client().inspect_container("shop-web-1").await;
    assert_eq!(by_name.map(|d| d.id).ok().as_deref(), Some(WEB));
}

#[tokio::test]
async fn inspect_unhealthy_container_keeps_bounded_health_log() {
    let engine = FakeEngine::start().await;
    let api = engine
        .client()
        .inspect_container(API)
        .await
        .expect("inspect");
    let health = api.health.as_ref().expect("health");
    assert_eq!(health.status, HealthStatus::Unhealthy);
    assert_eq!(health.failing_streak, 6);
    assert_eq!(health.log.len(), 5);
    assert_eq!(health.log[4].exit_code, Some(1));
    assert_eq!(
        health.log[4].output,
        "curl: (28) Operation timed out after 5000 milliseconds"
    );
    assert_eq!(api.restart_count, 1);
    assert_eq!(api.restart_policy.name, "always");
    let compact = CompactInspect::from_details(&api);
    assert_eq!(
        compact.health_results.len(),
        3,
        "projection keeps the last three"
    );
}

#[tokio::test]
async fn inspect_oom_killed_exited_container() {
    let engine = FakeEngine::start().await;
    let worker = engine
        .client()
        .inspect_container(WORKER)
        .await
        .expect("inspect");
    assert_eq!(worker.state, ContainerRunState::Exited);
    assert!(!worker.running);
    assert!(worker.oom_killed);
    assert_eq!(worker.exit_code, Some(137));
    assert!(worker.health.is_none());
    assert_eq!(worker.restart_policy.name, "no");
    assert_eq!(
        worker.finished_at.map(|t| t.timestamp_subsec_nanos()),
        Some(987_654_321)
    );
}

#[tokio::test]
async fn inspect_restarting_container() {
    let engine = FakeEngine::start().await;
    let cron = engine
        .client()
        .inspect_container(CRON)
        .await
        .expect("inspect");
    assert_eq!(cron.state, ContainerRunState::Restarting);
    assert!(cron.restarting);
    assert_eq!(cron.restart_count, 7);
    assert_eq!(cron.restart_policy.name, "on-failure");
    assert_eq!(cron.restart_policy.maximum_retry_count, 10);
    assert!(cron.labels.is_empty(), "null labels are an empty map");
    assert!(cron.tty);
}

#[tokio::test]
async fn compact_projection_never_carries_env_values_or_unrelated_labels() {
    let engine = FakeEngine::start().await;
    let client = engine.client();
    for id in [WEB, API, WORKER, CRON] {
        let details = client.inspect_container(id).await.expect("inspect");
        let compact = client.inspect_compact(id).await.expect("compact");
        let json = serde_json::to_string(&compact).expect("serialize");
        for secret in [
            "hunter2",
            "DB_PASSWORD",
            "tok_9f8e7d6c",
            "DATABASE_URL",
            "sk-live-123",
            "traefik",
            "config_files",
        ] {
            assert!(!json.contains(secret), "{secret} leaked into {json}");
        }
        assert!(
            !format!("{details:?}").contains("hunter2"),
            "env kept in details"
        );
        for key in compact.labels.keys() {
            assert!(key.starts_with("com.docker.compose."), "{key}");
        }
    }
}

#[tokio::test]
async fn compact_projection_of_the_web_container_is_stable() {
    let engine = FakeEngine::start().await;
    let compact = engine.client().inspect_compact(WEB).await.expect("compact");
    insta::assert_json_snapshot!(compact, @r#"
        {
          "id": "4c1f0e8d2b7a41c39e5d6f8a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c",
          "name": "shop-web-1",
          "image": "nginx:1.25",
          "image_id": "sha256:a8758716bb6aa4d90071160d27028fe4eaee7ce8166221a97d30440c8eac2be6",
          "state": "running",
          "running": true,
          "paused": false,
          "restarting": false,
          "oom_killed": false,
          "dead": false,
          "exit_code": 0,
          "error": null,
          "health_status": "healthy",
          "failing_streak": 0,
          "health_results": [
            {
              "exit_code": 0,
              "end": "2026-11-29T06:30:00.200Z",
              "output": "ok"
            },
            {
              "exit_code": 0,
              "end": "2026-11-29T06:30:30.100Z",
              "output": "ok"
            }
          ],
          "restart_count": 0,
          "restart_policy": {
            "name": "unless-stopped",
            "maximum_retry_count": 0
          },
          "started_at": "2026-11-29T01:33:21.500Z",
          "finished_at": null,
          "labels": {
            "com.docker.compose.container-number": "1",
            "com.docker.compose.project": "shop",
            "com.docker.compose.service": "web"
          }
        }
    "#);
}

#[tokio::test]
async fn compact_projection_of_the_oom_killed_container_is_stable() {
    let engine = FakeEngine::start().await;
    let compact = engine
        .client()
        .inspect_compact(WORKER)
        .await
        .expect("compact");
    insta::assert_json_snapshot!(compact, @r#"
        {
          "id": "0b7d3c2a1e4f46a5b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f7081920a1b2c",
          "name": "shop-worker-1",
          "image": "ghcr.io/example/shop-worker:2.3.1",
          "image_id": "sha256:0f5f1d6b4e2f3c1a9b8e7d6c5b4a39281706f5e4d3c2b1a0f9e8d7c6b5a49382",
          "state": "exited",
          "running": false,
          "paused": false,
          "restarting": false,
          "oom_killed": true,
          "dead": false,
          "exit_code": 137,
          "error": null,
          "health_status": null,
          "failing_streak": null,
          "health_results": [],
          "restart_count": 0,
          "restart_policy": {
            "name": "no",
            "maximum_retry_count": 0
          },
          "started_at": "2026-11-29T06:00:00Z",
          "finished_at": "2026-11-29T06:27:41.987654321Z",
          "labels": {
            "com.docker.compose.oneoff": "False",
            "com.docker.compose.project": "shop",
            "com.docker.compose.service": "worker"
          }
        }
    "#);
}

#[tokio::test]
async fn unknown_container_is_not_found_and_engine_errors_carry_the_message() {
    let engine = FakeEngine::start().await;
    let client = engine.client();
    match client.inspect_container("deadbeef").await {
        Err(DockerError::NotFound { id }) => assert_eq!(id, "deadbeef"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    match client.inspect_container("boom").await {
        Err(DockerError::Api {
            status, message, ..
        }) => {
            assert_eq!(status, 500);
            assert_eq!(message, "error while inspecting: devmapper is sad");
        }
        other => panic!("expected Api error, got {other:?}"),
    }
    assert!(matches!(
        client.inspect_container("../images/json").await,
        Err(DockerError::InvalidContainerId { .. })
    ));
}

#[tokio::test]
async fn logs_tail_demultiplexes_stdout_and_stderr() {
    let engine = FakeEngine::start().await;
    let tail = engine
        .client()
        .logs_tail(WEB, LogTailRequest::default())
        .await
        .expect("logs");
    let lines: Vec<_> = tail
        .lines
        .iter()
        .map(|l| (l.stream, l.text.as_str()))
        .collect();
    assert_eq!(lines, EXPECTED_WEB_LOG.to_vec());
    assert!(!tail.truncated);
}

#[tokio::test]
async fn logs_tail_respects_line_and_byte_bounds() {
    let engine = FakeEngine::start().await;
    let client = engine.client();
    let two = client
        .logs_tail(
            WEB,
            LogTailRequest {
                max_lines: 2,
                ..LogTailRequest::default()
            },
        )
        .await
        .expect("logs");
    let texts: Vec<_> = two.lines.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(texts, vec![EXPECTED_WEB_LOG[3].1, EXPECTED_WEB_LOG[4].1]);
    assert!(two.truncated);

    // The first frame is 8 + 57 bytes; stop inside the second.
    let bounded = client
        .logs_tail(
            WEB,
            LogTailRequest {
                max_bytes: 80,
                ..LogTailRequest::default()
            },
        )
        .await
        .expect("logs");
    assert!(bounded.truncated);
    assert_eq!(bounded.lines[0].text, EXPECTED_WEB_LOG[0].1);
    assert!(bounded.lines.len() <= 2);
}

#[tokio::test]
async fn events_stream_is_parsed_incrementally() {
    let engine = FakeEngine::start().await;
    let mut stream = engine.client().events(None).await.expect("events");
    let mut seen = Vec::new();
    while let Some(event) = stream.next().await.expect("event") {
        seen.push(event);
    }
    let actions: Vec<_> = seen.iter().map(|e| e.action.clone()).collect();
    assert_eq!(
        actions,
        vec![
            EventAction::Start,
            EventAction::HealthStatus(HealthStatus::Unhealthy),
            EventAction::Oom,
            EventAction::Die,
            EventAction::HealthStatus(HealthStatus::Healthy),
        ]
    );
    assert_eq!(stream.skipped(), 1, "the network event is skipped");
    let die = &seen[3];
    assert_eq!(die.container_id, WORKER);
    assert_eq!(die.name.as_deref(), Some("shop-worker-1"));
    assert_eq!(die.exit_code, Some(137));
    assert_eq!(
        die.time.map(|t| t.timestamp_nanos_opt()),
        Some(Some(1_764_397_661_987_654_321))
    );
    // Actor attributes are not copied wholesale (they repeat the container's labels).
    let start = serde_json::to_string(&seen[0]).expect("serialize");
    assert!(!start.contains("com.docker.compose.project"));
}

#[tokio::test]
async fn silent_events_stream_times_out_instead_of_hanging() {
    let engine = FakeEngine::start().await;
    let client = engine.client_with(DockerClientConfig {
        event_idle_timeout: Duration::from_millis(200),
        ..DockerClientConfig::default()
    });
    let since = chrono::DateTime::from_timestamp(1_764_397_200, 0);
    let mut stream = client.events(since).await.expect("events");
    match stream.next().await {
        Err(DockerError::Timeout { operation, .. }) => assert_eq!(operation, "events"),
        other => panic!("expected Timeout, got {other:?}"),
    }
}

#[tokio::test]
async fn slow_engine_hits_the_request_timeout() {
    let engine = FakeEngine::start().await;
    let client = engine.client_with(DockerClientConfig {
        request_timeout: Duration::from_millis(300),
        ..DockerClientConfig::default()
    });
    let started = std::time::Instant::now();
    match client.inspect_container("slow").await {
        Err(DockerError::Timeout { operation, .. }) => assert_eq!(operation, "inspect"),
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn no_engine_is_a_typed_engine_unavailable_error() {
    let dir = temp_dir("absent");
    let socket = dir.join("docker.sock");
    let client = DockerClient::new(
        DockerEndpoint::Unix(socket.clone()),
        DockerClientConfig::default(),
    );
    let error = client.list_containers().await.expect_err("no engine");
    match &error {
        DockerError::EngineUnavailable { endpoint, reason } => {
            assert_eq!(endpoint, &format!("unix://{}", socket.display()));
            assert!(!reason.is_empty());
        }
        other => panic!("expected EngineUnavailable, got {other:?}"),
    }
    assert!(
        error
            .to_string()
            .starts_with("docker engine unavailable at unix://")
    );
    // A socket file nobody listens on (engine crashed) is unavailable too.
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("bind"));
    assert!(matches!(
        client.ping().await,
        Err(DockerError::EngineUnavailable { .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The real engine at `/var/run/docker.sock` (Docker 20.10 in CI, which serves API 1.41 at
/// most): the client negotiates down to it and the collector, inspect and logs work. No engine
/// is a failure: the test command starts one (`scripts/test-setup`).
#[tokio::test]
async fn live_engine_when_reachable() {
    let client = DockerClient::new(
        DockerEndpoint::Unix(PathBuf::from("/var/run/docker.sock")),
        DockerClientConfig {
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(10),
            ..DockerClientConfig::default()
        },
    );
    if let Err(error) = client.ping().await {
        panic!(
            "no Docker engine answers at /var/run/docker.sock ({error}); the live Docker tests \
             need one: run scripts/test, which starts it, or start dockerd as docs/agent.md describes"
        );
    }
    let negotiated = client.api_version().await.expect("negotiate");
    assert!(negotiated >= MIN_API_VERSION && negotiated <= CLIENT_API_VERSION);
    let containers = client.list_containers().await.expect("live list");
    println!(
        "live Docker engine: API {negotiated}, {} containers",
        containers.len()
    );
    // The report path: every listed container becomes an app-container resource.
    let mut collector = ContainerCollector::new(client.clone());
    let resources = collector.collect().await;
    assert!(
        resources
            .iter()
            .all(|r| r.resource_type == ResourceType::AppContainer)
    );
    let status = collector.engine_status();
    assert_eq!(status["state"], "on", "{status}");
    assert_eq!(status["api_version"], negotiated.to_string(), "{status}");
    // Other tests create and remove containers meanwhile: use the first one still there.
    for summary in &containers {
        let compact = match client.inspect_compact(&summary.id).await {
            Ok(compact) => compact,
            Err(DockerError::NotFound { .. }) => continue,
            Err(error) => panic!("live inspect of {}: {error}", summary.id),
        };
        assert_eq!(compact.id, summary.id);
        let json = serde_json::to_string(&compact).expect("serialize");
        assert!(!json.contains("\"Env\""));
        match client
            .logs_tail(
                &summary.id,
                LogTailRequest {
                    max_lines: 5,
                    max_bytes: 64 * 1024,
                    tty: None,
                },
            )
            .await
        {
            Ok(tail) => assert!(tail.lines.len() <= 5),
            Err(DockerError::NotFound { .. }) => continue,
            // Removed between the inspect and the logs by a test that cleans up its own.
            Err(error) if error.to_string().contains("marked for removal") => continue,
            Err(error) => panic!("live logs of {}: {error}", summary.id),
        }
        break;
    }
}

#[tokio::test]
async fn container_start_stop_restart_post_to_the_engine() {
    let engine = FakeEngine::start().await;
    let client = engine.client();
    // Already running: 304 is "nothing to do", not an error.
    assert!(
        !client
            .container_action(WEB, ContainerAction::Start)
            .await
            .expect("start")
    );
    assert!(
        client
            .container_action(WEB, ContainerAction::Stop)
            .await
            .expect("stop")
    );
    assert!(
        client
            .container_action(WORKER, ContainerAction::Start)
            .await
            .expect("start")
    );
    assert!(
        !client
            .container_action(WORKER, ContainerAction::Stop)
            .await
            .expect("stop")
    );
    assert!(
        client
            .container_action(CRON, ContainerAction::Restart)
            .await
            .expect("restart")
    );
    // (The command-channel test below only touches API.)
    let calls: Vec<String> = actions().into_iter().filter(|a| !a.contains(API)).collect();
    assert_eq!(calls.len(), 5, "{calls:?}");
    assert!(calls[1].starts_with(&format!("stop {WEB} t=")), "{calls:?}");
    assert!(
        calls[4].starts_with(&format!("restart {CRON} t=")),
        "{calls:?}"
    );
    assert!(matches!(
        client
            .container_action("nope", ContainerAction::Restart)
            .await,
        Err(DockerError::NotFound { .. })
    ));
    assert!(matches!(
        client.container_action("../x", ContainerAction::Stop).await,
        Err(DockerError::InvalidContainerId { .. })
    ));
}

#[tokio::test]
async fn container_commands_run_once_through_the_command_channel() {
    let engine = FakeEngine::start().await;
    let dir = temp_dir("commands");
    let supervisor = supervisor(&dir);
    let commands = Commands::enabled(
        &dir,
        HostExecutor {
            supervisor: supervisor.handle(),
            docker: Some(engine.client()),
        },
    )
    .expect("commands");
    let command = |action: &str, capability: &str, target: &str| Command {
        request_id: format!("req-{action}"),
        action_id: action.to_owned(),
        lease_id: "lease".to_owned(),
        lease_expires_at: chrono::Utc::now() + chrono::Duration::seconds(60),
        capability: capability.to_owned(),
        target: target.to_owned(),
    };
    let restart = command("a1", "docker.container.restart", API);
    let first = commands.handle(&restart).await;
    assert_eq!(first.status, ReceiptStatus::Completed, "{first:?}");
    assert_eq!(first.exit_status, Some(0));
    let again = commands.handle(&restart).await;
    assert!(again.replayed);
    let restarts = actions()
        .iter()
        .filter(|a| a.starts_with(&format!("restart {API}")))
        .count();
    assert_eq!(restarts, 1, "{:?}", actions());

    let missing = commands
        .handle(&command("a2", "docker.container.stop", "nope"))
        .await;
    assert_eq!(missing.status, ReceiptStatus::Failed);
    assert_eq!(missing.exit_status, Some(404));
    assert!(
        missing
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("not found"))
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn report_carries_containers_as_app_container_resources() {
    let engine = FakeEngine::start().await;
    let dir = temp_dir("report");
    let supervisor = supervisor(&dir);
    let mut reporter = Reporter::new(
        "m1".into(),
        "box".into(),
        dir.join("no-proc"),
        dir.join("no-mounts"),
        supervisor.view(),
    )
    .with_containers(ContainerCollector::new(engine.client()));
    let report = reporter.build().await;
    let containers: Vec<_> = report
        .resources
        .iter()
        .filter(|r| r.resource_type == ResourceType::AppContainer)
        .collect();
    assert_eq!(containers.len(), 4, "{containers:?}");
    let by_id = |id: &str| {
        containers
            .iter()
            .find(|r| r.source_id == id)
            .unwrap_or_else(|| panic!("{id} not reported"))
    };
    let web = by_id(WEB);
    assert_eq!(web.name, "shop-web-1");
    assert_eq!(web.status, ResourceStatus::Running);
    assert_eq!(web.health, Health::Healthy);
    assert_eq!(web.aliases, vec![WEB[..12].to_owned()]);
    assert_eq!(web.details["restart_policy"]["name"], "unless-stopped");
    assert!(
        web.details["image_id"]
            .as_str()
            .is_some_and(|i| i.starts_with("sha256:"))
    );
    let api = by_id(API);
    assert_eq!(api.health, Health::Unhealthy);
    assert_eq!(api.restart_count, Some(1));
    assert!(
        api.details["health_log"]
            .as_array()
            .is_some_and(|l| !l.is_empty() && l.len() <= 3)
    );
    let worker = by_id(WORKER);
    assert_eq!(worker.status, ResourceStatus::Exited);
    assert_eq!(worker.details["oom_killed"], true);
    assert_eq!(worker.health, Health::Unhealthy);
    let cron = by_id(CRON);
    assert_eq!(cron.restart_count, Some(7));
    assert_eq!(cron.details["restarting"], true);
    for container in &containers {
        let text = serde_json::to_string(container).expect("serialize");
        assert!(!text.contains("hunter2"), "env value in the report: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn no_engine_reports_no_containers_and_carries_on() {
    let dir = temp_dir("no-engine");
    let supervisor = supervisor(&dir);
    let client = DockerClient::new(
        DockerEndpoint::Unix(dir.join("absent.sock")),
        DockerClientConfig::default(),
    );
    let mut reporter = Reporter::new(
        "m1".into(),
        "box".into(),
        dir.join("no-proc"),
        dir.join("no-mounts"),
        supervisor.view(),
    )
    .with_containers(ContainerCollector::new(client));
    for seq in 1..=2 {
        let report = reporter.build().await;
        assert_eq!(report.seq, seq);
        assert!(
            report
                .resources
                .iter()
                .all(|r| r.resource_type != ResourceType::AppContainer)
        );
        assert!(
            report
                .resources
                .iter()
                .any(|r| r.resource_type == ResourceType::Host)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn reads_give_bounded_container_logs_and_the_projection_without_env() {
    let engine = FakeEngine::start().await;
    let dir = temp_dir("reads");
    let supervisor = supervisor(&dir);
    let reader = Reader {
        log_dir: dir.join("logs"),
        services: supervisor.view(),
        docker: Some(engine.client()),
        files: HostFiles::default(),
        exec: ReadExec::default(),
    };
    let tail = reader
        .read(&ReadRequest::LogTail {
            source: LogSource::Container { id: WEB.into() },
            max_lines: 2,
            max_bytes: 64 * 1024,
        })
        .await
        .expect("tail");
    let ReadOutput::LogTail { lines, truncated } = tail else {
        panic!("not a tail");
    };
    assert!(truncated);
    let got: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| (l.stream.as_str(), l.text.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("stdout", EXPECTED_WEB_LOG[3].1),
            ("stderr", EXPECTED_WEB_LOG[4].1)
        ]
    );

    let inspect = reader
        .read(&ReadRequest::Inspect {
            container: API.into(),
        })
        .await
        .expect("inspect");
    let ReadOutput::Inspect { projection } = inspect else {
        panic!("not a projection");
    };
    assert_eq!(projection["health_status"], "unhealthy");
    assert_eq!(projection["restart_count"], 1);
    let text = projection.to_string();
    for secret in [
        "hunter2",
        "DB_PASSWORD",
        "tok_9f8e7d6c",
        "DATABASE_URL",
        "sk-live-123",
    ] {
        assert!(!text.contains(secret), "{secret} leaked into {text}");
    }
    let refused = reader
        .read(&ReadRequest::LogTail {
            source: LogSource::Container { id: WEB.into() },
            max_lines: 0,
            max_bytes: 10,
        })
        .await
        .unwrap_err();
    assert!(refused.reason.contains("max_lines"), "{refused:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn engine_events_wake_the_reporter() {
    let engine = FakeEngine::start().await;
    let changed = Arc::new(Notify::new());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(pulse_agent::containers::watch_events(
        engine.client(),
        changed.clone(),
        shutdown.clone(),
    ));
    tokio::time::timeout(Duration::from_secs(10), changed.notified())
        .await
        .expect("a container event should trigger a report");
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the events task stops on shutdown")
        .expect("events task");
}

/// A fake engine that serves Engine API versions `min..=max` the way the real one does:
/// `/version` states them (unless `version_route` is off), every answer carries the
/// `Api-Version` header, and a versioned path outside the range gets the engine's 400 refusal.
/// It records every request path.
struct VersionedEngine {
    paths: Arc<std::sync::Mutex<Vec<String>>>,
    server: tokio::task::JoinHandle<()>,
    socket: PathBuf,
}

#[derive(Clone)]
struct VersionedState {
    max: ApiVersion,
    min: ApiVersion,
    version_route: bool,
    paths: Arc<std::sync::Mutex<Vec<String>>>,
}

async fn versioned(
    axum::extract::State(state): axum::extract::State<VersionedState>,
    uri: axum::http::Uri,
) -> Response {
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    state
        .paths
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(path.clone());
    let max = state.max.to_string();
    let with_header = |status: StatusCode, body: String| {
        (
            status,
            [
                (header::CONTENT_TYPE, "application/json".to_owned()),
                (header::HeaderName::from_static("api-version"), max.clone()),
            ],
            body,
        )
            .into_response()
    };
    if path == "/version" {
        if !state.version_route {
            return StatusCode::NOT_FOUND.into_response();
        }
        return with_header(
            StatusCode::OK,
            format!(
                r#"{{"Version":"fake","ApiVersion":"{max}","MinAPIVersion":"{}"}}"#,
                state.min
            ),
        );
    }
    let Some((version, rest)) = path
        .strip_prefix("/v")
        .and_then(|p| p.split_once('/'))
        .and_then(|(v, rest)| Some((ApiVersion::parse(v)?, rest)))
    else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if version > state.max {
        return with_header(
            StatusCode::BAD_REQUEST,
            format!(
                r#"{{"message":"client version {version} is too new. Maximum supported API version is {max}"}}"#
            ),
        );
    }
    if version < state.min {
        return with_header(
            StatusCode::BAD_REQUEST,
            format!(
                r#"{{"message":"client version {version} is too old. Minimum supported API version is {}, please upgrade your client to a newer version"}}"#,
                state.min
            ),
        );
    }
    match rest {
        "containers/json?all=1" => with_header(StatusCode::OK, "[]".to_owned()),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

impl VersionedEngine {
    async fn start(socket: &Path, max: &str, min: &str, version_route: bool) -> Self {
        let paths = Arc::new(std::sync::Mutex::new(Vec::new()));
        let state = VersionedState {
            max: ApiVersion::parse(max).expect("max"),
            min: ApiVersion::parse(min).expect("min"),
            version_route,
            paths: paths.clone(),
        };
        let _ = std::fs::remove_file(socket);
        let listener = tokio::net::UnixListener::bind(socket)
            .unwrap_or_else(|e| panic!("bind {}: {e}", socket.display()));
        let router = Router::new().fallback(versioned).with_state(state);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self {
            paths,
            server,
            socket: socket.to_owned(),
        }
    }

    fn paths(&self) -> Vec<String> {
        self.paths.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops answering and removes the socket: the engine is gone.
    async fn stop(self) {
        self.server.abort();
        let _ = self.server.await;
        let _ = std::fs::remove_file(&self.socket);
    }
}

fn socket_client(socket: &Path) -> DockerClient {
    DockerClient::new(
        DockerEndpoint::Unix(socket.to_owned()),
        DockerClientConfig::default(),
    )
}

#[tokio::test]
async fn negotiates_down_to_an_engine_that_serves_1_41_and_caches_it() {
    let dir = temp_dir("v141");
    let socket = dir.join("docker.sock");
    let engine = VersionedEngine::start(&socket, "1.41", "1.12", true).await;
    let client = socket_client(&socket);
    assert!(client.list_containers().await.expect("list").is_empty());
    // A clone shares the negotiated version: no second /version.
    assert!(
        client
            .clone()
            .list_containers()
            .await
            .expect("list")
            .is_empty()
    );
    assert_eq!(
        client.api_version().await.expect("version"),
        ApiVersion::new(1, 41)
    );
    assert_eq!(
        engine.paths(),
        vec![
            "/version",
            "/v1.41/containers/json?all=1",
            "/v1.41/containers/json?all=1"
        ]
    );
    engine.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_newer_engine_is_spoken_to_at_our_version() {
    let dir = temp_dir("v145");
    let socket = dir.join("docker.sock");
    let engine = VersionedEngine::start(&socket, "1.45", "1.24", true).await;
    let client = socket_client(&socket);
    client.list_containers().await.expect("list");
    assert_eq!(
        client.api_version().await.expect("version"),
        CLIENT_API_VERSION
    );
    assert_eq!(
        engine.paths(),
        vec!["/version", "/v1.43/containers/json?all=1"]
    );
    engine.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_engine_below_the_minimum_is_refused_with_a_classified_error_the_report_carries() {
    let dir = temp_dir("v123");
    let socket = dir.join("docker.sock");
    let engine = VersionedEngine::start(&socket, "1.23", "1.12", true).await;
    let client = socket_client(&socket);
    let error = client.list_containers().await.expect_err("too old");
    assert!(
        matches!(&error, DockerError::UnsupportedApiVersion { engine, minimum, .. }
            if engine == "1.23" && minimum == "1.24"),
        "{error:?}"
    );
    assert_eq!(error.code(), "docker_api_version_unsupported");
    let message = error.to_string();
    assert!(
        message.contains("upgrade Docker to 1.12 or newer"),
        "{message}"
    );
    // Nothing was asked at a version the engine might misread.
    assert_eq!(engine.paths(), vec!["/version"]);

    // The report says why there are no containers instead of reporting none silently.
    let supervisor = supervisor(&dir);
    let mut reporter = Reporter::new(
        "m1".into(),
        "box".into(),
        dir.join("no-proc"),
        dir.join("no-mounts"),
        supervisor.view(),
    )
    .with_containers(ContainerCollector::new(client));
    let report = reporter.build().await;
    assert!(
        report
            .resources
            .iter()
            .all(|r| r.resource_type != ResourceType::AppContainer)
    );
    let host = report
        .resources
        .iter()
        .find(|r| r.resource_type == ResourceType::Host)
        .expect("host");
    let docker = &host.details["docker"];
    assert_eq!(docker["state"], "off", "{docker}");
    assert_eq!(docker["code"], "docker_api_version_unsupported", "{docker}");
    assert!(
        docker["reason"]
            .as_str()
            .is_some_and(|r| r.contains("1.23") && r.contains("1.24")),
        "{docker}"
    );
    engine.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_engine_without_the_version_route_is_spoken_to_at_our_version() {
    let dir = temp_dir("noversion");
    let socket = dir.join("docker.sock");
    let engine = VersionedEngine::start(&socket, "1.43", "1.12", false).await;
    let client = socket_client(&socket);
    client.list_containers().await.expect("list");
    assert_eq!(
        engine.paths(),
        vec!["/version", "/v1.43/containers/json?all=1"]
    );
    engine.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_restarted_engine_is_negotiated_again() {
    let dir = temp_dir("restart");
    let socket = dir.join("docker.sock");
    let client = socket_client(&socket);

    // Engine 1.43, then gone (the client sees the outage), then back as 1.41.
    let first = VersionedEngine::start(&socket, "1.43", "1.12", true).await;
    client.list_containers().await.expect("list");
    first.stop().await;
    assert!(matches!(
        client.list_containers().await,
        Err(DockerError::EngineUnavailable { .. })
    ));
    let second = VersionedEngine::start(&socket, "1.41", "1.12", true).await;
    client.list_containers().await.expect("list after restart");
    assert_eq!(
        second.paths(),
        vec!["/version", "/v1.41/containers/json?all=1"]
    );
    second.stop().await;

    // Replaced by an older engine between two requests (no outage seen): the engine refuses
    // the cached version, the client negotiates again and retries once.
    let client = socket_client(&socket);
    let newer = VersionedEngine::start(&socket, "1.43", "1.12", true).await;
    client.list_containers().await.expect("list");
    newer.stop().await;
    let older = VersionedEngine::start(&socket, "1.41", "1.12", true).await;
    client.list_containers().await.expect("list after the swap");
    assert_eq!(
        older.paths(),
        vec![
            "/v1.43/containers/json?all=1",
            "/version",
            "/v1.41/containers/json?all=1"
        ]
    );
    older.stop().await;

    // Upgraded between two requests: the old version still works, the Api-Version header
    // tells the client, and the next request goes out at the new version.
    let client = socket_client(&socket);
    let old = VersionedEngine::start(&socket, "1.41", "1.12", true).await;
    client.list_containers().await.expect("list");
    old.stop().await;
    let upgraded = VersionedEngine::start(&socket, "1.45", "1.24", true).await;
    client.list_containers().await.expect("list at 1.41");
    client.list_containers().await.expect("list at 1.43");
    assert_eq!(
        upgraded.paths(),
        vec![
            "/v1.41/containers/json?all=1",
            "/version",
            "/v1.43/containers/json?all=1"
        ]
    );
    upgraded.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
