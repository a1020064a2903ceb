//! Patrol investigation (Pro): after a Watch run's outcome is committed, the findings it
//! reported or reconfirmed may be investigated by a read-only agentic run that can leave one
//! typed action proposal.
//!
//! **Dispatch only after the Watch run is persisted.** The Watch worker commits the run record
//! and `events.run.completed` in one transaction (the outbox). This module reads that event from
//! a durable JetStream consumer on the EVENTS stream, so nothing of a Watch run's finding
//! adapter is ever shared with an investigation: it starts from the committed run record.
//!
//! Per finding of the run, under the tenant's gate lock: attempts left `running` past the
//! investigation timeout are ended `timed_out`, [`gate::decide`] applies the Patrol mode, the
//! finding's state, the attempts and cooldowns and the tenant's concurrency bound, and an
//! admitted finding gets a `running` attempt row before the run starts (a redelivered event
//! finds the row and dispatches nothing). The event is acked after those commits; the runs go
//! on in the background. A delivery that leaves some finding undecided is Nak'd with backoff;
//! after its last delivery, or at once when it cannot be read, the event is dead-lettered to
//! `pulse.<tenant>.dlq.investigation_dispatch` ([`pulse_bus::redelivery`]).
//!
//! **Leases.** The runner that begins an attempt holds it under a lease (the runner lease,
//! `runner.lease_ms`) and renews it every third of the lease while the attempt runs
//! ([`lease::Renewal`]). When a runner dies mid-investigation, its lease lapses and the
//! [`lease`] sweeper of another runner takes the attempt over and runs it again from the
//! committed finding: nothing of an investigation acts before its one proposal, so running it
//! again is safe, and a proposal the lost runner had already submitted is found and recorded
//! instead of being made twice. An attempt taken over [`lease::MAX_TAKEOVERS`] times ends
//! `failed` (`runner_lost`). A runner that finds its lease gone stops and writes nothing.
//!
//! A completely successful run with one valid proposal submits it to the action-broker as an
//! `ActionPlanRequest` (`requested_by` `patrol:investigation`, the finding linked): the broker
//! applies the tenant's policy. The [`InvestigationRecord`] (with the action reference, never
//! the proposal's params) ends the attempt row.

pub mod capture;
pub mod gate;
pub mod lease;
pub mod runtime;
pub mod tools;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use pulse_bus::actions_api::ActionPlanRequest;
use pulse_bus::async_nats::jetstream::{self, consumer::PullConsumer};
use pulse_bus::events::{RUN_COMPLETED, RunCompleted};
use pulse_bus::{
    ActionBrokerClient, Bus, BusError, ClientError, Delivery, EventConsumerConfig, JobError,
    Redelivery, SerialPull, ensure_event_consumer,
};
use pulse_domain::TenantId;
use pulse_domain::action::{ActionState, Severity as ActionSeverity};
use pulse_domain::ai_settings::AutonomyLevel;
use pulse_domain::finding::{Finding, FindingId, InvestigationOutcome, Severity};
use pulse_domain::patrol::run::RunId;
use pulse_runtime::{CancellationToken, ServiceContext};
use pulse_store::investigations::{
    self, ActionReference, InvestigationEvidence, InvestigationRecord, InvestigationStatus,
    InvestigationSubject, InvestigationTrigger, ProposalSummary,
};
use pulse_store::settings::{self, ConfigLayer, MasterKey};
use pulse_store::{Store, StoreError, TenantTx, TxRetry, findings, patrol_runs, resources};
use tokio::task::{JoinHandle, JoinSet};
use tracing::Instrument;
use uuid::Uuid;

use crate::patrol_connection::{ConnectionError, patrol_connection};
use capture::Proposal;
use gate::{Decision, GateInput};
use pulse_agent_loop::provider::pool::ProviderPool;
use runtime::{Investigator, RunEnd, RunInput, RunResult, confidence};
use tools::BrokerCatalogue;

