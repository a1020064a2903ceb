//! The command channel: typed capabilities only, each action id executed at most once.
//!
//! Every command is checked in this order:
//! 1. commands disabled (no `--enable-commands`): rejected, nothing recorded;
//! 2. the idempotency log: an action id seen before returns its recorded receipt (marked
//!    `replayed`) and never runs again; an action id accepted but never finished (the agent
//!    stopped while running it) is refused and never re-executed;
//! 3. the capability name must be one this build knows, the target must be well formed;
//! 4. the lease must not have expired by the agent's clock.
//!
//! Only then is the action appended to the log as `accepted` and the file fsync'd, and only
//! after that does it run. Its receipt is appended as `finished` (and fsync'd) before it is
//! returned. Commands run one at a time.
//!
//! The log remembers an action until [`RETAIN_AFTER_LEASE`] after its lease expired; by then a
//! redelivery of it is refused for its expired lease, so forgetting it never lets it run twice.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use pulse_domain::agent_protocol::{
    Capability, Command, MAX_ID_BYTES, MAX_OUTPUT_BYTES, MAX_REASON_BYTES, Receipt, ReceiptStatus,
    bounded_text,
};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::docker::{ContainerAction, DockerClient, DockerError};
use crate::supervisor::{ServiceAction, SupervisorHandle};

/// The reason every command gets on an agent started without `--enable-commands`.
pub const DISABLED_REASON: &str =
    "commands are disabled on this agent (start it with --enable-commands)";
/// The idempotency log's file name in the state directory.
pub const LOG_FILE: &str = "command-log.jsonl";

/// How long after its lease expired an action is remembered. Past it, a redelivered command is
/// refused for its expired lease anyway; the margin covers an agent clock set back.
pub const RETAIN_AFTER_LEASE: chrono::Duration = chrono::Duration::days(7);
/// How long an action whose lease expiry the log does not know is remembered.
pub const RETAIN_WITHOUT_LEASE: chrono::Duration = chrono::Duration::days(30);
/// Appends between two looks for actions to forget while the agent runs.
const COMPACT_CHECK_EVERY: usize = 1024;

/// One line of the idempotency log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
enum LogEntry {
    /// Written and fsync'd before the action runs.
    Accepted {
        action_id: String,
        lease_id: String,
        capability: String,
        target: String,
        at: DateTime<Utc>,
        /// Absent in lines written before the log kept it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lease_expires_at: Option<DateTime<Utc>>,
    },
    /// Written and fsync'd once the action ran.
    Finished { action_id: String, receipt: Receipt },
}

/// What the log knows about an action id.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// Accepted, never finished: the agent stopped while running it.
    Unfinished {
        at: DateTime<Utc>,
    },
    Finished(Receipt),
}

/// One remembered action: its lines, what they say, and when it may be forgotten.
#[derive(Debug, Clone)]
struct Kept {
    lines: Vec<LogEntry>,
    recorded: Recorded,
    forget_after: DateTime<Utc>,
}

impl Kept {
    fn take(&mut self, entry: LogEntry) {
        match &entry {
            LogEntry::Accepted {
                at,
                lease_expires_at,
                ..
            } => {
                self.recorded = Recorded::Unfinished { at: *at };
                self.forget_after = forget_after(*at, *lease_expires_at);
            }
            LogEntry::Finished { receipt, .. } => {
                self.recorded = Recorded::Finished(receipt.clone());
            }
        }
        self.lines.push(entry);
    }

    fn new(entry: LogEntry) -> Self {
        let (recorded, forget_after) = match &entry {
            LogEntry::Accepted {
                at,
                lease_expires_at,
                ..
            } => (
                Recorded::Unfinished { at: *at },
                forget_after(*at, *lease_expires_at),
            ),
            LogEntry::Finished { receipt, .. } => (
                Recorded::Finished(receipt.clone()),
                forget_after(receipt.at, None),
            ),
        };
        Self {
            lines: vec![entry],
            recorded,
            forget_after,
        }
    }
}

