//! The `jobs.watch` worker: executes accepted Patrol runs.
//!
//! Per job, in the job's tenant: a terminal run is acked untouched (a redelivery never runs the
//! model twice); a `running` run is acked untouched too (another runner holds or held it; if that
//! runner died, the patrol-scheduler's lease sweeper ends the run `runner_lost`). A `queued` run:
//!
//! 1. the readiness gate (`pulse_store::patrol_readiness::gate`, the evaluation the status and
//!    admission use): known not ready ends the run `error` (cause `not_ready`, or
//!    `budget_exceeded` for a used-up spend budget) before any provider call;
//! 2. the effective scope is re-resolved now: a scoped run none of whose resources still exists
//!    ends `error` (`scope_empty`, the requested ids kept, the effective scope emptied);
//! 3. the run starts under a lease (`queued -> running`, a compare-and-swap, so of two runners
//!    exactly one starts it) and a [`lease::Heartbeat`] renews it every lease/3 with a progress
//!    ack of the job;
//! 4. the [`executor::WatchExecutor`] runs the model part;
//! 5. exactly one terminal compare-and-swap records the outcome, by the lease holder only.
//!
//! Every state change is written with its event (`events.run.started`, `events.run.progress`,
//! `events.run.tool`, `events.run.completed`) through the outbox in the same transaction; the
//! job is acked only after that commit. The service relays its own outbox.

pub mod budget;
pub mod executor;
pub mod lease;
pub mod offer;
pub mod runtime;
pub mod seed;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use pulse_bus::events::{
    RUN_COMPLETED, RUN_PROGRESS, RUN_STARTED, RUN_TOOL, RunCompleted, RunProgress, RunStarted,
    RunTool,
};
use pulse_bus::patrol_api::{WATCH_JOB, WatchJob};
use pulse_bus::{
    Bus, JobConsumerConfig, JobContext, JobError, JobWorker, JobWorkerConfig, Message, OutboxRow,
    Subjects,
};
use pulse_domain::TenantId;
use pulse_domain::finding::{FindingId, RunOutcome, RuntimeRecovery, is_runtime_failure};
use pulse_domain::patrol::outcome::conclude;
use pulse_domain::patrol::run::{
    CheckedCounts, ErrorCause, PatrolRun, RunEvent, RunId, RunStatus, RunType,
};
use pulse_domain::resource::{Resource, ResourceType};
use pulse_runtime::{CancellationToken, ServiceContext};
use pulse_store::findings::{self, FindingsError};
use pulse_store::patrol_runs::{self, ApplyError};
use pulse_store::settings::{ConfigLayer, MasterKey};
use pulse_store::{Store, StoreError, TenantTx, TxRetry, patrol_readiness, resources};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::patrol_connection::{ConnectionError, patrol_connection};
use crate::preflight::RouteConnection;
use pulse_agent_loop::agent_loop::BoxFuture;
use pulse_agent_loop::provider::Usage;

use executor::{Ending, ProgressSink, SharedExecutor, WatchInput};
use lease::{Heartbeat, LeaseHold};
use runtime::WatchRuntime;

use pulse_agent_loop::provider::pool::ProviderPool;

/// How the worker runs.
#[derive(Debug, Clone)]
pub struct WatchSettings {
    /// How long a lease lasts without renewal; also the job's ack wait.
    pub lease: Duration,
    /// How often the lease is renewed (a third of it).
    pub heartbeat: Duration,
    /// Runs executed at once by this process.
    pub concurrency: usize,
    /// How long shutdown lets running runs finish before abandoning them (their leases lapse).
    pub shutdown_grace: Duration,
}

impl WatchSettings {
    pub fn from_config(config: &pulse_config::RunnerConfig) -> Self {
        Self {
            lease: config.lease(),
            heartbeat: config.heartbeat(),
            concurrency: 4,
            shutdown_grace: Duration::from_secs(5),
        }
    }

    fn worker_config(&self) -> JobWorkerConfig {
        JobWorkerConfig {
            consumer: JobConsumerConfig {
                ack_wait: self.lease,
                ..JobConsumerConfig::default()
            },
            concurrency: self.concurrency,
            shutdown_grace: self.shutdown_grace,
            progress_interval: Some(self.heartbeat),
            ..JobWorkerConfig::default()
        }
    }
}

