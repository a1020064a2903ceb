//! The action lifecycle after a decision: execution, the receipt, verification and the fix
//! outcome on the finding.
//!
//! [`Broker::advance`] moves one action as far as it can from whatever state it is in, and is
//! what runs after an approval, after an auto-authorized plan, and for every action the recovery
//! sweep ([`crate::recovery`]) finds unfinished:
//!
//! | state | what happens |
//! |---|---|
//! | `planned`, `pending_approval` past expiry | `expired` |
//! | `approved` | the execution checks, lease + `executing` (one transaction), then delivery |
//! | `executing` | delivery: the SAME command (action id, lease id, lease expiry) is sent until a receipt arrives, each send only while the stored action is still `executing` under that lease |
//! | `completed` without a verification | verification |
//!
//! **Delivery.** The agent runs an action id at most once and answers a repeated one with its
//! recorded receipt, so re-sending is always safe. While no receipt comes (agent unreachable,
//! relay restarting, timeout) the action stays `executing` and the command is sent again with a
//! growing pause; once the lease has expired the agent refuses a command it never accepted,
//! which ends the action `failed`. An agent that never answers ends it `failed` with
//! `receipt_unknown: ...` [`BrokerSettings::receipt_give_up_after`] past the lease. The relay
//! refusing the command outright (`agent_refused`, `missing_scope`, `invalid_request`) means
//! nothing ran: `failed`.
//!
//! **Verification.** A `completed` action goes to the verifier (`verify.postcondition`, with the
//! time the agent accepted the command as `executed_at`, else the receipt's time; a receipt
//! without a time is `inconclusive`, the verifier not asked); its `verified | still_failing | inconclusive` is recorded on the action with an
//! `action.verification` audit row, once. No verifier, a timeout or a verifier
//! error is `inconclusive` with that reason; never `verified`. A `failed` action is not verified.
//!
//! **Fix outcome.** The finding named by the plan gets `fix_verified` (and is resolved),
//! `fix_verification_failed`, `fix_verification_unknown`, or `fix_failed`, in the transaction
//! that records the verification or the failure, so the two cannot disagree.
//!
//! **Once per process.** An action is driven by at most one task of this process at a time
//! ([`InFlight`]); the recovery sweep skips what this process is driving. Other replicas may
//! drive the same action concurrently: every state change is a compare-and-swap, so exactly one
//! lands, and a command sent twice runs once on the agent.
//!
//! **Shutdown.** Background drives are tracked; [`Broker::drain`] waits for them up to a grace
//! and leaves the rest to the recovery sweep of the next broker (it is safe to take any action
//! up from its stored state).
//!
//! [`BrokerSettings::receipt_give_up_after`]: crate::broker::BrokerSettings::receipt_give_up_after

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use pulse_bus::relay_api::RelayCommandRequest;
use pulse_bus::verify_api::{PostconditionReply, PostconditionRequest};
use pulse_bus::{ClientError, ErrorCode, RelayClient, VerifierClient};
use pulse_domain::TenantId;
use pulse_domain::action::{ActionEvent, ActionState, FixOutcome, Verification};
use pulse_domain::agent_protocol::ReceiptStatus;
use pulse_domain::backoff::Backoff;
use pulse_store::actions::{self, StoredAction, TransitionDetail};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::broker::{Broker, SERVICE_ACTOR, actions_error, store_error};
use crate::error::BrokerError;

/// Relay error codes that mean the command never reached an agent that could run it.
const NOTHING_RAN: [ErrorCode; 3] = [
    ErrorCode::AgentRefused,
    ErrorCode::MissingScope,
    ErrorCode::InvalidRequest,
];

/// The claim of this process on driving one action; released when dropped.
pub struct InFlight {
    set: Arc<Mutex<HashSet<Uuid>>>,
    id: Uuid,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Ok(mut set) = self.set.lock() {
            set.remove(&self.id);
        }
    }
}

/// How many times [`Broker::deliver`] sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Once; no receipt leaves the action `executing` (the caller continues later).
    Once,
    /// Until a receipt arrives or the wait is given up (`failed`, `receipt_unknown`).
    UntilReceipt,
}

impl Broker {
    /// Claims `id` for this process; `None` when a task of this process drives it already.
    pub fn claim(&self, id: Uuid) -> Option<InFlight> {
        let mut set = self.in_flight.lock().ok()?;
        set.insert(id).then(|| InFlight {
            set: self.in_flight.clone(),
            id,
        })
    }

