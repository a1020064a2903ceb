//! Inventory written straight to the store, as the agent-relay writes an agent's session and
//! reports, for tests that need resources without a running agent.

use std::collections::BTreeMap;

use chrono::Utc;
use pulse_domain::TenantId;
use pulse_domain::resource::{Health, ObservedResource, ResourceId, ResourceStatus, ResourceType};
use pulse_store::Store;
use pulse_store::TenantTx;
use pulse_store::agents::{self, AgentSession};
use pulse_store::resources;
use serde_json::Value;

/// A running, healthy service `name` that never restarted, as an agent reports it.
pub fn service_resource(name: &str) -> ObservedResource {
    ObservedResource {
        resource_type: ResourceType::Service,
        source_id: name.to_owned(),
        name: name.to_owned(),
        aliases: Vec::new(),
        status: ResourceStatus::Running,
        health: Health::Healthy,
        restart_count: Some(0),
        labels: BTreeMap::new(),
        details: Value::Null,
        metrics: BTreeMap::new(),
        parent: None,
    }
}

/// Within `tx`: agent `host` connects (reporting every `report_interval_ms`, version
/// `agent_version`) and reports `observed`, now.
pub async fn report(
    tx: &TenantTx,
    host: &str,
    agent_version: &str,
    report_interval_ms: u64,
    observed: &[ObservedResource],
) -> anyhow::Result<()> {
    agents::connect(
        tx,
        &AgentSession {
            id: host.to_owned(),
            hostname: host.to_owned(),
            agent_version: agent_version.to_owned(),
            report_interval_ms,
            token_id: None,
        },
    )
    .await?;
    resources::apply_report(tx, host, Utc::now(), observed).await?;
    Ok(())
}

/// A new agent of `tenant` (host id from `label`) reporting `service` once; the service's
/// canonical id.
pub async fn seed_service(
    store: &Store,
    tenant: &TenantId,
    label: &str,
    service: ObservedResource,
) -> anyhow::Result<String> {
    let host = crate::agent::host_id(label);
    let name = service.name.clone();
    let tx = store.tenant_tx(tenant).await?;
    report(&tx, &host, "test", 1000, &[service]).await?;
    tx.commit().await?;
    Ok(ResourceId::service(&host, &name).to_string())
}
