//! Supervised services (Monit-like): definitions from a directory of TOML files, started,
//! restarted per policy with backoff, health-checked, and reported.
//!
//! The directory is re-read periodically: a new file starts a service, a removed file stops
//! it, a changed file restarts it.

pub mod definition;
pub mod health;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use pulse_domain::backoff::Backoff;
use pulse_domain::resource::{Health, ObservedResource, ResourceStatus, ResourceType};
use serde_json::json;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use definition::ServiceDefinition;
use health::CheckResult;

/// Health results kept per service.
pub const HEALTH_LOG_LEN: usize = 10;
/// How long a stopping service gets between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What the agent knows about one supervised service.
#[derive(Debug, Clone)]
pub struct ServiceState {
    pub definition: ServiceDefinition,
    pub status: ResourceStatus,
    pub health: Health,
    pub pid: Option<u32>,
    pub restart_count: u32,
    pub last_exit_code: Option<i32>,
    pub started_at: Option<DateTime<Utc>>,
    pub exited_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub health_log: VecDeque<CheckResult>,
}

impl ServiceState {
    fn new(definition: ServiceDefinition) -> Self {
        Self {
            definition,
            status: ResourceStatus::Stopped,
            health: Health::Unknown,
            pid: None,
            restart_count: 0,
            last_exit_code: None,
            started_at: None,
            exited_at: None,
            last_error: None,
            health_log: VecDeque::new(),
        }
    }

    /// As a resource in a report.
    pub fn observed(&self) -> ObservedResource {
        let def = &self.definition;
        ObservedResource {
            resource_type: ResourceType::Service,
            source_id: def.name.clone(),
            name: def.name.clone(),
            aliases: Vec::new(),
            status: self.status,
            health: self.health,
            restart_count: Some(self.restart_count),
            labels: def.labels.clone(),
            details: json!({
                "pid": self.pid,
                "command": def.command,
                "args": def.args,
                "last_exit_code": self.last_exit_code,
                "started_at": self.started_at,
                "exited_at": self.exited_at,
                "last_error": self.last_error,
                "health_log": self.health_log,
            }),
            metrics: BTreeMap::new(),
            parent: None,
        }
    }
}

type States = Arc<Mutex<BTreeMap<String, ServiceState>>>;

/// A cheap, cloneable view of the supervised services.
#[derive(Clone)]
pub struct SupervisorView {
    states: States,
}

impl SupervisorView {
    /// The services as report resources, in name order.
    pub fn observed(&self) -> Vec<ObservedResource> {
        let states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        states.values().map(ServiceState::observed).collect()
    }

    pub fn get(&self, name: &str) -> Option<ServiceState> {
        let states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        states.get(name).cloned()
    }
}

/// A start, stop or restart asked of the supervisor (the `service.*` capabilities).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceAction {
    Start,
    Stop,
    Restart,
}

struct Control {
    name: String,
    action: ServiceAction,
    reply: oneshot::Sender<Result<String, String>>,
}

/// Asks the running supervisor to start, stop or restart one service.
#[derive(Clone)]
pub struct SupervisorHandle {
    tx: mpsc::Sender<Control>,
    view: SupervisorView,
}

/// How long a start waits for the child to be spawned before answering.
const START_WAIT: Duration = Duration::from_secs(10);

