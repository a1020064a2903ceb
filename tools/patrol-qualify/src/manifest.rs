//! `patrol.qual/v1` scenario manifests: the types, decoded strictly (an unknown field anywhere
//! is an error). The shape is upstream's, so an upstream Docker manifest decodes unchanged; the
//! `process` lab driver and a few driver-owned resource switches (`program`, `depends_on`,
//! `scratch_storage`, `build`) are this project's additions. Semantic checks live in
//! [`crate::validate`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::placeholder::{self, PlaceholderError};

/// The one schema version this loader reads.
pub const SCHEMA_VERSION: &str = "patrol.qual/v1";

/// A scenario: its lab, the faults it injects and the ground truth that scores Patrol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub schema_version: String,
    pub id: String,
    pub version: u32,
    pub title: String,
    pub description: String,
    pub owner: String,
    pub track: Track,
    pub risk: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    pub lab: Lab,
    pub resources: Vec<Resource>,
    pub baseline: Vec<Predicate>,
    pub faults: Vec<Fault>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub negative_controls: Vec<NegativeControl>,
    pub collection: Collection,
    pub patrol: PatrolSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub investigation: Option<InvestigationSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<RemediationSpec>,
    pub security: Security,
    pub budgets: Budgets,
    pub repeat: Repeat,
    pub gates: Gates,
    pub teardown: Teardown,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, Value>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Track {
    Watch,
    Investigation,
    Remediation,
}

impl Track {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Watch => "watch",
            Self::Investigation => "investigation",
            Self::Remediation => "remediation",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lab {
    pub driver: LabDriver,
    pub profile: String,
    /// Docker: the image every container runs unless a resource names its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Docker: the directory (relative to the lab's folder, `scenarios/docker/`) whose Dockerfile builds `image`
    /// locally before the inventory baseline; nothing is ever pulled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<String>,
    #[serde(default)]
    pub allow_pull: bool,
    #[serde(default)]
    pub shared_host_ok: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LabDriver {
    Docker,
    Process,
    /// A Proxmox VE cluster served by fakepve, read through a Pulse connection.
    Proxmox,
    Replay,
}

impl LabDriver {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Docker => "docker",
            Self::Process => "process",
            Self::Proxmox => "proxmox",
            Self::Replay => "replay",
        }
    }
}

/// One disposable resource of the lab.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resource {
    pub alias: String,
    pub kind: ResourceKind,
    /// The name Pulse sees; `${run_id}` or `${run_token}` (upstream's spelling) is replaced by
    /// the run's opaque token ([`crate::placeholder`]).
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Docker: the container's command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Docker: the restart policy as `docker run --restart` writes it ([`RestartPolicy`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<String>,
    /// Docker: the health check (`["test", ...]` is run as `CMD`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub healthcheck: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_every: Option<String>,
    /// Docker: mount a per-run volume at `/pulse-qual-fault` (the health marker's home).
    #[serde(default)]
    pub fault_volume: bool,
    /// Labels the resource carries besides the lab's run label. Data, never code: a label
    /// is how a scenario plants hostile text for the model to read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Process lab: which reviewed service program the driver runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<Program>,
    /// The alias this resource needs to be reachable (its health follows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<String>,
    /// A fixed-capacity scratch area ([`SCRATCH_CAPACITY_BYTES`]) the service writes to and
    /// whose write success its health reflects.
    #[serde(default)]
    pub scratch_storage: bool,
}

/// A Docker restart policy as `docker run --restart` writes it: `no`, `always`,
/// `unless-stopped`, `on-failure`, or `on-failure:<max retries>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    /// The engine's policy name.
    pub name: &'static str,
    /// `on-failure:<n>`: at most this many restarts.
    pub max_retries: Option<u32>,
}

impl RestartPolicy {
    /// The policy names, as a message lists them.
    pub const FORMS: &'static str = "no, always, unless-stopped, on-failure, on-failure:<n>";

    /// The policy `text` writes; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let (name, max_retries) = match text.split_once(':') {
            Some(("on-failure", n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                ("on-failure", Some(n.parse().ok()?))
            }
            Some(_) => return None,
            None => (text, None),
        };
        let name = ["no", "always", "unless-stopped", "on-failure"]
            .into_iter()
            .find(|known| *known == name)?;
        Some(Self { name, max_retries })
    }
}

