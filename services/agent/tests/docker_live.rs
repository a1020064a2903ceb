//! Live tests against the real Docker engine at `/var/run/docker.sock` (CI starts Docker 20.10
//! in `scripts/test-setup`): the collector, the compacted inspect, log reads, the three container commands
//! and the version negotiation, each on containers the test creates and removes itself.
//!
//! - No registry is needed: the image is built here `FROM scratch` with the host's static
//!   busybox (package `busybox-static`) through `POST /build` (the classic builder), with no
//!   network. Containers run with `--network none`.
//! - The engine is set up and checked over its socket with plain HTTP/1.0 exchanges on
//!   unversioned paths, independent of the client under test.
//! - Every container is removed by a guard when the test ends, also when it fails.
//! - No engine is a failure with a message saying how to start one, never a skip.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use pulse_agent::commands::{Commands, HostExecutor};
use pulse_agent::containers::ContainerCollector;
use pulse_agent::docker::{
    ApiVersion, CLIENT_API_VERSION, ContainerAction, ContainerRunState, DockerClient,
    DockerClientConfig, DockerEndpoint, EventAction, HealthStatus, LabelScope, LogStream,
    LogTailRequest, MIN_API_VERSION,
};
use pulse_agent::host_files::HostFiles;
use pulse_agent::read_exec::ReadExec;
use pulse_agent::reads::Reader;
use pulse_agent::report::Reporter;
use pulse_agent::supervisor::Supervisor;
use pulse_domain::agent_protocol::{
    Command, LogSource, ReadOutput, ReadRequest, Receipt, ReceiptStatus,
};
use pulse_domain::resource::{Health, ObservedResource, ResourceStatus, ResourceType};
use serde_json::{Value, json};
use tokio::sync::Notify;

const SOCKET: &str = "/var/run/docker.sock";
/// Built by [`ensure_image`]; the layers are cached by the engine, so rebuilding is quick.
const IMAGE: &str = "pulse-agent-live:busybox";
const BUSYBOX: [&str; 2] = ["/bin/busybox", "/usr/bin/busybox"];
const DOCKERFILE: &str = "FROM scratch\n\
    COPY busybox /bin/busybox\n\
    RUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n";
/// Runs until stopped, and exits 0 on SIGTERM (within the 1 s of the current sleep).
const SLEEPER: [&str; 3] = [
    "/bin/sh",
    "-c",
    "trap 'exit 0' TERM; while true; do sleep 1; done",
];
/// Healthy until `/fault` exists, checked every 300 ms, unhealthy after one failure.
fn fault_healthcheck() -> Value {
    json!({
        "Test": ["CMD-SHELL", "test ! -e /fault"],
        "Interval": 300_000_000u64,
        "Timeout": 2_000_000_000u64,
        "Retries": 1,
    })
}
const ENGINE_TIMEOUT: Duration = Duration::from_secs(60);
const BUILD_TIMEOUT: Duration = Duration::from_secs(300);
const WAIT: Duration = Duration::from_secs(60);

// ---- the engine over its socket, independent of the client under test ------------------

/// One HTTP/1.0 exchange (the engine closes the connection at the end of the body, so no
/// chunked decoding is needed). Unversioned paths: the engine answers at its own version.
fn exchange(
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<(u16, Vec<u8>), String> {
    let io = |e: std::io::Error| format!("{method} {path} over {SOCKET}: {e}");
    let mut stream = UnixStream::connect(SOCKET).map_err(io)?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    let head = format!(
        "{method} {path} HTTP/1.0\r\nHost: docker\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).map_err(io)?;
    stream.write_all(body).map_err(io)?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).map_err(io)?;
    let end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("{method} {path}: no complete response head"))?;
    let status = String::from_utf8_lossy(&response[..end])
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{method} {path}: no status in the response"))?;
    Ok((status, response[end + 4..].to_vec()))
}

async fn call(method: &'static str, path: String, body: Option<Value>) -> (u16, Vec<u8>) {
    let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let what = format!("{method} {path}");
    tokio::task::spawn_blocking(move || {
        exchange(method, &path, "application/json", &body, ENGINE_TIMEOUT)
    })
    .await
    .unwrap_or_else(|e| panic!("{what}: {e}"))
    .unwrap_or_else(|e| panic!("{e}"))
}

