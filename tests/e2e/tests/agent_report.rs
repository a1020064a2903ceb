//! Real host state from a `pulse-agent` through `pulse-agent-relay` into Postgres and out of the
//! gateway API: supervised-service health, liveness, bad input, tenant isolation.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use pulse_capabilities::ErrorCode;
use pulse_domain::agent_protocol::{AGENT_WS_PATH, PROTOCOL_VERSION};
use pulse_domain::resource::{Health, Resource, ResourceStatus, ResourceType};
use pulse_domain::{Scope, TenantId};
use pulse_store::tokens::{self, NewToken};
use pulse_test_support::agent::host_id;
use pulse_test_support::agent::{AgentStack, of_host, write_service};
use pulse_test_support::service::signal;
use pulse_test_support::wait;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const INTERVAL: Duration = Duration::from_secs(1);
/// Time for a freshly spawned binary to start and connect, on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(10);

fn sleeper(marker: &std::path::Path) -> String {
    pulse_test_support::agent::marker_service("sleeper", marker)
}

fn find<'a>(list: &'a [Resource], id: &str) -> Option<&'a Resource> {
    list.iter().find(|r| r.id.as_str() == id)
}

/// Waits until the resource `id` satisfies `pred`, returning it.
async fn wait_resource(
    stack: &AgentStack,
    token: &str,
    id: &str,
    deadline: Duration,
    what: &str,
    pred: impl Fn(&Resource) -> bool,
) -> anyhow::Result<Resource> {
    wait::until(deadline, what, || async {
        let list = stack.resources(token).await.ok()?;
        find(&list, id).filter(|r| pred(r)).cloned()
    })
    .await
}

