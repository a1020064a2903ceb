//! The connector's series for `/metrics`: claim attempts, the leases this process holds, and
//! each cluster read by outcome and duration. No label names a tenant or a connection.

use std::sync::LazyLock;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadLabels {
    /// The state the read left the connection in: `connected`, `no_quorum`, `auth_failed`,
    /// `unreachable` or `tls_mismatch`.
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommandLabels {
    /// The receipt's status: `completed`, `failed` or `rejected`.
    pub status: &'static str,
    /// The classified cause of a failure or refusal (`guest_locked`, `no_quorum`,
    /// `shutdown_timeout`, ...), `none` for a completed command, `other` for an unclassified one.
    pub cause: &'static str,
}

/// The causes a guest command's receipt is classified with.
pub const COMMAND_CAUSES: [&str; 8] = [
    "guest_locked",
    "no_quorum",
    "shutdown_timeout",
    "task_failed",
    "task_timeout",
    "permission_denied",
    "proxmox_refused",
    "outcome_unknown",
];

const READ_BUCKETS: [f64; 11] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0];

/// `pulse_connector_claims_total`, `pulse_connector_leases`,
/// `pulse_connector_reads_total{state}`, `pulse_connector_read_seconds` and
/// `pulse_connector_resources_reported_total` and
/// `pulse_connector_commands_total{status,cause}`.
#[derive(Clone)]
pub struct ConnectorMetrics {
    pub claims: Counter,
    pub leases: Gauge<i64, AtomicI64>,
    pub reads: Family<ReadLabels, Counter>,
    pub read_seconds: Histogram,
    pub resources: Counter,
    pub commands: Family<CommandLabels, Counter>,
}

impl Default for ConnectorMetrics {
    fn default() -> Self {
        Self {
            claims: Counter::default(),
            leases: Gauge::default(),
            reads: Family::default(),
            read_seconds: Histogram::new(READ_BUCKETS.iter().copied()),
            resources: Counter::default(),
            commands: Family::default(),
        }
    }
}

impl ConnectorMetrics {
    pub fn shared() -> &'static Self {
        static METRICS: LazyLock<ConnectorMetrics> = LazyLock::new(ConnectorMetrics::default);
        &METRICS
    }

    pub fn register(metrics: &pulse_telemetry::Metrics) {
        let this = Self::shared().clone();
        for state in pulse_domain::connection::ConnectionState::ALL {
            if state != pulse_domain::connection::ConnectionState::Pending {
                let _ = this.reads.get_or_create(&ReadLabels {
                    state: state.as_str(),
                });
            }
        }
        metrics.register(|registry| {
            registry.register(
                "connector_claims",
                "Times this connector looked for connections to read",
                this.claims,
            );
            registry.register(
                "connector_leases",
                "Connections this connector holds the lease of and reads",
                this.leases,
            );
            registry.register(
                "connector_reads",
                "Cluster reads, by the state they left the connection in",
                this.reads,
            );
            registry.register(
                "connector_read_seconds",
                "Time one read of a cluster took",
                this.read_seconds,
            );
            registry.register(
                "connector_resources_reported",
                "Resources sent to the relay in reports",
                this.resources,
            );
            registry.register(
                "connector_commands",
                "Guest power commands finished, by receipt status and classified cause",
                this.commands,
            );
        });
    }

    pub fn read(&self, state: &'static str, took: Duration, resources: usize) {
        self.reads.get_or_create(&ReadLabels { state }).inc();
        self.read_seconds.observe(took.as_secs_f64());
        self.resources.inc_by(resources as u64);
    }

    /// Counts one finished guest command by its receipt.
    pub fn command(&self, receipt: &pulse_domain::agent_protocol::Receipt) {
        use pulse_domain::agent_protocol::ReceiptStatus;
        let status = match receipt.status {
            ReceiptStatus::Completed => "completed",
            ReceiptStatus::Failed => "failed",
            ReceiptStatus::Rejected => "rejected",
            ReceiptStatus::Accepted => return,
        };
        let cause = match &receipt.reason {
            None => "none",
            Some(reason) => COMMAND_CAUSES
                .into_iter()
                .find(|c| reason.starts_with(&format!("{c}:")))
                .unwrap_or("other"),
        };
        self.commands
            .get_or_create(&CommandLabels { status, cause })
            .inc();
    }
}