impl SupervisorHandle {
    /// Runs `action` on service `name`; `Ok` carries a one-line outcome, `Err` the reason.
    /// A stopped service stays stopped (across rescans) until started again.
    pub async fn control(&self, name: &str, action: ServiceAction) -> Result<String, String> {
        let before = self.view.get(name).and_then(|s| s.started_at);
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Control {
                name: name.to_owned(),
                action,
                reply,
            })
            .await
            .map_err(|_| "the supervisor is not running".to_owned())?;
        let outcome = answer
            .await
            .map_err(|_| "the supervisor stopped before answering".to_owned())??;
        if action == ServiceAction::Stop {
            return Ok(outcome);
        }
        // Wait until the new child was spawned (or failed to spawn).
        let deadline = Instant::now() + START_WAIT;
        loop {
            if let Some(state) = self.view.get(name) {
                if state.started_at.is_some() && state.started_at != before {
                    return Ok(match state.pid {
                        Some(pid) => format!("{outcome} (pid {pid})"),
                        None => outcome,
                    });
                }
                if let Some(error) = state.last_error.filter(|_| state.pid.is_none()) {
                    return Err(format!("service {name} did not start: {error}"));
                }
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "service {name} did not start within {} s",
                    START_WAIT.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

struct Running {
    definition: ServiceDefinition,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

/// Owns the service tasks.
pub struct Supervisor {
    dir: PathBuf,
    log_dir: Option<PathBuf>,
    states: States,
    changed: Arc<Notify>,
    http: reqwest::Client,
    running: HashMap<String, Running>,
    last_errors: Vec<String>,
    /// Definitions of the last reconcile, by name.
    known: BTreeMap<String, ServiceDefinition>,
    /// Services stopped by a command: not started again by a rescan.
    held: HashSet<String>,
    control_tx: mpsc::Sender<Control>,
    control_rx: mpsc::Receiver<Control>,
}

/// A change worth reporting at once.
fn update(
    states: &States,
    changed: &Notify,
    name: &str,
    f: impl FnOnce(&mut ServiceState) -> bool,
) {
    let notify = {
        let mut guard = states.lock().unwrap_or_else(|e| e.into_inner());
        guard.get_mut(name).is_some_and(f)
    };
    if notify {
        changed.notify_one();
    }
}

impl Supervisor {
    /// `changed` is notified whenever a service's status or health changes.
    pub fn new(
        dir: PathBuf,
        log_dir: Option<PathBuf>,
        changed: Arc<Notify>,
    ) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()?;
        let (control_tx, control_rx) = mpsc::channel(16);
        Ok(Self {
            dir,
            log_dir,
            states: Arc::default(),
            changed,
            http,
            running: HashMap::new(),
            last_errors: Vec::new(),
            known: BTreeMap::new(),
            held: HashSet::new(),
            control_tx,
            control_rx,
        })
    }

    /// A handle for start/stop/restart while [`Supervisor::run`] runs.
    pub fn handle(&self) -> SupervisorHandle {
        SupervisorHandle {
            tx: self.control_tx.clone(),
            view: self.view(),
        }
    }

    fn start_service(&mut self, definition: ServiceDefinition) {
        let name = definition.name.clone();
        tracing::info!(service = %name, command = %definition.command, "starting supervised service");
        {
            let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
            let state = states
                .entry(name.clone())
                .or_insert_with(|| ServiceState::new(definition.clone()));
            state.definition = definition.clone();
        }
        let cancel = CancellationToken::new();
        let task = tokio::spawn(supervise(
            definition.clone(),
            self.states.clone(),
            self.changed.clone(),
            self.http.clone(),
            self.log_dir.clone(),
            cancel.clone(),
        ));
        self.running.insert(
            name,
            Running {
                definition,
                cancel,
                task,
            },
        );
        self.changed.notify_one();
    }

    /// Start, stop or restart one known service.
    pub async fn control(&mut self, name: &str, action: ServiceAction) -> Result<String, String> {
        let Some(definition) = self.known.get(name).cloned() else {
            return Err(format!("no supervised service named {name:?}"));
        };
        match action {
            ServiceAction::Stop => {
                self.held.insert(name.to_owned());
                let Some(running) = self.running.remove(name) else {
                    return Ok(format!("service {name} was already stopped"));
                };
                tracing::info!(service = %name, "stopping service on command");
                stop(running).await;
                update(&self.states, &self.changed, name, |s| {
                    s.status = ResourceStatus::Stopped;
                    s.health = Health::Unknown;
                    s.pid = None;
                    s.exited_at = Some(Utc::now());
                    true
                });
                Ok(format!("service {name} stopped"))
            }
            ServiceAction::Start => {
                self.held.remove(name);
                if self.running.contains_key(name) {
                    return Ok(format!("service {name} was already running"));
                }
                self.start_service(definition);
                Ok(format!("service {name} started"))
            }
            ServiceAction::Restart => {
                self.held.remove(name);
                if let Some(running) = self.running.remove(name) {
                    tracing::info!(service = %name, "restarting service on command");
                    stop(running).await;
                }
                self.start_service(definition);
                Ok(format!("service {name} restarted"))
            }
        }
    }

    pub fn view(&self) -> SupervisorView {
        SupervisorView {
            states: self.states.clone(),
        }
    }

    /// Re-reads the definitions and starts, stops or restarts services to match.
    pub async fn reconcile(&mut self) {
        let (definitions, errors) = definition::load_dir(&self.dir).await;
        let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
        if messages != self.last_errors {
            for message in &messages {
                tracing::warn!(error = %message, "service definition refused");
            }
            self.last_errors = messages;
        }
        let wanted: BTreeMap<String, ServiceDefinition> = definitions
            .into_iter()
            .map(|d| (d.name.clone(), d))
            .collect();
        // A held (stopped by command) service whose definition went away or changed is
        // forgotten; a changed definition starts afresh.
        let released: Vec<String> = self
            .held
            .iter()
            .filter(|name| wanted.get(*name) != self.known.get(*name))
            .cloned()
            .collect();
        for name in released {
            self.held.remove(&name);
            self.states
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&name);
            self.changed.notify_one();
        }
        self.known = wanted.clone();
        let outdated: Vec<String> = self
            .running
            .iter()
            .filter(|(name, r)| wanted.get(*name) != Some(&r.definition))
            .map(|(name, _)| name.clone())
            .collect();
        for name in outdated {
            if let Some(running) = self.running.remove(&name) {
                tracing::info!(service = %name, "service definition removed or changed; stopping");
                stop(running).await;
            }
            self.states
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&name);
            self.changed.notify_one();
        }
        for (name, definition) in wanted {
            if self.running.contains_key(&name) || self.held.contains(&name) {
                continue;
            }
            self.states
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(name.clone(), ServiceState::new(definition.clone()));
            self.start_service(definition);
        }
    }

    /// Reconciles every `rescan` until `shutdown`, then stops every service.
    pub async fn run(mut self, rescan: Duration, shutdown: CancellationToken) {
        let mut next_rescan = Instant::now();
        loop {
            if Instant::now() >= next_rescan {
                self.reconcile().await;
                next_rescan = Instant::now() + rescan;
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep_until(next_rescan.into()) => {}
                control = self.control_rx.recv() => {
                    if let Some(control) = control {
                        let outcome = self.control(&control.name, control.action).await;
                        let _ = control.reply.send(outcome);
                    }
                }
            }
        }
        for (_, running) in self.running.drain() {
            stop(running).await;
        }
    }
}

async fn stop(running: Running) {
    running.cancel.cancel();
    // The task itself bounds the child's stop; this bounds the task.
    let _ = tokio::time::timeout(STOP_GRACE + Duration::from_secs(2), running.task).await;
}

fn spawn_child(
    def: &ServiceDefinition,
    log_dir: Option<&PathBuf>,
) -> std::io::Result<tokio::process::Child> {
    let mut command = tokio::process::Command::new(&def.command);
    command
        .args(&def.args)
        .envs(&def.env)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(dir) = &def.working_dir {
        command.current_dir(dir);
    }
    match log_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join(format!("{}.log", def.name)))?;
            command.stdout(log.try_clone()?).stderr(log);
        }
        None => {
            command.stdout(Stdio::null()).stderr(Stdio::null());
        }
    }
    command.spawn()
}