/// Executes Watch jobs.
pub struct WatchRunner {
    store: Store,
    subjects: Subjects,
    config_layer: ConfigLayer,
    /// Provider keys given in config or the environment, by provider id.
    environment_keys: BTreeMap<String, String>,
    master_key: MasterKey,
    runner_id: String,
    settings: WatchSettings,
    executor: SharedExecutor,
    outbox_notify: Arc<Notify>,
}

impl std::fmt::Debug for WatchRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchRunner")
            .field("runner_id", &self.runner_id)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Why a run cannot start, decided before any provider call.
struct Refusal {
    cause: ErrorCause,
    detail: String,
    /// The effective scope to record (emptied when nothing of it exists any more).
    empty_scope: bool,
}

/// What a queued run starts with.
struct Prepared {
    inventory: Vec<Resource>,
    connection: RouteConnection,
}

fn retry(what: &str) -> impl Fn(StoreError) -> JobError + '_ {
    move |error| JobError::retry(format!("{what}: {error}"))
}

impl WatchRunner {
    /// A runner with this step's executor.
    pub fn new(
        ctx: &ServiceContext,
        master_key: MasterKey,
        outbox_notify: Arc<Notify>,
        providers: Arc<ProviderPool>,
    ) -> anyhow::Result<Self> {
        let config_layer = ConfigLayer::from_config(&ctx.config.ai)?;
        let environment_keys = crate::patrol_connection::environment_keys(&ctx.config.ai);
        Ok(Self {
            store: ctx.store.clone(),
            subjects: ctx.bus.subjects().clone(),
            config_layer,
            environment_keys,
            master_key,
            runner_id: ctx.instance_id.clone(),
            settings: WatchSettings::from_config(&ctx.config.runner),
            executor: Arc::new(WatchRuntime::new(
                ctx.store.clone(),
                Some(ctx.bus.clone()),
                providers,
            )),
            outbox_notify,
        })
    }

    /// Replaces the executor (a test's).
    pub fn with_executor(mut self, executor: SharedExecutor) -> Self {
        self.executor = executor;
        self
    }

    pub fn runner_id(&self) -> &str {
        &self.runner_id
    }

    /// Handles one `jobs.watch` job. `Ok` acks it; every path that wrote something committed
    /// first. When this delivery fails and the job is dead-lettered (its last delivery, or a
    /// fatal error), a still-queued run is ended `error` (`internal`) so it does not block the
    /// tenant's full runs forever.
    pub async fn handle(
        self: Arc<Self>,
        job_ctx: JobContext,
        job: WatchJob,
    ) -> Result<(), JobError> {
        let last_delivery = job_ctx.is_last_delivery();
        let tenant = job_ctx.tenant.clone();
        let run_id = job.run_id;
        let result = self.clone().handle_delivery(job_ctx, job).await;
        if let Err(error) = &result
            && (last_delivery || matches!(error, JobError::Fatal(_)))
        {
            let reason = format!("the watch job failed repeatedly and was dead-lettered: {error}");
            match end_dead_lettered(&self.store, &self.subjects, &tenant, run_id, &reason).await {
                Ok(Some(_)) => {
                    self.outbox_notify.notify_one();
                    tracing::warn!(%run_id, tenant = %tenant, %error, "watch job dead-lettered; queued run ended error");
                }
                Ok(None) => {
                    tracing::warn!(%run_id, tenant = %tenant, %error, "watch job dead-lettered; run was not queued, left as it is");
                }
                Err(end_error) => {
                    tracing::error!(%run_id, tenant = %tenant, %error, %end_error, "watch job dead-lettered and its run could not be ended");
                }
            }
        }
        result
    }

