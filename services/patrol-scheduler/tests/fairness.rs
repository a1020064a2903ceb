//! The run dispatcher against real Postgres and NATS: the real dispatcher in-process, the real
//! outbox relay publishing its jobs, and a no-op runner consuming `jobs.watch` with the real
//! `JobWorker` that starts and finishes each run through the store's compare-and-swaps.
//!
//! - Fairness: 100 tenants on a 10 s cadence while one tenant floods manual full and scoped runs;
//!   every other tenant's cadence slots start within one cadence period, and no tenant ever has
//!   two full runs in flight.
//! - A known-not-ready Patrol route: due slots are skipped before anything is written, and the
//!   status projection says blocked.
//! - One active dispatcher among replicas, and a takeover when its lock session dies.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use pulse_bus::patrol_api::{WATCH_JOB, WatchJob};
use pulse_bus::{JobError, JobWorker, JobWorkerConfig, OutboxRelay, RelayConfig};
use pulse_domain::TenantId;
use pulse_domain::patrol::run::{RunEvent, RunType};
use pulse_domain::patrol::scope::{RequestedScope, ScopedRequest};
use pulse_domain::patrol::status::{
    BlockedCause, RuntimeState, StatusInputs, project, readiness_gate,
};
use pulse_domain::resource::{Health, ObservedResource, ResourceStatus, ResourceType};
use pulse_patrol_scheduler::accept::{AcceptError, RunAcceptor, Submission};
use pulse_patrol_scheduler::admission::{AdmissionConfig, AdmissionQueue};
use pulse_patrol_scheduler::dispatcher::{DispatchMetrics, DispatchSettings, Dispatcher};
use pulse_store::agents::{self, AgentSession};
use pulse_store::settings::ConfigLayer;
use pulse_store::{Store, patrol_readiness, patrol_runs, resources, tenants};
use pulse_test_support::db::TestDb;
use pulse_test_support::nats::TestNats;
use pulse_test_support::wait;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

const CADENCE: Duration = Duration::from_secs(10);
const JITTER_PCT: u32 = 10;

fn settings(max_in_flight: usize) -> DispatchSettings {
    let mut config = pulse_config::PulseConfig::default();
    config.patrol.max_in_flight = max_in_flight;
    config.patrol.jitter_pct = JITTER_PCT;
    config.patrol.scoped_queue_limit = 5;
    config.patrol.dispatch_poll_ms = 200;
    config.patrol.cadence_override_ms = Some(CADENCE.as_millis() as u64);
    DispatchSettings::from_config(&config)
}

/// A route that needs no key, with no preflight yet: the gate does not block.
fn ready_layer() -> ConfigLayer {
    ConfigLayer::from_config(&pulse_config::AiConfig {
        model: Some("ollama:qwen3:8b".to_owned()),
        ..Default::default()
    })
    .unwrap()
}

/// A route whose provider needs a key that nobody stored: known not ready.
fn not_ready_layer() -> ConfigLayer {
    ConfigLayer::from_config(&pulse_config::AiConfig {
        model: Some("openai:gpt-4.1-mini".to_owned()),
        ..Default::default()
    })
    .unwrap()
}

