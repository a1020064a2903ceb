//! `pulsectl up --demo`: the newcomer's first run. Besides the stack it starts the provider
//! simulator and a demo agent (commands enabled, no Docker) supervising three small demo
//! services; once the stack is ready it points the tenant's Patrol at the simulator (unless a
//! real provider is configured), sets Patrol mode `approval`, makes `demo-web` unhealthy and
//! requests a Patrol run, so Patrol finds the fault, investigates and waits for approval.
//!
//! The fault: each demo service is healthy while its marker file is absent and removes the
//! marker when it starts, like a wedged process that a restart clears. Creating the marker is the
//! fault; restarting the service (the fix Patrol can propose) removes it.
//!
//! A full run already in flight (the scheduler records a `startup` run as soon as the Patrol
//! route is ready) refuses the demo's request with `patrol_run_in_progress`. The demo then never
//! fails: a run still `queued` after the fault was seen starts after it, so the demo follows that
//! run until it starts; a run already `running` may have looked before the fault, so the demo
//! waits for it to end and asks again. Every wait has a deadline ([`IN_FLIGHT_WAIT`]); a run that
//! no runner takes ends `runner_unavailable` on the scheduler's take deadline, well within it.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use pulse_api::settings::SettingsView;
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use pulse_domain::ai_settings::ModelRoute;
use pulse_domain::patrol::run::{PatrolRun, RunStatus, RunType};
use pulse_domain::patrol::scope::RawRunRequest;
use pulse_domain::resource::Health;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::agent_token;
use crate::binaries::Binaries;
use crate::child::ChildSpec;
use crate::cli::UpArgs;
use crate::gateway_client::{ApiError, GatewayClient, resolve_token};
use crate::service::{HealthListener, Service};
use crate::stack_config::{StackConfig, StackConfigError};
use crate::text::wire_name;

/// Process name of the demo agent (log file, messages).
pub const DEMO_AGENT: &str = "demo-agent";
/// Process name of the provider simulator.
pub const PROVIDER_SIM: &str = "provider-sim";
/// The simulator's binary (built with the workspace, from the pulse-test-support package).
pub const PROVIDER_SIM_BINARY: &str = "pulse-provider-sim";
/// The demo agent's host id: its services are `service:pulse-demo:<name>`.
pub const DEMO_HOST_ID: &str = "pulse-demo";
pub const DEMO_SERVICES: [&str; 3] = ["demo-web", "demo-worker", "demo-cache"];
/// The service the demo makes unhealthy.
pub const FAULTY_SERVICE: &str = "demo-web";
/// The rule-following simulated model.
pub const SIMULATED_MODEL: &str = "sim:diligent";
/// The simulator speaks the OpenAI protocol under this provider id.
pub const SIMULATOR_PROVIDER: &str = "openai";
/// Printed whenever Patrol talks to the simulator.
pub const SIMULATED_BANNER: &str = "SIMULATED MODEL: pulse-provider-sim (no real AI)";
/// The simulator ignores keys; the provider wants one to be configured.
const SIMULATOR_KEY: &str = "pulse-demo-simulator-no-real-key";
/// Milliseconds between the demo agent's reports: short, so the demo moves quickly.
const DEMO_REPORT_INTERVAL_MS: u64 = 2_000;

/// The demo agent as a process of the stack (its own health listener, outside the fleet view).
pub const DEMO_AGENT_SERVICE: Service = Service {
    name: DEMO_AGENT,
    binary: "pulse-agent",
    health: HealthListener::Own,
    in_fleet_health: false,
};

const SETUP_STEP_TIMEOUT: Duration = Duration::from_secs(90);
const POLL_EVERY: Duration = Duration::from_millis(500);
/// How long the demo follows or waits for a full run that was in flight before its own request.
/// Longer than a run that no runner takes can stay queued with the default take deadline
/// (`patrol.take_deadline_ms` x (`patrol.max_redispatches` + 1), 6 minutes).
pub const IN_FLIGHT_WAIT: Duration = Duration::from_secs(600);

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("cannot prepare the demo directory {}: {source}", .path.display())]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot inject the fault (write {}): {source}", .path.display())]
    Fault {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("demo agent token: {0}")]
    Token(String),
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("timed out after {} s waiting for {what}", .after.as_secs())]
    Timeout { what: String, after: Duration },
}

