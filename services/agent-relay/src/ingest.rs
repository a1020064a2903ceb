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
    let tx = state.store.tenant_tx(tenant).await?;
    // Independent statements of one transaction, polled together so the client pipelines them
    // (sent in this order without waiting for each answer).
    let (_, changes, stored) = tokio::try_join!(
        agents::seen(&tx, agent_id),
        resources::apply_report(&tx, agent_id, report.observed_at, &report.resources),
        metrics::insert(&tx, &samples),
    )?;
    let (domain, event) = RESOURCE_CHANGED;
    let rows = changes
        .iter()
        .map(|change| OutboxRow::event(&state.subjects, tenant, domain, event, change))
        .collect::<Result<Vec<_>, _>>()?;
    futures::future::try_join_all(
        rows.into_iter()
            .map(|row| pulse_bus::enqueue(&**tx.client(), row)),
    )
    .await?;
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
