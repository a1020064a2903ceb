//! `pulsectl up --demo`, the newcomer's first run (acceptance 9): the real pulsectl starts the
//! stack, the provider simulator and a demo agent supervising three demo services, points Patrol
//! at the simulator in mode `approval`, injects a fault on `demo-web` and requests a run. Through
//! the API the test then waits for the finding on `demo-web`, for an action on it pending
//! approval, approves it, and waits for the action to be `verified` and the finding's
//! investigation outcome to be `fix_verified`.
//!
//! Each repetition starts a fresh stack on a fresh database and meets the demo with a full run
//! already in flight when it asks for its own, in turn:
//! - a `startup` run queued whose `jobs.watch` job was lost (dispatched, its job dropped, as a
//!   reused message id once made JetStream drop it): the demo follows it, the scheduler's take
//!   deadline writes its job again, and that run finds the fault;
//! - a `startup` run already `running` (held by a stand-in runner): the demo waits for it to end
//!   and then asks for its own run;
//! - whatever the scheduler itself does on a fresh database (its own `startup` run).
//!
//! `PULSE_DEMO_REPS` sets the number of repetitions ([`DEFAULT_REPS`] in the normal suite, which
//! covers both forced races); each prints how long the demo took to reach its pending approval.
//!
//! Needs the binaries built first (`cargo build --workspace --bins`, which includes
//! `pulse-provider-sim`). Each failure names the repetition and the stage that was not reached.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use chrono::Utc;
use pulse_domain::TenantId;
use pulse_domain::patrol::run::{PatrolRun, RunEvent, RunId, RunType, TriggerReason};
use pulse_store::{Store, patrol_dispatch, patrol_runs};
use pulse_test_support::action_api::send;
use pulse_test_support::service::bin_dir;
use pulse_test_support::stack::{self, PulsectlUp, StackOptions, process_alive};
use pulse_test_support::wait;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Stack start plus the demo's setup (token, settings, preflight, fault, run request).
const SET_UP_WITHIN: Duration = Duration::from_secs(240);
/// Each stage after the setup.
const STAGE_WITHIN: Duration = Duration::from_secs(90);
const DEMO_WEB: &str = "service:pulse-demo:demo-web";
const BANNER: &str = "SIMULATED MODEL: pulse-provider-sim (no real AI)";
/// Repetitions without `PULSE_DEMO_REPS`: one of each forced race.
const DEFAULT_REPS: usize = 2;
/// The stand-in runner that holds a `running` run.
const STAND_IN: &str = "e2e-stand-in-runner";

/// The full run in flight when the demo asks for its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Race {
    /// A `startup` run queued with its job lost.
    QueuedLostJob,
    /// A `startup` run `running` under a stand-in runner.
    Running,
    /// Whatever the scheduler does on its own.
    Natural,
}

impl Race {
    fn of_rep(rep: usize) -> Self {
        [Self::QueuedLostJob, Self::Running, Self::Natural][rep % 3]
    }
}

struct Demo {
    http: reqwest::Client,
    options: StackOptions,
    up: PulsectlUp,
    admin: String,
}

impl Demo {
    async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let request = self
            .http
            .request(method, format!("{}{path}", self.options.gateway_url()))
            .bearer_auth(&self.admin);
        send(request, body).await
    }

    async fn get(&self, path: &str) -> Option<Value> {
        let (status, body) = self.request(reqwest::Method::GET, path, None).await.ok()?;
        (status == StatusCode::OK).then_some(body)
    }

    /// Waits for `check`; fails naming `stage` (and with pulsectl's output and the service
    /// logs) when it times out or pulsectl exits.
    async fn stage<T, F, Fut>(&self, stage: &str, check: F) -> anyhow::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let pid = self.up.pid();
        let mut check = check;
        let reached = wait::until(STAGE_WITHIN, stage, || {
            let next = check();
            async move {
                if !process_alive(pid) {
                    return Some(None);
                }
                next.await.map(Some)
            }
        })
        .await;
        match reached {
            Ok(Some(value)) => Ok(value),
            Ok(None) => anyhow::bail!(
                "demo stage not reached: {stage} (pulsectl exited)\n{}",
                self.diagnostics()
            ),
            Err(error) => anyhow::bail!(
                "demo stage not reached: {stage}: {error}\n{}",
                self.diagnostics()
            ),
        }
    }

    fn diagnostics(&self) -> String {
        let logs = self.options.state_dir.join("logs");
        let mut text = self.up.output();
        for name in [
            "demo-agent",
            "model-runner",
            "action-broker",
            "verifier",
            "provider-sim",
        ] {
            let path = logs.join(format!("{name}.log"));
            let log = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(25)..].join("\n");
            text.push_str(&format!("\n--- last lines of {name}.log ---\n{tail}"));
        }
        text
    }
}

