//! The action-broker's request handlers: plan, decide, execute.
//!
//! | subject | request | reply |
//! |---|---|---|
//! | `pulse.<t>.actions.plan.request` | [`ActionPlanRequest`] | [`ActionReply`] |
//! | `pulse.<t>.actions.decide.request` | [`ActionDecisionRequest`] | [`ActionReply`] |
//! | `pulse.<t>.actions.execute.request` | [`ActionExecuteRequest`] | [`ActionReply`] |
//!
//! Every state change goes through [`pulse_store::actions::transition`] (compare-and-swap plus
//! the audit row, one transaction). `events.approval.pending` and `events.action.completed` go
//! through the transactional outbox in the transaction of the change they announce, so they are
//! published only after it committed.
//!
//! Execution: the lease and `approved -> executing` commit together before the command leaves;
//! the typed command goes to the agent through agent-relay with the action id, which the agent
//! runs at most once; the receipt moves the action to `completed` or `failed`. An action that is
//! executing or ended is never sent again.

use std::sync::Arc;
use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use pulse_bus::events::{
    ACTION_COMPLETED, ACTION_DECIDE_REQUEST, ACTION_EXECUTE_REQUEST, ACTION_PLAN_REQUEST,
    ACTIONS_QUEUE_GROUP, APPROVAL_PENDING, ActionCompleted, ActionDecisionRequest,
    ActionExecuteRequest, ActionPlanRequest, ActionReply, ApprovalPending, DecisionOutcome,
};
use pulse_bus::relay_api::RelayCommandRequest;
use pulse_bus::{Bus, BusError, ErrorReply, OutboxRow, Responder};
use pulse_domain::TenantId;
use pulse_domain::action::{
    ActionEvent, ActionPlan, ActionState, ApprovalFloor, ExecutionCheck, LockState, PolicyInput,
    PolicyOutcome, ReasonCode, check_execution, decide, plan_hash, validate_request,
};
use pulse_domain::agent_protocol::ReceiptStatus;
use pulse_domain::ai_settings::{AUTOPILOT_ACK_VERSION, AutonomyLevel};
use pulse_store::actions::{self, ActionsError, StoredAction, TransitionDetail};
use pulse_store::settings::{self, ConfigLayer};
use pulse_store::{Store, TenantTx, agents, resources};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::sync::Notify;
use uuid::Uuid;

/// The actor of transitions the broker makes on its own.
pub const SERVICE_ACTOR: &str = "service:action-broker";

/// Timing of plans and executions.
#[derive(Debug, Clone, Copy)]
pub struct BrokerSettings {
    /// How long a plan may wait for approval and execution.
    pub plan_ttl: chrono::Duration,
    /// How long the agent may start the command after it was sent.
    pub lease_ttl: chrono::Duration,
    /// How long the broker waits for the agent's receipt.
    pub relay_timeout: Duration,
}

impl Default for BrokerSettings {
    fn default() -> Self {
        Self {
            plan_ttl: chrono::Duration::minutes(30),
            lease_ttl: chrono::Duration::minutes(2),
            relay_timeout: Duration::from_secs(60),
        }
    }
}

#[derive(Clone)]
pub struct Broker {
    store: Store,
    bus: Bus,
    config_layer: Arc<ConfigLayer>,
    settings: BrokerSettings,
    outbox_notify: Arc<Notify>,
}

fn reply_error(code: &str, message: impl Into<String>) -> ErrorReply {
    ErrorReply::new(code, message)
}

fn store_error(e: impl std::fmt::Display) -> ErrorReply {
    tracing::warn!(error = %e, "action store failed");
    reply_error(
        "service_unavailable",
        "the action store is unavailable; retry shortly",
    )
}

fn actions_error(e: ActionsError) -> ErrorReply {
    match e {
        ActionsError::NotFound(id) => reply_error("action_not_found", format!("no action {id}")),
        ActionsError::Conflict { id, .. } => reply_error(
            "conflict",
            format!("action {id} changed concurrently; re-read it and retry"),
        ),
        ActionsError::Illegal(e) => reply_error("action_decision_not_allowed", e.to_string()),
        ActionsError::Duplicate(id) => reply_error("conflict", format!("action {id} exists")),
        ActionsError::Store(e) => store_error(e),
    }
}

