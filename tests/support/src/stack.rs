//! The whole local stack as `pulsectl up` runs it, for end-to-end tests: isolated database and
//! subject prefix per test, every listener on port 0 (the OS picks each port when the process
//! binds it; pulsectl reports the gateway's), and the process-tree checks that prove nothing is
//! left behind.
//!
//! Binaries are the ones `cargo build --bins` put next to the test executable (see
//! [`crate::service::bin_dir`]); nothing here builds anything.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use pulse_api::system::HealthReport;
use tokio::process::{Child, Command};

use crate::service::bin_dir;

/// Every binary `pulsectl up` needs, pulsectl included.
pub const STACK_BINARIES: [&str; 9] = [
    "pulsectl",
    "pulse-gateway",
    "pulse-patrol-scheduler",
    "pulse-model-runner",
    "pulse-action-broker",
    "pulse-verifier",
    "pulse-agent-relay",
    "pulse-connector",
    "pulse-agent",
];

/// The seven services `/api/health` reports.
pub use pulse_domain::fleet::FLEET_SERVICES as FLEET;

/// The directory holding every stack binary, or one error naming all that are missing.
pub fn require_stack_binaries() -> anyhow::Result<PathBuf> {
    let dir = bin_dir()?;
    let missing: Vec<&str> = STACK_BINARIES
        .iter()
        .copied()
        .filter(|name| !dir.join(name).is_file())
        .collect();
    anyhow::ensure!(
        missing.is_empty(),
        "missing binaries in {}: {}; run `cargo build --bins` first (add --release for a \
         release test run)",
        dir.display(),
        missing.join(", ")
    );
    Ok(dir)
}

/// Polls `check` until it holds, or fails naming `what` once `deadline` has passed.
pub async fn wait_until<F, Fut>(deadline: Duration, what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    crate::wait::until(deadline, what, || {
        let holds = check();
        async move { holds.await.then_some(()) }
    })
    .await
}

/// One process as `/proc` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    pub pid: u32,
    pub ppid: u32,
    /// Start time in clock ticks since boot: tells a process from a later one with its pid.
    pub start_ticks: u64,
    /// File name of the executable (or the kernel's 15-byte `comm` when that is unreadable).
    pub name: String,
}

/// The `/proc/<pid>/stat` fields after the command: state, ppid, start time.
fn read_stat(pid: u32) -> Option<(char, u32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command may hold spaces and parentheses: fields start after the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let ppid = fields.get(1)?.parse().ok()?;
    let start_ticks = fields.get(19)?.parse().ok()?;
    Some((state, ppid, start_ticks))
}

fn is_running_state(state: char) -> bool {
    // Z: exited, waiting to be reaped; X: being torn down.
    !matches!(state, 'Z' | 'X' | 'x')
}

/// Whether `pid` is a running process (a zombie has exited and does not count).
pub fn process_alive(pid: u32) -> bool {
    read_stat(pid).is_some_and(|(state, _, _)| is_running_state(state))
}

pub fn process_info(pid: u32) -> Option<ProcessInfo> {
    let (_, ppid, start_ticks) = read_stat(pid)?;
    let name = std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .and_then(|exe| {
            // A replaced executable reads as "<path> (deleted)".
            let name = exe.file_name()?.to_string_lossy().into_owned();
            Some(name.trim_end_matches(" (deleted)").to_owned())
        })
        .or_else(|| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .ok()
                .map(|comm| comm.trim().to_owned())
        })?;
    Some(ProcessInfo {
        pid,
        ppid,
        start_ticks,
        name,
    })
}

impl ProcessInfo {
    /// Still running, and still the same process (not a reused pid).
    pub fn is_alive(&self) -> bool {
        read_stat(self.pid)
            .is_some_and(|(state, _, start)| start == self.start_ticks && is_running_state(state))
    }
}

