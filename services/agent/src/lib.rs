//! pulse-agent: runs on each monitored host and reports to the agent relay.
//!
//! Every interval, and at once when a supervised service or a Docker container changes, the
//! agent builds a full report (host, filesystems, supervised services, containers) and queues
//! it; the connection task sends the queue to the relay over a WebSocket, reconnecting with
//! backoff. Over the same connection the relay may ask for a fresh observation, a bounded log
//! tail or inspect projection, a host file, tail or find, (only with `--allow-read-exec`) a
//! read-only diagnostic command, or (only with `--enable-commands`) run a typed command.

pub mod commands;
pub mod containers;
pub mod docker;
pub mod filesystems;
pub mod host;
pub mod host_files;
pub mod observe;
pub mod read_exec;
pub mod reads;
pub mod report;
pub mod requests;
pub mod secret_paths;
pub mod supervisor;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pulse_domain::agent_protocol::{Hello, PROTOCOL_VERSION};
use pulse_domain::backoff::Backoff;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::commands::{Commands, HostExecutor};
use crate::containers::ContainerCollector;
use crate::docker::DockerClient;
use crate::host_files::HostFiles;
use crate::observe::Observer;
use crate::read_exec::ReadExec;
use crate::reads::Reader;
use crate::report::Reporter;
use crate::requests::Requests;
use crate::supervisor::Supervisor;
use pulse_agent_session::{Backlog, ConnectionConfig};

/// Reports kept while the relay is unreachable.
pub const DEFAULT_BACKLOG: usize = 360;
/// Changes closer together than this share one report.
const CHANGE_DEBOUNCE: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// Base URL of the relay (`http://127.0.0.1:7656`) or its full WebSocket URL.
    pub relay_url: String,
    /// A token with scope `agent:report`.
    pub token: String,
    pub agent_id: String,
    pub hostname: String,
    pub state_dir: PathBuf,
    /// Supervised-service definitions (`*.toml`).
    pub services_dir: PathBuf,
    pub interval: Duration,
    pub backlog: usize,
    pub proc_root: PathBuf,
    pub mounts_path: PathBuf,
    /// Run typed commands from the relay (`--enable-commands`); off by default.
    pub enable_commands: bool,
    /// Run read-only diagnostic commands for `pulse_read` exec (`--allow-read-exec`); off by
    /// default.
    pub allow_read_exec: bool,
    /// The file the token was read from, if any: never served by a host read (neither is
    /// `<state_dir>/token`).
    pub token_file: Option<PathBuf>,
    /// Collect Docker containers (from `DOCKER_HOST` or the default socket).
    pub docker: bool,
    /// Only Docker containers carrying this label are watched and acted on; `None`: all.
    pub docker_label: Option<docker::LabelScope>,
}

impl AgentOptions {
    /// Defaults for everything but the relay, token and directories.
    pub fn new(relay_url: String, token: String, state_dir: PathBuf) -> Self {
        let services_dir = state_dir.join("services.d");
        Self {
            relay_url,
            token,
            agent_id: host::default_agent_id(),
            hostname: host::hostname(),
            state_dir,
            services_dir,
            interval: Duration::from_secs(10),
            backlog: DEFAULT_BACKLOG,
            proc_root: PathBuf::from("/proc"),
            mounts_path: PathBuf::from("/proc/self/mounts"),
            enable_commands: false,
            allow_read_exec: false,
            token_file: None,
            docker: true,
            docker_label: None,
        }
    }
}

/// Reads the token from `path`, waiting (with backoff up to 5 s) until the file exists and is
/// not empty. `None` when `shutdown` comes first.
pub async fn wait_for_token_file(
    path: &std::path::Path,
    shutdown: &CancellationToken,
) -> Option<String> {
    let mut pause = Backoff::new(Duration::from_millis(250), Duration::from_secs(5));
    let mut logged = false;
    loop {
        match tokio::fs::read_to_string(path).await {
            Ok(text) if !text.trim().is_empty() => return Some(text.trim().to_owned()),
            _ if !logged => {
                tracing::info!(path = %path.display(), "waiting for the agent token file");
                logged = true;
            }
            _ => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep(pause.next_delay()) => {}
        }
    }
}