#[tokio::test]
async fn supervised_service_health_and_agent_liveness_flow_to_the_api() -> anyhow::Result<()> {
    let stack = AgentStack::start(&[("PULSE_RELAY__AGENT_OFFLINE_AFTER_MS", "3000")]).await?;
    let agent_token = stack.create_token("agent", &["agent:report"]).await?;
    let reader = stack.create_token("reader", &["monitoring:read"]).await?;
    let host = host_id("e2e");
    let spec = stack.agent_spec(&host, &agent_token, INTERVAL)?;
    let marker = spec.state_dir.join("maintenance-marker");
    write_service(&spec.services_dir, "sleeper.toml", &sleeper(&marker))?;
    let service_id = format!("service:{host}:sleeper");

    // events.resource.changed, as the outbox relay publishes it.
    let nats = async_nats::connect(pulse_test_support::nats::nats_url()).await?;
    let subject = pulse_bus::Subjects::try_new(Some(&stack.gateway.prefix))?.event(
        &TenantId::default_tenant(),
        "resource",
        "changed",
    );
    let mut events = nats.subscribe(subject).await?;

    let agent = stack.spawn_agent(&spec)?;
    let service = wait_resource(
        &stack,
        &reader,
        &service_id,
        STARTUP + INTERVAL * 2,
        "the supervised service to be running and healthy",
        |r| r.status == ResourceStatus::Running && r.health == Health::Healthy,
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent.log_tail(30)))?;
    assert_eq!(service.resource_type, ResourceType::Service);
    assert_eq!(
        service.parent.as_ref().map(|p| p.as_str()),
        Some(format!("host:{host}").as_str())
    );
    assert_eq!(service.restart_count, Some(0));
    let sleep_pid = service.details["pid"].as_u64().expect("pid reported") as u32;
    let created = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(message) = events.next().await {
            let event: Value = serde_json::from_slice(&message.payload).unwrap_or_default();
            if event["resource_id"] == service_id.as_str() && event["change"] == "created" {
                return Some(event);
            }
        }
        None
    })
    .await?
    .expect("a resource.changed event for the service");
    assert_eq!(created["type"], "service");

    let list = stack.resources(&reader).await?;
    let mine = of_host(&list, &host);
    let host_resource = find(&list, &format!("host:{host}")).expect("host listed");
    assert_eq!(host_resource.status, ResourceStatus::Running);
    assert!(host_resource.details["cpus"].as_u64().unwrap_or(0) >= 1);
    let storage: Vec<&&Resource> = mine
        .iter()
        .filter(|r| r.resource_type == ResourceType::Storage)
        .collect();
    assert!(!storage.is_empty(), "no storage resource in {mine:?}");

    // The type filter and the resolver through the API.
    let storage_only = pulse_api::resources::ListQuery {
        resource_type: Some(ResourceType::Storage),
    };
    let filtered = stack
        .gateway
        .client_as(&reader)?
        .resources(&storage_only)
        .await?
        .resources;
    assert!(
        !filtered.is_empty()
            && filtered
                .iter()
                .all(|r| r.resource_type == ResourceType::Storage)
    );
    let by_name = stack.resource(&reader, "sleeper").await?;
    assert_eq!(by_name.id.as_str(), service_id);
    stack.resource(&reader, storage[0].id.as_str()).await?;
    let refused = stack
        .resource(&reader, "no-such-thing")
        .await
        .expect_err("an unknown reference is refused");
    assert_eq!(
        (refused.status(), refused.code()),
        (Some(404), Some(ErrorCode::NotFound))
    );

    // The health check follows the marker file, and the change is reported at once.
    std::fs::write(&marker, "maintenance")?;
    let unhealthy = wait_resource(
        &stack,
        &reader,
        &service_id,
        INTERVAL * 2 + Duration::from_secs(1),
        "unhealthy",
        |r| r.health == Health::Unhealthy,
    )
    .await?;
    assert_eq!(unhealthy.status, ResourceStatus::Running);
    assert!(
        unhealthy.details["health_log"]
            .as_array()
            .is_some_and(|log| !log.is_empty() && log.len() <= 10)
    );
    std::fs::remove_file(&marker)?;
    wait_resource(
        &stack,
        &reader,
        &service_id,
        INTERVAL * 2 + Duration::from_secs(1),
        "healthy again",
        |r| r.health == Health::Healthy,
    )
    .await?;

    // SIGKILL: the agent's resources become unknown (never stopped) after the liveness timeout.
    let before: BTreeSet<String> = of_host(&stack.resources(&reader).await?, &host)
        .iter()
        .map(|r| r.id.to_string())
        .collect();
    signal(agent.pid().expect("agent pid"), libc::SIGKILL);
    let _ = agent.stop(Duration::from_secs(5)).await;
    // The orphaned supervised `sleep` would otherwise outlive the test.
    signal(sleep_pid, libc::SIGKILL);
    let unknown = wait::until(
        Duration::from_secs(15),
        "resources to become unknown",
        || async {
            let list = stack.resources(&reader).await.ok()?;
            let mine: Vec<Resource> = of_host(&list, &host).into_iter().cloned().collect();
            mine.iter()
                .all(|r| r.status == ResourceStatus::Unknown && r.health == Health::Unknown)
                .then_some(mine)
        },
    )
    .await?;
    assert_eq!(unknown.len(), before.len());
    assert!(unknown.iter().all(|r| r.status != ResourceStatus::Stopped));

    // Restarting the agent restores them under the same ids, without duplicates.
    let agent = stack.spawn_agent(&spec)?;
    let restored = wait::until(
        STARTUP + INTERVAL * 2,
        "resources to be restored",
        || async {
            let list = stack.resources(&reader).await.ok()?;
            let service = find(&list, &service_id)?;
            (service.status == ResourceStatus::Running && service.health == Health::Healthy)
                .then_some(list)
        },
    )
    .await?;
    let after: BTreeSet<String> = of_host(&restored, &host)
        .iter()
        .map(|r| r.id.to_string())
        .collect();
    assert_eq!(after, before);
    assert_eq!(of_host(&restored, &host).len(), before.len());

    // The running agent stops its supervised service on SIGTERM.
    let restarted_pid = find(&restored, &service_id).and_then(|s| s.details["pid"].as_u64());
    let status = agent.stop(Duration::from_secs(10)).await?;
    assert!(status.success(), "agent exited with {status}");
    if let Some(pid) = restarted_pid {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
                || !std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .unwrap_or_default()
                    .starts_with("sleep"),
            "supervised service {pid} outlived its agent"
        );
    }
    stack.stop().await
}

