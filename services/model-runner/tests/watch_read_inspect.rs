//! `pulse_read` `inspect` over the bus: a responder on the relay's `read` subject (the relay is
//! not under test here) answers with the agent's own compacted inspect projection of a recorded
//! Docker Engine payload (the agent's contract fixtures, served to the agent's Docker client).
//! The tool result carries state, health, restart count and exit code, and no env value.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{TimeZone, Utc};
use pulse_agent::docker::{DockerClient, DockerClientConfig, DockerEndpoint};
use pulse_agent_loop::provider::ToolCall;
use pulse_bus::relay_api::{RelayReadReply, RelayReadRequest};
use pulse_bus::{ErrorCode, ErrorReply};
use pulse_domain::TenantId;
use pulse_domain::agent_protocol::{ReadOutput, ReadRequest, ReadResult};
use pulse_domain::patrol::run::RunId;
use pulse_domain::resource::{Health, Resource, ResourceId, ResourceStatus, ResourceType};
use pulse_model_runner::tools::{RunLedger, ToolContext, read};
use pulse_test_support::db::TestDb;
use pulse_test_support::nats::TestNats;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// `shop-api-1` (unhealthy, restarted once) and `shop-worker-1` (OOM-killed, exited 137) of the
/// agent's fixtures; both carry a secret in `Config.Env`.
const API: &str = "9d2e1f0a3b4c45d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e";
const WORKER: &str = "0b7d3c2a1e4f46a5b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f7081920a1b2c";
const SECRETS: [&str; 4] = ["hunter2", "DATABASE_URL", "QUEUE_PASSWORD", "Env"];

fn fixture(name: &str) -> anyhow::Result<Vec<u8>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../agent/tests/fixtures/docker")
        .join(name);
    Ok(std::fs::read(path)?)
}

/// A one-route Docker Engine on loopback TCP: `GET /v1.43/containers/{id}/json` answers the
/// recorded inspect of `id`, anything else 404.
async fn engine() -> anyhow::Result<DockerClient> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let api = fixture("inspect-api.json")?;
    let worker = fixture("inspect-worker.json")?;
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (api, worker) = (api.clone(), worker.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head);
                let path = head.split_whitespace().nth(1).unwrap_or_default();
                let body = if path == format!("/v1.43/containers/{API}/json") {
                    Some(api)
                } else if path == format!("/v1.43/containers/{WORKER}/json") {
                    Some(worker)
                } else {
                    None
                };
                let (status, body) = match body {
                    Some(body) => ("200 OK", body),
                    None => (
                        "404 Not Found",
                        br#"{"message":"No such container"}"#.to_vec(),
                    ),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(&body).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    Ok(DockerClient::new(
        DockerEndpoint::Tcp {
            host: "127.0.0.1".to_owned(),
            port,
        },
        DockerClientConfig::default(),
    ))
}

fn container(source_id: &str, name: &str) -> Resource {
    let at = Utc.with_ymd_and_hms(2026, 11, 29, 6, 30, 0).unwrap();
    Resource {
        id: ResourceId::app_container("h1", source_id),
        resource_type: ResourceType::AppContainer,
        source_id: source_id.to_owned(),
        name: name.to_owned(),
        aliases: Vec::new(),
        parent: None,
        agent_id: "h1".to_owned(),
        status: ResourceStatus::Running,
        health: Health::Unhealthy,
        restart_count: Some(1),
        labels: Default::default(),
        details: Value::Null,
        observed_at: at,
        received_at: at,
    }
}

fn inspect_call(resource_id: &ResourceId) -> ToolCall {
    ToolCall {
        id: "call-1".to_owned(),
        name: "pulse_read".to_owned(),
        arguments: json!({"action": "inspect", "resource_id": resource_id.as_str()}),
        thought_signature: None,
    }
}

