//! Counters of what happened to failed deliveries, for `/metrics`: Nak'd for another delivery,
//! or dead-lettered. One set per process, shared by every consumer in it ([`delivery_metrics`]);
//! the service harness registers it in the process's registry.
//!
//! Labelled by the consumer's dead-letter kind (`watch`, `investigate`, `alert_trigger`...):
//! a fixed set named in code, never a tenant.

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

/// `pulse_job_redeliveries_total{kind}` and `pulse_job_dead_letters_total{kind}`.
#[derive(Clone, Default)]
pub struct DeliveryMetrics {
    pub redeliveries: Family<KindLabels, Counter>,
    pub dead_letters: Family<KindLabels, Counter>,
}

impl DeliveryMetrics {
    /// A failed delivery handed back to the server for another delivery.
    pub fn redelivery(&self, kind: &str) {
        self.redeliveries.get_or_create(&labels(kind)).inc();
    }

    /// A message published to its dead-letter subject and terminated.
    pub fn dead_letter(&self, kind: &str) {
        self.dead_letters.get_or_create(&labels(kind)).inc();
    }

    /// Registers both counters (as `job_redeliveries` and `job_dead_letters`).
    pub fn register_in(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "job_redeliveries",
            "Failed job and event deliveries handed back for another delivery",
            self.redeliveries.clone(),
        );
        registry.register(
            "job_dead_letters",
            "Jobs and events published to their dead-letter subject after their last delivery",
            self.dead_letters.clone(),
        );
    }

    /// Creates both series of `kind` at zero, so they exist before its first failure.
    pub fn touch(&self, kind: &str) {
        let _ = self.redeliveries.get_or_create(&labels(kind));
        let _ = self.dead_letters.get_or_create(&labels(kind));
    }

    pub fn redeliveries_of(&self, kind: &str) -> u64 {
        self.redeliveries.get_or_create(&labels(kind)).get()
    }

    pub fn dead_letters_of(&self, kind: &str) -> u64 {
        self.dead_letters.get_or_create(&labels(kind)).get()
    }
}

fn labels(kind: &str) -> KindLabels {
    KindLabels {
        kind: kind.to_owned(),
    }
}

/// The process's delivery counters.
pub fn delivery_metrics() -> &'static DeliveryMetrics {
    static METRICS: LazyLock<DeliveryMetrics> = LazyLock::new(DeliveryMetrics::default);
    &METRICS
}
