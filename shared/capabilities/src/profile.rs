//! Execution profiles: the closed set of postures a model run executes under. A profile is
//! decided by the core for each run and never read from a request or a serialized value.

use serde::{Deserialize, Serialize};

/// The interactive Assistant's control level (a configuration value, hence serializable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlLevel {
    /// No write is offered.
    #[default]
    ReadOnly,
    /// `pulse_control type=resource` plans an action; every plan needs approval.
    Controlled,
    /// As `Controlled` for what the model may call; approval policy is decided by the planner.
    Autonomous,
}

impl ControlLevel {
    pub const ALL: &'static [ControlLevel] = &[Self::ReadOnly, Self::Controlled, Self::Autonomous];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read_only",
            Self::Controlled => "controlled",
            Self::Autonomous => "autonomous",
        }
    }

    /// The level named by its wire value; `None` for any other text.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|l| l.as_str() == text)
    }

    /// Whether control tools (the typed action planner) are available at this level.
    pub fn allows_control_tools(self) -> bool {
        !matches!(self, Self::ReadOnly)
    }
}

/// The posture of one model run. Deliberately not `Serialize`/`Deserialize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExecutionProfile {
    /// Patrol Watch: reads plus finding lifecycle writes (`patrol_report_finding`,
    /// `patrol_assess_finding`); `patrol_get_findings` once per run.
    PatrolDetection,
    /// Patrol investigation: reads, `patrol_action_capabilities` and one `patrol_propose_action`.
    PatrolInvestigation,
    /// The interactive Assistant at a control level.
    InteractiveAssistant { control: ControlLevel },
}

impl ExecutionProfile {
    /// Every profile, each control level included.
    pub const ALL: &'static [ExecutionProfile] = &[
        Self::PatrolDetection,
        Self::PatrolInvestigation,
        Self::InteractiveAssistant {
            control: ControlLevel::ReadOnly,
        },
        Self::InteractiveAssistant {
            control: ControlLevel::Controlled,
        },
        Self::InteractiveAssistant {
            control: ControlLevel::Autonomous,
        },
    ];

    /// A stable label (logs, snapshots, audit).
    pub fn label(self) -> &'static str {
        match self {
            Self::PatrolDetection => "patrol_detection",
            Self::PatrolInvestigation => "patrol_investigation",
            Self::InteractiveAssistant { control } => match control {
                ControlLevel::ReadOnly => "assistant_read_only",
                ControlLevel::Controlled => "assistant_controlled",
                ControlLevel::Autonomous => "assistant_autonomous",
            },
        }
    }

    pub fn is_interactive(self) -> bool {
        matches!(self, Self::InteractiveAssistant { .. })
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Self::PatrolDetection => 0,
            Self::PatrolInvestigation => 1,
            Self::InteractiveAssistant { control } => match control {
                ControlLevel::ReadOnly => 2,
                ControlLevel::Controlled => 3,
                ControlLevel::Autonomous => 4,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_distinct_and_match_all() {
        for (i, profile) in ExecutionProfile::ALL.iter().enumerate() {
            assert_eq!(profile.index(), i);
        }
        for level in ControlLevel::ALL {
            assert_eq!(
                serde_json::to_value(level).unwrap(),
                serde_json::Value::String(level.as_str().to_owned())
            );
        }
    }
}