/// Every running descendant of `root` (children, grandchildren, ...), found by scanning the
/// parent pid of every process in `/proc`.
pub fn descendants(root: u32) -> Vec<ProcessInfo> {
    let all: Vec<ProcessInfo> = std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| process_alive(*pid))
                .filter_map(process_info)
                .collect()
        })
        .unwrap_or_default();
    let mut found: Vec<ProcessInfo> = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for process in all.iter().filter(|p| p.ppid == parent) {
            if !found.iter().any(|f| f.pid == process.pid) {
                frontier.push(process.pid);
                found.push(process.clone());
            }
        }
    }
    found
}

pub use crate::db::{database_url, drop_database};

/// Whether the test server has a database called `name`.
pub async fn database_exists(name: &str) -> anyhow::Result<bool> {
    let server = crate::db::server_url();
    let (client, connection) = tokio_postgres::connect(&server, tokio_postgres::NoTls)
        .await
        .with_context(|| format!("connecting to {server}"))?;
    let connection = tokio::spawn(connection);
    let row = client
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
        .await?;
    drop(client);
    let _ = connection.await;
    Ok(row.is_some())
}

/// Everything that keeps one test's stack apart from another's and from a developer's.
#[derive(Debug, Clone)]
pub struct StackOptions {
    pub state_dir: PathBuf,
    /// Not created: `pulsectl up` creates it.
    pub database_name: String,
    pub database_url: String,
    pub nats_url: String,
    pub subject_prefix: String,
    /// Where the gateway listens, once pulsectl reported it ([`StackOptions::learn_gateway`],
    /// [`ready_gateway`]).
    pub gateway: Option<SocketAddr>,
    /// More `PULSE_*` settings for every process of the stack (e.g. a short cadence).
    pub extra_env: Vec<(String, String)>,
}

impl StackOptions {
    /// Fresh state directory, database name and subject prefix.
    pub fn isolated(label: &str) -> anyhow::Result<Self> {
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        let state_dir = crate::service::scratch_dir(label)?;
        let database_name = format!("pulse_e2e_{}", &suffix[..16]);
        let database_url = database_url(&crate::db::server_url(), &database_name)?;
        Ok(Self {
            state_dir,
            database_name,
            database_url,
            nats_url: crate::nats::nats_url(),
            subject_prefix: format!("e2e{}", &suffix[16..28]),
            gateway: None,
            extra_env: Vec::new(),
        })
    }

    /// The gateway's base URL; only once it is known.
    pub fn gateway_url(&self) -> String {
        let addr = self
            .gateway
            .expect("the gateway's address is learned from pulsectl first (learn_gateway)");
        format!("http://{addr}")
    }

    /// Waits until `up` reports where its gateway listens, and keeps it.
    pub async fn learn_gateway(&mut self, up: &PulsectlUp) -> anyhow::Result<()> {
        self.gateway = Some(up.gateway().await?);
        Ok(())
    }

    pub fn admin_token_path(&self) -> PathBuf {
        self.state_dir.join("admin-token")
    }

    /// The environment pulsectl gets: nothing from the test's own `PULSE_*` or cargo
    /// variables, only what isolates this stack.
    pub fn env(&self) -> Vec<(String, String)> {
        let health = [
            "PULSE_PATROL_SCHEDULER_HEALTH_LISTEN",
            "PULSE_MODEL_RUNNER_HEALTH_LISTEN",
            "PULSE_ACTION_BROKER_HEALTH_LISTEN",
            "PULSE_VERIFIER_HEALTH_LISTEN",
            "PULSE_CONNECTOR_HEALTH_LISTEN",
            "PULSE_AGENT_HEALTH_LISTEN",
        ];
        let any = "127.0.0.1:0".to_owned();
        let mut env = vec![
            ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
            ("PULSE_DATABASE_URL".to_owned(), self.database_url.clone()),
            ("PULSE_NATS_URL".to_owned(), self.nats_url.clone()),
            (
                "PULSE_NATS__SUBJECT_PREFIX".to_owned(),
                self.subject_prefix.clone(),
            ),
            ("PULSE_GATEWAY__LISTEN".to_owned(), any.clone()),
            ("PULSE_RELAY__LISTEN".to_owned(), any.clone()),
            // The machine's Docker engine is shared with other tests' containers: a stack's host
            // agent does not watch it unless the test asks (`extra_env` comes last and wins).
            ("PULSE_AGENT_NO_DOCKER".to_owned(), "true".to_owned()),
        ];
        if self.gateway.is_some() {
            env.push(("PULSE_GATEWAY_URL".to_owned(), self.gateway_url()));
        }
        for name in health {
            env.push((name.to_owned(), any.clone()));
        }
        env.extend(crate::service::small_streams_env());
        env.extend(self.extra_env.iter().cloned());
        env
    }