/// The durable consumer's name on the EVENTS stream.
pub const CONSUMER: &str = "model-runner-investigations";
/// How long one investigation may run.
pub const TIMEOUT: Duration = Duration::from_secs(600);
/// `requested_by` of the plans investigations submit.
pub const REQUESTED_BY: &str = "patrol:investigation";
/// How long the broker may take to answer a catalogue or plan request.
const BROKER_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_DELIVER: i64 = 8;
/// The `kind` of committed-run events dead-lettered after their last delivery (or at once when
/// they cannot be read).
pub const DLQ_KIND: &str = "investigation_dispatch";

/// What dispatching one committed Watch run did.
#[derive(Debug, Clone, Default)]
pub struct Dispatched {
    /// Attempts started, with their findings.
    pub started: Vec<(Uuid, FindingId)>,
    /// Findings the gate skipped, with why.
    pub skipped: Vec<(FindingId, &'static str)>,
    /// The started attempts to run.
    pub to_run: Vec<(Uuid, Finding)>,
    /// A store failure that left some finding undecided (the event is delivered again).
    pub failure: Option<String>,
}

/// Dispatches and runs investigations.
pub struct InvestigationService {
    store: Store,
    bus: Bus,
    config_layer: ConfigLayer,
    environment_keys: BTreeMap<String, String>,
    master_key: MasterKey,
    investigator: Investigator,
    /// This process's identity as a lease holder.
    runner_id: String,
    /// How long an attempt's lease lasts without renewal.
    lease: Duration,
}

fn settings_error(error: settings::SettingsStoreError) -> StoreError {
    match error {
        settings::SettingsStoreError::Store(error) => error,
        other => StoreError::Invalid(other.to_string()),
    }
}

fn action_severity(severity: Severity) -> ActionSeverity {
    match severity {
        Severity::Critical => ActionSeverity::Critical,
        _ => ActionSeverity::Warning,
    }
}

impl InvestigationService {
    pub fn new(
        ctx: &ServiceContext,
        master_key: MasterKey,
        providers: Arc<ProviderPool>,
    ) -> anyhow::Result<Self> {
        let config_layer = ConfigLayer::from_config(&ctx.config.ai)?;
        let environment_keys = crate::patrol_connection::environment_keys(&ctx.config.ai);
        let catalogue = Arc::new(BrokerCatalogue {
            bus: ctx.bus.clone(),
            timeout: BROKER_TIMEOUT,
        });
        Ok(Self {
            store: ctx.store.clone(),
            bus: ctx.bus.clone(),
            config_layer,
            environment_keys,
            master_key,
            investigator: Investigator::new(
                ctx.store.clone(),
                Some(ctx.bus.clone()),
                catalogue,
                providers,
            ),
            runner_id: ctx.instance_id.clone(),
            lease: ctx.config.runner.lease(),
        })
    }

    /// The tenant's Patrol mode; settings that do not resolve fail closed (`monitor`).
    async fn mode(&self, tx: &TenantTx) -> Result<AutonomyLevel, StoreError> {
        let stored = settings::get(tx, false).await.map_err(settings_error)?;
        Ok(match self.config_layer.resolve(&stored) {
            Ok(resolved) => resolved.autonomy_level,
            Err(error) => {
                tracing::warn!(%error, "settings do not resolve; no investigation (monitor)");
                AutonomyLevel::Monitor
            }
        })
    }

    /// Applies the gate to every finding the committed run reported or reconfirmed, and
    /// records an attempt for each admitted one, each in its own transaction: what was
    /// dispatched before a failure is returned to run (a redelivery finds its row and skips it).
    pub async fn dispatch(&self, tenant: &TenantId, run_id: RunId) -> Dispatched {
        let mut dispatched = Dispatched::default();
        let finding_ids: Vec<FindingId> = match self.run_findings(tenant, run_id).await {
            Ok(ids) => ids,
            Err(error) => {
                dispatched.failure = Some(error.to_string());
                return dispatched;
            }
        };
        for finding_id in finding_ids {
            match self.dispatch_one(tenant, run_id, finding_id).await {
                Ok(Ok((id, finding))) => {
                    dispatched.started.push((id, finding_id));
                    dispatched.to_run.push((id, finding));
                }
                Ok(Err(Some(reason))) => dispatched.skipped.push((finding_id, reason)),
                Ok(Err(None)) => {}
                Err(error) => {
                    tracing::warn!(tenant = %tenant, %finding_id, run_id = %run_id, %error, "investigation gate failed");
                    dispatched.failure = Some(error.to_string());
                }
            }
        }
        dispatched
    }

