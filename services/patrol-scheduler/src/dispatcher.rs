//! The run dispatcher: decides when each accepted run starts and starts due cadence runs.
//!
//! Acceptance ([`crate::accept`]) records a run `queued` at once; the dispatcher enqueues its
//! `jobs.watch` job (and marks it dispatched, in the same transaction) only when the admission
//! core ([`crate::admission`]) lets it start: one full run per tenant in flight, scoped runs FIFO
//! per tenant, one admission per tenant per turn of the ring, at most `max_in_flight` dispatched
//! runs in flight across tenants.
//!
//! - **One active dispatcher.** Among scheduler replicas, the one holding a Postgres session
//!   advisory lock (on a connection of its own) dispatches; the others wait to take it over. A
//!   dispatcher whose lock session fails stops dispatching and starts over from the database.
//! - **What it knows.** Tenants and their cadence (`patrol_interval_minutes` over the config
//!   layer) are read at start, periodically and after `events.settings.changed`. Runs waiting for
//!   dispatch are read at start, when an accept in this process wakes it, and on every poll (so
//!   accepts on other replicas are seen). Dispatched runs leave the in-flight set when their record
//!   turns terminal, looked up on every poll and whenever `events.run.completed` is seen.
//! - **Cadence.** A due slot becomes a `scheduled` (or, for a tenant without a successful full
//!   run, `startup`) full run, recorded through the one accept path (which checks the readiness
//!   gate first) and dispatched in one transaction. A blocked gate skips the slot before
//!   anything is written (no record, no job): it is counted, and its cause is logged once per
//!   change of a tenant's state. A tenant that switched Patrol off has its due slots pass the
//!   same way (skip cause `patrol_disabled`); switched on again, its next due slot runs.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::StreamExt as _;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use pulse_bus::events::{RUN_COMPLETED, SETTINGS_CHANGED};
use pulse_bus::patrol_api::{WATCH_JOB, WatchJob};
use pulse_bus::{Bus, OutboxRow};
use pulse_domain::TenantId;
use pulse_domain::patrol::run::{RunId, RunStatus, RunType, TriggerReason};
use pulse_domain::patrol::scope::{RequestedScope, ScopedRequest};
use pulse_domain::patrol::status::{Blocked, BlockedCause};
use pulse_store::patrol_dispatch::{self, DispatcherLock};
use pulse_store::settings::{ConfigLayer, StoredSettings};
use pulse_store::{StoreError, TenantTx};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::accept::{AcceptError, RunAcceptor, Submission};
use crate::admission::{
    Admission, AdmissionConfig, AdmissionQueue, AdmittedRun, QueuedScopedRun, Refusal,
};

/// Dispatch transactions running at once.
const DISPATCH_CONCURRENCY: usize = 8;
/// Waiting runs read per poll.
const MAX_LOAD: i32 = 10_000;
/// Least time between two schedule reloads caused by settings changes.
const SETTINGS_DEBOUNCE: Duration = Duration::from_secs(1);

/// How the dispatcher runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchSettings {
    /// Jitter, queue bounds; `interval_ms` is the cadence of a tenant whose settings do not
    /// resolve.
    pub admission: AdmissionConfig,
    pub max_in_flight: usize,
    pub poll: Duration,
    pub schedule_refresh: Duration,
    /// One cadence for every tenant instead of their settings (tests, benchmarks).
    pub cadence_override_ms: Option<u64>,
    /// Silence after which the database ends the leader's lock session.
    pub leader_lease: Duration,
}

