//! The relay's series for `/metrics`: agents connected to this process, reports stored and the
//! resource observations and metric samples they carried, how long a report took from receipt
//! to its stored ack, reports refused by reason, and fresh observations served to other
//! services (`relay.observe`). No label names a tenant or an agent.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

/// Why a message from an agent was refused (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// Larger than `relay.max_report_bytes`.
    TooLarge,
    /// Not UTF-8, not JSON, or not a protocol message.
    Malformed,
    /// A report before Hello, or a second Hello, or a bad protocol version or agent id.
    Protocol,
    /// Over `relay.max_reports_per_sec`.
    RateLimited,
    /// More resources than a report may carry.
    TooManyResources,
    /// The database did not take it.
    StoreFailed,
    /// The relay could not write its answer to the connection.
    ConnectionFailed,
}

impl RejectReason {
    pub const ALL: [Self; 7] = [
        Self::TooLarge,
        Self::Malformed,
        Self::Protocol,
        Self::RateLimited,
        Self::TooManyResources,
        Self::StoreFailed,
        Self::ConnectionFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::TooLarge => "too_large",
            Self::Malformed => "malformed",
            Self::Protocol => "protocol",
            Self::RateLimited => pulse_capabilities::ErrorCode::RateLimited.code(),
            Self::TooManyResources => "too_many_resources",
            Self::StoreFailed => "store_failed",
            Self::ConnectionFailed => "connection_failed",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `ok` or `failed`.
    pub outcome: &'static str,
}

/// Receipt-to-ack times of a report: a group commit is milliseconds, a struggling database seconds.
const INGEST_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// `pulse_relay_agents_connected`, `pulse_relay_reports_ingested_total`,
/// `pulse_relay_resource_observations_ingested_total`, `pulse_relay_metric_samples_ingested_total`,
/// `pulse_relay_report_ingest_seconds`, `pulse_relay_reports_rejected_total{reason}` and
/// `pulse_relay_observations_total{outcome}`.
#[derive(Clone)]
pub struct RelayMetrics {
    pub agents_connected: Gauge,
    pub reports_ingested: Counter,
    pub resources_ingested: Counter,
    pub samples_ingested: Counter,
    pub ingest_seconds: Histogram,
    pub rejected: Family<ReasonLabels, Counter>,
    pub observations: Family<OutcomeLabels, Counter>,
}

impl Default for RelayMetrics {
    fn default() -> Self {
        Self {
            agents_connected: Gauge::default(),
            reports_ingested: Counter::default(),
            resources_ingested: Counter::default(),
            samples_ingested: Counter::default(),
            ingest_seconds: Histogram::new(INGEST_BUCKETS.iter().copied()),
            rejected: Family::default(),
            observations: Family::default(),
        }
    }
}

impl RelayMetrics {
    pub fn register(metrics: &pulse_telemetry::Metrics) -> Self {
        let this = Self::default();
        // Every reason and outcome at zero, so each series exists before its first event.
        for reason in RejectReason::ALL {
            let _ = this.rejected.get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            });
        }
        for outcome in ["ok", "failed"] {
            let _ = this.observations.get_or_create(&OutcomeLabels { outcome });
        }
        let copy = this.clone();
        metrics.register(|registry| {
            registry.register(
                "relay_agents_connected",
                "Agent sessions registered with this relay process",
                copy.agents_connected,
            );
            registry.register(
                "relay_reports_ingested",
                "Agent reports stored",
                copy.reports_ingested,
            );
            registry.register(
                "relay_resource_observations_ingested",
                "Resource observations carried by stored reports",
                copy.resources_ingested,
            );
            registry.register(
                "relay_metric_samples_ingested",
                "Metric samples carried by stored reports",
                copy.samples_ingested,
            );
            registry.register(
                "relay_report_ingest_seconds",
                "Time from a report's receipt to its stored ack",
                copy.ingest_seconds,
            );
            registry.register(
                "relay_reports_rejected",
                "Agent messages refused, by reason",
                copy.rejected,
            );
            registry.register(
                "relay_observations",
                "Fresh observations requested of agents over relay.observe, by outcome",
                copy.observations,
            );
        });
        this
    }

    pub fn rejected(&self, reason: RejectReason) {
        self.rejected
            .get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            })
            .inc();
    }

    /// A report stored after `took`, carrying `resources` observations and `samples` samples.
    pub fn ingested(&self, took: Duration, resources: usize, samples: usize) {
        self.reports_ingested.inc();
        self.resources_ingested.inc_by(resources as u64);
        self.samples_ingested.inc_by(samples as u64);
        self.ingest_seconds.observe(took.as_secs_f64());
    }

    pub fn observation(&self, ok: bool) {
        self.observations
            .get_or_create(&OutcomeLabels {
                outcome: if ok { "ok" } else { "failed" },
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_renders_without_a_tenant_label() {
        let registry = pulse_telemetry::Metrics::new("agent-relay");
        let metrics = RelayMetrics::register(&registry);
        metrics.agents_connected.inc();
        metrics.ingested(Duration::from_millis(3), 4, 9);
        metrics.rejected(RejectReason::RateLimited);
        metrics.observation(true);
        let text = registry.render();
        for line in [
            "pulse_relay_agents_connected{service=\"agent-relay\"} 1",
            "pulse_relay_reports_ingested_total{service=\"agent-relay\"} 1",
            "pulse_relay_resource_observations_ingested_total{service=\"agent-relay\"} 4",
            "pulse_relay_metric_samples_ingested_total{service=\"agent-relay\"} 9",
            "pulse_relay_report_ingest_seconds_count{service=\"agent-relay\"} 1",
            "pulse_relay_reports_rejected_total{service=\"agent-relay\",reason=\"rate_limited\"} 1",
            "pulse_relay_observations_total{service=\"agent-relay\",outcome=\"ok\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
        assert!(!text.contains("tenant"), "{text}");
    }
}