async fn report_service(store: &Store, tenant: &TenantId) {
    let tx = store.tenant_tx(tenant).await.unwrap();
    agents::connect(
        &tx,
        &AgentSession {
            id: "h1".to_owned(),
            hostname: "h1".to_owned(),
            agent_version: "test".to_owned(),
            report_interval_ms: 1000,
            token_id: None,
        },
    )
    .await
    .unwrap();
    let web = ObservedResource {
        resource_type: ResourceType::Service,
        source_id: "web".to_owned(),
        name: "web".to_owned(),
        aliases: Vec::new(),
        status: ResourceStatus::Running,
        health: Health::Healthy,
        restart_count: None,
        labels: BTreeMap::new(),
        details: serde_json::Value::Null,
        metrics: BTreeMap::new(),
        parent: None,
    };
    resources::apply_report(&tx, "h1", Utc::now(), &[web])
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

/// What the no-op runner saw.
#[derive(Default)]
struct RunnerLog {
    /// Full runs running right now, per tenant, and the most ever seen at once.
    running_full: HashMap<TenantId, u32>,
    max_running_full: u32,
    started: u64,
}

/// The in-process pieces of one scheduler: outbox relay and dispatcher (and a no-op runner).
struct Harness {
    db: TestDb,
    nats: TestNats,
    acceptor: RunAcceptor,
    metrics: DispatchMetrics,
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    stop_relay: CancellationToken,
    stop_runner: CancellationToken,
    runner_log: Arc<Mutex<RunnerLog>>,
}

impl Harness {
    async fn start() -> anyhow::Result<Self> {
        let db = TestDb::create().await?;
        let nats = TestNats::connect().await?;
        nats.ensure_streams().await?;
        let outbox_notify = Arc::new(Notify::new());
        let acceptor = RunAcceptor::new(db.store().clone(), nats.subjects())
            .with_outbox_notify(outbox_notify.clone())
            .with_scoped_queue_limit(5);
        let stop_relay = CancellationToken::new();
        let relay_rx = stop_relay.clone();
        let relay = OutboxRelay::new(
            db.store().pool().clone(),
            nats.jetstream(),
            RelayConfig::default(),
        )
        .with_notify(outbox_notify);
        let relay_task = tokio::spawn(async move {
            let _ = relay.run(relay_rx).await;
        });
        let stop_runner = CancellationToken::new();
        Ok(Self {
            db,
            nats,
            acceptor,
            metrics: DispatchMetrics::default(),
            shutdown: CancellationToken::new(),
            tasks: vec![relay_task],
            stop_relay,
            stop_runner,
            runner_log: Arc::new(Mutex::new(RunnerLog::default())),
        })
    }

    /// Starts a dispatcher sharing the acceptor's wake-up.
    fn dispatcher(&mut self, layer: ConfigLayer, settings: DispatchSettings) {
        let wake = Arc::new(Notify::new());
        self.acceptor = self.acceptor.clone().with_dispatch_notify(wake.clone());
        let dispatcher = Dispatcher::new(self.acceptor.clone(), layer, settings)
            .with_wake(wake)
            .with_bus(self.nats.bus())
            .with_metrics(self.metrics.clone());
        self.tasks
            .push(tokio::spawn(dispatcher.run(self.shutdown.clone())));
    }

    /// A no-op runner: takes each `jobs.watch` job, starts its run under a lease and finishes it
    /// `healthy` at once, tracking how many full runs of a tenant run at the same time.
    async fn runner(&mut self) -> anyhow::Result<()> {
        let worker = JobWorker::<WatchJob>::new(
            &self.nats.bus(),
            WATCH_JOB,
            JobWorkerConfig {
                concurrency: 16,
                ..JobWorkerConfig::default()
            },
        )
        .await?;
        let store = self.db.store().clone();
        let log = self.runner_log.clone();
        let stop = self.stop_runner.clone();
        self.tasks.push(tokio::spawn(async move {
            let _ = worker
                .run(
                    move |ctx, job: WatchJob| {
                        let (store, log) = (store.clone(), log.clone());
                        async move { run_noop(&store, &log, &ctx.tenant, &job).await }
                    },
                    stop,
                )
                .await;
        }));
        Ok(())
    }

    async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.stop_runner.cancel();
        self.stop_relay.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
        self.nats.cleanup().await?;
        self.db.cleanup().await?;
        Ok(())
    }
}

