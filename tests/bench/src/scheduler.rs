//! scheduler-bench: the real `pulse-patrol-scheduler` binary dispatching Patrol runs for 10,000
//! tenants on a 5-minute cadence, against a no-op runner in this process.
//!
//! Phases:
//! - all due: at start no tenant has a successful full run, so every tenant's `startup` run is
//!   due at once; the dispatcher records and dispatches them as fast as it can (capacity);
//! - steady: afterwards each tenant's slots are spread over the 5-minute cadence (10,000 / 300 s
//!   = 33.3 runs/s offered); the window counts what was admitted and how late.
//!
//! Both phases run twice, each time on a fresh database: with one scheduler process and with two
//! replicas (`sched x2`). One replica leads the dispatch (the Postgres advisory lock), so the
//! second adds failover, not throughput; the figures show what it costs.
//!
//! The no-op runner consumes `jobs.watch` with the real `JobWorker` and starts and finishes each
//! run through the store's compare-and-swaps at once, so the dispatcher's capacity is never held
//! by slow runs. Admitted runs are counted from `dispatched_at` in Postgres; the scheduler's CPU is
//! utime+stime of its process from `/proc`.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use pulse_bus::patrol_api::{WATCH_JOB, WatchJob};
use pulse_bus::{Bus, JobError, JobWorker, JobWorkerConfig, Subjects};
use pulse_domain::patrol::run::RunEvent;
use pulse_store::{Store, patrol_runs};
use pulse_test_support::db::TestDb;
use pulse_test_support::service::{ANY_PORT, ServiceProcess, delete_streams, scratch_dir};

use crate::relay::{clock_ticks_per_sec, loadavg, proc_stat};
use crate::{BenchArgs, figure};

const BENCH: &str = "sched";
const TARGET_RUNS_PER_SEC: f64 = 35.0;
const TARGET_CPU_PCT: f64 = 25.0;

struct Plan {
    tenants: usize,
    cadence: Duration,
    max_in_flight: usize,
    steady_window: Duration,
}

impl Plan {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                tenants: 500,
                cadence: Duration::from_secs(30),
                max_in_flight: 256,
                steady_window: Duration::from_secs(10),
            }
        } else {
            Self {
                tenants: 10_000,
                cadence: Duration::from_secs(300),
                max_in_flight: 256,
                steady_window: Duration::from_secs(120),
            }
        }
    }
}

pub async fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let plan = Plan::new(args.quick);
    for replicas in [1, 2] {
        run_with(args, &plan, replicas).await?;
    }
    Ok(())
}

