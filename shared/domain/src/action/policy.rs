//! The action policy: Patrol mode x severity x approval floor x Autopilot acknowledgement x
//! remediation lock -> a decision with reason codes, at planning time ([`decide`]), and the
//! checks an approved action must still pass right before it runs ([`check_execution`]).
//!
//! | mode | severity | floor `none` | floor `admin` |
//! |---|---|---|---|
//! | `monitor`  | any      | refused (`monitor_mode`) | refused |
//! | `approval` | any      | needs approval | needs approval |
//! | `assisted` | warning  | auto-authorized | needs approval |
//! | `assisted` | critical | needs approval | needs approval |
//! | `full`     | any, acknowledged | auto-authorized | needs approval |
//! | `full`     | any, no current acknowledgement | needs approval (as `approval`) | needs approval |
//!
//! Floors `dry_run_only` and `mfa` are refused in every mode (`mfa`: step-up is unavailable in
//! this build, so it is never approved). A locked resource (`never_auto_remediate`) is refused; a
//! lock state that could not be read fails closed: the plan needs a human approval.

use serde::{Deserialize, Serialize};

use super::plan::ApprovalFloor;
use crate::ai_settings::AutonomyLevel;

/// How urgent the problem an action fixes is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Warning,
    Critical,
}

impl Severity {
    pub const ALL: [Severity; 2] = [Severity::Warning, Severity::Critical];

    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }

    /// Sort rank of the pending queue: critical first.
    pub fn risk_rank(self) -> i16 {
        match self {
            Severity::Critical => 0,
            Severity::Warning => 1,
        }
    }
}

/// The resource's remediation lock as far as the broker could read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum LockState {
    Unlocked,
    /// `never_auto_remediate`: nothing runs on it, approved or not.
    Locked,
    /// Could not be read; fails closed unless a human approved.
    Unknown,
}

impl LockState {
    pub const ALL: [LockState; 3] = [LockState::Unlocked, LockState::Locked, LockState::Unknown];
}

/// Why the policy decided what it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    MonitorMode,
    DryRunOnly,
    StepUpUnavailable,
    ResourceRemediationLocked,
    LockStateUnknown,
    FloorRequiresApproval,
    ApprovalMode,
    CriticalNeedsApproval,
    AssistedWarning,
    AutopilotAcknowledged,
    AutopilotNotAcknowledged,
    CapabilityNotAdvertised,
    PlanDrift,
    PlanExpired,
    NotApproved,
}