fn reply(action: &StoredAction, message: Option<String>) -> ActionReply {
    ActionReply {
        action_id: action.plan.action_id,
        state: action.state,
        plan_hash: action.plan.plan_hash.clone(),
        policy_decision: action.plan.policy_decision.clone(),
        message,
    }
}

/// The version of a resource the plan hash binds: a digest of what makes it this resource (its
/// type, agent, source and parent), or `absent` when no such resource exists. A resource
/// replaced by another under the same id changes it.
pub fn resource_version(resource: Option<&pulse_domain::resource::Resource>) -> String {
    match resource {
        None => "absent".to_owned(),
        Some(r) => {
            let identity = json!({
                "type": r.resource_type.as_str(),
                "agent_id": r.agent_id,
                "source_id": r.source_id,
                "parent": r.parent.as_ref().map(|p| p.to_string()),
            });
            let canonical = pulse_domain::canonical_json::canonicalize(&identity)
                .unwrap_or_else(|_| identity.to_string().into_bytes());
            hex::encode(&Sha256::digest(&canonical)[..12])
        }
    }
}

/// The refusal error code of an execution-time reason code.
fn refusal_code(code: ReasonCode) -> &'static str {
    match code {
        ReasonCode::PlanDrift => "action_plan_drift",
        ReasonCode::ResourceRemediationLocked => "resource_remediation_locked",
        ReasonCode::PlanExpired => "action_plan_expired",
        _ => "action_refused",
    }
}

impl Broker {
    pub fn new(store: Store, bus: Bus, config_layer: ConfigLayer) -> Self {
        Self {
            store,
            bus,
            config_layer: Arc::new(config_layer),
            settings: BrokerSettings::default(),
            outbox_notify: Arc::new(Notify::new()),
        }
    }

    pub fn with_settings(mut self, settings: BrokerSettings) -> Self {
        self.settings = settings;
        self
    }

    pub fn with_outbox_notify(mut self, notify: Arc<Notify>) -> Self {
        self.outbox_notify = notify;
        self
    }

    /// Serves the three request subjects in the broker's queue group.
    pub async fn serve(self) -> Result<Vec<Responder>, BusError> {
        let bus = self.bus.clone();
        let subjects = bus.subjects().clone();
        let this = Arc::new(self);
        let plan = {
            let this = this.clone();
            bus.serve::<ActionPlanRequest, _, _>(
                &subjects.any_tenant(ACTION_PLAN_REQUEST),
                Some(ACTIONS_QUEUE_GROUP),
                move |ctx, req| {
                    let this = this.clone();
                    async move { this.plan(&ctx.tenant, req).await }
                },
            )
            .await?
        };
        let decide = {
            let this = this.clone();
            bus.serve::<ActionDecisionRequest, _, _>(
                &subjects.any_tenant(ACTION_DECIDE_REQUEST),
                Some(ACTIONS_QUEUE_GROUP),
                move |ctx, req| {
                    let this = this.clone();
                    async move { this.decide(&ctx.tenant, req).await }
                },
            )
            .await?
        };
        let execute = {
            let this = this.clone();
            bus.serve::<ActionExecuteRequest, _, _>(
                &subjects.any_tenant(ACTION_EXECUTE_REQUEST),
                Some(ACTIONS_QUEUE_GROUP),
                move |ctx, req| {
                    let this = this.clone();
                    async move { this.execute(&ctx.tenant, req).await }
                },
            )
            .await?
        };
        Ok(vec![plan, decide, execute])
    }

    /// The tenant's Patrol mode and whether a current Autopilot acknowledgement exists. Settings
    /// that cannot be resolved fail closed: monitor.
    async fn mode(&self, tx: &TenantTx) -> Result<(AutonomyLevel, bool), ErrorReply> {
        let stored = settings::get(tx, false).await.map_err(store_error)?;
        match self.config_layer.resolve(&stored) {
            Ok(s) => {
                let acknowledged = s
                    .autopilot_acknowledgement
                    .as_ref()
                    .is_some_and(|a| a.version == AUTOPILOT_ACK_VERSION);
                Ok((s.autonomy_level, acknowledged))
            }
            Err(error) => {
                tracing::warn!(%error, "settings do not resolve; actions treated as monitor");
                Ok((AutonomyLevel::Monitor, false))
            }
        }
    }

