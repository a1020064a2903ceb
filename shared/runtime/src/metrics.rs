//! What every service exports about the machinery it shares with the others: its Postgres pool
//! (connections in use against the pool's size, callers waiting for one), the outbox backlog
//! (rows not yet published and the age of the oldest), and the bus's delivery counters
//! (redeliveries and dead letters, [`pulse_bus::delivery_metrics`]). Plus [`PatrolRunMetrics`],
//! the one definition of the Patrol run series that every writer of a run's terminal state
//! (model-runner, scheduler) counts into.
//!
//! The pool and the backlog are sampled every [`SAMPLE_EVERY`] by a harness task; no label
//! carries a tenant.

use std::sync::LazyLock;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use pulse_domain::patrol::run::PatrolRun;
use pulse_store::Store;
use pulse_telemetry::Metrics;
use tokio_util::sync::CancellationToken;

/// How often the pool and the outbox backlog are read.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// `pulse_db_pool_connections{state="in_use"|"idle"}`, `pulse_db_pool_max_connections`,
/// `pulse_db_pool_waiting`, `pulse_outbox_pending_messages`, `pulse_outbox_oldest_pending_age_seconds`.
#[derive(Clone, Default)]
pub struct RuntimeMetrics {
    pub pool_connections: Family<PoolStateLabels, Gauge>,
    pub pool_max: Gauge,
    pub pool_waiting: Gauge,
    pub outbox_pending: Gauge,
    pub outbox_oldest_age: Gauge<f64, AtomicU64>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolStateLabels {
    /// `in_use` or `idle`.
    pub state: &'static str,
}

impl RuntimeMetrics {
    /// Registers the shared series (and the bus's delivery counters) in `metrics`.
    pub fn register(metrics: &Metrics) -> Self {
        let this = Self::default();
        let copy = this.clone();
        metrics.register(|registry| {
            registry.register(
                "db_pool_connections",
                "Postgres connections of this process's pool, in use or idle",
                copy.pool_connections,
            );
            registry.register(
                "db_pool_max_connections",
                "The most connections this process's pool may open",
                copy.pool_max,
            );
            registry.register(
                "db_pool_waiting",
                "Callers waiting for a Postgres connection from the pool",
                copy.pool_waiting,
            );
            registry.register(
                "outbox_pending_messages",
                "Outbox rows committed and not yet published (every tenant)",
                copy.outbox_pending,
            );
            registry.register(
                "outbox_oldest_pending_age_seconds",
                "Age of the oldest outbox row not yet published; 0 when none is pending",
                copy.outbox_oldest_age,
            );
            pulse_bus::delivery_metrics::delivery_metrics().register_in(registry);
        });
        this
    }

    /// Reads the pool's state and the outbox backlog once.
    pub async fn sample(&self, store: &Store) {
        let status = store.pool().status();
        let in_use = status.size.saturating_sub(status.available);
        self.pool_connections
            .get_or_create(&PoolStateLabels { state: "in_use" })
            .set(gauge_value(in_use));
        self.pool_connections
            .get_or_create(&PoolStateLabels { state: "idle" })
            .set(gauge_value(status.available));
        self.pool_max.set(gauge_value(status.max_size));
        self.pool_waiting.set(gauge_value(status.waiting));
        let backlog = async {
            let client = store.pool().get().await.map_err(|e| e.to_string())?;
            pulse_bus::outbox::backlog(&**client)
                .await
                .map_err(|e| e.to_string())
        };
        match tokio::time::timeout(Duration::from_secs(3), backlog).await {
            Ok(Ok(backlog)) => {
                self.outbox_pending.set(backlog.pending);
                self.outbox_oldest_age.set(backlog.oldest_age_seconds);
            }
            Ok(Err(error)) => tracing::debug!(%error, "outbox backlog not read"),
            Err(_) => tracing::debug!("outbox backlog read timed out"),
        }
    }

    /// Samples every [`SAMPLE_EVERY`] until `stop`.
    pub async fn run(self, store: Store, stop: CancellationToken) {
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => self.sample(&store).await,
            }
        }
    }
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunEndLabels {
    pub run_type: &'static str,
    pub trigger: &'static str,
    /// `healthy`, `issues_found` or `error`.
    pub status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunTypeLabels {
    pub run_type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunErrorLabels {
    /// The run's classified error cause.
    pub cause: &'static str,
}

/// `pulse_patrol_runs_completed_total{run_type,trigger,status}`,
/// `pulse_patrol_run_errors_total{cause}` and `pulse_patrol_run_duration_seconds{run_type}`:
/// every Patrol run that reached a terminal state in this process, counted once by whoever wrote
/// that state ([`PatrolRunMetrics::ended`]).
#[derive(Clone)]
pub struct PatrolRunMetrics {
    pub completed: Family<RunEndLabels, Counter>,
    pub errors: Family<RunErrorLabels, Counter>,
    pub duration: Family<RunTypeLabels, Histogram>,
}

/// Run durations: a scoped check takes seconds, a full run on a slow local model minutes.
const RUN_DURATION_BUCKETS: [f64; 12] = [
    0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];

impl Default for PatrolRunMetrics {
    fn default() -> Self {
        Self {
            completed: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(|| {
                Histogram::new(RUN_DURATION_BUCKETS.iter().copied())
            }),
        }
    }
}

impl PatrolRunMetrics {
    /// The process's run series.
    pub fn shared() -> &'static Self {
        static METRICS: LazyLock<PatrolRunMetrics> = LazyLock::new(PatrolRunMetrics::default);
        &METRICS
    }

    /// Registers the process's run series in `metrics` (services that end runs call it once).
    pub fn register(metrics: &Metrics) {
        let this = Self::shared().clone();
        // Every error cause at zero, so each series exists before the first such run.
        for cause in pulse_domain::patrol::run::ErrorCause::ALL {
            let _ = this.errors.get_or_create(&RunErrorLabels {
                cause: cause.as_str(),
            });
        }
        metrics.register(|registry| {
            registry.register(
                "patrol_runs_completed",
                "Patrol runs that reached a terminal state, by trigger and outcome",
                this.completed,
            );
            registry.register(
                "patrol_run_errors",
                "Patrol runs that ended in error, by classified cause",
                this.errors,
            );
            registry.register(
                "patrol_run_duration_seconds",
                "Wall time of ended Patrol runs from start to terminal state",
                this.duration,
            );
        });
    }

    /// Counts `run`, just written in its terminal state.
    pub fn ended(&self, run: &PatrolRun) {
        self.completed
            .get_or_create(&RunEndLabels {
                run_type: run.run_type.as_str(),
                trigger: run.trigger_reason.as_str(),
                status: run.status.as_str(),
            })
            .inc();
        if let Some(cause) = run.error_cause {
            self.errors
                .get_or_create(&RunErrorLabels {
                    cause: cause.as_str(),
                })
                .inc();
        }
        if let Some(ms) = run.duration_ms {
            self.duration
                .get_or_create(&RunTypeLabels {
                    run_type: run.run_type.as_str(),
                })
                .observe(ms as f64 / 1000.0);
        }
    }
}

/// Counts `run`, just written in its terminal state, in the process's run series.
pub fn patrol_run_ended(run: &PatrolRun) {
    PatrolRunMetrics::shared().ended(run);
}