/// SIGTERM, then SIGKILL after the grace period.
async fn terminate(child: &mut tokio::process::Child) -> Option<std::process::ExitStatus> {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    match tokio::time::timeout(STOP_GRACE, child.wait()).await {
        Ok(status) => status.ok(),
        Err(_) => {
            let _ = child.kill().await;
            child.wait().await.ok()
        }
    }
}

async fn health_loop(
    def: &ServiceDefinition,
    states: &States,
    changed: &Notify,
    http: &reqwest::Client,
) {
    let Some(spec) = &def.health else {
        return std::future::pending().await;
    };
    // A short grace so a service that is still starting is not reported unhealthy at once.
    tokio::time::sleep(spec.interval.min(Duration::from_millis(500))).await;
    loop {
        let result = health::evaluate(&spec.check, spec.timeout, http).await;
        let health = if result.healthy {
            Health::Healthy
        } else {
            Health::Unhealthy
        };
        update(states, changed, &def.name, |s| {
            if s.health_log.len() >= HEALTH_LOG_LEN {
                s.health_log.pop_front();
            }
            s.health_log.push_back(result);
            let flipped = s.health != health;
            if flipped {
                tracing::info!(service = %def.name, health = health.as_str(), "service health changed");
            }
            s.health = health;
            flipped
        });
        tokio::time::sleep(spec.interval).await;
    }
}