/// Binaries the demo needs besides the stack's.
pub fn binaries() -> [&'static str; 1] {
    [PROVIDER_SIM_BINARY]
}

/// `<state-dir>/demo`: everything the demo writes.
pub fn demo_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("demo")
}

pub fn agent_dir(state_dir: &Path) -> PathBuf {
    demo_dir(state_dir).join("agent")
}

pub fn services_dir(state_dir: &Path) -> PathBuf {
    agent_dir(state_dir).join("services.d")
}

pub fn token_path(state_dir: &Path) -> PathBuf {
    agent_dir(state_dir).join("token")
}

/// The fault marker of demo service `name`.
pub fn fault_marker(state_dir: &Path, name: &str) -> PathBuf {
    demo_dir(state_dir)
        .join("faults")
        .join(format!("{name}.fault"))
}

/// The canonical resource id of demo service `name`.
pub fn service_resource_id(name: &str) -> String {
    format!("service:{DEMO_HOST_ID}:{name}")
}

/// The simulator's OpenAI base URL for a listener address.
pub fn simulator_base_url(listen: SocketAddr) -> String {
    let mut addr = listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    format!("http://{addr}/v1")
}

/// The supervised-service definition of demo service `name`: a shell that removes its marker
/// (a start clears the wedged state) and sleeps; healthy while the marker is absent.
pub fn service_definition(name: &str, marker: &Path) -> String {
    let marker = toml_string(&marker.display().to_string());
    format!(
        "name = \"{name}\"\n\
         command = \"sh\"\n\
         args = [\"-c\", \"rm -f -- \\\"$1\\\" && exec sleep 86400\", \"{name}\", {marker}]\n\
         labels = {{ pulse-demo = \"true\" }}\n\
         [restart]\npolicy = \"always\"\n\
         [health]\ntype = \"file-absent\"\npath = {marker}\ninterval_ms = 500\ntimeout_ms = 1000\n"
    )
}

/// A TOML basic string holding `text`.
fn toml_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Creates the demo directories (private: definitions run commands) and writes the three
/// service definitions.
pub fn write_services(state_dir: &Path) -> Result<(), DemoError> {
    let services = services_dir(state_dir);
    let faults = fault_marker(state_dir, FAULTY_SERVICE)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| demo_dir(state_dir));
    for dir in [&services, &faults] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| DemoError::Dir {
                path: dir.clone(),
                source,
            })?;
    }
    for name in DEMO_SERVICES {
        let path = services.join(format!("{name}.toml"));
        let definition = service_definition(name, &fault_marker(state_dir, name));
        std::fs::write(&path, definition).map_err(|source| DemoError::Dir { path, source })?;
    }
    Ok(())
}

/// The listeners the demo processes bind, by process name.
pub fn listeners(args: &UpArgs) -> Vec<(String, SocketAddr)> {
    vec![
        (DEMO_AGENT.to_owned(), args.demo_agent_health_listen),
        (PROVIDER_SIM.to_owned(), args.provider_sim_listen),
    ]
}

/// The demo agent's environment: the stack's, plus its own state, services, host id, commands
/// enabled and Docker off (the demo must not touch the host's containers).
pub fn agent_env(config: &StackConfig, args: &UpArgs) -> crate::stack_config::ServiceEnv {
    let mut env = config.service_env(&DEMO_AGENT_SERVICE, args);
    let state_dir = &config.state_dir;
    env.set.extend([
        (
            "PULSE_AGENT_STATE_DIR".to_owned(),
            agent_dir(state_dir).display().to_string(),
        ),
        (
            "PULSE_AGENT_SERVICES_DIR".to_owned(),
            services_dir(state_dir).display().to_string(),
        ),
        (
            "PULSE_AGENT_TOKEN_FILE".to_owned(),
            token_path(state_dir).display().to_string(),
        ),
        ("PULSE_AGENT_HOST_ID".to_owned(), DEMO_HOST_ID.to_owned()),
        ("PULSE_AGENT_ENABLE_COMMANDS".to_owned(), "true".to_owned()),
        ("PULSE_AGENT_NO_DOCKER".to_owned(), "true".to_owned()),
        (
            "PULSE_AGENT_INTERVAL_MS".to_owned(),
            DEMO_REPORT_INTERVAL_MS.to_string(),
        ),
    ]);
    // A token meant for the host agent must not become the demo agent's.
    env.remove.push("PULSE_AGENT_TOKEN".to_owned());
    env
}

