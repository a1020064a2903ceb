//! The process lab: supervised services run by the lab agent.

use serde_json::Value;

use super::{AgentWiring, Inventory, LabError, Provisioned};
use crate::manifest::{Fault, Predicate};

pub struct ProcessLab;

impl ProcessLab {
    pub fn agent_wiring(&self) -> AgentWiring {
        AgentWiring::default()
    }
    pub async fn prepare(&mut self) -> Result<(), LabError> {
        Err(LabError::Unavailable("not built".into()))
    }
    pub async fn inventory(&self) -> Result<Inventory, LabError> {
        Err(LabError::Unavailable("not built".into()))
    }
    pub async fn provision(&mut self) -> Result<Vec<Provisioned>, LabError> {
        Err(LabError::Unavailable("not built".into()))
    }
    pub async fn probe(&self, _predicate: &Predicate) -> Result<Value, LabError> {
        Err(LabError::Unavailable("not built".into()))
    }
    pub async fn inject(&mut self, _fault: &Fault) -> Result<(), LabError> {
        Err(LabError::Unavailable("not built".into()))
    }
    pub async fn revert(&mut self, _fault: &Fault) -> Result<(), LabError> {
        Err(LabError::Unavailable("not built".into()))
    }
    pub async fn cleanup(&mut self) -> Result<Vec<String>, LabError> {
        Err(LabError::Unavailable("not built".into()))
    }
}
