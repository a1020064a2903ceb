//! `GET /api/audit/verify`: the verification of the tenant's hash-chained audit log.

use serde::{Deserialize, Serialize};

/// Why a row breaks the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChainBreak {
    /// A sequence number is missing (a row was deleted).
    MissingRow,
    /// The row does not chain from the previous row's hash.
    PrevHashMismatch,
    /// The row's content no longer hashes to its stored hash (it was altered).
    RowHashMismatch,
    /// The head says the chain is longer or ends elsewhere (rows removed from the end).
    HeadMismatch,
}

/// The verification report as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VerifyView {
    pub ok: bool,
    /// Rows verified, in sequence order, before the first broken one (if any).
    pub entries: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_broken_seq: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<ChainBreak>,
}