/// Checks the demo agent's configuration the way the agent will load it.
pub fn validate(config: &StackConfig, args: &UpArgs) -> Result<(), StackConfigError> {
    config.validate(DEMO_AGENT, &agent_env(config, args))
}

/// The simulator and the demo agent, in start order.
pub fn child_specs(
    config: &StackConfig,
    args: &UpArgs,
    binaries: &Binaries,
    logs_dir: &Path,
) -> Vec<ChildSpec> {
    let program = |name: &str| {
        binaries
            .path(name)
            .map(Path::to_path_buf)
            .unwrap_or_else(|| binaries.dir.join(name))
    };
    let agent = agent_env(config, args);
    vec![
        ChildSpec {
            name: PROVIDER_SIM.to_owned(),
            program: program(PROVIDER_SIM_BINARY),
            args: simulator_args(args.provider_sim_listen),
            env: Vec::new(),
            env_remove: Vec::new(),
            log_path: logs_dir.join(format!("{PROVIDER_SIM}.log")),
            stop_signal: Signal::SIGTERM,
            run_as: None,
        },
        ChildSpec {
            name: DEMO_AGENT.to_owned(),
            program: program(DEMO_AGENT_SERVICE.binary),
            args: Vec::new(),
            env: agent.set_os(),
            env_remove: agent.remove,
            log_path: logs_dir.join(format!("{DEMO_AGENT}.log")),
            stop_signal: Signal::SIGTERM,
            run_as: None,
        },
    ]
}

/// The simulator's arguments: listening on `listen`, answering preflights.
pub fn simulator_args(listen: SocketAddr) -> Vec<OsString> {
    vec![
        "--listen".into(),
        listen.to_string().into(),
        "--answer-preflight".into(),
    ]
}

/// What the demo configured Patrol with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelChoice {
    /// The provider simulator.
    Simulator,
    /// The route the operator configured (`provider:model`), kept.
    Configured(String),
}

/// The `PUT /api/settings/ai` body for the current settings view: mode `approval`, and the
/// simulator as the model unless a real route is configured (a route that is not simulated,
/// whose provider has a key or an address).
pub fn settings_patch(current: &SettingsView, simulator_base_url: &str) -> (Value, ModelChoice) {
    let route = [
        ("patrol_model", &current.patrol_model),
        ("model", &current.model),
    ]
    .into_iter()
    .find_map(|(field, text)| ModelRoute::parse(field, text.as_deref()?).ok())
    .filter(|route| !route.is_simulated());
    if let Some(route) = route {
        let usable = current
            .providers
            .get(route.provider)
            .is_some_and(|provider| provider.configured || provider.base_url.is_some());
        if usable {
            return (
                json!({"autonomy_level": "approval"}),
                ModelChoice::Configured(route.to_string()),
            );
        }
    }
    let simulated = format!("{SIMULATOR_PROVIDER}:{SIMULATED_MODEL}");
    let mut provider = json!({"base_url": simulator_base_url});
    // An operator's own key for the provider stays; the simulator accepts any.
    let configured = current
        .providers
        .get(SIMULATOR_PROVIDER)
        .is_some_and(|provider| provider.configured);
    if !configured {
        provider["api_key"] = json!(SIMULATOR_KEY);
    }
    (
        json!({
            "autonomy_level": "approval",
            "model": simulated,
            "patrol_model": simulated,
            "providers": {SIMULATOR_PROVIDER: provider},
        }),
        ModelChoice::Simulator,
    )
}

/// What the demo set up, for the next-steps message.
#[derive(Debug, Clone)]
pub struct DemoStarted {
    pub model: ModelChoice,
    pub preflight: String,
    pub run_id: String,
}

