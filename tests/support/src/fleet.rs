//! A small supervised fleet for end-to-end Patrol tests: the real stack ([`AgentStack`]: the
//! gateway and the agent-relay), the patrol-scheduler, optionally the verifier, the
//! model-runner, a real `pulse-agent` supervising named services (each failing its health check
//! while its fault marker exists), and the provider simulator as the model.
//!
//! The Patrol route is written by the fleet's [`Route`], so a test switches models with
//! [`AgentFleet::set_model`] on the same provider.

use std::path::PathBuf;
use std::time::Duration;

use chrono::Utc;
use pulse_domain::TenantId;
use pulse_domain::ai_settings::{PatchBody, ProviderPatch};
use pulse_domain::patrol::run::PatrolRun;
use pulse_store::findings::{self, ListFilter, StoredFinding};

use crate::agent::{AgentSpec, AgentStack, SLEEP_COMMAND, marker_service_running, write_service};
use crate::patrol::{full_run, openai_route, save_settings};
use crate::provider_sim::{ProviderSim, Script};
use crate::runner::TestModelRunner;
use crate::scheduler::TestScheduler;
use crate::service::ServiceProcess;
use crate::verifier::TestVerifier;

/// How often the fleet's agent reports.
pub const REPORT_INTERVAL: Duration = Duration::from_millis(500);
/// Time for binaries to start, connect and report on a loaded 2-core machine.
pub const STARTUP: Duration = Duration::from_secs(45);
/// Time a Patrol run on the simulator may take to end.
pub const RUN_DEADLINE: Duration = Duration::from_secs(90);

/// Where the fleet's Patrol route points, at the simulator.
#[derive(Debug, Clone)]
pub enum Route {
    /// `openai:<model>` with an API key.
    OpenAi { key: String },
    /// `llamacpp:<model>`, a local model server without a key (calls written as text are
    /// recovered by default).
    LlamaCpp,
}

impl Route {
    /// The settings that route Patrol to `model` at `sim`.
    pub fn settings(&self, model: &str, sim: &ProviderSim) -> PatchBody {
        match self {
            Route::OpenAi { key } => openai_route(model, key, &sim.openai_base_url()),
            Route::LlamaCpp => PatchBody {
                patrol_model: Some(Some(format!("llamacpp:{model}"))),
                providers: [(
                    "llamacpp".to_owned(),
                    ProviderPatch {
                        base_url: Some(Some(sim.openai_base_url())),
                        ..ProviderPatch::default()
                    },
                )]
                .into(),
                ..PatchBody::default()
            },
        }
    }
}

/// One supervised service of the fleet.
#[derive(Debug, Clone)]
pub struct FleetService {
    pub name: String,
    /// Extra TOML lines of its definition (`labels = {...}`), empty for none.
    pub extra: String,
    /// Whether its fault marker exists from the start (it starts unhealthy).
    pub faulty: bool,
}

impl FleetService {
    pub fn healthy(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            extra: String::new(),
            faulty: false,
        }
    }

    pub fn faulty(name: &str) -> Self {
        Self {
            faulty: true,
            ..Self::healthy(name)
        }
    }

    pub fn with_extra(mut self, toml: &str) -> Self {
        self.extra = toml.to_owned();
        self
    }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct FleetSpec {
    /// Prefix of the agent's host id (unique per test file).
    pub host: String,
    pub services: Vec<FleetService>,
    pub route: Route,
    /// The first Patrol model.
    pub model: String,
    pub with_verifier: bool,
}

impl FleetSpec {
    /// `web` and `db`, both healthy, on `route` with `model`, without the verifier.
    pub fn web_and_db(host: &str, route: Route, model: &str) -> Self {
        Self {
            host: host.to_owned(),
            services: vec![FleetService::healthy("web"), FleetService::healthy("db")],
            route,
            model: model.to_owned(),
            with_verifier: false,
        }
    }

    /// With `web` failing its health check from the start.
    pub fn web_failing(mut self) -> Self {
        for service in &mut self.services {
            if service.name == "web" {
                service.faulty = true;
            }
        }
        self
    }
}

pub struct AgentFleet {
    pub stack: AgentStack,
    pub sim: ProviderSim,
    pub spec: AgentSpec,
    pub admin: String,
    route: Route,
    scheduler: Option<TestScheduler>,
    verifier: Option<TestVerifier>,
    runner: Option<TestModelRunner>,
    agent: Option<ServiceProcess>,
}

impl AgentFleet {
    /// Starts the fleet with the simulator answering `script`, and waits until every service
    /// shows the health its fault marker gives it.
    pub async fn start(fleet: FleetSpec, script: Script) -> anyhow::Result<Self> {
        let sim = ProviderSim::start(script).await?;
        Self::start_with_sim(fleet, sim).await
    }

