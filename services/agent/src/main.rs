use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tokio_util::sync::CancellationToken;

/// Pulse host agent (report-only).
#[derive(Debug, Parser)]
#[command(name = "pulse-agent", version)]
struct Cli {
    /// Base URL of the agent relay.
    #[arg(long, env = "PULSE_AGENT_RELAY_URL")]
    relay_url: Option<String>,
    /// Seconds between reports.
    #[arg(long, default_value_t = 10)]
    interval_secs: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let config = match pulse_config::PulseConfig::load() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("pulse-agent: {error}");
            return ExitCode::from(2);
        }
    };
    let telemetry = match pulse_telemetry::init("agent", &config.telemetry) {
        Ok(guard) => guard,
        Err(error) => {
            eprintln!("pulse-agent: {error}");
            return ExitCode::from(2);
        }
    };
    let shutdown = CancellationToken::new();
    let signal = shutdown.clone();
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => return,
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = term.recv() => {},
        }
        signal.cancel();
    });
    let options = pulse_agent::AgentOptions {
        relay_url: cli
            .relay_url
            .unwrap_or_else(|| format!("http://{}", config.relay.listen)),
        interval: Duration::from_secs(cli.interval_secs.max(1)),
    };
    tracing::info!(relay = %options.relay_url, "agent started (report-only)");
    let result = pulse_agent::run(options, shutdown).await;
    telemetry.shutdown().await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("pulse-agent: {error:#}");
            ExitCode::FAILURE
        }
    }
}
