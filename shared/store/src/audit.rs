//! The per-tenant hash-chained, append-only audit log.
//!
//! `row_hash = sha256(prev_hash || canonical_json(row))` where the row is the JSON object
//! `{tenant_id, seq, occurred_at, actor, kind, subject, payload}` in RFC 8785 form. The first
//! row of a tenant chains from 32 zero bytes. Sequence numbers are gap-free: they come from the
//! tenant's head row, locked by the appending transaction.

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};
use pulse_domain::canonical_json;
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::{StoreError, TenantTx};

pub const GENESIS_HASH: [u8; 32] = [0; 32];

/// What to record.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    /// Who did it: `user:<id>`, `token:<id>`, `service:<name>`.
    pub actor: String,
    /// What happened, dotted: `token.created`, `action.approved`.
    pub kind: String,
    /// What it happened to: an id.
    pub subject: String,
    pub payload: Value,
}

/// A stored audit row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRecord {
    pub seq: i64,
    pub occurred_at: DateTime<Utc>,
    pub actor: String,
    pub kind: String,
    pub subject: String,
    pub payload: Value,
    #[serde(with = "hex_bytes")]
    pub prev_hash: Vec<u8>,
    #[serde(with = "hex_bytes")]
    pub row_hash: Vec<u8>,
}

mod hex_bytes {
    pub fn serialize<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(bytes))
    }
}

fn canonical_row(
    tenant: &str,
    seq: i64,
    occurred_at: &DateTime<Utc>,
    entry: &AuditEntry,
) -> Result<Vec<u8>, StoreError> {
    let row = json!({
        "tenant_id": tenant,
        "seq": seq,
        "occurred_at": occurred_at.to_rfc3339_opts(SecondsFormat::Micros, true),
        "actor": entry.actor,
        "kind": entry.kind,
        "subject": entry.subject,
        "payload": entry.payload,
    });
    Ok(canonical_json::canonicalize(&row)?)
}

/// The chain rule, in one place.
pub fn chain_hash(prev_hash: &[u8], canonical_row: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(prev_hash);
    hasher.update(canonical_row);
    hasher.finalize().into()
}

/// Appends one entry to the tenant's chain inside the caller's transaction.
pub async fn append(tx: &TenantTx, entry: &AuditEntry) -> Result<AuditRecord, StoreError> {
    let tenant = tx.tenant().as_str();
    let client = tx.client();
    // Creates the head on first use and, either way, locks it for this transaction: the
    // no-op update takes the row lock that serializes appenders.
    let lock_head = client
        .prepare_cached(
            "INSERT INTO audit_heads (tenant_id, seq, head_hash) VALUES ($1, 0, $2)
             ON CONFLICT (tenant_id) DO UPDATE SET seq = audit_heads.seq
             RETURNING seq, head_hash",
        )
        .await?;
    let head = client
        .query_one(&lock_head, &[&tenant, &GENESIS_HASH.as_slice()])
        .await?;
    let (head_seq, prev_hash): (i64, Vec<u8>) = (head.get(0), head.get(1));
    let seq = head_seq + 1;
    // Postgres keeps microseconds; hash exactly what will be read back.
    let occurred_at = Utc::now().trunc_subsecs(6);
    let canonical = canonical_row(tenant, seq, &occurred_at, entry)?;
    let row_hash = chain_hash(&prev_hash, &canonical);
    let insert = client
        .prepare_cached(
            "WITH appended AS (
                 INSERT INTO audit_events
                     (tenant_id, seq, occurred_at, actor, kind, subject, payload, prev_hash, row_hash)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                 RETURNING seq, row_hash
             )
             UPDATE audit_heads SET seq = appended.seq, head_hash = appended.row_hash
             FROM appended WHERE audit_heads.tenant_id = $1",
        )
        .await?;
    client
        .execute(
            &insert,
            &[
                &tenant,
                &seq,
                &occurred_at,
                &entry.actor,
                &entry.kind,
                &entry.subject,
                &entry.payload,
                &prev_hash,
                &row_hash.as_slice(),
            ],
        )
        .await?;
    Ok(AuditRecord {
        seq,
        occurred_at,
        actor: entry.actor.clone(),
        kind: entry.kind.clone(),
        subject: entry.subject.clone(),
        payload: entry.payload.clone(),
        prev_hash,
        row_hash: row_hash.to_vec(),
    })
}