fn forget_after(at: DateTime<Utc>, lease_expires_at: Option<DateTime<Utc>>) -> DateTime<Utc> {
    match lease_expires_at {
        Some(expiry) => expiry.max(at) + RETAIN_AFTER_LEASE,
        None => at + RETAIN_WITHOUT_LEASE,
    }
}

fn action_id(entry: &LogEntry) -> &str {
    match entry {
        LogEntry::Accepted { action_id, .. } | LogEntry::Finished { action_id, .. } => action_id,
    }
}

/// Append-only JSON lines, one file, replayed into memory at open. Actions long past their
/// lease are forgotten and the file rewritten (at open, and every [`COMPACT_CHECK_EVERY`]
/// appends when there is something to forget), so the log does not grow without bound.
pub struct IdempotencyLog {
    path: PathBuf,
    file: std::fs::File,
    entries: HashMap<String, Kept>,
    /// Lines in the file now.
    lines: usize,
    appends_since_check: usize,
}

impl IdempotencyLog {
    /// Opens (creating) `<dir>/command-log.jsonl` and reads what it holds. A torn last line
    /// (the agent died mid-write) is skipped with a warning.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        Self::open_at(dir, Utc::now())
    }

    /// [`IdempotencyLog::open`] with the agent's clock reading `now` (for forgetting).
    pub fn open_at(dir: &Path, now: DateTime<Utc>) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
        let path = dir.join(LOG_FILE);
        let mut entries: HashMap<String, Kept> = HashMap::new();
        let existing = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(error) => anyhow::bail!("cannot read {}: {error}", path.display()),
        };
        let mut lines = 0;
        for (number, line) in existing.split(|b| *b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            lines += 1;
            match serde_json::from_slice::<LogEntry>(line) {
                Ok(entry) => {
                    let id = action_id(&entry).to_owned();
                    match entries.get_mut(&id) {
                        Some(kept) => kept.take(entry),
                        None => {
                            entries.insert(id, Kept::new(entry));
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(path = %path.display(), line = number + 1, %error, "unreadable command log line skipped");
                }
            }
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
        // A torn last line (the agent died mid-write) is closed so the next entry starts on a
        // line of its own.
        if existing.last().is_some_and(|b| *b != b'\n') {
            file.write_all(b"\n")?;
            file.sync_data()?;
        }
        let mut log = Self {
            path,
            file,
            entries,
            lines,
            appends_since_check: 0,
        };
        if log.has_forgettable(now) || log.lines > log.live_lines() {
            log.compact(now)
                .map_err(|e| anyhow::anyhow!("cannot rewrite {}: {e}", log.path.display()))?;
        }
        Ok(log)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn get(&self, action_id: &str) -> Option<&Recorded> {
        self.entries.get(action_id).map(|kept| &kept.recorded)
    }

    /// Actions the log remembers.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn live_lines(&self) -> usize {
        self.entries.values().map(|kept| kept.lines.len()).sum()
    }

    fn has_forgettable(&self, now: DateTime<Utc>) -> bool {
        self.entries.values().any(|kept| kept.forget_after < now)
    }

    /// Forgets the actions whose time is past and rewrites the file with what is left: a new
    /// file is written and fsync'd beside the log, then renamed over it, so a crash leaves either
    /// the old log or the new one whole.
    pub fn compact(&mut self, now: DateTime<Utc>) -> std::io::Result<()> {
        self.entries.retain(|_, kept| kept.forget_after >= now);
        let mut kept: Vec<&Kept> = self.entries.values().collect();
        kept.sort_by_key(|k| k.lines.first().map(entry_time));
        let mut body = Vec::new();
        let mut lines = 0;
        for entry in kept.iter().flat_map(|k| k.lines.iter()) {
            serde_json::to_writer(&mut body, entry).map_err(std::io::Error::other)?;
            body.push(b'\n');
            lines += 1;
        }
        let staging = self.path.with_extension("jsonl.tmp");
        {
            let mut out = std::fs::File::create(&staging)?;
            out.write_all(&body)?;
            out.sync_all()?;
        }
        std::fs::rename(&staging, &self.path)?;
        if let Some(dir) = self.path.parent() {
            // The rename is durable once the directory is.
            std::fs::File::open(dir)?.sync_all()?;
        }
        self.file = std::fs::OpenOptions::new().append(true).open(&self.path)?;
        self.lines = lines;
        Ok(())
    }

    fn append(&mut self, entry: LogEntry) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(&entry).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.file.sync_data()?;
        self.lines += 1;
        let id = action_id(&entry).to_owned();
        match self.entries.get_mut(&id) {
            Some(kept) => kept.take(entry),
            None => {
                self.entries.insert(id, Kept::new(entry));
            }
        }
        self.appends_since_check += 1;
        if self.appends_since_check >= COMPACT_CHECK_EVERY {
            self.appends_since_check = 0;
            let now = Utc::now();
            if self.has_forgettable(now) {
                // The entry is durable already; a failed rewrite only leaves the log longer.
                if let Err(error) = self.compact(now) {
                    tracing::warn!(path = %self.path.display(), %error, "command log not compacted");
                }
            }
        }
        Ok(())
    }

    /// Records that `command` is about to run; durable when this returns.
    pub fn accept(&mut self, command: &Command, at: DateTime<Utc>) -> std::io::Result<()> {
        self.append(LogEntry::Accepted {
            action_id: command.action_id.clone(),
            lease_id: command.lease_id.clone(),
            capability: command.capability.clone(),
            target: command.target.clone(),
            at,
            lease_expires_at: Some(command.lease_expires_at),
        })
    }

    /// Records the receipt of a finished action; durable when this returns.
    pub fn finish(&mut self, receipt: &Receipt) -> std::io::Result<()> {
        self.append(LogEntry::Finished {
            action_id: receipt.action_id.clone(),
            receipt: receipt.clone(),
        })
    }
}

