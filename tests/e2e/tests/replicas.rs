//! `pulsectl up --replicas 2`: every service runs twice (the gateway's and the relay's replicas
//! share one port), and the governed loop and the cadence hold when replicas die.
//!
//! - **The loop survives losing replicas.** With the demo (fault injected, simulator route,
//!   mode `approval`), the first replica of each of the seven services is SIGKILLed while the
//!   Watch run is in flight, and the second replica of each right after the approval, while the
//!   action executes and is verified. The finding, the pending approval, the verified fix and
//!   the `fix_verified` outcome must still come, the restart must run exactly once, and the
//!   audit chain must verify. The user's only help is the one a user has: when a run was lost
//!   with its runner and nothing was found, press "Run now" again.
//! - **Cadence ticks once per period.** With a short cadence (no jitter), the scheduled runs
//!   (and the `startup` tick of a leader that took over late) recorded over a window are
//!   counted while the scheduler replica that leads the dispatch is
//!   SIGKILLed in the middle: the count matches the number of periods (no tick doubled by two
//!   leaders, none lost to the takeover) and the surviving replica takes over.
//!
//! Needs the binaries built first (`cargo build --workspace --bins`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use pulse_domain::TenantId;
use pulse_store::Store;
use pulse_test_support::action_api::send;
use pulse_test_support::service::{bin_dir, signal};
use pulse_test_support::stack::{self, FLEET, PulsectlUp, StackOptions, process_alive};
use pulse_test_support::wait;
use reqwest::StatusCode;
use serde_json::{Value, json};

const SET_UP_WITHIN: Duration = Duration::from_secs(240);
const STAGE_WITHIN: Duration = Duration::from_secs(150);
const DEMO_WEB: &str = "service:pulse-demo:demo-web";
/// The cadence of the tick test, short enough to count several periods in a test.
const PERIOD: Duration = Duration::from_secs(8);

fn demo_args() -> Vec<&'static str> {
    vec![
        "--replicas",
        "2",
        "--demo",
        "--demo-agent-health-listen",
        "127.0.0.1:0",
        "--provider-sim-listen",
        "127.0.0.1:0",
    ]
}

/// The pids pulsectl printed when it started the stack (`started a (1), b (2), ...`).
fn started_pids(stdout: &str) -> anyhow::Result<BTreeMap<String, u32>> {
    let line = stdout
        .lines()
        .find_map(|line| line.strip_prefix("started "))
        .context("pulsectl printed no `started` line")?;
    line.split(", ")
        .map(|entry| {
            let (name, pid) = entry
                .trim_end_matches(')')
                .split_once(" (")
                .with_context(|| format!("unexpected entry {entry:?}"))?;
            Ok((name.to_owned(), pid.parse()?))
        })
        .collect()
}

fn sigkill(pids: &BTreeMap<String, u32>, name: &str) -> anyhow::Result<()> {
    let pid = *pids
        .get(name)
        .with_context(|| format!("no process {name} in {pids:?}"))?;
    anyhow::ensure!(process_alive(pid), "{name} ({pid}) is not running");
    signal(pid, libc::SIGKILL);
    Ok(())
}

/// The name of replica `n` (1-based) as pulsectl names its process.
fn replica(service: &str, n: u8) -> String {
    if n == 1 {
        service.to_owned()
    } else {
        format!("{service}-{n}")
    }
}

struct Stack {
    http: reqwest::Client,
    options: StackOptions,
    up: PulsectlUp,
    admin: String,
}

