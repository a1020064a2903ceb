//! pulse-connector: reads the Proxmox VE clusters and Proxmox Backup Servers of every
//! organization and reports them to the agent relay as agents (ADR 0013).
//!
//! Each connection is read by one connector replica at a time, the holder of its lease in
//! Postgres: replicas claim free or lapsed leases (`FOR UPDATE SKIP LOCKED`), renew them by
//! compare-and-set every cycle and stop reading the moment a renewal fails. The holder keeps one
//! agent session with the relay per connection, as agent `pve.<name>` (or `pbs.<name>`), with a
//! token bound to that agent id, and every cadence reads the cluster into canonical resources
//! (`pulse_proxmox::inventory`; a backup server with `pulse_proxmox::pbs`), sends them as a report and records the connection's state
//! (`connected`, `no_quorum`, `auth_failed`, `unreachable`, `tls_mismatch`) with what to fix.
//! Ingestion, liveness, alerts and forecasts are the relay's and the scheduler's, as for a host.
//!
//! The same session answers the relay's commands and observations for the connection's guests
//! ([`commands`]): guest power actions, approved through the broker like every action, run only
//! while the connection has guest actions on.

pub mod commands;
pub mod metrics;
mod poller;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pulse_domain::connection::ConnectionKind;
use pulse_runtime::{ServiceContext, ServiceSpec};
use pulse_store::connections;
use pulse_store::settings::MasterKey;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use poller::{Poller, PollerSettings};

pub const SPEC: ServiceSpec = ServiceSpec {
    name: "connector",
    health_port: Some(7668),
};

/// The lease a fresh claim takes, before the poller has read the connection's cadence and
/// renews it for three cadences.
pub const CLAIM_LEASE: Duration = Duration::from_secs(90);

/// The kinds this connector reads.
pub const KINDS: [ConnectionKind; 2] = [ConnectionKind::ProxmoxVe, ConnectionKind::ProxmoxBackup];

/// The relay's base URL when none is configured: its listener, with an unspecified address
/// (`0.0.0.0`, `::`) read as this machine.
pub fn default_relay_url(listen: SocketAddr) -> String {
    let mut addr = listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(if addr.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    format!("http://{addr}")
}

/// Runs until shutdown: claims connections, runs one poller per claimed connection, and on
/// shutdown stops them, each giving its lease up so another replica takes over at once.
pub async fn run(ctx: ServiceContext) -> anyhow::Result<()> {
    metrics::ConnectorMetrics::register(&ctx.metrics);
    let metrics = metrics::ConnectorMetrics::shared();
    let key_path = ctx.config.master_key_path();
    let key = tokio::task::spawn_blocking(move || MasterKey::load_or_create(&key_path)).await??;
    let config = &ctx.config.connector;
    let settings = PollerSettings {
        store: ctx.store.clone(),
        key: Arc::new(key),
        relay_url: config
            .relay_url
            .clone()
            .unwrap_or_else(|| default_relay_url(ctx.config.relay.listen)),
        request_timeout: Duration::from_millis(config.request_timeout_ms.max(1_000)),
        shutdown_timeout: Duration::from_secs(u64::from(
            config.shutdown_timeout_seconds.clamp(1, 3600),
        )),
    };
    let claim_every = Duration::from_millis(config.claim_every_ms.max(100));
    let max = config.max_connections;
    tracing::info!(relay = %settings.relay_url, holder = %ctx.instance_id, max_connections = max, "connector started");
    let mut pollers: HashMap<Uuid, JoinHandle<()>> = HashMap::new();
    loop {
        pollers.retain(|_, task| !task.is_finished());
        metrics
            .leases
            .set(i64::try_from(pollers.len()).unwrap_or(i64::MAX));
        let room = max.saturating_sub(pollers.len());
        metrics.claims.inc();
        match connections::claim(&ctx.store, &ctx.instance_id, &KINDS, CLAIM_LEASE, room).await {
            Ok(leases) => {
                for lease in leases {
                    tracing::info!(tenant = %lease.tenant, connection = %lease.connection, generation = lease.generation, "connection lease taken");
                    let id = lease.connection;
                    let poller = Poller::new(settings.clone(), lease, ctx.shutdown.child_token());
                    pollers.insert(id, tokio::spawn(poller.run()));
                }
                metrics
                    .leases
                    .set(i64::try_from(pollers.len()).unwrap_or(i64::MAX));
            }
            Err(error) => tracing::warn!(%error, "claiming connections failed; will retry"),
        }
        tokio::select! {
            _ = ctx.shutdown.cancelled() => break,
            _ = tokio::time::sleep(claim_every) => {}
        }
    }
    stop_all(pollers, &ctx.shutdown).await;
    Ok(())
}

async fn stop_all(pollers: HashMap<Uuid, JoinHandle<()>>, shutdown: &CancellationToken) {
    debug_assert!(shutdown.is_cancelled());
    for (id, task) in pollers {
        if tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .is_err()
        {
            tracing::warn!(connection = %id, "poller did not stop within 10 s");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_relay_url_is_the_relay_listener_on_this_machine() {
        assert_eq!(
            default_relay_url("127.0.0.1:7656".parse().unwrap()),
            "http://127.0.0.1:7656"
        );
        assert_eq!(
            default_relay_url("0.0.0.0:7656".parse().unwrap()),
            "http://127.0.0.1:7656"
        );
        assert_eq!(
            default_relay_url("[::]:7656".parse().unwrap()),
            "http://[::1]:7656"
        );
    }
}