    /// The lock state; a lock that cannot be read is `Unknown` (fails closed).
    async fn lock(&self, tx: &TenantTx, resource_id: &str) -> LockState {
        match actions::remediation_lock(tx, resource_id).await {
            Ok(state) => state,
            Err(error) => {
                tracing::warn!(%error, resource_id, "remediation lock unreadable");
                LockState::Unknown
            }
        }
    }

    async fn commit(&self, tx: TenantTx) -> Result<(), ErrorReply> {
        tx.commit().await.map_err(store_error)?;
        self.outbox_notify.notify_one();
        Ok(())
    }

    async fn enqueue(
        &self,
        tx: &TenantTx,
        row: Result<OutboxRow, pulse_bus::OutboxError>,
    ) -> Result<(), ErrorReply> {
        let row = row.map_err(store_error)?;
        pulse_bus::enqueue(&**tx.client(), row)
            .await
            .map_err(store_error)?;
        Ok(())
    }

    pub async fn plan(
        &self,
        tenant: &TenantId,
        req: ActionPlanRequest,
    ) -> Result<ActionReply, ErrorReply> {
        let capability = validate_request(
            &req.resource_id,
            "-",
            &req.capability,
            &req.params,
            &req.reason,
        )
        .map_err(|e| reply_error("invalid_action_request", e.to_string()))?;
        let tx = self.store.tenant_tx(tenant).await.map_err(store_error)?;
        let resource = resources::get(&tx, &req.resource_id)
            .await
            .map_err(store_error)?
            .ok_or_else(|| {
                reply_error(
                    "invalid_action_request",
                    format!(
                        "resource_id: no resource {:?} in this tenant",
                        req.resource_id
                    ),
                )
            })?;
        let (mode, acknowledged) = self.mode(&tx).await?;
        let lock = self.lock(&tx, &req.resource_id).await;
        let floor = ApprovalFloor::effective(req.approval_floor, capability);
        let decision = decide(&PolicyInput {
            mode,
            severity: req.severity,
            floor,
            acknowledged,
            lock,
        });
        let now = Utc::now();
        let mut plan = ActionPlan {
            action_id: Uuid::now_v7(),
            resource_id: req.resource_id.clone(),
            agent_id: resource.agent_id.clone(),
            capability,
            params: req.params,
            reason: req.reason.trim().to_owned(),
            severity: req.severity,
            approval_floor: floor,
            requested_by: req.requested_by.clone(),
            planned_at: chrono::SubsecRound::trunc_subsecs(now, 6),
            expires_at: chrono::SubsecRound::trunc_subsecs(now + self.settings.plan_ttl, 6),
            resource_version: resource_version(Some(&resource)),
            policy_decision: decision.clone(),
            plan_hash: String::new(),
        };
        plan.plan_hash = plan_hash(&plan.identity()).map_err(store_error)?;
        let created = actions::create(&tx, &plan, &req.requested_by)
            .await
            .map_err(actions_error)?;
        let reasons = decision
            .reason_codes
            .iter()
            .map(|c| c.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let detail = || TransitionDetail {
            reason: Some(reasons.clone()),
            ..Default::default()
        };
        let action = match decision.outcome {
            PolicyOutcome::NeedsApproval => {
                let pending = actions::transition(
                    &tx,
                    &created,
                    ActionEvent::RequestApproval,
                    SERVICE_ACTOR,
                    detail(),
                )
                .await
                .map_err(actions_error)?;
                let (domain, event) = APPROVAL_PENDING;
                let row = OutboxRow::event(
                    self.bus.subjects(),
                    tenant,
                    domain,
                    event,
                    &ApprovalPending {
                        action_id: plan.action_id,
                        resource_id: plan.resource_id.clone(),
                        capability: plan.capability.as_str().to_owned(),
                        severity: plan.severity,
                        approval_floor: plan.approval_floor,
                        plan_hash: plan.plan_hash.clone(),
                        expires_at: plan.expires_at,
                    },
                );
                self.enqueue(&tx, row).await?;
                pending
            }
            PolicyOutcome::AutoAuthorized => actions::transition(
                &tx,
                &created,
                ActionEvent::AutoAuthorize,
                SERVICE_ACTOR,
                detail(),
            )
            .await
            .map_err(actions_error)?,
            PolicyOutcome::Refused => {
                actions::transition(&tx, &created, ActionEvent::Refuse, SERVICE_ACTOR, detail())
                    .await
                    .map_err(actions_error)?
            }
        };
        self.commit(tx).await?;
        let message = (decision.outcome == PolicyOutcome::Refused)
            .then(|| format!("refused by policy: {reasons}"));
        Ok(reply(&action, message))
    }

    /// Expires `action` when its plan ran out; true when it did (the caller answers
    /// `action_plan_expired`).
    async fn expire_if_due(
        &self,
        tx: &TenantTx,
        action: &StoredAction,
    ) -> Result<bool, ErrorReply> {
        if !action.plan.is_expired(Utc::now()) || action.state.is_terminal() {
            return Ok(false);
        }
        if action.state == ActionState::Executing {
            return Ok(false);
        }
        actions::transition(
            tx,
            action,
            ActionEvent::Expire,
            SERVICE_ACTOR,
            TransitionDetail {
                reason: Some("plan_expired: the plan expired".to_owned()),
                ..Default::default()
            },
        )
        .await
        .map_err(actions_error)?;
        Ok(true)
    }

    async fn load(&self, tx: &TenantTx, id: Uuid) -> Result<StoredAction, ErrorReply> {
        actions::get_for_update(tx, id)
            .await
            .map_err(store_error)?
            .ok_or_else(|| reply_error("action_not_found", format!("no action {id}")))
    }

    pub async fn decide(
        &self,
        tenant: &TenantId,
        req: ActionDecisionRequest,
    ) -> Result<ActionReply, ErrorReply> {
        if !req.decided_by.starts_with("user:") {
            return Err(reply_error(
                "action_decision_requires_human",
                "decisions are made by a human; this token belongs to no user",
            ));
        }
        let reason = req.reason.trim();
        if reason.is_empty() || reason.chars().count() > pulse_domain::action::MAX_REASON_CHARS {
            return Err(reply_error(
                "invalid_action_request",
                "reason: must be 1..=1000 characters",
            ));
        }
        let tx = self.store.tenant_tx(tenant).await.map_err(store_error)?;
        let action = self.load(&tx, req.action_id).await?;
        if self.expire_if_due(&tx, &action).await? {
            self.commit(tx).await?;
            return Err(reply_error(
                "action_plan_expired",
                format!("action {} expired before it was decided", req.action_id),
            ));
        }
        if action.state != ActionState::PendingApproval {
            return Err(reply_error(
                "action_decision_not_allowed",
                format!(
                    "action {} is {}; only pending_approval actions take a decision",
                    req.action_id, action.state
                ),
            ));
        }
        let event = match req.outcome {
            DecisionOutcome::Rejected => ActionEvent::Reject,
            DecisionOutcome::Approved => {
                match action.plan.approval_floor {
                    ApprovalFloor::Mfa => {
                        return Err(reply_error(
                            "action_step_up_unavailable",
                            "step-up unavailable: the mfa floor can never be approved in this build",
                        ));
                    }
                    ApprovalFloor::DryRunOnly => {
                        return Err(reply_error(
                            "action_decision_not_allowed",
                            "a dry_run_only plan is never approved",
                        ));
                    }
                    ApprovalFloor::Admin if action.plan.requested_by == req.decided_by => {
                        return Err(reply_error(
                            "action_self_approval_forbidden",
                            "the admin floor needs a human other than the requester",
                        ));
                    }
                    ApprovalFloor::Admin | ApprovalFloor::None => {}
                }
                ActionEvent::Approve
            }
        };
        let decided = actions::transition(
            &tx,
            &action,
            event,
            &req.decided_by,
            TransitionDetail {
                reason: Some(reason.to_owned()),
                decided_by: Some(req.decided_by.clone()),
                ..Default::default()
            },
        )
        .await
        .map_err(actions_error)?;
        self.commit(tx).await?;
        Ok(reply(&decided, None))
    }

    /// Fails the approved `action` with a refusal, announcing it, in `tx`.
    async fn refuse(
        &self,
        tx: &TenantTx,
        tenant: &TenantId,
        action: &StoredAction,
        code: ReasonCode,
        message: &str,
        recomputed: &str,
    ) -> Result<StoredAction, ErrorReply> {
        let failed = actions::transition(
            tx,
            action,
            ActionEvent::Refuse,
            SERVICE_ACTOR,
            TransitionDetail {
                reason: Some(message.to_owned()),
                result: Some(json!({"refused": code.as_str(), "message": message})),
                audit: Some(json!({"recomputed_plan_hash": recomputed})),
                ..Default::default()
            },
        )
        .await
        .map_err(actions_error)?;
        self.announce_end(tx, tenant, &failed, Some(message.to_owned()))
            .await?;
        Ok(failed)
    }

    async fn announce_end(
        &self,
        tx: &TenantTx,
        tenant: &TenantId,
        action: &StoredAction,
        reason: Option<String>,
    ) -> Result<(), ErrorReply> {
        let (domain, event) = ACTION_COMPLETED;
        let row = OutboxRow::event(
            self.bus.subjects(),
            tenant,
            domain,
            event,
            &ActionCompleted {
                action_id: action.plan.action_id,
                state: action.state,
                plan_hash: action.plan.plan_hash.clone(),
                reason,
                at: Utc::now(),
            },
        );
        self.enqueue(tx, row).await
    }

    pub async fn execute(
        &self,
        tenant: &TenantId,
        req: ActionExecuteRequest,
    ) -> Result<ActionReply, ErrorReply> {
        // 1. Checks, then lease + approved -> executing, in one transaction.
        let tx = self.store.tenant_tx(tenant).await.map_err(store_error)?;
        let action = self.load(&tx, req.action_id).await?;
        match action.state {
            ActionState::Approved => {}
            ActionState::Executing => {
                return Err(reply_error(
                    "action_already_executing",
                    format!("action {} is already executing", req.action_id),
                ));
            }
            ActionState::Planned | ActionState::PendingApproval => {
                if self.expire_if_due(&tx, &action).await? {
                    self.commit(tx).await?;
                    return Err(reply_error(
                        "action_plan_expired",
                        format!("action {} expired before it was approved", req.action_id),
                    ));
                }
                return Err(reply_error(
                    "action_not_approved",
                    format!("action {} is {}, not approved", req.action_id, action.state),
                ));
            }
            ActionState::Rejected => {
                return Err(reply_error(
                    "action_not_approved",
                    format!("action {} was rejected", req.action_id),
                ));
            }
            ActionState::Expired | ActionState::Completed | ActionState::Failed => {
                return Err(reply_error(
                    "action_execution_final",
                    format!(
                        "action {} is {}; it is never executed again",
                        req.action_id, action.state
                    ),
                ));
            }
        }
        let (mode, _) = self.mode(&tx).await?;
        let lock = self.lock(&tx, &action.plan.resource_id).await;
        let resource = resources::get(&tx, &action.plan.resource_id)
            .await
            .map_err(store_error)?;
        let mut current = action.plan.clone();
        current.resource_version = resource_version(resource.as_ref());
        let recomputed = current.recompute_hash().map_err(store_error)?;
        let online = agents::get(&tx, &action.plan.agent_id)
            .await
            .map_err(store_error)?
            .is_some_and(|a| a.status == "online");
        let check = check_execution(&ExecutionCheck {
            mode,
            lock,
            human_approved: action.human_approved,
            capability_advertised: online,
            expired: action.plan.is_expired(Utc::now()),
            stored_hash: &action.plan.plan_hash,
            recomputed_hash: &recomputed,
        });
        if let Err((code, message)) = check {
            let failed = if code == ReasonCode::PlanExpired {
                self.expire_if_due(&tx, &action).await?;
                None
            } else {
                Some(
                    self.refuse(&tx, tenant, &action, code, &message, &recomputed)
                        .await?,
                )
            };
            self.commit(tx).await?;
            tracing::info!(action_id = %req.action_id, state = ?failed.map(|f| f.state), %message, "action refused");
            return Err(reply_error(refusal_code(code), message));
        }
        let Some(target) = action.plan.target().map(str::to_owned) else {
            return Err(reply_error(
                "invalid_action_request",
                "params.target is missing",
            ));
        };
        let lease_id = format!("lease-{}", Uuid::now_v7());
        let lease_expires_at = Utc::now() + self.settings.lease_ttl;
        let executing = actions::transition(
            &tx,
            &action,
            ActionEvent::StartExecution,
            &req.requested_by,
            TransitionDetail {
                lease: Some((lease_id.clone(), lease_expires_at)),
                ..Default::default()
            },
        )
        .await
        .map_err(actions_error)?;
        self.commit(tx).await?;

        // 2. The typed command through agent-relay; the agent runs the action id at most once.
        let command = RelayCommandRequest {
            agent_id: action.plan.agent_id.clone(),
            action_id: action.plan.action_id.to_string(),
            lease_id,
            lease_expires_at,
            capability: action.plan.capability.as_str().to_owned(),
            target,
        };
        let subject = self.bus.subjects().relay(tenant, "command");
        let outcome = self
            .bus
            .request(tenant, &subject, &command, self.settings.relay_timeout)
            .await;
        let (event, reason, result) = match outcome {
            Ok(receipt) => {
                let receipt = receipt.0;
                let result = json!({
                    "status": receipt.status,
                    "reason": receipt.reason,
                    "output": receipt.output,
                    "output_truncated": receipt.output_truncated,
                    "exit_status": receipt.exit_status,
                    "at": receipt.at.to_rfc3339_opts(SecondsFormat::Millis, true),
                    "replayed": receipt.replayed,
                });
                match receipt.status {
                    ReceiptStatus::Completed => (ActionEvent::Complete, None, result),
                    ReceiptStatus::Failed | ReceiptStatus::Rejected => (
                        ActionEvent::Fail,
                        Some(
                            receipt
                                .reason
                                .unwrap_or_else(|| "the agent failed".to_owned()),
                        ),
                        result,
                    ),
                    ReceiptStatus::Accepted => return Ok(reply(&executing, None)),
                }
            }
            // The command did not reach an agent: nothing ran.
            Err(BusError::Remote { code, message })
                if code == "agent_not_connected"
                    || code == "agent_refused"
                    || code == "missing_scope" =>
            {
                let reason = format!("{code}: {message}");
                (
                    ActionEvent::Fail,
                    Some(reason.clone()),
                    json!({"error": reason}),
                )
            }
            Err(BusError::NoResponders { .. }) => {
                let reason = "action_executor_unavailable: no agent-relay answered".to_owned();
                (
                    ActionEvent::Fail,
                    Some(reason.clone()),
                    json!({"error": reason}),
                )
            }
            // Unknown outcome (timeout, bus trouble): stays executing, never re-sent by us.
            Err(error) => {
                tracing::warn!(action_id = %req.action_id, %error, "no receipt; action stays executing");
                return Ok(reply(&executing, Some(format!("no receipt yet: {error}"))));
            }
        };

        // 3. The receipt moves the action to its end, announced after commit.
        let tx = self.store.tenant_tx(tenant).await.map_err(store_error)?;
        let current = self.load(&tx, req.action_id).await?;
        let ended = actions::transition(
            &tx,
            &current,
            event,
            SERVICE_ACTOR,
            TransitionDetail {
                reason: reason.clone(),
                result: Some(result),
                ..Default::default()
            },
        )
        .await
        .map_err(actions_error)?;
        self.announce_end(&tx, tenant, &ended, reason.clone())
            .await?;
        self.commit(tx).await?;
        Ok(reply(&ended, reason))
    }
}