#[tokio::test]
async fn inspect_answers_the_agents_compact_projection_without_env() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let nats = TestNats::connect().await?;
    let bus = nats.bus();
    let tenant = TenantId::new("acme")?;
    let docker = Arc::new(engine().await?);
    let served = Arc::new(AtomicUsize::new(0));

    // Stands in for the relay: answers each inspect with the agent's projection.
    let subject = bus.subjects().endpoint::<RelayReadRequest>(&tenant);
    let responder = {
        let (docker, served) = (docker.clone(), served.clone());
        bus.serve(&subject, None, move |_, request: RelayReadRequest| {
            let (docker, served) = (docker.clone(), served.clone());
            async move {
                let ReadRequest::Inspect { container } = &request.read else {
                    return Err(ErrorReply::new(ErrorCode::InvalidRequest, "not an inspect"));
                };
                if request.agent_id != "h1" {
                    return Err(ErrorReply::new(
                        ErrorCode::AgentNotConnected,
                        "unknown agent",
                    ));
                }
                let projection = docker
                    .inspect_compact(container)
                    .await
                    .map_err(|e| ErrorReply::new(ErrorCode::AgentRefused, e.to_string()))?;
                let projection = serde_json::to_value(projection)
                    .map_err(|e| ErrorReply::new(ErrorCode::AgentRefused, e.to_string()))?;
                served.fetch_add(1, Ordering::SeqCst);
                Ok(RelayReadReply(ReadResult {
                    request_id: "r-1".to_owned(),
                    read_at: Utc::now(),
                    output: ReadOutput::Inspect { projection },
                }))
            }
        })
        .await?
    };

    let api = container(API, "shop-api-1");
    let worker = container(WORKER, "shop-worker-1");
    let ctx = ToolContext {
        store: db.store().clone(),
        bus: Some(bus.clone()),
        tenant: tenant.clone(),
        run_id: RunId::from_uuid(uuid::Uuid::now_v7()),
        scope: Arc::new(vec![api.clone(), worker.clone()]),
        backend_timeout: Duration::from_secs(5),
    };
    let ledger = RunLedger::new();

    let api_result = read::call(&ctx, &ledger, &inspect_call(&api.id)).await;
    assert!(!api_result.is_error, "{}", api_result.content);
    let answer: Value = serde_json::from_str(&api_result.content)?;
    assert_eq!(answer["resource_id"], api.id.as_str());
    let inspect = &answer["inspect"];
    assert_eq!(inspect["state"], "running");
    assert_eq!(inspect["running"], true);
    assert_eq!(inspect["health_status"], "unhealthy");
    assert_eq!(inspect["failing_streak"], 6);
    assert_eq!(inspect["restart_count"], 1);
    assert_eq!(inspect["exit_code"], 0);
    assert_eq!(inspect["restart_policy"]["name"], "always");
    assert_eq!(inspect["image"], "ghcr.io/example/shop-api:2.3.1");
    let health = inspect["health_results"]
        .as_array()
        .expect("health results");
    assert_eq!(health.len(), 3, "the newest results, bounded");
    assert!(
        health[2]["output"]
            .as_str()
            .is_some_and(|o| o.contains("Operation timed out")),
        "{inspect}"
    );
    assert_eq!(inspect["labels"]["com.docker.compose.service"], "api");

    let result = read::call(&ctx, &ledger, &inspect_call(&worker.id)).await;
    assert!(!result.is_error, "{}", result.content);
    let answer: Value = serde_json::from_str(&result.content)?;
    let inspect = &answer["inspect"];
    assert_eq!(inspect["state"], "exited");
    assert_eq!(inspect["exit_code"], 137);
    assert_eq!(inspect["oom_killed"], true);
    assert_eq!(inspect["restart_count"], 0);

    for content in [&api_result.content, &result.content] {
        for secret in SECRETS {
            assert!(
                !content.contains(secret),
                "{secret} reached the model: {content}"
            );
        }
    }
    assert_eq!(served.load(Ordering::SeqCst), 2);
    assert!(ledger.unavailable().is_empty());
    responder.stop().await;
    Ok(())
}
