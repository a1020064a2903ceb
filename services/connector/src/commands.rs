//! The connector's answers to the relay for one connection: guest power commands
//! (`guest.start`, `guest.shutdown`, `guest.reboot`, `guest.stop`) and fresh guest observations
//! for the verifier.
//!
//! A command is checked in this order, and only then does anything run:
//! 1. the connection still exists and has guest actions on;
//! 2. the action id, capability (a guest one) and target (a VMID) are well formed;
//! 3. the command log (`pulse_store::connector_commands`): a finished action returns its recorded
//!    receipt (`replayed`) and never runs again; an action this process is running answers
//!    `accepted` at once; an action accepted with a task id is waited on again (another replica
//!    may have started it); one accepted without a task id (the connector stopped before Proxmox
//!    answered) is refused, never run again;
//! 4. the lease has not expired by the connector's clock.
//!
//! Then the action is written `accepted` and committed, the guest and the cluster are read
//! afresh (a guest that is gone, a template, a held lock or a lost quorum refuse it with their
//! cause, and nothing is asked of Proxmox), the power action is posted, its task id recorded,
//! and the task waited on until it ends or the wait runs out. Every end is a receipt with a
//! classified reason (`guest_locked`, `no_quorum`, `shutdown_timeout`, `task_failed`,
//! `task_timeout`, `permission_denied`, `proxmox_refused`, `outcome_unknown`), recorded before it
//! is returned. Nothing is retried here: the broker ends the action on the receipt, so a locked
//! guest or a lost quorum is one refusal, not a retry storm.
//!
//! Observations read the guest's own `status/current` from the node that runs it, never the
//! task's answer, so the verifier judges the guest's state independently of the command.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use pulse_domain::agent_protocol::{
    AgentMessage, Capability, Command, MAX_ID_BYTES, MAX_OUTPUT_BYTES, MAX_REASON_BYTES,
    Observation, Receipt, ReceiptStatus, Refused, RelayMessage, ResourceTarget, bounded_text,
};
use pulse_domain::backoff::Backoff;
use pulse_proxmox::{Client, GuestRef, PowerAction, Upid, inventory};
use pulse_store::connections::Connection;
use pulse_store::connector_commands::{self, Recorded};

use crate::poller::{Access, NoClient};

/// How much longer than the guest's shutdown timeout the connector waits for a task.
pub const TASK_WAIT_MARGIN: Duration = Duration::from_secs(60);
/// Pauses between two reads of a running task's status.
const TASK_POLL: Backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(2));

/// Answers the relay's requests for one connection.
pub struct GuestCommands {
    access: Arc<Access>,
    /// Action ids this process is running now.
    running: Mutex<HashSet<String>>,
}

fn receipt(command: &Command, status: ReceiptStatus, reason: Option<String>) -> Receipt {
    Receipt::of(command, status, reason, Utc::now())
}

fn rejected(command: &Command, reason: impl Into<String>) -> Receipt {
    receipt(command, ReceiptStatus::Rejected, Some(reason.into()))
}

fn refused(request_id: &str, reason: impl Into<String>) -> AgentMessage {
    AgentMessage::Refused(Refused {
        request_id: request_id.to_owned(),
        reason: bounded_text(&reason.into(), MAX_REASON_BYTES).0,
        code: None,
    })
}

/// The power action of a guest capability.
fn power_action(capability: Capability) -> Option<PowerAction> {
    Some(match capability {
        Capability::GuestStart => PowerAction::Start,
        Capability::GuestShutdown => PowerAction::Shutdown,
        Capability::GuestReboot => PowerAction::Reboot,
        Capability::GuestStop => PowerAction::Stop,
        _ => return None,
    })
}

/// A VMID as Proxmox allows it (100 to 999,999,999).
fn vmid(target: &str) -> Option<u64> {
    if target.is_empty() || target.len() > 9 || !target.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    target.parse().ok().filter(|v| *v >= 100)
}

/// How a task ended, or why it did not, as the receipt says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEnd {
    pub status: ReceiptStatus,
    pub reason: Option<String>,
    pub exit_status: i32,
}

