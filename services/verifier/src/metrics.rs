//! The verifier's series for `/metrics`: checks answered by kind (`resolution`, `postcondition`)
//! and outcome, and how long each took (a postcondition check polls until its wait runs out).
//! Requests refused as invalid are counted with outcome `refused`. No label names a tenant.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CheckLabels {
    /// `resolution` or `postcondition`.
    pub check: &'static str,
    /// `resolved`/`present`/`inconclusive` (resolution), `verified`/`still_failing`/
    /// `inconclusive` (postcondition), or `refused`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub check: &'static str,
}

const CHECK_BUCKETS: [f64; 11] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0];

/// `pulse_verifier_checks_total{check,outcome}` and `pulse_verifier_check_seconds{check}`.
#[derive(Clone)]
pub struct VerifierMetrics {
    pub checks: Family<CheckLabels, Counter>,
    pub seconds: Family<KindLabels, Histogram>,
}

impl Default for VerifierMetrics {
    fn default() -> Self {
        Self {
            checks: Family::default(),
            seconds: Family::new_with_constructor(|| Histogram::new(CHECK_BUCKETS.iter().copied())),
        }
    }
}

impl VerifierMetrics {
    pub fn shared() -> &'static Self {
        static METRICS: LazyLock<VerifierMetrics> = LazyLock::new(VerifierMetrics::default);
        &METRICS
    }

    pub fn register(metrics: &pulse_telemetry::Metrics) {
        let this = Self::shared().clone();
        // Every outcome at zero, so each series exists before its first check.
        use pulse_domain::finding::VerifierOutcome;
        for outcome in [
            VerifierOutcome::Confirmed,
            VerifierOutcome::StillPresent,
            VerifierOutcome::Inconclusive,
            VerifierOutcome::NotRun,
        ] {
            let _ = this.checks.get_or_create(&CheckLabels {
                check: "resolution",
                outcome: outcome.as_str(),
            });
        }
        for outcome in pulse_domain::action::Verification::ALL {
            let _ = this.checks.get_or_create(&CheckLabels {
                check: "postcondition",
                outcome: outcome.as_str(),
            });
        }
        for check in ["resolution", "postcondition"] {
            let _ = this.checks.get_or_create(&CheckLabels {
                check,
                outcome: "refused",
            });
            let _ = this.seconds.get_or_create(&KindLabels { check });
        }
        metrics.register(|registry| {
            registry.register(
                "verifier_checks",
                "Checks the verifier answered, by kind and outcome",
                this.checks,
            );
            registry.register(
                "verifier_check_seconds",
                "Time the verifier took to answer a check",
                this.seconds,
            );
        });
    }

    pub fn checked(&self, check: &'static str, outcome: &'static str, took: Duration) {
        self.checks
            .get_or_create(&CheckLabels { check, outcome })
            .inc();
        self.seconds
            .get_or_create(&KindLabels { check })
            .observe(took.as_secs_f64());
    }
}
