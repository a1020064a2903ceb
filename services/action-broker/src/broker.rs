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
//! Execution ([`crate::lifecycle`]): an approved action runs without being asked again, right
//! after a human approval commits or, for an auto-authorized plan, right after the plan commits;
//! the explicit execute route stays (idempotent). The lease and `approved -> executing` commit
//! together before the command leaves; the typed command goes to the agent through agent-relay
//! with the action id, which the agent runs at most once; the receipt moves the action to
//! `completed` or `failed`; a completed action is then judged by the verifier. A decision, a
//! failure and a verification write the fix outcome to the action's finding in the same
//! transaction. [`crate::recovery`] picks up whatever a crash interrupted.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use pulse_bus::actions_api::{
    ActionDecisionRequest, ActionExecuteRequest, ActionPlanRequest, ActionReply, DecisionOutcome,
};
use pulse_bus::events::{ACTION_COMPLETED, APPROVAL_PENDING, ActionCompleted, ApprovalPending};
use pulse_bus::{Bus, BusError, ErrorCode, OutboxRow, Responder};

use crate::error::BrokerError;
use pulse_domain::TenantId;
use pulse_domain::action::{
    ActionEvent, ActionPlan, ActionState, ApprovalFloor, ExecutionCheck, FixOutcome, LockState,
    PolicyInput, PolicyOutcome, ReasonCode, check_execution, decide, plan_hash, resource_version,
    validate_request,
};
use pulse_domain::ai_settings::{AUTOPILOT_ACK_VERSION, AutonomyLevel};
use pulse_store::actions::{self, ActionsError, StoredAction, TransitionDetail};
use pulse_store::settings::{self, ConfigLayer};
use pulse_store::{Store, TenantTx, agents, findings, resources, users};
use serde_json::json;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::lifecycle::Delivery;

/// The actor of transitions the broker makes on its own.
pub const SERVICE_ACTOR: &str = "service:action-broker";

/// Timing of plans and executions.
#[derive(Debug, Clone, Copy)]
pub struct BrokerSettings {
    /// How long a plan may wait for approval and execution.
    pub plan_ttl: chrono::Duration,
    /// How long the agent may start the command after it was sent.
    pub lease_ttl: chrono::Duration,
    /// How long the broker waits for the agent's receipt on one send.
    pub relay_timeout: Duration,
    /// While no receipt arrives (agent unreachable, relay restarting), the same command is sent
    /// again after a pause growing from `resend_backoff` to `max_resend_backoff` (each drawn
    /// between half of it and all of it, so the resends of many actions spread out).
    pub resend_backoff: Duration,
    pub max_resend_backoff: Duration,
    /// How long after the lease expired the broker keeps asking for a receipt before it ends the
    /// action `failed` with `receipt_unknown`. Past the lease the agent answers authoritatively
    /// (the recorded receipt, or a refusal of a command it never accepted) as soon as it is
    /// reachable; this bounds the wait for an agent that never comes back.
    pub receipt_give_up_after: chrono::Duration,
    /// How long the verifier polls a postcondition (`None`: its configured default).
    pub verify_wait: Option<Duration>,
    /// How long the broker waits for the verifier's answer; no answer is `inconclusive`.
    pub verify_timeout: Duration,
    /// How often the recovery sweep looks for interrupted actions (it also runs at start).
    pub sweep_interval: Duration,
}

impl Default for BrokerSettings {
    fn default() -> Self {
        Self {
            plan_ttl: chrono::Duration::minutes(30),
            lease_ttl: chrono::Duration::minutes(2),
            relay_timeout: Duration::from_secs(60),
            resend_backoff: Duration::from_millis(500),
            max_resend_backoff: Duration::from_secs(10),
            receipt_give_up_after: chrono::Duration::minutes(5),
            verify_wait: None,
            verify_timeout: Duration::from_secs(75),
            sweep_interval: Duration::from_secs(10),
        }
    }
}