    async fn handle_delivery(
        self: Arc<Self>,
        job_ctx: JobContext,
        job: WatchJob,
    ) -> Result<(), JobError> {
        let tenant = job_ctx.tenant.clone();
        let now = Utc::now();
        let tx = self
            .store
            .tenant_tx(&tenant)
            .await
            .map_err(retry("opening the run's transaction"))?;
        let Some(run) = patrol_runs::get(&tx, job.run_id)
            .await
            .map_err(retry("reading the run"))?
        else {
            tracing::warn!(run_id = %job.run_id, tenant = %tenant, "watch job for an unknown run; dropped");
            return Ok(());
        };
        match run.status {
            RunStatus::Queued => {}
            RunStatus::Running => {
                tracing::info!(run_id = %run.id, "run already started by a runner; job acked without a model call");
                return Ok(());
            }
            done => {
                tracing::info!(run_id = %run.id, status = %done, "run already ended; job acked without a model call");
                return Ok(());
            }
        }
        let prepared = match self.prepare(&tx, &run, now).await? {
            Ok(prepared) => prepared,
            Err(refusal) => return self.refuse(tx, &run, refusal).await,
        };
        let scope = (run.run_type == RunType::Scoped).then(|| {
            prepared
                .inventory
                .iter()
                .map(|r| r.id.as_str().to_owned())
                .collect::<Vec<_>>()
        });
        let started = patrol_runs::start(
            &tx,
            run.id,
            &self.runner_id,
            self.settings.lease,
            now,
            scope.as_deref(),
        )
        .await;
        let (run, lease) = match started {
            Ok(started) => started,
            Err(ApplyError::Store(error)) => return Err(retry("starting the run")(error)),
            Err(other) => {
                tracing::info!(run_id = %run.id, reason = %other, "another runner took the run; job acked");
                return Ok(());
            }
        };
        let event = RunStarted {
            run_id: run.id,
            run_type: run.run_type,
            trigger_reason: run.trigger_reason,
            started_at: run.started_at.unwrap_or(now),
            runner_id: self.runner_id.clone(),
            effective_scope_resource_ids: run.effective_scope_resource_ids.clone(),
        };
        self.enqueue_event(&tx, RUN_STARTED, &event)
            .await
            .map_err(JobError::retry)?;
        tx.commit().await.map_err(retry("committing the start"))?;
        self.outbox_notify.notify_one();
        tracing::info!(run_id = %run.id, tenant = %tenant, lease_expires_at = %lease.expires_at, route = %prepared.connection.route, "patrol run started");

        let mut heartbeat = Heartbeat::spawn(
            LeaseHold {
                store: self.store.clone(),
                tenant: tenant.clone(),
                run_id: run.id,
                runner_id: self.runner_id.clone(),
                lease: self.settings.lease,
            },
            self.settings.heartbeat,
            job_ctx,
        );
        let progress = RecordedProgress {
            runner: &self,
            tenant: &tenant,
            run: &run,
        };
        let input = WatchInput {
            tenant: &tenant,
            run: &run,
            connection: &prepared.connection,
            inventory: &prepared.inventory,
            progress: &progress,
        };
        let outcome = tokio::select! {
            outcome = self.executor.execute(input) => Some(outcome),
            _ = heartbeat.lost() => None,
        };
        let Some(outcome) = outcome else {
            // The sweeper (or another writer) ended the run; nothing of ours may land on it.
            heartbeat.stop().await;
            return Ok(());
        };
        let result = self
            .finish(&tenant, &run, &prepared.inventory, outcome)
            .await;
        heartbeat.stop().await;
        result
    }

