//! API tokens: random secrets shown once, stored as sha256, scoped, expiring, revocable.

use std::collections::BTreeSet;
use std::fmt;

use chrono::{DateTime, Utc};
use pulse_domain::{Scope, TenantId};
use rand::RngCore;
use serde::Serialize;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::{Store, StoreError, TenantTx};

/// Every secret starts with this, so leaked tokens are recognisable by secret scanners.
pub const SECRET_PREFIX: &str = "pulse_";
const SECRET_HEX_LEN: usize = 64;

/// A token secret. Its `Debug` never prints the value.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSecret(String);

impl TokenSecret {
    fn generate() -> Self {
        let mut bytes = [0_u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        Self(format!("{SECRET_PREFIX}{}", hex::encode(bytes)))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    pub(crate) fn from_raw(secret: String) -> Self {
        Self(secret)
    }
}

/// Whether `presented` has the shape of a tenant token secret (`pulse_<64 hex>`).
pub fn looks_like_tenant_secret(presented: &str) -> bool {
    presented.strip_prefix(SECRET_PREFIX).is_some_and(|rest| {
        rest.len() == SECRET_HEX_LEN && rest.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

impl fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenSecret(..)")
    }
}

fn hash_secret(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

#[derive(Debug, Clone)]
pub struct NewToken {
    pub name: String,
    pub scopes: BTreeSet<Scope>,
    pub expires_at: Option<DateTime<Utc>>,
    pub created_by: Option<Uuid>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiToken {
    pub id: Uuid,
    pub name: String,
    pub scopes: BTreeSet<Scope>,
    pub created_by: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
}

/// A freshly issued token: the only value that ever carries the secret.
#[derive(Debug, Clone)]
pub struct IssuedToken {
    pub token: ApiToken,
    pub secret: TokenSecret,
}

fn parse_scopes(raw: Vec<String>) -> Result<BTreeSet<Scope>, StoreError> {
    raw.iter()
        .map(|s| {
            s.parse::<Scope>()
                .map_err(|e| StoreError::Invalid(e.to_string()))
        })
        .collect()
}

fn scope_strings(scopes: &BTreeSet<Scope>) -> Vec<&'static str> {
    scopes.iter().map(|s| s.as_str()).collect()
}

pub async fn issue(tx: &TenantTx, new: NewToken) -> Result<IssuedToken, StoreError> {
    insert(tx, new, None).await
}

/// Issues a token that may report only as agent `agent_id` (the relay refuses any other id in
/// its Hello, and refuses the connector prefixes to every token not bound to them). The
/// connector's own token, minted once per connection (ADR 0013).
pub async fn issue_for_agent(
    tx: &TenantTx,
    new: NewToken,
    agent_id: &str,
) -> Result<IssuedToken, StoreError> {
    if !pulse_domain::resource::valid_agent_id(agent_id) {
        return Err(StoreError::Invalid(format!(
            "tokens: {agent_id:?} is not a valid agent id"
        )));
    }
    insert(tx, new, Some(agent_id)).await
}

async fn insert(
    tx: &TenantTx,
    new: NewToken,
    agent_id: Option<&str>,
) -> Result<IssuedToken, StoreError> {
    let id = Uuid::now_v7();
    let secret = TokenSecret::generate();
    let hash = hash_secret(secret.expose());
    let row = tx
        .client()
        .query_one(
            "INSERT INTO api_tokens
                 (id, tenant_id, name, token_hash, scopes, created_by, expires_at, agent_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             RETURNING created_at",
            &[
                &id,
                &tx.tenant().as_str(),
                &new.name,
                &hash,
                &scope_strings(&new.scopes),
                &new.created_by,
                &new.expires_at,
                &agent_id,
            ],
        )
        .await?;
    Ok(IssuedToken {
        token: ApiToken {
            id,
            name: new.name,
            scopes: new.scopes,
            created_by: new.created_by,
            created_at: row.get(0),
            expires_at: new.expires_at,
            revoked_at: None,
            last_used_at: None,
        },
        secret,
    })
}

const TOKEN_COLUMNS: &str =
    "id, name, scopes, created_by, created_at, expires_at, revoked_at, last_used_at";

fn token_from_row(row: &tokio_postgres::Row) -> Result<ApiToken, StoreError> {
    Ok(ApiToken {
        id: row.get(0),
        name: row.get(1),
        scopes: parse_scopes(row.get(2))?,
        created_by: row.get(3),
        created_at: row.get(4),
        expires_at: row.get(5),
        revoked_at: row.get(6),
        last_used_at: row.get(7),
    })
}

pub async fn list(tx: &TenantTx) -> Result<Vec<ApiToken>, StoreError> {
    let rows = tx
        .client()
        .query(
            &format!("SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY created_at, id"),
            &[],
        )
        .await?;
    rows.iter().map(token_from_row).collect()
}

pub async fn get(tx: &TenantTx, id: Uuid) -> Result<Option<ApiToken>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            &format!("SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE id = $1"),
            &[&id],
        )
        .await?;
    row.as_ref().map(token_from_row).transpose()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevokeOutcome {
    Revoked,
    AlreadyRevoked,
    NotFound,
}

pub async fn revoke(tx: &TenantTx, id: Uuid) -> Result<RevokeOutcome, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, now())
             WHERE id = $1
             RETURNING revoked_at = now() AS revoked_now",
            &[&id],
        )
        .await?;
    Ok(match row {
        None => RevokeOutcome::NotFound,
        Some(row) if row.get::<_, bool>(0) => RevokeOutcome::Revoked,
        Some(_) => RevokeOutcome::AlreadyRevoked,
    })
}

/// Who is calling: the result of a successful token check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant: TenantId,
    /// The API token's id, or the web session's.
    pub token_id: Uuid,
    /// The API token's name, or the signed-in user's username.
    pub token_name: String,
    pub user_id: Option<Uuid>,
    pub scopes: BTreeSet<Scope>,
    pub kind: PrincipalKind,
    /// The only agent id this token may report as (a connector's token), or `None`.
    pub agent_id: Option<String>,
}

