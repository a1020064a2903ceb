//! Platform connections (migration 0032, ADR 0013): the only reader and writer of
//! `connections`.
//!
//! The token secret is sealed with the master key; the associated data
//! (`pulse-connection|<tenant>|<id>`) binds it to its tenant and connection, so a row copied
//! elsewhere does not open. Only [`secret`] opens it, for the code that talks to the server.
//! Every other read returns the connection without it. Creating and removing a connection are
//! audited with the caller as actor, never with the secret.

use chrono::{DateTime, Utc};
use pulse_domain::connection::{ConnectionKind, ConnectionState, Fingerprint, TokenId};
use serde_json::json;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::audit::{self, AuditEntry};
use crate::settings::{MasterKey, Sealed};
use crate::{StoreError, TenantTx};

/// Connections one tenant may hold.
pub const MAX_CONNECTIONS_PER_TENANT: i64 = 64;

/// Why a connection store call failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionStoreError {
    #[error("a {kind} connection named {name:?} already exists")]
    NameTaken { kind: ConnectionKind, name: String },
    #[error("the token secret of connection {id} cannot be opened: {reason}")]
    Sealing { id: Uuid, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<tokio_postgres::Error> for ConnectionStoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Store(e.into())
    }
}

/// How the server's certificate is trusted (the vocabulary lives in the domain, so the client
/// builds its TLS mode from the stored value in one place: `pulse_proxmox::TlsMode::from_trust`).
pub use pulse_domain::connection::Trust as StoredTls;

/// What the last check or poll of a connection saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    pub state: ConnectionState,
    /// The stable error code of a failure.
    pub code: Option<String>,
    /// What to fix, for every state but `connected`.
    pub cause: Option<String>,
    pub presented: Option<Fingerprint>,
    pub version: Option<String>,
    pub at: DateTime<Utc>,
}

/// A connection to create; the secret is sealed on the way in.
#[derive(Debug, Clone)]
pub struct NewConnection {
    pub kind: ConnectionKind,
    pub name: String,
    pub url: String,
    pub token_id: TokenId,
    pub secret: String,
    pub tls: StoredTls,
    /// How often the connector reads it (10 s to 1 h).
    pub cadence: std::time::Duration,
    /// Whether guest power actions may run on its guests.
    pub guest_actions: bool,
    /// The check made before it was stored.
    pub observed: Observation,
}

/// A stored connection, without its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    pub id: Uuid,
    pub kind: ConnectionKind,
    pub name: String,
    pub url: String,
    pub token_id: TokenId,
    pub tls: StoredTls,
    pub state: ConnectionState,
    pub state_code: Option<String>,
    pub state_cause: Option<String>,
    pub presented_fingerprint: Option<Fingerprint>,
    pub version: Option<String>,
    pub checked_at: Option<DateTime<Utc>>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// How often the connector reads it.
    pub cadence: std::time::Duration,
    /// Whether guest power actions may be planned for and run on its guests (off by default).
    pub guest_actions: bool,
}

impl Connection {
    /// The agent id its connector reports under: `pve.<name>` or `pbs.<name>`.
    pub fn agent_id(&self) -> String {
        format!("{}{}", self.kind.agent_prefix(), self.name)
    }
}

const COLUMNS: &str = "id, kind, name, url, token_id, tls_mode, fingerprint, ca_pem, state, \
     state_code, state_cause, presented_fingerprint, version, checked_at, created_by, created_at, \
     updated_at, cadence_seconds, guest_actions";

fn aad(tenant: &str, id: Uuid) -> Vec<u8> {
    format!("pulse-connection|{tenant}|{id}").into_bytes()
}

fn invalid(what: &str, value: impl std::fmt::Display) -> StoreError {
    StoreError::Invalid(format!("connections: stored {what} {value} cannot be read"))
}