pub async fn run(options: AgentOptions, shutdown: CancellationToken) -> anyhow::Result<()> {
    anyhow::ensure!(
        pulse_domain::resource::valid_agent_id(&options.agent_id),
        "host id {:?} must be 1 to 128 of A-Z a-z 0-9 . _ -",
        options.agent_id
    );
    std::fs::create_dir_all(&options.services_dir).map_err(|e| {
        anyhow::anyhow!(
            "cannot create services dir {}: {e}",
            options.services_dir.display()
        )
    })?;
    let changed = Arc::new(Notify::new());
    let supervisor = Supervisor::new(
        options.services_dir.clone(),
        Some(options.state_dir.join("logs")),
        changed.clone(),
    )?;
    let view = supervisor.view();
    let handle = supervisor.handle();
    let stop_services = CancellationToken::new();
    let rescan = options.interval.min(Duration::from_secs(2));
    let supervisor_task = tokio::spawn(supervisor.run(rescan, stop_services.clone()));

    let docker = if options.docker {
        match docker::DockerEndpoint::from_env() {
            Ok(endpoint) => {
                let config = docker::DockerClientConfig {
                    label_scope: options.docker_label.clone(),
                    ..Default::default()
                };
                if let Some(scope) = &config.label_scope {
                    tracing::info!(label = %scope, "Docker collector: only containers with this label");
                }
                Some(DockerClient::new(endpoint, config))
            }
            Err(error) => {
                tracing::warn!(%error, "Docker collector off: DOCKER_HOST is not usable");
                None
            }
        }
    } else {
        tracing::info!("Docker collector off: disabled by configuration");
        None
    };
    let events_task = docker.clone().map(|client| {
        tokio::spawn(containers::watch_events(
            client,
            changed.clone(),
            shutdown.clone(),
        ))
    });

    let executor = HostExecutor {
        supervisor: handle,
        docker: docker.clone(),
    };
    let commands = if options.enable_commands {
        Commands::enabled(&options.state_dir, executor)?
    } else {
        Commands::disabled(executor)
    };
    let mut own_secrets = vec![options.state_dir.join("token")];
    own_secrets.extend(options.token_file.clone());
    // Compared with canonical paths too: resolve what already exists.
    for path in own_secrets.clone() {
        if let Ok(canonical) = std::fs::canonicalize(&path) {
            own_secrets.push(canonical);
        }
    }
    let requests = Arc::new(Requests {
        commands,
        observer: Observer {
            agent_id: options.agent_id.clone(),
            hostname: options.hostname.clone(),
            proc_root: options.proc_root.clone(),
            mounts_path: options.mounts_path.clone(),
            services: view.clone(),
            docker: docker.clone(),
        },
        reader: Reader {
            log_dir: options.state_dir.join("logs"),
            services: view.clone(),
            docker: docker.clone(),
            files: HostFiles {
                own_secrets: own_secrets.clone(),
            },
            exec: ReadExec {
                allowed: options.allow_read_exec,
                own_secrets,
            },
        },
    });

    let backlog = Arc::new(Backlog::new(options.backlog));
    let connection = ConnectionConfig {
        relay_url: options.relay_url.clone(),
        token: options.token.clone(),
        hello: Hello {
            protocol: PROTOCOL_VERSION,
            agent_id: options.agent_id.clone(),
            hostname: options.hostname.clone(),
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            report_interval_ms: u64::try_from(options.interval.as_millis()).unwrap_or(u64::MAX),
        },
    };
    let connection_task = tokio::spawn(pulse_agent_session::run(
        connection,
        backlog.clone(),
        Some(requests),
        shutdown.clone(),
    ));

    let mut reporter = Reporter::new(
        options.agent_id.clone(),
        options.hostname.clone(),
        options.proc_root.clone(),
        options.mounts_path.clone(),
        view,
    );
    if let Some(client) = docker {
        reporter = reporter.with_containers(ContainerCollector::new(client));
    }
    loop {
        let report = reporter.build().await;
        if let Some(dropped) = backlog.push(report) {
            tracing::debug!(seq = dropped.seq, "backlog full; oldest report dropped");
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(options.interval) => {}
            _ = changed.notified() => tokio::time::sleep(CHANGE_DEBOUNCE).await,
        }
    }
    stop_services.cancel();
    let _ = supervisor_task.await;
    if let Some(task) = events_task {
        let _ = task.await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), connection_task).await;
    Ok(())
}
