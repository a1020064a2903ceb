//! `pulse.<t>.actions.capabilities.request`: the typed action catalogue of one resource, for
//! Patrol investigation's `patrol_action_capabilities` and for proposal validation (both read
//! this one catalogue).
//!
//! Read only: it plans nothing, approves nothing and writes nothing. The reference is resolved
//! to exactly one canonical resource (a canonical id, or a source id, name or alias that names
//! exactly one resource); an unknown or ambiguous reference fails closed. The reply always names
//! the canonical id.
//!
//! What a resource advertises follows from its type: a supervised service the
//! `service.*` capabilities, an app container the `docker.container.*` ones, a Proxmox VE guest
//! (`vm`, `system-container`) the `guest.*` ones while its connection has guest actions on
//! ([`offered`]), anything else none. The approval floor is [`ApprovalFloor::minimum_for`] (the floor the planner applies);
//! auto-authorization is possible only at floor `none`, and even then the broker decides at plan
//! time under the tenant's policy.

use pulse_bus::actions_api::{
    ActionCapabilitiesReply, ActionCapabilitiesRequest, ActionCapabilityEntry,
};
use pulse_bus::{Bus, BusError};

use crate::error::BrokerError;
use pulse_domain::TenantId;
use pulse_domain::action::ApprovalFloor;
use pulse_domain::agent_protocol::Capability;
use pulse_domain::resource::{Resource, ResourceType};
use pulse_runtime::ServiceContext;
use pulse_store::connections;
use pulse_store::resources::{self, ResolveError};
use pulse_store::{Store, TenantTx};
use serde_json::{Value, json};

/// The capabilities a resource of this type can be acted on with.
pub fn capabilities_of(resource_type: ResourceType) -> &'static [Capability] {
    match resource_type {
        ResourceType::Service => &[
            Capability::ServiceRestart,
            Capability::ServiceStart,
            Capability::ServiceStop,
        ],
        ResourceType::AppContainer => &[
            Capability::ContainerRestart,
            Capability::ContainerStart,
            Capability::ContainerStop,
        ],
        ResourceType::Vm | ResourceType::SystemContainer => &[
            Capability::GuestStart,
            Capability::GuestShutdown,
            Capability::GuestReboot,
            Capability::GuestStop,
        ],
        _ => &[],
    }
}

/// What `resource` offers now: its type's capabilities, except a guest's while the connection
/// it is read through has guest actions off (or is gone), and, if not, why.
pub async fn offered(
    tx: &TenantTx,
    resource: &Resource,
) -> Result<(&'static [Capability], Option<String>), pulse_store::StoreError> {
    let all = capabilities_of(resource.resource_type);
    if !all.iter().any(|c| c.is_guest_power()) {
        return Ok((all, None));
    }
    let why = match connections::by_agent_id(tx, &resource.agent_id).await? {
        Some(connection) if connection.guest_actions => return Ok((all, None)),
        Some(connection) => format!(
            "guest actions are off for connection {:?}; an admin turns them on with PUT \
             /api/connections/{}/guest-actions (the token needs VM.PowerMgmt)",
            connection.name, connection.id
        ),
        None => format!(
            "no Proxmox VE connection reads this guest (agent {:?}), so nothing can act on it",
            resource.agent_id
        ),
    };
    Ok((&[], Some(why)))
}

fn description(capability: Capability) -> &'static str {
    match capability {
        Capability::ServiceRestart => "Restart the supervised service.",
        Capability::ServiceStart => "Start the supervised service.",
        Capability::ServiceStop => "Stop the supervised service (needs a human approval).",
        Capability::ContainerRestart => "Restart the container.",
        Capability::ContainerStart => "Start the container.",
        Capability::ContainerStop => "Stop the container (needs a human approval).",
        Capability::GuestStart => "Start the guest (needs a human approval).",
        Capability::GuestShutdown => {
            "Shut the guest down through its OS; fails, never forces, past the connector's \
             shutdown timeout (needs a human approval)."
        }
        Capability::GuestReboot => "Reboot the guest through its OS (needs a human approval).",
        Capability::GuestStop => {
            "Power the guest off at once, without its OS shutting down: high risk (needs a \
             human approval)."
        }
    }
}

/// The typed catalogue of one resource: each capability with its closed params schema (the
/// one `target` the command acts on, which must be this resource's own), its approval floor
/// and whether policy may authorize it without a human.
pub fn catalogue(resource: &Resource, offered: &[Capability]) -> Vec<ActionCapabilityEntry> {
    offered
        .iter()
        .map(|&capability| {
            let floor = ApprovalFloor::minimum_for(capability);
            ActionCapabilityEntry {
                name: capability.as_str().to_owned(),
                description: description(capability).to_owned(),
                params_schema: params_schema(resource),
                sensitive_params: Vec::new(),
                approval_floor: floor,
                auto_approval_eligible: floor == ApprovalFloor::None,
                risk_level: capability.risk(),
            }
        })
        .collect()
}

fn params_schema(resource: &Resource) -> Value {
    json!({
        "type": "object",
        "properties": {
            "target": {
                "type": "string",
                "description": "the service, container or guest (VMID) the command acts on",
                "enum": [resource.source_id],
            }
        },
        "required": ["target"],
        "additionalProperties": false,
    })
}

