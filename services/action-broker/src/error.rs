//! Why the action-broker refused or could not answer a request. Each cause has one stable code
//! ([`BrokerError::code`]); the message is the text the requester (and the API) shows.

use pulse_bus::{CodedError, ErrorCode};
use pulse_domain::action::ReasonCode;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerError {
    /// The action or resource store could not be reached.
    #[error("the {what} store is unavailable; retry shortly")]
    StoreUnavailable { what: &'static str },
    /// The message bus failed (not a service's answer).
    #[error("the message bus is unavailable; retry shortly")]
    BusUnavailable,
    /// The plan hash could not be computed: a fault of the plan, not of the store.
    #[error("the plan could not be hashed: {0}")]
    PlanHash(String),
    #[error("{0}")]
    ActionNotFound(String),
    #[error("{0}")]
    ResourceNotFound(String),
    #[error("{0}")]
    AmbiguousResource(String),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    DecisionNotAllowed(String),
    #[error("{0}")]
    NotApproved(String),
    #[error("{0}")]
    AlreadyExecuting(String),
    #[error("{0}")]
    ExecutionFinal(String),
    #[error("{0}")]
    StepUpUnavailable(String),
    #[error("{0}")]
    SelfApprovalForbidden(String),
    #[error("{0}")]
    DecisionRequiresHuman(String),
    #[error("{0}")]
    PlanExpired(String),
    /// The policy refused to run the approved plan right before execution.
    #[error("{message}")]
    Refused { reason: ReasonCode, message: String },
}

impl BrokerError {
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::StoreUnavailable { .. } | Self::BusUnavailable => ErrorCode::ServiceUnavailable,
            Self::PlanHash(_) => ErrorCode::InternalError,
            Self::ActionNotFound(_) => ErrorCode::ActionNotFound,
            Self::ResourceNotFound(_) => ErrorCode::NotFound,
            Self::AmbiguousResource(_) => ErrorCode::AmbiguousResource,
            Self::InvalidRequest(_) => ErrorCode::InvalidActionRequest,
            Self::Conflict(_) => ErrorCode::Conflict,
            Self::DecisionNotAllowed(_) => ErrorCode::ActionDecisionNotAllowed,
            Self::NotApproved(_) => ErrorCode::ActionNotApproved,
            Self::AlreadyExecuting(_) => ErrorCode::ActionAlreadyExecuting,
            Self::ExecutionFinal(_) => ErrorCode::ActionExecutionFinal,
            Self::StepUpUnavailable(_) => ErrorCode::ActionStepUpUnavailable,
            Self::SelfApprovalForbidden(_) => ErrorCode::ActionSelfApprovalForbidden,
            Self::DecisionRequiresHuman(_) => ErrorCode::ActionDecisionRequiresHuman,
            Self::PlanExpired(_) => ErrorCode::ActionPlanExpired,
            Self::Refused { reason, .. } => refusal_code(*reason),
        }
    }
}

impl CodedError for BrokerError {
    fn code(&self) -> ErrorCode {
        BrokerError::code(self)
    }
}

/// The refusal code of an execution-time reason code.
pub fn refusal_code(reason: ReasonCode) -> ErrorCode {
    match reason {
        ReasonCode::PlanDrift => ErrorCode::ActionPlanDrift,
        ReasonCode::ResourceRemediationLocked => ErrorCode::ResourceRemediationLocked,
        ReasonCode::PlanExpired => ErrorCode::ActionPlanExpired,
        _ => ErrorCode::ActionRefused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_variant() -> Vec<BrokerError> {
        let m = || "m".to_owned();
        vec![
            BrokerError::StoreUnavailable { what: "action" },
            BrokerError::BusUnavailable,
            BrokerError::PlanHash(m()),
            BrokerError::ActionNotFound(m()),
            BrokerError::ResourceNotFound(m()),
            BrokerError::AmbiguousResource(m()),
            BrokerError::InvalidRequest(m()),
            BrokerError::Conflict(m()),
            BrokerError::DecisionNotAllowed(m()),
            BrokerError::NotApproved(m()),
            BrokerError::AlreadyExecuting(m()),
            BrokerError::ExecutionFinal(m()),
            BrokerError::StepUpUnavailable(m()),
            BrokerError::SelfApprovalForbidden(m()),
            BrokerError::DecisionRequiresHuman(m()),
            BrokerError::PlanExpired(m()),
            BrokerError::Refused {
                reason: ReasonCode::PlanDrift,
                message: m(),
            },
            BrokerError::Refused {
                reason: ReasonCode::ResourceRemediationLocked,
                message: m(),
            },
            BrokerError::Refused {
                reason: ReasonCode::PlanExpired,
                message: m(),
            },
            BrokerError::Refused {
                reason: ReasonCode::MonitorMode,
                message: m(),
            },
        ]
    }

    #[test]
    fn every_reply_code_is_declared_and_documented() {
        use pulse_bus::actions_api::ACTION_BROKER_ERRORS;
        let published = include_str!("../../../docs/api/errors.md");
        let mut seen = std::collections::HashSet::new();
        for error in every_variant() {
            let code = error.code();
            assert!(
                ACTION_BROKER_ERRORS.contains(&code),
                "{code} is not declared"
            );
            assert!(
                published.contains(&format!("`{}`", code.code())),
                "{code} undocumented"
            );
            seen.insert(code);
        }
        assert_eq!(
            seen.len(),
            ACTION_BROKER_ERRORS.len(),
            "a declared code no error has"
        );
    }

    #[test]
    fn a_hashing_failure_is_not_a_store_outage() {
        let error = BrokerError::PlanHash("params are not canonical JSON".to_owned());
        assert_eq!(error.code(), ErrorCode::InternalError);
        assert!(!error.to_string().contains("unavailable"));
    }
}
