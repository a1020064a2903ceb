//! The disposable labs. A lab provisions the scenario's resources with the exact run label and
//! an opaque run token, injects and reverts faults with reviewed driver code (never a command
//! from a manifest), answers the oracle's probes by looking at the lab directly (never through
//! Pulse), cleans up what carries its label, and lists an inventory that must be the same
//! before and after a run.

pub mod docker;
pub mod process;
pub mod proxmox;

use std::collections::BTreeSet;

use serde_json::Value;

use crate::manifest::{Fault, LabDriver, Manifest, Operator, Predicate};

/// The label key every lab object carries, with the run token as its value. Neutral on
/// purpose: the model must not be able to tell it is looking at a benchmark.
pub const RUN_LABEL: &str = "deploy.instance";

/// What exists before and after a run: one entry per process, definition, container, image,
/// volume, network or scratch area the lab could have touched.
pub type Inventory = BTreeSet<String>;

/// A resource the lab made, as the collecting agent will report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provisioned {
    pub alias: String,
    pub name: String,
    /// The agent's source id (the service name, the container id).
    pub source_id: String,
    /// Pulse's resource type (`service`, `app-container`).
    pub resource_type: &'static str,
}

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The lab cannot run here (a missing permission, engine or program); what to do is in
    /// the message.
    #[error("lab unavailable: {0}")]
    Unavailable(String),
    /// The manifest asks for something this driver does not do.
    #[error("unsupported by the {driver} lab: {what}")]
    Unsupported { driver: &'static str, what: String },
    #[error("lab {operation} failed: {reason}")]
    Failed { operation: String, reason: String },
}

impl LabError {
    pub fn failed(operation: impl Into<String>, reason: impl ToString) -> Self {
        Self::Failed {
            operation: operation.into(),
            reason: reason.to_string(),
        }
    }
}

/// How the harness's collecting agent must be started for this lab.
#[derive(Debug, Clone, Default)]
pub struct AgentWiring {
    /// The supervised-services directory (process lab).
    pub services_dir: Option<std::path::PathBuf>,
    /// The Docker endpoint (`unix://...` or `tcp://...`) to collect from (Docker lab); `None`
    /// runs the agent with `--no-docker`.
    pub docker_host: Option<String>,
    /// The label the agent is scoped to (`--docker-label`, Docker lab): the run's own
    /// containers only, whatever else the engine runs.
    pub docker_label: Option<String>,
}

/// The lab of one run.
pub enum Lab {
    Process(Box<process::ProcessLab>),
    Docker(docker::DockerLab),
    Proxmox(Box<proxmox::ProxmoxLab>),
}

impl Lab {
    pub fn driver(&self) -> LabDriver {
        match self {
            Self::Process(_) => LabDriver::Process,
            Self::Docker(_) => LabDriver::Docker,
            Self::Proxmox(_) => LabDriver::Proxmox,
        }
    }

    pub fn agent_wiring(&self) -> AgentWiring {
        match self {
            Self::Process(lab) => lab.agent_wiring(),
            Self::Docker(lab) => lab.agent_wiring(),
            Self::Proxmox(lab) => lab.agent_wiring(),
        }
    }

    /// Everything that must exist before the inventory baseline (Docker: the locally built
    /// lab image). Idempotent.
    pub async fn prepare(&mut self) -> Result<(), LabError> {
        match self {
            Self::Process(lab) => lab.prepare().await,
            Self::Docker(lab) => lab.prepare().await,
            Self::Proxmox(lab) => lab.prepare().await,
        }
    }

    pub async fn inventory(&self) -> Result<Inventory, LabError> {
        match self {
            Self::Process(lab) => lab.inventory().await,
            Self::Docker(lab) => lab.inventory().await,
            Self::Proxmox(lab) => lab.inventory().await,
        }
    }

    pub async fn provision(&mut self) -> Result<Vec<Provisioned>, LabError> {
        match self {
            Self::Process(lab) => lab.provision().await,
            Self::Docker(lab) => lab.provision().await,
            Self::Proxmox(lab) => lab.provision().await,
        }
    }

    /// The value `predicate.probe` reads on `predicate.target` now.
    pub async fn probe(&self, predicate: &Predicate) -> Result<Value, LabError> {
        match self {
            Self::Process(lab) => lab.probe(predicate).await,
            Self::Docker(lab) => lab.probe(predicate).await,
            Self::Proxmox(lab) => lab.probe(predicate).await,
        }
    }