/// Rows in sequence order, from `after_seq` (exclusive), at most `limit`.
pub async fn list(
    tx: &TenantTx,
    after_seq: i64,
    limit: i64,
) -> Result<Vec<AuditRecord>, StoreError> {
    let rows = tx
        .client()
        .query(
            "SELECT seq, occurred_at, actor, kind, subject, payload, prev_hash, row_hash
             FROM audit_events WHERE seq > $1 ORDER BY seq LIMIT $2",
            &[&after_seq, &limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| AuditRecord {
            seq: row.get(0),
            occurred_at: row.get(1),
            actor: row.get(2),
            kind: row.get(3),
            subject: row.get(4),
            payload: row.get(5),
            prev_hash: row.get(6),
            row_hash: row.get(7),
        })
        .collect())
}

/// Why a row breaks the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BrokenRow {
    pub seq: i64,
    pub reason: ChainBreak,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    pub rows_checked: u64,
    pub first_broken: Option<BrokenRow>,
}

impl VerifyReport {
    pub fn is_intact(&self) -> bool {
        self.first_broken.is_none()
    }
}

const VERIFY_BATCH: i64 = 1_000;

/// Recomputes the tenant's chain and names the first broken row.
pub async fn verify(tx: &TenantTx) -> Result<VerifyReport, StoreError> {
    let tenant = tx.tenant().as_str().to_owned();
    let mut expected_prev = GENESIS_HASH.to_vec();
    let mut expected_seq = 1_i64;
    let mut rows_checked = 0_u64;
    loop {
        let batch = list(tx, expected_seq - 1, VERIFY_BATCH).await?;
        if batch.is_empty() {
            break;
        }
        for record in batch {
            if record.seq != expected_seq {
                return broken(rows_checked, expected_seq, ChainBreak::MissingRow);
            }
            if record.prev_hash != expected_prev {
                return broken(rows_checked, record.seq, ChainBreak::PrevHashMismatch);
            }
            let entry = AuditEntry {
                actor: record.actor,
                kind: record.kind,
                subject: record.subject,
                payload: record.payload,
            };
            let canonical = canonical_row(&tenant, record.seq, &record.occurred_at, &entry)?;
            if chain_hash(&record.prev_hash, &canonical).as_slice() != record.row_hash.as_slice() {
                return broken(rows_checked, record.seq, ChainBreak::RowHashMismatch);
            }
            rows_checked += 1;
            expected_prev = record.row_hash;
            expected_seq += 1;
        }
    }
    let head = tx
        .client()
        .query_opt(
            "SELECT seq, head_hash FROM audit_heads WHERE tenant_id = $1",
            &[&tenant],
        )
        .await?;
    let (head_seq, head_hash) = match head {
        Some(row) => (row.get::<_, i64>(0), row.get::<_, Vec<u8>>(1)),
        None => (0, GENESIS_HASH.to_vec()),
    };
    let last_seq = expected_seq - 1;
    if head_seq != last_seq || head_hash != expected_prev {
        // Rows after `last_seq` were removed, or the head was rewritten.
        return broken(rows_checked, last_seq + 1, ChainBreak::HeadMismatch);
    }
    Ok(VerifyReport {
        rows_checked,
        first_broken: None,
    })
}

fn broken(rows_checked: u64, seq: i64, reason: ChainBreak) -> Result<VerifyReport, StoreError> {
    Ok(VerifyReport {
        rows_checked,
        first_broken: Some(BrokenRow { seq, reason }),
    })
}