/// The classified reason of a task that ended with `exit` (not `OK` or `WARNINGS`).
pub fn classify_task_error(action: PowerAction, exit: &str, shutdown_timeout: Duration) -> String {
    let lower = exit.to_ascii_lowercase();
    if lower.contains("is locked") {
        format!(
            "guest_locked: {exit}; wait for the operation holding the lock to finish, or clear \
             the lock on the Proxmox host"
        )
    } else if lower.contains("no quorum") {
        format!("no_quorum: {exit}; restore the cluster's quorum first")
    } else if matches!(action, PowerAction::Shutdown | PowerAction::Reboot)
        && lower.contains("timeout")
    {
        format!(
            "shutdown_timeout: the guest's OS did not shut down within {} s ({exit}); it was \
             not forced off. Check the guest (ACPI, a hung service), or plan guest.stop",
            shutdown_timeout.as_secs()
        )
    } else {
        format!("task_failed: the Proxmox task ended in error: {exit}")
    }
}

/// The classified reason of a power request Proxmox refused, and whether nothing ran (the
/// request was answered with an error, so no task was started).
pub fn classify_refusal(error: &pulse_proxmox::Error) -> (ReceiptStatus, String) {
    use pulse_proxmox::Error as E;
    match error {
        E::NoQuorum { message } => (
            ReceiptStatus::Rejected,
            format!(
                "no_quorum: the cluster has no quorum ({message}); guests cannot be started or \
                 stopped until it is restored"
            ),
        ),
        E::Forbidden { path, message } => (
            ReceiptStatus::Rejected,
            format!(
                "permission_denied: the connection's token may not do this ({message}); grant \
                 it VM.PowerMgmt on /vms (see docs/proxmox.md), path {path}"
            ),
        ),
        E::AuthFailed { .. } => (
            ReceiptStatus::Rejected,
            format!("permission_denied: {error}"),
        ),
        E::Api { message, .. } if message.to_ascii_lowercase().contains("is locked") => (
            ReceiptStatus::Rejected,
            format!(
                "guest_locked: {message}; wait for the operation holding the lock to finish, or \
                 clear the lock on the Proxmox host"
            ),
        ),
        E::Api { message, .. } => (
            ReceiptStatus::Rejected,
            format!("proxmox_refused: {message}"),
        ),
        // The request may have reached Proxmox and started a task whose id never came back.
        E::Unreachable { .. } | E::Decode { .. } => (
            ReceiptStatus::Failed,
            format!(
                "outcome_unknown: {error}; the task may have started, so it is not asked again \
                 (the verifier reads the guest's state)"
            ),
        ),
        other => (ReceiptStatus::Rejected, format!("proxmox_refused: {other}")),
    }
}

impl GuestCommands {
    pub(crate) fn new(access: Arc<Access>) -> Self {
        Self {
            access,
            running: Mutex::new(HashSet::new()),
        }
    }

    fn shutdown_timeout(&self) -> Duration {
        self.access.settings.shutdown_timeout
    }

    /// Marks `action_id` running in this process; false when it already is.
    fn start_running(&self, action_id: &str) -> bool {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(action_id.to_owned())
    }

    fn stop_running(&self, action_id: &str) {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(action_id);
    }

    async fn connection(&self) -> Result<Option<Connection>, String> {
        let tx = self.access.tx().await?;
        let found = self.access.current(&tx).await?;
        let _ = tx.rollback().await;
        Ok(found)
    }

    async fn client(&self, connection: &Connection) -> Result<Client, String> {
        self.access
            .client(connection)
            .await
            .map_err(|error| match error {
                NoClient::Removed => "the connection was removed".to_owned(),
                NoClient::Unsealable => {
                    "the connection's token secret cannot be opened with this master key".to_owned()
                }
                NoClient::Store(error) => format!("the store could not be read ({error})"),
                NoClient::Proxmox(error) => error.to_string(),
            })
    }