impl Stack {
    async fn start(mut options: StackOptions) -> anyhow::Result<Self> {
        stack::require_stack_binaries()?;
        anyhow::ensure!(
            bin_dir()?.join("pulse-provider-sim").is_file(),
            "pulse-provider-sim is missing; run `cargo build --workspace --bins` first"
        );
        pulse_test_support::install_crypto_provider();
        let mut up = PulsectlUp::spawn(&options, &demo_args())?;
        stack::wait_for_demo_setup(&mut up, SET_UP_WITHIN).await?;
        options.learn_gateway(&up).await?;
        let admin = std::fs::read_to_string(options.admin_token_path())
            .context("the admin token")?
            .trim()
            .to_owned();
        // No idle connections: a request never goes out on a connection to a killed replica.
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .pool_max_idle_per_host(0)
            .build()?;
        Ok(Self {
            http,
            options,
            up,
            admin,
        })
    }

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
                "not reached: {stage} (pulsectl exited)\n{}",
                self.up.output()
            ),
            Err(error) => anyhow::bail!("not reached: {stage}: {error}\n{}", self.up.output()),
        }
    }

    /// Kills replica `n` of each of the seven services.
    fn kill_replicas(&self, pids: &BTreeMap<String, u32>, n: u8) -> anyhow::Result<()> {
        for service in FLEET {
            sigkill(pids, &replica(service, n))?;
        }
        println!("killed replica {n} of {}", FLEET.join(", "));
        Ok(())
    }

    async fn stop(self) -> anyhow::Result<()> {
        let Stack { mut up, .. } = self;
        up.interrupt();
        let status = up.wait_exit(Duration::from_secs(60)).await?;
        anyhow::ensure!(
            status.success(),
            "pulsectl exited with {status}\n{}",
            up.output()
        );
        Ok(())
    }
}

#[tokio::test]
async fn the_governed_loop_survives_losing_a_replica_of_each_service() -> anyhow::Result<()> {
    let mut options = StackOptions::isolated("replicas-loop")?;
    // A run lost with its runner ends (`runner_lost`) within seconds, not half a minute.
    options.extra_env = vec![("PULSE_RUNNER__LEASE_MS".to_owned(), "6000".to_owned())];
    let result = governed_loop(options.clone()).await;
    let cleanup = options.cleanup().await;
    result?;
    cleanup
}