    /// The gate, the scope and the route of a queued run, or why it cannot start.
    async fn prepare(
        &self,
        tx: &TenantTx,
        run: &PatrolRun,
        now: chrono::DateTime<Utc>,
    ) -> Result<Result<Prepared, Refusal>, JobError> {
        // A run accepted before the tenant switched Patrol off does not start afterwards.
        if !pulse_store::settings::patrol_enabled(tx)
            .await
            .map_err(retry("reading the Patrol switch"))?
        {
            return Ok(Err(Refusal {
                cause: ErrorCause::Cancelled,
                detail: "Patrol was switched off after this run was accepted, so it did not \
                         start; switch Patrol on (PUT /api/settings/ai {\"patrol_enabled\": \
                         true}) and request a run again"
                    .to_owned(),
                empty_scope: false,
            }));
        }
        if let Err(blocked) = patrol_readiness::gate(tx, &self.config_layer, now)
            .await
            .map_err(retry("assessing readiness"))?
        {
            return Ok(Err(Refusal {
                cause: match blocked.cause {
                    // A used-up spend budget is its own run cause, with its reset in the detail.
                    pulse_domain::patrol::status::BlockedCause::BudgetExceeded => {
                        ErrorCause::BudgetExceeded
                    }
                    _ => ErrorCause::NotReady,
                },
                detail: blocked.reason,
                empty_scope: false,
            }));
        }
        let inventory = inventory(tx, run)
            .await
            .map_err(retry("reading the inventory"))?;
        if inventory.is_empty() {
            let detail = match run.run_type {
                RunType::Scoped => format!(
                    "none of the requested resources exists any more: {}",
                    run.scope_resource_ids.join(", ")
                ),
                RunType::Full => "the inventory holds no resource".to_owned(),
            };
            return Ok(Err(Refusal {
                cause: ErrorCause::ScopeEmpty,
                detail,
                empty_scope: true,
            }));
        }
        let connection = match self.connection(tx).await? {
            Ok(connection) => connection,
            Err(detail) => {
                return Ok(Err(Refusal {
                    cause: ErrorCause::NotReady,
                    detail,
                    empty_scope: false,
                }));
            }
        };
        Ok(Ok(Prepared {
            inventory,
            connection,
        }))
    }

    /// The tenant's Patrol route with its base URL and opened key, or why there is none.
    async fn connection(&self, tx: &TenantTx) -> Result<Result<RouteConnection, String>, JobError> {
        match patrol_connection(
            tx,
            &self.config_layer,
            &self.environment_keys,
            &self.master_key,
        )
        .await
        {
            Ok(patrol) => Ok(Ok(patrol.connection)),
            Err(ConnectionError::NoRoute(reason)) => Ok(Err(reason)),
            Err(ConnectionError::KeyUnreadable { provider, .. }) => Ok(Err(format!(
                "the stored key of provider {provider} cannot be opened; enter it again"
            ))),
            Err(ConnectionError::Store(e)) => {
                Err(JobError::retry(format!("reading ai settings: {e}")))
            }
        }
    }

    /// Ends a queued run `error` before any provider call.
    async fn refuse(
        &self,
        tx: TenantTx,
        run: &PatrolRun,
        refusal: Refusal,
    ) -> Result<(), JobError> {
        let ended = patrol_runs::finish(
            &tx,
            run.id,
            None,
            RunEvent::Failed {
                cause: refusal.cause,
            },
            Utc::now(),
            Some(&refusal.detail),
            |record| {
                if refusal.empty_scope {
                    record.effective_scope_resource_ids.clear();
                }
            },
        )
        .await;
        let ended = match ended {
            Ok(ended) => ended,
            Err(ApplyError::Store(error)) => return Err(retry("refusing the run")(error)),
            Err(other) => {
                tracing::info!(run_id = %run.id, reason = %other, "run moved before it could be refused; job acked");
                return Ok(());
            }
        };
        self.enqueue_event(&tx, RUN_COMPLETED, &RunCompleted::of(&ended))
            .await
            .map_err(JobError::retry)?;
        tx.commit().await.map_err(retry("committing the refusal"))?;
        pulse_runtime::metrics::patrol_run_ended(&ended);
        self.outbox_notify.notify_one();
        tracing::info!(run_id = %run.id, cause = %refusal.cause, detail = %refusal.detail, "patrol run refused before any model call");
        Ok(())
    }