#[tokio::test]
async fn demo_reaches_a_pending_approval_and_a_verified_fix() -> anyhow::Result<()> {
    stack::require_stack_binaries()?;
    anyhow::ensure!(
        bin_dir()?.join("pulse-provider-sim").is_file(),
        "pulse-provider-sim is missing; run `cargo build --workspace --bins` first"
    );
    pulse_test_support::install_crypto_provider();
    let reps = match std::env::var("PULSE_DEMO_REPS") {
        Ok(raw) => raw
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n >= 1)
            .with_context(|| format!("PULSE_DEMO_REPS={raw:?}: must be a whole number >= 1"))?,
        Err(_) => DEFAULT_REPS,
    };
    let mut timings = Vec::with_capacity(reps);
    for rep in 0..reps {
        let race = Race::of_rep(rep);
        let options = StackOptions::isolated("demo")?;
        let result = run_demo(options.clone(), race).await;
        let cleanup = options.cleanup().await;
        let reached =
            result.with_context(|| format!("demo repetition {}/{reps} ({race:?})", rep + 1))?;
        cleanup?;
        println!(
            "demo repetition {}/{reps} ({race:?}): pending approval after {:.1} s, verified fix \
             after {:.1} s",
            rep + 1,
            reached.pending_approval.as_secs_f64(),
            reached.verified.as_secs_f64()
        );
        for line in &reached.run_lines {
            println!("  {line}");
        }
        timings.push(reached);
    }
    let mut pending: Vec<f64> = timings
        .iter()
        .map(|t| t.pending_approval.as_secs_f64())
        .collect();
    pending.sort_by(f64::total_cmp);
    println!(
        "demo: {reps}/{reps} repetitions reached their pending approval; min {:.1} s, median \
         {:.1} s, max {:.1} s",
        pending[0],
        pending[pending.len() / 2],
        pending[pending.len() - 1]
    );
    Ok(())
}

/// How long after `pulsectl up --demo` started each stage was reached.
#[derive(Debug, Clone)]
struct Reached {
    pending_approval: Duration,
    verified: Duration,
    /// What the demo printed about its Patrol run (requested, followed, waited for).
    run_lines: Vec<String>,
}

/// The application-role store of the stack's database, once pulsectl created it and the
/// gateway created the default tenant.
async fn stack_store(options: &StackOptions) -> anyhow::Result<Store> {
    let config = pulse_config::DatabaseConfig {
        url: options.database_url.clone(),
        pool_size: 2,
        ..pulse_config::PulseConfig::default().database
    };
    wait::until(SET_UP_WITHIN, "the stack's database and tenant", || {
        let config = config.clone();
        async move {
            let store = Store::connect_app(&config).await.ok()?;
            let tx = store.tenant_tx(&TenantId::default_tenant()).await.ok()?;
            let exists = tx
                .client()
                .query_one("SELECT count(*) FROM tenants WHERE id = 'default'", &[])
                .await
                .ok()?
                .get::<_, i64>(0)
                == 1;
            tx.commit().await.ok()?;
            exists.then_some(store)
        }
    })
    .await
}