/// How the caller proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrincipalKind {
    ApiToken,
    /// A signed-in user of the web UI (`token_id` is the session, `token_name` the username).
    WebSession,
}

impl Principal {
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
    }

    /// The readable actor a finding timeline or a run request names: `token:<name>` for an API
    /// token, `user:<username>` for a signed-in user.
    pub fn named_actor(&self) -> String {
        match self.kind {
            PrincipalKind::ApiToken => format!("token:{}", self.token_name),
            PrincipalKind::WebSession => format!("user:{}", self.token_name),
        }
    }
}

/// How often one process writes a token's `last_used_at`.
const TOUCH_EVERY: std::time::Duration = std::time::Duration::from_secs(60);
/// Tokens this process touched, kept at most this many (the oldest are forgotten first).
const TOUCHED_KEPT: usize = 10_000;

/// Whether this process should write `token`'s `last_used_at` now (and, if so, notes it).
fn touch_due(token: Uuid, now: std::time::Instant) -> bool {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static TOUCHED: OnceLock<Mutex<HashMap<Uuid, std::time::Instant>>> = OnceLock::new();
    let mut touched = TOUCHED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if touched
        .get(&token)
        .is_some_and(|at| now.saturating_duration_since(*at) < TOUCH_EVERY)
    {
        return false;
    }
    if touched.len() >= TOUCHED_KEPT {
        touched.retain(|_, at| now.saturating_duration_since(*at) < TOUCH_EVERY);
    }
    touched.insert(token, now);
    true
}

/// Why a presented token was refused. Callers answer all of these with the same 401; the
/// distinction is for logs.
#[derive(Debug, thiserror::Error)]
pub enum AuthFailure {
    #[error("token is malformed")]
    Malformed,
    #[error("token is unknown")]
    Unknown,
    #[error("token was revoked")]
    Revoked,
    #[error("token expired")]
    Expired,
    /// The token is live but its tenant is suspended by the platform operator.
    #[error("tenant is suspended: {reason}")]
    Suspended { reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub async fn authenticate(
    store: &Store,
    presented: &str,
    now: DateTime<Utc>,
) -> Result<Principal, AuthFailure> {
    if !looks_like_tenant_secret(presented) {
        return Err(AuthFailure::Malformed);
    }
    let client = store.pool().get().await.map_err(StoreError::from)?;
    // The tenant's standing in the same round trip: a suspended tenant's tokens stop working
    // at once, everywhere tokens are checked (gateway, relay, MCP).
    let row = client
        .query_opt(
            "SELECT t.id, t.tenant_id, t.name, t.scopes, t.created_by, t.expires_at,
                    t.revoked_at, s.suspended_at, s.suspended_reason, t.agent_id
             FROM pulse_token_by_hash($1) t
             LEFT JOIN LATERAL pulse_tenant_standing(t.tenant_id) s ON true",
            &[&hash_secret(presented)],
        )
        .await
        .map_err(StoreError::from)?
        .ok_or(AuthFailure::Unknown)?;
    let revoked_at: Option<DateTime<Utc>> = row.get(6);
    if revoked_at.is_some() {
        return Err(AuthFailure::Revoked);
    }
    let expires_at: Option<DateTime<Utc>> = row.get(5);
    if expires_at.is_some_and(|at| at <= now) {
        return Err(AuthFailure::Expired);
    }
    let suspended_at: Option<DateTime<Utc>> = row.get(7);
    if suspended_at.is_some() {
        let reason: Option<String> = row.get(8);
        return Err(AuthFailure::Suspended {
            reason: reason.unwrap_or_default(),
        });
    }
    let tenant: String = row.get(1);
    Ok(Principal {
        tenant: TenantId::new(tenant).map_err(|e| StoreError::Invalid(e.to_string()))?,
        token_id: row.get(0),
        token_name: row.get(2),
        scopes: parse_scopes(row.get(3))?,
        user_id: row.get(4),
        kind: PrincipalKind::ApiToken,
        agent_id: row.get(9),
    })
}

/// Records use, at most once a minute per token so a busy client does not write on every call.
pub async fn touch_last_used(store: &Store, principal: &Principal) -> Result<(), StoreError> {
    // The database keeps `last_used_at` to the minute; this process asks it at most that often
    // per token, so a burst of requests on one token costs one write, not one each.
    if !touch_due(principal.token_id, std::time::Instant::now()) {
        return Ok(());
    }
    let tx = store.tenant_tx(&principal.tenant).await?;
    tx.client()
        .execute(
            "UPDATE api_tokens SET last_used_at = now()
             WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < now() - interval '60 seconds')",
            &[&principal.token_id],
        )
        .await?;
    tx.commit().await
}
