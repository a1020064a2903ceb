//! Connected agent sessions keyed by (tenant, agent id), and forwarding a request to one of
//! them and waiting for its answer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::RelayError;
use pulse_domain::TenantId;
use pulse_domain::agent_protocol::{AgentMessage, RelayMessage};
use tokio::sync::{mpsc, oneshot};
// The clock tokio's timers read, so a test on paused time moves the budget's clock too.
use tokio::time::Instant;

use crate::limits::ReportBudget;

/// Requests queued for one session's socket.
const OUTBOUND_QUEUE: usize = 32;

/// The answer to a forwarded request, or why there is none.
pub type Answer = Result<AgentMessage, RelayError>;

/// One request on its way to the agent, with where its answer goes.
pub struct Outbound {
    pub message: RelayMessage,
    pub reply: oneshot::Sender<Answer>,
}

/// What the registry holds for one live session.
pub struct SessionLink {
    pub generation: u64,
    pub agent_id: String,
    /// The session's token carries `agent:exec`.
    pub can_exec: bool,
    outbound: mpsc::Sender<Outbound>,
    budget: Mutex<ReportBudget>,
}

#[derive(Default)]
pub struct Registry {
    sessions: Mutex<HashMap<(TenantId, String), Arc<SessionLink>>>,
    next: AtomicU64,
}

impl Registry {
    /// Registers a session (replacing an older one of the same agent); the receiver is the
    /// session's queue of requests.
    pub fn register(
        &self,
        tenant: &TenantId,
        agent_id: &str,
        can_exec: bool,
        requests_per_sec: u32,
    ) -> (Arc<SessionLink>, mpsc::Receiver<Outbound>) {
        let (tx, rx) = mpsc::channel(OUTBOUND_QUEUE);
        let link = Arc::new(SessionLink {
            generation: self.next.fetch_add(1, Ordering::Relaxed) + 1,
            agent_id: agent_id.to_owned(),
            can_exec,
            outbound: tx,
            budget: Mutex::new(ReportBudget::new(
                requests_per_sec,
                Instant::now().into_std(),
            )),
        });
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((tenant.clone(), agent_id.to_owned()), link.clone());
        (link, rx)
    }

    /// Removes the session unless a newer one of the same agent replaced it.
    pub fn unregister(&self, tenant: &TenantId, agent_id: &str, generation: u64) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let key = (tenant.clone(), agent_id.to_owned());
        if sessions
            .get(&key)
            .is_some_and(|l| l.generation == generation)
        {
            sessions.remove(&key);
        }
    }

    pub fn get(&self, tenant: &TenantId, agent_id: &str) -> Option<Arc<SessionLink>> {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(tenant.clone(), agent_id.to_owned()))
            .cloned()
    }

    /// A request id unique within this relay process.
    pub fn request_id(&self) -> String {
        format!("rq-{}", self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

impl SessionLink {
    /// Sends `message` to the agent and waits up to `timeout` for the matching answer.
    pub async fn forward(&self, message: RelayMessage, timeout: Duration) -> Answer {
        let allowed = self
            .budget
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .try_take(Instant::now().into_std());
        if !allowed {
            return Err(RelayError::RateLimited(format!(
                "too many requests for agent {}; slow down",
                self.agent_id
            )));
        }
        let (reply, answer) = oneshot::channel();
        match self.outbound.try_send(Outbound { message, reply }) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                return Err(RelayError::RateLimited(format!(
                    "agent {} has too many requests waiting",
                    self.agent_id
                )));
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                return Err(not_connected(&self.agent_id));
            }
        }
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(RelayError::NotConnected(format!(
                "agent {} disconnected before answering; retry once it is back",
                self.agent_id
            ))),
            Err(_) => Err(RelayError::Timeout(format!(
                "agent {} did not answer within {} ms",
                self.agent_id,
                timeout.as_millis()
            ))),
        }
    }
}

pub fn not_connected(agent_id: &str) -> RelayError {
    RelayError::NotConnected(format!("agent {agent_id} is not connected to the relay"))
}

#[cfg(test)]
mod tests {
    use pulse_domain::agent_protocol::{Observe, Refused, ResourceTarget};

    use super::*;

    fn observe(id: &str) -> RelayMessage {
        RelayMessage::Observe(Observe {
            request_id: id.to_owned(),
            target: ResourceTarget::Host,
        })
    }

    // Paused time: the timeouts and the rate budget run on the test's clock, not the wall's.
    #[tokio::test(start_paused = true)]
    async fn forwards_times_out_and_limits() {
        let registry = Registry::default();
        let tenant = TenantId::default_tenant();
        let (link, mut rx) = registry.register(&tenant, "m1", false, 1);
        // An agent that answers the first request only.
        tokio::spawn(async move {
            let first: Outbound = rx.recv().await.unwrap();
            let id = first.message.request_id().unwrap().to_owned();
            let _ = first.reply.send(Ok(AgentMessage::Refused(Refused {
                request_id: id,
                reason: "no".into(),
                code: None,
            })));
            // Keep the rest unanswered until the test ends.
            let mut held = Vec::new();
            while let Some(next) = rx.recv().await {
                held.push(next);
            }
        });
        let answer = link.forward(observe("a"), Duration::from_secs(5)).await;
        assert!(matches!(answer, Ok(AgentMessage::Refused(_))));
        let timed_out = link
            .forward(observe("b"), Duration::from_millis(50))
            .await
            .unwrap_err();
        assert_eq!(timed_out.code(), pulse_bus::ErrorCode::AgentTimeout);
        // Budget of 1/s with bursts of 4: "a", "b" and two more are taken; the 70 ms the
        // timeouts waited refill less than one, so the last two are limited.
        let mut limited = 0;
        for n in 0..4 {
            if let Err(e) = link
                .forward(observe(&format!("c{n}")), Duration::from_millis(10))
                .await
                && e.code() == pulse_bus::ErrorCode::RateLimited
            {
                limited += 1;
            }
        }
        assert_eq!(limited, 2);
    }

    #[tokio::test]
    async fn newer_sessions_replace_older_ones() {
        let registry = Registry::default();
        let tenant = TenantId::default_tenant();
        let (old, _rx_old) = registry.register(&tenant, "m1", true, 5);
        let (new, rx_new) = registry.register(&tenant, "m1", true, 5);
        registry.unregister(&tenant, "m1", old.generation);
        assert_eq!(
            registry.get(&tenant, "m1").map(|l| l.generation),
            Some(new.generation)
        );
        drop(rx_new);
        let closed = new
            .forward(observe("x"), Duration::from_secs(1))
            .await
            .unwrap_err();
        assert_eq!(closed.code(), pulse_bus::ErrorCode::AgentNotConnected);
        registry.unregister(&tenant, "m1", new.generation);
        assert!(registry.get(&tenant, "m1").is_none());
    }
}
