//! The agent command channel end to end: NATS request `relay.command|observe|read` -> the real
//! relay -> the real agent over its WebSocket -> the answer back. Covers at-most-once execution
//! across a relay restart, expired leases, agents without `--enable-commands`, tokens without
//! `agent:exec`, fresh observations, bounded log tails and the inspect projection.

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::Router;
use axum::extract::Path as UrlPath;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::Utc;
use pulse_agent_relay::api::{CommandRequest, ObserveRequest, ReadRequest};
use pulse_bus::{Bus, BusError};
use pulse_domain::TenantId;
use pulse_domain::agent_protocol::{
    LogSource, ReadOutput, ReadRequest as ReadSpec, ReceiptStatus, ResourceTarget,
};
use pulse_domain::resource::{ResourceStatus, ResourceType};
use pulse_test_support::action_api::{starts, wait_starts};
use pulse_test_support::agent::host_id;
use pulse_test_support::agent::{AgentStack, write_service};
use pulse_test_support::nats::bus_on;
use pulse_test_support::wait;

const INTERVAL: Duration = Duration::from_secs(1);
/// Time for a freshly spawned binary to start and connect, on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(20);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(40);
const DISABLED: &str = "commands are disabled on this agent (start it with --enable-commands)";

/// A service that appends a line to `starts` each time it starts, prints 20 log lines and
/// then sleeps.
fn counter(starts: &Path) -> String {
    format!(
        "name = \"counter\"\ncommand = \"sh\"\n\
         args = [\"-c\", \"echo started >> '{}'; i=1; while [ $i -le 20 ]; do echo log-line-$i; i=$((i+1)); done; exec sleep 3600\"]\n\
         [restart]\npolicy = \"always\"\n",
        starts.display()
    )
}

fn command(agent: &str, action: &str, expires_in: chrono::Duration) -> CommandRequest {
    CommandRequest {
        agent_id: agent.to_owned(),
        action_id: action.to_owned(),
        lease_id: format!("lease-{action}"),
        lease_expires_at: Utc::now() + expires_in,
        capability: "service.restart".to_owned(),
        target: "counter".to_owned(),
    }
}

fn observe_host(agent: &str) -> ObserveRequest {
    ObserveRequest {
        agent_id: agent.to_owned(),
        target: ResourceTarget::Host,
    }
}

struct Api {
    bus: Bus,
    tenant: TenantId,
}

impl Api {
    async fn new(prefix: &str) -> anyhow::Result<Self> {
        Ok(Self {
            bus: bus_on(prefix).await?,
            tenant: TenantId::default_tenant(),
        })
    }

    async fn request<R: pulse_bus::Request>(
        &self,
        verb: &str,
        request: &R,
    ) -> Result<R::Reply, BusError> {
        let subject = self.bus.subjects().relay(&self.tenant, verb);
        self.bus
            .request(&self.tenant, &subject, request, REQUEST_TIMEOUT)
            .await
    }

    /// Waits until the relay reaches `agent` (its session is up).
    async fn wait_connected(&self, agent: &str) -> anyhow::Result<()> {
        wait::until(
            STARTUP,
            "the agent to be reachable through the relay",
            || async { self.request("observe", &observe_host(agent)).await.ok() },
        )
        .await
        .map(drop)
    }
}

fn remote_code(error: &BusError) -> Option<(&str, &str)> {
    match error {
        BusError::Remote { code, message } => Some((code.code(), message.as_str())),
        _ => None,
    }
}

// ---- a stand-in Docker engine on a unix socket, serving the agent's recorded payloads ------

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../services/agent/tests/fixtures/docker")
}

fn fixture_json(name: &str) -> Response {
    match std::fs::read(fixtures_dir().join(name)) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(_) => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn inspect(UrlPath(id): UrlPath<String>) -> Response {
    for name in [
        "inspect-web.json",
        "inspect-api.json",
        "inspect-worker.json",
        "inspect-cron.json",
    ] {
        let Ok(text) = std::fs::read_to_string(fixtures_dir().join(name)) else {
            continue;
        };
        let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        if value["Id"] == id.as_str() || value["Name"] == format!("/{id}").as_str() {
            return fixture_json(name);
        }
    }
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "application/json")],
        format!(r#"{{"message":"No such container: {id}"}}"#),
    )
        .into_response()
}

fn engine(socket: &Path) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let router = Router::new()
        .route("/_ping", get(|| async { "OK" }))
        .route(
            "/v1.43/containers/json",
            get(|| async { fixture_json("containers-list.json") }),
        )
        .route("/v1.43/containers/{id}/json", get(inspect))
        .route(
            "/v1.43/events",
            get(|| async {
                axum::body::Body::from_stream(futures::stream::pending::<
                    Result<Vec<u8>, std::convert::Infallible>,
                >())
            }),
        );
    let listener = tokio::net::UnixListener::bind(socket)?;
    Ok(tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    }))
}

