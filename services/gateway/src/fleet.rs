//! The fleet view behind `GET /api/health`: every service instance's latest heartbeat.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pulse_api::system::{HealthReport, ServiceHealth};
use pulse_bus::{Bus, Heartbeat};
use tokio_util::sync::CancellationToken;

/// The services `/api/health` reports on; all must be ready for `"status": "ok"`.
pub use pulse_domain::fleet::FLEET_SERVICES as EXPECTED_SERVICES;

struct Seen {
    service: String,
    ready: bool,
    at: Instant,
}

pub struct Fleet {
    stale_after: Duration,
    instances: Mutex<HashMap<String, Seen>>,
}

impl Fleet {
    pub fn new(stale_after: Duration) -> Self {
        Self {
            stale_after,
            instances: Mutex::new(HashMap::new()),
        }
    }

    pub fn record(&self, heartbeat: &Heartbeat, now: Instant) {
        let mut instances = match self.instances.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        instances.insert(
            heartbeat.instance_id.clone(),
            Seen {
                service: heartbeat.service.clone(),
                ready: heartbeat.ready,
                at: now,
            },
        );
    }

    /// Fresh instances per expected service; a service is ready when any fresh instance is.
    pub fn report(&self, now: Instant) -> HealthReport {
        let mut instances = match self.instances.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        instances.retain(|_, seen| now.saturating_duration_since(seen.at) <= self.stale_after);
        let services: BTreeMap<String, ServiceHealth> = EXPECTED_SERVICES
            .iter()
            .map(|name| {
                let fresh = instances.values().filter(|seen| seen.service == *name);
                let (count, ready) =
                    fresh.fold((0, false), |(n, r), seen| (n + 1, r || seen.ready));
                (
                    (*name).to_owned(),
                    ServiceHealth {
                        ready,
                        instances: count,
                    },
                )
            })
            .collect();
        let all_ready = services.values().all(|s| s.ready);
        HealthReport {
            status: if all_ready { "ok" } else { "degraded" }.to_owned(),
            services,
        }
    }
}

/// Follows the heartbeat subject until shutdown, resubscribing if the subscription ends.
pub async fn watch(fleet: std::sync::Arc<Fleet>, bus: Bus, shutdown: CancellationToken) {
    while !shutdown.is_cancelled() {
        let mut subscriber = match bus
            .subscribe::<Heartbeat>(&bus.subjects().heartbeat())
            .await
        {
            Ok(subscriber) => subscriber,
            Err(error) => {
                tracing::warn!(%error, "cannot subscribe to heartbeats; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
        };
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                next = subscriber.next() => match next {
                    Some(Ok(decoded)) => fleet.record(&decoded.payload, Instant::now()),
                    Some(Err(error)) => tracing::debug!(%error, "ignoring malformed heartbeat"),
                    None => break,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn beat(service: &str, instance: &str, ready: bool) -> Heartbeat {
        Heartbeat {
            service: service.to_owned(),
            instance_id: instance.to_owned(),
            version: "0".to_owned(),
            started_at: Utc::now(),
            sent_at: Utc::now(),
            ready,
        }
    }

    #[test]
    fn ok_only_when_every_service_has_a_fresh_ready_instance() {
        let fleet = Fleet::new(Duration::from_secs(10));
        let t0 = Instant::now();
        for name in EXPECTED_SERVICES {
            fleet.record(&beat(name, &format!("{name}-1"), true), t0);
        }
        assert_eq!(fleet.report(t0).status, "ok");
        // A second, unready verifier does not make the verifier unready.
        fleet.record(&beat("verifier", "verifier-2", false), t0);
        let report = fleet.report(t0);
        assert_eq!(report.status, "ok");
        assert_eq!(
            report.services["verifier"],
            ServiceHealth {
                ready: true,
                instances: 2
            }
        );
        // The ready verifier says goodbye: only the unready one is left.
        fleet.record(&beat("verifier", "verifier-1", false), t0);
        assert_eq!(fleet.report(t0).status, "degraded");
    }

    #[test]
    fn stale_instances_drop_out() {
        let fleet = Fleet::new(Duration::from_secs(10));
        let t0 = Instant::now();
        for name in EXPECTED_SERVICES {
            fleet.record(&beat(name, name, true), t0);
        }
        let later = t0 + Duration::from_secs(11);
        fleet.record(&beat("gateway", "gateway", true), later);
        let report = fleet.report(later);
        assert_eq!(report.status, "degraded");
        assert_eq!(report.services["gateway"].instances, 1);
        assert_eq!(
            report.services["verifier"],
            ServiceHealth {
                ready: false,
                instances: 0
            }
        );
    }

    #[test]
    fn unknown_services_are_not_reported() {
        let fleet = Fleet::new(Duration::from_secs(10));
        let t0 = Instant::now();
        fleet.record(&beat("pulse-agent", "a", true), t0);
        let report = fleet.report(t0);
        assert_eq!(report.services.len(), 7);
        assert!(!report.services.contains_key("pulse-agent"));
    }

    #[test]
    fn health_report_shape() {
        let fleet = Fleet::new(Duration::from_secs(10));
        let t0 = Instant::now();
        for name in EXPECTED_SERVICES.iter().skip(1) {
            fleet.record(&beat(name, name, true), t0);
        }
        insta::assert_json_snapshot!(fleet.report(t0));
    }
}
