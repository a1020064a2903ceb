//! `pulsectl down`: stop the stack of a state directory by signalling its pulsectl.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::time::Instant;

use crate::pidfile;

#[derive(Debug, thiserror::Error)]
pub enum DownError {
    #[error("cannot signal pulsectl (pid {pid}): {source}")]
    Signal {
        pid: u32,
        #[source]
        source: nix::Error,
    },
    #[error(
        "pulsectl (pid {pid}) is still running after {} s; its log is {}",
        .waited.as_secs(), .log.display()
    )]
    StillRunning {
        pid: u32,
        waited: Duration,
        log: PathBuf,
    },
}

pub async fn run(state_dir: &Path, timeout: Duration) -> Result<(), DownError> {
    let path = pidfile::path_in(state_dir);
    let Some(pid) = pidfile::read(&path) else {
        println!(
            "no stack is running on state dir {} (no {})",
            state_dir.display(),
            path.display()
        );
        return Ok(());
    };
    if !pidfile::is_live_pulsectl(pid) {
        let _ = std::fs::remove_file(&path);
        println!(
            "no stack is running on state dir {} (removed a stale pid file naming pid {pid})",
            state_dir.display()
        );
        return Ok(());
    }
    let raw = i32::try_from(pid).map_err(|_| DownError::Signal {
        pid,
        source: nix::Error::ESRCH,
    })?;
    kill(Pid::from_raw(raw), Signal::SIGTERM)
        .map_err(|source| DownError::Signal { pid, source })?;
    println!(
        "stopping the stack of {} (pulsectl pid {pid})",
        state_dir.display()
    );

    let deadline = Instant::now() + timeout;
    while pidfile::is_live_pulsectl(pid) {
        if Instant::now() >= deadline {
            return Err(DownError::StillRunning {
                pid,
                waited: timeout,
                log: state_dir.join("logs").join("pulsectl.log"),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!("stack stopped");
    Ok(())
}