const WEB: &str = "4c1f0e8d2b7a41c39e5d6f8a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c";

#[tokio::test]
async fn commands_run_at_most_once_and_are_refused_with_a_stated_reason() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let mut stack = AgentStack::start(&[
        ("PULSE_RELAY__REQUEST_TIMEOUT_MS", "30000"),
        ("PULSE_RELAY__MAX_REQUESTS_PER_SEC", "20"),
    ])
    .await?;
    let prefix = stack.gateway.prefix.clone();
    let exec_token = stack
        .create_token("agent-exec", &["agent:report", "agent:exec"])
        .await?;
    let report_token = stack
        .create_token("agent-report", &["agent:report"])
        .await?;
    let api = Api::new(&prefix).await?;

    // Agent A: commands enabled, exec token, one supervised service, a stand-in engine.
    let host_a = host_id("cmd");
    let mut spec = stack.agent_spec(&host_a, &exec_token, INTERVAL)?;
    spec.enable_commands = true;
    let socket = spec.state_dir.join("docker.sock");
    let engine_task = engine(&socket)?;
    spec.docker_host = Some(format!("unix://{}", socket.display()));
    let starts_file = spec.state_dir.join("starts.txt");
    write_service(&spec.services_dir, "counter.toml", &counter(&starts_file))?;
    let agent_a = stack.spawn_agent(&spec)?;
    wait_starts(&starts_file, 1, STARTUP, "the service to start once")
        .await
        .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent_a.log_tail(30)))?;
    api.wait_connected(&host_a)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent_a.log_tail(30)))?;

    // service.restart with action id X: completed, and one more start.
    let action_x = format!("act-{}", uuid::Uuid::now_v7().simple());
    let first = api
        .request(
            "command",
            &command(&host_a, &action_x, chrono::Duration::seconds(120)),
        )
        .await?
        .0;
    assert_eq!(first.status, ReceiptStatus::Completed, "{first:?}");
    assert_eq!(first.exit_status, Some(0));
    assert!(!first.replayed);
    assert_eq!(first.action_id, action_x);
    assert!(first.output.contains("restarted"), "{}", first.output);
    wait_starts(
        &starts_file,
        2,
        Duration::from_secs(10),
        "the restart to start the service again",
    )
    .await?;

    // The relay restarts; the agent reconnects; X again: the recorded receipt, no new start.
    stack.restart_relay().await?;
    api.wait_connected(&host_a)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent_a.log_tail(30)))?;
    let again = api
        .request(
            "command",
            &command(&host_a, &action_x, chrono::Duration::seconds(120)),
        )
        .await?
        .0;
    assert!(again.replayed, "{again:?}");
    assert_eq!(again.status, ReceiptStatus::Completed);
    assert_eq!(again.output, first.output);
    assert_eq!(again.at, first.at);

    // An expired lease: rejected with the reason, nothing runs.
    let expired = api
        .request(
            "command",
            &command(&host_a, "act-expired", chrono::Duration::seconds(-5)),
        )
        .await?
        .0;
    assert_eq!(expired.status, ReceiptStatus::Rejected);
    let reason = expired.reason.unwrap_or_default();
    assert!(
        reason.contains("lease lease-act-expired expired"),
        "{reason}"
    );

    // An unknown capability: rejected with the reason.
    let mut unknown = command(&host_a, "act-unknown", chrono::Duration::seconds(60));
    unknown.capability = "shell.exec".to_owned();
    let unknown = api.request("command", &unknown).await?.0;
    assert_eq!(unknown.status, ReceiptStatus::Rejected);
    assert!(
        unknown
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("unknown capability \"shell.exec\"")),
        "{unknown:?}"
    );
    // A barrier instead of a wait: the agent runs commands one at a time in the order they
    // arrive, so once a fresh restart has completed and started the service, anything the
    // replayed or rejected commands had run would already be counted.
    let barrier = format!("act-{}", uuid::Uuid::now_v7().simple());
    let fresh = api
        .request(
            "command",
            &command(&host_a, &barrier, chrono::Duration::seconds(120)),
        )
        .await?
        .0;
    assert_eq!(fresh.status, ReceiptStatus::Completed, "{fresh:?}");
    assert!(!fresh.replayed);
    wait_starts(
        &starts_file,
        3,
        Duration::from_secs(10),
        "the fresh restart to start the service",
    )
    .await?;
    assert_eq!(
        starts(&starts_file),
        3,
        "a replayed or rejected command ran the service"
    );

    // A fresh observation: its source timestamp is newer than the request.
    let asked = Utc::now();
    let observed = api
        .request(
            "observe",
            &ObserveRequest {
                agent_id: host_a.clone(),
                target: ResourceTarget::Service {
                    name: "counter".into(),
                },
            },
        )
        .await?
        .0;
    assert!(observed.observed_at >= asked, "{observed:?}");
    assert_eq!(observed.resource.source_id, "counter");
    assert_eq!(observed.resource.status.as_str(), "running");
    let host = api.request("observe", &observe_host(&host_a)).await?.0;
    assert!(host.observed_at >= asked);
    assert_eq!(host.resource.source_id, host_a);
    let missing = api
        .request(
            "observe",
            &ObserveRequest {
                agent_id: host_a.clone(),
                target: ResourceTarget::Service {
                    name: "nope".into(),
                },
            },
        )
        .await
        .unwrap_err();
    let (code, message) = remote_code(&missing).expect("typed error");
    assert_eq!(code, "agent_refused");
    assert!(
        message.contains("no supervised service named \"nope\""),
        "{message}"
    );

    // A bounded log tail: max_lines honoured, the newest lines kept.
    let tail = api
        .request(
            "read",
            &ReadRequest {
                agent_id: host_a.clone(),
                read: ReadSpec::LogTail {
                    source: LogSource::Service {
                        name: "counter".into(),
                    },
                    max_lines: 3,
                    max_bytes: 64 * 1024,
                },
                requester: None,
            },
        )
        .await?
        .0;
    let ReadOutput::LogTail { lines, truncated } = tail.output else {
        panic!("not a log tail: {tail:?}");
    };
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(truncated);
    assert_eq!(lines[2].text, "log-line-20");

    // The inspect projection: state and health kept, env values and unrelated labels dropped.
    let inspect = api
        .request(
            "read",
            &ReadRequest {
                agent_id: host_a.clone(),
                read: ReadSpec::Inspect {
                    container: WEB.into(),
                },
                requester: None,
            },
        )
        .await?
        .0;
    let ReadOutput::Inspect { projection } = inspect.output else {
        panic!("not an inspect projection: {inspect:?}");
    };
    assert_eq!(projection["id"], WEB);
    assert_eq!(projection["running"], true);
    assert_eq!(projection["oom_killed"], false);
    assert!(projection.get("restart_count").is_some());
    let text = projection.to_string();
    for secret in ["hunter2", "DB_PASSWORD", "tok_9f8e7d6c", "Env"] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }

    // The stand-in engine's containers are reported as app-container resources.
    let reader = stack.create_token("reader", &["monitoring:read"]).await?;
    let web_id = format!("app-container:{host_a}:{WEB}");
    let web = wait::until(STARTUP, "the web container to be reported", || async {
        let list = stack.resources(&reader).await.ok()?;
        list.into_iter().find(|r| r.id.as_str() == web_id)
    })
    .await?;
    assert_eq!(web.resource_type, ResourceType::AppContainer);
    assert_eq!(web.status, ResourceStatus::Running);

    // Agent B: no --enable-commands, exec token: rejected with the stated reason.
    let host_b = host_id("nocmd");
    let spec_b = stack.agent_spec(&host_b, &exec_token, INTERVAL)?;
    let agent_b = stack.spawn_agent(&spec_b)?;
    api.wait_connected(&host_b)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent_b.log_tail(30)))?;
    let disabled = api
        .request(
            "command",
            &command(&host_b, "act-b", chrono::Duration::seconds(60)),
        )
        .await?
        .0;
    assert_eq!(disabled.status, ReceiptStatus::Rejected);
    assert_eq!(disabled.reason.as_deref(), Some(DISABLED));

    // Agent C: commands enabled but a token without agent:exec: the relay refuses.
    let host_c = host_id("noexec");
    let mut spec_c = stack.agent_spec(&host_c, &report_token, INTERVAL)?;
    spec_c.enable_commands = true;
    let agent_c = stack.spawn_agent(&spec_c)?;
    api.wait_connected(&host_c)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent_c.log_tail(30)))?;
    let refused = api
        .request(
            "command",
            &command(&host_c, "act-c", chrono::Duration::seconds(60)),
        )
        .await
        .unwrap_err();
    let (code, message) = remote_code(&refused).expect("typed error");
    assert_eq!(code, "missing_scope");
    assert!(message.contains("agent:exec"), "{message}");
    // Nothing was recorded on agent C.
    assert!(
        !spec_c.state_dir.join("command-log.jsonl").exists()
            || std::fs::read_to_string(spec_c.state_dir.join("command-log.jsonl"))?.is_empty()
    );

    // An agent nobody runs: not connected.
    let absent = api
        .request(
            "command",
            &command("nobody-here", "act-n", chrono::Duration::seconds(60)),
        )
        .await
        .unwrap_err();
    assert_eq!(
        remote_code(&absent).map(|c| c.0),
        Some("agent_not_connected")
    );

    // The command log of agent A holds X once accepted and once finished.
    let log = std::fs::read_to_string(spec.state_dir.join("command-log.jsonl"))?;
    let x_lines: Vec<&str> = log.lines().filter(|l| l.contains(&action_x)).collect();
    assert_eq!(x_lines.len(), 2, "{log}");
    assert!(x_lines[0].contains("\"accepted\"") && x_lines[1].contains("\"finished\""));

    for agent in [agent_a, agent_b, agent_c] {
        let _ = agent.stop(Duration::from_secs(15)).await;
    }
    engine_task.abort();
    // Also deletes the prefix's streams.
    stack.stop().await
}