fn entry_time(entry: &LogEntry) -> DateTime<Utc> {
    match entry {
        LogEntry::Accepted { at, .. } => *at,
        LogEntry::Finished { receipt, .. } => receipt.at,
    }
}

/// The result of running one capability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Execution {
    pub succeeded: bool,
    pub output: String,
    pub exit_status: i32,
}

/// Runs capabilities. A trait so the ordering rules can be tested without processes.
pub trait Executor: Send + Sync {
    fn execute(
        &self,
        capability: Capability,
        target: &str,
    ) -> impl std::future::Future<Output = Execution> + Send;
}

/// The real executor: the supervisor for `service.*`, the Docker engine for
/// `docker.container.*`.
pub struct HostExecutor {
    pub supervisor: SupervisorHandle,
    pub docker: Option<DockerClient>,
}

impl Executor for HostExecutor {
    async fn execute(&self, capability: Capability, target: &str) -> Execution {
        let service = |action| async move {
            match self.supervisor.control(target, action).await {
                Ok(output) => Execution {
                    succeeded: true,
                    output,
                    exit_status: 0,
                },
                Err(reason) => Execution {
                    succeeded: false,
                    output: reason,
                    exit_status: 1,
                },
            }
        };
        let container = |action: ContainerAction| async move {
            let Some(docker) = &self.docker else {
                return Execution {
                    succeeded: false,
                    output: "no Docker engine is configured on this agent".to_owned(),
                    exit_status: 1,
                };
            };
            match docker.container_action(target, action).await {
                Ok(true) => Execution {
                    succeeded: true,
                    output: format!("container {target}: {} done", action.as_str()),
                    exit_status: 0,
                },
                Ok(false) => Execution {
                    succeeded: true,
                    output: format!(
                        "container {target}: already {}",
                        match action {
                            ContainerAction::Stop => "stopped",
                            _ => "running",
                        }
                    ),
                    exit_status: 0,
                },
                Err(error) => Execution {
                    succeeded: false,
                    exit_status: match &error {
                        DockerError::Api { status, .. } => i32::from(*status),
                        DockerError::NotFound { .. } => 404,
                        _ => 1,
                    },
                    output: error.to_string(),
                },
            }
        };
        match capability {
            Capability::ServiceStart => service(ServiceAction::Start).await,
            Capability::ServiceStop => service(ServiceAction::Stop).await,
            Capability::ServiceRestart => service(ServiceAction::Restart).await,
            Capability::ContainerStart => container(ContainerAction::Start).await,
            Capability::ContainerStop => container(ContainerAction::Stop).await,
            Capability::ContainerRestart => container(ContainerAction::Restart).await,
            // Refused before the log (see `handle_at`): a connector runs these.
            Capability::GuestStart
            | Capability::GuestShutdown
            | Capability::GuestReboot
            | Capability::GuestStop => Execution {
                succeeded: false,
                output: format!("{capability} is run by the Proxmox VE connector"),
                exit_status: 1,
            },
        }
    }
}