impl BrokerSettings {
    /// The defaults, with the waits derived from the relay's and the verifier's configured
    /// timeouts so the broker never gives up before they answer.
    pub fn from_config(config: &pulse_config::PulseConfig) -> Self {
        let relay = Duration::from_millis(config.relay.request_timeout_ms);
        let verify_wait = Duration::from_millis(config.verify.postcondition_wait_ms);
        Self {
            relay_timeout: relay + Duration::from_secs(5),
            verify_timeout: verify_wait + relay + Duration::from_secs(10),
            ..Self::default()
        }
    }
}

#[derive(Clone)]
pub struct Broker {
    pub(crate) store: Store,
    pub(crate) bus: Bus,
    config_layer: Arc<ConfigLayer>,
    pub(crate) settings: BrokerSettings,
    outbox_notify: Arc<Notify>,
    /// Actions this process is driving right now (executing, awaiting a receipt, verifying):
    /// never driven twice at once by this process (see [`crate::lifecycle::InFlight`]).
    pub(crate) in_flight: Arc<Mutex<HashSet<Uuid>>>,
    /// The background tasks driving actions, which shutdown waits for ([`Broker::drain`]).
    pub(crate) advancing: pulse_runtime::TaskTracker,
}

pub(crate) fn store_error(e: impl std::fmt::Display) -> BrokerError {
    tracing::warn!(error = %e, "action store failed");
    BrokerError::StoreUnavailable { what: "action" }
}

pub(crate) fn actions_error(e: ActionsError) -> BrokerError {
    match e {
        ActionsError::NotFound(id) => BrokerError::ActionNotFound(format!("no action {id}")),
        ActionsError::Conflict { id, .. } => BrokerError::Conflict(format!(
            "action {id} changed concurrently; re-read it and retry"
        )),
        ActionsError::Illegal(e) => BrokerError::DecisionNotAllowed(e.to_string()),
        ActionsError::Duplicate(id) => BrokerError::Conflict(format!("action {id} exists")),
        ActionsError::NotVerifiable { id, reason } => {
            BrokerError::Conflict(format!("action {id}: {reason}"))
        }
        ActionsError::Store(e) => store_error(e),
    }
}

/// The `fix_rejected` message of a finding: who rejected (the username when known, else the
/// actor id) and why.
pub(crate) fn rejection_message(username: Option<&str>, decided_by: &str, reason: &str) -> String {
    format!("rejected by {}: {reason}", username.unwrap_or(decided_by))
}

