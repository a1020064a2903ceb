//! Counters of the alert floor for `/metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabels {
    /// `fired`, `level_changed` or `cleared`.
    pub event: String,
}

/// `pulse_alert_observations_evaluated_total`, `pulse_alert_transitions_total{event}` and
/// `pulse_alert_evaluation_failures_total` (tenant batches and sweeps that failed and are retried).
#[derive(Clone, Default)]
pub struct FloorMetrics {
    pub evaluated: Counter,
    pub transitions: Family<TransitionLabels, Counter>,
    pub failures: Counter,
}

impl FloorMetrics {
    pub fn register(metrics: &pulse_telemetry::Metrics) -> Self {
        let this = Self::default();
        let (evaluated, transitions, failures) = (
            this.evaluated.clone(),
            this.transitions.clone(),
            this.failures.clone(),
        );
        metrics.register(|registry| {
            registry.register(
                "alert_observations_evaluated",
                "Resource observations fed to the alert rules",
                evaluated,
            );
            registry.register(
                "alert_transitions",
                "Alert lifecycle transitions stored and announced",
                transitions,
            );
            registry.register(
                "alert_evaluation_failures",
                "Alert evaluations that failed and will be retried",
                failures,
            );
        });
        this
    }

    pub fn transition(&self, event: &str) {
        self.transitions
            .get_or_create(&TransitionLabels {
                event: event.to_owned(),
            })
            .inc();
    }
}
