//! Governed actions (ARCHITECTURE §4 Action): the plan and its hash, the action state machine and
//! the policy decision. Pure: the action-broker and the store apply these rules.

pub mod capability;
pub mod fix_outcome;
pub mod plan;
pub mod policy;
pub mod state;
pub mod verification;

pub use capability::{Capability, RiskLevel};
pub use fix_outcome::{FixOutcome, apply_fix_outcome};
pub use plan::{
    ActionPlan, ApprovalFloor, MAX_PARAMS_BYTES, MAX_REASON_CHARS, PlanError, PlanIdentity,
    plan_hash, resource_version, validate_request,
};
pub use policy::{
    ExecutionCheck, LockState, PolicyDecision, PolicyInput, PolicyOutcome, ReasonCode, Severity,
    check_execution, decide,
};
pub use state::{ActionEvent, ActionState, IllegalTransition, transition};
pub use verification::Verification;