    /// The one terminal write of a started run, with its tool and completion events; run again
    /// on a retryable database error ([`Store::retry_tenant_tx`]). A write that still fails hands
    /// the job back (the lease then lapses and the sweeper records `runner_lost`).
    async fn finish(
        &self,
        tenant: &TenantId,
        run: &PatrolRun,
        inventory: &[Resource],
        outcome: executor::WatchOutcome,
    ) -> Result<(), JobError> {
        let (event, detail, summary) = match &outcome.ending {
            Ending::Answered {
                accounting,
                summary,
                errors,
            } => {
                let conclusion = conclude(accounting);
                // The run's own errors say more than their count.
                let detail = if errors.is_empty() {
                    conclusion.detail
                } else {
                    Some(errors.join("; "))
                };
                (conclusion.event, detail, Some(summary.clone()))
            }
            Ending::Failed { cause, detail } => (
                RunEvent::Failed { cause: *cause },
                Some(detail.clone()),
                None,
            ),
        };
        let counts = checked_counts(inventory);
        let (detail, summary, outcome) = (detail.as_deref(), &summary, &outcome);
        let written = self
            .store
            .retry_tenant_tx(tenant, &TxRetry::default(), |tx| async move {
                let ended = self
                    .write_finish(&tx, run, event, detail, |record| {
                        record.counts = counts;
                        record.input_tokens = outcome.usage.input_tokens;
                        record.output_tokens = outcome.usage.output_tokens;
                        record.cost_usd = outcome.cost.map(|c| c.as_f64());
                        record.tool_calls = outcome.tool_calls.clone();
                        record.tool_call_count = outcome.tool_call_count;
                        record.tool_calls_recovered = outcome.tool_calls_recovered;
                        record.turns = outcome.turns;
                        record.ai_analysis = summary.clone();
                        let findings = &outcome.findings;
                        record.new_findings = findings.new_findings;
                        record.existing_findings = findings.existing_findings;
                        record.rejected_findings = findings.rejected_findings;
                        record.resolved_findings = findings.resolved_findings;
                        record.finding_ids = findings.finding_ids.clone();
                        record.finding_assessments = findings.assessments.clone();
                        record.error_count = findings.error_count;
                    })
                    .await?;
                tx.commit().await?;
                Ok(ended)
            })
            .await;
        match written {
            Ok(ended) => {
                self.outbox_notify.notify_one();
                pulse_runtime::metrics::patrol_run_ended(&ended);
                tracing::info!(run_id = %run.id, status = %ended.status, cause = ?ended.error_cause, turns = outcome.turns, input_tokens = ended.input_tokens, output_tokens = ended.output_tokens, "patrol run finished");
                Ok(())
            }
            Err(ApplyError::Store(error)) => Err(JobError::retry(format!(
                "the terminal write failed: {error}"
            ))),
            Err(other) => {
                tracing::warn!(run_id = %run.id, reason = %other, "run ended elsewhere before its terminal write; outcome dropped");
                Ok(())
            }
        }
    }

    /// The terminal write in `tx`: the record, what it means for the finding store, and the
    /// run's tool and completion events.
    async fn write_finish(
        &self,
        tx: &TenantTx,
        run: &PatrolRun,
        event: RunEvent,
        detail: Option<&str>,
        update: impl FnOnce(&mut PatrolRun),
    ) -> Result<PatrolRun, ApplyError> {
        let ended = patrol_runs::finish(
            tx,
            run.id,
            Some(&self.runner_id),
            event,
            Utc::now(),
            detail,
            update,
        )
        .await?;
        findings_after_run(tx, &ended).await.map_err(|e| match e {
            FindingsError::Store(e) => ApplyError::Store(e),
            other => ApplyError::Store(StoreError::Invalid(other.to_string())),
        })?;
        for call in &ended.tool_calls {
            let tool = RunTool {
                run_id: ended.id,
                call: call.clone(),
            };
            self.enqueue_event(tx, RUN_TOOL, &tool)
                .await
                .map_err(|e| ApplyError::Store(StoreError::Invalid(e)))?;
        }
        self.enqueue_event(tx, RUN_COMPLETED, &RunCompleted::of(&ended))
            .await
            .map_err(|e| ApplyError::Store(StoreError::Invalid(e)))?;
        Ok(ended)
    }

    async fn enqueue_event<M: Message>(
        &self,
        tx: &TenantTx,
        (domain, event): (&str, &str),
        message: &M,
    ) -> Result<(), String> {
        let row = OutboxRow::event(&self.subjects, tx.tenant(), domain, event, message)
            .map_err(|e| format!("building {domain}.{event}: {e}"))?;
        pulse_bus::enqueue(&**tx.client(), row)
            .await
            .map(|_| ())
            .map_err(|e| format!("enqueueing {domain}.{event}: {e}"))
    }
}

