//! The agent's relay connection is full duplex: a relay stand-in (a real WebSocket server in
//! the test) sends requests while a report is still waiting for its ack, and gets the answers.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use axum::routing::get;
use pulse_agent::commands::{Commands, DISABLED_REASON, HostExecutor};
use pulse_agent::host_files::HostFiles;
use pulse_agent::observe::Observer;
use pulse_agent::read_exec::ReadExec;
use pulse_agent::reads::Reader;
use pulse_agent::requests::Requests;
use pulse_agent::supervisor::Supervisor;
use pulse_agent_session::{self as connection, Backlog, ConnectionConfig};
use pulse_domain::agent_protocol::{
    AGENT_WS_PATH, AgentMessage, Command, Hello, Observe, PROTOCOL_VERSION, ReceiptStatus,
    RelayMessage, Report, ResourceTarget,
};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

/// What the stand-in relay saw, in order.
type Seen = mpsc::UnboundedSender<AgentMessage>;

async fn recv(socket: &mut WebSocket) -> Option<AgentMessage> {
    loop {
        match socket.recv().await? {
            Ok(Message::Text(text)) => return serde_json::from_str(text.as_str()).ok(),
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => continue,
        }
    }
}

async fn send(socket: &mut WebSocket, message: &RelayMessage) {
    let text = serde_json::to_string(message).unwrap();
    socket.send(Message::Text(text.into())).await.unwrap();
}

/// Welcome; then, on the first report, a command and an observe before the ack.
async fn relay(mut socket: WebSocket, seen: Seen) {
    let Some(AgentMessage::Hello(hello)) = recv(&mut socket).await else {
        return;
    };
    send(
        &mut socket,
        &RelayMessage::Welcome {
            protocol: PROTOCOL_VERSION,
            agent_id: hello.agent_id,
            offline_after_ms: 30_000,
        },
    )
    .await;
    let Some(AgentMessage::Report(report)) = recv(&mut socket).await else {
        return;
    };
    let seq = report.seq;
    let _ = seen.send(AgentMessage::Report(report));
    send(
        &mut socket,
        &RelayMessage::Command(Command {
            request_id: "r1".into(),
            action_id: "a1".into(),
            lease_id: "l1".into(),
            lease_expires_at: chrono::Utc::now() + chrono::Duration::seconds(60),
            capability: "service.restart".into(),
            target: "web".into(),
        }),
    )
    .await;
    send(
        &mut socket,
        &RelayMessage::Observe(Observe {
            request_id: "r2".into(),
            target: ResourceTarget::Service {
                name: "nope".into(),
            },
        }),
    )
    .await;
    // Two answers arrive while the report is unacked; nothing else is sent meanwhile.
    for _ in 0..2 {
        match recv(&mut socket).await {
            Some(answer) => {
                let _ = seen.send(answer);
            }
            None => return,
        }
    }
    send(&mut socket, &RelayMessage::Ack { seq }).await;
    // Keep the connection open; further reports are acked.
    while let Some(message) = recv(&mut socket).await {
        if let AgentMessage::Report(report) = message {
            let seq = report.seq;
            let _ = seen.send(AgentMessage::Report(report));
            send(&mut socket, &RelayMessage::Ack { seq }).await;
        }
    }
}

async fn upgrade(State(seen): State<Seen>, ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(move |socket| relay(socket, seen))
}

async fn next(seen: &mut mpsc::UnboundedReceiver<AgentMessage>) -> AgentMessage {
    tokio::time::timeout(Duration::from_secs(10), seen.recv())
        .await
        .expect("the stand-in relay saw nothing")
        .expect("channel closed")
}

fn report(seq: u64) -> Report {
    Report {
        seq,
        observed_at: chrono::Utc::now(),
        resources: Vec::new(),
    }
}

#[tokio::test]
async fn requests_are_answered_while_a_report_waits_for_its_ack() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new()
        .route(AGENT_WS_PATH, get(upgrade))
        .with_state(seen_tx);
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    let dir: PathBuf = std::env::temp_dir().join(format!("pulse-duplex-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let supervisor =
        Supervisor::new(dir.join("services.d"), None, Arc::new(Notify::new())).unwrap();
    let view = supervisor.view();
    let requests = Arc::new(Requests {
        commands: Commands::disabled(HostExecutor {
            supervisor: supervisor.handle(),
            docker: None,
        }),
        observer: Observer {
            agent_id: "m1".into(),
            hostname: "box".into(),
            proc_root: dir.join("proc"),
            mounts_path: dir.join("mounts"),
            services: view.clone(),
            docker: None,
        },
        reader: Reader {
            log_dir: dir.join("logs"),
            services: view,
            docker: None,
            files: HostFiles::default(),
            exec: ReadExec::default(),
        },
    });
    let backlog = Arc::new(Backlog::new(10));
    backlog.push(report(1));
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(connection::run(
        ConnectionConfig {
            relay_url: format!("http://{addr}"),
            token: "t".into(),
            hello: Hello {
                protocol: PROTOCOL_VERSION,
                agent_id: "m1".into(),
                hostname: "box".into(),
                agent_version: "test".into(),
                report_interval_ms: 1000,
            },
        },
        backlog.clone(),
        Some(requests),
        shutdown.clone(),
    ));

    assert!(matches!(next(&mut seen).await, AgentMessage::Report(r) if r.seq == 1));
    let mut answers = [next(&mut seen).await, next(&mut seen).await];
    answers.sort_by_key(|a| a.request_id().map(str::to_owned));
    match &answers[0] {
        AgentMessage::Receipt(receipt) => {
            assert_eq!(receipt.request_id, "r1");
            assert_eq!(receipt.status, ReceiptStatus::Rejected);
            assert_eq!(receipt.reason.as_deref(), Some(DISABLED_REASON));
        }
        other => panic!("expected a receipt, got {other:?}"),
    }
    match &answers[1] {
        AgentMessage::Refused(refused) => {
            assert_eq!(refused.request_id, "r2");
            assert!(refused.reason.contains("nope"), "{}", refused.reason);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // After the ack, the next report goes out on the same connection.
    backlog.push(report(2));
    assert!(matches!(next(&mut seen).await, AgentMessage::Report(r) if r.seq == 2));

    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    server.abort();
    let _ = std::fs::remove_dir_all(&dir);
}
