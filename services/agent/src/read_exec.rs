//! `pulse_read` exec on the host: read-only diagnostic commands, off unless the agent was started
//! with `--allow-read-exec`.
//!
//! The flow of one request, each step failing closed:
//! 1. refused with `read_exec_disabled` when the flag is off;
//! 2. bounds checked (timeout, bytes);
//! 3. the stages are classified again here (`exec_intent::check_stages`): the agent never trusts
//!    the plan the relay sent;
//! 4. every argument that names a path is held to the secret-path rule again, as written (the
//!    classifier already did) and resolved on this host;
//! 5. the stages run directly (no shell), stage i's stdout piped to stage i+1's stdin, stdin of
//!    the first null, in `/`, with only `PATH` and `LANG=C` in the environment, each stage in its
//!    own process group;
//! 6. the pipeline is killed (every group, `SIGKILL`) at the timeout or once stdout passes the
//!    byte bound;
//! 7. stdout and stderr are redacted before they leave the host.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use pulse_capabilities::exec_intent;
use pulse_capabilities::read_redaction::redact;
use pulse_domain::agent_protocol::{MAX_EXEC_TIMEOUT_MS, MAX_READ_BYTES, ReadOutput};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};

use crate::reads::ReadRefused;
use pulse_capabilities::secret_paths::{self, secret_reason};
use pulse_domain::agent_protocol::ReadRefusalCode;

/// The only search path a command gets.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// How long to wait for the stderr readers once the pipeline is gone.
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// The refusal every exec gets from an agent without `--allow-read-exec`.
pub const DISABLED_REASON: &str = "read-only exec is disabled on this agent: start it with --allow-read-exec to run diagnostic commands";

/// Runs exec reads, or refuses them all (the default).
#[derive(Debug, Clone, Default)]
pub struct ReadExec {
    pub allowed: bool,
    /// Paths never read (the agent's token file).
    pub own_secrets: Vec<PathBuf>,
}

impl ReadExec {
    pub async fn run(
        &self,
        stages: &[Vec<String>],
        timeout_ms: u32,
        max_bytes: u32,
    ) -> Result<ReadOutput, ReadRefused> {
        if !self.allowed {
            return Err(ReadRefused::coded(
                ReadRefusalCode::ExecDisabled,
                DISABLED_REASON,
            ));
        }
        if timeout_ms == 0 || timeout_ms > MAX_EXEC_TIMEOUT_MS {
            return Err(ReadRefused::coded(
                ReadRefusalCode::InvalidRead,
                format!("timeout_ms must be 1 to {MAX_EXEC_TIMEOUT_MS}"),
            ));
        }
        if max_bytes == 0 || max_bytes > MAX_READ_BYTES {
            return Err(ReadRefused::coded(
                ReadRefusalCode::InvalidRead,
                format!("max_bytes must be 1 to {MAX_READ_BYTES}"),
            ));
        }
        let plan = exec_intent::check_stages(stages).map_err(|refusal| ReadRefused {
            code: Some(refusal.code.as_str().to_owned()),
            reason: refusal.reason,
        })?;
        self.check_arguments(&plan.stages).await?;
        run_pipeline(
            &plan.stages,
            Duration::from_millis(u64::from(timeout_ms)),
            max_bytes as usize,
        )
        .await
    }