/// The resources a run covers now: the still-existing part of a scoped run's effective scope,
/// or the whole inventory of a full run.
async fn inventory(tx: &TenantTx, run: &PatrolRun) -> Result<Vec<Resource>, StoreError> {
    match run.run_type {
        RunType::Full => resources::list(tx, None).await,
        RunType::Scoped => {
            let mut found = Vec::new();
            for id in &run.effective_scope_resource_ids {
                if let Some(resource) = resources::get(tx, id).await? {
                    found.push(resource);
                }
            }
            Ok(found)
        }
    }
}

/// What a terminal run means for the finding store, in its terminal transaction:
///
/// - a successful **full** run resolves from absence what
///   [`pulse_store::findings::reconcile_stale`] allows (never after an error or scoped run),
///   sparing what the run reported or assessed;
/// - any successful run clears the synthetic `ai-service` runtime failure finding;
/// - a run ending `error` for a provider, tool or budget reason raises (or re-detects) it.
async fn findings_after_run(tx: &TenantTx, ended: &PatrolRun) -> Result<(), FindingsError> {
    let now = Utc::now();
    if ended.status.is_success() {
        if ended.run_type == RunType::Full {
            let touched: HashSet<FindingId> = ended
                .finding_ids
                .iter()
                .chain(ended.finding_assessments.iter().map(|a| &a.finding_id))
                .filter_map(|id| id.parse().ok())
                .collect();
            let outcome = RunOutcome::SuccessfulFull {
                run_id: ended.id,
                started_at: ended.started_at.unwrap_or(ended.queued_at),
            };
            let resolved = findings::reconcile_stale(tx, &outcome, &touched, now).await?;
            if !resolved.is_empty() {
                tracing::info!(run_id = %ended.id, resolved = resolved.len(), "stale findings resolved after a successful full run");
            }
        }
        let cleared =
            findings::clear_runtime_failure(tx, RuntimeRecovery::SuccessfulRun, now).await?;
        if !cleared.is_empty() {
            tracing::info!(run_id = %ended.id, "patrol runtime failure finding cleared by a successful run");
        }
    } else if let Some(cause) = ended.error_cause.filter(|c| is_runtime_failure(*c)) {
        let detail = ended.error_detail.as_deref().unwrap_or(cause.summary());
        findings::report_runtime_failure(tx, cause, detail, ended.id, now).await?;
        tracing::warn!(run_id = %ended.id, %cause, "patrol runtime failure finding raised");
    }
    Ok(())
}

/// Ends the run of a dead-lettered job `error` (`internal`, with `reason` as its detail) and
/// enqueues its `events.run.completed`, only while it is still `queued`: a running run belongs
/// to its lease holder and the lease sweeper, a terminal one never changes. Returns the ended
/// run, or `None` when it was not queued (or does not exist).
pub async fn end_dead_lettered(
    store: &Store,
    subjects: &Subjects,
    tenant: &TenantId,
    run_id: RunId,
    reason: &str,
) -> Result<Option<PatrolRun>, StoreError> {
    let tx = store.tenant_tx(tenant).await?;
    match patrol_runs::get(&tx, run_id).await? {
        Some(run) if run.status == RunStatus::Queued => {}
        _ => return Ok(None),
    }
    let ended = patrol_runs::finish(
        &tx,
        run_id,
        None,
        RunEvent::Failed {
            cause: ErrorCause::Internal,
        },
        Utc::now(),
        Some(reason),
        |_| {},
    )
    .await;
    let ended = match ended {
        Ok(ended) => ended,
        Err(ApplyError::Store(error)) => return Err(error),
        Err(_) => return Ok(None),
    };
    let (domain, event) = RUN_COMPLETED;
    let row = OutboxRow::event(subjects, tenant, domain, event, &RunCompleted::of(&ended))
        .map_err(|e| StoreError::Invalid(format!("building {domain}.{event}: {e}")))?;
    pulse_bus::enqueue(&**tx.client(), row)
        .await
        .map_err(|e| StoreError::Invalid(format!("enqueueing {domain}.{event}: {e}")))?;
    tx.commit().await?;
    pulse_runtime::metrics::patrol_run_ended(&ended);
    Ok(Some(ended))
}