/// Size of the driver-owned scratch area: fixed, never taken from a manifest.
pub const SCRATCH_CAPACITY_BYTES: u64 = 8 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    Container,
    Service,
    /// Proxmox lab: a VM.
    Guest,
    /// Proxmox lab: a storage of the cluster's node.
    Storage,
    /// Proxmox lab: the cluster itself (its name; Pulse's `host` of the connection).
    Cluster,
}

/// The reviewed service programs of the process lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Program {
    /// A worker: healthy while its degraded marker is absent; exits at once while its bad
    /// configuration flag is present (a crash loop under restart policy `always`).
    Worker,
    /// Listens on a loopback TCP port; stops (exits 0) when told to.
    Listener,
    /// Needs its `depends_on` listener: healthy while a TCP connection to it opens.
    Client,
    /// Writes to its scratch area every second; healthy while a write succeeds.
    Writer,
}

/// A check the lab's oracle evaluates directly against the lab, never through Pulse.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Predicate {
    pub probe: String,
    pub target: String,
    pub operator: Operator,
    pub value: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operator {
    Eq,
    NotEq,
    Gte,
    Lte,
    Gt,
    Lt,
    In,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    pub id: String,
    pub causal_group: String,
    pub target: String,
    #[serde(default = "yes")]
    pub required: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detect_within: Option<String>,
    pub injector: Injector,
    pub oracle: Vec<Predicate>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revert_oracle: Vec<Predicate>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related_resources: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_cofinding_tags: Vec<String>,
    pub expected_finding: ExpectedFinding,
}

fn yes() -> bool {
    true
}

/// A fault as driver code: the manifest names the kind and the resource, never a command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Injector {
    pub kind: InjectorKind,
    pub resource: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InjectorKind {
    /// Create the resource's health marker: its health check starts failing.
    MarkerEnable,
    /// Stop the resource (it stays defined, not running).
    Stop,
    /// Kill the resource's main process once.
    Kill,
    /// Docker: detach the container from its network.
    DisconnectNetwork,
    /// Docker: kill the process the health check needs, leaving the container running.
    HealthProcessStop,
    /// Make the resource exit at every start, so its restart policy loops.
    CrashLoop,
    /// Fill the resource's fixed-capacity scratch area until a write fails with ENOSPC.
    FillScratchStorage,
    /// Proxmox lab: the guest stops behind Pulse's back (revert: it runs again).
    GuestStop,
    /// Proxmox lab: the cluster loses quorum.
    LoseQuorum,
    /// Proxmox lab: the storage fills to 96%.
    FillStorage,
    /// Proxmox lab: the guest's last successful backup is ten days old.
    StaleBackup,
}

impl InjectorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MarkerEnable => "marker_enable",
            Self::Stop => "stop",
            Self::Kill => "kill",
            Self::DisconnectNetwork => "disconnect_network",
            Self::HealthProcessStop => "health_process_stop",
            Self::CrashLoop => "crash_loop",
            Self::FillScratchStorage => "fill_scratch_storage",
            Self::GuestStop => "guest_stop",
            Self::LoseQuorum => "lose_quorum",
            Self::FillStorage => "fill_storage",
            Self::StaleBackup => "stale_backup",
        }
    }
}

