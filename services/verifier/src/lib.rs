//! pulse-verifier: independent postconditions and resolution checks (Steps 5-6).
//!
//! Serves `pulse.<tenant>.verify.resolution` ([`ResolutionCheckRequest`]) in the `verifier`
//! queue group: it looks the finding's resource up in the tenant's inventory, asks the agent
//! holding it for a fresh observation through agent-relay (`relay.observe`, bounded by
//! [`OBSERVE_TIMEOUT`]), and judges the finding's key on that observation with the pure checks
//! of [`resolution`]. Stored state and the model's word are never the evidence. Anything short
//! of a fresh observation that shows the fault gone (no answer, a refusal, a resource missing
//! from the inventory) is `inconclusive`, so a `resolved` verdict fails closed.

pub mod resolution;

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use pulse_bus::events::{
    ResolutionCheckReply, ResolutionCheckRequest, ResolutionEvidence, VERIFIER_QUEUE_GROUP,
    VERIFY_RESOLUTION,
};
use pulse_bus::relay_api::RelayObserveRequest;
use pulse_bus::{Bus, BusError, ErrorReply, Responder};
use pulse_capabilities::error_codes::ErrorCode;
use pulse_domain::TenantId;
use pulse_domain::agent_protocol::ResourceTarget;
use pulse_domain::finding::VerifierKey;
use pulse_domain::resource::{Resource, ResourceId, ResourceType};
use pulse_runtime::{ServiceContext, ServiceSpec};
use pulse_store::{Store, resources};

use crate::resolution::{FreshObservation, ResolutionCheck};

pub const SPEC: ServiceSpec = ServiceSpec {
    name: "verifier",
    health_port: Some(7664),
};

/// How long the verifier waits for the agent's fresh observation.
pub const OBSERVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs until shutdown is requested.
pub async fn run(ctx: ServiceContext) -> anyhow::Result<()> {
    let responder = ResolutionVerifier::new(ctx.bus.clone(), ctx.store.clone())
        .serve()
        .await?;
    ctx.shutdown.cancelled().await;
    responder.stop().await;
    Ok(())
}

/// Answers resolution checks.
#[derive(Clone)]
pub struct ResolutionVerifier {
    bus: Bus,
    store: Store,
    observe_timeout: Duration,
}

impl ResolutionVerifier {
    pub fn new(bus: Bus, store: Store) -> Self {
        Self {
            bus,
            store,
            observe_timeout: OBSERVE_TIMEOUT,
        }
    }

    /// Serves `pulse.*.verify.resolution` in the verifier queue group.
    pub async fn serve(self) -> Result<Responder, BusError> {
        let subject = self.bus.subjects().any_tenant(VERIFY_RESOLUTION);
        let this = Arc::new(self);
        this.bus
            .clone()
            .serve::<ResolutionCheckRequest, _, _>(
                &subject,
                Some(VERIFIER_QUEUE_GROUP),
                move |ctx, request| {
                    let this = this.clone();
                    async move { this.verify(&ctx.tenant, request).await }
                },
            )
            .await
    }

    /// One resolution check for `tenant`. Errors are for bad requests and an unreachable
    /// store; every other failure to observe is an `inconclusive` reply.
    pub async fn verify(
        &self,
        tenant: &TenantId,
        request: ResolutionCheckRequest,
    ) -> Result<ResolutionCheckReply, ErrorReply> {
        let Some(key) = VerifierKey::for_key(&request.key) else {
            return Err(ErrorReply::new(
                ErrorCode::InvalidRequest.code(),
                format!(
                    "key {} has no deterministic verifier; such findings resolve on the model's evidence",
                    request.key
                ),
            ));
        };
        if request.resource_id.trim().is_empty() {
            return Err(ErrorReply::new(
                ErrorCode::InvalidRequest.code(),
                "resource_id must not be empty",
            ));
        }
        let (check, evidence) = match self.lookup(tenant, &request.resource_id).await? {
            None => (
                ResolutionCheck::inconclusive(
                    "the resource is not in the inventory, so no fresh observation can be had",
                ),
                None,
            ),
            Some(resource) => self.observe_and_check(tenant, key, &resource).await,
        };
        tracing::info!(
            tenant = %tenant,
            finding_id = %request.finding_id,
            key = %key,
            resource_id = %request.resource_id,
            outcome = check.outcome.as_str(),
            "resolution check"
        );
        Ok(ResolutionCheckReply {
            finding_id: request.finding_id,
            key: request.key,
            resource_id: request.resource_id,
            outcome: check.outcome,
            reason: check.reason,
            evidence,
            checked_at: Utc::now(),
        })
    }