    async fn run_findings(
        &self,
        tenant: &TenantId,
        run_id: RunId,
    ) -> Result<Vec<FindingId>, StoreError> {
        let tx = self.store.tenant_tx(tenant).await?;
        Ok(patrol_runs::get(&tx, run_id)
            .await?
            .map(|run| {
                run.finding_ids
                    .iter()
                    .filter_map(|id| id.parse().ok())
                    .collect()
            })
            .unwrap_or_default())
    }

    /// The gate for one finding: the started attempt, or why none (`None`: nothing to do, the
    /// finding is gone or this run already dispatched it).
    async fn dispatch_one(
        &self,
        tenant: &TenantId,
        run_id: RunId,
        finding_id: FindingId,
    ) -> Result<Result<(Uuid, Finding), Option<&'static str>>, StoreError> {
        let tx = self.store.tenant_tx(tenant).await?;
        investigations::lock_tenant(&tx).await?;
        let now = Utc::now();
        let cutoff = now - chrono::Duration::from_std(TIMEOUT).unwrap_or_default();
        investigations::expire_stale(&tx, cutoff, now).await?;
        let Some(stored) = findings::get(&tx, finding_id).await? else {
            return Ok(Err(None));
        };
        let finding = stored.finding;
        let input = GateInput {
            mode: self.mode(&tx).await?,
            severity: finding.severity,
            status: finding.status,
            finding_outcome: finding.investigation_outcome,
            last_regression_at: finding.last_regression_at,
            state: investigations::gate_state(&tx, finding_id).await?,
            now,
        };
        match gate::decide(&input) {
            Decision::Skip(skip) => {
                tx.commit().await?;
                tracing::info!(tenant = %tenant, %finding_id, run_id = %run_id, reason = skip.as_str(), "finding not investigated");
                Ok(Err(Some(skip.as_str())))
            }
            Decision::Dispatch { attempt } => {
                let id = Uuid::now_v7();
                if !investigations::begin(&tx, id, finding_id, run_id.as_uuid(), attempt, now)
                    .await?
                    || !investigations::hold(&tx, id, &self.runner_id, self.lease).await?
                {
                    return Ok(Err(None));
                }
                tx.commit().await?;
                tracing::info!(tenant = %tenant, %finding_id, run_id = %run_id, investigation_id = %id, attempt, "investigation dispatched");
                Ok(Ok((id, finding)))
            }
        }
    }

    /// Runs one dispatched attempt to its record, under its lease: the lease is renewed until
    /// the record is written, and a lost lease (another runner took the attempt over) stops the
    /// run with nothing written.
    pub async fn investigate(&self, tenant: &TenantId, id: Uuid, run_id: RunId, finding: Finding) {
        let mut renewal = lease::Renewal::spawn(lease::Hold {
            store: self.store.clone(),
            tenant: tenant.clone(),
            id,
            runner_id: self.runner_id.clone(),
            lease: self.lease,
        });
        let record = tokio::select! {
            record = self.attempt(tenant, id, run_id, &finding) => record,
            () = renewal.lost() => {
                tracing::warn!(tenant = %tenant, investigation_id = %id, "investigation lease lost; another runner holds the attempt");
                return;
            }
        };
        self.write(tenant, &record).await;
        renewal.stop().await;
    }

    /// Writes the record that ends an attempt.
    async fn write(&self, tenant: &TenantId, record: &InvestigationRecord) {
        let id = record.id;
        match self.record(tenant, record).await {
            Ok(true) => {
                tracing::info!(tenant = %tenant, investigation_id = %id, status = record.status.as_str(), outcome = ?record.outcome, "investigation finished")
            }
            Ok(false) => {
                tracing::warn!(tenant = %tenant, investigation_id = %id, "investigation ended elsewhere (timed out); record dropped")
            }
            Err(error) => {
                tracing::error!(tenant = %tenant, investigation_id = %id, %error, "investigation record not written")
            }
        }
    }