    /// `pulsectl --state-dir <dir> <args...>` with [`Self::env`].
    pub fn pulsectl(&self, args: &[&str]) -> anyhow::Result<Command> {
        let mut command = Command::new(bin_dir()?.join("pulsectl"));
        command
            .env_clear()
            .envs(self.env())
            .arg("--state-dir")
            .arg(&self.state_dir)
            .args(args)
            .stdin(Stdio::null());
        Ok(command)
    }

    /// Runs a short pulsectl command to completion within `timeout`.
    pub async fn run_pulsectl(
        &self,
        args: &[&str],
        timeout: Duration,
    ) -> anyhow::Result<std::process::Output> {
        let mut command = self.pulsectl(args)?;
        command.kill_on_drop(true);
        tokio::time::timeout(timeout, command.output())
            .await
            .with_context(|| format!("pulsectl {args:?} still running after {timeout:?}"))?
            .with_context(|| format!("running pulsectl {args:?}"))
    }

    /// Drops the database and removes the state directory.
    pub async fn cleanup(&self) -> anyhow::Result<()> {
        let dropped = drop_database(&self.database_name).await;
        let _ = std::fs::remove_dir_all(&self.state_dir);
        let streams = crate::service::delete_streams(&self.subject_prefix).await;
        dropped.and(streams)
    }
}

/// Waits until `pulsectl up --demo` printed its next steps (`Demo running:`); fails, with
/// pulsectl's output, when the setup failed, pulsectl exited, or `within` passed.
pub async fn wait_for_demo_setup(up: &mut PulsectlUp, within: Duration) -> anyhow::Result<()> {
    // `Some` once the setup ended either way: done, failed, or pulsectl gone.
    let outcome = crate::wait::until(within, "the demo's setup", || {
        let ended = if let Some(status) = up.exited() {
            Some(Err(format!("pulsectl exited with {status}")))
        } else {
            let stdout = up.stdout();
            if stdout.contains("demo: setup failed") {
                Some(Err("setup failed".to_owned()))
            } else if stdout.contains("Demo running:") {
                Some(Ok(()))
            } else {
                None
            }
        };
        async move { ended }
    })
    .await;
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(why)) => anyhow::bail!("demo stage not reached: setup ({why})\n{}", up.output()),
        Err(error) => anyhow::bail!("demo stage not reached: setup ({error})\n{}", up.output()),
    }
}

