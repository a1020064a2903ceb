//! Publishes this instance's heartbeat until shutdown, then one last "not ready" beat so the
//! fleet view drops it at once instead of after the stale timeout.

use std::time::Duration;

use chrono::{DateTime, Utc};
use pulse_bus::{Bus, Heartbeat};
use tokio_util::sync::CancellationToken;

use crate::Readiness;

pub(crate) struct HeartbeatIdentity {
    pub service: String,
    pub instance_id: String,
    pub started_at: DateTime<Utc>,
}

pub(crate) async fn run(
    bus: Bus,
    readiness: Readiness,
    identity: HeartbeatIdentity,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let beat = |ready: bool| Heartbeat {
        service: identity.service.clone(),
        instance_id: identity.instance_id.clone(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        started_at: identity.started_at,
        sent_at: Utc::now(),
        ready,
    };
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = ticker.tick() => {
                let ready = readiness.check().await.ready;
                if let Err(error) = bus.publish_heartbeat(&beat(ready)).await {
                    tracing::debug!(%error, "heartbeat not published");
                }
            }
        }
    }
    let _ = bus.publish_heartbeat(&beat(false)).await;
    let _ = bus.client().flush().await;
}