async fn run_noop(
    store: &Store,
    log: &Mutex<RunnerLog>,
    tenant: &TenantId,
    job: &WatchJob,
) -> Result<(), JobError> {
    let retry = |e: pulse_store::StoreError| JobError::retry(e);
    let tx = store.tenant_tx(tenant).await.map_err(retry)?;
    let started = patrol_runs::start(
        &tx,
        job.run_id,
        "noop-runner",
        Duration::from_secs(30),
        Utc::now(),
        None,
    )
    .await;
    if started.is_err() {
        // Already started or ended (a redelivery): nothing to do.
        return Ok(());
    }
    tx.commit().await.map_err(retry)?;
    if job.run_type == RunType::Full {
        let mut log = log.lock().unwrap();
        let running = log.running_full.entry(tenant.clone()).or_default();
        *running += 1;
        let now = *running;
        log.max_running_full = log.max_running_full.max(now);
        log.started += 1;
    }
    let tx = store.tenant_tx(tenant).await.map_err(retry)?;
    patrol_runs::finish(
        &tx,
        job.run_id,
        Some("noop-runner"),
        RunEvent::Completed {
            issues_found: false,
        },
        Utc::now(),
        None,
        |_| {},
    )
    .await
    .map_err(JobError::retry)?;
    if job.run_type == RunType::Full {
        let mut log = log.lock().unwrap();
        if let Some(running) = log.running_full.get_mut(tenant) {
            *running -= 1;
        }
    }
    tx.commit().await.map_err(retry)?;
    Ok(())
}

/// `(run type, trigger, dispatched_at, completed_at)` of every run of every tenant, read as the
/// owner.
async fn runs_by_tenant(
    db: &TestDb,
) -> HashMap<String, Vec<(String, String, Option<DateTime<Utc>>, Option<DateTime<Utc>>)>> {
    let client = db.owner_client().await.unwrap();
    let rows = client
        .query(
            "SELECT tenant_id, run_type, trigger_reason, dispatched_at, completed_at
             FROM patrol_runs ORDER BY tenant_id, dispatched_at NULLS LAST",
            &[],
        )
        .await
        .unwrap();
    let mut by_tenant: HashMap<String, Vec<_>> = HashMap::new();
    for row in rows {
        by_tenant.entry(row.get(0)).or_default().push((
            row.get(1),
            row.get(2),
            row.get(3),
            row.get(4),
        ));
    }
    by_tenant
}