/// Places a `startup` full run in flight before the Patrol route is ready (so before the
/// scheduler could record one), then, once the demo reports that it met it, lets it go: a lost
/// job's run gets its deadline moved into the past so the scheduler writes its job again at the
/// next sweep; a held run ends. Fails when the demo never met the run.
async fn stage_race(options: &StackOptions, race: Race) -> anyhow::Result<()> {
    if race == Race::Natural {
        return Ok(());
    }
    let store = stack_store(options).await?;
    let tenant = TenantId::default_tenant();
    let run = PatrolRun::queued(
        patrol_runs::new_run_id(),
        TriggerReason::Startup,
        RunType::Full,
        Utc::now(),
    );
    let tx = store.tenant_tx(&tenant).await?;
    patrol_dispatch::lock_accept(&tx).await?;
    if let Some(active) = patrol_dispatch::active_full_run(&tx).await? {
        anyhow::bail!("full run {active} was in flight before the test could place its own");
    }
    anyhow::ensure!(patrol_runs::insert_queued(&tx, &run, None).await?);
    match race {
        Race::QueuedLostJob => {
            // Dispatched, but its job never reaches a runner.
            anyhow::ensure!(patrol_dispatch::mark_dispatched(&tx, run.id).await?);
        }
        Race::Running => {
            patrol_runs::start(
                &tx,
                run.id,
                STAND_IN,
                Duration::from_secs(600),
                Utc::now(),
                None,
            )
            .await?;
        }
        Race::Natural => {}
    }
    tx.commit().await?;

    let met = match race {
        Race::QueuedLostJob => format!("Patrol run {} (startup) is already queued", run.id),
        _ => format!("Patrol run {} (startup) was already running", run.id),
    };
    let stdout = options.state_dir.join("pulsectl.stdout");
    wait::until(SET_UP_WITHIN, "the demo to meet the run in flight", || {
        let text = std::fs::read_to_string(&stdout).unwrap_or_default();
        let seen = if text.contains(&met) {
            Some(Ok(()))
        } else if text.contains("Demo running:") || text.contains("demo: setup failed") {
            Some(Err(()))
        } else {
            None
        };
        async move { seen }
    })
    .await?
    .map_err(|()| anyhow::anyhow!("the demo's setup ended without meeting run {}", run.id))?;

    let tx = store.tenant_tx(&tenant).await?;
    match race {
        Race::QueuedLostJob => {
            let moved = tx
                .client()
                .execute(
                    "UPDATE patrol_runs SET dispatched_at = dispatched_at - interval '1 hour'
                     WHERE id = $1 AND status = 'queued'",
                    &[&run.id.as_uuid()],
                )
                .await?;
            anyhow::ensure!(moved == 1, "run {} is no longer queued", run.id);
        }
        _ => finish_held(&tx, run.id).await?,
    }
    tx.commit().await?;
    Ok(())
}

async fn finish_held(tx: &pulse_store::TenantTx, id: RunId) -> anyhow::Result<()> {
    patrol_runs::finish(
        tx,
        id,
        Some(STAND_IN),
        RunEvent::Completed {
            issues_found: false,
        },
        Utc::now(),
        None,
        |_| {},
    )
    .await?;
    Ok(())
}