    pub async fn inject(&mut self, fault: &Fault) -> Result<(), LabError> {
        match self {
            Self::Process(lab) => lab.inject(fault).await,
            Self::Docker(lab) => lab.inject(fault).await,
            Self::Proxmox(lab) => lab.inject(fault).await,
        }
    }

    pub async fn revert(&mut self, fault: &Fault) -> Result<(), LabError> {
        match self {
            Self::Process(lab) => lab.revert(fault).await,
            Self::Docker(lab) => lab.revert(fault).await,
            Self::Proxmox(lab) => lab.revert(fault).await,
        }
    }

    /// Removes everything carrying the run label; returns what it had to do (a second pass
    /// must return nothing).
    pub async fn cleanup(&mut self) -> Result<Vec<String>, LabError> {
        match self {
            Self::Process(lab) => lab.cleanup().await,
            Self::Docker(lab) => lab.cleanup().await,
            Self::Proxmox(lab) => lab.cleanup().await,
        }
    }
}

/// What in `manifest` the live labs cannot run, one `<field path>: <reason>` line each; empty
/// when a lab can run it. Validation accepts every one of these, because upstream's schema
/// allows them; the runner refuses such a scenario with `unsupported_by_lab` before it touches
/// a lab, and the labs refuse them again if called anyway.
pub fn unrunnable(manifest: &Manifest) -> Vec<String> {
    match manifest.lab.driver {
        LabDriver::Replay => vec![
            "lab.driver: a 'replay' scenario has no live lab; `replay` and `verify-replay` score recorded runs"
                .to_owned(),
        ],
        // Validation already refuses everything the process lab cannot do.
        LabDriver::Process | LabDriver::Proxmox => Vec::new(),
        LabDriver::Docker => docker::unrunnable(manifest),
    }
}

/// Whether `observed` satisfies `operator value`. Numbers compare as numbers; `in` takes an
/// array of accepted values; anything else compares as JSON values.
pub fn holds(operator: Operator, observed: &Value, expected: &Value) -> bool {
    let numbers = observed.as_f64().zip(expected.as_f64());
    match operator {
        Operator::Eq => observed == expected || numbers.is_some_and(|(a, b)| a == b),
        Operator::NotEq => !(observed == expected || numbers.is_some_and(|(a, b)| a == b)),
        Operator::Gte => numbers.is_some_and(|(a, b)| a >= b),
        Operator::Lte => numbers.is_some_and(|(a, b)| a <= b),
        Operator::Gt => numbers.is_some_and(|(a, b)| a > b),
        Operator::Lt => numbers.is_some_and(|(a, b)| a < b),
        Operator::In => expected
            .as_array()
            .is_some_and(|values| values.iter().any(|v| v == observed)),
    }
}

/// Inventory entries in `after` but not `before` (`+`) and the reverse (`-`).
pub fn inventory_diff(before: &Inventory, after: &Inventory) -> Vec<String> {
    let added = after.difference(before).map(|e| format!("+ {e}"));
    let missing = before.difference(after).map(|e| format!("- {e}"));
    added.chain(missing).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn predicates_compare_numbers_as_numbers_and_in_takes_a_list() {
        assert!(holds(Operator::Eq, &json!("healthy"), &json!("healthy")));
        assert!(!holds(Operator::Eq, &json!("unhealthy"), &json!("healthy")));
        assert!(holds(Operator::Eq, &json!(0), &json!(0.0)));
        assert!(holds(Operator::Gte, &json!(3), &json!(3)));
        assert!(!holds(Operator::Gt, &json!(3), &json!(3)));
        assert!(!holds(Operator::Gte, &json!("3"), &json!(3)));
        assert!(holds(
            Operator::In,
            &json!("exited"),
            &json!(["exited", "stopped"])
        ));
        assert!(holds(Operator::NotEq, &json!(true), &json!(false)));
    }

    #[test]
    fn inventory_diff_names_what_appeared_and_what_went() {
        let before: Inventory = ["a".to_owned(), "b".to_owned()].into();
        let after: Inventory = ["b".to_owned(), "c".to_owned()].into();
        assert_eq!(inventory_diff(&before, &after), vec!["+ c", "- a"]);
        assert!(inventory_diff(&before, &before).is_empty());
    }
}