/// After the stack is ready: the demo agent's token, the AI settings, the fault and the Patrol
/// run. Prints each step; the stack keeps running whatever happens here.
pub async fn set_up(config: StackConfig, args: UpArgs) {
    println!("demo: setting up (SIGINT stops the stack at any time)");
    match run_setup(&config, &args).await {
        Ok(started) => print_next_steps(&config, &started),
        Err(error) => println!(
            "demo: setup failed: {error}\n  the stack keeps running; logs: {}",
            config.logs_dir().display()
        ),
    }
}

async fn run_setup(config: &StackConfig, args: &UpArgs) -> Result<DemoStarted, DemoError> {
    let state_dir = &config.state_dir;
    let gateway_url = config.gateway_url();
    if !agent_token::present_at(&token_path(state_dir)) {
        agent_token::issue(
            state_dir,
            &gateway_url,
            &token_path(state_dir),
            "pulsectl demo agent",
            &[Scope::AgentReport, Scope::AgentExec],
        )
        .await
        .map_err(DemoError::Token)?;
        println!(
            "demo: agent token written to {}",
            token_path(state_dir).display()
        );
    }
    let admin = resolve_token(None, state_dir)?;
    let client = GatewayClient::new(&gateway_url, admin)?;

    let api = client.api();
    let current = api.ai_settings().await.map_err(ApiError::from)?;
    let (patch, model) = settings_patch(&current, &simulator_base_url(args.provider_sim_listen));
    api.update_ai_settings(&patch)
        .await
        .map_err(ApiError::from)?;
    match &model {
        ModelChoice::Simulator => {
            println!("demo: {SIMULATED_BANNER}");
            println!(
                "demo: Patrol uses {SIMULATOR_PROVIDER}:{SIMULATED_MODEL} at {}; configure a real \
                 provider in the AI settings to use a real model",
                simulator_base_url(args.provider_sim_listen)
            );
        }
        ModelChoice::Configured(route) => {
            println!("demo: Patrol uses the configured model {route}");
        }
    }
    println!("demo: Patrol mode set to approval (every fix waits for a human)");

    let preflight = api.patrol_preflight().await.map_err(ApiError::from)?;
    let preflight_state = wire_name(&preflight.preflight_state);
    println!("demo: provider preflight {preflight_state}");

    let resource = service_resource_id(FAULTY_SERVICE);
    wait_for_health(&client, &resource, Health::Healthy).await?;
    let marker = fault_marker(state_dir, FAULTY_SERVICE);
    std::fs::write(&marker, "injected by pulsectl up --demo\n").map_err(|source| {
        DemoError::Fault {
            path: marker.clone(),
            source,
        }
    })?;
    println!(
        "demo: injected a fault: {FAULTY_SERVICE} is wedged (marker {})",
        marker.display()
    );
    wait_for_health(&client, &resource, Health::Unhealthy).await?;

    let run_id = start_run(&client).await?;
    Ok(DemoStarted {
        model,
        preflight: preflight_state,
        run_id,
    })
}

/// A full run that was queued or running when the demo asked for its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlightRun {
    pub id: String,
    pub trigger: String,
    /// `true`: `running` (it may have looked before the fault); `false`: `queued`.
    pub running: bool,
}

/// The oldest full run of `GET /api/ai/patrol/runs` that is `queued` or `running`.
pub fn in_flight_full_run(runs: &[PatrolRun]) -> Option<InFlightRun> {
    runs.iter()
        .rev()
        .filter(|run| run.run_type == RunType::Full)
        .find_map(|run| {
            let running = match run.status {
                RunStatus::Queued => false,
                RunStatus::Running => true,
                _ => return None,
            };
            Some(InFlightRun {
                id: run.id.to_string(),
                trigger: wire_name(&run.trigger_reason),
                running,
            })
        })
}

/// Where a followed run stands (`GET /api/ai/patrol/runs/{id}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Followed {
    /// Not started yet.
    Queued,
    /// Started (and maybe ended since): it looked at the resources after it was followed.
    Started,
    /// Ended without ever starting (e.g. no runner took it), in this status.
    EndedUnstarted(String),
}

pub fn followed(run: &PatrolRun) -> Followed {
    match run.status {
        RunStatus::Queued => Followed::Queued,
        RunStatus::Running => Followed::Started,
        _ if run.started_at.is_some() => Followed::Started,
        status => Followed::EndedUnstarted(wire_name(&status)),
    }
}