async fn run_demo(mut options: StackOptions, race: Race) -> anyhow::Result<Reached> {
    // The OS picks both ports; pulsectl learns the simulator's from its announcement.
    let demo_agent = "127.0.0.1:0";
    let simulator = "127.0.0.1:0";
    let started = Instant::now();
    let mut up = PulsectlUp::spawn(
        &options,
        &[
            "--demo",
            "--demo-agent-health-listen",
            demo_agent,
            "--provider-sim-listen",
            simulator,
        ],
    )?;
    let (setup, staged) = tokio::join!(
        stack::wait_for_demo_setup(&mut up, SET_UP_WITHIN),
        stage_race(&options, race)
    );
    staged.with_context(|| format!("placing the run in flight\n{}", up.output()))?;
    setup?;
    options.learn_gateway(&up).await?;
    let stdout = up.stdout();
    anyhow::ensure!(
        stdout.contains(BANNER),
        "no simulated-model banner\n{stdout}"
    );
    anyhow::ensure!(
        stdout.contains("pulsectl approvals approve <id>"),
        "no next steps\n{stdout}"
    );
    let admin = std::fs::read_to_string(options.admin_token_path())
        .context("the admin token")?
        .trim()
        .to_owned();
    let demo = Demo {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?,
        options,
        up,
        admin,
    };

    // The API labels the simulated model; Patrol asks first.
    let settings = demo
        .get("/api/settings/ai")
        .await
        .context("GET /api/settings/ai")?;
    anyhow::ensure!(
        settings["patrol_model_simulated"] == true
            && settings["patrol_model"] == "openai:sim:diligent"
            && settings["autonomy_level"] == "approval",
        "demo settings: {settings}"
    );

    let finding = demo
        .stage("a Patrol finding on demo-web", || async {
            let list = demo
                .get("/api/ai/patrol/findings?include_resolved=true")
                .await?;
            list["findings"]
                .as_array()?
                .iter()
                .find(|f| f["resource_id"] == DEMO_WEB)
                .cloned()
        })
        .await?;
    let finding_id = finding["id"]
        .as_str()
        .context("finding without id")?
        .to_owned();

    let action = demo
        .stage("an action on demo-web pending approval", || async {
            let list = demo.get("/api/actions/pending").await?;
            list.as_array()?
                .iter()
                .find(|a| a["resource_id"] == DEMO_WEB && a["state"] == "pending_approval")
                .cloned()
        })
        .await?;
    let action_id = action["action_id"]
        .as_str()
        .context("action without action_id")?
        .to_owned();
    let pending_approval = started.elapsed();

    let (status, decided) = demo
        .request(
            reqwest::Method::POST,
            &format!("/api/actions/{action_id}/decision"),
            Some(json!({"outcome": "approved", "reason": "demo: approved by the newcomer"})),
        )
        .await?;
    anyhow::ensure!(
        status == StatusCode::OK
            && decided["human_approved"] == true
            && approved_or_later(&decided),
        "approving {action_id}: {status} {decided}"
    );

    demo.stage("the action verified", || async {
        let action = demo.get(&format!("/api/actions/{action_id}")).await?;
        (action["verification"] == "verified").then_some(())
    })
    .await?;
    let verified = started.elapsed();
    demo.stage("the finding's outcome fix_verified", || async {
        let answer = demo
            .get(&format!("/api/ai/patrol/findings/{finding_id}"))
            .await?;
        (answer["finding"]["investigation_outcome"] == "fix_verified").then_some(())
    })
    .await?;

    // The verified fix resolved the finding; the restart ran once (one execution, a receipt the
    // agent did not replay); the tenant's audit chain verifies.
    let answer = demo
        .get(&format!("/api/ai/patrol/findings/{finding_id}"))
        .await
        .context("the finding after the fix")?;
    anyhow::ensure!(
        answer["finding"]["status"] == "resolved",
        "finding after a verified fix: {answer}"
    );
    let action = demo
        .get(&format!("/api/actions/{action_id}"))
        .await
        .context("the action after the fix")?;
    anyhow::ensure!(
        action["state"] == "completed" && action["result"]["replayed"] == false,
        "action after the fix: {action}"
    );
    let audit = demo
        .get(&format!("/api/actions/{action_id}/audit"))
        .await
        .context("the action's audit")?;
    let executions = audit.as_array().map(|rows| {
        rows.iter()
            .filter(|r| r["payload"]["to"] == "executing")
            .count()
    });
    anyhow::ensure!(executions == Some(1), "executions in the audit: {audit}");
    let chain = demo
        .get("/api/audit/verify")
        .await
        .context("GET /api/audit/verify")?;
    anyhow::ensure!(chain["ok"] == true, "audit chain: {chain}");

    let Demo { mut up, .. } = demo;
    up.interrupt();
    let status = up.wait_exit(Duration::from_secs(30)).await?;
    anyhow::ensure!(
        status.success(),
        "pulsectl exited with {status}\n{}",
        up.output()
    );
    Ok(Reached {
        pending_approval,
        verified,
        run_lines: stdout
            .lines()
            .filter(|line| line.starts_with("demo: Patrol run"))
            .map(str::to_owned)
            .collect(),
    })
}

/// The decision's answer is the action as it is now: it may already be executing or done.
fn approved_or_later(action: &Value) -> bool {
    ["approved", "executing", "completed"].contains(&action["state"].as_str().unwrap_or(""))
}
