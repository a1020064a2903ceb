//! The verifier's judgement of an executed action (ACT-05, ACT-07): decided on a fresh
//! observation through the relay, never on the command's output or a model's words.

use serde::{Deserialize, Serialize};

/// Whether an executed action's postcondition holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Verification {
    /// A fresh observation shows the postcondition (e.g. running, healthy, restarted after the
    /// execution).
    Verified,
    /// Fresh observations kept showing the fault until the wait ran out.
    StillFailing,
    /// No fresh observation could decide it (agent unreachable, reading missing, class without
    /// a postcondition). Never counts as verified.
    Inconclusive,
}

impl Verification {
    pub const ALL: [Verification; 3] = [
        Verification::Verified,
        Verification::StillFailing,
        Verification::Inconclusive,
    ];

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == text)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verification::Verified => "verified",
            Verification::StillFailing => "still_failing",
            Verification::Inconclusive => "inconclusive",
        }
    }
}

impl std::fmt::Display for Verification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_are_the_contract_names() {
        for (v, name) in [
            (Verification::Verified, "verified"),
            (Verification::StillFailing, "still_failing"),
            (Verification::Inconclusive, "inconclusive"),
        ] {
            assert_eq!(serde_json::to_value(v).unwrap(), name);
            assert_eq!(v.as_str(), name);
            assert_eq!(Verification::parse(name), Some(v));
        }
        assert_eq!(Verification::parse("unknown"), None);
    }
}
