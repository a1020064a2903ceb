//! One live run of one scenario, and suites of them.
//!
//! A run: take the lab's inventory; provision the resources; start the lab's own collecting
//! agent; wait for the baseline (oracle) and for Pulse to show every resource through normal
//! collection; inject the faults and wait until the oracle sees each past its threshold and
//! Pulse shows it; request one scoped Patrol run on exactly the lab's resources and read its
//! record and findings; check every fault is still in place; follow the investigation and the
//! governed action when the track has them; revert; stop the agent; have Pulse forget its host
//! (`DELETE /api/agents/{id}`); clean up twice; take the inventory again; score. Every wait has a deadline; a failure anywhere becomes the run's
//! `run_error` (a hard failure) and teardown still runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use pulse_api::actions::DecisionOutcome;
use pulse_api::findings::{InvestigationRecord, InvestigationStatus};
use pulse_api::settings::{ProviderView, SettingsView};
use pulse_domain::patrol::run::{PatrolRun, RunId};
use pulse_domain::resource::{Health, ResourceStatus};

use crate::catalogue::{self, Entry};
use crate::children::{self, Supervised};
use crate::cli::{LiveArgs, LiveCommon, Outcome, Refusal, SuiteArgs};
use crate::client::{ClientError, PulseClient};
use crate::lab::docker::DockerLab;
use crate::lab::process::ProcessLab;
use crate::lab::proxmox::ProxmoxLab;
use crate::lab::{self, Lab, LabError, Provisioned};
use crate::manifest::{Decision, LabDriver, Manifest, PatrolMode, Predicate, RepeatProfile, Track};
use crate::observation::{
    FaultOracle, InvestigationObservation, ModelIdentity, ObservedFinding, RemediationObservation,
    ResourceBinding, RouteClass, RunObservation, TeardownObservation, Timings, ToolExchange,
};
use crate::report::{self, RunReport};
use crate::scorer;

/// How often waits poll.
const POLL: Duration = Duration::from_millis(500);
/// A predicate without its own timeout.
const DEFAULT_PREDICATE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a run request keeps being retried while Patrol is busy or not ready yet.
const ACCEPT_DEADLINE: Duration = Duration::from_secs(120);
/// How long a run request waits for Patrol's own runs to end (see [`await_patrol_idle`]).
const IDLE_DEADLINE: Duration = Duration::from_secs(900);
/// Investigation track default when the manifest sets no `investigation_timeout`.
const DEFAULT_INVESTIGATION_TIMEOUT: Duration = Duration::from_secs(300);
/// The simulator accepts any key; the provider wants one configured.
const SIMULATOR_KEY: &str = "qualification-simulator-no-real-key";
/// The provider id the simulator speaks as.
const SIMULATOR_PROVIDER: &str = "openai";

/// What every run of a suite shares.
pub struct Session {
    pub common: LiveCommon,
    pub client: PulseClient,
    pub pulse_version: String,
    pub relay_url: String,
    pub model: ModelIdentity,
    pub harness_revision: String,
    pub harness_dirty: bool,
    simulator: Option<Supervised>,
    /// The settings to put back when the suite ends.
    restore: Option<Value>,
}

fn refusal_from_client(error: ClientError) -> Refusal {
    Refusal::new(
        "pulse_unavailable",
        format!("{error}; check --pulse-url and the token"),
    )
}

