//! Browser sessions of signed-in users, and the bound on password guessing.
//!
//! - A session is a random secret (`ps_` + 64 hex) in an HttpOnly cookie; only its sha256 is
//!   stored, beside the CSRF token every form of the session carries. Sessions expire
//!   ([`SESSION_TTL`]) and are revoked at sign-out.
//! - A presented secret is resolved through `pulse_web_session_by_hash` (SECURITY DEFINER, exact
//!   hash only), which also gives the tenant; a malformed, unknown, expired or revoked secret is
//!   simply no session.
//! - Failed sign-ins are recorded per tenant and username; [`MAX_FAILURES`] within
//!   [`FAILURE_WINDOW`] lock that account's sign-in until the oldest of them leaves the window. A
//!   successful sign-in clears them.

use std::fmt;

use chrono::{DateTime, Duration, Utc};
use pulse_domain::TenantId;
use rand::RngCore;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::users::{User, UserRole};
use crate::{Store, StoreError, TenantTx};

/// How long a session lasts from sign-in.
pub const SESSION_TTL: Duration = Duration::hours(12);
/// Failed sign-ins of one account allowed within [`FAILURE_WINDOW`].
pub const MAX_FAILURES: i64 = 5;
/// The window failed sign-ins are counted in.
pub const FAILURE_WINDOW: Duration = Duration::minutes(15);

const SECRET_PREFIX: &str = "ps_";
const SECRET_HEX_LEN: usize = 64;

/// A session secret. Its `Debug` never prints the value.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionSecret(String);

impl SessionSecret {
    fn generate() -> Self {
        Self(format!("{SECRET_PREFIX}{}", random_hex()))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SessionSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionSecret(..)")
    }
}

/// 32 random bytes as 64 hex characters.
pub fn random_hex() -> String {
    let mut bytes = [0_u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

fn hash_secret(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

fn well_formed(presented: &str) -> bool {
    presented.strip_prefix(SECRET_PREFIX).is_some_and(|rest| {
        rest.len() == SECRET_HEX_LEN && rest.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// A live session: who is signed in, to which tenant, and the CSRF token of its forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSession {
    pub id: Uuid,
    pub tenant: TenantId,
    pub user_id: Uuid,
    pub username: String,
    pub role: UserRole,
    pub csrf_token: String,
    pub expires_at: DateTime<Utc>,
}

/// A session just created, with the secret for its cookie (given out once).
#[derive(Debug, Clone)]
pub struct NewSession {
    pub secret: SessionSecret,
    pub session: WebSession,
}

/// Starts a session for `user` of the transaction's tenant.
pub async fn create(
    tx: &TenantTx,
    user: &User,
    now: DateTime<Utc>,
) -> Result<NewSession, StoreError> {
    let secret = SessionSecret::generate();
    let id = Uuid::now_v7();
    let csrf_token = random_hex();
    let expires_at = now + SESSION_TTL;
    tx.client()
        .execute(
            "INSERT INTO web_sessions (id, tenant_id, user_id, secret_hash, csrf_token, created_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &id,
                &tx.tenant().as_str(),
                &user.id,
                &hash_secret(secret.expose()),
                &csrf_token,
                &now,
                &expires_at,
            ],
        )
        .await?;
    Ok(NewSession {
        secret,
        session: WebSession {
            id,
            tenant: tx.tenant().clone(),
            user_id: user.id,
            username: user.username.clone(),
            role: user.role,
            csrf_token,
            expires_at,
        },
    })
}

/// The live session a cookie names; `None` for anything that is not one.
pub async fn resolve(
    store: &Store,
    presented: &str,
    now: DateTime<Utc>,
) -> Result<Option<WebSession>, StoreError> {
    if !well_formed(presented) {
        return Ok(None);
    }
    let client = store.pool().get().await?;
    let Some(row) = client
        .query_opt(
            "SELECT id, tenant_id, user_id, username, role, csrf_token, expires_at, revoked_at
             FROM pulse_web_session_by_hash($1)",
            &[&hash_secret(presented)],
        )
        .await?
    else {
        return Ok(None);
    };
    let expires_at: DateTime<Utc> = row.get(6);
    let revoked_at: Option<DateTime<Utc>> = row.get(7);
    if revoked_at.is_some() || expires_at <= now {
        return Ok(None);
    }
    let tenant: String = row.get(1);
    Ok(Some(WebSession {
        id: row.get(0),
        tenant: TenantId::new(tenant).map_err(|e| StoreError::Invalid(e.to_string()))?,
        user_id: row.get(2),
        username: row.get(3),
        role: UserRole::parse(row.get(4))?,
        csrf_token: row.get(5),
        expires_at,
    }))
}

/// Ends a session (sign-out). Revoking an already revoked or another tenant's session is a no-op.
pub async fn revoke(tx: &TenantTx, id: Uuid, now: DateTime<Utc>) -> Result<(), StoreError> {
    tx.client()
        .execute(
            "UPDATE web_sessions SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
            &[&id, &now],
        )
        .await?;
    Ok(())
}

/// Failed sign-ins of `username` within the window ending at `now`, and when the oldest of them
/// leaves it (when the account may try again once [`MAX_FAILURES`] is reached).
pub async fn recent_failures(
    tx: &TenantTx,
    username: &str,
    now: DateTime<Utc>,
) -> Result<(i64, Option<DateTime<Utc>>), StoreError> {
    let row = tx
        .client()
        .query_one(
            "SELECT count(*), min(at) FROM sign_in_failures
             WHERE username = $1 AND at > $2",
            &[&username, &(now - FAILURE_WINDOW)],
        )
        .await?;
    let oldest: Option<DateTime<Utc>> = row.get(1);
    Ok((row.get(0), oldest.map(|at| at + FAILURE_WINDOW)))
}

pub async fn record_failure(
    tx: &TenantTx,
    username: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    tx.client()
        .execute(
            "INSERT INTO sign_in_failures (tenant_id, username, at) VALUES ($1, $2, $3)",
            &[&tx.tenant().as_str(), &username, &now],
        )
        .await?;
    // Rows outside the window only cost space.
    tx.client()
        .execute(
            "DELETE FROM sign_in_failures WHERE at <= $1",
            &[&(now - FAILURE_WINDOW)],
        )
        .await?;
    Ok(())
}

pub async fn clear_failures(tx: &TenantTx, username: &str) -> Result<(), StoreError> {
    tx.client()
        .execute(
            "DELETE FROM sign_in_failures WHERE username = $1",
            &[&username],
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_prefixed_hex_and_never_printed() {
        let secret = SessionSecret::generate();
        assert!(well_formed(secret.expose()));
        assert_eq!(format!("{secret:?}"), "SessionSecret(..)");
        assert!(!well_formed("ps_xyz"));
        assert!(!well_formed(&format!("pulse_{}", "a".repeat(64))));
        assert_ne!(SessionSecret::generate(), secret);
    }
}