async fn run_with(args: &BenchArgs, plan: &Plan, replicas: usize) -> anyhow::Result<()> {
    let label = if replicas == 1 {
        BENCH.to_owned()
    } else {
        format!("{BENCH} x{replicas}")
    };
    let db = TestDb::create()
        .await
        .context("creating the bench database")?;
    let prefix = format!("sb{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let dir = scratch_dir("scheduler-bench")?;
    let result = measure(args, plan, replicas, &label, &db, &prefix, &dir).await;
    if let Err(error) = delete_streams(&prefix).await {
        eprintln!("scheduler bench: stream clean-up failed: {error:#}");
    }
    if let Err(error) = db.cleanup().await {
        eprintln!("scheduler bench: database clean-up failed: {error:#}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// CPU ticks of the scheduler processes together at a moment.
#[derive(Clone, Copy)]
struct Cpu {
    at: Instant,
    ticks: u64,
}

impl Cpu {
    fn take(pids: &[u32]) -> Self {
        Self {
            at: Instant::now(),
            ticks: pids
                .iter()
                .map(|pid| proc_stat(*pid).map_or(0, |s| s.2))
                .sum(),
        }
    }

    /// Percent of one core used since `earlier`.
    fn since(&self, earlier: &Self) -> f64 {
        let secs = self.at.duration_since(earlier.at).as_secs_f64().max(1e-3);
        self.ticks.saturating_sub(earlier.ticks) as f64 / clock_ticks_per_sec() / secs * 100.0
    }
}

async fn dispatched(client: &tokio_postgres::Client) -> anyhow::Result<i64> {
    Ok(client
        .query_one(
            "SELECT count(*) FROM patrol_runs WHERE dispatched_at IS NOT NULL",
            &[],
        )
        .await?
        .get(0))
}

async fn measure(
    args: &BenchArgs,
    plan: &Plan,
    replicas: usize,
    label: &str,
    db: &TestDb,
    prefix: &str,
    dir: &Path,
) -> anyhow::Result<()> {
    let owner = db.owner_client().await?;
    owner
        .execute(
            "INSERT INTO tenants (id, name)
             SELECT 'b' || lpad(i::text, 5, '0'), 'Bench ' || i FROM generate_series(1, $1) i",
            &[&(plan.tenants as i32)],
        )
        .await?;
    let mut env = vec![
        ("PULSE_DATABASE_URL".to_owned(), db.owner_url().to_owned()),
        ("PULSE_NATS_URL".to_owned(), args.nats_url.clone()),
        ("PULSE_NATS__SUBJECT_PREFIX".to_owned(), prefix.to_owned()),
        ("PULSE_STATE_DIR".to_owned(), dir.display().to_string()),
        ("PULSE_HTTP__LISTEN".to_owned(), ANY_PORT.to_owned()),
        ("PULSE_TELEMETRY__LOG_FILTER".to_owned(), "warn".to_owned()),
        // A route that needs no key: every tenant passes the readiness gate.
        ("PULSE_AI__MODEL".to_owned(), "ollama:qwen3:8b".to_owned()),
        (
            "PULSE_PATROL__CADENCE_OVERRIDE_MS".to_owned(),
            plan.cadence.as_millis().to_string(),
        ),
        (
            "PULSE_PATROL__MAX_IN_FLIGHT".to_owned(),
            plan.max_in_flight.to_string(),
        ),
    ];
    // Streams big enough for every job and accepted event of the run.
    for (key, bytes) in [
        ("PULSE_NATS__STREAMS__JOBS_MAX_BYTES", 64 << 20),
        ("PULSE_NATS__STREAMS__EVENTS_MAX_BYTES", 64 << 20),
        ("PULSE_NATS__STREAMS__DLQ_MAX_BYTES", 4 << 20),
    ] {
        env.push((key.to_owned(), bytes.to_string()));
    }

    let mut schedulers = Vec::with_capacity(replicas);
    for n in 1..=replicas {
        schedulers.push(ServiceProcess::spawn(
            "pulse-patrol-scheduler",
            &env,
            &dir.join(format!("scheduler-{n}.log")),
        )?);
    }
    let stop_runner = tokio_util::sync::CancellationToken::new();
    let stop_rx = stop_runner.clone();
    let mut runner = None;
    let result = async {
        let mut pids = Vec::with_capacity(replicas);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()?;
        for scheduler in &mut schedulers {
            pids.push(scheduler.pid().context("a scheduler exited at once")?);
            let health_url = scheduler.wait_base_url().await?;
            scheduler.wait_ready(&http, &health_url).await?;
        }
        // The scheduler created the streams; jobs dispatched before the runner's consumer
        // exists wait in the stream.
        let client = pulse_bus::async_nats::connect(args.nats_url.as_str()).await?;
        let bus = Bus::with_jetstream(
            client.clone(),
            pulse_bus::async_nats::jetstream::new(client),
            Subjects::try_new(Some(prefix))?,
        );
        let worker = JobWorker::<WatchJob>::new(
            &bus,
            WATCH_JOB,
            JobWorkerConfig {
                concurrency: 32,
                ..JobWorkerConfig::default()
            },
        )
        .await?;
        let store = db.store().clone();
        runner = Some(tokio::spawn(async move {
            worker
                .run(
                    move |ctx, job: WatchJob| {
                        let store = store.clone();
                        async move { run_noop(&store, &ctx.tenant, &job).await }
                    },
                    stop_rx,
                )
                .await
        }));
        phases(plan, label, &owner, &pids).await
    }
    .await;
    let mut stopped = Ok(());
    for scheduler in schedulers {
        let outcome = match scheduler.stop(Duration::from_secs(20)).await {
            Err(error) => Err(error.context("stopping a scheduler")),
            Ok(status) if !status.success() => {
                Err(anyhow::anyhow!("a scheduler exited with {status}"))
            }
            Ok(_) => Ok(()),
        };
        stopped = stopped.and(outcome);
    }
    stop_runner.cancel();
    if let Some(runner) = runner {
        let _ = runner.await;
    }
    result.and(stopped)
}

async fn phases(
    plan: &Plan,
    label: &str,
    owner: &tokio_postgres::Client,
    pids: &[u32],
) -> anyhow::Result<()> {
    let tenants = plan.tenants as i64;
    println!(
        "{label:<8} {} tenants, {} scheduler replica(s), cadence {:?}, max_in_flight {}, load {}",
        plan.tenants,
        pids.len(),
        plan.cadence,
        plan.max_in_flight,
        loadavg()
    );

    // All due: from the first dispatched run until every tenant's startup run is dispatched.
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut poll = tokio::time::interval(Duration::from_millis(100));
    let (first_at, cpu_first) = loop {
        poll.tick().await;
        if dispatched(owner).await? > 0 {
            break (Instant::now(), Cpu::take(pids));
        }
        anyhow::ensure!(Instant::now() < deadline, "no run was dispatched");
    };
    let (all_at, cpu_all) = loop {
        poll.tick().await;
        if dispatched(owner).await? >= tenants {
            break (Instant::now(), Cpu::take(pids));
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {} of {tenants} startup runs dispatched",
            dispatched(owner).await?
        );
    };
    let burst_secs = all_at.duration_since(first_at).as_secs_f64().max(1e-3);
    let burst_rate = (tenants - 1) as f64 / burst_secs;
    let burst_cpu = cpu_all.since(&cpu_first);
    figure(
        label,
        "all due: startup runs dispatched",
        tenants as f64,
        "runs",
    );
    figure(label, "all due: admitted runs/s", burst_rate, "runs/s");
    figure(label, "all due: scheduler CPU", burst_cpu, "% core");
    figure(
        label,
        "all due: scheduler CPU per 1k runs",
        burst_cpu / 100.0 * burst_secs / tenants as f64 * 1000.0,
        "core-s",
    );

    // Steady state: a window well after the burst, while slots come due across the cadence.
    let settle = Duration::from_secs(5);
    tokio::time::sleep(settle).await;
    let window_start: DateTime<Utc> = owner.query_one("SELECT now()", &[]).await?.get(0);
    let cpu_start = Cpu::take(pids);
    tokio::time::sleep(plan.steady_window).await;
    let cpu_end = Cpu::take(pids);
    let window_end: DateTime<Utc> = owner.query_one("SELECT now()", &[]).await?.get(0);
    let row = owner
        .query_one(
            "SELECT count(*),
                    count(*) FILTER (WHERE trigger_reason = 'scheduled'),
                    count(*) FILTER (WHERE status IN ('healthy', 'issues_found'))
             FROM patrol_runs WHERE dispatched_at >= $1 AND dispatched_at < $2",
            &[&window_start, &window_end],
        )
        .await?;
    let (admitted, scheduled, finished): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    let secs = (window_end - window_start).num_milliseconds() as f64 / 1000.0;
    let offered = tenants as f64 / plan.cadence.as_secs_f64();
    let steady_rate = admitted as f64 / secs;
    let steady_cpu = cpu_end.since(&cpu_start);
    let waiting: i64 = owner
        .query_one(
            "SELECT count(*) FROM patrol_runs WHERE dispatched_at IS NULL AND status = 'queued'",
            &[],
        )
        .await?
        .get(0);
    figure(
        label,
        "steady: offered runs/s (tenants / cadence)",
        offered,
        "runs/s",
    );
    figure(label, "steady: admitted runs/s", steady_rate, "runs/s");
    figure(label, "steady: of them scheduled", scheduled as f64, "runs");
    figure(
        label,
        "steady: of them finished by the runner",
        finished as f64,
        "runs",
    );
    figure(label, "steady: scheduler CPU", steady_cpu, "% core");
    figure(
        label,
        "steady: runs waiting for dispatch at end",
        waiting as f64,
        "runs",
    );
    println!("{label:<8} load after {}", loadavg());
    if plan.tenants >= 10_000 {
        let pass = burst_rate >= TARGET_RUNS_PER_SEC
            && steady_rate >= offered * 0.95
            && burst_cpu < TARGET_CPU_PCT
            && steady_cpu < TARGET_CPU_PCT;
        println!(
            "{label:<8} {} admitted >= {TARGET_RUNS_PER_SEC} runs/s (all due) and keeps up with the cadence, scheduler CPU < {TARGET_CPU_PCT}% of one core",
            if pass { "PASS" } else { "FAIL" }
        );
    } else {
        println!("{label:<8} quick run: figures not comparable to targets");
    }
    Ok(())
}

async fn run_noop(
    store: &Store,
    tenant: &pulse_domain::TenantId,
    job: &WatchJob,
) -> Result<(), JobError> {
    let tx = store.tenant_tx(tenant).await.map_err(JobError::retry)?;
    if patrol_runs::start(
        &tx,
        job.run_id,
        "bench-noop",
        Duration::from_secs(30),
        Utc::now(),
        None,
    )
    .await
    .is_err()
    {
        return Ok(());
    }
    patrol_runs::finish(
        &tx,
        job.run_id,
        Some("bench-noop"),
        RunEvent::Completed {
            issues_found: false,
        },
        Utc::now(),
        None,
        |_| {},
    )
    .await
    .map_err(JobError::retry)?;
    tx.commit().await.map_err(JobError::retry)?;
    Ok(())
}
