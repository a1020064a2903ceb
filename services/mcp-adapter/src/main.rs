//! `pulse-mcp`: the stdio MCP adapter. JSON-RPC 2.0, one message per line, over the gateway's
//! capability manifest (see the library).

use std::process::ExitCode;

use clap::Parser;
use pulse_mcp::McpServer;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

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
    let server = match McpServer::connect(&args.base_url, token).await {
        Ok(server) => server,
        Err(error) => {
            eprintln!(
                "pulse-mcp: {error}; is the gateway running at {}?",
                args.base_url
            );
            return ExitCode::from(1);
        }
    };
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut stdout = tokio::io::stdout();
    loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => return ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("pulse-mcp: reading stdin: {error}");
                return ExitCode::from(1);
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let answer = match serde_json::from_str(&line) {
            Ok(message) => server.handle(message).await,
            Err(error) => Some(serde_json::json!({
                "jsonrpc": "2.0",
                "id": null,
                "error": {"code": -32700, "message": format!("parse error: {error}")},
            })),
        };
        if let Some(answer) = answer {
            let mut text = answer.to_string();
            text.push('\n');
            if stdout.write_all(text.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
                return ExitCode::SUCCESS;
            }
        }
    }
}