pub(crate) fn reply(action: &StoredAction, message: Option<String>) -> ActionReply {
    ActionReply {
        action_id: action.plan.action_id,
        state: action.state,
        plan_hash: action.plan.plan_hash.clone(),
        policy_decision: action.plan.policy_decision.clone(),
        message,
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
            in_flight: Arc::new(Mutex::new(HashSet::new())),
            advancing: pulse_runtime::TaskTracker::new(),
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
        let this = Arc::new(self);
        let plan = {
            let this = this.clone();
            bus.serve_endpoint::<ActionPlanRequest, BrokerError, _, _>(move |ctx, req| {
                let this = this.clone();
                async move { this.plan(&ctx.tenant, req).await }
            })
            .await?
        };
        let decide = {
            let this = this.clone();
            bus.serve_endpoint::<ActionDecisionRequest, BrokerError, _, _>(move |ctx, req| {
                let this = this.clone();
                async move { this.decide(&ctx.tenant, req).await }
            })
            .await?
        };
        let execute = {
            let this = this.clone();
            bus.serve_endpoint::<ActionExecuteRequest, BrokerError, _, _>(move |ctx, req| {
                let this = this.clone();
                async move { this.execute(&ctx.tenant, req).await }
            })
            .await?
        };
        Ok(vec![plan, decide, execute])
    }

    /// The tenant's Patrol mode and whether a current Autopilot acknowledgement exists. Settings
    /// that cannot be resolved fail closed: monitor (but `full` lacking only a current
    /// acknowledgement is `full` unacknowledged, which needs approval for everything).
    pub(crate) async fn mode(&self, tx: &TenantTx) -> Result<(AutonomyLevel, bool), BrokerError> {
        let stored = settings::get(tx, false).await.map_err(store_error)?;
        match self.config_layer.resolve(&stored) {
            Ok(s) => {
                let acknowledged = s
                    .autopilot_acknowledgement
                    .as_ref()
                    .is_some_and(|a| a.version == AUTOPILOT_ACK_VERSION);
                Ok((s.autonomy_level, acknowledged))
            }
            // Autopilot without a current acknowledgement (e.g. the text version moved on):
            // as `approval`, which `decide` does for `full` without an acknowledgement.
            Err(pulse_domain::ai_settings::SettingsError::AutopilotNotAcknowledged { .. }) => {
                Ok((AutonomyLevel::Full, false))
            }
            Err(error) => {
                tracing::warn!(%error, "settings do not resolve; actions treated as monitor");
                Ok((AutonomyLevel::Monitor, false))
            }
        }
    }

    /// The lock state; a lock that cannot be read is `Unknown` (fails closed).
    pub(crate) async fn lock(&self, tx: &TenantTx, resource_id: &str) -> LockState {
        match actions::remediation_lock(tx, resource_id).await {
            Ok(state) => state,
            Err(error) => {
                tracing::warn!(%error, resource_id, "remediation lock unreadable");
                LockState::Unknown
            }
        }
    }

    pub(crate) async fn commit(&self, tx: TenantTx) -> Result<(), BrokerError> {
        tx.commit().await.map_err(store_error)?;
        self.outbox_notify.notify_one();
        Ok(())
    }

    async fn enqueue(
        &self,
        tx: &TenantTx,
        row: Result<OutboxRow, pulse_bus::OutboxError>,
    ) -> Result<(), BrokerError> {
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
    ) -> Result<ActionReply, BrokerError> {
        let capability = validate_request(
            &req.resource_id,
            "-",
            &req.capability,
            &req.params,
            &req.reason,
        )
        .map_err(|e| BrokerError::InvalidRequest(e.to_string()))?;
        let tx = self.store.tenant_tx(tenant).await.map_err(store_error)?;
        let resource = resources::get(&tx, &req.resource_id)
            .await
            .map_err(store_error)?
            .ok_or_else(|| {
                // Like every route naming a resource: an unknown one is not found.
                BrokerError::ResourceNotFound(format!(
                    "resource_id: no resource {:?} in this tenant",
                    req.resource_id
                ))
            })?;
        // The catalogue owns what a resource can be acted on with: a capability it does not
        // offer (another type's, or a guest's while its connection has guest actions off) is
        // refused before anything is stored.
        let (offered, why) = crate::capabilities::offered(&tx, &resource)
            .await
            .map_err(store_error)?;
        if !offered.contains(&capability) {
            let names: Vec<&str> = offered.iter().map(|c| c.as_str()).collect();
            return Err(BrokerError::InvalidRequest(match why {
                Some(why) => format!("capability {capability}: {why}"),
                None if names.is_empty() => format!(
                    "capability {capability}: a {} resource offers no capability",
                    resource.resource_type
                ),
                None => format!(
                    "capability {capability} does not act on a {}; it offers {}",
                    resource.resource_type,
                    names.join(", ")
                ),
            }));
        }
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
        plan.plan_hash =
            plan_hash(&plan.identity()).map_err(|e| BrokerError::PlanHash(e.to_string()))?;
        let created = actions::create_for_finding(&tx, &plan, req.finding_id, &req.requested_by)
            .await
            .map_err(actions_error)?;
        crate::metrics::ActionMetrics::shared().entered(created.state);
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
                let pending = crate::metrics::transition(
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
            PolicyOutcome::AutoAuthorized => crate::metrics::transition(
                &tx,
                &created,
                ActionEvent::AutoAuthorize,
                SERVICE_ACTOR,
                detail(),
            )
            .await
            .map_err(actions_error)?,
            PolicyOutcome::Refused => crate::metrics::transition(
                &tx,
                &created,
                ActionEvent::Refuse,
                SERVICE_ACTOR,
                detail(),
            )
            .await
            .map_err(actions_error)?,
        };
        self.commit(tx).await?;
        if action.state == ActionState::Approved {
            // Auto-authorized: it runs now, without being asked again.
            self.spawn_advance(tenant, action.plan.action_id);
        }
        let message = (decision.outcome == PolicyOutcome::Refused)
            .then(|| format!("refused by policy: {reasons}"));
        Ok(reply(&action, message))
    }

    /// Expires `action` when its plan ran out; true when it did (the caller answers
    /// `action_plan_expired`).
    pub(crate) async fn expire_if_due(
        &self,
        tx: &TenantTx,
        action: &StoredAction,
    ) -> Result<bool, BrokerError> {
        if !action.plan.is_expired(Utc::now()) || action.state.is_terminal() {
            return Ok(false);
        }
        if action.state == ActionState::Executing {
            return Ok(false);
        }
        crate::metrics::transition(
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

    pub(crate) async fn load(&self, tx: &TenantTx, id: Uuid) -> Result<StoredAction, BrokerError> {
        actions::get_for_update(tx, id)
            .await
            .map_err(store_error)?
            .ok_or_else(|| BrokerError::ActionNotFound(format!("no action {id}")))
    }

    pub async fn decide(
        &self,
        tenant: &TenantId,
        req: ActionDecisionRequest,
    ) -> Result<ActionReply, BrokerError> {
        if !req.decided_by.starts_with("user:") {
            return Err(BrokerError::DecisionRequiresHuman(
                "decisions are made by a human; this token belongs to no user".to_owned(),
            ));
        }
        let reason = req.reason.trim();
        if reason.is_empty() || reason.chars().count() > pulse_domain::action::MAX_REASON_CHARS {
            return Err(BrokerError::InvalidRequest(
                "reason: must be 1..=1000 characters".to_owned(),
            ));
        }
        let tx = self.store.tenant_tx(tenant).await.map_err(store_error)?;
        let action = self.load(&tx, req.action_id).await?;
        if self.expire_if_due(&tx, &action).await? {
            self.commit(tx).await?;
            return Err(BrokerError::PlanExpired(format!(
                "action {} expired before it was decided",
                req.action_id
            )));
        }
        if action.state != ActionState::PendingApproval {
            return Err(BrokerError::DecisionNotAllowed(format!(
                "action {} is {}; only pending_approval actions take a decision",
                req.action_id, action.state
            )));
        }
        let event = match req.outcome {
            DecisionOutcome::Rejected => ActionEvent::Reject,
            DecisionOutcome::Approved => {
                match action.plan.approval_floor {
                    ApprovalFloor::Mfa => {
                        return Err(BrokerError::StepUpUnavailable("step-up unavailable: the mfa floor can never be approved in this build".to_owned()));
                    }
                    ApprovalFloor::DryRunOnly => {
                        return Err(BrokerError::DecisionNotAllowed(
                            "a dry_run_only plan is never approved".to_owned(),
                        ));
                    }
                    ApprovalFloor::Admin if action.plan.requested_by == req.decided_by => {
                        return Err(BrokerError::SelfApprovalForbidden(
                            "the admin floor needs a human other than the requester".to_owned(),
                        ));
                    }
                    ApprovalFloor::Admin | ApprovalFloor::None => {}
                }
                ActionEvent::Approve
            }
        };
        let decided = crate::metrics::transition(
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
        if decided.state == ActionState::Rejected {
            // People read this on the finding: name the user, not the actor id the audit keeps.
            let decider = match users::actor_user_id(&req.decided_by) {
                Some(id) => users::usernames(&tx, &[id])
                    .await
                    .map_err(store_error)?
                    .remove(&id),
                None => None,
            };
            let message = rejection_message(decider.as_deref(), &req.decided_by, reason);
            self.record_fix_outcome(&tx, &decided, FixOutcome::Rejected, &message)
                .await?;
        }
        self.commit(tx).await?;
        if decided.state == ActionState::Approved {
            // The approval is the go: execution starts now; the reply does not wait for it.
            self.spawn_advance(tenant, decided.plan.action_id);
        }
        Ok(reply(&decided, None))
    }

    /// Writes `outcome` of `action` to the finding it is meant to fix, in `tx`. An action without
    /// a finding, or whose finding is gone, is unaffected (the latter is logged).
    pub(crate) async fn record_fix_outcome(
        &self,
        tx: &TenantTx,
        action: &StoredAction,
        outcome: FixOutcome,
        message: &str,
    ) -> Result<(), BrokerError> {
        let Some(finding_id) = action.finding_id else {
            return Ok(());
        };
        let found = findings::record_fix_outcome(
            tx,
            finding_id,
            outcome,
            action.plan.action_id,
            message,
            Utc::now(),
        )
        .await
        .map_err(store_error)?;
        if !found {
            tracing::warn!(action_id = %action.plan.action_id, %finding_id, outcome = outcome.as_str(), "the action's finding is gone; fix outcome not recorded");
        }
        Ok(())
    }

    /// Fails the approved `action` with a refusal, announcing it, in `tx`.
    pub(crate) async fn refuse(
        &self,
        tx: &TenantTx,
        tenant: &TenantId,
        action: &StoredAction,
        code: ReasonCode,
        message: &str,
        recomputed: &str,
    ) -> Result<StoredAction, BrokerError> {
        self.refuse_as(tx, tenant, action, code.as_str(), message, recomputed)
            .await
    }

    /// [`Broker::refuse`] for a refusal named `refused` (a reason code or an error code).
    async fn refuse_as(
        &self,
        tx: &TenantTx,
        tenant: &TenantId,
        action: &StoredAction,
        refused: &str,
        message: &str,
        recomputed: &str,
    ) -> Result<StoredAction, BrokerError> {
        let failed = crate::metrics::transition(
            tx,
            action,
            ActionEvent::Refuse,
            SERVICE_ACTOR,
            TransitionDetail {
                reason: Some(message.to_owned()),
                result: Some(json!({"refused": refused, "message": message})),
                audit: Some(json!({"recomputed_plan_hash": recomputed})),
                ..Default::default()
            },
        )
        .await
        .map_err(actions_error)?;
        self.announce_end(tx, tenant, &failed, Some(message.to_owned()))
            .await?;
        self.record_fix_outcome(tx, &failed, FixOutcome::Failed, message)
            .await?;
        Ok(failed)
    }

    pub(crate) async fn announce_end(
        &self,
        tx: &TenantTx,
        tenant: &TenantId,
        action: &StoredAction,
        reason: Option<String>,
    ) -> Result<(), BrokerError> {
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

    /// The explicit execute route: runs an approved action now and answers with its end (or
    /// `executing` while no receipt arrived yet). Idempotent: an action that is executing (here
    /// or being driven by this process) or ended is refused, never sent again by this route.
    pub async fn execute(
        &self,
        tenant: &TenantId,
        req: ActionExecuteRequest,
    ) -> Result<ActionReply, BrokerError> {
        let already = || {
            BrokerError::AlreadyExecuting(format!("action {} is already executing", req.action_id))
        };
        let Some(claim) = self.claim(req.action_id) else {
            return Err(already());
        };
        let tx = self.store.tenant_tx(tenant).await.map_err(store_error)?;
        let action = self.load(&tx, req.action_id).await?;
        match action.state {
            ActionState::Approved => {}
            ActionState::Executing => return Err(already()),
            ActionState::Planned | ActionState::PendingApproval => {
                if self.expire_if_due(&tx, &action).await? {
                    self.commit(tx).await?;
                    return Err(BrokerError::PlanExpired(format!(
                        "action {} expired before it was approved",
                        req.action_id
                    )));
                }
                return Err(BrokerError::NotApproved(format!(
                    "action {} is {}, not approved",
                    req.action_id, action.state
                )));
            }
            ActionState::Rejected => {
                return Err(BrokerError::NotApproved(format!(
                    "action {} was rejected",
                    req.action_id
                )));
            }
            ActionState::Expired | ActionState::Completed | ActionState::Failed => {
                return Err(BrokerError::ExecutionFinal(format!(
                    "action {} is {}; it is never executed again",
                    req.action_id, action.state
                )));
            }
        }
        let executing = self.start(tx, tenant, &action, &req.requested_by).await?;
        let ended = self.deliver(tenant, &executing, Delivery::Once).await?;
        let message = match ended.state {
            ActionState::Executing => Some("no receipt yet; the broker keeps asking".to_owned()),
            _ => ended
                .decision_reason
                .clone()
                .filter(|_| ended.state == ActionState::Failed),
        };
        // The rest (receipt if still missing, then verification) continues in the background
        // under the same claim.
        if matches!(ended.state, ActionState::Executing | ActionState::Completed) {
            let this = self.clone();
            let tenant = tenant.clone();
            self.advancing.spawn(async move {
                if let Err(error) = this.advance_claimed(&tenant, req.action_id, claim).await {
                    tracing::warn!(action_id = %req.action_id, %error, "action not advanced; the recovery sweep retries");
                }
            });
        }
        Ok(reply(&ended, message))
    }

    /// The checks an approved action must pass right before it runs, then the lease and
    /// `approved -> executing`, committed in `tx`. A refusal ends the action (`failed`, or
    /// `expired`) and commits that, then answers with the refusal.
    pub(crate) async fn start(
        &self,
        tx: TenantTx,
        tenant: &TenantId,
        action: &StoredAction,
        actor: &str,
    ) -> Result<StoredAction, BrokerError> {
        let id = action.plan.action_id;
        let (mode, _) = self.mode(&tx).await?;
        let lock = self.lock(&tx, &action.plan.resource_id).await;
        let resource = resources::get(&tx, &action.plan.resource_id)
            .await
            .map_err(store_error)?;
        let mut current = action.plan.clone();
        current.resource_version = resource_version(resource.as_ref());
        let recomputed = current
            .recompute_hash()
            .map_err(|e| BrokerError::PlanHash(e.to_string()))?;
        let online = agents::get(&tx, &action.plan.agent_id)
            .await
            .map_err(store_error)?
            .is_some_and(|a| a.status == "online");
        if action.plan.target().is_none() {
            // Never runnable: ended now, or it would stay `approved` and be retried forever.
            let message = "invalid_action_request: params.target is missing";
            self.refuse_as(
                &tx,
                tenant,
                action,
                ErrorCode::InvalidActionRequest.code(),
                message,
                &recomputed,
            )
            .await?;
            self.commit(tx).await?;
            tracing::info!(action_id = %id, %message, "action refused");
            return Err(BrokerError::InvalidRequest(message.to_owned()));
        }
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
                self.expire_if_due(&tx, action).await?;
                None
            } else {
                Some(
                    self.refuse(&tx, tenant, action, code, &message, &recomputed)
                        .await?,
                )
            };
            self.commit(tx).await?;
            tracing::info!(action_id = %id, state = ?failed.map(|f| f.state), %message, "action refused");
            return Err(BrokerError::Refused {
                reason: code,
                message,
            });
        }
        let lease_id = format!("lease-{}", Uuid::now_v7());
        let lease_expires_at = Utc::now() + self.settings.lease_ttl;
        let executing = crate::metrics::transition(
            &tx,
            action,
            ActionEvent::StartExecution,
            actor,
            TransitionDetail {
                lease: Some((lease_id, lease_expires_at)),
                ..Default::default()
            },
        )
        .await
        .map_err(actions_error)?;
        self.commit(tx).await?;
        Ok(executing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejection_names_the_user_and_keeps_the_reason() {
        assert_eq!(
            rejection_message(Some("alice"), "user:0190aaaa", "not during business hours"),
            "rejected by alice: not during business hours"
        );
        assert_eq!(
            rejection_message(None, "user:0190aaaa", "no"),
            "rejected by user:0190aaaa: no"
        );
    }
}
