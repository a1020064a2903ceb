//! The processes the harness runs itself: the lab's collecting agent and, for `sim:` routes,
//! the provider simulator. Both are stopped with SIGTERM (then SIGKILL) when the run ends.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::lab::AgentWiring;

/// How long a child gets between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(8);

#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    #[error("cannot start {program}: {reason}; pass its path with {flag}")]
    Spawn {
        program: String,
        flag: &'static str,
        reason: String,
    },
    #[error("{program} did not announce its address: {reason}")]
    NoAddress { program: String, reason: String },
}

/// A binary next to the running harness (the workspace's build puts them together).
pub fn sibling_binary(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(name)))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

pub struct Supervised {
    name: String,
    child: Child,
}

impl Supervised {
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// SIGTERM, then SIGKILL after the grace period; waits for the exit.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        if tokio::time::timeout(STOP_GRACE, self.child.wait())
            .await
            .is_err()
        {
            tracing::warn!(child = %self.name, "did not stop on SIGTERM; killing it");
            let _ = self.child.kill().await;
            let _ = self.child.wait().await;
        }
    }

    /// Whether the child has exited (and how).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

/// Starts the lab's agent: reporting every second to `relay_url` under `host_id`, supervising
/// the lab's services or collecting its Docker engine, running commands only when `exec`.
#[allow(clippy::too_many_arguments)]
pub fn start_agent(
    binary: &Path,
    relay_url: &str,
    token: &str,
    host_id: &str,
    state_dir: &Path,
    wiring: &AgentWiring,
    exec: bool,
    log: &Path,
) -> Result<Supervised, ChildError> {
    use std::os::unix::fs::OpenOptionsExt;
    // The lab's logs can name private resources: owner-only, like every artifact.
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(log)
        .map_err(|e| ChildError::Spawn {
            program: binary.display().to_string(),
            flag: "--agent-binary",
            reason: format!("log {}: {e}", log.display()),
        })?;
    let err_file = log_file.try_clone().map_err(|e| ChildError::Spawn {
        program: binary.display().to_string(),
        flag: "--agent-binary",
        reason: e.to_string(),
    })?;
    let mut command = Command::new(binary);
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("PULSE_AGENT_RELAY_URL", relay_url)
        .env("PULSE_AGENT_TOKEN", token)
        .env("PULSE_AGENT_HOST_ID", host_id)
        .env("PULSE_AGENT_STATE_DIR", state_dir)
        .env("PULSE_AGENT_INTERVAL_MS", "1000")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(err_file)
        .kill_on_drop(true);
    match &wiring.services_dir {
        Some(dir) => {
            command.env("PULSE_AGENT_SERVICES_DIR", dir);
        }
        None => {
            command.env("PULSE_AGENT_SERVICES_DIR", state_dir.join("services.d"));
        }
    }
    match &wiring.docker_host {
        Some(host) => {
            command.env("DOCKER_HOST", host);
            if let Some(label) = &wiring.docker_label {
                command.env("PULSE_AGENT_DOCKER_LABEL", label);
            }
        }
        None => {
            command.env("PULSE_AGENT_NO_DOCKER", "true");
        }
    }
    if exec {
        command.env("PULSE_AGENT_ENABLE_COMMANDS", "true");
    }
    let child = command.spawn().map_err(|e| ChildError::Spawn {
        program: binary.display().to_string(),
        flag: "--agent-binary",
        reason: e.to_string(),
    })?;
    Ok(Supervised {
        name: "lab agent".to_owned(),
        child,
    })
}

/// Starts the provider simulator on a free loopback port; its `http://addr` base.
pub async fn start_simulator(binary: &Path) -> Result<(Supervised, String), ChildError> {
    let mut child = Command::new(binary)
        .args(["--listen", "127.0.0.1:0", "--answer-preflight"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ChildError::Spawn {
            program: binary.display().to_string(),
            flag: "--provider-sim-binary",
            reason: e.to_string(),
        })?;
    let stdout = child.stdout.take().ok_or_else(|| ChildError::NoAddress {
        program: binary.display().to_string(),
        reason: "no stdout".to_owned(),
    })?;
    let mut lines = BufReader::new(stdout).lines();
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(addr) = pulse_config::listening::parse(&line) {
                return Some(addr);
            }
        }
        None
    })
    .await;
    let addr = match found {
        Ok(Some(addr)) => addr,
        Ok(None) => {
            return Err(ChildError::NoAddress {
                program: binary.display().to_string(),
                reason: "it exited".to_owned(),
            });
        }
        Err(_) => {
            return Err(ChildError::NoAddress {
                program: binary.display().to_string(),
                reason: "nothing within 20 s".to_owned(),
            });
        }
    };
    // Keep draining stdout so the simulator never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((
        Supervised {
            name: "provider simulator".to_owned(),
            child,
        },
        format!("http://{addr}"),
    ))
}
