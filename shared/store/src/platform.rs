//! Platform-operator tokens: the one authority over tenants (create, suspend, delete, quotas).
//!
//! Invariants:
//! - a platform token belongs to no tenant and carries no tenant scope; a tenant token never
//!   carries platform authority (its scopes are [`pulse_domain::Scope`]s, and the database
//!   refuses a `platform:` scope on a tenant token row);
//! - the secrets look different (`pulse_platform_<64 hex>` against `pulse_<64 hex>`), so each
//!   kind is refused as malformed by the other's check before any database lookup;
//! - the application role can only resolve a presented hash; minting and revoking need the
//!   schema owner's connection ([`issue`], [`revoke`]), which only `pulsectl admin
//!   platform-token` uses.

use chrono::{DateTime, Utc};
use rand::RngCore;
use serde::Serialize;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::tokens::TokenSecret;
use crate::{Store, StoreError};

/// Every platform secret starts with this.
pub const PLATFORM_SECRET_PREFIX: &str = "pulse_platform_";
const SECRET_HEX_LEN: usize = 64;

/// A platform token as listed (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlatformToken {
    pub id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A freshly minted platform token: the only value that carries its secret.
#[derive(Debug, Clone)]
pub struct IssuedPlatformToken {
    pub token: PlatformToken,
    pub secret: TokenSecret,
}

/// The platform operator, proven by a live platform token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformPrincipal {
    pub token_id: Uuid,
    pub token_name: String,
}

impl PlatformPrincipal {
    /// The actor tenant audit rows name for the platform operator.
    pub fn actor(&self) -> String {
        format!("platform:{}", self.token_id)
    }
}

/// Why a presented platform token was refused.
#[derive(Debug, thiserror::Error)]
pub enum PlatformAuthFailure {
    #[error("not a platform token")]
    Malformed,
    #[error("platform token is unknown")]
    Unknown,
    #[error("platform token was revoked")]
    Revoked,
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn hash_secret(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

/// Whether `presented` has the shape of a platform secret.
pub fn looks_like_platform_secret(presented: &str) -> bool {
    presented
        .strip_prefix(PLATFORM_SECRET_PREFIX)
        .is_some_and(|rest| {
            rest.len() == SECRET_HEX_LEN && rest.bytes().all(|b| b.is_ascii_hexdigit())
        })
}

/// Resolves a presented platform token.
pub async fn authenticate(
    store: &Store,
    presented: &str,
) -> Result<PlatformPrincipal, PlatformAuthFailure> {
    if !looks_like_platform_secret(presented) {
        return Err(PlatformAuthFailure::Malformed);
    }
    let client = store.pool().get().await.map_err(StoreError::from)?;
    let row = client
        .query_opt(
            "SELECT id, name, revoked_at FROM pulse_platform_token_by_hash($1)",
            &[&hash_secret(presented)],
        )
        .await
        .map_err(StoreError::from)?
        .ok_or(PlatformAuthFailure::Unknown)?;
    let revoked: Option<DateTime<Utc>> = row.get(2);
    if revoked.is_some() {
        return Err(PlatformAuthFailure::Revoked);
    }
    Ok(PlatformPrincipal {
        token_id: row.get(0),
        token_name: row.get(1),
    })
}

/// Mints a platform token on the schema owner's connection (the application role cannot).
pub async fn issue(
    owner: &tokio_postgres::Client,
    name: &str,
) -> Result<IssuedPlatformToken, StoreError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(StoreError::Invalid(
            "platform token name: 1 to 200 characters, no control characters".to_owned(),
        ));
    }
    let mut bytes = [0_u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let secret = TokenSecret::from_raw(format!("{PLATFORM_SECRET_PREFIX}{}", hex::encode(bytes)));
    let id = Uuid::now_v7();
    let row = owner
        .query_one(
            "INSERT INTO platform_tokens (id, name, token_hash) VALUES ($1, $2, $3)
             RETURNING created_at",
            &[&id, &name, &hash_secret(secret.expose())],
        )
        .await?;
    Ok(IssuedPlatformToken {
        token: PlatformToken {
            id,
            name: name.to_owned(),
            created_at: row.get(0),
            revoked_at: None,
        },
        secret,
    })
}

/// Revokes a platform token on the owner's connection; false when there is no such token.
pub async fn revoke(owner: &tokio_postgres::Client, id: Uuid) -> Result<bool, StoreError> {
    let updated = owner
        .execute(
            "UPDATE platform_tokens SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1",
            &[&id],
        )
        .await?;
    Ok(updated == 1)
}

/// Every platform token, oldest first, on the owner's connection.
pub async fn list(owner: &tokio_postgres::Client) -> Result<Vec<PlatformToken>, StoreError> {
    let rows = owner
        .query(
            "SELECT id, name, created_at, revoked_at FROM platform_tokens ORDER BY created_at, id",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| PlatformToken {
            id: row.get(0),
            name: row.get(1),
            created_at: row.get(2),
            revoked_at: row.get(3),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_and_tenant_secrets_never_look_alike() {
        let platform = format!("{PLATFORM_SECRET_PREFIX}{}", "ab".repeat(32));
        assert!(looks_like_platform_secret(&platform));
        let tenant = format!("{}{}", crate::tokens::SECRET_PREFIX, "ab".repeat(32));
        assert!(!looks_like_platform_secret(&tenant));
        assert!(!crate::tokens::looks_like_tenant_secret(&platform));
        assert!(crate::tokens::looks_like_tenant_secret(&tenant));
    }
}
