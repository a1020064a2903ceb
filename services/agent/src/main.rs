use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tokio_util::sync::CancellationToken;

/// Pulse host agent.
#[derive(Debug, Parser)]
#[command(name = "pulse-agent", version)]
struct Cli {
    /// Base URL of the agent relay (default: http://<relay.listen>).
    #[arg(long, env = "PULSE_AGENT_RELAY_URL")]
    relay_url: Option<String>,
    /// Token with scope agent:report.
    #[arg(long, env = "PULSE_AGENT_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// File holding the token, used when no --token is given (default: <agent state dir>/token).
    /// The agent waits for it to appear (`pulsectl up` writes it once the gateway is up).
    #[arg(long, env = "PULSE_AGENT_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Stable id of this host (default: /etc/machine-id, else the host name).
    #[arg(long, env = "PULSE_AGENT_HOST_ID")]
    host_id: Option<String>,
    /// Where the agent keeps its files (default: <state_dir>/agent).
    #[arg(long, env = "PULSE_AGENT_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Directory of supervised-service definitions (default: <agent state dir>/services.d).
    #[arg(long, env = "PULSE_AGENT_SERVICES_DIR")]
    services_dir: Option<PathBuf>,
    /// Seconds between reports.
    #[arg(long, default_value_t = 10)]
    interval_secs: u64,
    /// Milliseconds between reports; overrides --interval-secs.
    #[arg(long, env = "PULSE_AGENT_INTERVAL_MS")]
    interval_ms: Option<u64>,
    /// Run typed commands (service.* and docker.container.* start/stop/restart) sent by the
    /// relay. Off by default; the relay also needs the agent's token to carry agent:exec.
    #[arg(long, env = "PULSE_AGENT_ENABLE_COMMANDS")]
    enable_commands: bool,
    /// Run read-only diagnostic commands for pulse_read exec (df, ps, journalctl, ...): only
    /// what the exec classifier admits, without a shell, bounded in time and output, redacted.
    /// Off by default: every exec is then refused (file, tail and find stay available).
    #[arg(long, env = "PULSE_AGENT_ALLOW_READ_EXEC")]
    allow_read_exec: bool,
    /// Do not collect Docker containers even when an engine is reachable.
    #[arg(long, env = "PULSE_AGENT_NO_DOCKER")]
    no_docker: bool,
    /// Watch and act on only the Docker containers carrying this label: `KEY` (present) or
    /// `KEY=VALUE`. For an engine shared with containers this host's Pulse must not judge.
    /// An empty value (an unset compose variable) means every container.
    #[arg(long, env = "PULSE_AGENT_DOCKER_LABEL")]
    docker_label: Option<String>,
}

/// `--docker-label`: `None` when absent or empty.
fn docker_label(
    raw: Option<&str>,
) -> Result<Option<pulse_agent::docker::LabelScope>, pulse_agent::docker::InvalidLabelScope> {
    match raw.map(str::trim).filter(|v| !v.is_empty()) {
        Some(selector) => pulse_agent::docker::LabelScope::parse(selector).map(Some),
        None => Ok(None),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let docker_scope = match docker_label(cli.docker_label.as_deref()) {
        Ok(scope) => scope,
        Err(error) => {
            eprintln!("pulse-agent: --docker-label: {error}");
            return ExitCode::from(2);
        }
    };
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
    let relay_url = cli
        .relay_url
        .unwrap_or_else(|| format!("http://{}", config.relay.listen));
    let state_dir = cli
        .state_dir
        .unwrap_or_else(|| config.state_dir.join("agent"));
    let token = match cli.token.filter(|t| !t.trim().is_empty()) {
        Some(token) => token,
        None => {
            let path = cli
                .token_file
                .clone()
                .unwrap_or_else(|| state_dir.join("token"));
            match pulse_agent::wait_for_token_file(&path, &shutdown).await {
                Some(token) => token,
                None => {
                    telemetry.shutdown().await;
                    return ExitCode::SUCCESS;
                }
            }
        }
    };
    let mut options = pulse_agent::AgentOptions::new(relay_url, token, state_dir);
    if let Some(dir) = cli.services_dir {
        options.services_dir = dir;
    }
    if let Some(id) = cli.host_id {
        options.agent_id = id;
    }
    options.interval = cli
        .interval_ms
        .map_or(
            Duration::from_secs(cli.interval_secs),
            Duration::from_millis,
        )
        .max(Duration::from_millis(100));
    options.enable_commands = cli.enable_commands;
    options.allow_read_exec = cli.allow_read_exec;
    options.token_file = cli.token_file;
    options.docker = !cli.no_docker;
    options.docker_label = docker_scope;
    tracing::info!(relay = %options.relay_url, agent_id = %options.agent_id, services_dir = %options.services_dir.display(), commands = if options.enable_commands { "enabled" } else { "disabled" }, read_exec = if options.allow_read_exec { "allowed" } else { "disabled" }, "agent started");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_docker_label_means_every_container_and_a_bad_one_is_refused() {
        assert_eq!(docker_label(None).unwrap(), None);
        assert_eq!(docker_label(Some("")).unwrap(), None);
        assert_eq!(docker_label(Some("  ")).unwrap(), None);
        let scope = docker_label(Some("com.docker.compose.project=app")).unwrap();
        assert_eq!(
            scope.map(|s| s.to_string()).as_deref(),
            Some("com.docker.compose.project=app")
        );
        assert!(docker_label(Some("bad key=x")).is_err());
    }
}