    /// Refuses a command whose arguments name a secret path (the shared rule,
    /// `secret_paths::argument_secret`, with the agent's own token added), then the same paths
    /// resolved on this host (symlinks and `..`), which only the agent can do.
    async fn check_arguments(&self, stages: &[Vec<String>]) -> Result<(), ReadRefused> {
        for word in stages.iter().flat_map(|argv| argv.iter().skip(1)) {
            if let Some(reason) = secret_paths::argument_secret(word, &self.own_secrets) {
                return Err(ReadRefused::coded(ReadRefusalCode::SecretPath, reason));
            }
            for path in secret_paths::argument_paths(word) {
                let Ok(canonical) = tokio::fs::canonicalize(&path).await else {
                    continue;
                };
                if let Some(reason) = secret_reason(&canonical, &self.own_secrets) {
                    return Err(ReadRefused::coded(
                        ReadRefusalCode::SecretPath,
                        format!(
                            "{word} resolves to {} and is refused: {reason}",
                            canonical.display()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Reads `from` into `into` until the end or `max` bytes; whether there was more.
async fn read_bounded(
    from: &mut (impl AsyncRead + Unpin),
    into: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<bool> {
    let mut chunk = [0u8; 8192];
    loop {
        let n = from.read(&mut chunk).await?;
        if n == 0 {
            return Ok(false);
        }
        let room = max - into.len();
        if n > room {
            into.extend_from_slice(&chunk[..room]);
            return Ok(true);
        }
        into.extend_from_slice(&chunk[..n]);
    }
}

/// Reads all of `from`, keeping the first `max` bytes (the rest is drained so the writer never
/// blocks on a full pipe).
async fn read_keeping(mut from: impl AsyncRead + Unpin, max: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut chunk = [0u8; 8192];
    while let Ok(n) = from.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        let room = max.saturating_sub(kept.len());
        kept.extend_from_slice(&chunk[..n.min(room)]);
    }
    kept
}

/// Kills every stage's process group, then reaps the stages.
async fn kill_all(children: &mut [Child]) {
    for child in children.iter_mut() {
        if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
            // Each stage leads its own group: this also ends what the stage started.
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = child.start_kill();
    }
    for child in children.iter_mut() {
        let _ = child.wait().await;
    }
}

fn text(bytes: &[u8]) -> String {
    redact(&String::from_utf8_lossy(bytes))
}

/// Runs admitted `stages` as a pipeline within `timeout`, keeping `max_bytes` of stdout (and
/// as much stderr, shared by the stages).
pub async fn run_pipeline(
    stages: &[Vec<String>],
    timeout: Duration,
    max_bytes: usize,
) -> Result<ReadOutput, ReadRefused> {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut children: Vec<Child> = Vec::with_capacity(stages.len());
    let mut stderr_readers = Vec::with_capacity(stages.len());
    let mut previous: Option<Stdio> = None;
    let mut last_stdout = None;
    let stderr_share = (max_bytes / stages.len().max(1)).max(1);
    for (i, argv) in stages.iter().enumerate() {
        let Some((program, args)) = argv.split_first() else {
            kill_all(&mut children).await;
            return Err(ReadRefused::coded(
                ReadRefusalCode::InvalidRead,
                "an empty pipeline stage",
            ));
        };
        let mut command = Command::new(program);
        command
            .args(args)
            .env_clear()
            .env("PATH", PATH)
            .env("LANG", "C")
            .current_dir("/")
            .stdin(previous.take().unwrap_or_else(Stdio::null))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(error) => {
                kill_all(&mut children).await;
                return Err(ReadRefused::coded(
                    ReadRefusalCode::ReadFailed,
                    format!("cannot run {program}: {error}"),
                ));
            }
        };
        if let Some(stderr) = child.stderr.take() {
            stderr_readers.push(tokio::spawn(read_keeping(stderr, stderr_share)));
        }
        let stdout = child.stdout.take();
        children.push(child);
        match stdout {
            Some(stdout) if i + 1 < stages.len() => match stdout.try_into() {
                Ok(stdio) => previous = Some(stdio),
                Err(error) => {
                    kill_all(&mut children).await;
                    return Err(ReadRefused::coded(
                        ReadRefusalCode::ReadFailed,
                        format!("cannot connect the pipeline: {error}"),
                    ));
                }
            },
            Some(stdout) => last_stdout = Some(stdout),
            None => {}
        }
    }

    let mut stdout = Vec::new();
    let mut truncated = false;
    let mut timed_out = false;
    if let Some(mut pipe) = last_stdout {
        match tokio::time::timeout_at(deadline, read_bounded(&mut pipe, &mut stdout, max_bytes))
            .await
        {
            Ok(Ok(more)) => truncated = more,
            // A read error ends the output; the stages are still waited for below.
            Ok(Err(_)) => {}
            Err(_) => timed_out = true,
        }
    }
    let mut exit_status = None;
    if truncated || timed_out {
        kill_all(&mut children).await;
    } else {
        let waited = tokio::time::timeout_at(deadline, async {
            let mut last = None;
            for child in children.iter_mut() {
                last = child.wait().await.ok();
            }
            last
        })
        .await;
        match waited {
            Ok(status) => exit_status = status.and_then(|s| s.code()),
            Err(_) => {
                timed_out = true;
                kill_all(&mut children).await;
            }
        }
    }
    let mut stderr = Vec::new();
    for mut reader in stderr_readers {
        // A descendant that left its group could hold the pipe open: do not wait for it.
        match tokio::time::timeout(DRAIN_GRACE, &mut reader).await {
            Ok(Ok(bytes)) => stderr.extend_from_slice(&bytes),
            Ok(Err(_)) => {}
            Err(_) => reader.abort(),
        }
    }
    Ok(ReadOutput::Exec {
        exit_status,
        stdout: text(&stdout),
        stderr: text(&stderr),
        truncated,
        timed_out,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}