    async fn lookup(
        &self,
        tenant: &TenantId,
        resource_id: &str,
    ) -> Result<Option<Resource>, ErrorReply> {
        let unavailable = |e: pulse_store::StoreError| {
            tracing::warn!(error = %e, "inventory read failed");
            ErrorReply::new(
                ErrorCode::ServiceUnavailable.code(),
                "the inventory could not be read",
            )
        };
        let tx = self.store.tenant_tx(tenant).await.map_err(unavailable)?;
        let resource = resources::get(&tx, resource_id)
            .await
            .map_err(unavailable)?;
        tx.rollback().await.map_err(unavailable)?;
        Ok(resource)
    }

    async fn observe_and_check(
        &self,
        tenant: &TenantId,
        key: VerifierKey,
        resource: &Resource,
    ) -> (ResolutionCheck, Option<ResolutionEvidence>) {
        if let Some(reason) = resolution::unobservable(key) {
            return (ResolutionCheck::inconclusive(reason), None);
        }
        let target = target_of(resource);
        let request = RelayObserveRequest {
            agent_id: resource.agent_id.clone(),
            target,
        };
        let subject = self.bus.subjects().relay(tenant, "observe");
        let observation = match self
            .bus
            .request(tenant, &subject, &request, self.observe_timeout)
            .await
        {
            Ok(reply) => reply.0,
            Err(error) => return (ResolutionCheck::inconclusive(no_answer(&error)), None),
        };
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
            return (
                ResolutionCheck::inconclusive(
                    "the agent answered with a different resource than the one asked for",
                ),
                None,
            );
        }
        let check = resolution::check(key, &fresh);
        let evidence = ResolutionEvidence {
            observed_at: fresh.observed_at,
            resource_type: fresh.resource.resource_type,
            status: fresh.resource.status,
            health: fresh.resource.health,
            restart_count: fresh.resource.restart_count,
            readings: check.readings.clone(),
        };
        (check, Some(evidence))
    }
}

/// What to ask the agent to re-collect for a stored resource.
fn target_of(resource: &Resource) -> ResourceTarget {
    match resource.resource_type {
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
    }
}

/// The inconclusive reason for a fresh observation that did not arrive. Relay error messages
/// may quote the agent, so only the error code is used.
fn no_answer(error: &BusError) -> String {
    match error {
        BusError::Timeout { .. } => format!(
            "the agent did not answer within {} s",
            OBSERVE_TIMEOUT.as_secs()
        ),
        BusError::NoResponders { .. } => "no agent-relay is serving observations".to_owned(),
        BusError::Remote { code, .. } if code == ErrorCode::AgentNotConnected.code() => {
            "the agent did not answer: it is not connected".to_owned()
        }
        BusError::Remote { code, .. } if code == ErrorCode::AgentTimeout.code() => {
            "the agent did not answer in time".to_owned()
        }
        BusError::Remote { code, .. } if code == ErrorCode::AgentRefused.code() => {
            "the agent refused to observe the resource".to_owned()
        }
        BusError::Remote { code, .. } => {
            format!("the agent-relay could not get an observation ({code})")
        }
        _ => "the message bus failed before the agent answered".to_owned(),
    }
}
