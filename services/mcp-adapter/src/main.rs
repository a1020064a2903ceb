//! `pulse-mcp`: the stdio MCP adapter. JSON-RPC 2.0, one message per line, over the gateway's
//! capability manifest (see the library). With `--emit-notifications` the gateway's agent events
//! (`GET /api/agent/events`) become `notifications/<kind>` messages (`pulse_mcp::notifications`).

use std::process::ExitCode;

use clap::Parser;
use pulse_mcp::McpServer;
use serde_json::json;
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
        let (base_url, out) = (args.base_url.clone(), out.clone());
        tokio::spawn(async move {
            pulse_mcp::notifications::forward(&base_url, token.as_deref(), out).await;
        });
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
