//! `pulsectl up --detach`: the same pulsectl, re-executed without `--detach` in a new session
//! with its output in `<state-dir>/logs/pulsectl.log`; this process returns once the stack is
//! healthy.

use std::ffi::OsString;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::time::Instant;

use crate::child::{ExecHooks, open_log, set_exec_hooks, tail};
use crate::cli::UpArgs;
use crate::health::HealthProbe;
use crate::pidfile::{self, PidFileError};
use crate::signals::StopSignals;
use crate::stack_config::StackConfig;
use crate::up::{UpError, listening_line, locate_binaries, print_ready};

/// Extra time over the ready timeout for the background pulsectl's own preflight and shutdown.
const SLACK: Duration = Duration::from_secs(60);

/// pulsectl's own arguments without `--detach`.
pub fn daemon_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    args.into_iter().filter(|arg| arg != "--detach").collect()
}

pub async fn run(config: &StackConfig, args: &UpArgs) -> Result<(), UpError> {
    if let Some(pid) = pidfile::running(&config.state_dir) {
        return Err(PidFileError::AlreadyRunning {
            pid,
            state_dir: config.state_dir.clone(),
        }
        .into());
    }
    // This executable's path, read before the build below: that build may write a new pulsectl
    // over it (another feature set than `cargo run -p pulsectl` built), after which the running
    // process's own path reads as deleted. The path then names the new build, which is the one
    // to run in the background.
    let exe = std::env::current_exe()
        .map_err(|err| UpError::Detach(format!("cannot locate pulsectl's executable: {err}")))?;
    // Build (under cargo run) and check the binaries here, where the output reaches the user.
    locate_binaries(args).await?;

    let log_path = config.logs_dir().join("pulsectl.log");
    let log = open_log(&log_path).map_err(|source| UpError::StateDir {
        path: log_path.clone(),
        source,
    })?;
    let log_from = log.metadata().map(|m| m.len()).unwrap_or(0);
    let mut command = std::process::Command::new(exe);
    command
        .args(daemon_args(std::env::args_os().skip(1)))
        .stdin(Stdio::null())
        .stdout(
            log.try_clone()
                .map_err(|err| UpError::Detach(format!("{}: {err}", log_path.display())))?,
        )
        .stderr(log)
        // Built above already: the background pulsectl must not run cargo again.
        .env_remove("CARGO_MANIFEST_DIR");
    set_exec_hooks(
        &mut command,
        ExecHooks {
            die_with_parent: false,
            new_session: true,
        },
    );
    let mut signals = StopSignals::install().map_err(UpError::Signals)?;
    let mut daemon = command.spawn().map_err(|err| {
        UpError::Detach(format!("cannot start pulsectl in the background: {err}"))
    })?;
    let daemon_pid = daemon.id();
    println!(
        "pulsectl runs in the background (pid {daemon_pid}); log: {}",
        log_path.display()
    );

    // A gateway on port 0 gets its port when it binds; the daemon logs it.
    let mut config = config.clone();
    let mut probe = None;
    let pid_path = pidfile::path_in(&config.state_dir);
    let deadline = Instant::now() + args.ready_timeout + SLACK;
    loop {
        if let Ok(Some(status)) = daemon.try_wait() {
            return Err(UpError::Detach(format!(
                "the background pulsectl exited ({status}) before the stack was ready; last \
                 lines of {}:\n{}",
                log_path.display(),
                tail(&log_path, 40).join("\n")
            )));
        }
        // Health counts only once the background pulsectl owns the state directory, so a stack
        // already answering on the same port is not mistaken for this one.
        if probe.is_none() {
            if config.gateway_listen.port() == 0 {
                if let Some(addr) = learned_gateway(&log_path, log_from) {
                    config.gateway_listen = addr;
                }
            }
            if config.gateway_listen.port() != 0 {
                probe = Some(HealthProbe::new(&config.gateway_url()).map_err(UpError::Http)?);
            }
        }
        if let Some(probe) = &probe
            && pidfile::read(&pid_path) == Some(daemon_pid)
            && probe.observe().await.all_ready_with(args.replicas)
        {
            print_ready(&config, true);
            return Ok(());
        }
        if Instant::now() >= deadline {
            stop_daemon(&mut daemon).await;
            return Err(UpError::Detach(format!(
                "the stack was not ready in time; stopped it. Last lines of {}:\n{}",
                log_path.display(),
                tail(&log_path, 40).join("\n")
            )));
        }
        tokio::select! {
            signal = signals.recv() => {
                println!("{signal} received; stopping the background stack");
                stop_daemon(&mut daemon).await;
                return Ok(());
            }
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

/// The gateway address the daemon logged (after byte `from` of its log), once it has.
fn learned_gateway(log_path: &std::path::Path, from: u64) -> Option<std::net::SocketAddr> {
    let text = std::fs::read(log_path).ok()?;
    let start = usize::try_from(from).ok()?.min(text.len());
    let prefix = listening_line("gateway");
    String::from_utf8_lossy(&text[start..])
        .lines()
        .find_map(|line| line.strip_prefix(&prefix)?.trim().parse().ok())
}

async fn stop_daemon(daemon: &mut std::process::Child) {
    if let Ok(pid) = i32::try_from(daemon.id()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    // The background pulsectl gives each service up to 10 s.
    let deadline = Instant::now() + Duration::from_secs(90);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = daemon.try_wait() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = daemon.kill();
    let _ = daemon.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_background_copy_runs_the_same_command_without_detach() {
        let args: Vec<OsString> = ["--state-dir", "/s", "up", "--detach", "--spawn-deps"]
            .into_iter()
            .map(OsString::from)
            .collect();
        assert_eq!(
            daemon_args(args),
            ["--state-dir", "/s", "up", "--spawn-deps"]
                .into_iter()
                .map(OsString::from)
                .collect::<Vec<_>>()
        );
    }
}