    /// Handles one command; never panics on bad input.
    pub async fn handle(&self, command: &Command) -> Receipt {
        let connection = match self.connection().await {
            Ok(Some(connection)) => connection,
            Ok(None) => return rejected(command, "the connection was removed; nothing ran"),
            Err(error) => {
                return rejected(
                    command,
                    format!("the connector cannot read its store ({error}); nothing ran"),
                );
            }
        };
        if !connection.guest_actions {
            return rejected(
                command,
                format!(
                    "guest actions are off for connection {:?}; an admin turns them on with PUT \
                     /api/connections/{}/guest-actions; nothing ran",
                    connection.name, connection.id
                ),
            );
        }
        if command.action_id.is_empty() || command.action_id.len() > MAX_ID_BYTES.min(256) {
            return rejected(command, "action_id must be 1 to 256 bytes");
        }
        let Some(action) = Capability::parse(&command.capability).and_then(power_action) else {
            return rejected(
                command,
                format!(
                    "capability {:?}: a Proxmox VE connector runs only guest.start, \
                     guest.shutdown, guest.reboot and guest.stop",
                    bounded_text(&command.capability, 64).0
                ),
            );
        };
        let Some(vmid) = vmid(&command.target) else {
            return rejected(
                command,
                format!(
                    "target {:?} is not a VMID (a number from 100 up)",
                    bounded_text(&command.target, 64).0
                ),
            );
        };
        if !self.start_running(&command.action_id) {
            return Receipt {
                reason: Some(
                    "the connector is running this action; ask again for its receipt".to_owned(),
                ),
                ..receipt(command, ReceiptStatus::Accepted, None)
            };
        }
        let done = self.run(command, &connection, action, vmid).await;
        self.stop_running(&command.action_id);
        done
    }

    /// Steps 3 to the end, with the action marked running in this process.
    async fn run(
        &self,
        command: &Command,
        connection: &Connection,
        action: PowerAction,
        vmid: u64,
    ) -> Receipt {
        let now = Utc::now();
        let tx = match self.access.tx().await {
            Ok(tx) => tx,
            Err(error) => {
                return rejected(
                    command,
                    format!("the command log cannot be read ({error}); nothing ran"),
                );
            }
        };
        let recorded = match connector_commands::get(&tx, &command.action_id).await {
            Ok(recorded) => recorded,
            Err(error) => {
                return rejected(
                    command,
                    format!("the command log cannot be read ({error}); nothing ran"),
                );
            }
        };
        match recorded {
            Some(Recorded::Finished(recorded)) => {
                tracing::info!(action_id = %command.action_id, "repeated action id; returning the recorded receipt");
                return Receipt {
                    request_id: command.request_id.clone(),
                    replayed: true,
                    ..recorded
                };
            }
            Some(Recorded::Accepted {
                upid: Some(upid),
                accepted_at,
                ..
            }) => {
                drop(tx);
                tracing::info!(action_id = %command.action_id, %upid, "resuming the wait for a task another run started");
                return self
                    .resume(command, connection, action, &upid, accepted_at)
                    .await;
            }
            Some(Recorded::Accepted {
                upid: None,
                accepted_at,
                ..
            }) => {
                let reason = format!(
                    "action {} was accepted at {} but the connector stopped before Proxmox \
                     answered; it is not run again (the verifier reads the guest's state)",
                    command.action_id,
                    accepted_at.to_rfc3339()
                );
                let done = Receipt {
                    accepted_at: Some(accepted_at),
                    ..receipt(command, ReceiptStatus::Failed, Some(reason))
                };
                return self.finish_in(tx, done).await;
            }
            None => {}
        }
        if command.lease_expires_at <= now {
            return rejected(
                command,
                format!(
                    "lease {} expired at {} (connector clock {}); nothing ran",
                    bounded_text(&command.lease_id, 128).0,
                    command.lease_expires_at.to_rfc3339(),
                    now.to_rfc3339()
                ),
            );
        }
        match connector_commands::accept(&tx, connection.id, command, now).await {
            Ok(true) => {}
            Ok(false) => {
                return rejected(
                    command,
                    "the action was recorded by another delivery at the same moment; ask again for its receipt",
                );
            }
            Err(error) => {
                return rejected(
                    command,
                    format!("the command log cannot be written ({error}); nothing ran"),
                );
            }
        }
        if let Err(error) = tx.commit().await {
            return rejected(
                command,
                format!("the command log cannot be written ({error}); nothing ran"),
            );
        }
        let accepted_at = now;
        let done = self
            .execute(command, connection, action, vmid, accepted_at)
            .await;
        self.finish(done).await
    }