/// Requests the demo's Patrol run. When a full run is already in flight it follows a queued
/// one until it starts (then that run is the demo's), or waits for a running one to end and
/// asks again, all within [`IN_FLIGHT_WAIT`]. Returns the id of the run that looks at the fault.
async fn start_run(client: &GatewayClient) -> Result<String, DemoError> {
    let deadline = Instant::now() + IN_FLIGHT_WAIT;
    loop {
        match client
            .api()
            .run_patrol(&RawRunRequest::default())
            .await
            .map_err(ApiError::from)
        {
            Ok(accepted) => {
                let run_id = accepted.accepted.run_id.to_string();
                println!("demo: Patrol run {run_id} requested");
                return Ok(run_id);
            }
            Err(ApiError::Api { code, .. })
                if ErrorCode::from_code(&code) == Some(ErrorCode::PatrolRunInProgress) => {}
            Err(error) => return Err(error.into()),
        }
        let list = client
            .api()
            .patrol_runs(None)
            .await
            .map_err(ApiError::from)?;
        match in_flight_full_run(&list.runs) {
            // It ended between the refusal and the list: ask again.
            None => {}
            Some(run) if !run.running => {
                println!(
                    "demo: Patrol run {} ({}) is already queued; it starts after the fault, so the \
                     demo follows it",
                    run.id, run.trigger
                );
                match follow(client, &run.id, deadline, |f| f != &Followed::Queued).await? {
                    Followed::Started => {
                        println!("demo: Patrol run {} started", run.id);
                        return Ok(run.id);
                    }
                    Followed::EndedUnstarted(status) => println!(
                        "demo: Patrol run {} ended {status} before it started; requesting a new \
                         run",
                        run.id
                    ),
                    Followed::Queued => {}
                }
            }
            Some(run) => {
                println!(
                    "demo: Patrol run {} ({}) was already running before the fault; waiting for \
                     it to end",
                    run.id, run.trigger
                );
                wait_for_end(client, &run.id, deadline).await?;
                println!(
                    "demo: Patrol run {} ended; requesting the demo's run",
                    run.id
                );
            }
        }
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: "the Patrol run in flight to make way for the demo's".to_owned(),
                after: IN_FLIGHT_WAIT,
            });
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Polls run `id` until `done` holds for where it stands, or `deadline`.
async fn follow(
    client: &GatewayClient,
    id: &str,
    deadline: Instant,
    done: impl Fn(&Followed) -> bool,
) -> Result<Followed, DemoError> {
    loop {
        if let Ok(run) = client.api().patrol_run(id).await {
            let at = followed(&run);
            if done(&at) {
                return Ok(at);
            }
        }
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: format!("Patrol run {id} (already in flight) to start or end"),
                after: IN_FLIGHT_WAIT,
            });
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Polls run `id` until it ended, or `deadline`.
async fn wait_for_end(
    client: &GatewayClient,
    id: &str,
    deadline: Instant,
) -> Result<(), DemoError> {
    loop {
        let run = client.api().patrol_run(id).await;
        if run.is_ok_and(|run| !matches!(run.status, RunStatus::Queued | RunStatus::Running)) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: format!("Patrol run {id} (already running) to end"),
                after: IN_FLIGHT_WAIT,
            });
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Polls the resource until its health is `health`.
async fn wait_for_health(
    client: &GatewayClient,
    resource: &str,
    health: Health,
) -> Result<(), DemoError> {
    let deadline = Instant::now() + SETUP_STEP_TIMEOUT;
    loop {
        let seen = client.api().resource(resource).await;
        if seen.is_ok_and(|r| r.health == health) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                what: format!("{resource} to report {}", health.as_str()),
                after: SETUP_STEP_TIMEOUT,
            });
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