fn checked_counts(inventory: &[Resource]) -> CheckedCounts {
    let of = |kind: ResourceType| {
        u32::try_from(inventory.iter().filter(|r| r.resource_type == kind).count())
            .unwrap_or(u32::MAX)
    };
    CheckedCounts {
        resources_checked: u32::try_from(inventory.len()).unwrap_or(u32::MAX),
        hosts_checked: of(ResourceType::Host),
        docker_checked: of(ResourceType::AppContainer),
        services_checked: of(ResourceType::Service),
        storage_checked: of(ResourceType::Storage),
    }
}

/// Progress of a running run: its tokens so far on the record and `events.run.progress`, in one
/// transaction, only while this runner holds the lease. A failed write is logged, never fatal.
struct RecordedProgress<'a> {
    runner: &'a WatchRunner,
    tenant: &'a TenantId,
    run: &'a PatrolRun,
}

impl RecordedProgress<'_> {
    async fn write(&self, provider_calls: u32, total: Usage) -> Result<bool, String> {
        let tx = self
            .runner
            .store
            .tenant_tx(self.tenant)
            .await
            .map_err(|e| e.to_string())?;
        let updated =
            patrol_runs::record_progress(&tx, self.run.id, &self.runner.runner_id, |record| {
                record.input_tokens = total.input_tokens;
                record.output_tokens = total.output_tokens;
            })
            .await
            .map_err(|e| e.to_string())?;
        if updated.is_none() {
            return Ok(false);
        }
        let event = RunProgress {
            run_id: self.run.id,
            provider_calls,
            input_tokens: total.input_tokens,
            output_tokens: total.output_tokens,
            at: Utc::now(),
        };
        self.runner.enqueue_event(&tx, RUN_PROGRESS, &event).await?;
        tx.commit().await.map_err(|e| e.to_string())?;
        self.runner.outbox_notify.notify_one();
        Ok(true)
    }
}

impl ProgressSink for RecordedProgress<'_> {
    fn provider_call(&self, provider_calls: u32, total: Usage) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            match self.write(provider_calls, total).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::debug!(run_id = %self.run.id, "progress not recorded: the run is no longer ours")
                }
                Err(error) => {
                    tracing::warn!(run_id = %self.run.id, %error, "run progress not recorded")
                }
            }
        })
    }
}

/// The running Watch worker; its events go out through the process's outbox relay.
#[derive(Debug)]
pub struct WatchService {
    stop: CancellationToken,
    worker: JoinHandle<()>,
}

impl WatchService {
    /// Loads the master key, creates the `jobs.watch` consumer and starts consuming.
    pub async fn start(ctx: &ServiceContext, providers: Arc<ProviderPool>) -> anyhow::Result<Self> {
        let path = ctx.config.master_key_path();
        let master_key =
            tokio::task::spawn_blocking(move || MasterKey::load_or_create(&path)).await??;
        let runner = WatchRunner::new(ctx, master_key, ctx.outbox_relay(), providers)?;
        Self::start_with(&ctx.bus, Arc::new(runner)).await
    }

    /// Starts `runner` on the bus.
    pub async fn start_with(bus: &Bus, runner: Arc<WatchRunner>) -> anyhow::Result<Self> {
        let stop = CancellationToken::new();
        let stop_rx = stop.clone();
        let worker =
            JobWorker::<WatchJob>::new(bus, WATCH_JOB, runner.settings.worker_config()).await?;
        tracing::info!(runner_id = %runner.runner_id, lease_ms = runner.settings.lease.as_millis() as u64, "watch worker started");
        let worker = tokio::spawn(async move {
            let handler = move |ctx: JobContext, job: WatchJob| runner.clone().handle(ctx, job);
            if let Err(error) = worker.run(handler, stop_rx).await {
                tracing::error!(%error, "watch worker stopped");
            }
        });
        Ok(Self { stop, worker })
    }

    /// Stops taking jobs and lets running ones finish within the grace (the process's outbox
    /// relay, stopped after the service, still publishes their events).
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.worker.await;
    }
}