    /// Runs one attempt: the model's read-only run, then its proposal submitted to the broker.
    async fn attempt(
        &self,
        tenant: &TenantId,
        id: Uuid,
        run_id: RunId,
        finding: &Finding,
    ) -> InvestigationRecord {
        let started_at = Utc::now();
        let prepared = async {
            let tx = self
                .store
                .tenant_tx(tenant)
                .await
                .map_err(|e| e.to_string())?;
            let inventory = resources::list(&tx, None)
                .await
                .map_err(|e| e.to_string())?;
            let connection = match patrol_connection(
                &tx,
                &self.config_layer,
                &self.environment_keys,
                &self.master_key,
            )
            .await
            {
                Ok(patrol) => patrol.connection,
                Err(ConnectionError::NoRoute(reason)) => return Err(reason),
                Err(error) => return Err(error.to_string()),
            };
            Ok::<_, String>((inventory, connection))
        }
        .await;
        let (status, result) = match prepared {
            Err(detail) => (
                InvestigationStatus::Failed,
                RunResult {
                    end: RunEnd::Failed(detail),
                    conclusion: String::new(),
                    evidence: Vec::new(),
                    tools_used: Vec::new(),
                    proposal: Ok(None),
                    checkpointed: false,
                },
            ),
            Ok((inventory, connection)) => {
                let run = self.investigator.run(RunInput {
                    tenant,
                    investigation_id: id,
                    watch_run_id: run_id,
                    finding,
                    inventory,
                    connection: &connection,
                });
                match tokio::time::timeout(TIMEOUT, run).await {
                    Ok(result) => {
                        let status = match result.end {
                            RunEnd::Concluded => InvestigationStatus::Completed,
                            RunEnd::Failed(_) => InvestigationStatus::Failed,
                        };
                        (status, result)
                    }
                    Err(_) => (
                        InvestigationStatus::TimedOut,
                        RunResult {
                            end: RunEnd::Failed("the investigation timed out".to_owned()),
                            conclusion: String::new(),
                            evidence: Vec::new(),
                            tools_used: Vec::new(),
                            proposal: Ok(None),
                            checkpointed: false,
                        },
                    ),
                }
            }
        };
        let mut error = match &result.end {
            RunEnd::Failed(detail) => detail.clone(),
            RunEnd::Concluded => String::new(),
        };
        let mut outcome = match status {
            InvestigationStatus::TimedOut => Some(InvestigationOutcome::TimedOut),
            _ => None,
        };
        let mut action = None;
        let mut proposal_summary = None;
        match &result.proposal {
            Ok(Some(proposal)) => {
                proposal_summary = Some(summary(proposal));
                match self.submit(tenant, finding, proposal).await {
                    Ok((reference, state, message)) => {
                        let plan = gate::plan_outcome(state);
                        if plan != InvestigationOutcome::FixQueued {
                            error = format!(
                                "the plan ended {}: {}",
                                state.as_str(),
                                message.as_deref().unwrap_or("no reason given")
                            );
                        }
                        outcome = Some(plan);
                        action = Some(reference);
                    }
                    Err(message) => {
                        outcome = Some(InvestigationOutcome::NeedsAttention);
                        error = format!("the proposal was not accepted: {message}");
                    }
                }
            }
            Ok(None) if status == InvestigationStatus::Completed => {
                outcome = Some(InvestigationOutcome::NeedsAttention);
            }
            Ok(None) => {}
            Err(capture_error) => {
                outcome = Some(InvestigationOutcome::NeedsAttention);
                error = format!("{}: {capture_error}", capture_error.code());
            }
        }
        tracing::debug!(tenant = %tenant, investigation_id = %id, checkpointed = result.checkpointed, "investigation run ended");
        InvestigationRecord {
            status,
            outcome,
            confidence: confidence(&result.conclusion).to_owned(),
            evidence: result
                .evidence
                .iter()
                .map(|e| InvestigationEvidence {
                    id: e.call_id.clone(),
                    kind: e.tool.clone(),
                    summary: e.summary.clone(),
                })
                .collect(),
            conclusion: result.conclusion.clone(),
            recommended_action: proposal_summary
                .as_ref()
                .map(|p| format!("{} on {}", p.capability_name, p.resource_id))
                .unwrap_or_default(),
            tools_used: result.tools_used.clone(),
            proposal: proposal_summary,
            action,
            error,
            ..base_record(id, run_id, finding, started_at)
        }
    }