#[tokio::test]
async fn a_flooding_tenant_cannot_delay_other_tenants_cadence() -> anyhow::Result<()> {
    let mut harness = Harness::start().await?;
    let store = harness.db.store().clone();
    let tenants: Vec<TenantId> = (0..100)
        .map(|i| TenantId::new(format!("t{i:03}")).unwrap())
        .collect();
    for tenant in &tenants {
        tenants::create(&store, tenant, tenant.as_str()).await?;
    }
    let flooder = tenants[0].clone();
    report_service(&store, &flooder).await;
    harness.runner().await?;
    let started_at = Utc::now();
    // Capacity well under the tenant count, so admission order matters.
    harness.dispatcher(ready_layer(), settings(8));

    // The flooder asks for a full and a scoped run every few milliseconds.
    let flood_stop = CancellationToken::new();
    let flood = {
        let (acceptor, store, tenant, stop) = (
            harness.acceptor.clone(),
            store.clone(),
            flooder.clone(),
            flood_stop.clone(),
        );
        tokio::spawn(async move {
            let scope = ScopedRequest {
                scope: RequestedScope {
                    resource_ids: vec!["web".to_owned()],
                    resource_types: Vec::new(),
                },
                alert_identifier: None,
                alert_type: None,
                context: None,
            };
            let mut counts: BTreeMap<&'static str, u32> = BTreeMap::new();
            // Bursts: two full and six scoped requests every 50 ms.
            let burst = [
                None,
                None,
                Some(&scope),
                Some(&scope),
                Some(&scope),
                Some(&scope),
                Some(&scope),
                Some(&scope),
            ];
            let mut pace = tokio::time::interval(Duration::from_millis(50));
            while !stop.is_cancelled() {
                pace.tick().await;
                for scope in burst {
                    let tx = store.tenant_tx(&tenant).await.unwrap();
                    let outcome = acceptor
                        .accept(
                            tx,
                            Submission {
                                trigger: pulse_domain::patrol::run::TriggerReason::Manual,
                                scope,
                                requested_by: Some("token:flood"),
                            },
                        )
                        .await;
                    let key = match outcome {
                        Ok(_) => "accepted",
                        Err(AcceptError::RunInProgress(_)) => "patrol_run_in_progress",
                        Err(AcceptError::QueueFull { .. }) => "patrol_queue_full",
                        Err(other) => panic!("unexpected refusal {other:?}"),
                    };
                    *counts.entry(key).or_default() += 1;
                }
            }
            counts
        })
    };

    // The observation window (the measurement itself): almost three cadence periods.
    let window = Duration::from_secs(28);
    let observe_until = started_at + chrono::Duration::from_std(window)?;
    tokio::time::sleep(window).await;
    flood_stop.cancel();
    let counts = flood.await?;
    let runs = runs_by_tenant(&harness.db).await;
    let max_running_full = harness.runner_log.lock().unwrap().max_running_full;
    harness.stop().await?;

    // The flood was mostly refused, with both stable codes.
    let refused = counts.get("patrol_run_in_progress").copied().unwrap_or(0)
        + counts.get("patrol_queue_full").copied().unwrap_or(0);
    assert!(
        refused > counts.get("accepted").copied().unwrap_or(0),
        "{counts:?}"
    );
    assert!(counts.contains_key("patrol_run_in_progress"), "{counts:?}");
    assert!(counts.contains_key("patrol_queue_full"), "{counts:?}");

    // Every cadence slot of every other tenant that came due after the start (and early enough
    // to be judged) was covered by a full run dispatched within one cadence period of it.
    let queue = AdmissionQueue::new(AdmissionConfig {
        interval_ms: CADENCE.as_millis() as u64,
        jitter_pct: JITTER_PCT,
        ..AdmissionConfig::default()
    });
    let cadence = chrono::Duration::from_std(CADENCE)?;
    let mut judged = 0;
    let mut worst = chrono::Duration::zero();
    for tenant in &tenants[1..] {
        let own = runs.get(tenant.as_str()).cloned().unwrap_or_default();
        let dispatched: Vec<DateTime<Utc>> = own
            .iter()
            .filter(|(run_type, ..)| run_type == "full")
            .filter_map(|(_, _, at, _)| *at)
            .collect();
        assert!(
            own.iter()
                .any(|(t, trigger, at, _)| t == "full" && trigger == "scheduled" && at.is_some()),
            "{tenant}: no scheduled run dispatched: {own:?}"
        );
        for slot in queue.due_slots_after(tenant, started_at, 4) {
            if slot + cadence > observe_until {
                break;
            }
            judged += 1;
            if let Some(first) = dispatched
                .iter()
                .find(|at| **at >= slot - chrono::Duration::milliseconds(50))
            {
                worst = worst.max(*first - slot);
            }
            assert!(
                dispatched
                    .iter()
                    .any(|at| *at >= slot - chrono::Duration::milliseconds(50)
                        && *at <= slot + cadence),
                "{tenant}: slot {slot} not started within {CADENCE:?}; dispatched {dispatched:?}"
            );
        }
    }
    assert!(judged >= 99, "only {judged} slots judged");
    eprintln!(
        "{judged} cadence slots judged; latest start {worst} after its slot; flood {counts:?}"
    );

    // Never two full runs of one tenant in flight: as the runner saw it, and as recorded (each
    // full run was dispatched only after the previous one ended).
    assert_eq!(max_running_full, 1);
    for (tenant, own) in &runs {
        let full: Vec<_> = own
            .iter()
            .filter(|(t, _, at, _)| t == "full" && at.is_some())
            .collect();
        for pair in full.windows(2) {
            let (prev_end, next_start) = (pair[0].3, pair[1].2);
            assert!(
                prev_end.is_some_and(|end| Some(end) <= next_start),
                "{tenant}: overlapping full runs {pair:?}"
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_suspended_tenants_due_slots_are_skipped_while_another_tenant_runs() -> anyhow::Result<()>
{
    let mut harness = Harness::start().await?;
    let store = harness.db.store().clone();
    let held = TenantId::new("held").unwrap();
    let open = TenantId::new("open").unwrap();
    for tenant in [&held, &open] {
        tenants::create(&store, tenant, "Org").await?;
        report_service(&store, tenant).await;
    }
    let tx = store.tenant_tx(&held).await?;
    tenants::set_suspension(&tx, Some("invoice overdue")).await?;
    tx.commit().await?;
    harness.runner().await?;
    let mut settings = settings(8);
    settings.cadence_override_ms = Some(1_000);
    harness.dispatcher(ready_layer(), settings);

    let metrics = harness.metrics.clone();
    wait::until(
        Duration::from_secs(20),
        "two skipped slots of the suspended tenant",
        || async { (metrics.skipped_because("tenant_suspended") >= 2).then_some(()) },
    )
    .await?;
    let held_runs = runs_of(&harness.db, &held).await?;
    assert_eq!(held_runs, 0, "a suspended tenant got a run");
    wait::until(
        Duration::from_secs(20),
        "the other tenant's run",
        || async { (runs_of(&harness.db, &open).await.ok()? > 0).then_some(()) },
    )
    .await?;
    harness.stop().await
}

async fn runs_of(db: &TestDb, tenant: &TenantId) -> anyhow::Result<i64> {
    let client = db.owner_client().await?;
    Ok(client
        .query_one(
            "SELECT count(*) FROM patrol_runs WHERE tenant_id = $1",
            &[&tenant.as_str()],
        )
        .await?
        .get(0))
}

#[tokio::test]
async fn due_slots_on_a_known_not_ready_route_are_skipped_before_anything_is_written()
-> anyhow::Result<()> {
    let mut harness = Harness::start().await?;
    let store = harness.db.store().clone();
    let tenant = TenantId::new("blocked").unwrap();
    tenants::create(&store, &tenant, "Blocked").await?;
    harness.runner().await?;
    let mut settings = settings(8);
    settings.cadence_override_ms = Some(1_000);
    harness.dispatcher(not_ready_layer(), settings);

    // The startup slot and at least two cadence slots come due and are skipped.
    let metrics = harness.metrics.clone();
    wait::until(Duration::from_secs(20), "three skipped slots", || async {
        (metrics.skipped_for(BlockedCause::ProviderNotConfigured) >= 3).then_some(())
    })
    .await?;
    assert_eq!(harness.metrics.dispatched_total(), 0);
    let client = harness.db.owner_client().await?;
    let runs: i64 = client
        .query_one("SELECT count(*) FROM patrol_runs", &[])
        .await?
        .get(0);
    let jobs: i64 = client
        .query_one(
            "SELECT count(*) FROM outbox WHERE subject LIKE '%.jobs.watch'",
            &[],
        )
        .await?
        .get(0);
    assert_eq!((runs, jobs), (0, 0), "no record and no job");
    assert_eq!(harness.runner_log.lock().unwrap().started, 0);

    // The status projection over the same store reads says blocked, and why.
    let tx = store.tenant_tx(&tenant).await?;
    let checks = patrol_readiness::assess(&tx, &not_ready_layer(), Utc::now()).await?;
    let current = patrol_runs::current(&tx).await?;
    tx.commit().await?;
    let blocked = readiness_gate(&checks).expect_err("the gate blocks");
    assert_eq!(blocked.cause, BlockedCause::ProviderNotConfigured);
    let status = project(&StatusInputs {
        now: Utc::now(),
        enabled: true,
        runner_available: true,
        readiness: checks,
        current_run: current.map(|run| pulse_domain::patrol::status::CurrentRun {
            id: run.id,
            run_type: run.run_type,
        }),
        last_full_run: None,
        last_successful_full_at: None,
        last_activity_at: None,
        next_patrol_at: None,
        interval_ms: 1_000,
        active_findings: pulse_domain::finding::SeverityCounts::default(),
        queued_scoped_runs: 0,
        health_window_ms: 3_600_000,
    });
    assert_eq!(status.runtime_state, RuntimeState::Blocked);
    assert_eq!(
        status.blocked_cause,
        Some(BlockedCause::ProviderNotConfigured)
    );
    assert!(status.blocked_reason.is_some());
    harness.stop().await
}

#[tokio::test]
async fn one_dispatcher_leads_and_another_takes_over_when_its_session_dies() -> anyhow::Result<()> {
    let mut harness = Harness::start().await?;
    let store = harness.db.store().clone();
    let tenant = TenantId::new("acme").unwrap();
    tenants::create(&store, &tenant, "Acme").await?;
    // Two replicas; no runner, so dispatched runs stay in flight.
    let mut settings = settings(8);
    settings.cadence_override_ms = Some(3_600_000);
    harness.dispatcher(ready_layer(), settings.clone());
    harness.dispatcher(ready_layer(), settings);

    // The startup run is dispatched once, by whichever replica leads.
    let metrics = harness.metrics.clone();
    wait::until(
        Duration::from_secs(20),
        "the startup run dispatched",
        || async { (metrics.dispatched_total() == 1).then_some(()) },
    )
    .await?;
    let leader_pid: i32 = {
        let client = harness.db.owner_client().await?;
        client
            .query_one(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                 AND objid = (hashtextextended('pulse.patrol.dispatcher', 0) & 4294967295)::bigint::oid",
                &[],
            )
            .await?
            .get(0)
    };
    // A manual scoped run would be admitted by the leader; kill the leader's lock session first.
    let client = harness.db.owner_client().await?;
    client
        .execute("SELECT pg_terminate_backend($1)", &[&leader_pid])
        .await?;
    report_service(&store, &tenant).await;
    let tx = store.tenant_tx(&tenant).await?;
    let scope = ScopedRequest {
        scope: RequestedScope {
            resource_ids: vec!["web".to_owned()],
            resource_types: Vec::new(),
        },
        alert_identifier: None,
        alert_type: None,
        context: None,
    };
    let accepted = harness
        .acceptor
        .accept(
            tx,
            Submission {
                trigger: pulse_domain::patrol::run::TriggerReason::Manual,
                scope: Some(&scope),
                requested_by: Some("token:ops"),
            },
        )
        .await?;
    // Some replica leads again and dispatches it; the startup run is resumed, not repeated.
    wait::until(
        Duration::from_secs(20),
        "the scoped run dispatched",
        || async {
            let waiting = pulse_store::patrol_dispatch::undispatched(&store, 10)
                .await
                .ok()?;
            waiting.is_empty().then_some(())
        },
    )
    .await?;
    let new_pid: i32 = client
        .query_one(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
             AND objid = (hashtextextended('pulse.patrol.dispatcher', 0) & 4294967295)::bigint::oid",
            &[],
        )
        .await?
        .get(0);
    assert_ne!(new_pid, leader_pid);
    let runs = runs_by_tenant(&harness.db).await;
    let own = &runs["acme"];
    assert_eq!(own.len(), 2, "{own:?}");
    assert!(own.iter().all(|(_, _, at, _)| at.is_some()), "{own:?}");
    let tx = store.tenant_tx(&tenant).await?;
    assert!(patrol_runs::get(&tx, accepted.run_id).await?.is_some());
    tx.commit().await?;
    harness.stop().await
}