/// Answers one catalogue request inside `tx`.
pub async fn answer(
    tx: &TenantTx,
    request: &ActionCapabilitiesRequest,
) -> Result<ActionCapabilitiesReply, BrokerError> {
    let reference = request.resource_id.trim();
    if reference.is_empty() || reference.chars().count() > pulse_domain::action::plan::MAX_ID_CHARS
    {
        return Err(BrokerError::InvalidRequest(
            "resource_id must name one resource".to_owned(),
        ));
    }
    let resource = match resources::resolve(tx, reference).await {
        Ok(resource) => resource,
        Err(ResolveError::NotFound { .. }) => {
            return Err(BrokerError::ResourceNotFound(
                "no resource in this tenant has that id, name or provider id".to_owned(),
            ));
        }
        Err(ResolveError::Ambiguous { candidates, .. }) => {
            let ids: Vec<String> = candidates.iter().map(|c| c.as_str().to_owned()).collect();
            return Err(BrokerError::AmbiguousResource(format!(
                "the reference names several resources; use one canonical id: {}",
                ids.join(", ")
            )));
        }
        Err(ResolveError::Store(error)) => {
            tracing::warn!(%error, "resource store failed");
            return Err(BrokerError::StoreUnavailable { what: "resource" });
        }
    };
    let (offered, _) = offered(tx, &resource).await.map_err(|error| {
        tracing::warn!(%error, "connection store failed");
        BrokerError::StoreUnavailable { what: "connection" }
    })?;
    Ok(ActionCapabilitiesReply {
        resource_id: resource.id.as_str().to_owned(),
        resource_type: resource.resource_type,
        resource_name: resource.name.clone(),
        capabilities: catalogue(&resource, offered),
    })
}

async fn handle(
    store: &Store,
    tenant: &TenantId,
    request: ActionCapabilitiesRequest,
) -> Result<ActionCapabilitiesReply, BrokerError> {
    let tx = store.tenant_tx(tenant).await.map_err(|error| {
        tracing::warn!(%error, "resource store failed");
        BrokerError::StoreUnavailable { what: "resource" }
    })?;
    // Read only: the transaction is dropped (rolled back) after the reads.
    answer(&tx, &request).await
}

/// Serves the catalogue subject in the broker's queue group; the service stops the responder
/// at shutdown.
pub async fn serve(ctx: &ServiceContext) -> Result<pulse_bus::Responder, BusError> {
    serve_on(&ctx.bus, ctx.store.clone()).await
}

/// Serves the catalogue subject on `bus` (tests stop the returned responder themselves).
pub async fn serve_on(bus: &Bus, store: Store) -> Result<pulse_bus::Responder, BusError> {
    bus.serve_endpoint::<ActionCapabilitiesRequest, BrokerError, _, _>(move |ctx, request| {
        let store = store.clone();
        async move { handle(&store, &ctx.tenant, request).await }
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use chrono::Utc;
    use pulse_domain::action::RiskLevel;
    use pulse_domain::resource::{Health, ResourceId, ResourceStatus};

    use super::*;

    fn resource(resource_type: ResourceType, id: ResourceId, source: &str) -> Resource {
        Resource {
            id,
            resource_type,
            source_id: source.to_owned(),
            name: source.to_owned(),
            aliases: Vec::new(),
            parent: None,
            agent_id: "h1".to_owned(),
            status: ResourceStatus::Running,
            health: Health::Unhealthy,
            restart_count: Some(0),
            labels: BTreeMap::new(),
            details: Value::Null,
            observed_at: Utc::now(),
            received_at: Utc::now(),
        }
    }

    #[test]
    fn guests_advertise_power_actions_all_needing_a_human_with_stop_the_riskiest() {
        let vm = resource(
            ResourceType::Vm,
            ResourceId::of(ResourceType::Vm, "pve.lab", "100"),
            "100",
        );
        let entries = catalogue(&vm, capabilities_of(vm.resource_type));
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "guest.start",
                "guest.shutdown",
                "guest.reboot",
                "guest.stop"
            ]
        );
        for entry in &entries {
            assert_eq!(entry.approval_floor, ApprovalFloor::Admin, "{}", entry.name);
            assert!(!entry.auto_approval_eligible, "{}", entry.name);
            assert_eq!(
                entry.params_schema["properties"]["target"]["enum"],
                json!(["100"])
            );
        }
        let stop = entries.iter().find(|e| e.name == "guest.stop").unwrap();
        assert_eq!(stop.risk_level, RiskLevel::High);
        assert!(
            entries
                .iter()
                .filter(|e| e.name != "guest.stop")
                .all(|e| e.risk_level < stop.risk_level)
        );
        let ct = ResourceType::SystemContainer;
        assert_eq!(capabilities_of(ct), capabilities_of(ResourceType::Vm));
        assert!(capabilities_of(ResourceType::Node).is_empty());
    }

    #[test]
    fn services_and_containers_advertise_their_own_capabilities_with_the_planner_floor() {
        let service = resource(
            ResourceType::Service,
            ResourceId::service("h1", "web"),
            "web",
        );
        let entries = catalogue(&service, capabilities_of(service.resource_type));
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["service.restart", "service.start", "service.stop"]);
        let stop = &entries[2];
        assert_eq!(stop.approval_floor, ApprovalFloor::Admin);
        assert!(!stop.auto_approval_eligible);
        assert!(entries[0].auto_approval_eligible);
        assert_eq!(entries[0].risk_level, RiskLevel::Low);
        assert_eq!(
            entries[0].params_schema["properties"]["target"]["enum"],
            json!(["web"])
        );

        let container = resource(
            ResourceType::AppContainer,
            ResourceId::app_container("h1", "abc123"),
            "abc123",
        );
        assert!(
            catalogue(&container, capabilities_of(container.resource_type))
                .iter()
                .all(|e| e.name.starts_with("docker.container."))
        );
        let host = resource(ResourceType::Host, ResourceId::host("h1"), "h1");
        assert!(catalogue(&host, capabilities_of(host.resource_type)).is_empty());
    }
}