    async fn record(
        &self,
        tenant: &TenantId,
        record: &InvestigationRecord,
    ) -> Result<bool, StoreError> {
        self.store
            .retry_tenant_tx(tenant, &TxRetry::default(), |tx| async move {
                let written = investigations::finish(&tx, record, Some(&self.runner_id)).await?;
                tx.commit().await?;
                Ok(written)
            })
            .await
    }

    /// Submits a proposal to the broker; the broker applies the tenant's policy. The reply's
    /// state and message say whether the plan lives.
    async fn submit(
        &self,
        tenant: &TenantId,
        finding: &Finding,
        proposal: &Proposal,
    ) -> Result<(ActionReference, ActionState, Option<String>), String> {
        let request = ActionPlanRequest {
            resource_id: proposal.resource_id.clone(),
            capability: proposal.capability_name.clone(),
            params: proposal.params.clone(),
            reason: proposal.reason.clone(),
            severity: action_severity(finding.severity),
            approval_floor: None,
            requested_by: REQUESTED_BY.to_owned(),
            finding_id: Some(finding.id),
        };
        match ActionBrokerClient::new(self.bus.clone())
            .plan(tenant, &request, BROKER_TIMEOUT)
            .await
        {
            Ok(reply) => Ok((
                ActionReference {
                    action_id: reply.action_id,
                    state: reply.state.as_str().to_owned(),
                },
                reply.state,
                reply.message,
            )),
            Err(ClientError::Remote { code, message }) => Err(format!("{code}: {message}")),
            Err(error) => Err(error.to_string()),
        }
    }

    /// Creates the durable consumer and starts consuming committed Watch runs.
    pub async fn start(self) -> Result<InvestigationHandle, BusError> {
        let consumer = ensure_consumer(&self.bus).await?;
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let this = Arc::new(self);
        let sweeper = tokio::spawn(this.clone().sweep_until(stop.clone()));
        let task = tokio::spawn(async move { this.consume(consumer, stopped).await });
        Ok(InvestigationHandle {
            stop,
            task,
            sweeper,
        })
    }

    async fn consume(self: Arc<Self>, consumer: PullConsumer, stop: CancellationToken) {
        let mut running: JoinSet<()> = JoinSet::new();
        let mut events = SerialPull::new(consumer, CONSUMER, 16, Duration::from_secs(2));
        while let Some(message) = events.next(stop.cancelled()).await {
            while running.try_join_next().is_some() {}
            self.clone().process(message, &mut running).await;
        }
        // Running attempts are abandoned; their leases lapse and another runner takes them over.
        running.shutdown().await;
    }

    /// Handles one delivery: ack once the dispatch is committed, Nak with backoff when some
    /// finding stayed undecided, dead letter after the last delivery or at once when the event
    /// cannot be read.
    async fn process(self: Arc<Self>, message: jetstream::Message, running: &mut JoinSet<()>) {
        let Some(delivery) = Delivery::new(self.bus.subjects(), message) else {
            return;
        };
        let (tenant, event) = match delivery.decode::<RunCompleted>("run event") {
            Ok((tenant, decoded)) => (tenant, decoded.payload),
            Err(reason) => {
                delivery
                    .dead_letter(&self.bus, &redelivery(), &reason)
                    .await;
                return;
            }
        };
        let dispatched = self.dispatch(&tenant, event.run_id).await;
        tracing::debug!(run_id = %event.run_id, started = dispatched.started.len(), skipped = dispatched.skipped.len(), "watch run dispatched");
        for (id, finding) in dispatched.to_run {
            let this = self.clone();
            let tenant = tenant.clone();
            let run_id = event.run_id;
            running.spawn(async move { this.investigate(&tenant, id, run_id, finding).await });
        }
        let result = dispatched.failure.map_or(Ok(()), |error| {
            Err(JobError::retry(format!(
                "investigation dispatch failed: {error}"
            )))
        });
        let span =
            tracing::info_span!("investigation_dispatch", tenant = %tenant, run_id = %event.run_id);
        delivery
            .settle(&self.bus, &redelivery(), result)
            .instrument(span)
            .await;
    }
}

