//! The typed capabilities an action may run. The action model owns them; the agent wire protocol
//! carries their names ([`crate::agent_protocol::Command`]).

use serde::{Deserialize, Serialize};

/// The typed capabilities a command may name. Nothing else can be executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum Capability {
    #[serde(rename = "service.start")]
    ServiceStart,
    #[serde(rename = "service.stop")]
    ServiceStop,
    #[serde(rename = "service.restart")]
    ServiceRestart,
    #[serde(rename = "docker.container.start")]
    ContainerStart,
    #[serde(rename = "docker.container.stop")]
    ContainerStop,
    #[serde(rename = "docker.container.restart")]
    ContainerRestart,
}

impl Capability {
    pub const ALL: [Capability; 6] = [
        Capability::ServiceStart,
        Capability::ServiceStop,
        Capability::ServiceRestart,
        Capability::ContainerStart,
        Capability::ContainerStop,
        Capability::ContainerRestart,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::ServiceStart => "service.start",
            Capability::ServiceStop => "service.stop",
            Capability::ServiceRestart => "service.restart",
            Capability::ContainerStart => "docker.container.start",
            Capability::ContainerStop => "docker.container.stop",
            Capability::ContainerRestart => "docker.container.restart",
        }
    }

    /// The capability of a wire name; `None` for a name this build does not know.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