fn print_next_steps(config: &StackConfig, started: &DemoStarted) {
    let gateway = config.gateway_url();
    let token = config.admin_token_path();
    println!();
    println!("Demo running: Patrol is looking at an injected fault on {FAULTY_SERVICE}.");
    if started.model == ModelChoice::Simulator {
        println!("  {SIMULATED_BANNER}");
    }
    println!("  run {}, preflight {}", started.run_id, started.preflight);
    println!(
        "  token      export PULSE_GATEWAY_URL={gateway} PULSE_TOKEN=\"$(cat {})\"",
        token.display()
    );
    println!("  findings   pulsectl findings list");
    println!("  approvals  pulsectl approvals list");
    println!("  approve    pulsectl approvals approve <id> --reason \"checked the finding\"");
    println!(
        "  with curl  curl -H \"Authorization: Bearer $PULSE_TOKEN\" {gateway}/api/actions/pending"
    );
    println!(
        "             curl -X POST -H \"Authorization: Bearer $PULSE_TOKEN\" -H 'Content-Type: \
         application/json' -d '{{\"outcome\":\"approved\",\"reason\":\"demo\"}}' \
         {gateway}/api/actions/<id>/decision"
    );
    println!(
        "  the fix    a restart of {FAULTY_SERVICE} clears the fault; after you approve it, the \
         verifier checks it independently"
    );
    println!();
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};
    use pulse_domain::patrol::run::{RunId, TriggerReason};

    use super::*;

    /// The settings view with `patrol_model` and the openai provider as `openai`.
    fn view(patrol_model: Option<&str>, openai: Value) -> SettingsView {
        let mut openai = openai;
        for field in ["configured", "key_source", "base_url"] {
            if openai.get(field).is_none() {
                openai[field] = if field == "configured" {
                    json!(false)
                } else {
                    Value::Null
                };
            }
        }
        serde_json::from_value(json!({
            "version": 1,
            "updated_at": null,
            "updated_by": null,
            "providers": {
                "openai": openai,
                "anthropic": {"configured": true, "key_source": "settings", "base_url": null},
            },
            "model": null,
            "chat_model": null,
            "patrol_model": patrol_model,
            "auto_fix_model": null,
            "patrol_model_simulated": false,
            "patrol_interval_minutes": 15,
            "autonomy_level": "monitor",
            "autopilot_acknowledgement": null,
            "autopilot_acknowledgement_version": 1,
            "alert_triggers": {"enabled": false, "min_severity": "warning", "alert_types": []},
            "budgets": {"daily_usd": null, "monthly_usd": null, "daily_tokens": null,
                        "monthly_tokens": null},
            "patrol_enabled": true,
            "patrol_preflight": null,
            "preflight_state": "not_run",
        }))
        .expect("a settings view")
    }

    #[test]
    fn without_a_real_route_patrol_is_pointed_at_the_simulator() {
        let sim = "http://127.0.0.1:7667/v1";
        for current in [
            view(None, json!({"configured": false, "base_url": null})),
            // A route to a provider with neither key nor address cannot work.
            view(
                Some("openai:gpt-4.1-mini"),
                json!({"configured": false, "base_url": null}),
            ),
            // A previous demo's route is the simulator again.
            view(
                Some("openai:sim:diligent"),
                json!({"configured": true, "base_url": sim}),
            ),
        ] {
            let (patch, choice) = settings_patch(&current, sim);
            assert_eq!(choice, ModelChoice::Simulator, "{current:?}");
            assert_eq!(patch["autonomy_level"], "approval");
            assert_eq!(patch["patrol_model"], "openai:sim:diligent");
            assert_eq!(patch["providers"]["openai"]["base_url"], sim);
        }
        // An operator's key for the provider is never overwritten.
        let (patch, _) = settings_patch(
            &view(
                Some("openai:sim:diligent"),
                json!({"configured": true, "base_url": sim}),
            ),
            sim,
        );
        assert!(
            patch["providers"]["openai"].get("api_key").is_none(),
            "{patch}"
        );
        let (patch, _) = settings_patch(&view(None, json!({"configured": false})), sim);
        assert_eq!(patch["providers"]["openai"]["api_key"], SIMULATOR_KEY);
    }

    #[test]
    fn a_real_route_is_kept_and_only_the_mode_is_set() {
        let current = view(
            Some("anthropic:claude-sonnet-4"),
            json!({"configured": false}),
        );
        let (patch, choice) = settings_patch(&current, "http://127.0.0.1:1/v1");
        assert_eq!(
            choice,
            ModelChoice::Configured("anthropic:claude-sonnet-4".to_owned())
        );
        assert_eq!(patch, json!({"autonomy_level": "approval"}));
    }

    #[test]
    fn demo_services_heal_on_start_and_fail_while_their_marker_exists() {
        let marker = Path::new("/state dir/demo/faults/demo-web.fault");
        let definition = service_definition("demo-web", marker);
        let parsed: toml::Value = toml::from_str(&definition).unwrap();
        assert_eq!(parsed["name"].as_str(), Some("demo-web"));
        assert_eq!(parsed["health"]["type"].as_str(), Some("file-absent"));
        assert_eq!(
            parsed["health"]["path"].as_str(),
            Some("/state dir/demo/faults/demo-web.fault")
        );
        let args: Vec<&str> = parsed["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(toml::Value::as_str)
            .collect();
        // The marker is passed as an argument, never spliced into the script.
        assert_eq!(args[0], "-c");
        assert!(args[1].starts_with("rm -f -- \"$1\""), "{}", args[1]);
        assert_eq!(args[3], "/state dir/demo/faults/demo-web.fault");
        assert_eq!(parsed["restart"]["policy"].as_str(), Some("always"));
    }

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    fn id(n: u8) -> RunId {
        format!("0193a1b2-0000-7000-8000-00000000000{n}")
            .parse()
            .unwrap()
    }

    fn run(n: u8, run_type: RunType, status: RunStatus, trigger: TriggerReason) -> PatrolRun {
        let mut run = PatrolRun::queued(id(n), trigger, run_type, at("2026-11-29T12:00:00Z"));
        run.status = status;
        run
    }

    #[test]
    fn the_oldest_full_run_in_flight_is_the_one_to_follow_or_wait_for() {
        use RunStatus::*;
        use RunType::*;
        use TriggerReason::*;
        // Newest first, as the API lists them.
        let list = [
            run(4, Scoped, Queued, AlertFired),
            run(3, Full, Queued, Manual),
            run(2, Full, Running, Startup),
            run(1, Full, Error, Startup),
        ];
        assert_eq!(
            in_flight_full_run(&list),
            Some(InFlightRun {
                id: id(2).to_string(),
                trigger: "startup".to_owned(),
                running: true
            })
        );
        let list = [
            run(2, Full, Queued, Startup),
            run(1, Full, Healthy, Scheduled),
        ];
        assert_eq!(
            in_flight_full_run(&list),
            Some(InFlightRun {
                id: id(2).to_string(),
                trigger: "startup".to_owned(),
                running: false
            })
        );
        // Only a scoped run, or nothing in flight: ask again.
        assert_eq!(
            in_flight_full_run(&[
                run(4, Scoped, Running, AlertFired),
                run(1, Full, IssuesFound, Startup),
            ]),
            None
        );
        assert_eq!(in_flight_full_run(&[]), None);
    }

    #[test]
    fn a_followed_run_counts_once_it_started_even_if_it_ended_between_polls() {
        let run = |status: RunStatus, started: bool| {
            let mut run = run(1, RunType::Full, status, TriggerReason::Manual);
            run.started_at = started.then(|| at("2026-11-29T12:00:01Z"));
            run
        };
        assert_eq!(followed(&run(RunStatus::Queued, false)), Followed::Queued);
        assert_eq!(followed(&run(RunStatus::Running, true)), Followed::Started);
        assert_eq!(
            followed(&run(RunStatus::IssuesFound, true)),
            Followed::Started
        );
        assert_eq!(
            followed(&run(RunStatus::Error, false)),
            Followed::EndedUnstarted("error".to_owned())
        );
    }

    #[test]
    fn layout_and_ids() {
        let state = Path::new("/s");
        assert_eq!(token_path(state), Path::new("/s/demo/agent/token"));
        assert_eq!(services_dir(state), Path::new("/s/demo/agent/services.d"));
        assert_eq!(
            service_resource_id("demo-web"),
            "service:pulse-demo:demo-web"
        );
        assert_eq!(
            simulator_base_url("0.0.0.0:7667".parse().unwrap()),
            "http://127.0.0.1:7667/v1"
        );
        let route = format!("{SIMULATOR_PROVIDER}:{SIMULATED_MODEL}");
        assert!(ModelRoute::parse("model", &route).unwrap().is_simulated());
    }
}