/// A service that prints 100 lines of about 60 bytes, then sleeps.
fn chatty() -> String {
    "name = \"chatty\"\ncommand = \"sh\"\n\
     args = [\"-c\", \"i=1; while [ $i -le 100 ]; do echo chatty-line-$i-abcdefghijklmnopqrstuvwxyz-abcdefghijklmnop; i=$((i+1)); done; exec sleep 3600\"]\n"
        .to_owned()
}

#[tokio::test]
async fn requests_reach_the_agent_through_any_replica_within_size_and_rate_limits()
-> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let mut stack = AgentStack::start(&[
        ("PULSE_RELAY__MAX_RESPONSE_BYTES", "2048"),
        ("PULSE_RELAY__MAX_REQUESTS_PER_SEC", "4"),
    ])
    .await?;
    let (replica, _) = stack.start_replica().await?;
    let prefix = stack.gateway.prefix.clone();
    let token = stack.create_token("agent", &["agent:report"]).await?;
    let api = Api::new(&prefix).await?;

    // A host id with dots: its per-agent subject token must still be one token.
    let host = format!("dot.ted.{}", host_id("r"));
    let spec = stack.agent_spec(&host, &token, INTERVAL)?;
    write_service(&spec.services_dir, "chatty.toml", &chatty())?;
    let agent = stack.spawn_agent(&spec)?;
    api.wait_connected(&host)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent.log_tail(30)))?;

    // Whichever replica takes a request, the agent answers: the other one forwards it over
    // the per-agent subject. (With two replicas in the queue group, 10 requests all landing
    // on the agent's own replica happens once in 1024 runs; the direct call below always
    // exercises the per-agent subject.)
    for _ in 0..10 {
        let observed = api
            .request(
                "observe",
                &ObserveRequest {
                    agent_id: host.clone(),
                    target: ResourceTarget::Service {
                        name: "chatty".into(),
                    },
                },
            )
            .await?;
        assert_eq!(observed.0.resource.source_id, "chatty");
    }
    let direct = api
        .bus
        .request(
            &api.tenant,
            &api.bus
                .subjects()
                .relay_agent(&api.tenant, "observe", &host),
            &observe_host(&host),
            REQUEST_TIMEOUT,
        )
        .await?;
    assert_eq!(direct.0.resource.source_id, host);

    // A small tail fits; 100 lines do not fit in 2048 bytes.
    wait::until(Duration::from_secs(10), "the service to log", || async {
        let text = std::fs::read_to_string(spec.state_dir.join("logs/chatty.log")).ok()?;
        (text.lines().count() >= 100).then_some(())
    })
    .await?;
    let tail = |max_lines| ReadRequest {
        agent_id: host.clone(),
        read: ReadSpec::LogTail {
            source: LogSource::Service {
                name: "chatty".into(),
            },
            max_lines,
            max_bytes: 64 * 1024,
        },
        requester: None,
    };
    let small = api.request("read", &tail(2)).await?;
    let ReadOutput::LogTail { lines, .. } = small.0.output else {
        panic!("not a tail");
    };
    assert_eq!(lines.len(), 2);
    let too_large = api.request("read", &tail(100)).await.unwrap_err();
    let (code, message) = remote_code(&too_large).expect("typed error");
    assert_eq!(code, "agent_response_too_large");
    assert!(message.contains("2048"), "{message}");

    // A flood: some requests get through, the rest are rate limited; none fails otherwise.
    let host_request = observe_host(&host);
    let flood: Vec<_> = (0..40)
        .map(|_| api.request("observe", &host_request))
        .collect();
    let results = futures::future::join_all(flood).await;
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let limited = results
        .iter()
        .filter(|r| {
            r.as_ref()
                .err()
                .and_then(remote_code)
                .is_some_and(|(code, _)| code == "rate_limited")
        })
        .count();
    assert!(ok >= 1, "nothing got through: {results:?}");
    assert!(limited >= 1, "nothing was rate limited");
    assert_eq!(ok + limited, results.len(), "{results:?}");

    let _ = agent.stop(Duration::from_secs(15)).await;
    let _ = replica.stop(Duration::from_secs(10)).await;
    stack.stop().await
}