    /// Actions this process is driving now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.lock().map(|s| s.len()).unwrap_or(0)
    }

    /// Drives `id` in the background when this process is not driving it already.
    pub(crate) fn spawn_advance(&self, tenant: &TenantId, id: Uuid) {
        let Some(claim) = self.claim(id) else {
            return;
        };
        let this = self.clone();
        let tenant = tenant.clone();
        self.advancing.spawn(async move {
            if let Err(error) = this.advance_claimed(&tenant, id, claim).await {
                tracing::warn!(action_id = %id, %error, "action not advanced; the recovery sweep retries");
            }
        });
    }

    /// Waits up to `grace` for the actions driven in the background to get as far as they can;
    /// returns how many were still running (the recovery sweep takes them up again).
    pub async fn drain(&self, grace: Duration) -> usize {
        self.advancing.close();
        if tokio::time::timeout(grace, self.advancing.wait())
            .await
            .is_err()
        {
            return self.advancing.len();
        }
        0
    }

    /// Moves action `id` as far as it can go (table in the module documentation). `Ok` also when
    /// there was nothing to do or the execution was refused (the refusal is recorded).
    pub async fn advance(&self, tenant: &TenantId, id: Uuid) -> Result<(), BrokerError> {
        match self.claim(id) {
            Some(claim) => self.advance_claimed(tenant, id, claim).await,
            None => Ok(()),
        }
    }

    pub(crate) async fn advance_claimed(
        &self,
        tenant: &TenantId,
        id: Uuid,
        _claim: InFlight,
    ) -> Result<(), BrokerError> {
        let tx = self.store.tenant_tx(tenant).await.map_err(store_error)?;
        let action = self.load(&tx, id).await?;
        let completed = match action.state {
            ActionState::Planned | ActionState::PendingApproval => {
                if self.expire_if_due(&tx, &action).await? {
                    self.commit(tx).await?;
                }
                return Ok(());
            }
            ActionState::Approved => {
                let executing = match self.start(tx, tenant, &action, SERVICE_ACTOR).await {
                    Ok(executing) => executing,
                    Err(refusal) => {
                        tracing::info!(action_id = %id, code = %refusal.code(), "approved action not executed");
                        return Ok(());
                    }
                };
                self.deliver(tenant, &executing, Delivery::UntilReceipt)
                    .await?
            }
            ActionState::Executing => {
                tx.rollback().await.map_err(store_error)?;
                self.deliver(tenant, &action, Delivery::UntilReceipt)
                    .await?
            }
            ActionState::Completed if action.verification.is_none() => {
                tx.rollback().await.map_err(store_error)?;
                action
            }
            _ => return Ok(()),
        };
        if completed.state == ActionState::Completed && completed.verification.is_none() {
            self.verify(tenant, &completed).await?;
        }
        Ok(())
    }

    /// Sends the command of the executing `action` (its stored lease) through the relay and ends
    /// the action by the receipt. Returns the action as it is afterwards (still `executing` only
    /// for [`Delivery::Once`] without a receipt).
    pub(crate) async fn deliver(
        &self,
        tenant: &TenantId,
        action: &StoredAction,
        delivery: Delivery,
    ) -> Result<StoredAction, BrokerError> {
        let id = action.plan.action_id;
        let (Some(lease_id), Some(lease_expires_at), Some(target)) = (
            action.lease_id.clone(),
            action.lease_expires_at,
            action.plan.target(),
        ) else {
            let reason = "invalid_action_request: the executing action has no lease or target";
            return self.fail(tenant, id, reason).await;
        };
        let command = RelayCommandRequest {
            agent_id: action.plan.agent_id.clone(),
            action_id: id.to_string(),
            lease_id,
            lease_expires_at,
            capability: action.plan.capability.as_str().to_owned(),
            target: target.to_owned(),
        };
        let relay = RelayClient::new(self.bus.clone());
        let give_up_at = lease_expires_at + self.settings.receipt_give_up_after;
        let mut resend = Backoff::new(
            self.settings.resend_backoff,
            self.settings.max_resend_backoff,
        );
        loop {
            // Another replica may have ended the action (a relay refusal, a give-up) since it was
            // read: a failed action's command must not be sent again, even within its lease.
            let now = self.current(tenant, id).await?;
            if now.state != ActionState::Executing || now.lease_id != action.lease_id {
                tracing::info!(action_id = %id, state = %now.state, "action no longer executing under this lease; command not sent");
                return Ok(now);
            }
            let unknown = match relay
                .command(tenant, &command, self.settings.relay_timeout)
                .await
            {
                Ok(receipt) => {
                    let receipt = receipt.0;
                    let result = json!({
                        "status": receipt.status,
                        "reason": receipt.reason,
                        "output": receipt.output,
                        "output_truncated": receipt.output_truncated,
                        "exit_status": receipt.exit_status,
                        "accepted_at": receipt
                            .accepted_at
                            .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true)),
                        "at": receipt.at.to_rfc3339_opts(SecondsFormat::Millis, true),
                        "replayed": receipt.replayed,
                    });
                    match receipt.status {
                        ReceiptStatus::Completed => {
                            return self
                                .end(tenant, id, ActionEvent::Complete, None, result)
                                .await;
                        }
                        ReceiptStatus::Failed | ReceiptStatus::Rejected => {
                            let reason = receipt
                                .reason
                                .unwrap_or_else(|| "the agent failed".to_owned());
                            return self
                                .end(tenant, id, ActionEvent::Fail, Some(&reason), result)
                                .await;
                        }
                        ReceiptStatus::Accepted => {
                            "the agent accepted the command and has not finished it".to_owned()
                        }
                    }
                }
                Err(ClientError::Remote { code, message }) if NOTHING_RAN.contains(&code) => {
                    let reason = format!("{code}: {message}");
                    return self.fail(tenant, id, &reason).await;
                }
                Err(error) => error.to_string(),
            };
            if delivery == Delivery::Once {
                tracing::warn!(action_id = %id, reason = %unknown, "no receipt yet; action stays executing");
                return self.current(tenant, id).await;
            }
            if Utc::now() >= give_up_at {
                let reason = format!(
                    "receipt_unknown: no receipt from agent {} by {} (last: {unknown})",
                    action.plan.agent_id,
                    give_up_at.to_rfc3339_opts(SecondsFormat::Secs, true)
                );
                return self.fail(tenant, id, &reason).await;
            }
            let pause = resend.next_delay();
            tracing::info!(action_id = %id, reason = %unknown, retry_in_ms = pause.as_millis() as u64, "no receipt yet; sending the same command again");
            tokio::time::sleep(pause).await;
        }
    }

    async fn current(&self, tenant: &TenantId, id: Uuid) -> Result<StoredAction, BrokerError> {
        let tx = self.store.tenant_tx(tenant).await.map_err(store_error)?;
        let action = actions::get(&tx, id)
            .await
            .map_err(store_error)?
            .ok_or_else(|| BrokerError::ActionNotFound(format!("no action {id}")))?;
        tx.rollback().await.map_err(store_error)?;
        Ok(action)
    }

    /// Fails the executing action `id` for `reason`, which is also its result's `error`.
    async fn fail(
        &self,
        tenant: &TenantId,
        id: Uuid,
        reason: &str,
    ) -> Result<StoredAction, BrokerError> {
        self.end(
            tenant,
            id,
            ActionEvent::Fail,
            Some(reason),
            json!({"error": reason}),
        )
        .await
    }

    /// Ends the executing action `id` by `event` (`complete` or `fail`), announcing it and, for a
    /// failure, writing `fix_failed` to its finding, in one transaction. An action some other
    /// writer ended already is returned as it is.
    async fn end(
        &self,
        tenant: &TenantId,
        id: Uuid,
        event: ActionEvent,
        reason: Option<&str>,
        result: Value,
    ) -> Result<StoredAction, BrokerError> {
        let tx = self.store.tenant_tx(tenant).await.map_err(store_error)?;
        let current = self.load(&tx, id).await?;
        if current.state != ActionState::Executing {
            tx.rollback().await.map_err(store_error)?;
            return Ok(current);
        }
        let ended = crate::metrics::transition(
            &tx,
            &current,
            event,
            SERVICE_ACTOR,
            TransitionDetail {
                reason: reason.map(str::to_owned),
                result: Some(result),
                ..Default::default()
            },
        )
        .await
        .map_err(actions_error)?;
        self.announce_end(&tx, tenant, &ended, reason.map(str::to_owned))
            .await?;
        if ended.state == ActionState::Failed {
            self.record_fix_outcome(
                &tx,
                &ended,
                FixOutcome::Failed,
                reason.unwrap_or("the action failed"),
            )
            .await?;
        }
        self.commit(tx).await?;
        tracing::info!(action_id = %id, state = %ended.state, "action ended");
        Ok(ended)
    }

    /// Asks the verifier about the completed `action` and records its judgement on the action
    /// and its finding. A bus that is down records nothing (the recovery sweep asks again).
    pub(crate) async fn verify(
        &self,
        tenant: &TenantId,
        action: &StoredAction,
    ) -> Result<(), BrokerError> {
        let id = action.plan.action_id;
        // Without the agent's time the verifier could accept a start from before the command
        // (the database clock is another clock): not verifiable.
        let (outcome, detail) = match receipt_executed_at(action) {
            Some(executed_at) => self.ask_verifier(tenant, action, executed_at).await?,
            None => inconclusive(
                "receipt_time_unknown: the receipt carries no time of execution; the fix is not verified",
            ),
        };
        let reason = detail["reason"].as_str().unwrap_or_default().to_owned();
        let tx = self.store.tenant_tx(tenant).await.map_err(store_error)?;
        let current = self.load(&tx, id).await?;
        if current.state != ActionState::Completed || current.verification.is_some() {
            tx.rollback().await.map_err(store_error)?;
            return Ok(());
        }
        let verified = actions::record_verification(&tx, &current, outcome, detail, SERVICE_ACTOR)
            .await
            .map_err(actions_error)?;
        let approved_at = crate::metrics::approved_at(&tx, id).await;
        self.record_fix_outcome(
            &tx,
            &verified,
            FixOutcome::from_verification(outcome),
            &reason,
        )
        .await?;
        self.commit(tx).await?;
        crate::metrics::ActionMetrics::shared().verified(
            &verified,
            outcome,
            approved_at,
            verified.verified_at.unwrap_or_else(chrono::Utc::now),
        );
        tracing::info!(action_id = %id, verification = %outcome, %reason, "action verified");
        Ok(())
    }

    /// The verifier's judgement of the completed `action` executed at `executed_at`. A bus that
    /// is down is an error (nothing is recorded; the recovery sweep asks again).
    async fn ask_verifier(
        &self,
        tenant: &TenantId,
        action: &StoredAction,
        executed_at: DateTime<Utc>,
    ) -> Result<(Verification, Value), BrokerError> {
        let id = action.plan.action_id;
        let request = PostconditionRequest {
            action_id: id,
            resource_id: action.plan.resource_id.clone(),
            agent_id: action.plan.agent_id.clone(),
            capability: action.plan.capability.as_str().to_owned(),
            target: action.plan.target().unwrap_or_default().to_owned(),
            executed_at,
            wait_ms: self
                .settings
                .verify_wait
                .map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX)),
        };
        let answer = VerifierClient::new(self.bus.clone())
            .postcondition(tenant, &request, self.settings.verify_timeout)
            .await;
        Ok(match answer {
            Ok(reply) => judged(&reply),
            Err(ClientError::NoResponder { .. }) => {
                inconclusive("verifier_unavailable: no verifier answered; the fix is not verified")
            }
            Err(ClientError::Timeout { .. }) => inconclusive(&format!(
                "verifier_timeout: no judgement within {} s; the fix is not verified",
                self.settings.verify_timeout.as_secs()
            )),
            Err(ClientError::Remote { code, message }) => {
                inconclusive(&format!("{code}: {message}"))
            }
            Err(ClientError::UnknownCode { code, message, .. }) => {
                inconclusive(&format!("{code}: {message}"))
            }
            Err(ClientError::Bus(error)) => {
                tracing::warn!(action_id = %id, %error, "verifier not reachable over the bus; verification retried later");
                return Err(BrokerError::BusUnavailable);
            }
        })
    }
}