/// The safety gates every live mode checks before touching anything.
pub fn check_safety(common: &LiveCommon, manifests: &[&Manifest]) -> Result<(), Refusal> {
    if !common.authorize_live_faults {
        return Err(Refusal::new(
            "missing_safety_flag",
            "live runs inject real faults into the lab: pass --authorize-live-faults to permit it",
        ));
    }
    match LabDriver::from(common.lab) {
        LabDriver::Docker => {
            let Some(host) = &common.docker_host else {
                return Err(Refusal::new(
                    "missing_lab_target",
                    "the Docker lab needs an explicit --docker-host (unix:///var/run/docker.sock \
                     or tcp://...); there is no implicit engine",
                ));
            };
            let local = host.starts_with("unix://")
                || host.starts_with("tcp://127.")
                || host.starts_with("tcp://localhost");
            if !local && !common.allow_shared_host {
                return Err(Refusal::new(
                    "shared_host_not_allowed",
                    format!(
                        "{host} is not this machine: pass --allow-shared-host, and only for a \
                         disposable lab host"
                    ),
                ));
            }
            if !local {
                if let Some(m) = manifests.iter().find(|m| !m.lab.shared_host_ok) {
                    return Err(Refusal::new(
                        "shared_host_not_allowed",
                        format!("scenario {} does not allow a shared host", m.id),
                    ));
                }
            }
        }
        LabDriver::Process | LabDriver::Proxmox => {
            if common.docker_host.is_some() {
                return Err(Refusal::new(
                    "invalid_argument",
                    "--docker-host belongs to --lab docker",
                ));
            }
        }
        LabDriver::Replay => {}
    }
    for m in manifests {
        if m.lab.driver != LabDriver::from(common.lab) {
            return Err(Refusal::new(
                "invalid_manifest",
                format!(
                    "scenario {} is for the {} lab, not {}",
                    m.id,
                    m.lab.driver.as_str(),
                    LabDriver::from(common.lab).as_str()
                ),
            ));
        }
    }
    if common.repeat_profile == RepeatProfile::Qualification {
        if let Some(n) = common.repeat {
            let floor = manifests
                .iter()
                .map(|m| m.repeat.qualification)
                .max()
                .unwrap_or(0);
            if n < floor {
                return Err(Refusal::new(
                    "repeat_below_qualification",
                    format!(
                        "the qualification profile runs each scenario its manifest's count ({floor}); \
                         {n} runs cannot reach the 95% Wilson floor"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The git revision of the harness checkout, and whether it has uncommitted changes.
fn harness_revision() -> (String, bool) {
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let revision = run(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".to_owned());
    let dirty = run(&["status", "--porcelain", "--untracked-files=no"])
        .map(|s| !s.is_empty())
        .unwrap_or(true);
    (revision, dirty)
}

/// How a route is paid for: the simulator; a local model (Ollama, or an OpenAI-compatible
/// server the tenant's settings put on this machine or a private address); else a metered API.
fn route_class(route: &str, providers: &BTreeMap<String, ProviderView>) -> RouteClass {
    if route.starts_with("sim:") || route.contains(":sim:") {
        return RouteClass::Simulator;
    }
    let provider = route.split(':').next().unwrap_or_default();
    if provider == "ollama" {
        return RouteClass::Local;
    }
    let base = providers
        .get(provider)
        .and_then(|p| p.base_url.as_deref())
        .unwrap_or_default();
    let host = base
        .split("://")
        .nth(1)
        .unwrap_or_default()
        .split(['/', ':'])
        .next()
        .unwrap_or_default();
    let private = host == "localhost"
        || host.starts_with("127.")
        || host.starts_with("10.")
        || host.starts_with("192.168.")
        || host.starts_with('[');
    if private {
        RouteClass::Local
    } else {
        RouteClass::HostedApi
    }
}

impl Session {
    pub async fn open(common: LiveCommon) -> Result<Self, Refusal> {
        let token = match (&common.token, &common.token_file) {
            (Some(t), _) => t.clone(),
            (None, Some(path)) => std::fs::read_to_string(path)
                .map(|t| t.trim().to_owned())
                .map_err(|e| {
                    Refusal::new(
                        "missing_token",
                        format!("cannot read the token file {}: {e}", path.display()),
                    )
                })?,
            (None, None) => {
                return Err(Refusal::new(
                    "missing_token",
                    "pass an admin API token with --token, PULSE_QUALIFY_TOKEN or --token-file",
                ));
            }
        };
        let client = PulseClient::new(&common.pulse_url, &token).map_err(refusal_from_client)?;
        let pulse_version = client.version().await.map_err(refusal_from_client)?;
        if let Some(expected) = &common.expected_pulse_version {
            if expected != &pulse_version {
                return Err(Refusal::new(
                    "pulse_version_mismatch",
                    format!("Pulse reports version {pulse_version}, not {expected}"),
                ));
            }
        }
        let relay_url = match &common.relay_url {
            Some(url) => url.clone(),
            None => default_relay(&common.pulse_url),
        };
        let (harness_revision, harness_dirty) = harness_revision();
        let current = client.ai_settings().await.map_err(refusal_from_client)?;
        let mut session = Self {
            model: ModelIdentity {
                route: String::new(),
                route_class: RouteClass::HostedApi,
            },
            common,
            client,
            pulse_version,
            relay_url,
            harness_revision,
            harness_dirty,
            simulator: None,
            restore: None,
        };
        session.configure_route(&current).await?;
        Ok(session)
    }

    /// Points the tenant's Patrol at the requested route for the suite.
    async fn configure_route(&mut self, current: &SettingsView) -> Result<(), Refusal> {
        let configured = current
            .patrol_model
            .clone()
            .or_else(|| current.model.clone())
            .unwrap_or_default();
        let Some(model) = self.common.model.clone() else {
            if configured.is_empty() {
                return Err(Refusal::new(
                    "no_model_route",
                    "the tenant has no Patrol model configured: pass --model provider:model or \
                     sim:<behaviour>",
                ));
            }
            self.model = ModelIdentity {
                route_class: route_class(&configured, &current.providers),
                route: configured,
            };
            return Ok(());
        };
        let mut restore = json!({
            "patrol_model": current.patrol_model,
            "model": current.model,
            "autonomy_level": current.autonomy_level,
        });
        let simulator_provider = current.providers.get(SIMULATOR_PROVIDER);
        let patch = if let Some(behaviour) = model.strip_prefix("sim:") {
            let binary = self
                .common
                .provider_sim_binary
                .clone()
                .unwrap_or_else(|| children::sibling_binary("pulse-provider-sim"));
            let (sim, base) = children::start_simulator(&binary)
                .await
                .map_err(|e| Refusal::new("simulator_unavailable", e.to_string()))?;
            self.simulator = Some(sim);
            let route = format!("{SIMULATOR_PROVIDER}:sim:{behaviour}");
            restore["providers"] = json!({SIMULATOR_PROVIDER: {
                "base_url": simulator_provider.and_then(|p| p.base_url.clone())
            }});
            let mut provider = json!({"base_url": format!("{base}/v1")});
            if !simulator_provider.is_some_and(|p| p.configured) {
                provider["api_key"] = json!(SIMULATOR_KEY);
            }
            self.model = ModelIdentity {
                route: route.clone(),
                route_class: RouteClass::Simulator,
            };
            json!({"model": route, "patrol_model": route, "providers": {SIMULATOR_PROVIDER: provider}})
        } else {
            self.model = ModelIdentity {
                route_class: route_class(&model, &current.providers),
                route: model.clone(),
            };
            json!({"patrol_model": model})
        };
        // Nulls are not settings: leave out what was not set.
        if let Some(map) = restore.as_object_mut() {
            map.retain(|_, v| !v.is_null());
        }
        self.restore = Some(restore);
        self.client
            .update_ai_settings(&patch)
            .await
            .map_err(|e| Refusal::new("route_not_accepted", e.to_string()))?;
        Ok(())
    }

    async fn set_mode(&self, mode: PatrolMode) -> Result<(), ClientError> {
        self.client
            .update_ai_settings(&json!({"autonomy_level": mode.autonomy_level()}))
            .await
            .map(|_| ())
    }

    /// Puts the settings back and stops the simulator.
    pub async fn close(mut self) {
        if let Some(restore) = self.restore.take() {
            if let Err(e) = self.client.update_ai_settings(&restore).await {
                eprintln!("patrol-qualify: could not restore the AI settings: {e}");
            }
        }
        if let Some(sim) = self.simulator.take() {
            sim.stop().await;
        }
    }
}

fn default_relay(pulse_url: &str) -> String {
    let rest = pulse_url
        .trim_end_matches('/')
        .rsplit_once(':')
        .map(|(host, _)| host.to_owned())
        .unwrap_or_else(|| pulse_url.to_owned());
    format!("{rest}:7656")
}

fn predicate_timeout(p: &Predicate) -> Duration {
    p.timeout
        .as_deref()
        .and_then(crate::duration::parse)
        .unwrap_or(DEFAULT_PREDICATE_TIMEOUT)
}

/// Polls `predicate` until it holds or its timeout passes; the last value read.
async fn await_predicate(lab: &Lab, predicate: &Predicate) -> Result<Value, String> {
    let deadline = Instant::now() + predicate_timeout(predicate);
    loop {
        let last = match lab.probe(predicate).await {
            Ok(value) if lab::holds(predicate.operator, &value, &predicate.value) => {
                return Ok(value);
            }
            Ok(value) => value,
            Err(e) => json!(e.to_string()),
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "{} on {} stayed {} (wanted {:?} {})",
                predicate.probe, predicate.target, last, predicate.operator, predicate.value
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn holds_now(lab: &Lab, predicate: &Predicate) -> bool {
    lab.probe(predicate)
        .await
        .is_ok_and(|v| lab::holds(predicate.operator, &v, &predicate.value))
}

fn random_token() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyz23456789";
    let mut rng = rand::rng();
    (0..8)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// State a run carries into teardown whatever happened.
struct Live {
    lab: Lab,
    agent: Option<Supervised>,
    agent_token_id: Option<String>,
    /// The lab agent's host id, once it was started: forgotten at teardown.
    agent_host_id: Option<String>,
    /// The Proxmox lab's connection, once added: removed at teardown.
    connection_id: Option<String>,
}

/// Runs `entry` once. Never fails: what went wrong is in the report.
pub async fn run_once(session: &Session, entry: &Entry, repeat_index: u32) -> RunReport {
    let manifest = &entry.manifest;
    let started_at = chrono::Utc::now();
    let token = random_token();
    let t0 = Instant::now();
    let mut observation = RunObservation {
        scenario_id: manifest.id.clone(),
        lab: manifest.lab.driver,
        repeat_index,
        patrol_run_id: None,
        patrol_run_status: None,
        resources: Vec::new(),
        findings: Vec::new(),
        tool_exchanges: Vec::new(),
        ai_analysis: None,
        tool_calls_recovered: 0,
        input_tokens: 0,
        output_tokens: 0,
        cost_usd: None,
        faults: Vec::new(),
        baseline_held: false,
        investigation: None,
        remediation: None,
        teardown: TeardownObservation {
            first_pass_actions: Vec::new(),
            second_pass_actions: Vec::new(),
            inventory_diff: Vec::new(),
            predicates_held: false,
            errors: Vec::new(),
        },
        timings: Timings::default(),
        run_error: None,
    };
    let lab = match new_lab(session, manifest, &token) {
        Ok(lab) => lab,
        Err(e) => {
            observation.run_error = Some(e.to_string());
            return finish(session, entry, observation, started_at);
        }
    };
    let mut live = Live {
        lab,
        agent: None,
        agent_token_id: None,
        agent_host_id: None,
        connection_id: None,
    };
    let mut before = None;
    // SIGINT or SIGTERM stops the run where it is; the lab is still torn down and the run
    // reported, and the suite stops after it.
    let outcome = tokio::select! {
        outcome = execute(
            session,
            manifest,
            &token,
            &mut live,
            &mut observation,
            &mut before,
            t0,
        ) => outcome,
        () = interrupted() => Err("interrupted by a signal: the lab was torn down".to_owned()),
    };
    if let Err(e) = outcome {
        observation.run_error = Some(e);
    }
    let teardown_start = Instant::now();
    teardown(session, manifest, &mut live, &mut observation, before).await;
    observation.timings.teardown_ms = teardown_start.elapsed().as_millis() as u64;
    observation.timings.end_to_end_ms = t0.elapsed().as_millis() as u64;
    finish(session, entry, observation, started_at)
}

/// Set once a signal interrupted a run: the suite runs nothing more.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Resolves on SIGINT or SIGTERM (and marks the suite interrupted); never resolves when the
/// handlers cannot be installed.
async fn interrupted() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    eprintln!("patrol-qualify: interrupted; tearing the lab down");
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn new_lab(session: &Session, manifest: &Manifest, token: &str) -> Result<Lab, LabError> {
    match manifest.lab.driver {
        LabDriver::Process => {
            let base = session
                .common
                .lab_root
                .clone()
                .unwrap_or_else(std::env::temp_dir);
            // A neutral directory name: services' paths are visible to the model.
            let root = base.join(format!("srv-{token}"));
            Ok(Lab::Process(Box::new(ProcessLab::new(
                manifest.clone(),
                root,
                token.to_owned(),
            )?)))
        }
        LabDriver::Docker => {
            let host = session.common.docker_host.clone().ok_or_else(|| {
                LabError::Unavailable("the Docker lab needs --docker-host".to_owned())
            })?;
            let root = catalogue_root(&session.common.catalogue.scenarios);
            Ok(Lab::Docker(DockerLab::new(
                manifest.clone(),
                root,
                token.to_owned(),
                host,
                session.common.allow_shared_host,
            )?))
        }
        LabDriver::Proxmox => {
            let base = session
                .common
                .lab_root
                .clone()
                .unwrap_or_else(std::env::temp_dir);
            let serve = session.common.fakepve_serve.clone().unwrap_or_else(|| {
                catalogue_root(&session.common.catalogue.scenarios)
                    .join("proxmox")
                    .join("fakepve")
                    .join("serve.py")
            });
            Ok(Lab::Proxmox(Box::new(ProxmoxLab::new(
                manifest.clone(),
                token.to_owned(),
                session.common.fakepve_python.clone(),
                serve,
                &base,
            )?)))
        }
        LabDriver::Replay => Err(LabError::Unsupported {
            driver: "replay",
            what: "a replay manifest has no live lab".to_owned(),
        }),
    }
}

fn catalogue_root(scenarios: &Path) -> PathBuf {
    scenarios.to_path_buf()
}

#[allow(clippy::too_many_arguments)]
async fn execute(
    session: &Session,
    manifest: &Manifest,
    token: &str,
    live: &mut Live,
    obs: &mut RunObservation,
    before: &mut Option<lab::Inventory>,
    t0: Instant,
) -> Result<(), String> {
    let client = &session.client;
    session
        .set_mode(manifest.patrol.mode)
        .await
        .map_err(|e| format!("setting Patrol mode: {e}"))?;
    live.lab.prepare().await.map_err(|e| e.to_string())?;
    *before = Some(live.lab.inventory().await.map_err(|e| e.to_string())?);
    let provisioned = live.lab.provision().await.map_err(|e| e.to_string())?;

    let host_id = if let Lab::Proxmox(lab) = &live.lab {
        // The cluster is read by Pulse's own connector, through a connection named with the
        // run's token; its agent id is `pve.<name>`.
        let wiring = lab
            .connection()
            .cloned()
            .ok_or_else(|| "the Proxmox lab has no cluster to connect".to_owned())?;
        let id = client
            .add_connection(&wiring)
            .await
            .map_err(|e| format!("adding the lab's cluster as a connection: {e}"))?;
        live.connection_id = Some(id);
        live.agent_host_id = Some(wiring.agent_id());
        wiring.agent_id()
    } else {
        start_lab_agent(session, manifest, token, live).await?
    };

    for predicate in &manifest.baseline {
        await_predicate(&live.lab, predicate)
            .await
            .map_err(|e| format!("baseline: {e}"))?;
    }
    obs.baseline_held = true;
    let lab_ready = Instant::now();
    obs.timings.lab_ms = t0.elapsed().as_millis() as u64;

    // Normal collection: every resource, by exact name, under the lab agent's host.
    let convergence = manifest
        .collection
        .convergence_timeout
        .as_str()
        .pipe(crate::duration::parse)
        .unwrap_or(Duration::from_secs(120));
    obs.resources = await_collection(session, &provisioned, &host_id, convergence).await?;
    let mut collection_ms = lab_ready.elapsed().as_millis() as u64;
    let ids: Vec<String> = obs
        .resources
        .iter()
        .map(|r| r.resource_id.clone())
        .collect();

    // Faults, each past its oracle threshold and visible through collection.
    let inject_start = Instant::now();
    for fault in &manifest.faults {
        live.lab
            .inject(fault)
            .await
            .map_err(|e| format!("injecting {}: {e}", fault.id))?;
    }
    for fault in &manifest.faults {
        let mut oracle = FaultOracle {
            fault_id: fault.id.clone(),
            injected: true,
            intact_after_patrol: false,
            reverted: false,
            notes: Vec::new(),
        };
        for predicate in &fault.oracle {
            if let Err(e) = await_predicate(&live.lab, predicate).await {
                oracle.injected = false;
                oracle.notes.push(e);
            }
        }
        obs.faults.push(oracle);
    }
    if obs.faults.iter().any(|f| !f.injected) {
        return Err("a fault did not reach its oracle threshold".to_owned());
    }
    obs.timings.lab_ms += inject_start.elapsed().as_millis() as u64;
    let seen_start = Instant::now();
    for fault in &manifest.faults {
        let alias = &fault.expected_finding.resource;
        let Some(binding) = obs.resources.iter().find(|r| &r.alias == alias) else {
            continue;
        };
        await_fault_visible(client, &binding.resource_id, convergence)
            .await
            .map_err(|e| format!("fault {}: {e}", fault.id))?;
    }
    collection_ms += seen_start.elapsed().as_millis() as u64;
    obs.timings.collection_ms = collection_ms;

    // The reconfirmation scenario: a first, unscored run records the finding the scored run
    // must then explicitly reconfirm.
    if manifest.patrol.require_existing_reconfirmation {
        obs.timings.idle_wait_ms += await_patrol_idle(client, obs).await;
        let warm = request_run(client, &ids).await?;
        let run = await_run(client, warm, run_timeout(manifest)).await?;
        if run.finding_ids.is_empty() {
            // Nothing to reconfirm: the model missed the fault in the first run already. The
            // scored run goes ahead; the scorer reports the missing reconfirmation.
            for oracle in &mut obs.faults {
                oracle.notes.push(format!(
                    "the first run ({warm}, status {}) recorded no finding to reconfirm",
                    run.status
                ));
            }
        }
    }

    obs.timings.idle_wait_ms += await_patrol_idle(client, obs).await;
    let patrol_start = Instant::now();
    let run_id = request_run(client, &ids).await?;
    obs.patrol_run_id = Some(run_id.to_string());
    let run = await_run(client, run_id, run_timeout(manifest)).await?;
    obs.timings.patrol_ms = patrol_start.elapsed().as_millis() as u64;
    read_run(client, &run, obs).await?;

    // The faults must still be in place: Patrol may not have changed anything.
    for (fault, oracle) in manifest.faults.iter().zip(obs.faults.iter_mut()) {
        let mut intact = true;
        for predicate in &fault.oracle {
            intact &= holds_now(&live.lab, predicate).await;
        }
        oracle.intact_after_patrol = intact;
    }

    if manifest.investigation.is_some() {
        let start = Instant::now();
        follow_investigation(session, manifest, live, obs).await?;
        obs.timings.investigation_ms = start.elapsed().as_millis() as u64;
    }

    for (fault, oracle) in manifest.faults.iter().zip(obs.faults.iter_mut()) {
        if let Err(e) = live.lab.revert(fault).await {
            oracle.notes.push(format!("revert: {e}"));
            continue;
        }
        let mut reverted = true;
        for predicate in &fault.revert_oracle {
            if let Err(e) = await_predicate(&live.lab, predicate).await {
                reverted = false;
                oracle.notes.push(format!("revert: {e}"));
            }
        }
        oracle.reverted = reverted;
    }
    Ok(())
}

/// Starts the lab's collecting agent, under a neutral host id; its host id.
async fn start_lab_agent(
    session: &Session,
    manifest: &Manifest,
    token: &str,
    live: &mut Live,
) -> Result<String, String> {
    let client = &session.client;
    // The lab's collecting agent, under a neutral host id; commands only for an authorised
    // remediation run.
    let exec = manifest.track == Track::Remediation && session.common.authorize_remediation;
    let host_id = format!("node-{token}");
    let (token_id, agent_token) = client
        .create_agent_token(&format!("lab agent {host_id}"), exec)
        .await
        .map_err(|e| format!("issuing the lab agent's token: {e}"))?;
    live.agent_token_id = Some(token_id);
    live.agent_host_id = Some(host_id.clone());
    let state_dir = match &live.lab {
        Lab::Process(lab) => lab.agent_state_dir(),
        Lab::Docker(_) | Lab::Proxmox(_) => std::env::temp_dir().join(format!("agent-{token}")),
    };
    std::fs::create_dir_all(&state_dir).map_err(|e| format!("agent state dir: {e}"))?;
    let log = session
        .common
        .artifacts
        .join(format!("agent-{host_id}.log"));
    std::fs::create_dir_all(&session.common.artifacts)
        .map_err(|e| format!("artifacts dir: {e}"))?;
    let binary = session
        .common
        .agent_binary
        .clone()
        .unwrap_or_else(|| children::sibling_binary("pulse-agent"));
    live.agent = Some(
        children::start_agent(
            &binary,
            &session.relay_url,
            &agent_token,
            &host_id,
            &state_dir,
            &live.lab.agent_wiring(),
            exec,
            &log,
        )
        .map_err(|e| e.to_string())?,
    );
    Ok(host_id)
}

trait Pipe: Sized {
    fn pipe<T>(self, f: impl FnOnce(Self) -> T) -> T {
        f(self)
    }
}
impl<T> Pipe for T {}

fn run_timeout(manifest: &Manifest) -> Duration {
    crate::duration::parse(&manifest.patrol.run_timeout).unwrap_or(Duration::from_secs(600))
}

/// Waits until Pulse lists every provisioned resource by its exact name under `host_id`, in
/// its baseline state.
async fn await_collection(
    session: &Session,
    provisioned: &[Provisioned],
    host_id: &str,
    within: Duration,
) -> Result<Vec<ResourceBinding>, String> {
    let deadline = Instant::now() + within;
    loop {
        let listed = session.client.resources().await.unwrap_or_default();
        let mut bound = Vec::new();
        for p in provisioned {
            let id_prefix = format!("{}:{host_id}:", p.resource_type);
            // A host's id is `host:<agent>` (the Proxmox lab's cluster is its connection's).
            let host = format!("host:{host_id}");
            // Present, and showing the baseline the oracle saw (running, not unhealthy): a
            // stale start-up reading would otherwise look like a fault to Patrol.
            let found = listed.iter().find(|r| {
                r.name == p.name
                    && (r.id.as_str().starts_with(&id_prefix) || r.id.as_str() == host)
                    && r.status == ResourceStatus::Running
                    && r.health != Health::Unhealthy
            });
            if let Some(r) = found {
                bound.push(ResourceBinding {
                    alias: p.alias.clone(),
                    name: p.name.clone(),
                    resource_id: r.id.to_string(),
                    resource_type: r.resource_type.as_str().to_owned(),
                });
            }
        }
        if bound.len() == provisioned.len() {
            return Ok(bound);
        }
        if Instant::now() >= deadline {
            let missing: Vec<&str> = provisioned
                .iter()
                .filter(|p| !bound.iter().any(|b| b.alias == p.alias))
                .map(|p| p.name.as_str())
                .collect();
            return Err(format!(
                "collection: Pulse did not show {} running and not unhealthy within {}s (is \
                 the lab agent reporting to the relay?)",
                missing.join(", "),
                within.as_secs()
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until the resource as Pulse shows it looks faulty (unhealthy, not running, or
/// restarting).
async fn await_fault_visible(
    client: &PulseClient,
    resource_id: &str,
    within: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + within;
    let mut first_restarts: Option<u64> = None;
    loop {
        let listed = client.resources().await.unwrap_or_default();
        if let Some(r) = listed.iter().find(|r| r.id.as_str() == resource_id) {
            let restarts = u64::from(r.restart_count.unwrap_or(0));
            let baseline = *first_restarts.get_or_insert(restarts);
            let faulty = r.health == Health::Unhealthy
                || !matches!(r.status, ResourceStatus::Running | ResourceStatus::Unknown)
                || restarts > baseline;
            // A fault that leaves the resource running and healthy (a storage filling, a backup
            // ageing) shows as an alert of the deterministic floor.
            if faulty
                || !client
                    .firing_alerts(resource_id)
                    .await
                    .unwrap_or_default()
                    .is_empty()
            {
                return Ok(());
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "Pulse did not show {resource_id} as faulty within {}s",
                within.as_secs()
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Requests a scoped run, waiting while Patrol is busy or not ready yet. A route that is not
/// ready gets one fresh preflight (a cold local model may have failed the last one), as an
/// operator would ask for.
async fn request_run(client: &PulseClient, ids: &[String]) -> Result<RunId, String> {
    let deadline = Instant::now() + ACCEPT_DEADLINE;
    let mut preflight_asked = false;
    loop {
        match client.request_scoped_run(ids).await {
            Ok(id) => return Ok(id),
            Err(e) => {
                let not_ready = e.code() == Some("patrol_not_ready");
                let busy = e.code() == Some("patrol_run_in_progress");
                if !(not_ready || busy) || Instant::now() >= deadline {
                    return Err(format!("requesting the scoped run: {e}"));
                }
                if not_ready && !preflight_asked {
                    preflight_asked = true;
                    if let Err(e) = client.preflight().await {
                        tracing::info!(error = %e, "the fresh preflight did not pass");
                    }
                }
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until the tenant has no Patrol run in progress and no scoped run queued, up to
/// [`IDLE_DEADLINE`]; returns the milliseconds waited. Pulse starts runs of its own (an alert on
/// the injected fault, or `agent_offline` on an earlier lab host whose forgetting failed), and
/// on one slow model a scored run queued behind them would measure the queue, not the run. After
/// the deadline the harness goes on and notes it; the run's own timeout still applies.
async fn await_patrol_idle(client: &PulseClient, obs: &mut RunObservation) -> u64 {
    let start = Instant::now();
    let deadline = start + IDLE_DEADLINE;
    loop {
        match client.patrol_status().await {
            Ok(status) if !status.running && status.queued_scoped_runs == 0 => break,
            Ok(_) => {}
            Err(e) => tracing::info!(error = %e, "reading the Patrol status"),
        }
        if Instant::now() >= deadline {
            for oracle in &mut obs.faults {
                oracle.notes.push(format!(
                    "Patrol was still busy with runs of its own after {}s; the scored run was \
                     requested anyway",
                    IDLE_DEADLINE.as_secs()
                ));
            }
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    start.elapsed().as_millis() as u64
}

async fn await_run(
    client: &PulseClient,
    run_id: RunId,
    within: Duration,
) -> Result<PatrolRun, String> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(run) = client.patrol_run(run_id).await {
            if run.status.is_terminal() {
                return Ok(run);
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "run {run_id} did not end within {}s",
                within.as_secs()
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Copies the run record's outcome into the observation: findings (new and assessed), the
/// ordered tool exchanges, tokens and cost.
async fn read_run(
    client: &PulseClient,
    run: &PatrolRun,
    obs: &mut RunObservation,
) -> Result<(), String> {
    obs.patrol_run_status = Some(run.status.to_string());
    obs.ai_analysis = run.ai_analysis.clone();
    obs.input_tokens = run.input_tokens;
    obs.output_tokens = run.output_tokens;
    obs.tool_calls_recovered = run.tool_calls_recovered;
    obs.cost_usd = run.cost_usd;
    for (i, call) in run.tool_calls.iter().enumerate() {
        obs.tool_exchanges.push(ToolExchange {
            sequence: i as u32 + 1,
            tool_call_id: call.id.clone(),
            tool_name: call.tool_name.clone(),
            canonical_input: serde_json::from_str(&call.input)
                .unwrap_or_else(|_| json!(call.input)),
            output: call.output.clone(),
            success: call.success,
        });
    }
    let mut outcomes: Vec<(String, String)> = run
        .finding_assessments
        .iter()
        .map(|a| (a.finding_id.clone(), a.verdict.clone()))
        .collect();
    for id in &run.finding_ids {
        if !outcomes.iter().any(|(o, _)| o == id) {
            outcomes.push((id.clone(), "new".to_owned()));
        }
    }
    for (id, outcome) in outcomes {
        let answer = client
            .finding(&id)
            .await
            .map_err(|e| format!("reading finding {id}: {e}"))?;
        let f = answer.finding;
        obs.findings.push(ObservedFinding {
            id: id.clone(),
            resource_id: f.resource_id,
            resource_type: Some(f.resource_type),
            category: f.category.as_str().to_owned(),
            severity: f.severity.as_str().to_owned(),
            title: f.title,
            description: f.description,
            evidence: f.evidence,
            recommendation: f.recommendation,
            status: f.status.as_str().to_owned(),
            run_outcome: outcome,
        });
    }
    obs.findings.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(())
}

/// The investigation of the finding on the expected resource, and (remediation track) the
/// governed action it proposed.
async fn follow_investigation(
    session: &Session,
    manifest: &Manifest,
    live: &mut Live,
    obs: &mut RunObservation,
) -> Result<(), String> {
    let client = &session.client;
    let within = manifest
        .patrol
        .investigation_timeout
        .as_deref()
        .and_then(crate::duration::parse)
        .unwrap_or(DEFAULT_INVESTIGATION_TIMEOUT);
    let affected: Vec<String> = manifest
        .faults
        .iter()
        .filter_map(|f| {
            obs.resources
                .iter()
                .find(|r| r.alias == f.expected_finding.resource)
                .map(|r| r.resource_id.clone())
        })
        .collect();
    let Some(finding) = obs
        .findings
        .iter()
        .find(|f| affected.contains(&f.resource_id) && f.run_outcome != "resolved")
        .cloned()
    else {
        return Err("no finding on the expected resource to investigate".to_owned());
    };
    let deadline = Instant::now() + within;
    let record = loop {
        let answer = client
            .finding(&finding.id)
            .await
            .map_err(|e| format!("reading finding {}: {e}", finding.id))?;
        if let Some(record) = answer
            .investigation_record
            .filter(|record| record.status != InvestigationStatus::Running)
        {
            break record;
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the investigation of {} did not end within {}s",
                finding.id,
                within.as_secs()
            ));
        }
        tokio::time::sleep(POLL).await;
    };
    let tools = record.tools_used.clone();
    let evidence_ids: Vec<String> = record.evidence.iter().map(|e| e.id.clone()).collect();
    let summary = [
        &record.conclusion,
        &record.impact,
        &record.recommended_action,
    ]
    .map(String::as_str)
    .join("\n");
    let root: Vec<String> = record
        .proposal
        .iter()
        .map(|p| p.causal_resource_id.clone())
        .collect();
    obs.investigation = Some(InvestigationObservation {
        investigation_id: Some(record.id.to_string()),
        finding_id: finding.id.clone(),
        status: record.status.as_str().to_owned(),
        summary,
        tools_used: tools.len() as u32,
        evidence_calls: evidence_ids.len() as u32,
        evidence_ids,
        root_cause_resource_ids: root,
        tool_names: tools,
    });
    if let Some(remediation) = &manifest.remediation {
        let start = Instant::now();
        let outcome =
            follow_action(session, manifest, remediation, live, obs, &record, &finding).await;
        obs.timings.remediation_ms = start.elapsed().as_millis() as u64;
        outcome?;
    }
    Ok(())
}

/// Binds the proposed action to the finding, investigation, resource, capability and plan
/// hash; records the manifest's decision only with `--authorize-remediation`; waits for the
/// terminal state and verification; reads the postconditions from the oracle.
async fn follow_action(
    session: &Session,
    manifest: &Manifest,
    remediation: &crate::manifest::RemediationSpec,
    live: &mut Live,
    obs: &mut RunObservation,
    record: &InvestigationRecord,
    finding: &ObservedFinding,
) -> Result<(), String> {
    let client = &session.client;
    let mut seen = RemediationObservation {
        action_id: record.action.as_ref().map(|a| a.action_id.to_string()),
        plan_hash: None,
        finding_id: Some(finding.id.clone()),
        investigation_id: Some(record.id.to_string()),
        resource_id: None,
        capability: None,
        identity_bound: false,
        decision_recorded: None,
        terminal_state: None,
        verification_status: None,
        postconditions_held: None,
        notes: Vec::new(),
    };
    let Some(action_id) = seen.action_id.clone() else {
        seen.notes
            .push("the investigation proposed no action".to_owned());
        obs.remediation = Some(seen);
        return Ok(());
    };
    let action = client
        .action(&action_id)
        .await
        .map_err(|e| format!("reading action {action_id}: {e}"))?;
    seen.plan_hash = Some(action.plan.plan_hash.clone());
    seen.resource_id = Some(action.plan.resource_id.clone());
    seen.capability = Some(action.plan.capability.as_str().to_owned());
    let target = obs
        .resources
        .iter()
        .find(|r| r.alias == remediation.action_target)
        .map(|r| r.resource_id.clone());
    // The plan hash the broker stored must be the hash of the plan as it stands now.
    let recomputed = action.plan.recompute_hash().ok();
    let mut reasons = Vec::new();
    let action_finding = action.finding_id.map(|id| id.to_string());
    if action_finding.as_deref() != Some(finding.id.as_str()) {
        reasons.push(format!(
            "finding {} is not {}",
            action_finding.as_deref().unwrap_or("null"),
            finding.id
        ));
    }
    if seen.resource_id != target {
        reasons.push(format!(
            "resource {:?} is not the target {target:?}",
            seen.resource_id
        ));
    }
    if !seen
        .capability
        .as_ref()
        .is_some_and(|c| remediation.expected_capabilities.contains(c))
    {
        reasons.push(format!("capability {:?} is not expected", seen.capability));
    }
    if recomputed.is_none() || recomputed != seen.plan_hash {
        reasons.push("the plan hash does not match the plan".to_owned());
    }
    if remediation.require_exact_origin && action.plan.requested_by != "patrol:investigation" {
        reasons.push(format!("requested by {}", action.plan.requested_by));
    }
    seen.identity_bound = reasons.is_empty();
    seen.notes.extend(reasons);
    // (what the observation records, the API's decision outcome)
    let decision = match remediation.decision {
        Decision::ApproveExecute => Some(("approve", DecisionOutcome::Approved)),
        Decision::Reject => Some(("reject", DecisionOutcome::Rejected)),
        Decision::Observe | Decision::AwaitAutonomous => None,
    };
    if let Some((recorded, outcome)) = decision {
        if !session.common.authorize_remediation {
            seen.notes
                .push("no decision recorded: --authorize-remediation was not given".to_owned());
        } else if !seen.identity_bound {
            seen.notes
                .push("no decision recorded: the action's identity did not bind".to_owned());
        } else {
            let reason = remediation.decision_reason.clone().unwrap_or_else(|| {
                let outcome = match outcome {
                    DecisionOutcome::Approved => "approved",
                    DecisionOutcome::Rejected => "rejected",
                };
                format!("qualification decision: {outcome}")
            });
            client
                .decide(&action_id, outcome, &reason)
                .await
                .map_err(|e| format!("recording the decision: {e}"))?;
            seen.decision_recorded = Some(recorded.to_owned());
        }
    }
    let within =
        crate::duration::parse(&remediation.action_timeout).unwrap_or(Duration::from_secs(180));
    let deadline = Instant::now() + within;
    if seen.decision_recorded.is_some() {
        loop {
            let action = client
                .action(&action_id)
                .await
                .map_err(|e| format!("reading action {action_id}: {e}"))?;
            let state = action.state.as_str().to_owned();
            let terminal = matches!(
                state.as_str(),
                "rejected" | "failed" | "expired" | "cancelled" | "completed" | "verified"
            );
            let judged = action.verification.is_some()
                || !remediation.require_lifecycle_verification
                || state != "completed";
            if terminal && judged {
                seen.terminal_state = Some(state);
                seen.verification_status = action.verification.map(|v| v.as_str().to_owned());
                break;
            }
            if Instant::now() >= deadline {
                seen.terminal_state = Some(state);
                seen.notes.push(format!(
                    "the action did not reach a judged terminal state within {}s",
                    within.as_secs()
                ));
                break;
            }
            tokio::time::sleep(POLL).await;
        }
    }
    let mut held = true;
    for predicate in &remediation.postconditions {
        if let Err(e) = await_predicate(&live.lab, predicate).await {
            held = false;
            seen.notes.push(format!("postcondition: {e}"));
        }
    }
    seen.postconditions_held = Some(held);
    let _ = manifest;
    obs.remediation = Some(seen);
    Ok(())
}

async fn teardown(
    session: &Session,
    manifest: &Manifest,
    live: &mut Live,
    obs: &mut RunObservation,
    before: Option<lab::Inventory>,
) {
    // The agent first, so it neither restarts services nor reports the teardown.
    if let Some(agent) = live.agent.take() {
        agent.stop().await;
    }
    if let Some(id) = live.agent_token_id.take() {
        if let Err(e) = session.client.revoke_token(&id).await {
            obs.teardown
                .errors
                .push(format!("revoking the lab agent's token: {e}"));
        }
    }
    // The Proxmox lab's connection goes first, so its connector stops reading the cluster; the
    // cluster itself is stopped by the cleanup, before its agent is forgotten, so no read in
    // flight reports it again.
    let connected = live.connection_id.is_some();
    if let Some(id) = live.connection_id.take() {
        if let Err(e) = session.client.delete_connection(&id).await {
            obs.teardown
                .errors
                .push(format!("removing the lab's connection: {e}"));
        }
    }
    // The stopped agent's host is decommissioned: Pulse forgets it rather than sweeping it
    // offline, which would raise `agent_offline` and queue a Patrol run ahead of the next one.
    if !connected {
        forget_lab_host(session, live, obs).await;
    }
    match live.lab.cleanup().await {
        Ok(actions) => obs.teardown.first_pass_actions = actions,
        Err(e) => obs.teardown.errors.push(format!("first cleanup: {e}")),
    }
    if connected {
        forget_lab_host(session, live, obs).await;
    }
    match live.lab.cleanup().await {
        Ok(actions) => obs.teardown.second_pass_actions = actions,
        Err(e) => obs.teardown.errors.push(format!("second cleanup: {e}")),
    }
    match (before, live.lab.inventory().await) {
        (Some(before), Ok(after)) => {
            obs.teardown.inventory_diff = lab::inventory_diff(&before, &after)
        }
        (None, _) => {}
        (_, Err(e)) => obs.teardown.errors.push(format!("inventory after: {e}")),
    }
    let same = obs.teardown.inventory_diff.is_empty() && obs.teardown.errors.is_empty();
    obs.teardown.predicates_held = manifest.teardown.predicates.iter().all(|p| {
        p.probe != "inventory.same_as_pre" || lab::holds(p.operator, &json!(same), &p.value)
    });
}

async fn forget_lab_host(session: &Session, live: &mut Live, obs: &mut RunObservation) {
    if let Some(host_id) = live.agent_host_id.take() {
        if let Err(e) = session.client.forget_agent(&host_id).await {
            obs.teardown
                .errors
                .push(format!("forgetting the lab agent's host: {e}"));
        }
    }
}

fn finish(
    session: &Session,
    entry: &Entry,
    observation: RunObservation,
    started_at: chrono::DateTime<chrono::Utc>,
) -> RunReport {
    let score = scorer::score_for_model(&entry.manifest, &observation, &session.model);
    RunReport {
        schema_version: report::REPORT_SCHEMA_VERSION.to_owned(),
        run_id: format!(
            "{}-{}-{}",
            entry.manifest.id,
            observation.repeat_index + 1,
            started_at.format("%Y%m%dT%H%M%S")
        ),
        harness_revision: session.harness_revision.clone(),
        harness_dirty: session.harness_dirty,
        pulse_version: session.pulse_version.clone(),
        manifest: entry.manifest.clone(),
        manifest_digest: entry.digest.clone(),
        model: session.model.clone(),
        profile: session.common.repeat_profile,
        community_challenge: session.common.community_challenge.clone(),
        started_at,
        observation,
        score,
        // Filled in by `report::write_run` from the observation's transcript.
        transcript_digest: String::new(),
    }
}

/// Runs `entries` in order, each its repeat count, writing each run's artifacts and the suite
/// summary. One line per run on stdout.
pub async fn run_suite(session: &Session, entries: &[Entry]) -> Result<Vec<RunReport>, Refusal> {
    let mut reports = Vec::new();
    let total: u32 = entries
        .iter()
        .map(|e| repeat_count(&session.common, &e.manifest))
        .sum();
    let mut done = 0;
    for entry in entries {
        let repeats = repeat_count(&session.common, &entry.manifest);
        for i in 0..repeats {
            if INTERRUPTED.load(Ordering::SeqCst) {
                break;
            }
            done += 1;
            if !session.common.quiet {
                println!(
                    "[{done}/{total}] {} run {}/{} ...",
                    entry.manifest.id,
                    i + 1,
                    repeats
                );
            }
            let report = run_once(session, entry, i).await;
            let dir = session
                .common
                .artifacts
                .join(&entry.manifest.id)
                .join(format!("run-{:03}", i + 1));
            report::write_run(&dir, &report).map_err(|e| {
                Refusal::new(
                    "artifacts_unwritable",
                    format!("cannot write {}: {e}", dir.display()),
                )
            })?;
            let t = &report.observation.timings;
            println!(
                "{} {} run {}: lab {} ms, collection {} ms, patrol {} ms, total {} ms{}",
                if report.score.passed { "PASS" } else { "FAIL" },
                entry.manifest.id,
                i + 1,
                t.lab_ms,
                t.collection_ms,
                t.patrol_ms,
                t.end_to_end_ms,
                failure_summary(&report)
            );
            reports.push(report);
        }
    }
    report::write_suite(&session.common.artifacts, &reports).map_err(|e| {
        Refusal::new(
            "artifacts_unwritable",
            format!("cannot write the suite summary: {e}"),
        )
    })?;
    Ok(reports)
}

fn failure_summary(report: &RunReport) -> String {
    let mut reasons: Vec<String> = report.score.hard_failures.clone();
    reasons.extend(report.score.gate_failures.iter().cloned());
    if let Some(e) = &report.observation.run_error {
        reasons.push(format!("run error: {e}"));
    }
    if reasons.is_empty() {
        String::new()
    } else {
        format!(" ({})", reasons.join("; "))
    }
}

fn repeat_count(common: &LiveCommon, manifest: &Manifest) -> u32 {
    let profile = manifest.repeat.count(common.repeat_profile);
    match (common.repeat_profile, common.repeat) {
        (RepeatProfile::Qualification, Some(n)) => n.max(profile),
        (_, Some(n)) => n,
        (_, None) => profile,
    }
}

fn load_entries(common: &LiveCommon, pick: impl Fn(&Entry) -> bool) -> Result<Vec<Entry>, Refusal> {
    let lab = LabDriver::from(common.lab);
    let entries = catalogue::load_lab(&common.catalogue.scenarios, lab)
        .map_err(|e| Refusal::new("invalid_manifest", e.to_string()))?;
    Ok(entries.into_iter().filter(pick).collect())
}

fn outcome_of(reports: &[RunReport]) -> Outcome {
    let failed: Vec<String> = reports
        .iter()
        .filter(|r| !r.score.passed)
        .map(|r| format!("{} run {}", r.manifest.id, r.observation.repeat_index + 1))
        .collect();
    if INTERRUPTED.load(Ordering::SeqCst) {
        Outcome::Failed(format!(
            "interrupted after {} run(s); each was torn down and reported",
            reports.len()
        ))
    } else if failed.is_empty() {
        Outcome::Passed
    } else {
        Outcome::Failed(format!(
            "{} of {} runs failed: {}",
            failed.len(),
            reports.len(),
            failed.join(", ")
        ))
    }
}

pub async fn cli_live(args: LiveArgs) -> Result<Outcome, Refusal> {
    let entries = load_entries(&args.common, |e| e.manifest.id == args.scenario)?;
    if entries.is_empty() {
        return Err(Refusal::new(
            "unknown_scenario",
            format!(
                "no scenario '{}' for the {} lab; `patrol-qualify list` shows them",
                args.scenario,
                LabDriver::from(args.common.lab).as_str()
            ),
        ));
    }
    run_entries(args.common, entries).await
}

pub async fn cli_suite(args: SuiteArgs) -> Result<Outcome, Refusal> {
    let track = Track::from(args.track);
    if track == Track::Remediation && !args.common.authorize_remediation {
        eprintln!(
            "patrol-qualify: the remediation track runs without --authorize-remediation: no \
             decision will be recorded, so its scenarios cannot pass"
        );
    }
    let wanted = args.only.clone();
    let entries = load_entries(&args.common, |e| {
        e.manifest.track == track && (wanted.is_empty() || wanted.contains(&e.manifest.id))
    })?;
    if let Some(missing) = wanted
        .iter()
        .find(|w| !entries.iter().any(|e| &e.manifest.id == *w))
    {
        return Err(Refusal::new(
            "unknown_scenario",
            format!("no {} scenario '{missing}' for this lab", track.as_str()),
        ));
    }
    if entries.is_empty() {
        return Err(Refusal::new(
            "unknown_scenario",
            "the track has no scenarios",
        ));
    }
    run_entries(args.common, entries).await
}

/// Refuses, before any lab is touched, a scenario the live labs cannot run though it is a
/// valid manifest ([`lab::unrunnable`]).
pub fn check_runnable(manifests: &[&Manifest]) -> Result<(), Refusal> {
    let refused: Vec<String> = manifests
        .iter()
        .filter_map(|m| {
            let reasons = lab::unrunnable(m);
            (!reasons.is_empty()).then(|| {
                format!(
                    "the {} lab cannot run scenario {}: {}",
                    m.lab.driver.as_str(),
                    m.id,
                    reasons.join("; ")
                )
            })
        })
        .collect();
    if refused.is_empty() {
        Ok(())
    } else {
        Err(Refusal::new("unsupported_by_lab", refused.join("; ")))
    }
}

async fn run_entries(common: LiveCommon, entries: Vec<Entry>) -> Result<Outcome, Refusal> {
    let manifests: Vec<&Manifest> = entries.iter().map(|e| &e.manifest).collect();
    check_safety(&common, &manifests)?;
    check_runnable(&manifests)?;
    let session = Session::open(common).await?;
    let outcome = run_suite(&session, &entries).await;
    session.close().await;
    Ok(outcome_of(&outcome?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_classed_by_how_they_are_paid_for() {
        let provider = |base_url: Option<&str>| ProviderView {
            configured: false,
            key_source: None,
            base_url: base_url.map(str::to_owned),
            options: Default::default(),
        };
        let settings = BTreeMap::from([
            (
                "openai".to_owned(),
                provider(Some("http://127.0.0.1:8088/v1")),
            ),
            ("anthropic".to_owned(), provider(None)),
        ]);
        assert_eq!(
            route_class("openai:sim:diligent", &settings),
            RouteClass::Simulator
        );
        assert_eq!(route_class("ollama:qwen3:8b", &settings), RouteClass::Local);
        assert_eq!(
            route_class("openai:qwen2.5-coder", &settings),
            RouteClass::Local
        );
        assert_eq!(
            route_class("anthropic:claude", &settings),
            RouteClass::HostedApi
        );
        let hosted = BTreeMap::from([(
            "openai".to_owned(),
            provider(Some("https://api.openai.com/v1")),
        )]);
        assert_eq!(route_class("openai:gpt-5", &hosted), RouteClass::HostedApi);
    }
}