impl DispatchSettings {
    pub fn from_config(config: &pulse_config::PulseConfig) -> Self {
        let patrol = &config.patrol;
        Self {
            admission: AdmissionConfig {
                interval_ms: u64::from(pulse_domain::ai_settings::DEFAULT_PATROL_INTERVAL_MINUTES)
                    * 60_000,
                jitter_pct: patrol.jitter_pct,
                scoped_queue_limit: patrol.scoped_queue_limit.max(1),
                max_scoped_in_flight: patrol.max_scoped_in_flight.max(1),
                manual_full_min_spacing_ms: 0,
            },
            max_in_flight: patrol.max_in_flight.max(1),
            poll: Duration::from_millis(patrol.dispatch_poll_ms.max(10)),
            schedule_refresh: Duration::from_millis(patrol.schedule_refresh_ms.max(100)),
            cadence_override_ms: patrol.cadence_override_ms,
            leader_lease: Duration::from_millis(
                patrol
                    .leader_lease_ms
                    .max(patrol.dispatch_poll_ms.max(10) * 5)
                    .max(1_000),
            ),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DispatchLabels {
    /// `full` or `scoped`.
    pub run_type: String,
    pub trigger: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SkipLabels {
    /// The readiness gate's blocked cause.
    pub cause: String,
}

/// `pulse_patrol_runs_dispatched_total{run_type,trigger}`,
/// `pulse_patrol_scheduled_runs_skipped_total{cause}` (due slots the readiness gate blocked),
/// `pulse_patrol_dispatch_failures_total`, `pulse_patrol_runs_in_flight` and
/// `pulse_patrol_dispatcher_leader` (1 on the one replica that dispatches).
#[derive(Clone, Default)]
pub struct DispatchMetrics {
    pub dispatched: Family<DispatchLabels, Counter>,
    pub skipped: Family<SkipLabels, Counter>,
    pub failures: Counter,
    pub in_flight: Gauge,
    pub leader: Gauge,
}

impl DispatchMetrics {
    pub fn register(metrics: &pulse_telemetry::Metrics) -> Self {
        let this = Self::default();
        let (dispatched, skipped, failures, in_flight, leader) = (
            this.dispatched.clone(),
            this.skipped.clone(),
            this.failures.clone(),
            this.in_flight.clone(),
            this.leader.clone(),
        );
        metrics.register(|registry| {
            registry.register(
                "patrol_runs_dispatched",
                "Patrol runs whose job was enqueued by the dispatcher",
                dispatched,
            );
            registry.register(
                "patrol_scheduled_runs_skipped",
                "Due cadence runs skipped because the readiness gate blocks Patrol",
                skipped,
            );
            registry.register(
                "patrol_dispatch_failures",
                "Dispatch attempts that failed and will be retried",
                failures,
            );
            registry.register(
                "patrol_runs_in_flight",
                "Dispatched Patrol runs that have not ended",
                in_flight,
            );
            registry.register(
                "patrol_dispatcher_leader",
                "1 while this replica holds the dispatcher's lease (cadence ticks, admission)",
                leader,
            );
        });
        this
    }

    /// Dispatched runs so far, all labels together.
    pub fn dispatched_total(&self) -> u64 {
        let mut total = 0;
        for run_type in ["full", "scoped"] {
            for trigger in TriggerReason::ALL {
                let labels = DispatchLabels {
                    run_type: run_type.to_owned(),
                    trigger: trigger.as_str().to_owned(),
                };
                total += self.dispatched.get_or_create(&labels).get();
            }
        }
        total
    }

    /// Skipped due slots of `cause`.
    pub fn skipped_for(&self, cause: BlockedCause) -> u64 {
        self.skipped_because(&cause_str(cause))
    }

    /// Due slots skipped with the cause label `cause` (also the tenant refusals
    /// `tenant_suspended` and `quota_exceeded`, which are no readiness cause).
    pub fn skipped_because(&self, cause: &str) -> u64 {
        self.skipped
            .get_or_create(&SkipLabels {
                cause: cause.to_owned(),
            })
            .get()
    }
}

fn cause_str(cause: BlockedCause) -> String {
    match serde_json::to_value(cause) {
        Ok(serde_json::Value::String(s)) => s,
        _ => format!("{cause:?}"),
    }
}

/// Why the dispatcher stopped leading.
#[derive(Debug, thiserror::Error)]
enum LeadError {
    #[error("the dispatcher lock's database session failed")]
    LostLock,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The dispatcher task.
pub struct Dispatcher {
    acceptor: RunAcceptor,
    config_layer: Arc<ConfigLayer>,
    settings: DispatchSettings,
    wake: Arc<Notify>,
    bus: Option<Bus>,
    metrics: DispatchMetrics,
}

/// What one dispatch attempt did.
enum Outcome {
    Dispatched {
        tenant: TenantId,
        run_id: RunId,
        run_type: RunType,
        trigger: TriggerReason,
    },
    /// The readiness gate blocked a due slot; nothing was written.
    Skipped { tenant: TenantId, blocked: Blocked },
    /// The tenant switched Patrol off; the due slot passed and nothing was written.
    Disabled { tenant: TenantId },
    /// The tenant may not run now (suspended, or over its run quota): the slot is skipped with
    /// this cause.
    Refused {
        tenant: TenantId,
        cause: &'static str,
    },
    /// A due slot found a full run already queued or running: it is covered by that run.
    Coalesced { tenant: TenantId },
    /// The waiting run is no longer waiting (ended, or dispatched already).
    Gone {
        tenant: TenantId,
        run_id: RunId,
        run_type: RunType,
    },
    Failed {
        tenant: TenantId,
        run_id: Option<RunId>,
        run_type: RunType,
        error: String,
    },
}

/// The state of a leading dispatcher; rebuilt from the database whenever it starts leading.
struct Leader {
    queue: AdmissionQueue,
    intervals: HashMap<TenantId, u64>,
    /// Waiting runs handed to the queue and not dispatched yet.
    waiting: HashSet<RunId>,
    in_flight: HashMap<RunId, (TenantId, RunType)>,
    /// The last gate state seen per tenant at a due slot (`Some`: blocked with this cause).
    gate: HashMap<TenantId, Option<BlockedCause>>,
    schedule_due: tokio::time::Instant,
}

impl Dispatcher {
    pub fn new(
        acceptor: RunAcceptor,
        config_layer: ConfigLayer,
        settings: DispatchSettings,
    ) -> Self {
        Self {
            // A due slot is gated by the accept path itself, with this layer.
            acceptor: acceptor.with_readiness_gate(config_layer.clone()),
            config_layer: Arc::new(config_layer),
            settings,
            wake: Arc::new(Notify::new()),
            bus: None,
            metrics: DispatchMetrics::default(),
        }
    }

    /// Woken by the accept path of this process (give the same notify to
    /// [`RunAcceptor::with_dispatch_notify`]).
    pub fn with_wake(mut self, wake: Arc<Notify>) -> Self {
        self.wake = wake;
        self
    }

    /// Listens on the bus for settings changes and ended runs (as wake-ups; the database stays
    /// the source of truth).
    pub fn with_bus(mut self, bus: Bus) -> Self {
        self.bus = Some(bus);
        self
    }

    pub fn with_metrics(mut self, metrics: DispatchMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Runs until `shutdown`: waits for the dispatcher lock, dispatches while holding it, and
    /// waits again if it is lost.
    pub async fn run(self, shutdown: CancellationToken) {
        let settings_changed = Arc::new(Notify::new());
        let listener = self.listen(shutdown.clone(), settings_changed.clone());
        let this = Arc::new(self);
        loop {
            let lock = match DispatcherLock::try_acquire(
                this.acceptor.store(),
                this.settings.leader_lease,
            )
            .await
            {
                Ok(Some(lock)) => Some(lock),
                Ok(None) => None,
                Err(error) => {
                    tracing::warn!(%error, "taking the dispatcher lock failed; will retry");
                    None
                }
            };
            if let Some(lock) = lock {
                tracing::info!("patrol dispatcher active");
                this.metrics.leader.set(1);
                let result = this.lead(&lock, &shutdown, &settings_changed).await;
                this.metrics.leader.set(0);
                this.metrics.in_flight.set(0);
                lock.release().await;
                if shutdown.is_cancelled() {
                    break;
                }
                if let Err(error) = result {
                    this.metrics.failures.inc();
                    tracing::warn!(%error, "patrol dispatcher stopped; will try to take over again");
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(this.settings.poll) => {}
            }
        }
        if let Some(listener) = listener {
            listener.abort();
        }
    }

    /// Core NATS subscriptions that wake the dispatcher.
    fn listen(
        &self,
        shutdown: CancellationToken,
        settings_changed: Arc<Notify>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let bus = self.bus.clone()?;
        let wake = self.wake.clone();
        Some(tokio::spawn(async move {
            let subjects = bus.subjects();
            let (sd, se) = SETTINGS_CHANGED;
            let (cd, ce) = RUN_COMPLETED;
            let settings_subject = subjects.event_any_tenant(sd, se);
            let completed_subject = subjects.event_any_tenant(cd, ce);
            let client = bus.client().clone();
            let (settings, completed) = match (
                client.subscribe(settings_subject).await,
                client.subscribe(completed_subject).await,
            ) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(error), _) | (_, Err(error)) => {
                    tracing::warn!(%error, "dispatcher cannot subscribe to events; polling only");
                    return;
                }
            };
            let mut settings = settings.fuse();
            let mut completed = completed.fuse();
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    Some(_) = settings.next() => settings_changed.notify_one(),
                    Some(_) = completed.next() => wake.notify_one(),
                    else => return,
                }
            }
        }))
    }

    async fn lead(
        &self,
        lock: &DispatcherLock,
        shutdown: &CancellationToken,
        settings_changed: &Notify,
    ) -> Result<(), LeadError> {
        let now = tokio::time::Instant::now();
        let mut leader = Leader {
            queue: AdmissionQueue::new(self.settings.admission.clone()),
            intervals: HashMap::new(),
            waiting: HashSet::new(),
            in_flight: HashMap::new(),
            gate: HashMap::new(),
            schedule_due: now,
        };
        self.refresh_schedule(&mut leader).await?;
        for run in
            patrol_dispatch::in_flight(self.acceptor.store(), patrol_dispatch::MAX_ROWS).await?
        {
            // A refusal means the queue already counts a full run of the tenant in flight.
            let _ = leader.queue.resume_in_flight(&run.tenant, run.run_type);
            leader
                .in_flight
                .insert(run.run_id, (run.tenant, run.run_type));
        }
        let mut last_settings_reload = now;
        let mut settings_pending = false;
        loop {
            if !lock.check().await {
                return Err(LeadError::LostLock);
            }
            let now = tokio::time::Instant::now();
            if now >= leader.schedule_due
                || (settings_pending && now >= last_settings_reload + SETTINGS_DEBOUNCE)
            {
                self.refresh_schedule(&mut leader).await?;
                last_settings_reload = now;
                settings_pending = false;
            }
            self.finish_ended(&mut leader).await?;
            self.load_waiting(&mut leader).await?;
            self.dispatch_admissions(&mut leader).await;
            self.metrics.in_flight.set(leader.in_flight.len() as i64);
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = self.wake.notified() => {}
                _ = settings_changed.notified() => settings_pending = true,
                _ = tokio::time::sleep(self.settings.poll) => {}
            }
        }
    }

    /// The cadence of a tenant that stored `minutes` (or nothing), over the config layer.
    fn interval_ms(&self, minutes: Option<u32>, cache: &mut HashMap<Option<u32>, u64>) -> u64 {
        if let Some(ms) = self.settings.cadence_override_ms {
            return ms;
        }
        *cache.entry(minutes).or_insert_with(|| {
            let document = match minutes {
                Some(m) => serde_json::json!({ "patrol_interval_minutes": m }),
                None => serde_json::json!({}),
            };
            let stored = StoredSettings {
                document,
                version: 0,
                updated_at: None,
                updated_by: None,
            };
            match self.config_layer.resolve(&stored) {
                Ok(settings) => u64::from(settings.patrol_interval_minutes) * 60_000,
                Err(_) => self.settings.admission.interval_ms,
            }
        })
    }

    /// Adds new tenants, updates changed cadences and drops deleted tenants.
    async fn refresh_schedule(&self, leader: &mut Leader) -> Result<(), StoreError> {
        let rows =
            patrol_dispatch::schedule(self.acceptor.store(), patrol_dispatch::MAX_ROWS).await?;
        let now = Utc::now();
        let mut cache = HashMap::new();
        let mut seen = HashSet::with_capacity(rows.len());
        for row in rows {
            let interval = self.interval_ms(row.patrol_interval_minutes, &mut cache);
            match leader.intervals.get(&row.tenant) {
                Some(&known) if known == interval => {}
                Some(_) => {
                    leader.queue.set_interval(&row.tenant, interval, now);
                }
                None => leader.queue.add_tenant_with_interval(
                    row.tenant.clone(),
                    interval,
                    now,
                    row.last_successful_full_at,
                ),
            }
            leader.intervals.insert(row.tenant.clone(), interval);
            seen.insert(row.tenant);
        }
        leader.intervals.retain(|tenant, _| {
            let keep = seen.contains(tenant);
            if !keep {
                leader.queue.remove_tenant(tenant);
            }
            keep
        });
        leader.schedule_due = tokio::time::Instant::now() + self.settings.schedule_refresh;
        Ok(())
    }

    /// Takes ended runs out of the in-flight set.
    async fn finish_ended(&self, leader: &mut Leader) -> Result<(), StoreError> {
        if leader.in_flight.is_empty() {
            return Ok(());
        }
        let ids: Vec<(TenantId, RunId)> = leader
            .in_flight
            .iter()
            .map(|(id, (tenant, _))| (tenant.clone(), *id))
            .collect();
        for chunk in ids.chunks(1_000) {
            for run in patrol_dispatch::finished(self.acceptor.store(), chunk).await? {
                if leader.in_flight.remove(&run.run_id).is_none() {
                    continue;
                }
                let succeeded = matches!(run.status, RunStatus::Healthy | RunStatus::IssuesFound);
                let _ = leader.queue.on_finished(
                    &run.tenant,
                    run.run_type,
                    succeeded,
                    run.completed_at,
                );
            }
        }
        Ok(())
    }

    /// Hands runs accepted since the last look to the queue.
    async fn load_waiting(&self, leader: &mut Leader) -> Result<(), StoreError> {
        let mut refresh = false;
        for run in patrol_dispatch::undispatched(self.acceptor.store(), MAX_LOAD).await? {
            if leader.waiting.contains(&run.run_id) || leader.in_flight.contains_key(&run.run_id) {
                continue;
            }
            let queued = match run.run_type {
                RunType::Full => leader
                    .queue
                    .request_full(&run.tenant, run.run_id, run.queued_at),
                RunType::Scoped => leader
                    .queue
                    .enqueue_scoped(
                        &run.tenant,
                        QueuedScopedRun {
                            run_id: run.run_id,
                            trigger_reason: run.trigger_reason,
                            request: ScopedRequest {
                                scope: RequestedScope {
                                    resource_ids: run.scope_resource_ids,
                                    resource_types: Vec::new(),
                                },
                                alert_identifier: None,
                                alert_type: None,
                                context: None,
                            },
                            accepted_at: run.queued_at,
                        },
                    )
                    .map(|_| ()),
            };
            match queued {
                Ok(()) => {
                    leader.waiting.insert(run.run_id);
                }
                // A tenant created since the last schedule read.
                Err(Refusal::UnknownTenant(_)) => refresh = true,
                // Taken on a later look, once the queue has room or the full run in flight
                // (ended in the database, not yet seen here) is finished.
                Err(_) => {}
            }
        }
        if refresh {
            self.refresh_schedule(leader).await?;
        }
        Ok(())
    }

    /// Admits what the queue allows and dispatches it.
    async fn dispatch_admissions(&self, leader: &mut Leader) {
        loop {
            let capacity = self
                .settings
                .max_in_flight
                .saturating_sub(leader.in_flight.len());
            if capacity == 0 {
                return;
            }
            let admissions = leader.queue.next_admissions(Utc::now(), capacity);
            if admissions.is_empty() {
                return;
            }
            let mut outcomes = Vec::with_capacity(admissions.len());
            let mut tasks = JoinSet::new();
            for admission in admissions {
                if tasks.len() >= DISPATCH_CONCURRENCY {
                    if let Some(Ok(outcome)) = tasks.join_next().await {
                        outcomes.push(outcome);
                    }
                }
                tasks.spawn(dispatch_one(self.acceptor.clone(), admission));
            }
            while let Some(joined) = tasks.join_next().await {
                match joined {
                    Ok(outcome) => outcomes.push(outcome),
                    Err(error) => tracing::error!(%error, "a dispatch task failed"),
                }
            }
            let any_dispatched = outcomes
                .iter()
                .any(|o| matches!(o, Outcome::Dispatched { .. }));
            for outcome in outcomes {
                self.apply(leader, outcome);
            }
            if any_dispatched {
                self.acceptor.notify_outbox();
            }
        }
    }

    fn apply(&self, leader: &mut Leader, outcome: Outcome) {
        let now = Utc::now();
        match outcome {
            Outcome::Dispatched {
                tenant,
                run_id,
                run_type,
                trigger,
            } => {
                self.metrics
                    .dispatched
                    .get_or_create(&DispatchLabels {
                        run_type: run_type.as_str().to_owned(),
                        trigger: trigger.as_str().to_owned(),
                    })
                    .inc();
                leader.waiting.remove(&run_id);
                if run_type == RunType::Full && trigger != TriggerReason::Manual {
                    if let Some(Some(cause)) = leader.gate.insert(tenant.clone(), None) {
                        tracing::info!(tenant = %tenant, was = cause_str(cause), "patrol is ready again; cadence runs resume");
                    }
                }
                leader.in_flight.insert(run_id, (tenant, run_type));
            }
            Outcome::Skipped { tenant, blocked } => {
                self.metrics
                    .skipped
                    .get_or_create(&SkipLabels {
                        cause: cause_str(blocked.cause),
                    })
                    .inc();
                let before = leader.gate.insert(tenant.clone(), Some(blocked.cause));
                if before != Some(Some(blocked.cause)) {
                    tracing::warn!(
                        tenant = %tenant,
                        cause = cause_str(blocked.cause),
                        reason = %blocked.reason,
                        "scheduled patrol runs are skipped: patrol is not ready"
                    );
                }
                let _ = leader.queue.on_finished(&tenant, RunType::Full, false, now);
            }
            Outcome::Disabled { tenant } => {
                let cause = BlockedCause::PatrolDisabled;
                self.metrics
                    .skipped
                    .get_or_create(&SkipLabels {
                        cause: cause_str(cause),
                    })
                    .inc();
                if leader.gate.insert(tenant.clone(), Some(cause)) != Some(Some(cause)) {
                    tracing::info!(tenant = %tenant, "scheduled patrol runs are skipped: patrol is switched off");
                }
                let _ = leader.queue.on_finished(&tenant, RunType::Full, false, now);
            }
            Outcome::Refused { tenant, cause } => {
                self.metrics
                    .skipped
                    .get_or_create(&SkipLabels {
                        cause: cause.to_owned(),
                    })
                    .inc();
                tracing::info!(tenant = %tenant, cause, "a scheduled patrol run is skipped");
                let _ = leader.queue.on_finished(&tenant, RunType::Full, false, now);
            }
            Outcome::Coalesced { tenant } => {
                let _ = leader.queue.on_finished(&tenant, RunType::Full, false, now);
            }
            Outcome::Gone {
                tenant,
                run_id,
                run_type,
            } => {
                leader.waiting.remove(&run_id);
                let _ = leader.queue.on_finished(&tenant, run_type, false, now);
            }
            Outcome::Failed {
                tenant,
                run_id,
                run_type,
                error,
            } => {
                self.metrics.failures.inc();
                tracing::warn!(tenant = %tenant, %error, "dispatching a patrol run failed; will retry");
                // A waiting run stays undispatched in the database and is read again.
                if let Some(run_id) = run_id {
                    leader.waiting.remove(&run_id);
                }
                let _ = leader.queue.on_finished(&tenant, run_type, false, now);
            }
        }
    }
}

/// Writes the run's `jobs.watch` job and marks it dispatched in `tx`; `false` (nothing written)
/// when the run is no longer waiting.
pub async fn dispatch_in(
    acceptor: &RunAcceptor,
    tx: &TenantTx,
    job: &WatchJob,
) -> Result<bool, AcceptError> {
    if !patrol_dispatch::mark_dispatched(tx, job.run_id).await? {
        return Ok(false);
    }
    enqueue_watch_job(acceptor.subjects(), tx, job).await?;
    Ok(true)
}

/// Writes the run's `jobs.watch` job to the outbox in `tx`: the one writer of Watch jobs, for a
/// first dispatch and for a re-dispatch after the take deadline
/// ([`crate::lease_sweep::LeaseSweeper::sweep_untaken`]). Each call writes a new outbox row, so
/// each copy of the job has its own message id.
pub async fn enqueue_watch_job(
    subjects: &pulse_bus::Subjects,
    tx: &TenantTx,
    job: &WatchJob,
) -> Result<(), pulse_bus::OutboxError> {
    let row = OutboxRow::job(subjects, tx.tenant(), WATCH_JOB, job)?;
    pulse_bus::enqueue(&**tx.client(), row).await?;
    Ok(())
}

async fn dispatch_one(acceptor: RunAcceptor, admission: Admission) -> Outcome {
    let Admission { tenant, run, .. } = admission;
    let run_type = run.run_type();
    let (waiting_id, trigger) = match &run {
        AdmittedRun::Full {
            trigger_reason,
            run_id,
            ..
        } => (*run_id, *trigger_reason),
        AdmittedRun::Scoped(scoped) => (Some(scoped.run_id), scoped.trigger_reason),
    };
    let failed = |error: String| Outcome::Failed {
        tenant: tenant.clone(),
        run_id: waiting_id,
        run_type,
        error,
    };
    let tx = match acceptor.store().tenant_tx(&tenant).await {
        Ok(tx) => tx,
        Err(error) => return failed(error.to_string()),
    };
    let result = match waiting_id {
        Some(run_id) => {
            let job = WatchJob {
                run_id,
                run_type,
                trigger_reason: trigger,
            };
            match dispatch_in(&acceptor, &tx, &job).await {
                Ok(true) => Ok(Outcome::Dispatched {
                    tenant: tenant.clone(),
                    run_id,
                    run_type,
                    trigger,
                }),
                Ok(false) => Ok(Outcome::Gone {
                    tenant: tenant.clone(),
                    run_id,
                    run_type,
                }),
                Err(error) => Err(error.to_string()),
            }
        }
        None => start_due(&acceptor, &tx, trigger).await,
    };
    match result {
        Ok(outcome @ Outcome::Dispatched { .. }) => match tx.commit().await {
            Ok(()) => outcome,
            Err(error) => failed(error.to_string()),
        },
        Ok(outcome) => {
            let _ = tx.rollback().await;
            outcome
        }
        Err(error) => {
            let _ = tx.rollback().await;
            failed(error)
        }
    }
}

/// A due cadence slot: record through the accept path (which checks the readiness gate before
/// anything is written) and dispatch, not committed.
async fn start_due(
    acceptor: &RunAcceptor,
    tx: &TenantTx,
    trigger: TriggerReason,
) -> Result<Outcome, String> {
    let tenant = tx.tenant().clone();
    let submission = Submission {
        trigger,
        scope: None,
        requested_by: None,
    };
    let accepted = match acceptor.record(tx, submission).await {
        Ok(accepted) => accepted,
        Err(AcceptError::NotReady(blocked)) => return Ok(Outcome::Skipped { tenant, blocked }),
        Err(AcceptError::Disabled) => return Ok(Outcome::Disabled { tenant }),
        Err(AcceptError::Suspended { .. }) => {
            return Ok(Outcome::Refused {
                tenant,
                cause: pulse_bus::ErrorCode::TenantSuspended.code(),
            });
        }
        Err(AcceptError::Quota(_)) => {
            return Ok(Outcome::Refused {
                tenant,
                cause: pulse_bus::ErrorCode::QuotaExceeded.code(),
            });
        }
        Err(AcceptError::RunInProgress(_)) => return Ok(Outcome::Coalesced { tenant }),
        Err(error) => return Err(error.to_string()),
    };
    let job = WatchJob {
        run_id: accepted.run_id,
        run_type: RunType::Full,
        trigger_reason: trigger,
    };
    match dispatch_in(acceptor, tx, &job).await {
        Ok(true) => Ok(Outcome::Dispatched {
            tenant,
            run_id: accepted.run_id,
            run_type: RunType::Full,
            trigger,
        }),
        Ok(false) => Err(format!(
            "run {} was not waiting after it was recorded",
            accepted.run_id
        )),
        Err(error) => Err(error.to_string()),
    }
}