fn from_row(row: &Row) -> Result<Connection, StoreError> {
    let kind: String = row.try_get(1)?;
    let token_id: String = row.try_get(4)?;
    let mode: String = row.try_get(5)?;
    let fingerprint: Option<String> = row.try_get(6)?;
    let ca_pem: Option<String> = row.try_get(7)?;
    let state: String = row.try_get(8)?;
    let presented: Option<String> = row.try_get(11)?;
    let tls = match (mode.as_str(), fingerprint, ca_pem) {
        ("pinned", Some(fp), _) => {
            StoredTls::Pinned(Fingerprint::parse(&fp).map_err(|_| invalid("fingerprint", fp))?)
        }
        ("ca", _, Some(pem)) => StoredTls::Ca(pem),
        ("public", _, _) => StoredTls::Public,
        (other, _, _) => return Err(invalid("tls mode", other)),
    };
    Ok(Connection {
        id: row.try_get(0)?,
        kind: kind.parse().map_err(|_| invalid("kind", &kind))?,
        name: row.try_get(2)?,
        url: row.try_get(3)?,
        token_id: TokenId::parse(&token_id).map_err(|_| invalid("token id", &token_id))?,
        tls,
        state: state.parse().map_err(|_| invalid("state", &state))?,
        state_code: row.try_get(9)?,
        state_cause: row.try_get(10)?,
        presented_fingerprint: presented.and_then(|p| Fingerprint::parse(&p).ok()),
        version: row.try_get(12)?,
        checked_at: row.try_get(13)?,
        created_by: row.try_get(14)?,
        created_at: row.try_get(15)?,
        updated_at: row.try_get(16)?,
        cadence: std::time::Duration::from_secs(
            u64::try_from(row.try_get::<_, i32>(17)?).unwrap_or(30),
        ),
        guest_actions: row.try_get(18)?,
    })
}

/// How many connections the transaction's tenant holds.
pub async fn count(tx: &TenantTx) -> Result<i64, StoreError> {
    Ok(tx
        .client()
        .query_one("SELECT count(*) FROM connections", &[])
        .await?
        .get(0))
}

/// Stores a connection with its secret sealed, audited as `connection.created`.
pub async fn insert(
    tx: &TenantTx,
    key: &MasterKey,
    new: &NewConnection,
    actor: &str,
) -> Result<Connection, ConnectionStoreError> {
    let id = Uuid::now_v7();
    let tenant = tx.tenant().as_str();
    let sealed = key
        .seal_bytes(&aad(tenant, id), new.secret.as_bytes())
        .ok_or_else(|| ConnectionStoreError::Sealing {
            id,
            reason: "encryption failed".into(),
        })?;
    let (fingerprint, ca_pem) = match &new.tls {
        StoredTls::Pinned(fp) => (Some(fp.to_string()), None),
        StoredTls::Ca(pem) => (None, Some(pem.as_str())),
        StoredTls::Public => (None, None),
    };
    let o = &new.observed;
    let presented = o.presented.map(|p| p.to_string());
    let row = tx
        .client()
        .query_opt(
            &format!(
                "INSERT INTO connections
                     (tenant_id, id, kind, name, url, token_id, secret_sealed, secret_nonce,
                      key_id, tls_mode, fingerprint, ca_pem, state, state_code, state_cause,
                      presented_fingerprint, version, checked_at, created_by, cadence_seconds,
                      guest_actions)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                         $17, $18, $19, $20, $21)
                 ON CONFLICT (tenant_id, kind, name) DO NOTHING
                 RETURNING {COLUMNS}"
            ),
            &[
                &tenant,
                &id,
                &new.kind.as_str(),
                &new.name,
                &new.url,
                &new.token_id.as_str(),
                &sealed.ciphertext,
                &sealed.nonce,
                &sealed.key_id,
                &new.tls.mode(),
                &fingerprint,
                &ca_pem,
                &o.state.as_str(),
                &o.code,
                &o.cause,
                &presented,
                &o.version,
                &o.at,
                &actor,
                &i32::try_from(new.cadence.as_secs()).unwrap_or(i32::MAX),
                &new.guest_actions,
            ],
        )
        .await?;
    // ON CONFLICT DO NOTHING returns no row: the name is taken.
    let Some(row) = row else {
        return Err(ConnectionStoreError::NameTaken {
            kind: new.kind,
            name: new.name.clone(),
        });
    };
    let stored = from_row(&row)?;
    audit::append(
        tx,
        &AuditEntry {
            actor: actor.to_owned(),
            kind: "connection.created".to_owned(),
            subject: id.to_string(),
            payload: json!({
                "kind": new.kind.as_str(),
                "name": new.name,
                "url": new.url,
                "token_id": new.token_id.as_str(),
                "tls_mode": new.tls.mode(),
                "fingerprint": fingerprint,
                "state": o.state.as_str(),
                "cadence_seconds": new.cadence.as_secs(),
                "guest_actions": new.guest_actions,
            }),
        },
    )
    .await?;
    Ok(stored)
}