/// `GET path`, which must answer 200 with JSON.
async fn engine_get(path: String) -> Value {
    let (status, body) = call("GET", path.clone(), None).await;
    assert_eq!(
        status,
        200,
        "GET {path}: {}",
        String::from_utf8_lossy(&body)
    );
    serde_json::from_slice(&body).unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// `POST path` with a JSON body, which must answer `expect`; the JSON answer or `Null`.
async fn engine_post(path: String, body: Value, expect: u16) -> Value {
    let (status, answer) = call("POST", path.clone(), Some(body)).await;
    assert_eq!(
        status,
        expect,
        "POST {path}: {}",
        String::from_utf8_lossy(&answer)
    );
    serde_json::from_slice(&answer).unwrap_or(Value::Null)
}

async fn engine_inspect(id: &str) -> Value {
    engine_get(format!("/containers/{id}/json")).await
}

/// Fails the test, saying how to get an engine, when none answers.
fn require_engine() {
    match exchange("GET", "/_ping", "text/plain", b"", Duration::from_secs(5)) {
        Ok((200, _)) => {}
        Ok((status, body)) => panic!(
            "the Docker engine at {SOCKET} answered /_ping with {status}: {}",
            String::from_utf8_lossy(&body)
        ),
        Err(error) => panic!(
            "no Docker engine answers at {SOCKET} ({error}). These live tests need one: run \
             scripts/test (it installs and starts it), or `apt-get install -y docker.io \
             busybox-static` and `dockerd --storage-driver=vfs --bridge=none --iptables=false \
             --ip6tables=false &` (see docs/agent.md)"
        ),
    }
}

/// A ustar archive of regular files (name, mode, content), as `POST /build` takes its context.
fn tar(files: &[(&str, u32, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, mode, content) in files {
        let mut header = [0u8; 512];
        header[..name.len()].copy_from_slice(name.as_bytes());
        let mut field = |at: usize, width: usize, value: u64| {
            let text = format!("{value:0w$o}\0", w = width - 1);
            header[at..at + width].copy_from_slice(text.as_bytes());
        };
        field(100, 8, u64::from(*mode));
        field(108, 8, 0);
        field(116, 8, 0);
        field(124, 12, content.len() as u64);
        field(136, 12, 0);
        header[156] = b'0';
        header[257..263].copy_from_slice(b"ustar\0");
        header[263..265].copy_from_slice(b"00");
        // The checksum is computed with its own field as spaces.
        header[148..156].copy_from_slice(b"        ");
        let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
        header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(content);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

fn build_image() -> Result<(), String> {
    let busybox = BUSYBOX
        .iter()
        .find_map(|path| std::fs::read(path).ok())
        .ok_or_else(|| {
            format!(
                "no static busybox at {BUSYBOX:?}: apt-get install -y busybox-static (scripts/test \
                 does)"
            )
        })?;
    let context = tar(&[
        ("Dockerfile", 0o644, DOCKERFILE.as_bytes()),
        ("busybox", 0o755, &busybox),
    ]);
    // The classic builder (no `version=2`), no network for the RUN step.
    let path = "/build?t=pulse-agent-live%3Abusybox&rm=1&forcerm=1&networkmode=none";
    let (status, body) = exchange("POST", path, "application/x-tar", &context, BUILD_TIMEOUT)?;
    let text = String::from_utf8_lossy(&body);
    if status != 200 {
        return Err(format!("POST /build answered {status}: {text}"));
    }
    // Build failures arrive as an `error` line in a 200 stream.
    let failure = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find_map(|message| message.get("error").cloned());
    if let Some(error) = failure {
        return Err(format!("building {IMAGE} failed: {error}; output:\n{text}"));
    }
    let (status, body) = exchange(
        "GET",
        &format!("/images/{IMAGE}/json"),
        "application/json",
        b"",
        ENGINE_TIMEOUT,
    )?;
    if status != 200 {
        return Err(format!(
            "{IMAGE} is missing after the build ({status}): {}",
            String::from_utf8_lossy(&body)
        ));
    }
    Ok(())
}

/// The engine answers and the test image exists (built once per test process).
async fn ensure_image() {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    require_engine();
    tokio::task::spawn_blocking(|| BUILT.get_or_init(build_image).clone())
        .await
        .expect("image build task")
        .unwrap_or_else(|e| panic!("{e}"));
}

fn unique(tag: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!(
        "pulse-live-{tag}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A container this test created; removed (forcibly, with its volumes) when dropped.
struct Container {
    id: String,
    name: String,
}

impl Drop for Container {
    fn drop(&mut self) {
        let path = format!("/containers/{}?force=1&v=1", self.id);
        match exchange("DELETE", &path, "application/json", b"", ENGINE_TIMEOUT) {
            Ok((204 | 404, _)) => {}
            Ok((status, body)) => eprintln!(
                "removing container {}: {status} {}",
                self.name,
                String::from_utf8_lossy(&body)
            ),
            Err(error) => eprintln!("removing container {}: {error}", self.name),
        }
    }
}

/// The create body for `cmd` on the test image, without network.
fn spec(cmd: &[&str]) -> Value {
    json!({
        "Image": IMAGE,
        "Cmd": cmd,
        "HostConfig": {"NetworkMode": "none"},
    })
}

async fn create(tag: &str, spec: Value) -> Container {
    let name = unique(tag);
    let created = engine_post(format!("/containers/create?name={name}"), spec, 201).await;
    let id = created["Id"]
        .as_str()
        .unwrap_or_else(|| panic!("create {name}: no Id in {created}"))
        .to_owned();
    Container { id, name }
}

async fn start(container: &Container) {
    // No body: the engine does not read one here, and unread bytes make it reset the socket.
    let path = format!("/containers/{}/start", container.id);
    let (status, answer) = call("POST", path.clone(), None).await;
    assert_eq!(
        status,
        204,
        "POST {path}: {}",
        String::from_utf8_lossy(&answer)
    );
}

/// Runs `cmd` in the container, detached.
async fn exec(container: &Container, cmd: &[&str]) {
    let exec = engine_post(
        format!("/containers/{}/exec", container.id),
        json!({"Cmd": cmd}),
        201,
    )
    .await;
    let id = exec["Id"].as_str().expect("exec id").to_owned();
    engine_post(format!("/exec/{id}/start"), json!({"Detach": true}), 200).await;
}

/// A deadline for a condition the test waits on; `tick` fails the test once it has passed.
struct Deadline {
    what: String,
    at: Instant,
}

impl Deadline {
    fn after(what: impl Into<String>, within: Duration) -> Self {
        Self {
            what: what.into(),
            at: Instant::now() + within,
        }
    }

    async fn tick(&self, last_seen: impl std::fmt::Debug) {
        assert!(
            Instant::now() < self.at,
            "timed out waiting for {}; last seen: {last_seen:?}",
            self.what
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn wait_engine_state(container: &Container, status: &str) -> Value {
    let deadline = Deadline::after(format!("{} to be {status}", container.name), WAIT);
    loop {
        let inspect = engine_inspect(&container.id).await;
        if inspect["State"]["Status"] == status {
            return inspect;
        }
        deadline.tick(&inspect["State"]).await;
    }
}

async fn wait_engine_health(container: &Container, health: &str) -> Value {
    let deadline = Deadline::after(format!("{} to be {health}", container.name), WAIT);
    loop {
        let inspect = engine_inspect(&container.id).await;
        if inspect["State"]["Health"]["Status"] == health {
            return inspect;
        }
        deadline.tick(&inspect["State"]).await;
    }
}

/// The newest API version the engine serves, from its own `/version`.
async fn engine_api_version() -> ApiVersion {
    let version = engine_get("/version".to_owned()).await;
    version["ApiVersion"]
        .as_str()
        .and_then(ApiVersion::parse)
        .unwrap_or_else(|| panic!("no ApiVersion in {version}"))
}

// ---- the agent side ------------------------------------------------------------------------

fn client_at(max_api_version: ApiVersion) -> DockerClient {
    DockerClient::new(
        DockerEndpoint::Unix(PathBuf::from(SOCKET)),
        DockerClientConfig {
            max_api_version,
            ..DockerClientConfig::default()
        },
    )
}

fn client() -> DockerClient {
    client_at(CLIENT_API_VERSION)
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(tag));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("temp dir {}: {e}", dir.display()));
    dir
}

/// A supervisor with no services (the reqwest client it builds needs the crypto provider).
fn supervisor(dir: &Path) -> Supervisor {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Supervisor::new(dir.join("services.d"), None, Arc::new(Notify::new())).expect("supervisor")
}

fn find<'a>(resources: &'a [ObservedResource], id: &str) -> Option<&'a ObservedResource> {
    resources.iter().find(|r| r.source_id == id)
}

// ---- tests -----------------------------------------------------------------------------------

#[tokio::test]
async fn collector_reports_a_test_container_with_its_health() {
    ensure_image().await;
    let mut healthy = spec(&SLEEPER);
    healthy["Healthcheck"] = fault_healthcheck();
    healthy["Labels"] = json!({"com.docker.compose.project": "pulse-live", "tier": "test"});
    let container = create("collector", healthy).await;
    let idle = create("collector-idle", spec(&SLEEPER)).await;
    start(&container).await;

    let dir = temp_dir("collector");
    let supervisor = supervisor(&dir);
    let mut reporter = Reporter::new(
        "live".into(),
        "live-host".into(),
        dir.join("no-proc"),
        dir.join("no-mounts"),
        supervisor.view(),
    )
    .with_containers(ContainerCollector::new(client()));

    let deadline = Deadline::after("the collector to see the container healthy", WAIT);
    let report = loop {
        let report = reporter.build().await;
        let seen = find(&report.resources, &container.id).map(|r| r.health);
        if seen == Some(Health::Healthy) {
            break report;
        }
        deadline.tick(seen).await;
    };
    let resource = find(&report.resources, &container.id).expect("reported");
    assert_eq!(resource.resource_type, ResourceType::AppContainer);
    assert_eq!(resource.name, container.name);
    assert_eq!(resource.status, ResourceStatus::Running);
    assert_eq!(resource.aliases, vec![container.id[..12].to_owned()]);
    assert_eq!(resource.restart_count, Some(0));
    assert_eq!(
        resource
            .labels
            .get("com.docker.compose.project")
            .map(String::as_str),
        Some("pulse-live")
    );
    assert_eq!(resource.details["health_status"], "healthy");
    assert_eq!(resource.details["image"], IMAGE);
    assert_eq!(resource.details["restart_policy"]["name"], "no");
    assert!(
        resource.details["health_log"]
            .as_array()
            .is_some_and(|log| !log.is_empty() && log.len() <= 3),
        "{}",
        resource.details
    );
    // Created, never started: reported as stopped, with no health check.
    let idle_resource = find(&report.resources, &idle.id).expect("idle container reported");
    assert_eq!(idle_resource.status, ResourceStatus::Stopped);
    assert_eq!(idle_resource.health, Health::Unknown);
    // The host says the collector is on, at the version negotiated with this engine.
    let host = report
        .resources
        .iter()
        .find(|r| r.resource_type == ResourceType::Host)
        .expect("host");
    let expected = engine_api_version().await.min(CLIENT_API_VERSION);
    assert_eq!(host.details["docker"]["state"], "on", "{}", host.details);
    assert_eq!(
        host.details["docker"]["api_version"],
        expected.to_string(),
        "{}",
        host.details
    );

    // The check starts failing: the collector reports it unhealthy with the failing result.
    exec(&container, &["touch", "/fault"]).await;
    let deadline = Deadline::after("the collector to see the container unhealthy", WAIT);
    let report = loop {
        let report = reporter.build().await;
        let seen = find(&report.resources, &container.id).map(|r| r.health);
        if seen == Some(Health::Unhealthy) {
            break report;
        }
        deadline.tick(seen).await;
    };
    let resource = find(&report.resources, &container.id).expect("reported");
    assert_eq!(resource.status, ResourceStatus::Running);
    assert_eq!(resource.details["health_status"], "unhealthy");
    let last = resource.details["health_log"]
        .as_array()
        .and_then(|log| log.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(last["exit_code"], 1, "{}", resource.details);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn compacted_inspect_of_a_live_container() {
    ensure_image().await;
    let mut body = spec(&SLEEPER);
    body["Healthcheck"] = fault_healthcheck();
    body["Env"] = json!(["PULSE_LIVE_SECRET=hunter2-live"]);
    body["Labels"] = json!({
        "com.docker.compose.project": "shop",
        "com.docker.compose.service": "web",
        "com.example.owner": "payments-team",
    });
    body["HostConfig"]["RestartPolicy"] = json!({"Name": "on-failure", "MaximumRetryCount": 3});
    let container = create("inspect", body).await;
    start(&container).await;
    let engine = wait_engine_health(&container, "healthy").await;

    // By name, as an operator would ask.
    let compact = client()
        .inspect_compact(&container.name)
        .await
        .expect("inspect");
    assert_eq!(compact.id, container.id);
    assert_eq!(compact.name, container.name);
    assert_eq!(compact.image, IMAGE);
    assert_eq!(Some(compact.image_id.as_str()), engine["Image"].as_str());
    assert!(
        compact.image_id.starts_with("sha256:"),
        "{}",
        compact.image_id
    );
    assert_eq!(compact.state, ContainerRunState::Running);
    assert!(compact.running);
    assert!(!compact.paused && !compact.restarting && !compact.oom_killed && !compact.dead);
    assert_eq!(compact.exit_code, Some(0));
    assert_eq!(compact.error, None);
    assert_eq!(compact.health_status, Some(HealthStatus::Healthy));
    assert_eq!(compact.failing_streak, Some(0));
    assert!(
        !compact.health_results.is_empty() && compact.health_results.len() <= 3,
        "{:?}",
        compact.health_results
    );
    assert!(
        compact
            .health_results
            .iter()
            .all(|r| r.exit_code == Some(0))
    );
    assert_eq!(compact.restart_count, 0);
    assert_eq!(compact.restart_policy.name, "on-failure");
    assert_eq!(compact.restart_policy.maximum_retry_count, 3);
    assert!(compact.started_at.is_some());
    // The engine's zero time for a container that has not finished.
    assert_eq!(compact.finished_at, None);
    assert_eq!(
        compact.labels,
        BTreeMap::from([
            ("com.docker.compose.project".to_owned(), "shop".to_owned()),
            ("com.docker.compose.service".to_owned(), "web".to_owned()),
        ])
    );
    let text = serde_json::to_string(&compact).expect("serialize");
    for leak in [
        "hunter2-live",
        "PULSE_LIVE_SECRET",
        "com.example.owner",
        "payments-team",
    ] {
        assert!(!text.contains(leak), "{leak} leaked into {text}");
    }

    // The same through the read the relay asks for.
    let dir = temp_dir("inspect");
    let supervisor = supervisor(&dir);
    let reader = Reader {
        log_dir: dir.join("logs"),
        services: supervisor.view(),
        docker: Some(client()),
        files: HostFiles::default(),
        exec: ReadExec::default(),
    };
    let read = reader
        .read(&ReadRequest::Inspect {
            container: container.id.clone(),
        })
        .await
        .expect("read inspect");
    let ReadOutput::Inspect { projection } = read else {
        panic!("not a projection: {read:?}");
    };
    assert_eq!(projection["id"], container.id.as_str());
    assert_eq!(projection["health_status"], "healthy");
    assert_eq!(projection["restart_policy"]["name"], "on-failure");
    assert!(!projection.to_string().contains("hunter2-live"));
    let _ = std::fs::remove_dir_all(&dir);
}

fn stream_lines(lines: &[pulse_agent::docker::LogLine], stream: LogStream) -> Vec<&str> {
    lines
        .iter()
        .filter(|l| l.stream == stream)
        .map(|l| l.text.as_str())
        .collect()
}

#[tokio::test]
async fn logs_of_a_container_that_printed_known_lines() {
    ensure_image().await;
    let mixed = create(
        "logs-mixed",
        spec(&[
            "/bin/sh",
            "-c",
            "echo out-1; echo err-1 >&2; echo out-2; echo err-2 >&2; echo out-3",
        ]),
    )
    .await;
    let counted = create(
        "logs-counted",
        spec(&[
            "/bin/sh",
            "-c",
            "i=1; while [ $i -le 50 ]; do echo line-$i; i=$((i+1)); done",
        ]),
    )
    .await;
    let mut tty_spec = spec(&["/bin/sh", "-c", "echo tty-1; echo tty-2"]);
    tty_spec["Tty"] = json!(true);
    let tty = create("logs-tty", tty_spec).await;
    for container in [&mixed, &counted, &tty] {
        start(container).await;
    }
    for container in [&mixed, &counted, &tty] {
        wait_engine_state(container, "exited").await;
    }
    let client = client();
    let all = LogTailRequest {
        max_lines: 100,
        max_bytes: 64 * 1024,
        tty: None,
    };

    // stdout and stderr are demultiplexed; each stream keeps its order (the engine does not
    // order lines across the two streams).
    let tail = client.logs_tail(&mixed.id, all).await.expect("logs");
    assert_eq!(tail.lines.len(), 5, "{:?}", tail.lines);
    assert_eq!(
        stream_lines(&tail.lines, LogStream::Stdout),
        ["out-1", "out-2", "out-3"]
    );
    assert_eq!(
        stream_lines(&tail.lines, LogStream::Stderr),
        ["err-1", "err-2"]
    );
    assert!(!tail.truncated);

    // The last lines only.
    let tail = client
        .logs_tail(
            &counted.id,
            LogTailRequest {
                max_lines: 3,
                ..all
            },
        )
        .await
        .expect("logs");
    assert_eq!(
        stream_lines(&tail.lines, LogStream::Stdout),
        ["line-48", "line-49", "line-50"]
    );
    // A byte bound cuts the read and says so: 40 bytes are two 15-byte frames (8-byte header,
    // `line-N\n`) and the start of a third, kept as the fragment it is.
    let tail = client
        .logs_tail(
            &counted.id,
            LogTailRequest {
                max_bytes: 40,
                ..all
            },
        )
        .await
        .expect("logs");
    assert!(tail.truncated);
    assert_eq!(
        stream_lines(&tail.lines, LogStream::Stdout),
        ["line-1", "line-2", "li"]
    );

    // A TTY container has one raw stream, detected from its first bytes.
    let tail = client.logs_tail(&tty.id, all).await.expect("tty logs");
    assert_eq!(
        stream_lines(&tail.lines, LogStream::Console),
        ["tty-1", "tty-2"]
    );

    // Through the read the relay asks for, by container name.
    let dir = temp_dir("logs");
    let supervisor = supervisor(&dir);
    let reader = Reader {
        log_dir: dir.join("logs"),
        services: supervisor.view(),
        docker: Some(client.clone()),
        files: HostFiles::default(),
        exec: ReadExec::default(),
    };
    let read = reader
        .read(&ReadRequest::LogTail {
            source: LogSource::Container {
                id: counted.name.clone(),
            },
            max_lines: 2,
            max_bytes: 64 * 1024,
        })
        .await
        .expect("read logs");
    let ReadOutput::LogTail { lines, .. } = read else {
        panic!("not a tail: {read:?}");
    };
    let got: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| (l.stream.as_str(), l.text.as_str()))
        .collect();
    assert_eq!(got, [("stdout", "line-49"), ("stdout", "line-50")]);
    let _ = std::fs::remove_dir_all(&dir);
}

fn command(action_id: &str, capability: &str, target: &str) -> Command {
    Command {
        request_id: format!("req-{action_id}"),
        action_id: action_id.to_owned(),
        lease_id: "lease".to_owned(),
        lease_expires_at: chrono::Utc::now() + chrono::Duration::seconds(120),
        capability: capability.to_owned(),
        target: target.to_owned(),
    }
}

fn completed(receipt: &Receipt) {
    assert_eq!(receipt.status, ReceiptStatus::Completed, "{receipt:?}");
    assert_eq!(receipt.exit_status, Some(0), "{receipt:?}");
}

#[tokio::test]
async fn start_stop_restart_commands_act_on_the_engine() {
    ensure_image().await;
    let container = create("commands", spec(&SLEEPER)).await;
    assert_eq!(
        engine_inspect(&container.id).await["State"]["Status"],
        "created"
    );
    let dir = temp_dir("commands");
    let supervisor = supervisor(&dir);
    let commands = Commands::enabled(
        &dir,
        HostExecutor {
            supervisor: supervisor.handle(),
            docker: Some(client()),
        },
    )
    .expect("commands");
    let unique_action = |verb: &str| format!("{verb}-{}", unique("act"));

    // start: the container runs.
    let receipt = commands
        .handle(&command(
            &unique_action("start"),
            "docker.container.start",
            &container.name,
        ))
        .await;
    completed(&receipt);
    let engine = engine_inspect(&container.id).await;
    assert_eq!(engine["State"]["Running"], true, "{}", engine["State"]);
    let first_start = engine["State"]["StartedAt"]
        .as_str()
        .expect("StartedAt")
        .to_owned();
    // start again: nothing to do, and said so.
    let receipt = commands
        .handle(&command(
            &unique_action("start"),
            "docker.container.start",
            &container.id,
        ))
        .await;
    completed(&receipt);
    assert!(receipt.output.contains("already running"), "{receipt:?}");

    // restart: running again, started anew.
    let receipt = commands
        .handle(&command(
            &unique_action("restart"),
            "docker.container.restart",
            &container.id,
        ))
        .await;
    completed(&receipt);
    let engine = engine_inspect(&container.id).await;
    assert_eq!(engine["State"]["Running"], true, "{}", engine["State"]);
    let second_start = engine["State"]["StartedAt"].as_str().expect("StartedAt");
    assert!(
        chrono::DateTime::parse_from_rfc3339(second_start).expect("time")
            > chrono::DateTime::parse_from_rfc3339(&first_start).expect("time"),
        "restart did not start the container anew: {first_start} then {second_start}"
    );

    // stop: exited, gracefully (SIGTERM within the grace, so exit code 0, not a kill).
    let receipt = commands
        .handle(&command(
            &unique_action("stop"),
            "docker.container.stop",
            &container.id,
        ))
        .await;
    completed(&receipt);
    let engine = engine_inspect(&container.id).await;
    assert_eq!(engine["State"]["Running"], false, "{}", engine["State"]);
    assert_eq!(engine["State"]["Status"], "exited", "{}", engine["State"]);
    assert_eq!(engine["State"]["ExitCode"], 0, "{}", engine["State"]);
    let receipt = commands
        .handle(&command(
            &unique_action("stop"),
            "docker.container.stop",
            &container.id,
        ))
        .await;
    completed(&receipt);
    assert!(receipt.output.contains("already stopped"), "{receipt:?}");

    // A container that does not exist fails with the engine's 404.
    let missing = commands
        .handle(&command(
            &unique_action("restart"),
            "docker.container.restart",
            &unique("absent"),
        ))
        .await;
    assert_eq!(missing.status, ReceiptStatus::Failed, "{missing:?}");
    assert_eq!(missing.exit_status, Some(404), "{missing:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn negotiates_the_engine_version_and_works_at_the_minimum_too() {
    ensure_image().await;
    let engine_max = engine_api_version().await;
    let negotiated = client().api_version().await.expect("negotiate");
    assert_eq!(negotiated, engine_max.min(CLIENT_API_VERSION));

    // Capped at the oldest version the client accepts, every read still works: fields the
    // older API lacks are optional.
    let mut body = spec(&[
        "/bin/sh",
        "-c",
        "echo ready; trap 'exit 0' TERM; while true; do sleep 1; done",
    ]);
    body["Healthcheck"] = fault_healthcheck();
    body["Labels"] = json!({"com.docker.compose.service": "oldest"});
    let container = create("minimum", body).await;
    start(&container).await;
    wait_engine_health(&container, "healthy").await;
    let oldest = client_at(MIN_API_VERSION);
    assert_eq!(
        oldest.api_version().await.expect("negotiate"),
        MIN_API_VERSION
    );
    let listed = oldest.list_containers().await.expect("list at the minimum");
    let summary = listed
        .iter()
        .find(|c| c.id == container.id)
        .expect("listed at the minimum");
    assert_eq!(summary.names, vec![container.name.clone()]);
    assert_eq!(summary.state, ContainerRunState::Running);
    let compact = oldest
        .inspect_compact(&container.id)
        .await
        .expect("inspect at the minimum");
    assert_eq!(compact.health_status, Some(HealthStatus::Healthy));
    assert_eq!(
        compact
            .labels
            .get("com.docker.compose.service")
            .map(String::as_str),
        Some("oldest")
    );
    let tail = oldest
        .logs_tail(
            &container.id,
            LogTailRequest {
                max_lines: 10,
                max_bytes: 64 * 1024,
                tty: None,
            },
        )
        .await
        .expect("logs at the minimum");
    assert_eq!(stream_lines(&tail.lines, LogStream::Stdout), ["ready"]);
}

#[tokio::test]
async fn engine_events_of_a_test_container_arrive_at_the_negotiated_version() {
    ensure_image().await;
    let client = client();
    let mut events = client.events(None).await.expect("subscribe to events");
    let container = create("events", spec(&SLEEPER)).await;
    start(&container).await;
    // Other tests' containers come and go meanwhile: wait for this one's start.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let event = tokio::time::timeout_at(deadline, events.next())
            .await
            .unwrap_or_else(|_| panic!("no start event for {} within {WAIT:?}", container.name))
            .expect("events stream")
            .unwrap_or_else(|| panic!("the engine closed the events stream"));
        if event.container_id == container.id && event.action == EventAction::Start {
            assert_eq!(event.name.as_deref(), Some(container.name.as_str()));
            assert_eq!(event.image.as_deref(), Some(IMAGE));
            assert!(event.time.is_some());
            break;
        }
    }
}

#[tokio::test]
async fn a_label_scoped_agent_sees_and_acts_on_only_its_labelled_containers() {
    ensure_image().await;
    let scope_value = unique("scope");
    let mut mine = spec(&SLEEPER);
    mine["Labels"] = json!({"pulse.test.scope": scope_value});
    let mine = create("scoped-mine", mine).await;
    let mut other_value = spec(&SLEEPER);
    other_value["Labels"] = json!({"pulse.test.scope": "someone-else"});
    let theirs = create("scoped-theirs", other_value).await;
    let unlabelled = create("scoped-unlabelled", spec(&SLEEPER)).await;
    start(&mine).await;
    start(&theirs).await;
    start(&unlabelled).await;

    let scope = LabelScope::parse(&format!("pulse.test.scope={scope_value}")).expect("scope");
    let scoped = DockerClient::new(
        DockerEndpoint::Unix(PathBuf::from(SOCKET)),
        DockerClientConfig {
            label_scope: Some(scope),
            ..DockerClientConfig::default()
        },
    );

    // The list is the engine's own label filter: exactly the one container.
    let listed: Vec<String> = scoped
        .list_containers()
        .await
        .expect("list")
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(listed, vec![mine.id.clone()]);
    // The unscoped client sees all three, so the filter is what hid them.
    let all: Vec<String> = client()
        .list_containers()
        .await
        .expect("list")
        .into_iter()
        .map(|c| c.id)
        .collect();
    for c in [&mine, &theirs, &unlabelled] {
        assert!(all.contains(&c.id), "{} missing from {all:?}", c.name);
    }

    // Reads and lifecycle calls on the others answer not found and change nothing.
    for c in [&theirs, &unlabelled] {
        let err = scoped.inspect_container(&c.id).await.expect_err("inspect");
        assert_eq!(err.code(), "docker_container_not_found", "{err}");
        let err = scoped
            .logs_tail(&c.name, LogTailRequest::default())
            .await
            .expect_err("logs");
        assert_eq!(err.code(), "docker_container_not_found", "{err}");
        let err = scoped
            .container_action(&c.id, ContainerAction::Stop)
            .await
            .expect_err("stop");
        assert_eq!(err.code(), "docker_container_not_found", "{err}");
        assert_eq!(engine_inspect(&c.id).await["State"]["Running"], true);
    }
    // Its own container it may act on.
    assert!(scoped.inspect_container(&mine.id).await.is_ok());
    scoped
        .container_action(&mine.id, ContainerAction::Stop)
        .await
        .expect("stop own");
    wait_engine_state(&mine, "exited").await;

    // A collector on the scoped client reports only its container.
    let dir = temp_dir("scoped");
    let supervisor = supervisor(&dir);
    let mut reporter = Reporter::new(
        "live".into(),
        "live-host".into(),
        dir.join("no-proc"),
        dir.join("no-mounts"),
        supervisor.view(),
    )
    .with_containers(ContainerCollector::new(scoped));
    let report = reporter.build().await;
    let containers: Vec<&str> = report
        .resources
        .iter()
        .filter(|r| r.resource_type == ResourceType::AppContainer)
        .map(|r| r.source_id.as_str())
        .collect();
    assert_eq!(containers, vec![mine.id.as_str()]);
}