/// The verifier's `executed_at` of the completed `action`: the agent's time on its receipt,
/// when it started the command (`result.accepted_at`) or else when it finished it
/// (`result.at`, agents before `accepted_at`); `None` when the receipt carries no readable time.
pub(crate) fn receipt_executed_at(action: &StoredAction) -> Option<DateTime<Utc>> {
    result_executed_at(action.result.as_ref()?)
}

/// [`receipt_executed_at`] of an action's `result` JSON.
fn result_executed_at(result: &Value) -> Option<DateTime<Utc>> {
    let time = |key: &str| {
        result
            .get(key)
            .and_then(Value::as_str)
            .and_then(|at| DateTime::parse_from_rfc3339(at).ok())
            .map(|at| at.with_timezone(&Utc))
    };
    time("accepted_at").or_else(|| time("at"))
}

fn judged(reply: &PostconditionReply) -> (Verification, Value) {
    (
        reply.outcome,
        json!({
            "reason": reply.reason,
            "evidence": reply.evidence,
            "observations": reply.observations,
            "checked_at": reply.checked_at.to_rfc3339_opts(SecondsFormat::Millis, true),
        }),
    )
}

fn inconclusive(reason: &str) -> (Verification, Value) {
    (Verification::Inconclusive, json!({ "reason": reason }))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod executed_at_tests {
    use super::*;

    #[test]
    fn executed_at_is_when_the_agent_started_the_command_else_when_it_finished() {
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let both = json!({
            "accepted_at": "2026-11-29T12:00:00.000Z",
            "at": "2026-11-29T12:00:09.500Z",
        });
        assert_eq!(result_executed_at(&both), Some(t("2026-11-29T12:00:00Z")));
        // Receipts of agents before `accepted_at`, and refusals, have only `at`.
        let old = json!({"at": "2026-11-29T12:00:09.500Z"});
        assert_eq!(
            result_executed_at(&old),
            Some(t("2026-11-29T12:00:09.500Z"))
        );
        let null = json!({"accepted_at": null, "at": "2026-11-29T12:00:09.500Z"});
        assert_eq!(
            result_executed_at(&null),
            Some(t("2026-11-29T12:00:09.500Z"))
        );
        assert_eq!(result_executed_at(&json!({"at": "yesterday"})), None);
    }
}
