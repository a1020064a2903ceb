//! Bus errors and the typed error reply.

use pulse_capabilities::ErrorCode;
use serde::{Deserialize, Serialize};

use crate::envelope::{EnvelopeError, Message};
use crate::subjects::SubjectError;

/// The reply a responder sends instead of a typed reply. Travels with `Pulse-Status: error`;
/// the requester gets it back as [`BusError::Remote`].
///
/// The code is one of the stable error-code table ([`ErrorCode`]); a reply whose code is not in
/// the table does not decode as an `ErrorReply` (the requester sees
/// [`BusError::UnknownErrorCode`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ErrorReply {
    pub code: ErrorCode,
    pub message: String,
}

impl ErrorReply {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl Message for ErrorReply {
    const TYPE: &'static str = "pulse.error_reply";
}

/// An error that answers a request: its code is the one the requester receives, its message
/// (`Display`) the text. Every service's handler error implements it, so no handler names a code
/// as a string.
pub trait CodedError: std::fmt::Display {
    fn code(&self) -> ErrorCode;

    /// The reply this error answers with: its code and its message.
    fn into_reply(self) -> ErrorReply
    where
        Self: Sized,
    {
        ErrorReply::new(self.code(), self.to_string())
    }
}

impl CodedError for ErrorReply {
    fn code(&self) -> ErrorCode {
        self.code
    }

    fn into_reply(self) -> ErrorReply {
        self
    }
}

/// The error reply as it travels, before its code is checked against the table.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct RawErrorReply {
    pub code: String,
    pub message: String,
}

impl Message for RawErrorReply {
    const TYPE: &'static str = ErrorReply::TYPE;
}

impl From<RawErrorReply> for BusError {
    fn from(raw: RawErrorReply) -> Self {
        match ErrorCode::from_code(&raw.code) {
            Some(code) => Self::Remote {
                code,
                message: raw.message,
            },
            None => Self::UnknownErrorCode {
                code: raw.code,
                message: raw.message,
            },
        }
    }
}

/// What can go wrong on the bus.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("request to {subject} timed out")]
    Timeout { subject: String },
    #[error("no responders on {subject}")]
    NoResponders { subject: String },
    /// The responder answered with an error reply.
    #[error("remote error {code}: {message}")]
    Remote { code: ErrorCode, message: String },
    /// The responder answered with an error code that is not in the table (a responder of
    /// another version, or a bug): never mistaken for a code the caller handles.
    #[error("remote error with unknown code {code:?}: {message}")]
    UnknownErrorCode { code: String, message: String },
    #[error("no stream holds subject {subject}")]
    NoStream { subject: String },
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    #[error(transparent)]
    Subject(#[from] SubjectError),
    #[error("nats {op} failed: {source}")]
    Nats {
        op: &'static str,
        #[source]
        source: async_nats::Error,
    },
}

impl BusError {
    pub(crate) fn nats(op: &'static str, source: impl Into<async_nats::Error>) -> Self {
        Self::Nats {
            op,
            source: source.into(),
        }
    }

    /// The remote code, when the responder answered with an error reply.
    pub fn remote_code(&self) -> Option<ErrorCode> {
        match self {
            Self::Remote { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Nobody answered: no responder is subscribed, or none answered in time.
    pub fn is_unanswered(&self) -> bool {
        matches!(self, Self::Timeout { .. } | Self::NoResponders { .. })
    }
}

impl From<ErrorReply> for BusError {
    fn from(reply: ErrorReply) -> Self {
        Self::Remote {
            code: reply.code,
            message: reply.message,
        }
    }
}