/// Reads the wall time a receipt carries.
type WallClock = Box<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The command channel of one agent.
pub struct Commands<E> {
    enabled: bool,
    /// `None` when commands are disabled (the log is never opened then).
    log: Option<Mutex<IdempotencyLog>>,
    executor: E,
    /// [`Utc::now`]; a test on paused time gives one that moves with tokio's clock.
    clock: WallClock,
}

fn receipt(
    command: &Command,
    status: ReceiptStatus,
    reason: Option<String>,
    at: DateTime<Utc>,
) -> Receipt {
    Receipt::of(command, status, reason, at)
}

fn valid_target(target: &str) -> bool {
    !target.is_empty()
        && target.len() <= 256
        && target
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

impl<E: Executor> Commands<E> {
    /// Commands off: every command is rejected with [`DISABLED_REASON`].
    pub fn disabled(executor: E) -> Self {
        Self {
            enabled: false,
            log: None,
            executor,
            clock: Box::new(Utc::now),
        }
    }

    /// Commands on, with the idempotency log in `state_dir`.
    pub fn enabled(state_dir: &Path, executor: E) -> anyhow::Result<Self> {
        let log = IdempotencyLog::open(state_dir)?;
        tracing::info!(log = %log.path().display(), "command channel enabled");
        Ok(Self {
            enabled: true,
            log: Some(Mutex::new(log)),
            executor,
            clock: Box::new(Utc::now),
        })
    }

    /// The same channel reading the wall time from `clock`.
    #[cfg(test)]
    fn with_clock(self, clock: impl Fn() -> DateTime<Utc> + Send + Sync + 'static) -> Self {
        Self {
            clock: Box::new(clock),
            ..self
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    fn rejected(&self, command: &Command, reason: impl Into<String>) -> Receipt {
        receipt(
            command,
            ReceiptStatus::Rejected,
            Some(reason.into()),
            (self.clock)(),
        )
    }

    /// Handles one command and returns its receipt. Never panics on bad input.
    pub async fn handle(&self, command: &Command) -> Receipt {
        self.handle_at(command, (self.clock)()).await
    }

    /// [`Commands::handle`] with the agent's clock reading `now` (for lease checks).
    pub async fn handle_at(&self, command: &Command, now: DateTime<Utc>) -> Receipt {
        let (true, Some(log)) = (self.enabled, &self.log) else {
            return self.rejected(command, DISABLED_REASON);
        };
        if command.action_id.is_empty() || command.action_id.len() > MAX_ID_BYTES {
            return self.rejected(
                command,
                format!("action_id must be 1 to {MAX_ID_BYTES} bytes"),
            );
        }
        // One command at a time: the log check, the run and the record are one step.
        let mut log = log.lock().await;
        match log.get(&command.action_id) {
            Some(Recorded::Finished(recorded)) => {
                tracing::info!(action_id = %command.action_id, "repeated action id; returning the recorded receipt");
                return Receipt {
                    request_id: command.request_id.clone(),
                    replayed: true,
                    ..recorded.clone()
                };
            }
            Some(Recorded::Unfinished { at }) => {
                return self.rejected(
                    command,
                    format!(
                        "action {} was accepted at {} but never completed (the agent stopped while running it); it is not executed again",
                        command.action_id,
                        at.to_rfc3339()
                    ),
                );
            }
            None => {}
        }
        let Some(capability) = Capability::parse(&command.capability) else {
            let known: Vec<&str> = Capability::ALL.iter().map(|c| c.as_str()).collect();
            return self.rejected(
                command,
                format!(
                    "unknown capability {:?}; this agent supports {}",
                    bounded_text(&command.capability, 64).0,
                    known.join(", ")
                ),
            );
        };
        if capability.is_guest_power() {
            return self.rejected(
                command,
                format!(
                    "{capability} acts on a Proxmox VE guest and is run by the connector of its \
                     cluster, not by a host agent"
                ),
            );
        }
        if !valid_target(&command.target) {
            return self.rejected(
                command,
                "target must be 1 to 256 of A-Z a-z 0-9 . _ -".to_owned(),
            );
        }
        if command.lease_expires_at <= now {
            return self.rejected(
                command,
                format!(
                    "lease {} expired at {} (agent clock {})",
                    bounded_text(&command.lease_id, MAX_ID_BYTES).0,
                    command.lease_expires_at.to_rfc3339(),
                    now.to_rfc3339()
                ),
            );
        }
        // Read after the wait for the lock, so it is when this command starts, not when it
        // arrived behind another one; the log and the receipt carry the same time.
        let accepted_at = (self.clock)();
        if let Err(error) = log.accept(command, accepted_at) {
            tracing::error!(%error, "command log not writable; command not run");
            return self.rejected(
                command,
                format!("the agent cannot record the command in its log ({error}); not run"),
            );
        }
        tracing::info!(action_id = %command.action_id, capability = %capability, target = %command.target, "running command");
        let execution = self.executor.execute(capability, &command.target).await;
        let (output, output_truncated) = bounded_text(&execution.output, MAX_OUTPUT_BYTES);
        let status = if execution.succeeded {
            ReceiptStatus::Completed
        } else {
            ReceiptStatus::Failed
        };
        let done = Receipt {
            output,
            output_truncated,
            exit_status: Some(execution.exit_status),
            accepted_at: Some(accepted_at),
            reason: (!execution.succeeded).then(|| {
                bounded_text(
                    execution.output.lines().next().unwrap_or("failed"),
                    MAX_REASON_BYTES,
                )
                .0
            }),
            ..receipt(command, status, None, (self.clock)())
        };
        if let Err(error) = log.finish(&done) {
            // The action ran; the `accepted` line keeps it from running again.
            tracing::error!(%error, action_id = %command.action_id, "receipt not recorded");
        }
        tracing::info!(action_id = %command.action_id, status = ?done.status, "command finished");
        done
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Counts executions; succeeds unless the target is `broken`.
    #[derive(Clone, Default)]
    struct Counting(Arc<AtomicUsize>);

    impl Executor for Counting {
        async fn execute(&self, capability: Capability, target: &str) -> Execution {
            let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
            Execution {
                succeeded: target != "broken",
                output: format!("{capability} {target} run {n}"),
                exit_status: i32::from(target == "broken"),
            }
        }
    }

    fn dir(label: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "pulse-cmd-{label}-{}-{}",
            std::process::id(),
            Utc::now().timestamp_nanos_opt().unwrap_or_default()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn command(action: &str, capability: &str, expires_in_secs: i64) -> Command {
        Command {
            request_id: format!("req-{}", uuid_like()),
            action_id: action.to_owned(),
            lease_id: "lease-1".to_owned(),
            lease_expires_at: Utc::now() + chrono::Duration::seconds(expires_in_secs),
            capability: capability.to_owned(),
            target: "web".to_owned(),
        }
    }

    fn uuid_like() -> u128 {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        NEXT.fetch_add(1, Ordering::SeqCst) as u128
    }

    #[tokio::test]
    async fn actions_long_past_their_lease_are_forgotten_and_still_never_run_again() {
        let dir = dir("compact");
        let runs = Counting::default();
        let t0 = Utc::now();
        {
            let commands = Commands::enabled(&dir, runs.clone()).unwrap();
            for (action, lease_secs) in [("old-1", 60), ("old-2", 60)] {
                let done = commands
                    .handle_at(&command(action, "service.restart", lease_secs), t0)
                    .await;
                assert_eq!(done.status, ReceiptStatus::Completed);
            }
        }
        // An old-format line (no lease expiry), written long ago, and a torn line.
        let legacy = format!(
            r#"{{"state":"accepted","action_id":"legacy","lease_id":"l","capability":"service.restart","target":"web","at":"{}"}}"#,
            (t0 - RETAIN_WITHOUT_LEASE - chrono::Duration::days(1)).to_rfc3339()
        );
        let path = dir.join(LOG_FILE);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&legacy);
        text.push('\n');
        std::fs::write(&path, &text).unwrap();
        assert_eq!(text.lines().count(), 5);

        // Within the retention, everything is remembered.
        let log = IdempotencyLog::open_at(&dir, t0 + chrono::Duration::days(1)).unwrap();
        assert_eq!(log.len(), 2, "the legacy line is past its retention");
        assert!(matches!(log.get("old-1"), Some(Recorded::Finished(_))));
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 4);
        drop(log);

        // Past lease + retention, the actions are forgotten and the file is empty.
        let later =
            t0 + chrono::Duration::seconds(60) + RETAIN_AFTER_LEASE + chrono::Duration::hours(1);
        let log = IdempotencyLog::open_at(&dir, later).unwrap();
        assert!(log.is_empty());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        drop(log);

        // A redelivery of a forgotten action carries its old lease: refused, never run again.
        let commands = Commands::enabled(&dir, runs.clone()).unwrap();
        let again = commands
            .handle_at(&command("old-1", "service.restart", 60), later)
            .await;
        assert_eq!(again.status, ReceiptStatus::Rejected);
        assert!(again.reason.unwrap_or_default().contains("expired"));
        assert_eq!(runs.0.load(Ordering::SeqCst), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_repeated_action_id_returns_the_recorded_receipt_across_restarts() {
        let dir = dir("repeat");
        let runs = Counting::default();
        let first = {
            let commands = Commands::enabled(&dir, runs.clone()).unwrap();
            let first = commands
                .handle(&command("act-1", "service.restart", 60))
                .await;
            assert_eq!(first.status, ReceiptStatus::Completed);
            assert_eq!(first.exit_status, Some(0));
            assert!(!first.replayed);
            assert_eq!(runs.0.load(Ordering::SeqCst), 1);
            let again = commands
                .handle(&command("act-1", "service.restart", 60))
                .await;
            assert!(again.replayed);
            assert_eq!(again.output, first.output);
            assert_eq!(runs.0.load(Ordering::SeqCst), 1);
            first
        };
        // A new process reads the same log.
        let commands = Commands::enabled(&dir, runs.clone()).unwrap();
        let replay = commands
            .handle(&command("act-1", "service.restart", 60))
            .await;
        assert_eq!(runs.0.load(Ordering::SeqCst), 1, "executed twice");
        assert!(replay.replayed);
        assert_eq!(replay.status, ReceiptStatus::Completed);
        assert_eq!(replay.output, first.output);
        assert_eq!(replay.at, first.at);
        assert_ne!(replay.request_id, first.request_id);
        // A different action id runs.
        let other = commands
            .handle(&command("act-2", "service.restart", 60))
            .await;
        assert_eq!(other.status, ReceiptStatus::Completed);
        assert_eq!(runs.0.load(Ordering::SeqCst), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn accepted_but_never_finished_is_never_executed_again() {
        let dir = dir("crash");
        // The state a crash between "accepted" and "finished" leaves behind.
        {
            let mut log = IdempotencyLog::open(&dir).unwrap();
            log.accept(&command("act-9", "service.restart", 60), Utc::now())
                .unwrap();
        }
        // A torn line after it must not hide the record.
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join(LOG_FILE))
            .unwrap()
            .write_all(b"{\"state\":\"finis")
            .unwrap();
        let runs = Counting::default();
        let commands = Commands::enabled(&dir, runs.clone()).unwrap();
        let receipt = commands
            .handle(&command("act-9", "service.restart", 60))
            .await;
        assert_eq!(receipt.status, ReceiptStatus::Rejected);
        let reason = receipt.reason.unwrap();
        assert!(reason.contains("never completed"), "{reason}");
        assert_eq!(runs.0.load(Ordering::SeqCst), 0);
        // Entries written after the torn line survive the next restart.
        let next = commands
            .handle(&command("act-10", "service.restart", 60))
            .await;
        assert_eq!(next.status, ReceiptStatus::Completed);
        drop(commands);
        let reopened = Commands::enabled(&dir, runs.clone()).unwrap();
        let replay = reopened
            .handle(&command("act-10", "service.restart", 60))
            .await;
        assert!(replay.replayed, "{replay:?}");
        assert_eq!(runs.0.load(Ordering::SeqCst), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn expired_lease_unknown_capability_and_bad_target_are_rejected_with_a_reason() {
        let dir = dir("refuse");
        let runs = Counting::default();
        let commands = Commands::enabled(&dir, runs.clone()).unwrap();

        let expired = commands
            .handle(&command("act-e", "service.restart", -1))
            .await;
        assert_eq!(expired.status, ReceiptStatus::Rejected);
        assert!(
            expired
                .reason
                .as_deref()
                .unwrap()
                .contains("lease lease-1 expired")
        );

        let unknown = commands.handle(&command("act-u", "shell.exec", 60)).await;
        assert_eq!(unknown.status, ReceiptStatus::Rejected);
        let reason = unknown.reason.unwrap();
        assert!(
            reason.contains("unknown capability \"shell.exec\""),
            "{reason}"
        );
        assert!(reason.contains("docker.container.restart"), "{reason}");

        let mut bad = command("act-b", "service.stop", 60);
        bad.target = "../etc".to_owned();
        let bad = commands.handle(&bad).await;
        assert_eq!(bad.status, ReceiptStatus::Rejected);

        assert_eq!(runs.0.load(Ordering::SeqCst), 0);
        // Refusals are not recorded: the same action id with a live lease runs.
        let retried = commands
            .handle(&command("act-e", "service.restart", 60))
            .await;
        assert_eq!(retried.status, ReceiptStatus::Completed);
        assert_eq!(runs.0.load(Ordering::SeqCst), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_failed_execution_is_recorded_as_failed_and_not_retried() {
        let dir = dir("fail");
        let runs = Counting::default();
        let commands = Commands::enabled(&dir, runs.clone()).unwrap();
        let mut broken = command("act-f", "service.start", 60);
        broken.target = "broken".to_owned();
        let failed = commands.handle(&broken).await;
        assert_eq!(failed.status, ReceiptStatus::Failed);
        assert_eq!(failed.exit_status, Some(1));
        assert!(failed.reason.is_some());
        let again = commands.handle(&broken).await;
        assert_eq!(again.status, ReceiptStatus::Failed);
        assert!(again.replayed);
        assert_eq!(runs.0.load(Ordering::SeqCst), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn disabled_commands_are_rejected_and_nothing_runs_or_is_written() {
        let runs = Counting::default();
        let commands = Commands::disabled(runs.clone());
        assert!(!commands.is_enabled());
        let receipt = commands
            .handle(&command("act-d", "service.restart", 60))
            .await;
        assert_eq!(receipt.status, ReceiptStatus::Rejected);
        assert_eq!(receipt.reason.as_deref(), Some(DISABLED_REASON));
        assert_eq!(runs.0.load(Ordering::SeqCst), 0);
    }

    /// Takes `RUN` to run, like a restart that blocks until the unit is ready.
    struct Slow;

    impl Slow {
        const RUN: std::time::Duration = std::time::Duration::from_millis(40);
    }

    impl Executor for Slow {
        async fn execute(&self, capability: Capability, target: &str) -> Execution {
            tokio::time::sleep(Self::RUN).await;
            Execution {
                succeeded: true,
                output: format!("{capability} {target}"),
                exit_status: 0,
            }
        }
    }

    /// A wall clock that starts at the real time and then moves with tokio's clock, so a test
    /// on paused time sees `Slow::RUN` pass without waiting for it.
    fn paused_wall_clock() -> impl Fn() -> DateTime<Utc> + Send + Sync + 'static {
        let (start, wall) = (tokio::time::Instant::now(), Utc::now());
        move || wall + chrono::Duration::from_std(start.elapsed()).unwrap_or_default()
    }

    #[tokio::test(start_paused = true)]
    async fn the_receipt_carries_when_the_command_started_and_a_replay_keeps_it() {
        let dir = dir("accepted-at");
        let first = {
            let commands = Commands::enabled(&dir, Slow)
                .unwrap()
                .with_clock(paused_wall_clock());
            let first = commands
                .handle(&command("act-s", "service.restart", 60))
                .await;
            assert_eq!(first.status, ReceiptStatus::Completed);
            let accepted_at = first.accepted_at.expect("a run command has accepted_at");
            let run = chrono::Duration::from_std(Slow::RUN).unwrap();
            assert!(
                accepted_at + run <= first.at,
                "{accepted_at} vs {}",
                first.at
            );
            first
        };
        // A new process replays the recorded receipt with the original times.
        let commands = Commands::enabled(&dir, Slow)
            .unwrap()
            .with_clock(paused_wall_clock());
        let replay = commands
            .handle(&command("act-s", "service.restart", 60))
            .await;
        assert!(replay.replayed);
        assert_eq!(replay.accepted_at, first.accepted_at);
        assert_eq!(replay.at, first.at);
        // A refusal ran nothing: no accepted_at.
        let refused = commands
            .handle(&command("act-x", "service.restart", -1))
            .await;
        assert_eq!(refused.status, ReceiptStatus::Rejected);
        assert_eq!(refused.accepted_at, None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_command_queued_behind_another_is_accepted_when_it_starts_not_when_it_arrived() {
        let dir = dir("accepted-queued");
        let commands = Commands::enabled(&dir, Slow)
            .unwrap()
            .with_clock(paused_wall_clock());
        let (q1, q2) = (
            command("act-q1", "service.restart", 60),
            command("act-q2", "service.restart", 60),
        );
        let (a, b) = tokio::join!(commands.handle(&q1), commands.handle(&q2));
        let (earlier, later) = if a.at <= b.at { (a, b) } else { (b, a) };
        let started = later.accepted_at.expect("accepted_at");
        assert!(started >= earlier.at, "{started} before {}", earlier.at);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn long_output_is_bounded() {
        let (text, cut) = bounded_text(&"x".repeat(MAX_OUTPUT_BYTES + 10), MAX_OUTPUT_BYTES);
        assert!(cut);
        assert_eq!(text.len(), MAX_OUTPUT_BYTES);
    }
}