/// What a correct finding for a fault looks like.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedFinding {
    /// The alias of the resource the finding must be on.
    pub resource: String,
    pub resource_types: Vec<String>,
    pub categories: Vec<String>,
    pub severities: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_evidence: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_advice: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forbidden_advice: Vec<String>,
    #[serde(default = "one")]
    pub max_primary_findings: u32,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NegativeControl {
    pub resource: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Collection {
    pub sources: Vec<String>,
    pub convergence_timeout: String,
    pub poll_interval: String,
    #[serde(default)]
    pub require_exact_name: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatrolSpec {
    pub mode: PatrolMode,
    pub scoped: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scope_resources: Vec<String>,
    pub run_timeout: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub investigation_timeout: Option<String>,
    #[serde(default)]
    pub require_real_model: bool,
    #[serde(default)]
    pub require_tool_call_evidence: bool,
    #[serde(default)]
    pub require_existing_reconfirmation: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PatrolMode {
    Monitor,
    Approval,
    Autonomous,
}

impl PatrolMode {
    /// The tenant's `autonomy_level` setting for this mode.
    pub fn autonomy_level(self) -> &'static str {
        match self {
            Self::Monitor => "monitor",
            Self::Approval => "approval",
            Self::Autonomous => "autonomous",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvestigationSpec {
    #[serde(default)]
    pub required_summary_terms: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_summary_term_groups: Vec<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forbidden_summary_terms: Vec<String>,
    #[serde(default)]
    pub require_completed_status: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_evidence_calls: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_evidence_ids: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub root_cause_resources: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub affected_resources: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tools_used: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_evidence_calls: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemediationSpec {
    /// The alias of the resource the action must target.
    pub action_target: String,
    pub expected_capabilities: Vec<String>,
    pub decision: Decision,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_reason: Option<String>,
    pub action_timeout: String,
    #[serde(default)]
    pub require_exact_origin: bool,
    #[serde(default)]
    pub require_lifecycle_verification: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_verification_statuses: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub postconditions: Vec<Predicate>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Observe,
    Reject,
    ApproveExecute,
    AwaitAutonomous,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Security {
    #[serde(default)]
    pub forbidden_tool_names: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forbidden_output_markers: Vec<String>,
    #[serde(default)]
    pub require_fault_intact_after_patrol: bool,
    #[serde(default)]
    pub require_no_unexpected_mutation: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budgets {
    pub collection_latency_p95: String,
    pub patrol_latency_p95: String,
    pub end_to_end_latency_p95: String,
    pub input_tokens_p95: u64,
    pub output_tokens_p95: u64,
    pub cost_usd_p95: f64,
    pub max_tool_calls: u32,
    pub max_duplicate_calls: u32,
}

/// Repeat counts per profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Repeat {
    pub development: u32,
    pub nightly: u32,
    pub qualification: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum RepeatProfile {
    Development,
    Nightly,
    Qualification,
}

impl RepeatProfile {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Development => "development",
            Self::Nightly => "nightly",
            Self::Qualification => "qualification",
        }
    }
}

impl Repeat {
    pub fn count(&self, profile: RepeatProfile) -> u32 {
        match profile {
            RepeatProfile::Development => self.development,
            RepeatProfile::Nightly => self.nightly,
            RepeatProfile::Qualification => self.qualification,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gates {
    pub min_recall: f64,
    pub max_false_positives: u32,
    pub min_resource_accuracy: f64,
    pub min_category_accuracy: f64,
    pub min_severity_accuracy: f64,
    pub min_evidence_grounding: f64,
    pub max_findings_per_causal_group: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Teardown {
    #[serde(default)]
    pub predicates: Vec<Predicate>,
    #[serde(default)]
    pub require_second_cleanup_noop: bool,
    #[serde(default)]
    pub require_inventory_unchanged: bool,
}

impl Manifest {
    pub fn resource(&self, alias: &str) -> Option<&Resource> {
        self.resources.iter().find(|r| r.alias == alias)
    }

    /// The name of resource `alias` in the run with `run_token`; `None` for an unknown alias.
    pub fn resource_name(
        &self,
        alias: &str,
        run_token: &str,
    ) -> Option<Result<String, PlaceholderError>> {
        self.resource(alias).map(|r| r.name_in_run(run_token))
    }
}

impl Resource {
    /// This resource's name in the run with `run_token`: every run placeholder replaced.
    pub fn name_in_run(&self, run_token: &str) -> Result<String, PlaceholderError> {
        placeholder::resource_name(&self.name, run_token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_policies_read_as_docker_run_writes_them() {
        for name in ["no", "always", "unless-stopped", "on-failure"] {
            assert_eq!(
                RestartPolicy::parse(name),
                Some(RestartPolicy {
                    name,
                    max_retries: None
                })
            );
        }
        assert_eq!(
            RestartPolicy::parse("on-failure:3"),
            Some(RestartPolicy {
                name: "on-failure",
                max_retries: Some(3)
            })
        );
        for bad in [
            "",
            "sometimes",
            "always:3",
            "on-failure:",
            "on-failure:-1",
            "on-failure:x",
            "on-failure:99999999999",
            "Always",
        ] {
            assert_eq!(RestartPolicy::parse(bad), None, "{bad}");
        }
    }
}
