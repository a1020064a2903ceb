//! `pulsectl up`: run the whole stack in the foreground until a stop signal.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::time::Instant;

use crate::admin;
use crate::agent_token;
use crate::binaries::{Binaries, BinariesError, CargoRun};
use crate::child::{ChildSpec, tail};
use crate::cli::UpArgs;
use crate::demo::{self, DemoError};
use crate::deps::{self, DepsError};
use crate::health::{HealthProbe, Observation};
use crate::pidfile::{PidFile, PidFileError};
use crate::preflight::{self, PreflightError};
use crate::service::{self, STACK, Service};
use crate::signals::StopSignals;
use crate::stack_config::{GATEWAY_LISTEN, RELAY_LISTEN, StackConfig, StackConfigError};
use crate::supervisor::{Event, SpawnError, Supervisor};

/// Restarts per process before pulsectl gives up on it.
pub const RESTART_LIMIT: u32 = 5;
/// How long a process gets between its stop signal and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
const STARTUP_HEALTH_EVERY: Duration = Duration::from_secs(1);
const RUNNING_HEALTH_EVERY: Duration = Duration::from_secs(2);
const LOG_TAIL_LINES: usize = 12;

#[derive(Debug, thiserror::Error)]
pub enum UpError {
    #[error("cannot prepare state dir {}: {source}", .path.display())]
    StateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Binaries(#[from] BinariesError),
    #[error(transparent)]
    PidFile(#[from] PidFileError),
    #[error(transparent)]
    Config(#[from] StackConfigError),
    #[error(transparent)]
    Deps(#[from] DepsError),
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error("cannot install signal handlers: {0}")]
    Signals(#[source] std::io::Error),
    #[error("cannot build the HTTP client: {0}")]
    Http(#[source] crate::health::ProbeError),
    #[error("{0}")]
    NotReady(String),
    #[error("{0}")]
    Detach(String),
    #[error(transparent)]
    Demo(#[from] DemoError),
    /// `--demo` without an admin token the gateway could ever write.
    #[error("{ADMIN_TOKEN_MISSING}: {0}")]
    AdminTokenMissing(MissingAdminToken),
}

/// Stable code of [`UpError::AdminTokenMissing`]; `pulsectl up` exits with
/// [`ADMIN_TOKEN_MISSING_EXIT`] for it.
pub const ADMIN_TOKEN_MISSING: &str = "admin_token_missing";
pub const ADMIN_TOKEN_MISSING_EXIT: u8 = 3;

impl UpError {
    pub fn exit_code(&self) -> u8 {
        match self {
            UpError::AdminTokenMissing(_) => ADMIN_TOKEN_MISSING_EXIT,
            _ => 1,
        }
    }
}

/// The state directory has no admin token but the database already has users: the gateway
/// bootstraps (and writes the token) only on an empty database, so none will come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingAdminToken {
    pub token_path: PathBuf,
    pub state_dir: PathBuf,
    pub users: usize,
}

impl std::fmt::Display for MissingAdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "there is no admin token at {}, and the database already has {} user(s) in tenant \
             'default', so the gateway will not write one (it does only when it bootstraps an \
             empty database)\n  recover it with: {}\n  (same PULSE_DATABASE_URL as this \
             stack), then run `pulsectl up` again",
            self.token_path.display(),
            self.users,
            admin::recover_command(&self.state_dir)
        )
    }
}

/// Names the recovery command when no admin token will ever be written. Only `--demo` fails:
/// the plain stack still runs and the operator may recover the token while it does.
async fn check_admin_token(config: &StackConfig, args: &UpArgs) -> Result<(), UpError> {
    if agent_token::present_at(&config.admin_token_path()) {
        return Ok(());
    }
    let users = match admin::existing_users(config).await {
        Ok(users) => users,
        Err(error) => {
            // The gateway will report the same database problem with more context.
            println!("cannot check the database for existing users: {error}");
            return Ok(());
        }
    };
    if users == 0 {
        return Ok(());
    }
    let missing = MissingAdminToken {
        token_path: config.admin_token_path(),
        state_dir: config.state_dir.clone(),
        users,
    };
    if args.demo {
        return Err(UpError::AdminTokenMissing(missing));
    }
    println!("warning: {ADMIN_TOKEN_MISSING}: {missing}");
    Ok(())
}

/// Creates the state and logs directories; returns the state directory as an absolute path
/// (the services and the messages get the same, unambiguous path).
pub fn prepare_state_dir(state_dir: &Path) -> Result<PathBuf, UpError> {
    let error = |source| UpError::StateDir {
        path: state_dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(state_dir).map_err(error)?;
    // Logs may hold secrets: the directory is private to its owner.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state_dir.join("logs"))
        .map_err(error)?;
    std::fs::canonicalize(state_dir).map_err(error)
}

/// The service binaries; under `cargo run -p pulsectl`, built first.
pub async fn locate_binaries(args: &UpArgs) -> Result<Binaries, UpError> {
    let dir = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => {
            let cargo_run = CargoRun::detect(
                |key| std::env::var_os(key),
                Path::new(env!("CARGO_MANIFEST_DIR")),
            );
            if let Some(cargo_run) = cargo_run {
                println!(
                    "building the service binaries: cargo {} (in {})",
                    cargo_run.args().join(" "),
                    cargo_run.workspace_root.display()
                );
                cargo_run.build().await?;
            }
            crate::binaries::own_dir()?
        }
    };
    let demo_binaries = if args.demo {
        demo::binaries().to_vec()
    } else {
        Vec::new()
    };
    Ok(Binaries::find_in(
        &dir,
        service::binaries().chain(demo_binaries),
    )?)
}

pub async fn run(state_dir: &Path, args: &UpArgs) -> Result<(), UpError> {
    let state_dir = prepare_state_dir(state_dir)?;
    // Variables that are not UTF-8 cannot be PULSE_ settings; skip them rather than panic.
    let env = std::env::vars_os()
        .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)));
    let config = StackConfig::resolve(&state_dir, env)?;
    if args.detach {
        return crate::detach::run(&config, args).await;
    }
    let mut signals = StopSignals::install().map_err(UpError::Signals)?;
    let _pid_file = PidFile::acquire(&state_dir)?;
    let mut supervisor = Supervisor::new(RESTART_LIMIT);
    let outcome = run_stack(&mut supervisor, &mut signals, config, args).await;
    stop(&mut supervisor).await;
    outcome
}