type RawSocket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn raw_connect(
    stack: &AgentStack,
    token: &str,
) -> Result<RawSocket, tokio_tungstenite::tungstenite::Error> {
    let url = format!(
        "{}{AGENT_WS_PATH}",
        stack.relay_url.replacen("http://", "ws://", 1)
    );
    let mut request = url.into_client_request()?;
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let (socket, _) = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_tungstenite::connect_async(request),
    )
    .await
    .expect("connect timed out")?;
    Ok(socket)
}

async fn next_reply(socket: &mut RawSocket) -> anyhow::Result<Value> {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await?
            .ok_or_else(|| anyhow::anyhow!("relay closed the connection"))??;
        if let Message::Text(text) = frame {
            return Ok(serde_json::from_str(text.as_str())?);
        }
    }
}

fn handshake_status(result: Result<RawSocket, tokio_tungstenite::tungstenite::Error>) -> u16 {
    match result {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("expected an HTTP refusal, got {other}"),
        Ok(_) => panic!("expected an HTTP refusal, got a WebSocket"),
    }
}

#[tokio::test]
async fn bad_input_is_rejected_with_a_reason_and_other_agents_keep_reporting() -> anyhow::Result<()>
{
    let stack = AgentStack::start(&[("PULSE_RELAY__MAX_REPORT_BYTES", "65536")]).await?;
    let agent_token = stack.create_token("agent", &["agent:report"]).await?;
    let reader = stack.create_token("reader", &["monitoring:read"]).await?;

    // Handshake refusals: bad token, expired token, token without agent:report.
    assert_eq!(
        handshake_status(raw_connect(&stack, "pulse_nonsense").await),
        401
    );
    let default = TenantId::default_tenant();
    let tx = stack.gateway.db.store().tenant_tx(&default).await?;
    let expired = tokens::issue(
        &tx,
        NewToken {
            name: "expired".to_owned(),
            scopes: BTreeSet::from([Scope::AgentReport]),
            expires_at: Some(chrono::Utc::now() - chrono::Duration::minutes(1)),
            created_by: None,
        },
    )
    .await?;
    tx.commit().await?;
    assert_eq!(
        handshake_status(raw_connect(&stack, expired.secret.expose()).await),
        401
    );
    assert_eq!(handshake_status(raw_connect(&stack, &reader).await), 403);

    // A well-behaved agent, connected throughout.
    let host = host_id("good");
    let spec = stack.agent_spec(&host, &agent_token, INTERVAL)?;
    let agent = stack.spawn_agent(&spec)?;
    let host_ref = format!("host:{host}");
    wait_resource(
        &stack,
        &reader,
        &host_ref,
        STARTUP + INTERVAL * 2,
        "the good agent's host",
        |_| true,
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent.log_tail(30)))?;

    // The connector prefixes belong to the connectors' own bound tokens: an agent token may
    // not speak for a Proxmox cluster.
    let mut impostor = raw_connect(&stack, &agent_token).await?;
    impostor
        .send(Message::text(
            json!({"type": "hello", "protocol": PROTOCOL_VERSION, "agent_id": "pve.lab",
                   "hostname": "raw", "agent_version": "test", "report_interval_ms": 1000})
            .to_string(),
        ))
        .await?;
    let reply = next_reply(&mut impostor).await?;
    assert_eq!(reply["type"], "rejected", "{reply}");
    assert!(
        reply["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("belong to the connector"),
        "{reply}"
    );
    drop(impostor);

    let mut socket = raw_connect(&stack, &agent_token).await?;
    socket
        .send(Message::text(
            json!({"type": "hello", "protocol": PROTOCOL_VERSION, "agent_id": "raw-client",
                   "hostname": "raw", "agent_version": "test", "report_interval_ms": 1000})
            .to_string(),
        ))
        .await?;
    assert_eq!(next_reply(&mut socket).await?["type"], "welcome");

    socket
        .send(Message::text("{\"type\": \"report\", "))
        .await?;
    let reply = next_reply(&mut socket).await?;
    assert_eq!(reply["type"], "rejected");
    assert!(
        reply["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("malformed"),
        "{reply}"
    );

    let oversized = json!({"type": "report", "seq": 1, "observed_at": "2026-01-01T00:00:00Z",
                           "resources": [], "padding": "x".repeat(100_000)})
    .to_string();
    socket.send(Message::text(oversized)).await?;
    let reply = next_reply(&mut socket).await?;
    assert_eq!(reply["type"], "rejected");
    assert!(
        reply["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("exceeds the limit"),
        "{reply}"
    );

    socket
        .send(Message::binary(vec![0xff_u8, 0xfe, b'{', 0xc3, 0x28]))
        .await?;
    let reply = next_reply(&mut socket).await?;
    assert_eq!(reply["type"], "rejected");
    assert!(
        reply["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("UTF-8"),
        "{reply}"
    );

    // Over-long labels are truncated, not refused.
    let long = "é".repeat(5000);
    socket
        .send(Message::text(
            json!({"type": "report", "seq": 2, "observed_at": chrono::Utc::now(),
                   "resources": [{"type": "host", "source_id": "raw-client", "name": long,
                                  "status": "running", "health": "healthy",
                                  "labels": {"note": long}}]})
            .to_string(),
        ))
        .await?;
    let reply = next_reply(&mut socket).await?;
    assert_eq!(reply, json!({"type": "ack", "seq": 2}));
    let raw_host = stack.resource(&reader, "host:raw-client").await?;
    assert_eq!(raw_host.name.chars().count(), 256);
    assert_eq!(
        raw_host.labels.get("note").map(|n| n.chars().count()),
        Some(1024)
    );

    // The relay is up and the good agent's reports keep arriving.
    let after_abuse = chrono::Utc::now();
    let health = stack
        .gateway
        .http
        .get(format!("{}/healthz", stack.relay_url))
        .send()
        .await?;
    assert!(health.status().is_success());
    wait_resource(
        &stack,
        &reader,
        &host_ref,
        INTERVAL * 3,
        "a fresh report from the good agent",
        |r| r.received_at > after_abuse,
    )
    .await?;

    // Repeated protocol violations close that one connection.
    for _ in 0..5 {
        if socket.send(Message::text("not json")).await.is_err() {
            break;
        }
    }
    // Drain the rejections until the relay closes the connection, within a deadline.
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match socket.next().await {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                Some(Ok(_)) => continue,
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "connection stayed open");

    let status = agent.stop(Duration::from_secs(10)).await?;
    assert!(status.success());
    stack.stop().await
}

#[tokio::test]
async fn another_tenants_resources_are_invisible() -> anyhow::Result<()> {
    let stack = AgentStack::start(&[]).await?;
    let reader_a = stack.create_token("reader", &["monitoring:read"]).await?;

    let tenant_b = TenantId::new(format!(
        "b{}",
        &uuid::Uuid::now_v7().simple().to_string()[20..]
    ))?;
    let store = stack.gateway.db.store();
    pulse_store::tenants::create(store, &tenant_b, "Tenant B").await?;
    let tx = store.tenant_tx(&tenant_b).await?;
    let issue = |name: &str, scope: Scope| NewToken {
        name: name.to_owned(),
        scopes: BTreeSet::from([scope]),
        expires_at: None,
        created_by: None,
    };
    let agent_b = tokens::issue(&tx, issue("agent-b", Scope::AgentReport)).await?;
    let reader_b = tokens::issue(&tx, issue("reader-b", Scope::MonitoringRead)).await?;
    tx.commit().await?;

    let host = host_id("tenant-b");
    let spec = stack.agent_spec(&host, agent_b.secret.expose(), INTERVAL)?;
    let agent = stack.spawn_agent(&spec)?;
    let host_ref = format!("host:{host}");
    wait_resource(
        &stack,
        reader_b.secret.expose(),
        &host_ref,
        STARTUP + INTERVAL * 2,
        "tenant B's host",
        |_| true,
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent.log_tail(30)))?;

    assert!(stack.resources(&reader_a).await?.is_empty());
    let refused = stack
        .resource(&reader_a, &host_ref)
        .await
        .expect_err("another tenant's host is not found");
    assert_eq!(
        (refused.status(), refused.code()),
        (Some(404), Some(ErrorCode::NotFound))
    );
    stack.resource(reader_b.secret.expose(), &host_ref).await?;

    let status = agent.stop(Duration::from_secs(10)).await?;
    assert!(status.success());
    stack.stop().await
}