impl ReasonCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::MonitorMode => "monitor_mode",
            ReasonCode::DryRunOnly => "dry_run_only",
            ReasonCode::StepUpUnavailable => "step_up_unavailable",
            ReasonCode::ResourceRemediationLocked => "resource_remediation_locked",
            ReasonCode::LockStateUnknown => "lock_state_unknown",
            ReasonCode::FloorRequiresApproval => "floor_requires_approval",
            ReasonCode::ApprovalMode => "approval_mode",
            ReasonCode::CriticalNeedsApproval => "critical_needs_approval",
            ReasonCode::AssistedWarning => "assisted_warning",
            ReasonCode::AutopilotAcknowledged => "autopilot_acknowledged",
            ReasonCode::AutopilotNotAcknowledged => "autopilot_not_acknowledged",
            ReasonCode::CapabilityNotAdvertised => "capability_not_advertised",
            ReasonCode::PlanDrift => "plan_drift",
            ReasonCode::PlanExpired => "plan_expired",
            ReasonCode::NotApproved => "not_approved",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum PolicyOutcome {
    /// Never runs: the plan is rejected.
    Refused,
    /// Waits for a human decision.
    NeedsApproval,
    /// Approved by policy.
    AutoAuthorized,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PolicyDecision {
    pub outcome: PolicyOutcome,
    pub reason_codes: Vec<ReasonCode>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyInput {
    pub mode: AutonomyLevel,
    pub severity: Severity,
    pub floor: ApprovalFloor,
    /// A current (latest version) human Autopilot acknowledgement exists.
    pub acknowledged: bool,
    pub lock: LockState,
}

/// The planning-time decision (table in the module documentation).
pub fn decide(input: &PolicyInput) -> PolicyDecision {
    use AutonomyLevel as M;
    let refused = |code| PolicyDecision {
        outcome: PolicyOutcome::Refused,
        reason_codes: vec![code],
    };
    if input.mode == M::Monitor {
        return refused(ReasonCode::MonitorMode);
    }
    match input.floor {
        ApprovalFloor::Mfa => return refused(ReasonCode::StepUpUnavailable),
        ApprovalFloor::DryRunOnly => return refused(ReasonCode::DryRunOnly),
        ApprovalFloor::None | ApprovalFloor::Admin => {}
    }
    if input.lock == LockState::Locked {
        return refused(ReasonCode::ResourceRemediationLocked);
    }
    let mut needs = Vec::new();
    let mut auto = Vec::new();
    if input.floor == ApprovalFloor::Admin {
        needs.push(ReasonCode::FloorRequiresApproval);
    }
    if input.lock == LockState::Unknown {
        needs.push(ReasonCode::LockStateUnknown);
    }
    match (input.mode, input.severity, input.acknowledged) {
        (M::Approval, _, _) => needs.push(ReasonCode::ApprovalMode),
        (M::Assisted, Severity::Critical, _) => needs.push(ReasonCode::CriticalNeedsApproval),
        (M::Assisted, Severity::Warning, _) => auto.push(ReasonCode::AssistedWarning),
        (M::Full, _, true) => auto.push(ReasonCode::AutopilotAcknowledged),
        (M::Full, _, false) => needs.push(ReasonCode::AutopilotNotAcknowledged),
        (M::Monitor, _, _) => unreachable!("monitor returned above"),
    }
    if needs.is_empty() {
        PolicyDecision {
            outcome: PolicyOutcome::AutoAuthorized,
            reason_codes: auto,
        }
    } else {
        PolicyDecision {
            outcome: PolicyOutcome::NeedsApproval,
            reason_codes: needs,
        }
    }
}

/// What an approved action must still satisfy right before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionCheck<'a> {
    pub mode: AutonomyLevel,
    pub lock: LockState,
    /// A human approved it (rather than policy).
    pub human_approved: bool,
    /// The agent still offers the capability (it is connected and the build knows the name).
    pub capability_advertised: bool,
    pub expired: bool,
    /// The stored plan hash and the one recomputed now.
    pub stored_hash: &'a str,
    pub recomputed_hash: &'a str,
}

/// `Ok` when the action may run; otherwise the reason code and a message whose prefix is the
/// code followed by `:` (the audit row and the failure reason carry it).
pub fn check_execution(check: &ExecutionCheck<'_>) -> Result<(), (ReasonCode, String)> {
    if check.stored_hash != check.recomputed_hash {
        return Err((
            ReasonCode::PlanDrift,
            format!(
                "plan_drift: plan hash {} no longer matches the plan ({})",
                check.stored_hash, check.recomputed_hash
            ),
        ));
    }
    if check.expired {
        return Err((
            ReasonCode::PlanExpired,
            "plan_expired: the plan expired before it ran".to_owned(),
        ));
    }
    if check.mode == AutonomyLevel::Monitor {
        return Err((
            ReasonCode::MonitorMode,
            "monitor_mode: Patrol is in monitor mode; nothing is executed".to_owned(),
        ));
    }
    match check.lock {
        LockState::Locked => {
            return Err((
                ReasonCode::ResourceRemediationLocked,
                "resource_remediation_locked: the resource is marked never_auto_remediate"
                    .to_owned(),
            ));
        }
        LockState::Unknown if !check.human_approved => {
            return Err((
                ReasonCode::LockStateUnknown,
                "lock_state_unknown: the remediation lock could not be read and no human approved"
                    .to_owned(),
            ));
        }
        LockState::Unknown | LockState::Unlocked => {}
    }
    if !check.capability_advertised {
        return Err((
            ReasonCode::CapabilityNotAdvertised,
            "capability_not_advertised: the agent does not offer this capability now".to_owned(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODES: [AutonomyLevel; 4] = [
        AutonomyLevel::Monitor,
        AutonomyLevel::Approval,
        AutonomyLevel::Assisted,
        AutonomyLevel::Full,
    ];

    /// The module table, restated independently of `decide`.
    fn expected(input: &PolicyInput) -> PolicyOutcome {
        use AutonomyLevel as M;
        use PolicyOutcome as O;
        if input.mode == M::Monitor
            || matches!(input.floor, ApprovalFloor::Mfa | ApprovalFloor::DryRunOnly)
            || input.lock == LockState::Locked
        {
            return O::Refused;
        }
        let policy_auto = match input.mode {
            M::Assisted => input.severity == Severity::Warning,
            M::Full => input.acknowledged,
            _ => false,
        };
        if policy_auto && input.floor == ApprovalFloor::None && input.lock == LockState::Unlocked {
            O::AutoAuthorized
        } else {
            O::NeedsApproval
        }
    }

    #[test]
    fn every_combination_follows_the_table() {
        let mut seen = 0;
        for mode in MODES {
            for severity in Severity::ALL {
                for floor in ApprovalFloor::ALL {
                    for acknowledged in [false, true] {
                        for lock in LockState::ALL {
                            let input = PolicyInput {
                                mode,
                                severity,
                                floor,
                                acknowledged,
                                lock,
                            };
                            let decision = decide(&input);
                            assert_eq!(decision.outcome, expected(&input), "{input:?}");
                            assert!(!decision.reason_codes.is_empty(), "{input:?}");
                            seen += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(seen, 4 * 2 * 4 * 2 * 3);
    }

    #[test]
    fn reason_codes_name_the_cause() {
        let base = PolicyInput {
            mode: AutonomyLevel::Full,
            severity: Severity::Critical,
            floor: ApprovalFloor::None,
            acknowledged: false,
            lock: LockState::Unlocked,
        };
        assert_eq!(
            decide(&base).reason_codes,
            vec![ReasonCode::AutopilotNotAcknowledged]
        );
        let mfa = PolicyInput {
            floor: ApprovalFloor::Mfa,
            ..base
        };
        assert_eq!(
            decide(&mfa).reason_codes,
            vec![ReasonCode::StepUpUnavailable]
        );
        let locked = PolicyInput {
            lock: LockState::Locked,
            ..base
        };
        assert_eq!(
            decide(&locked).reason_codes,
            vec![ReasonCode::ResourceRemediationLocked]
        );
        let unknown_admin = PolicyInput {
            lock: LockState::Unknown,
            floor: ApprovalFloor::Admin,
            acknowledged: true,
            ..base
        };
        assert_eq!(
            decide(&unknown_admin).reason_codes,
            vec![
                ReasonCode::FloorRequiresApproval,
                ReasonCode::LockStateUnknown
            ]
        );
        let monitor = PolicyInput {
            mode: AutonomyLevel::Monitor,
            ..base
        };
        assert_eq!(decide(&monitor).reason_codes, vec![ReasonCode::MonitorMode]);
    }

    fn check<'a>(hash: &'a str) -> ExecutionCheck<'a> {
        ExecutionCheck {
            mode: AutonomyLevel::Approval,
            lock: LockState::Unlocked,
            human_approved: true,
            capability_advertised: true,
            expired: false,
            stored_hash: "abc",
            recomputed_hash: hash,
        }
    }

    #[test]
    fn execution_checks_refuse_with_prefixed_messages() {
        assert_eq!(check_execution(&check("abc")), Ok(()));
        let drift = check_execution(&check("abd")).unwrap_err();
        assert_eq!(drift.0, ReasonCode::PlanDrift);
        assert!(drift.1.starts_with("plan_drift:"), "{}", drift.1);

        let locked = check_execution(&ExecutionCheck {
            lock: LockState::Locked,
            ..check("abc")
        })
        .unwrap_err();
        assert_eq!(locked.0, ReasonCode::ResourceRemediationLocked);
        assert!(locked.1.starts_with("resource_remediation_locked:"));

        // Unknown lock: a human approval carries it, a policy authorization does not.
        let unknown = ExecutionCheck {
            lock: LockState::Unknown,
            ..check("abc")
        };
        assert_eq!(check_execution(&unknown), Ok(()));
        let unknown_auto = ExecutionCheck {
            human_approved: false,
            ..unknown
        };
        assert_eq!(
            check_execution(&unknown_auto).unwrap_err().0,
            ReasonCode::LockStateUnknown
        );

        let cases = [
            (
                ExecutionCheck {
                    expired: true,
                    ..check("abc")
                },
                ReasonCode::PlanExpired,
            ),
            (
                ExecutionCheck {
                    mode: AutonomyLevel::Monitor,
                    ..check("abc")
                },
                ReasonCode::MonitorMode,
            ),
            (
                ExecutionCheck {
                    capability_advertised: false,
                    ..check("abc")
                },
                ReasonCode::CapabilityNotAdvertised,
            ),
        ];
        for (case, code) in cases {
            let (got, message) = check_execution(&case).unwrap_err();
            assert_eq!(got, code);
            assert!(
                message.starts_with(&format!("{}:", code.as_str())),
                "{message}"
            );
        }
    }
}