    /// Reads the guest and the cluster, asks for the power action, waits for its task.
    async fn execute(
        &self,
        command: &Command,
        connection: &Connection,
        action: PowerAction,
        vmid: u64,
        accepted_at: DateTime<Utc>,
    ) -> Receipt {
        let accepted = |status, reason: String| Receipt {
            accepted_at: Some(accepted_at),
            ..receipt(command, status, Some(reason))
        };
        let client = match self.client(connection).await {
            Ok(client) => client,
            Err(error) => {
                return accepted(
                    ReceiptStatus::Rejected,
                    format!("proxmox_refused: {error}; nothing ran"),
                );
            }
        };
        // Fresh reads first: what would make Proxmox refuse or misbehave is refused here, with
        // its cause, and nothing is asked of the cluster.
        let guest = match self.locate(&client, vmid).await {
            Ok(guest) => guest,
            Err(reason) => {
                return accepted(ReceiptStatus::Rejected, format!("{reason}; nothing ran"));
            }
        };
        match client.cluster_status().await {
            Ok(cluster) => {
                if let Some(cause) = cluster.quorum_cause() {
                    return accepted(
                        ReceiptStatus::Rejected,
                        format!(
                            "no_quorum: {cause}; guests cannot be started or stopped until it is restored; nothing ran"
                        ),
                    );
                }
            }
            Err(error) => {
                let (status, reason) = classify_refusal(&error);
                return accepted(status, format!("{reason}; nothing ran"));
            }
        }
        let (guest_ref, lock, template) = guest;
        if template {
            return accepted(
                ReceiptStatus::Rejected,
                format!(
                    "guest {vmid} is a template, which cannot be powered on or off; nothing ran"
                ),
            );
        }
        if let Some(lock) = lock {
            return accepted(
                ReceiptStatus::Rejected,
                format!(
                    "guest_locked: guest {vmid} is locked ({lock}); wait for the operation \
                     holding the lock to finish, or clear the lock on the Proxmox host; nothing ran"
                ),
            );
        }
        let timeout = u32::try_from(self.shutdown_timeout().as_secs()).unwrap_or(u32::MAX);
        tracing::info!(action_id = %command.action_id, vmid, node = %guest_ref.node, action = action.as_str(), "asking Proxmox for a guest power action");
        let upid = match client.guest_power(&guest_ref, action, Some(timeout)).await {
            Ok(upid) => upid,
            Err(error) => {
                let (status, reason) = classify_refusal(&error);
                return accepted(status, reason);
            }
        };
        if let Err(error) = self.record_task(&command.action_id, upid.as_str()).await {
            // The task runs; a later delivery finds the action accepted without a task id and
            // refuses it, which never runs it twice.
            tracing::warn!(action_id = %command.action_id, %error, "task id not recorded");
        }
        self.wait(command, &client, action, &upid, accepted_at)
            .await
    }

    /// The guest `vmid` as the cluster shows it now: where it runs, its lock, whether it is a
    /// template. A guest that is not there is refused.
    async fn locate(
        &self,
        client: &Client,
        vmid: u64,
    ) -> Result<(GuestRef, Option<String>, bool), String> {
        let resources = client.cluster_resources().await.map_err(|error| {
            let (_, reason) = classify_refusal(&error);
            reason
        })?;
        let entry = resources
            .iter()
            .find(|r| r.is_guest() && r.vmid == Some(vmid))
            .ok_or_else(|| format!("no guest with VMID {vmid} in this cluster"))?;
        let guest = GuestRef::of(entry)
            .ok_or_else(|| format!("guest {vmid} has no node in the cluster's list"))?;
        Ok((guest, entry.lock.clone(), entry.template))
    }

    async fn record_task(&self, action_id: &str, upid: &str) -> Result<(), String> {
        let tx = self.access.tx().await?;
        connector_commands::started(&tx, action_id, upid)
            .await
            .map_err(|e| e.to_string())?;
        tx.commit().await.map_err(|e| e.to_string())
    }