    /// As [`AgentFleet::start`], with a simulator the caller started.
    pub async fn start_with_sim(fleet: FleetSpec, sim: ProviderSim) -> anyhow::Result<Self> {
        crate::install_crypto_provider();
        let stack = AgentStack::start(&[]).await?;
        let scheduler =
            TestScheduler::start(&stack.gateway, &stack.dir.join("scheduler"), &[]).await?;
        let verifier = if fleet.with_verifier {
            Some(TestVerifier::start(&stack.gateway, &stack.dir.join("verifier"), &[]).await?)
        } else {
            None
        };
        let token = stack.create_token("agent", &["agent:report"]).await?;
        let host = crate::agent::host_id(&fleet.host);
        let spec = stack.agent_spec(&host, &token, REPORT_INTERVAL)?;
        for service in &fleet.services {
            let marker = spec.state_dir.join(format!("{}.fault", service.name));
            write_service(
                &spec.services_dir,
                &format!("{}.toml", service.name),
                &marker_service_running(
                    &service.name,
                    &format!("{SLEEP_COMMAND}{}\n", service.extra),
                    &marker,
                ),
            )?;
            if service.faulty {
                std::fs::write(&marker, "fault")?;
            }
        }
        let agent = stack.spawn_agent(&spec)?;
        let admin = stack.gateway.admin_token.clone();
        let mut started = Self {
            stack,
            sim,
            spec,
            admin,
            route: fleet.route.clone(),
            scheduler: Some(scheduler),
            verifier,
            runner: None,
            agent: Some(agent),
        };
        started.set_model(&fleet.model).await?;
        let runner = TestModelRunner::start(
            &started.stack.gateway,
            &started.stack.dir.join("runner"),
            &[],
        )
        .await?;
        started.runner = Some(runner);
        for service in &fleet.services {
            let health = if service.faulty {
                "unhealthy"
            } else {
                "healthy"
            };
            started.wait_health(&service.name, health).await?;
        }
        Ok(started)
    }

    /// The fleet with `sim` as its simulator instead (for a script that needs ids only the
    /// started fleet knows); route Patrol to it with [`AgentFleet::set_model`].
    pub fn with_sim(self, sim: ProviderSim) -> Self {
        Self { sim, ..self }
    }

    /// Routes Patrol to `model` on the fleet's provider.
    pub async fn set_model(&self, model: &str) -> anyhow::Result<()> {
        save_settings(&self.stack.gateway, &self.route.settings(model, &self.sim)).await
    }

    /// The canonical id of service `name`.
    pub fn service_id(&self, name: &str) -> String {
        format!("service:{}:{name}", self.spec.host_id)
    }

    /// The fault marker of service `name`: it fails its health check while this file exists.
    pub fn marker(&self, name: &str) -> PathBuf {
        self.spec.state_dir.join(format!("{name}.fault"))
    }

    /// Waits until the stored service `name` has `health`.
    pub async fn wait_health(&self, name: &str, health: &str) -> anyhow::Result<()> {
        let id = self.service_id(name);
        self.stack
            .wait_health(&self.admin, &id, health, STARTUP)
            .await
            .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", self.agent_log()))
    }

    pub fn agent_log(&self) -> String {
        self.agent
            .as_ref()
            .map(|a| a.log_tail(30))
            .unwrap_or_default()
    }

    pub fn runner_log(&self) -> String {
        self.runner
            .as_ref()
            .map(|r| r.process.log_tail(60))
            .unwrap_or_default()
    }

    /// The model-runner's health and metrics address.
    pub fn runner_health_url(&self) -> Option<&str> {
        self.runner.as_ref().map(|r| r.health_url.as_str())
    }

    /// The model-runner's Prometheus text.
    pub async fn runner_metrics(&self) -> anyhow::Result<String> {
        let Some(url) = self.runner_health_url() else {
            anyhow::bail!("no model-runner");
        };
        Ok(reqwest::get(format!("{url}/metrics")).await?.text().await?)
    }

    /// Requests a full run and waits for its terminal record.
    pub async fn run(&self) -> anyhow::Result<PatrolRun> {
        full_run(&self.stack.gateway, RUN_DEADLINE)
            .await
            .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", self.runner_log()))
    }

    /// Every finding of the default tenant, resolved ones included.
    pub async fn findings(&self) -> anyhow::Result<Vec<StoredFinding>> {
        let store = self.stack.gateway.db.store();
        let tx = store.tenant_tx(&TenantId::default_tenant()).await?;
        Ok(findings::list(&tx, ListFilter::IncludeResolved, None, Utc::now()).await?)
    }

    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(runner) = self.runner.take() {
            runner.stop().await?;
        }
        if let Some(scheduler) = self.scheduler.take() {
            scheduler.stop().await?;
        }
        if let Some(verifier) = self.verifier.take() {
            verifier.stop().await?;
        }
        if let Some(agent) = self.agent.take() {
            let _ = agent.stop(Duration::from_secs(10)).await;
        }
        self.stack.stop().await
    }
}