/// Turns guest power actions on or off for connection `id`, audited as
/// `connection.guest_actions_changed`; the connection as it is now, `None` when there is none.
pub async fn set_guest_actions(
    tx: &TenantTx,
    id: Uuid,
    enabled: bool,
    actor: &str,
) -> Result<Option<Connection>, StoreError> {
    let Some(row) = tx
        .client()
        .query_opt(
            &format!(
                "UPDATE connections SET guest_actions = $2, updated_at = now()
                 WHERE id = $1 RETURNING {COLUMNS}"
            ),
            &[&id, &enabled],
        )
        .await?
    else {
        return Ok(None);
    };
    let connection = from_row(&row)?;
    audit::append(
        tx,
        &AuditEntry {
            actor: actor.to_owned(),
            kind: "connection.guest_actions_changed".to_owned(),
            subject: id.to_string(),
            payload: json!({
                "kind": connection.kind.as_str(),
                "name": connection.name,
                "guest_actions": enabled,
            }),
        },
    )
    .await?;
    Ok(Some(connection))
}

/// The connection whose connector reports as `agent_id` (`pve.<name>`, `pbs.<name>`); `None`
/// for a host agent's id or a removed connection.
pub async fn by_agent_id(tx: &TenantTx, agent_id: &str) -> Result<Option<Connection>, StoreError> {
    let Some((kind, name)) = pulse_domain::connection::ConnectionKind::ALL
        .iter()
        .find_map(|kind| {
            agent_id
                .strip_prefix(kind.agent_prefix())
                .map(|name| (*kind, name))
        })
    else {
        return Ok(None);
    };
    let row = tx
        .client()
        .query_opt(
            &format!("SELECT {COLUMNS} FROM connections WHERE kind = $1 AND name = $2"),
            &[&kind.as_str(), &name],
        )
        .await?;
    row.as_ref().map(from_row).transpose()
}

/// Every connection of the tenant, by kind and name.
pub async fn list(tx: &TenantTx) -> Result<Vec<Connection>, StoreError> {
    let rows = tx
        .client()
        .query(
            &format!("SELECT {COLUMNS} FROM connections ORDER BY kind, name"),
            &[],
        )
        .await?;
    rows.iter().map(from_row).collect()
}

pub async fn get(tx: &TenantTx, id: Uuid) -> Result<Option<Connection>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            &format!("SELECT {COLUMNS} FROM connections WHERE id = $1"),
            &[&id],
        )
        .await?;
    row.as_ref().map(from_row).transpose()
}

/// The connection's token secret, opened. For the code that talks to the server only.
pub async fn secret(
    tx: &TenantTx,
    key: &MasterKey,
    id: Uuid,
) -> Result<Option<String>, ConnectionStoreError> {
    let Some(row) = tx
        .client()
        .query_opt(
            "SELECT secret_sealed, secret_nonce, key_id FROM connections WHERE id = $1",
            &[&id],
        )
        .await?
    else {
        return Ok(None);
    };
    let sealed = Sealed {
        ciphertext: row.try_get(0)?,
        nonce: row.try_get(1)?,
        key_id: row.try_get(2)?,
    };
    open_text(key, &aad(tx.tenant().as_str(), id), &sealed, id).map(Some)
}