    /// Waits again for the task of an action accepted earlier (by this replica or another).
    async fn resume(
        &self,
        command: &Command,
        connection: &Connection,
        action: PowerAction,
        upid: &str,
        accepted_at: DateTime<Utc>,
    ) -> Receipt {
        let accepted = |status, reason: String| Receipt {
            accepted_at: Some(accepted_at),
            ..receipt(command, status, Some(reason))
        };
        let Some(upid) = Upid::parse(upid) else {
            let done = accepted(
                ReceiptStatus::Failed,
                format!("outcome_unknown: the recorded task id {upid:?} cannot be read"),
            );
            return self.finish(done).await;
        };
        let done = match self.client(connection).await {
            Ok(client) => {
                self.wait(command, &client, action, &upid, accepted_at)
                    .await
            }
            Err(error) => accepted(
                ReceiptStatus::Accepted,
                format!("the task cannot be read now ({error}); ask again"),
            ),
        };
        if done.status == ReceiptStatus::Accepted {
            return done;
        }
        self.finish(done).await
    }

    /// Polls the task until it ends or the wait (the shutdown timeout plus a margin) runs out.
    async fn wait(
        &self,
        command: &Command,
        client: &Client,
        action: PowerAction,
        upid: &Upid,
        accepted_at: DateTime<Utc>,
    ) -> Receipt {
        let bound = self.shutdown_timeout() + TASK_WAIT_MARGIN;
        let deadline = tokio::time::Instant::now() + bound;
        let mut pause = TASK_POLL;
        let mut last_error = None;
        let end = loop {
            match client.task_status(upid).await {
                Ok(task) if !task.is_running() => {
                    let exit = task.exit_status().unwrap_or("stopped").to_owned();
                    break if task.ended_well() == Some(true) {
                        TaskEnd {
                            status: ReceiptStatus::Completed,
                            reason: None,
                            exit_status: 0,
                        }
                    } else {
                        TaskEnd {
                            status: ReceiptStatus::Failed,
                            reason: Some(classify_task_error(
                                action,
                                &exit,
                                self.shutdown_timeout(),
                            )),
                            exit_status: 1,
                        }
                    };
                }
                Ok(_) => {}
                Err(error) => last_error = Some(error.to_string()),
            }
            let delay = pause.next_delay();
            if tokio::time::Instant::now() + delay >= deadline {
                break TaskEnd {
                    status: ReceiptStatus::Failed,
                    reason: Some(format!(
                        "task_timeout: task {} was still running after {} s{}; it may still \
                         finish (the verifier reads the guest's state)",
                        upid.as_str(),
                        bound.as_secs(),
                        last_error
                            .map(|e| format!(" (last read: {e})"))
                            .unwrap_or_default()
                    )),
                    exit_status: 1,
                };
            }
            tokio::time::sleep(delay).await;
        };
        let output = format!(
            "task {} ({}): {}",
            upid.as_str(),
            action.as_str(),
            end.reason.as_deref().unwrap_or("ended OK")
        );
        let (output, output_truncated) = bounded_text(&output, MAX_OUTPUT_BYTES);
        Receipt {
            output,
            output_truncated,
            exit_status: Some(end.exit_status),
            accepted_at: Some(accepted_at),
            ..receipt(command, end.status, end.reason)
        }
    }

    /// Records `done` as the action's receipt (a receipt recorded first wins) and returns it.
    async fn finish(&self, done: Receipt) -> Receipt {
        match self.access.tx().await {
            Ok(tx) => self.finish_in(tx, done).await,
            Err(error) => {
                // The `accepted` row keeps the action from running again.
                tracing::error!(action_id = %done.action_id, %error, "receipt not recorded");
                done
            }
        }
    }

    async fn finish_in(&self, tx: pulse_store::TenantTx, done: Receipt) -> Receipt {
        let recorded = match connector_commands::finish(&tx, &done).await {
            Ok(recorded) => recorded,
            Err(error) => {
                tracing::error!(action_id = %done.action_id, %error, "receipt not recorded");
                return done;
            }
        };
        if let Err(error) = tx.commit().await {
            tracing::error!(action_id = %done.action_id, %error, "receipt not recorded");
            return done;
        }
        tracing::info!(action_id = %done.action_id, status = ?done.status, reason = ?done.reason, "guest command finished");
        crate::metrics::ConnectorMetrics::shared().command(&recorded);
        Receipt {
            request_id: done.request_id,
            ..recorded
        }
    }

