//! Bus errors and the typed error reply.

use serde::{Deserialize, Serialize};

use crate::envelope::{EnvelopeError, Message};
use crate::subjects::SubjectError;

/// The reply a responder sends instead of a typed reply. Travels with `Pulse-Status: error`;
/// the requester gets it back as [`BusError::Remote`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ErrorReply {
    /// A machine code from the error-code table, e.g. `not_found`.
    pub code: String,
    pub message: String,
}

impl ErrorReply {
    /// The request could not be decoded (wrong type, schema or body).
    pub const BAD_REQUEST: &'static str = "bad_request";
    /// The handler failed without saying why (it panicked).
    pub const INTERNAL: &'static str = "internal";

    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl Message for ErrorReply {
    const TYPE: &'static str = "pulse.error_reply";
}

/// What can go wrong on the bus.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("request to {subject} timed out")]
    Timeout { subject: String },
    #[error("no responders on {subject}")]
    NoResponders { subject: String },
    #[error("remote error {code}: {message}")]
    Remote { code: String, message: String },
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
}

impl From<ErrorReply> for BusError {
    fn from(reply: ErrorReply) -> Self {
        Self::Remote {
            code: reply.code,
            message: reply.message,
        }
    }
}