async fn run_stack(
    supervisor: &mut Supervisor,
    signals: &mut StopSignals,
    config: StackConfig,
    args: &UpArgs,
) -> Result<(), UpError> {
    let mut args = args.clone();
    let started = tokio::select! {
        started = start(supervisor, config, &mut args) => started?,
        signal = signals.recv() => {
            println!("{signal} received while starting; stopping");
            return Ok(());
        }
    };
    let probe = HealthProbe::new(&started.gateway_url()).map_err(UpError::Http)?;
    let mut agent_token = AgentTokenIssuer::new(&started);
    let Some(observation) = wait_ready(
        supervisor,
        signals,
        &probe,
        args.ready_timeout,
        args.replicas,
        &mut agent_token,
    )
    .await?
    else {
        return Ok(());
    };
    agent_token.try_issue().await;
    print_ready(&started, false);
    // The demo's setup talks to the API while the stack is monitored; it ends with the stack.
    let demo_setup = args
        .demo
        .then(|| tokio::spawn(demo::set_up(started.clone(), args.clone())));
    monitor(supervisor, signals, &probe, observation).await;
    if let Some(setup) = demo_setup {
        setup.abort();
    }
    Ok(())
}

/// What a wait for ready ended with: `Ok(None)` when a stop signal came first.
async fn wait_ready(
    supervisor: &mut Supervisor,
    signals: &mut StopSignals,
    probe: &HealthProbe,
    timeout: Duration,
    replicas: u8,
    agent_token: &mut AgentTokenIssuer,
) -> Result<Option<Observation>, UpError> {
    println!(
        "waiting up to {} s for the services to report ready",
        timeout.as_secs()
    );
    let deadline = Instant::now() + timeout;
    let mut tick = ticker();
    let mut next_probe = Instant::now();
    let mut observation = Observation::Unreachable("not asked yet".to_owned());
    loop {
        tokio::select! {
            signal = signals.recv() => {
                println!("{signal} received while starting; stopping");
                return Ok(None);
            }
            _ = tick.tick() => {}
        }
        let events = supervisor.poll();
        report_events(supervisor, events);
        let gave_up: Vec<String> = supervisor
            .gave_up()
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        if !gave_up.is_empty() {
            let mut message = format!(
                "the stack did not start: {} kept exiting ({RESTART_LIMIT} restarts)",
                gave_up.join(", ")
            );
            append_log_tails(&mut message, supervisor, &gave_up);
            return Err(UpError::NotReady(message));
        }
        if Instant::now() >= next_probe {
            observation = tokio::select! {
                observation = probe.observe() => observation,
                signal = signals.recv() => {
                    println!("{signal} received while starting; stopping");
                    return Ok(None);
                }
            };
            // The agent waits for its token file; issue it as soon as the gateway can.
            tokio::select! {
                _ = agent_token.try_issue() => {}
                signal = signals.recv() => {
                    println!("{signal} received while starting; stopping");
                    return Ok(None);
                }
            }
            if observation.all_ready_with(replicas) {
                return Ok(Some(observation));
            }
            next_probe = Instant::now() + STARTUP_HEALTH_EVERY;
        }
        if Instant::now() >= deadline {
            return Err(not_ready_error(supervisor, &observation, timeout));
        }
    }
}