/// Opens a sealed secret of connection `id` as text.
fn open_text(
    key: &MasterKey,
    aad: &[u8],
    sealed: &Sealed,
    id: Uuid,
) -> Result<String, ConnectionStoreError> {
    let failed = |reason: &str| ConnectionStoreError::Sealing {
        id,
        reason: reason.to_owned(),
    };
    let plaintext = key.open_bytes(aad, sealed).map_err(failed)?;
    String::from_utf8(plaintext).map_err(|_| failed("not UTF-8"))
}

/// Records what a check or poll saw. Returns whether the connection still exists.
pub async fn record(tx: &TenantTx, id: Uuid, observed: &Observation) -> Result<bool, StoreError> {
    let presented = observed.presented.map(|p| p.to_string());
    let updated = tx
        .client()
        .execute(
            "UPDATE connections
             SET state = $2, state_code = $3, state_cause = $4, presented_fingerprint = $5,
                 version = coalesce($6, version), checked_at = $7, updated_at = now()
             WHERE id = $1",
            &[
                &id,
                &observed.state.as_str(),
                &observed.code,
                &observed.cause,
                &presented,
                &observed.version,
                &observed.at,
            ],
        )
        .await?;
    Ok(updated > 0)
}

/// Removes the connection and its sealed secret, audited as `connection.deleted`. Returns
/// whether there was one.
pub async fn delete(tx: &TenantTx, id: Uuid, actor: &str) -> Result<bool, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "DELETE FROM connections WHERE id = $1 RETURNING kind, name, agent_token_id",
            &[&id],
        )
        .await?;
    let Some(row) = row else {
        return Ok(false);
    };
    let kind: String = row.try_get(0)?;
    let name: String = row.try_get(1)?;
    // The connector's token goes with the connection: a poller still holding it is refused by
    // the relay from now on.
    if let Some(token) = row.try_get::<_, Option<Uuid>>(2)? {
        crate::tokens::revoke(tx, token).await?;
    }
    audit::append(
        tx,
        &AuditEntry {
            actor: actor.to_owned(),
            kind: "connection.deleted".to_owned(),
            subject: id.to_string(),
            payload: json!({ "kind": kind, "name": name }),
        },
    )
    .await?;
    Ok(true)
}

/// The lease a connector replica holds on one connection: renewals and releases are
/// compare-and-set on the holder and the generation, so they fail once another replica claimed
/// the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub tenant: pulse_domain::TenantId,
    pub connection: Uuid,
    pub holder: String,
    pub generation: i64,
}

/// Claims up to `max` connections of `kinds` whose lease is free or lapsed, for `holder`, until
/// `duration` from now (connections of suspended tenants are left alone). Rows another replica
/// is claiming at the same time are skipped. The connector's one cross-tenant call, through
/// `pulse_claim_connections`.
pub async fn claim(
    store: &crate::Store,
    holder: &str,
    kinds: &[ConnectionKind],
    duration: std::time::Duration,
    max: usize,
) -> Result<Vec<Lease>, StoreError> {
    if max == 0 {
        return Ok(Vec::new());
    }
    let kinds: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
    let lease_ms = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
    let max = i32::try_from(max).unwrap_or(i32::MAX);
    let client = store.pool().get().await?;
    let rows = client
        .query(
            "SELECT tenant_id, id, generation FROM pulse_claim_connections($1, $2, $3, $4)",
            &[&holder, &kinds, &lease_ms, &max],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let tenant: String = row.try_get(0)?;
            Ok(Lease {
                tenant: pulse_domain::TenantId::new(tenant)
                    .map_err(|e| StoreError::Invalid(e.to_string()))?,
                connection: row.try_get(1)?,
                holder: holder.to_owned(),
                generation: row.try_get(2)?,
            })
        })
        .collect()
}