/// A running `pulsectl up` (foreground); SIGKILLed if dropped while running, which takes its
/// services down too (they get SIGTERM when pulsectl dies).
pub struct PulsectlUp {
    child: Child,
    pid: u32,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl PulsectlUp {
    pub fn spawn(options: &StackOptions, extra_args: &[&str]) -> anyhow::Result<Self> {
        let stdout = options.state_dir.join("pulsectl.stdout");
        let stderr = options.state_dir.join("pulsectl.stderr");
        let mut args = vec!["up"];
        args.extend_from_slice(extra_args);
        let mut command = options.pulsectl(&args)?;
        command
            .stdout(std::fs::File::create(&stdout)?)
            .stderr(std::fs::File::create(&stderr)?)
            .kill_on_drop(true);
        let child = command.spawn().context("spawning pulsectl up")?;
        let pid = child.id().context("pulsectl exited at once")?;
        Ok(Self {
            child,
            pid,
            stdout,
            stderr,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// Waits up to 60 s for the gateway address pulsectl prints once the gateway has bound
    /// (`gateway listening on http://<addr>`); fails early if pulsectl exits.
    pub async fn gateway(&self) -> anyhow::Result<SocketAddr> {
        // `Some(Err)` ends the wait early: pulsectl exited before its gateway listened.
        let found = crate::wait::until(
            Duration::from_secs(60),
            "pulsectl to report its gateway address",
            || {
                let addr = self.stdout().lines().find_map(|line| {
                    line.strip_prefix("gateway listening on http://")?
                        .trim()
                        .parse::<SocketAddr>()
                        .ok()
                });
                let seen = match addr {
                    Some(addr) => Some(Ok(addr)),
                    None if !process_alive(self.pid) => Some(Err(anyhow::anyhow!(
                        "pulsectl exited before its gateway listened"
                    ))),
                    None => None,
                };
                std::future::ready(seen)
            },
        )
        .await;
        match found {
            Ok(Ok(addr)) => Ok(addr),
            Ok(Err(error)) | Err(error) => anyhow::bail!("{error}\n{}", self.output()),
        }
    }

    /// Both streams, for failure messages.
    pub fn output(&self) -> String {
        format!(
            "--- pulsectl stdout ---\n{}\n--- pulsectl stderr ---\n{}",
            self.stdout(),
            std::fs::read_to_string(&self.stderr).unwrap_or_default()
        )
    }

    /// The exit status if pulsectl has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn interrupt(&self) {
        crate::service::signal(self.pid, libc::SIGINT);
    }

    pub async fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .with_context(|| format!("pulsectl still running after {timeout:?}"))?
            .context("waiting for pulsectl")
    }
}

/// The gateway address of a `Pulse is up: http://<addr>` summary in `stdout`.
pub fn ready_gateway(stdout: &str) -> Option<SocketAddr> {
    stdout.lines().find_map(|line| {
        line.trim()
            .strip_prefix("Pulse is up: http://")?
            .trim()
            .parse()
            .ok()
    })
}

/// The fleet report of a gateway (a public operation, read through `http`), or `None` while it
/// does not answer.
pub async fn health(http: &reqwest::Client, gateway_url: &str) -> Option<HealthReport> {
    let client = pulse_client::Client::with_http(gateway_url, None, http.clone()).ok()?;
    client.health().await.ok()
}

/// Whether the report shows fleet service `name` ready.
pub fn is_ready(report: &HealthReport, name: &str) -> bool {
    report.services.get(name).is_some_and(|s| s.ready)
}

/// Fleet services the report does not show ready.
pub fn not_ready(report: &HealthReport) -> Vec<&'static str> {
    FLEET
        .into_iter()
        .filter(|name| !is_ready(report, name))
        .collect()
}

/// Mode bits of a file (`0o600` for the admin token).
pub fn file_mode(path: &Path) -> anyhow::Result<u32> {
    use std::os::unix::fs::PermissionsExt;
    Ok(std::fs::metadata(path)
        .with_context(|| format!("{} is missing", path.display()))?
        .permissions()
        .mode()
        & 0o777)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ready_summary_names_the_gateway() {
        let stdout = "started gateway (1)\n\nPulse is up: http://127.0.0.1:40123\n  logs x\n";
        assert_eq!(ready_gateway(stdout), "127.0.0.1:40123".parse().ok());
        assert_eq!(ready_gateway("waiting\n"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_child_is_its_descendant() {
        let me = std::process::id();
        assert!(process_alive(me));
        assert!(process_info(me).unwrap().is_alive());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let found = descendants(me);
        let sleeper = found
            .iter()
            .find(|p| p.pid == child.id())
            .expect("the child is a descendant");
        assert_eq!(sleeper.name, "sleep");
        let sleeper = sleeper.clone();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!sleeper.is_alive());
        assert!(!process_alive(sleeper.pid));
    }

    #[test]
    fn a_report_missing_services_is_not_ready() {
        let report: HealthReport = serde_json::from_value(serde_json::json!({
            "status": "degraded",
            "services": {
                "gateway": {"ready": true, "instances": 1},
                "verifier": {"ready": false, "instances": 0}
            }
        }))
        .unwrap();
        assert_eq!(
            not_ready(&report),
            [
                "patrol-scheduler",
                "model-runner",
                "action-broker",
                "verifier",
                "agent-relay",
                "connector"
            ]
        );
    }
}
