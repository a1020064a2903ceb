//! What one live run of one scenario observed: the lab's own oracle readings, the Patrol run
//! record and findings as Pulse's API returned them, timings, and teardown. The runner fills
//! it; the scorer ([`crate::scorer`]) reads only this and the manifest, so a stored report can
//! be scored again exactly (`replay`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::manifest::LabDriver;

/// Where the run's model answers come from: decides how cost is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteClass {
    /// A metered API: cost must be known.
    HostedApi,
    /// A model on the operator's hardware: monetary cost is unknown, the spend budget does
    /// not apply.
    Local,
    /// The provider simulator: a self-test of the harness, never a model qualification.
    Simulator,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelIdentity {
    /// `provider:model` as configured for the run.
    pub route: String,
    pub route_class: RouteClass,
}

/// A lab resource as the lab made it and as Pulse names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceBinding {
    pub alias: String,
    pub name: String,
    /// Pulse's canonical id (`service:<host>:<name>`, `app-container:<host>:<id>`).
    pub resource_id: String,
    pub resource_type: String,
}

/// A finding as `GET /api/ai/patrol/findings/{id}` returned it (the fields scoring reads).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedFinding {
    pub id: String,
    pub resource_id: String,
    #[serde(default)]
    pub resource_type: Option<String>,
    pub category: String,
    pub severity: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub evidence: String,
    #[serde(default)]
    pub recommendation: String,
    #[serde(default)]
    pub status: String,
    /// `new` when the scored run created it, `present` / `resolved` / `uncertain` when the
    /// run assessed an existing finding.
    pub run_outcome: String,
}

/// One tool exchange of the run, in order, with its canonical input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolExchange {
    pub sequence: u32,
    pub tool_call_id: String,
    pub tool_name: String,
    /// The call's arguments as JSON (RFC 8785 canonical when serialised for digests).
    pub canonical_input: Value,
    pub output: String,
    pub success: bool,
}

/// The oracle's readings for one fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultOracle {
    pub fault_id: String,
    /// Every `oracle` predicate held after injection (before Patrol ran).
    pub injected: bool,
    /// The fault was still in place after Patrol (and any investigation) ran.
    pub intact_after_patrol: bool,
    /// Every `revert_oracle` predicate held after revert.
    pub reverted: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvestigationObservation {
    pub investigation_id: Option<String>,
    pub finding_id: String,
    pub status: String,
    pub summary: String,
    pub tools_used: u32,
    pub evidence_calls: u32,
    #[serde(default)]
    pub evidence_ids: Vec<String>,
    /// The resources the investigation's proposal names as cause and target.
    #[serde(default)]
    pub root_cause_resource_ids: Vec<String>,
    #[serde(default)]
    pub tool_names: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemediationObservation {
    pub action_id: Option<String>,
    pub plan_hash: Option<String>,
    pub finding_id: Option<String>,
    pub investigation_id: Option<String>,
    pub resource_id: Option<String>,
    pub capability: Option<String>,
    /// The binding of action id, plan hash, finding, investigation, resource and capability
    /// to the authoritative action record held before any decision.
    pub identity_bound: bool,
    /// The decision the harness recorded (`approve`, `reject`), `None` when it recorded none.
    pub decision_recorded: Option<String>,
    pub terminal_state: Option<String>,
    pub verification_status: Option<String>,
    /// The manifest's postconditions, read by the oracle after the action (or after the
    /// rejection, when the fault must remain).
    pub postconditions_held: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeardownObservation {
    pub first_pass_actions: Vec<String>,
    /// What the second cleanup pass had to do: must be empty.
    pub second_pass_actions: Vec<String>,
    /// Inventory entries that differ from the pre-run inventory (`+` added, `-` missing).
    pub inventory_diff: Vec<String>,
    pub predicates_held: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// Milliseconds spent in each phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timings {
    /// Provisioning, baseline, injection and the oracle's threshold wait.
    pub lab_ms: u64,
    /// From the lab being ready to Pulse showing every resource (and the faults) through
    /// normal collection.
    pub collection_ms: u64,
    /// Waiting, before a run request, for runs Pulse started by itself (an alert, a vanished
    /// lab host of an earlier scenario) to end, so the scored run is not queued behind them.
    #[serde(default)]
    pub idle_wait_ms: u64,
    /// From the run request to the run's terminal state.
    pub patrol_ms: u64,
    pub investigation_ms: u64,
    pub remediation_ms: u64,
    pub teardown_ms: u64,
    pub end_to_end_ms: u64,
}

/// One live run of one scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunObservation {
    pub scenario_id: String,
    pub lab: LabDriver,
    pub repeat_index: u32,
    /// The Patrol run the harness requested and scored.
    pub patrol_run_id: Option<String>,
    pub patrol_run_status: Option<String>,
    pub resources: Vec<ResourceBinding>,
    pub findings: Vec<ObservedFinding>,
    pub tool_exchanges: Vec<ToolExchange>,
    /// Of the run's tool calls, those the model wrote as text and Pulse recovered (absent in
    /// observations made before it was recorded).
    #[serde(default)]
    pub tool_calls_recovered: u32,
    pub ai_analysis: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: Option<f64>,
    pub faults: Vec<FaultOracle>,
    pub baseline_held: bool,
    pub investigation: Option<InvestigationObservation>,
    pub remediation: Option<RemediationObservation>,
    pub teardown: TeardownObservation,
    pub timings: Timings,
    /// A harness, lab or Pulse failure that stopped the run (a hard failure).
    pub run_error: Option<String>,
}