/// Issues the host agent's token once the gateway has bootstrapped its admin token; reports a
/// failure once per distinct message and retries on the next call.
struct AgentTokenIssuer {
    state_dir: PathBuf,
    gateway_url: String,
    admin_token: PathBuf,
    done: bool,
    last_error: Option<String>,
}

impl AgentTokenIssuer {
    fn new(config: &StackConfig) -> Self {
        Self {
            state_dir: config.state_dir.clone(),
            gateway_url: config.gateway_url(),
            admin_token: config.admin_token_path(),
            done: agent_token::present(&config.state_dir),
            last_error: None,
        }
    }

    async fn try_issue(&mut self) {
        if self.done || !self.admin_token.is_file() {
            return;
        }
        let issued = tokio::time::timeout(
            Duration::from_secs(10),
            agent_token::ensure(&self.state_dir, &self.gateway_url),
        )
        .await
        .unwrap_or_else(|_| Err("timed out creating the agent token".to_owned()));
        match issued {
            Ok(path) => {
                println!("host agent token written to {}", path.display());
                self.done = true;
            }
            Err(error) if self.last_error.as_ref() != Some(&error) => {
                println!("host agent token not issued yet: {error}");
                self.last_error = Some(error);
            }
            Err(_) => {}
        }
    }
}

/// Keeps the stack running and reports changes until a stop signal.
async fn monitor(
    supervisor: &mut Supervisor,
    signals: &mut StopSignals,
    probe: &HealthProbe,
    first: Observation,
) {
    let mut last_line = first.status_line();
    print_status(&last_line);
    let mut tick = ticker();
    let mut next_probe = Instant::now() + RUNNING_HEALTH_EVERY;
    loop {
        tokio::select! {
            signal = signals.recv() => {
                println!("{signal} received; stopping the stack");
                return;
            }
            _ = tick.tick() => {}
        }
        let events = supervisor.poll();
        report_events(supervisor, events);
        if Instant::now() >= next_probe {
            let observation = tokio::select! {
                observation = probe.observe() => observation,
                signal = signals.recv() => {
                    println!("{signal} received; stopping the stack");
                    return;
                }
            };
            let line = observation.status_line();
            if line != last_line {
                print_status(&line);
                last_line = line;
            }
            next_probe = Instant::now() + RUNNING_HEALTH_EVERY;
        }
    }
}

