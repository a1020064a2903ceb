//! The Docker lab over the Engine API. (Interface; the Docker lab work owns it.)

use serde_json::Value;

use super::{AgentWiring, Inventory, LabError, Provisioned};
use crate::manifest::{Fault, Predicate};

pub struct DockerLab;

impl DockerLab {
    pub fn new(
        _manifest: crate::manifest::Manifest,
        _catalogue_root: std::path::PathBuf,
        _run_token: String,
        _docker_host: String,
        _allow_shared_host: bool,
    ) -> Result<Self, LabError> {
        Err(LabError::Unavailable("not built".into()))
    }
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
