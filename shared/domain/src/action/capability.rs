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
    /// Start a Proxmox VE guest (VM or container).
    #[serde(rename = "guest.start")]
    GuestStart,
    /// Ask a guest's OS to shut down cleanly, failing (never forcing) past a timeout.
    #[serde(rename = "guest.shutdown")]
    GuestShutdown,
    /// Reboot a guest through its OS.
    #[serde(rename = "guest.reboot")]
    GuestReboot,
    /// Power a guest off at once, as pulling its plug would.
    #[serde(rename = "guest.stop")]
    GuestStop,
}

impl Capability {
    pub const ALL: [Capability; 10] = [
        Capability::ServiceStart,
        Capability::ServiceStop,
        Capability::ServiceRestart,
        Capability::ContainerStart,
        Capability::ContainerStop,
        Capability::ContainerRestart,
        Capability::GuestStart,
        Capability::GuestShutdown,
        Capability::GuestReboot,
        Capability::GuestStop,
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
            Capability::GuestStart => "guest.start",
            Capability::GuestShutdown => "guest.shutdown",
            Capability::GuestReboot => "guest.reboot",
            Capability::GuestStop => "guest.stop",
        }
    }

    /// Powers a guest off (`guest.shutdown`, `guest.stop`): the guest being stopped afterwards
    /// is the command's intent, not a fault.
    pub fn powers_guest_off(self) -> bool {
        matches!(self, Capability::GuestShutdown | Capability::GuestStop)
    }

    /// A Proxmox VE guest's power capability, run by the connector of its cluster rather than
    /// by a host agent.
    pub fn is_guest_power(self) -> bool {
        matches!(
            self,
            Capability::GuestStart
                | Capability::GuestShutdown
                | Capability::GuestReboot
                | Capability::GuestStop
        )
    }

    /// The capability of a wire name; `None` for a name this build does not know.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

/// How much can go wrong when a capability runs, as upstream's `riskLevel` grades it: shown
/// with every catalogue entry so a reviewer sees it before approving.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RiskLevel {
    /// Brings something back; undoing it is the opposite action.
    #[default]
    Low,
    /// Takes something down cleanly, or restarts a whole guest.
    Medium,
    /// Cuts power: the guest's OS gets no chance to flush or close what it holds.
    High,
}

impl RiskLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            RiskLevel::Low => "low",
            RiskLevel::Medium => "medium",
            RiskLevel::High => "high",
        }
    }
}

impl Capability {
    /// The capability's risk: `guest.stop` sits above every other capability.
    pub fn risk(self) -> RiskLevel {
        match self {
            Capability::ServiceStart
            | Capability::ServiceRestart
            | Capability::ContainerStart
            | Capability::ContainerRestart => RiskLevel::Low,
            Capability::ServiceStop
            | Capability::ContainerStop
            | Capability::GuestStart
            | Capability::GuestShutdown
            | Capability::GuestReboot => RiskLevel::Medium,
            Capability::GuestStop => RiskLevel::High,
        }
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