    /// A fresh read of one guest from the node that runs it.
    async fn observe(&self, target: &ResourceTarget) -> Result<Observation, String> {
        let ResourceTarget::Guest { vmid: raw } = target else {
            return Err("a Proxmox VE connector observes only guests".to_owned());
        };
        let vmid = vmid(raw).ok_or_else(|| format!("{raw:?} is not a VMID"))?;
        let connection = self
            .connection()
            .await?
            .ok_or_else(|| "the connection was removed".to_owned())?;
        let client = self.client(&connection).await?;
        let (guest, _, _) = self.locate(&client, vmid).await?;
        let current = client
            .guest_current(&guest)
            .await
            .map_err(|e| e.to_string())?;
        let observed_at = Utc::now();
        let resource = inventory::fresh_guest(&guest, &current, observed_at)
            .ok_or_else(|| format!("guest {vmid} could not be read as a resource"))?;
        Ok(Observation {
            request_id: String::new(),
            observed_at,
            resource,
        })
    }
}

impl pulse_agent_session::Answer for GuestCommands {
    async fn answer(&self, request: RelayMessage) -> Option<AgentMessage> {
        Some(match request {
            RelayMessage::Command(command) => AgentMessage::Receipt(self.handle(&command).await),
            RelayMessage::Observe(observe) => match self.observe(&observe.target).await {
                Ok(observation) => AgentMessage::Observation(Observation {
                    request_id: observe.request_id,
                    ..observation
                }),
                Err(reason) => refused(&observe.request_id, reason),
            },
            RelayMessage::Read(read) => refused(
                &read.request_id,
                "a Proxmox VE connector answers no live reads; its guests' state is in the \
                 inventory",
            ),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmids_are_numbers_from_100_up() {
        assert_eq!(vmid("100"), Some(100));
        assert_eq!(vmid("999999999"), Some(999_999_999));
        for bad in ["", "99", "1000000000", "10a", "-100", " 100", "1e3"] {
            assert_eq!(vmid(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn task_errors_are_classified_with_what_to_do() {
        let t = Duration::from_secs(120);
        let locked = classify_task_error(PowerAction::Start, "VM is locked (backup)", t);
        assert!(
            locked.starts_with("guest_locked: VM is locked (backup)"),
            "{locked}"
        );
        let slow = classify_task_error(
            PowerAction::Shutdown,
            "VM quit/powerdown failed - got timeout",
            t,
        );
        assert!(slow.starts_with("shutdown_timeout:"), "{slow}");
        assert!(
            slow.contains("within 120 s") && slow.contains("guest.stop"),
            "{slow}"
        );
        let other = classify_task_error(PowerAction::Start, "start failed: QEMU exited", t);
        assert_eq!(
            other,
            "task_failed: the Proxmox task ended in error: start failed: QEMU exited"
        );
        // A start that times out is a task failure, not a shutdown timeout.
        assert!(
            classify_task_error(PowerAction::Start, "got timeout", t).starts_with("task_failed:")
        );
    }

    #[test]
    fn refusals_say_whether_anything_may_have_run() {
        let (status, reason) = classify_refusal(&pulse_proxmox::Error::NoQuorum {
            message: "cluster not ready - no quorum?".into(),
        });
        assert_eq!(status, ReceiptStatus::Rejected);
        assert!(reason.starts_with("no_quorum:"), "{reason}");
        let (status, reason) = classify_refusal(&pulse_proxmox::Error::Api {
            path: "nodes/pve1/qemu/100/status/shutdown".into(),
            status: 500,
            message: "VM is locked (backup)".into(),
        });
        assert_eq!(status, ReceiptStatus::Rejected);
        assert!(reason.starts_with("guest_locked:"), "{reason}");
        let (status, reason) = classify_refusal(&pulse_proxmox::Error::Forbidden {
            path: "nodes/pve1/qemu/100/status/start".into(),
            message: "Permission check failed (/vms/100, VM.PowerMgmt)".into(),
        });
        assert_eq!(status, ReceiptStatus::Rejected);
        assert!(reason.contains("VM.PowerMgmt"), "{reason}");
        let (status, reason) = classify_refusal(&pulse_proxmox::Error::Unreachable {
            url: "https://pve:8006/".into(),
            cause: "no answer in time".into(),
        });
        assert_eq!(status, ReceiptStatus::Failed);
        assert!(reason.starts_with("outcome_unknown:"), "{reason}");
    }
}