/// A run at least this long resets the consecutive-failure count of the restart backoff.
fn stable_after(backoff: &Backoff) -> Duration {
    backoff.max().max(Duration::from_secs(10))
}

async fn supervise(
    def: ServiceDefinition,
    states: States,
    changed: Arc<Notify>,
    http: reqwest::Client,
    log_dir: Option<PathBuf>,
    cancel: CancellationToken,
) {
    let mut restarts = def.backoff.clone();
    loop {
        let started = Instant::now();
        let exit_code = match spawn_child(&def, log_dir.as_ref()) {
            Err(error) => {
                tracing::warn!(service = %def.name, %error, "service failed to start");
                update(&states, &changed, &def.name, |s| {
                    s.status = ResourceStatus::Exited;
                    s.health = Health::Unknown;
                    s.pid = None;
                    s.last_exit_code = None;
                    s.exited_at = Some(Utc::now());
                    s.last_error = Some(format!("failed to start: {error}"));
                    true
                });
                None
            }
            Ok(mut child) => {
                let pid = child.id();
                update(&states, &changed, &def.name, |s| {
                    s.status = ResourceStatus::Running;
                    s.health = Health::Unknown;
                    s.pid = pid;
                    s.started_at = Some(Utc::now());
                    s.last_error = None;
                    true
                });
                let waited = tokio::select! {
                    status = child.wait() => Some(status),
                    _ = cancel.cancelled() => None,
                    _ = health_loop(&def, &states, &changed, &http) => None,
                };
                let Some(status) = waited else {
                    terminate(&mut child).await;
                    return;
                };
                let code = status.ok().and_then(|s| s.code());
                tracing::info!(service = %def.name, exit_code = ?code, "service exited");
                update(&states, &changed, &def.name, |s| {
                    s.status = ResourceStatus::Exited;
                    s.health = Health::Unknown;
                    s.pid = None;
                    s.last_exit_code = code;
                    s.exited_at = Some(Utc::now());
                    true
                });
                code
            }
        };
        if !def.restart.restarts(exit_code) {
            cancel.cancelled().await;
            return;
        }
        if started.elapsed() >= stable_after(&def.backoff) {
            restarts.reset();
        }
        let delay = restarts.next_delay();
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
        update(&states, &changed, &def.name, |s| {
            s.restart_count = s.restart_count.saturating_add(1);
            false
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn wait_for(
        view: &SupervisorView,
        name: &str,
        what: impl Fn(&ServiceState) -> bool,
    ) -> ServiceState {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(state) = view.get(name).filter(|s| what(s)) {
                return state;
            }
            assert!(Instant::now() < deadline, "condition on {name} not reached");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test]
    async fn starts_restarts_checks_and_stops_services() {
        let dir = std::env::temp_dir().join(format!("pulse-sup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let marker = dir.join("marker");
        std::fs::write(
            dir.join("sleeper.toml"),
            format!(
                "name='sleeper'\ncommand='sleep'\nargs=['60']\n[health]\ntype='file-absent'\npath='{}'\ninterval_ms=100\ntimeout_ms=500\n",
                marker.display()
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("crasher.toml"),
            "name='crasher'\ncommand='sh'\nargs=['-c','exit 3']\n[restart]\npolicy='on-failure'\ninitial_backoff_ms=50\nmax_backoff_ms=100\n",
        )
        .unwrap();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let changed = Arc::new(Notify::new());
        let mut supervisor = Supervisor::new(dir.clone(), None, changed).unwrap();
        let view = supervisor.view();
        supervisor.reconcile().await;

        let sleeper = wait_for(&view, "sleeper", |s| s.health == Health::Healthy).await;
        assert_eq!(sleeper.status, ResourceStatus::Running);
        assert!(sleeper.pid.is_some());
        std::fs::write(&marker, "down").unwrap();
        wait_for(&view, "sleeper", |s| s.health == Health::Unhealthy).await;
        std::fs::remove_file(&marker).unwrap();
        wait_for(&view, "sleeper", |s| s.health == Health::Healthy).await;

        let crasher = wait_for(&view, "crasher", |s| s.restart_count >= 2).await;
        assert_eq!(crasher.last_exit_code, Some(3));

        // Removing a definition stops and forgets the service.
        std::fs::remove_file(dir.join("crasher.toml")).unwrap();
        supervisor.reconcile().await;
        assert!(view.get("crasher").is_none());
        assert_eq!(view.observed().len(), 1);

        let pid = sleeper.pid.unwrap();
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        supervisor.run(Duration::from_secs(60), shutdown).await;
        // The child was reaped: its pid no longer names a live `sleep`.
        let alive = std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.starts_with("sleep"));
        assert!(!alive, "sleep {pid} survived the supervisor");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn commands_start_stop_and_restart_a_service_and_a_stop_holds_across_rescans() {
        let dir = std::env::temp_dir().join(format!("pulse-sup-ctl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("sleeper.toml"),
            "name='sleeper'\ncommand='sleep'\nargs=['60']\n[restart]\npolicy='always'\n",
        )
        .unwrap();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let supervisor = Supervisor::new(dir.clone(), None, Arc::new(Notify::new())).unwrap();
        let view = supervisor.view();
        let handle = supervisor.handle();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(supervisor.run(Duration::from_millis(50), shutdown.clone()));
        let first = wait_for(&view, "sleeper", |s| s.pid.is_some()).await;

        let restarted = handle
            .control("sleeper", ServiceAction::Restart)
            .await
            .unwrap();
        assert!(
            restarted.starts_with("service sleeper restarted (pid "),
            "{restarted}"
        );
        let second = view.get("sleeper").unwrap();
        assert!(second.pid.is_some() && second.pid != first.pid);

        let stopped = handle
            .control("sleeper", ServiceAction::Stop)
            .await
            .unwrap();
        assert_eq!(stopped, "service sleeper stopped");
        // Several rescans later it is still stopped (policy `always` does not apply).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let held = view.get("sleeper").unwrap();
        assert_eq!(held.status, ResourceStatus::Stopped);
        assert!(held.pid.is_none());
        assert_eq!(
            handle
                .control("sleeper", ServiceAction::Stop)
                .await
                .unwrap(),
            "service sleeper was already stopped"
        );

        let started = handle
            .control("sleeper", ServiceAction::Start)
            .await
            .unwrap();
        assert!(
            started.starts_with("service sleeper started (pid "),
            "{started}"
        );
        assert_eq!(view.get("sleeper").unwrap().status, ResourceStatus::Running);

        let unknown = handle
            .control("nope", ServiceAction::Restart)
            .await
            .unwrap_err();
        assert_eq!(unknown, "no supervised service named \"nope\"");

        shutdown.cancel();
        task.await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