async fn governed_loop(options: StackOptions) -> anyhow::Result<()> {
    let stack = Stack::start(options).await?;
    let pids = started_pids(&stack.up.stdout())?;
    for service in FLEET {
        for n in [1, 2] {
            anyhow::ensure!(
                pids.contains_key(&replica(service, n)),
                "{} was not started: {pids:?}",
                replica(service, n)
            );
        }
    }
    let health = stack.get("/api/health").await.context("GET /api/health")?;
    for service in FLEET {
        anyhow::ensure!(
            health["services"][service]["instances"].as_u64() >= Some(2),
            "{service} does not report two instances: {health}"
        );
    }

    // The demo's Watch run is in flight now.
    stack.kill_replicas(&pids, 1)?;

    let mut last_run_request = Instant::now();
    let finding = stack
        .stage("a Patrol finding on demo-web", || {
            let stack = &stack;
            let retry = last_run_request.elapsed() > Duration::from_secs(20);
            if retry {
                last_run_request = Instant::now();
            }
            async move {
                let list = stack
                    .get("/api/ai/patrol/findings?include_resolved=true")
                    .await?;
                let found = list["findings"]
                    .as_array()?
                    .iter()
                    .find(|f| f["resource_id"] == DEMO_WEB)
                    .cloned();
                if found.is_none() && retry {
                    // What a user does when a run was lost: "Run now" again (a busy answer
                    // while a run is still in flight is fine).
                    let _ = stack
                        .request(reqwest::Method::POST, "/api/ai/patrol/run", Some(json!({})))
                        .await;
                }
                found
            }
        })
        .await?;
    let finding_id = finding["id"]
        .as_str()
        .context("finding without id")?
        .to_owned();

    let action = stack
        .stage("an action on demo-web pending approval", || async {
            let list = stack.get("/api/actions/pending").await?;
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

    let (status, decided) = stack
        .request(
            reqwest::Method::POST,
            &format!("/api/actions/{action_id}/decision"),
            Some(json!({"outcome": "approved", "reason": "replica test: approved"})),
        )
        .await?;
    anyhow::ensure!(
        status == StatusCode::OK
            && decided["human_approved"] == true
            && approved_or_later(&decided),
        "approving {action_id}: {status} {decided}"
    );

    // The action executes and is verified while the other replicas die.
    stack.kill_replicas(&pids, 2)?;

    stack
        .stage("the action verified", || async {
            let action = stack.get(&format!("/api/actions/{action_id}")).await?;
            (action["verification"] == "verified").then_some(())
        })
        .await?;
    stack
        .stage("the finding's outcome fix_verified", || async {
            let answer = stack
                .get(&format!("/api/ai/patrol/findings/{finding_id}"))
                .await?;
            (answer["finding"]["investigation_outcome"] == "fix_verified").then_some(())
        })
        .await?;

    let audit = stack
        .get(&format!("/api/actions/{action_id}/audit"))
        .await
        .context("the action's audit")?;
    let executions = audit.as_array().map(|rows| {
        rows.iter()
            .filter(|r| r["payload"]["to"] == "executing")
            .count()
    });
    anyhow::ensure!(executions == Some(1), "executions in the audit: {audit}");
    let chain = stack
        .get("/api/audit/verify")
        .await
        .context("GET /api/audit/verify")?;
    anyhow::ensure!(chain["ok"] == true, "audit chain: {chain}");

    // pulsectl restarted every killed replica: two instances of each again.
    stack
        .stage("two fresh instances of every service again", || async {
            let health = stack.get("/api/health").await?;
            FLEET
                .iter()
                .all(|s| health["services"][*s]["instances"].as_u64() == Some(2))
                .then_some(())
        })
        .await?;
    stack.stop().await
}

#[tokio::test]
async fn cadence_ticks_once_per_period_across_a_scheduler_failover() -> anyhow::Result<()> {
    let mut options = StackOptions::isolated("replicas-cadence")?;
    options.extra_env = vec![
        (
            "PULSE_PATROL__CADENCE_OVERRIDE_MS".to_owned(),
            PERIOD.as_millis().to_string(),
        ),
        ("PULSE_PATROL__JITTER_PCT".to_owned(), "0".to_owned()),
    ];
    let result = cadence(options.clone()).await;
    let cleanup = options.cleanup().await;
    result?;
    cleanup
}

/// The application-role store of the stack's database.
async fn stack_store(options: &StackOptions) -> anyhow::Result<Store> {
    let config = pulse_config::DatabaseConfig {
        url: options.database_url.clone(),
        pool_size: 2,
        ..pulse_config::PulseConfig::default().database
    };
    // The suite shares one server: a moment with every connection slot taken is waited out.
    wait::until(
        Duration::from_secs(60),
        "a connection to the stack's database",
        || {
            let config = config.clone();
            async move { Store::connect_app(&config).await.ok() }
        },
    )
    .await
}

/// When each cadence run of the default tenant was recorded, in order: `scheduled`, and
/// `startup` (the tick a new leader makes at once when the slot came due while nobody led).
async fn scheduled_runs(store: &Store) -> anyhow::Result<Vec<DateTime<Utc>>> {
    let tx = store.tenant_tx(&TenantId::default_tenant()).await?;
    let rows = tx
        .client()
        .query(
            "SELECT queued_at FROM patrol_runs
             WHERE trigger_reason IN ('scheduled', 'startup')
             ORDER BY queued_at",
            &[],
        )
        .await?;
    tx.commit().await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// Waits until `count` cadence runs were recorded since `since`, or fails after `within`.
async fn cadence_runs_since(
    store: &Store,
    since: DateTime<Utc>,
    count: usize,
    within: Duration,
) -> anyhow::Result<()> {
    let what = format!("{count} cadence runs since {since}");
    wait::until(within, &what, || async {
        let runs = scheduled_runs(store).await.ok()?;
        (runs.iter().filter(|at| **at >= since).count() >= count).then_some(())
    })
    .await
}

/// The health listener a replica announced last (a restarted replica announces again).
fn health_listener(options: &StackOptions, name: &str) -> anyhow::Result<SocketAddr> {
    let path = options.state_dir.join("logs").join(format!("{name}.log"));
    let log = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    log.lines()
        .rev()
        .find_map(pulse_config::listening::parse)
        .with_context(|| format!("{name} announced no listener"))
}

/// The value of `name` on a scheduler replica's `/metrics` (all label sets summed), or `None`
/// when it does not answer.
async fn metric(http: &reqwest::Client, addr: SocketAddr, name: &str) -> Option<f64> {
    pulse_test_support::service::metric(http, &format!("http://{addr}"), name).await
}

const LEADER: &str = "pulse_patrol_dispatcher_leader";
const DISPATCHED: &str = "pulse_patrol_runs_dispatched_total";

async fn cadence(options: StackOptions) -> anyhow::Result<()> {
    let stack = Stack::start(options).await?;
    let store = stack_store(&stack.options).await?;
    stack
        .stage("the first scheduled run", || async {
            let runs = scheduled_runs(&store).await.ok()?;
            (!runs.is_empty()).then_some(())
        })
        .await?;

    let first = health_listener(&stack.options, "patrol-scheduler")?;
    let second = health_listener(&stack.options, "patrol-scheduler-2")?;
    let window_start = Utc::now();
    cadence_runs_since(&store, window_start, 4, PERIOD * 6).await?;

    // Exactly one replica holds the dispatcher's lease, and it is the one that dispatches.
    let http = &stack.http;
    let leads = (
        metric(http, first, LEADER).await.unwrap_or(0.0),
        metric(http, second, LEADER).await.unwrap_or(0.0),
    );
    anyhow::ensure!(
        leads.0 + leads.1 == 1.0,
        "exactly one scheduler replica must lead: {leads:?}"
    );
    let (leader, leader_addr, survivor, survivor_addr) = if leads.0 == 1.0 {
        ("patrol-scheduler", first, "patrol-scheduler-2", second)
    } else {
        ("patrol-scheduler-2", second, "patrol-scheduler", first)
    };
    anyhow::ensure!(
        metric(http, leader_addr, DISPATCHED).await.unwrap_or(0.0) > 0.0
            && metric(http, survivor_addr, DISPATCHED).await.unwrap_or(0.0) == 0.0,
        "only the leading replica dispatches"
    );
    let pids = started_pids(&stack.up.stdout())?;
    sigkill(&pids, leader)?;
    println!("killed the leading scheduler replica {leader}");
    // Five more periods' ticks must come, whoever leads now.
    cadence_runs_since(&store, window_start, 9, PERIOD * 8).await?;
    let window_end = Utc::now();

    // The survivor, or the killed replica that pulsectl restarted, whichever took the lease
    // first, leads now, and has dispatched (both counted nothing before the kill).
    let restarted = health_listener(&stack.options, leader)?;
    let now_leading = (
        metric(http, survivor_addr, LEADER).await.unwrap_or(0.0),
        metric(http, restarted, LEADER).await.unwrap_or(0.0),
    );
    anyhow::ensure!(
        now_leading.0 + now_leading.1 == 1.0,
        "after {leader} died exactly one replica must lead: {survivor} {}, restarted {leader} \
         {}",
        now_leading.0,
        now_leading.1
    );
    let new_leader = if now_leading.0 == 1.0 {
        survivor_addr
    } else {
        restarted
    };
    anyhow::ensure!(
        metric(http, new_leader, DISPATCHED).await.unwrap_or(0.0) > 0.0,
        "the new leader has not dispatched anything"
    );

    let runs: Vec<DateTime<Utc>> = scheduled_runs(&store)
        .await?
        .into_iter()
        .filter(|at| *at >= window_start && *at < window_end)
        .collect();
    let window = (window_end - window_start).to_std()?;
    let periods = window.as_secs_f64() / PERIOD.as_secs_f64();
    println!(
        "cadence: {} cadence runs in {:.1} s ({periods:.1} periods of {} s) across a failover",
        runs.len(),
        window.as_secs_f64(),
        PERIOD.as_secs()
    );
    // Each period's slot once: every run falls on its own period of the grid the first one
    // starts (a run in flight may delay a slot by a few seconds, never by half a period), and
    // no period between the first and the last was skipped.
    let first_at = *runs.first().context("no cadence run in the window")?;
    let slots: Vec<i64> = runs
        .iter()
        .map(|at| {
            let offset = (*at - first_at).num_milliseconds() as f64;
            (offset / PERIOD.as_millis() as f64).round() as i64
        })
        .collect();
    let expected: Vec<i64> = (0..slots.len() as i64).collect();
    anyhow::ensure!(
        slots == expected,
        "cadence runs do not tick once per period (slot of each run {slots:?}): {runs:?}"
    );
    // And the window's periods are all there, but for the ones its edges cut.
    anyhow::ensure!(
        runs.len() as f64 >= periods.floor() - 1.0 && runs.len() as f64 <= periods.ceil(),
        "{} cadence runs in {periods:.1} periods: {runs:?}",
        runs.len()
    );
    stack.stop().await
}

/// The decision's answer is the action as it is now: it may already be executing or done.
fn approved_or_later(action: &Value) -> bool {
    ["approved", "executing", "completed"].contains(&action["state"].as_str().unwrap_or(""))
}
