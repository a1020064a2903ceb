//! The one way the verifier gets evidence: the stored inventory names the resource and the agent
//! holding it, and that agent re-collects it now through agent-relay (`relay.observe`). Both the
//! resolution check and the postcondition check go through [`FreshObserver`].

use std::time::Duration;

use pulse_bus::relay_api::RelayObserveRequest;
use pulse_bus::{Bus, ClientError, ErrorCode, RelayClient};

use crate::error::VerifierError;
use pulse_domain::TenantId;
use pulse_domain::agent_protocol::ResourceTarget;
use pulse_domain::resource::{Resource, ResourceId, ResourceType};
use pulse_store::{Store, resources};

use crate::resolution::FreshObservation;

/// Reads the inventory and asks agents for fresh observations.
#[derive(Clone)]
pub struct FreshObserver {
    bus: Bus,
    store: Store,
    timeout: Duration,
}

impl FreshObserver {
    /// `timeout` bounds each wait for the agent's answer.
    pub fn new(bus: Bus, store: Store, timeout: Duration) -> Self {
        Self {
            bus,
            store,
            timeout,
        }
    }

    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// The stored resource `resource_id` of `tenant`; `None` when the inventory has no such
    /// resource. Errors only when the store cannot be read.
    pub async fn lookup(
        &self,
        tenant: &TenantId,
        resource_id: &str,
    ) -> Result<Option<Resource>, VerifierError> {
        let unavailable = |e: pulse_store::StoreError| {
            tracing::warn!(error = %e, "inventory read failed");
            VerifierError::InventoryUnavailable
        };
        let tx = self.store.tenant_tx(tenant).await.map_err(unavailable)?;
        let resource = resources::get(&tx, resource_id)
            .await
            .map_err(unavailable)?;
        tx.rollback().await.map_err(unavailable)?;
        Ok(resource)
    }

    /// Asks the agent holding `resource` to re-collect it now. `Err` carries a verifier-built
    /// reason why no fresh observation of that resource could be had (no answer in time, a
    /// refusal, an answer about a different resource).
    pub async fn observe(
        &self,
        tenant: &TenantId,
        resource: &Resource,
    ) -> Result<FreshObservation, String> {
        let target = target_of(resource).ok_or_else(|| {
            format!(
                "a {} resource cannot be observed afresh yet (its connector does not answer \
                 observations)",
                resource.resource_type
            )
        })?;
        let request = RelayObserveRequest {
            agent_id: resource.agent_id.clone(),
            target,
        };
        let observation = RelayClient::new(self.bus.clone())
            .observe(tenant, &request, self.timeout)
            .await
            .map_err(|error| no_answer(&error, self.timeout))?
            .0;
        let fresh = FreshObservation {
            resource_id: resource.id.clone(),
            resource: observation.resource,
            observed_at: observation.observed_at,
        };
        let answered_for = ResourceId::of(
            fresh.resource.resource_type,
            &resource.agent_id,
            &fresh.resource.source_id,
        );
        if answered_for != resource.id {
            return Err(
                "the agent answered with a different resource than the one asked for".to_owned(),
            );
        }
        Ok(fresh)
    }
}

/// What to ask the agent to re-collect for a stored resource; `None` for what a platform
/// connector reports, which no agent re-collects: the verification fails closed.
fn target_of(resource: &Resource) -> Option<ResourceTarget> {
    Some(match resource.resource_type {
        ResourceType::Host => ResourceTarget::Host,
        ResourceType::Service => ResourceTarget::Service {
            name: resource.source_id.clone(),
        },
        ResourceType::AppContainer => ResourceTarget::Container {
            id: resource.source_id.clone(),
        },
        ResourceType::Storage => ResourceTarget::Filesystem {
            mount_point: resource.source_id.clone(),
        },
        // The connector of the guest's cluster reads it afresh from the Proxmox API (its own
        // `status/current`), never from the task it ran.
        ResourceType::Vm | ResourceType::SystemContainer => ResourceTarget::Guest {
            vmid: resource.source_id.clone(),
        },
        ResourceType::Node | ResourceType::PhysicalDisk => return None,
    })
}

/// The reason for a fresh observation that did not arrive. Relay error messages may quote the
/// agent, so only the error code is used.
fn no_answer(error: &ClientError, timeout: Duration) -> String {
    match error {
        ClientError::Timeout { .. } => format!(
            "the agent did not answer within {} s",
            timeout.as_secs_f64()
        ),
        ClientError::NoResponder { .. } => "no agent-relay is serving observations".to_owned(),
        ClientError::Remote {
            code: ErrorCode::AgentNotConnected,
            ..
        } => "the agent did not answer: it is not connected".to_owned(),
        ClientError::Remote {
            code: ErrorCode::AgentTimeout,
            ..
        } => "the agent did not answer in time".to_owned(),
        ClientError::Remote {
            code: ErrorCode::AgentRefused,
            ..
        } => "the agent refused to observe the resource".to_owned(),
        ClientError::Remote { code, .. } => {
            format!("the agent-relay could not get an observation ({code})")
        }
        _ => "the message bus failed before the agent answered".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_reason_names_the_configured_bound() {
        let timeout = ClientError::Timeout {
            service: "agent-relay",
            unavailable: ErrorCode::ActionExecutorUnavailable,
            timeout: Duration::from_secs(5),
        };
        assert_eq!(
            no_answer(&timeout, Duration::from_secs(5)),
            "the agent did not answer within 5 s"
        );
        assert_eq!(
            no_answer(&timeout, Duration::from_millis(1500)),
            "the agent did not answer within 1.5 s"
        );
    }
}