/// The redeliveries of one committed-run event, then its dead letter.
fn redelivery() -> Redelivery {
    Redelivery {
        dlq_kind: DLQ_KIND.to_owned(),
        max_deliver: MAX_DELIVER,
        backoff_base: Duration::from_secs(1),
        backoff_max: Duration::from_secs(60),
    }
}

/// The durable consumer of committed Watch runs.
pub async fn ensure_consumer(bus: &Bus) -> Result<PullConsumer, BusError> {
    let (domain, event) = RUN_COMPLETED;
    ensure_event_consumer(
        bus,
        &EventConsumerConfig {
            durable_name: CONSUMER.to_owned(),
            description: "model-runner investigation dispatch".to_owned(),
            filter_subject: bus.subjects().event_any_tenant(domain, event),
            ack_wait: Duration::from_secs(30),
            max_deliver: MAX_DELIVER,
        },
    )
    .await
}

/// The record of an attempt of `finding` dispatched by `run_id`, with nothing concluded yet;
/// callers fill in how it ended.
fn base_record(
    id: Uuid,
    run_id: RunId,
    finding: &Finding,
    started_at: chrono::DateTime<Utc>,
) -> InvestigationRecord {
    InvestigationRecord {
        id,
        finding_id: finding.id.as_hex(),
        session_id: run_id.to_string(),
        subject: InvestigationSubject {
            resource_id: finding.resource_id.clone(),
            resource_name: finding.resource_name.clone(),
            resource_type: finding.resource_type.clone(),
            node: String::new(),
        },
        trigger: InvestigationTrigger {
            finding_key: finding.key.as_str().to_owned(),
            source: "ai-analysis".to_owned(),
            severity: finding.severity.as_str().to_owned(),
            category: finding.category.as_str().to_owned(),
            title: finding.title.clone(),
            detected_at: finding.detected_at,
            description: finding.description.clone(),
            cause: format!("watch_run:{run_id}"),
        },
        status: InvestigationStatus::Failed,
        outcome: None,
        confidence: confidence("").to_owned(),
        evidence: Vec::new(),
        conclusion: String::new(),
        impact: finding.impact.clone(),
        recommended_action: String::new(),
        verification: Vec::new(),
        rollback: Vec::new(),
        tools_used: Vec::new(),
        proposal: None,
        started_at,
        completed_at: Some(Utc::now()),
        action: None,
        error: String::new(),
    }
}

fn summary(proposal: &Proposal) -> ProposalSummary {
    ProposalSummary {
        resource_id: proposal.resource_id.clone(),
        causal_resource_id: proposal.causal_resource_id.clone(),
        capability_name: proposal.capability_name.clone(),
        reason: proposal.reason.clone(),
    }
}

/// The running dispatcher.
#[derive(Debug)]
pub struct InvestigationHandle {
    stop: CancellationToken,
    task: JoinHandle<()>,
    sweeper: JoinHandle<()>,
}

impl InvestigationHandle {
    /// Starts the dispatcher of this process (the master key as the Watch worker loads it).
    pub async fn start(ctx: &ServiceContext, providers: Arc<ProviderPool>) -> anyhow::Result<Self> {
        let path = ctx.config.master_key_path();
        let master_key =
            tokio::task::spawn_blocking(move || MasterKey::load_or_create(&path)).await??;
        Ok(InvestigationService::new(ctx, master_key, providers)?
            .start()
            .await?)
    }

    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
        let _ = self.sweeper.await;
    }
}
