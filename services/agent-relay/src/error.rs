//! Why the relay could not get an agent's answer. Each cause has one stable code
//! ([`RelayError::code`]); the message is what the requester shows.

use pulse_bus::{CodedError, ErrorCode, ErrorReply};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelayError {
    /// The request is malformed (an agent id or action id out of bounds).
    #[error("{0}")]
    InvalidRequest(String),
    /// The agent's session token lacks the scope the request needs.
    #[error("{0}")]
    MissingScope(String),
    /// The agent has no session with any relay replica (or lost it before answering).
    #[error("{0}")]
    NotConnected(String),
    /// The agent did not answer in time.
    #[error("{0}")]
    Timeout(String),
    /// The agent answered with a refusal.
    #[error("the agent refused: {0}")]
    Refused(String),
    /// Too many requests for this agent.
    #[error("{0}")]
    RateLimited(String),
    /// The agent's answer exceeded the relay's bound.
    #[error("{0}")]
    ResponseTooLarge(String),
    /// The agent answered with a message of the wrong kind.
    #[error("the agent answered with an unexpected message ({0})")]
    Unexpected(&'static str),
    /// The hop to the replica holding the agent's session failed on the bus.
    #[error("the message bus failed: {0}")]
    Bus(String),
    /// The replica holding the agent's session answered with this error; it keeps its code.
    #[error("{message}")]
    Forwarded { code: ErrorCode, message: String },
}

impl RelayError {
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::InvalidRequest(_) => ErrorCode::InvalidRequest,
            Self::MissingScope(_) => ErrorCode::MissingScope,
            Self::NotConnected(_) => ErrorCode::AgentNotConnected,
            Self::Timeout(_) => ErrorCode::AgentTimeout,
            Self::Refused(_) => ErrorCode::AgentRefused,
            Self::RateLimited(_) => ErrorCode::RateLimited,
            Self::ResponseTooLarge(_) => ErrorCode::AgentResponseTooLarge,
            Self::Unexpected(_) => ErrorCode::InternalError,
            Self::Bus(_) => ErrorCode::ServiceUnavailable,
            Self::Forwarded { code, .. } => *code,
        }
    }
}

impl CodedError for RelayError {
    fn code(&self) -> ErrorCode {
        RelayError::code(self)
    }
}

impl From<ErrorReply> for RelayError {
    fn from(reply: ErrorReply) -> Self {
        Self::Forwarded {
            code: reply.code,
            message: reply.message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reply_code_is_declared_and_documented() {
        let published = include_str!("../../../docs/api/errors.md");
        let m = || "m".to_owned();
        for error in [
            RelayError::InvalidRequest(m()),
            RelayError::MissingScope(m()),
            RelayError::NotConnected(m()),
            RelayError::Timeout(m()),
            RelayError::Refused(m()),
            RelayError::RateLimited(m()),
            RelayError::ResponseTooLarge(m()),
            RelayError::Unexpected("hello"),
            RelayError::Bus(m()),
        ] {
            assert!(
                pulse_bus::relay_api::RELAY_ERRORS.contains(&error.code()),
                "{}",
                error.code()
            );
            assert!(published.contains(&format!("`{}`", error.code().code())));
        }
    }
}
