//! Why the verifier could not judge a request. Each cause has one stable code.

use pulse_bus::{CodedError, ErrorCode};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifierError {
    /// The request is malformed (an empty field, a key with no deterministic verifier).
    #[error("{0}")]
    Invalid(String),
    /// The inventory could not be read, so no judgement was made.
    #[error("the inventory could not be read")]
    InventoryUnavailable,
}

impl VerifierError {
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Invalid(_) => ErrorCode::InvalidRequest,
            Self::InventoryUnavailable => ErrorCode::ServiceUnavailable,
        }
    }
}

impl CodedError for VerifierError {
    fn code(&self) -> ErrorCode {
        VerifierError::code(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reply_code_is_declared_and_documented() {
        let published = include_str!("../../../docs/api/errors.md");
        for error in [
            VerifierError::Invalid("x".to_owned()),
            VerifierError::InventoryUnavailable,
        ] {
            assert!(pulse_bus::verify_api::VERIFIER_ERRORS.contains(&error.code()));
            assert!(published.contains(&format!("`{}`", error.code().code())));
        }
    }
}