/// How often exits are noticed.
fn ticker() -> tokio::time::Interval {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

/// Private dependencies, preflight, then every service. Returns the configuration in force, with
/// the addresses the OS chose for listeners configured with port 0 (also written to `args`).
async fn start(
    supervisor: &mut Supervisor,
    mut config: StackConfig,
    args: &mut UpArgs,
) -> Result<StackConfig, UpError> {
    let binaries = locate_binaries(args).await?;
    let logs_dir = config.logs_dir();

    // Everything about the services' configuration is checked before any process starts.
    let mut listeners = config.listeners(args, &STACK);
    if args.demo {
        listeners.extend(demo::listeners(args));
    }
    StackConfig::check_distinct(&listeners)?;
    for service in &STACK {
        for replica in 1..=replicas_of(service, args) {
            config.validate(service.name, &config.replica_env(service, args, replica))?;
        }
    }
    if args.demo {
        demo::validate(&config, args)?;
    }

    if args.spawn_deps {
        let private = deps::start(supervisor, &config.state_dir, &logs_dir).await?;
        config.database_url = private.database_url;
        config.nats_url = private.nats_url;
    }
    preflight::check_dependencies(&config.database_url, &config.nats_url).await?;
    if preflight::ensure_database(&config.database_url).await? {
        println!("created the database of {}", config.database_url);
    }
    check_admin_token(&config, args).await?;
    preflight::ports_in_use(&listeners)?;
    agent_token::prepare_dirs(&config.state_dir).map_err(|source| UpError::StateDir {
        path: config.state_dir.clone(),
        source,
    })?;

    for service in &STACK {
        let program = binaries
            .path(service.binary)
            .map(Path::to_path_buf)
            .unwrap_or_else(|| binaries.dir.join(service.binary));
        for replica in 1..=replicas_of(service, args) {
            // The first replica binds (and, with port 0, learns) the address the others share.
            let env = config.replica_env(service, args, replica);
            let name = replica_name(service.name, replica);
            let log_path = logs_dir.join(format!("{name}.log"));
            let from = log_len(&log_path);
            supervisor.start(ChildSpec {
                name,
                program: program.clone(),
                args: Vec::new(),
                env: env.set_os(),
                env_remove: env.remove,
                log_path: log_path.clone(),
                stop_signal: Signal::SIGTERM,
                run_as: None,
            })?;
            if replica == 1 {
                learn_main_listener(supervisor, &mut config, service, &log_path, from, args)
                    .await?;
            }
        }
    }
    if args.demo {
        demo::write_services(&config.state_dir)?;
        for spec in demo::child_specs(&config, args, &binaries, &logs_dir) {
            let (name, log_path) = (spec.name.clone(), spec.log_path.clone());
            let from = log_len(&log_path);
            supervisor.start(spec)?;
            if name == demo::PROVIDER_SIM && args.provider_sim_listen.port() == 0 {
                let addr =
                    announced(supervisor, &name, &log_path, from, args.ready_timeout).await?;
                supervisor.respec(&name, |spec| spec.args = demo::simulator_args(addr));
                args.provider_sim_listen = addr;
            }
        }
    }
    let pids: Vec<String> = supervisor
        .pids()
        .into_iter()
        .map(|(name, pid)| format!("{name} ({pid})"))
        .collect();
    println!("started {}", pids.join(", "));
    println!("logs: {}", logs_dir.display());
    Ok(config)
}

/// How many instances of `service` the stack runs: `--replicas` for the seven services, one host
/// agent.
pub fn replicas_of(service: &Service, args: &UpArgs) -> u8 {
    if service.in_fleet_health {
        args.replicas
    } else {
        1
    }
}

/// The process name (and log file stem) of one replica: the service's own name for the first,
/// `<service>-<n>` for the others.
pub fn replica_name(service: &str, replica: u8) -> String {
    if replica == 1 {
        service.to_owned()
    } else {
        format!("{service}-{replica}")
    }
}

/// The length of `path` now: what a process starting now writes comes after it.
fn log_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// For the relay or the gateway configured with port 0: the address the OS gave it, which the
/// configuration (the agent's relay URL, the gateway URL) takes and its restarts keep.
async fn learn_main_listener(
    supervisor: &mut Supervisor,
    config: &mut StackConfig,
    service: &Service,
    log_path: &Path,
    from: u64,
    args: &UpArgs,
) -> Result<(), UpError> {
    let (key, listen) = match service.name {
        "agent-relay" => (RELAY_LISTEN, &mut config.relay_listen),
        "gateway" => (GATEWAY_LISTEN, &mut config.gateway_listen),
        _ => return Ok(()),
    };
    if listen.port() != 0 {
        return Ok(());
    }
    let addr = announced(supervisor, service.name, log_path, from, args.ready_timeout).await?;
    supervisor.respec(service.name, |spec| spec.set_env(key, addr.to_string()));
    *listen = addr;
    println!("{}{addr}", listening_line(service.name));
    Ok(())
}

/// How pulsectl reports the address it learned for `service`: `<service> listening on `, then
/// the address. A detached pulsectl's parent reads the gateway's from the daemon's log.
pub fn listening_line(service: &str) -> String {
    format!("{service} listening on http://")
}

/// Waits for the address process `name` announces in its log (after byte `from`) once its
/// listener is bound (`pulse_config::listening`).
async fn announced(
    supervisor: &mut Supervisor,
    name: &str,
    log_path: &Path,
    from: u64,
    within: Duration,
) -> Result<std::net::SocketAddr, UpError> {
    let deadline = Instant::now() + within;
    let mut tick = ticker();
    loop {
        let text = std::fs::read(log_path).unwrap_or_default();
        let start = usize::try_from(from).unwrap_or(usize::MAX).min(text.len());
        if let Some(addr) = pulse_config::listening::find(&String::from_utf8_lossy(&text[start..]))
        {
            return Ok(addr);
        }
        let events = supervisor.poll();
        report_events(supervisor, events);
        if supervisor.gave_up().contains(&name) || Instant::now() >= deadline {
            let mut message = format!(
                "{name} did not report its listen address within {} s",
                within.as_secs()
            );
            append_log_tails(&mut message, supervisor, &[name.to_owned()]);
            return Err(UpError::NotReady(message));
        }
        tick.tick().await;
    }
}

async fn stop(supervisor: &mut Supervisor) {
    let running = supervisor.pids().len();
    if running == 0 {
        return;
    }
    println!("stopping {running} processes");
    for stopped in supervisor.stop_all(STOP_GRACE).await {
        if stopped.status.is_none() {
            println!(
                "{} did not stop within {} s and was killed",
                stopped.name,
                STOP_GRACE.as_secs()
            );
        }
    }
    println!("stack stopped");
}

fn report_events(supervisor: &Supervisor, events: Vec<Event>) {
    for event in events {
        match event {
            Event::Exited {
                name,
                status,
                restart_in,
                restart,
                limit,
            } => {
                let log = supervisor
                    .log_path(&name)
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                match restart_in {
                    Some(delay) => println!(
                        "{name} exited unexpectedly ({status}); restarting in {} s \
                         (restart {restart}/{limit}); log: {log}",
                        delay.as_secs()
                    ),
                    None => println!(
                        "{name} exited unexpectedly ({status}); giving up after {limit} \
                         restarts; log: {log}"
                    ),
                }
            }
            Event::Restarted { name, pid } => println!("{name} restarted (pid {pid})"),
            Event::RestartFailed { error, .. } => println!("{error}"),
        }
    }
}

fn not_ready_error(
    supervisor: &Supervisor,
    observation: &Observation,
    timeout: Duration,
) -> UpError {
    let not_ready: Vec<String> = observation
        .not_ready()
        .into_iter()
        .map(str::to_owned)
        .collect();
    let mut message = format!(
        "the stack was not ready after {} s; not ready: {}\n  gateway says: {}",
        timeout.as_secs(),
        not_ready.join(", "),
        observation.status_line()
    );
    let mut tails = not_ready;
    if matches!(observation, Observation::Unreachable(_)) {
        // Nothing is known about the others; the gateway's own log says why it is silent.
        tails = vec!["gateway".to_owned()];
    }
    append_log_tails(&mut message, supervisor, &tails);
    UpError::NotReady(message)
}

fn append_log_tails(message: &mut String, supervisor: &Supervisor, names: &[String]) {
    for name in names {
        let Some(path) = supervisor.log_path(name) else {
            continue;
        };
        let lines = tail(path, LOG_TAIL_LINES);
        message.push_str(&format!("\n\n--- last lines of {} ---", path.display()));
        if lines.is_empty() {
            message.push_str("\n(empty)");
        }
        for line in lines {
            message.push('\n');
            message.push_str(&line);
        }
    }
}

fn print_status(line: &str) {
    println!("[{}] {line}", chrono::Local::now().format("%H:%M:%S"));
}

/// Where to find the running stack.
pub fn print_ready(config: &StackConfig, detached: bool) {
    let token = config.admin_token_path();
    let state_dir = config.state_dir.display();
    println!();
    println!("Pulse is up: {}", config.gateway_url());
    let password = config.state_dir.join("admin-password");
    if password.is_file() {
        println!(
            "  web UI       {}/ (organization default, user admin, password in {})",
            config.gateway_url(),
            password.display()
        );
    } else {
        println!(
            "  web UI       {}/ (create a user with `pulsectl user create <name> --role admin`)",
            config.gateway_url()
        );
    }
    if token.is_file() {
        println!("  admin token  {}", token.display());
    } else {
        println!(
            "  admin token  {} (not written: the gateway writes it when it bootstraps an empty \
             database; recover it with `{}`)",
            token.display(),
            admin::recover_command(&config.state_dir)
        );
    }
    println!("  logs         {}", config.logs_dir().display());
    println!(
        "  agent        services in {}",
        agent_token::agent_dir(&config.state_dir)
            .join("services.d")
            .display()
    );
    if detached {
        println!("  stop         pulsectl down --state-dir {state_dir}");
    } else {
        println!("  stop         Ctrl-C, or pulsectl down --state-dir {state_dir}");
    }
    println!();
}
