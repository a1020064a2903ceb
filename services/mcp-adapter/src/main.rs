//! `pulse-mcp`: the stdio MCP adapter. JSON-RPC 2.0, one message per line, over the gateway's
//! capability manifest (see the library). With `--emit-notifications` the gateway's agent events
//! (`GET /api/agent/events`) become `notifications/<kind>` messages.

use std::process::ExitCode;

use clap::Parser;
use futures::StreamExt;
use pulse_mcp::McpServer;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// Pulse MCP server over stdio: offers the gateway's governed capabilities to an MCP client with
/// the authority of one API token.
#[derive(Debug, Parser)]
#[command(name = "pulse-mcp", version)]
struct Args {
    /// The Pulse gateway.
    #[arg(long, default_value = "http://localhost:7655", value_name = "URL")]
    base_url: String,
    /// The environment variable holding the API token.
    #[arg(long, default_value = "PULSE_API_TOKEN", value_name = "NAME")]
    token_env: String,
    /// Forward the gateway's agent events (findings, approvals, actions) as
    /// `notifications/<kind>` messages (needs `monitoring:read`).
    #[arg(long)]
    emit_notifications: bool,
}

/// Reads `GET /api/agent/events` and sends each event but heartbeats as a notification, until
/// the stream ends or the client goes away.
async fn forward_events(base_url: String, token: Option<String>, out: mpsc::Sender<String>) {
    let mut request = reqwest::Client::new()
        .get(format!(
            "{}/api/agent/events",
            base_url.trim_end_matches('/')
        ))
        .header(pulse_mcp::SURFACE_HEADER, pulse_mcp::SURFACE);
    if let Some(token) = &token {
        request = request.bearer_auth(token);
    }
    let response = match request.send().await {
        Ok(response) if response.status().is_success() => response,
        Ok(response) => {
            eprintln!(
                "pulse-mcp: the event stream answered {}; no notifications",
                response.status()
            );
            return;
        }
        Err(error) => {
            eprintln!("pulse-mcp: cannot open the event stream: {error}");
            return;
        }
    };
    let mut body = response.bytes_stream();
    let mut pending = String::new();
    let (mut kind, mut data) = (String::new(), String::new());
    while let Some(Ok(chunk)) = body.next().await {
        pending.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if !kind.is_empty() && kind != "heartbeat" {
                    let params: Value =
                        serde_json::from_str(&data).unwrap_or(json!({"data": data}));
                    let note = json!({
                        "jsonrpc": "2.0",
                        "method": format!("notifications/{kind}"),
                        "params": params,
                    });
                    if out.send(note.to_string()).await.is_err() {
                        return;
                    }
                }
                kind.clear();
                data.clear();
            } else if let Some(value) = line.strip_prefix("event:") {
                kind = value.trim().to_owned();
            } else if let Some(value) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(value.trim_start());
            }
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    let token = std::env::var(&args.token_env)
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty());
    if token.is_none() {
        eprintln!(
            "pulse-mcp: {} is not set; only public capabilities will answer (create a token with \
             `pulsectl token create`)",
            args.token_env
        );
    }
    let server = match McpServer::connect(&args.base_url, token.clone()).await {
        Ok(server) => server,
        Err(error) => {
            eprintln!(
                "pulse-mcp: {error}; is the gateway running at {}?",
                args.base_url
            );
            return ExitCode::from(1);
        }
    };
    // One writer: answers and notifications never interleave within a line.
    let (out, mut lines_out) = mpsc::channel::<String>(256);
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(mut line) = lines_out.recv().await {
            line.push('\n');
            if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
                return;
            }
        }
    });
    if args.emit_notifications {
        tokio::spawn(forward_events(args.base_url.clone(), token, out.clone()));
    }
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let code = loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("pulse-mcp: reading stdin: {error}");
                break ExitCode::from(1);
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let answer = match serde_json::from_str(&line) {
            Ok(message) => server.handle(message).await,
            Err(error) => Some(json!({
                "jsonrpc": "2.0",
                "id": null,
                "error": {"code": -32700, "message": format!("parse error: {error}")},
            })),
        };
        if let Some(answer) = answer
            && out.send(answer.to_string()).await.is_err()
        {
            break ExitCode::SUCCESS;
        }
    };
    drop(out);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), writer).await;
    code
}
