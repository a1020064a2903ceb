//! Storing one report: resources, aliases, metric samples and change events, in one
//! transaction.

use pulse_bus::OutboxRow;
use pulse_bus::events::RESOURCE_CHANGED;
use pulse_domain::TenantId;
use pulse_domain::agent_protocol::Report;
use pulse_domain::resource::ResourceId;
use pulse_store::metrics::{self, MetricSample};
use pulse_store::{agents, resources};

use crate::RelayState;

/// What a stored report changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ingested {
    pub resources: usize,
    pub changes: usize,
    pub samples: usize,
}

pub async fn report(
    state: &RelayState,
    tenant: &TenantId,
    agent_id: &str,
    report: &Report,
) -> anyhow::Result<Ingested> {
    let tx = state.store.tenant_tx(tenant).await?;
    agents::seen(&tx, agent_id).await?;
    let changes =
        resources::apply_report(&tx, agent_id, report.observed_at, &report.resources).await?;
    let samples: Vec<MetricSample> = report
        .resources
        .iter()
        .flat_map(|r| {
            let id = ResourceId::of(r.resource_type, agent_id, &r.source_id);
            r.metrics.iter().map(move |(metric, value)| MetricSample {
                resource_id: id.clone(),
                metric: metric.clone(),
                at: report.observed_at,
                value: *value,
            })
        })
        .collect();
    let stored = metrics::insert(&tx, &samples).await?;
    for change in &changes {
        let (domain, event) = RESOURCE_CHANGED;
        let row = OutboxRow::event(&state.subjects, tenant, domain, event, change)?;
        pulse_bus::enqueue(&**tx.client(), row).await?;
    }
    tx.commit().await?;
    if !changes.is_empty() {
        state.outbox_notify.notify_one();
    }
    Ok(Ingested {
        resources: report.resources.len(),
        changes: changes.len(),
        samples: stored,
    })
}