/// Extends `lease` to `duration` from now. False when it is no longer held (another replica
/// claimed the connection, or it was removed): the poller must stop at once.
pub async fn renew(
    tx: &TenantTx,
    lease: &Lease,
    duration: std::time::Duration,
) -> Result<bool, StoreError> {
    let lease_ms = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
    let n = tx
        .client()
        .execute(
            "UPDATE connections
             SET lease_expires_at = now() + make_interval(secs => $4::bigint / 1000.0)
             WHERE id = $1 AND lease_holder = $2 AND lease_generation = $3",
            &[
                &lease.connection,
                &lease.holder,
                &lease.generation,
                &lease_ms,
            ],
        )
        .await?;
    Ok(n == 1)
}

/// Gives `lease` up (a replica stopping), so another may claim the connection at once.
pub async fn release(tx: &TenantTx, lease: &Lease) -> Result<(), StoreError> {
    tx.client()
        .execute(
            "UPDATE connections SET lease_expires_at = NULL
             WHERE id = $1 AND lease_holder = $2 AND lease_generation = $3",
            &[&lease.connection, &lease.holder, &lease.generation],
        )
        .await?;
    Ok(())
}

fn agent_token_aad(tenant: &str, id: Uuid) -> Vec<u8> {
    format!("pulse-connector-token|{tenant}|{id}").into_bytes()
}

/// The token the connector reports with for connection `id`, bound to the connection's agent
/// id: the stored one, opened, or (the first time) a new one minted with `agent:report` and
/// sealed in the row, in the caller's transaction. `None` when the connection is gone.
pub async fn agent_token(
    tx: &TenantTx,
    key: &MasterKey,
    id: Uuid,
) -> Result<Option<String>, ConnectionStoreError> {
    let Some(row) = tx
        .client()
        .query_opt(
            "SELECT kind, name, agent_token_sealed, agent_token_nonce, agent_token_key_id
             FROM connections WHERE id = $1 FOR UPDATE",
            &[&id],
        )
        .await?
    else {
        return Ok(None);
    };
    let tenant = tx.tenant().as_str().to_owned();
    let failed = |reason: &str| ConnectionStoreError::Sealing {
        id,
        reason: reason.to_owned(),
    };
    if let (Some(ciphertext), Some(nonce), Some(key_id)) = (
        row.try_get::<_, Option<Vec<u8>>>(2)?,
        row.try_get::<_, Option<Vec<u8>>>(3)?,
        row.try_get::<_, Option<String>>(4)?,
    ) {
        let sealed = Sealed {
            ciphertext,
            nonce,
            key_id,
        };
        return open_text(key, &agent_token_aad(&tenant, id), &sealed, id).map(Some);
    }
    let kind: String = row.try_get(0)?;
    let name: String = row.try_get(1)?;
    let kind: ConnectionKind = kind.parse().map_err(|_| invalid("kind", &kind))?;
    let agent_id = format!("{}{name}", kind.agent_prefix());
    let issued = crate::tokens::issue_for_agent(
        tx,
        crate::tokens::NewToken {
            name: format!("connector {agent_id}"),
            // `agent:exec` lets the relay forward commands to the session; whether one runs is
            // the connection's `guest_actions` switch.
            scopes: [
                pulse_domain::Scope::AgentReport,
                pulse_domain::Scope::AgentExec,
            ]
            .into_iter()
            .collect(),
            expires_at: None,
            created_by: None,
        },
        &agent_id,
    )
    .await?;
    let sealed = key
        .seal_bytes(
            &agent_token_aad(&tenant, id),
            issued.secret.expose().as_bytes(),
        )
        .ok_or_else(|| failed("encryption failed"))?;
    tx.client()
        .execute(
            "UPDATE connections
             SET agent_token_id = $2, agent_token_sealed = $3, agent_token_nonce = $4,
                 agent_token_key_id = $5
             WHERE id = $1",
            &[
                &id,
                &issued.token.id,
                &sealed.ciphertext,
                &sealed.nonce,
                &sealed.key_id,
            ],
        )
        .await?;
    Ok(Some(issued.secret.expose().to_owned()))
}
