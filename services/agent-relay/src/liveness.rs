//! Agents that stop reporting go offline, and their resources become `unknown` (never
//! `stopped`: nobody can tell).

use std::time::Duration;

use chrono::Utc;
use pulse_bus::OutboxRow;
use pulse_bus::events::RESOURCE_CHANGED;
use pulse_store::{agents, resources};
use tokio_util::sync::CancellationToken;

use crate::RelayState;

pub async fn run(state: RelayState, shutdown: CancellationToken) {
    let period =
        (state.limits.offline_after / 4).clamp(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
        }
        if let Err(error) = sweep(&state, &shutdown).await {
            tracing::warn!(error = %format!("{error:#}"), "liveness sweep failed; will retry");
        }
    }
}

/// Marks every silent agent offline, one transaction each, until `stop`: a relay asked to stop
/// leaves the rest to the next sweep of any relay (each agent's mark is a compare-and-swap), so
/// a thousand agents gone at once do not hold up its shutdown. Returns how many went offline.
pub async fn sweep(state: &RelayState, stop: &CancellationToken) -> anyhow::Result<usize> {
    let offline_after = state.limits.offline_after;
    let now = Utc::now();
    let mut offline = 0;
    for (tenant, agent_id) in agents::stale(&state.store, now, offline_after).await? {
        if stop.is_cancelled() {
            break;
        }
        let tx = state.store.tenant_tx(&tenant).await?;
        if !agents::mark_offline(&tx, &agent_id, now, offline_after).await? {
            continue;
        }
        let changes = resources::mark_agent_unknown(&tx, &agent_id).await?;
        for change in &changes {
            let (domain, event) = RESOURCE_CHANGED;
            let row = OutboxRow::event(&state.subjects, &tenant, domain, event, change)?;
            pulse_bus::enqueue(&**tx.client(), row).await?;
        }
        tx.commit().await?;
        offline += 1;
        tracing::info!(tenant = %tenant, agent_id = %agent_id, resources = changes.len(), "agent offline; its resources are unknown");
        if !changes.is_empty() {
            state.outbox_notify.notify_one();
        }
    }
    Ok(offline)
}
