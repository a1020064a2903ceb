//! Human users of a tenant.
//!
//! Audit rows and actions name a human by the stable actor id `user:<id>`; a username can be
//! shown beside it ([`usernames`]) but never replaces it in what is stored.

use std::collections::{BTreeSet, HashMap};
use std::sync::LazyLock;

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use chrono::{DateTime, Utc};
use pulse_domain::Scope;
use rand::RngCore;
use serde::Serialize;
use uuid::Uuid;

use crate::{StoreError, TenantTx};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UserRole {
    Admin,
    Operator,
    Viewer,
}

impl UserRole {
    /// What a signed-in user of this role may do: an admin everything, an operator everything
    /// but administration, a viewer read.
    pub fn scopes(self) -> BTreeSet<Scope> {
        match self {
            UserRole::Admin => Scope::ALL.into_iter().collect(),
            UserRole::Operator => Scope::ALL
                .into_iter()
                .filter(|scope| *scope != Scope::Admin)
                .collect(),
            UserRole::Viewer => [Scope::MonitoringRead].into_iter().collect(),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            UserRole::Admin => "admin",
            UserRole::Operator => "operator",
            UserRole::Viewer => "viewer",
        }
    }

    pub(crate) fn parse(value: &str) -> Result<Self, StoreError> {
        match value {
            "admin" => Ok(UserRole::Admin),
            "operator" => Ok(UserRole::Operator),
            "viewer" => Ok(UserRole::Viewer),
            other => Err(StoreError::Invalid(format!("unknown user role '{other}'"))),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct User {
    pub id: Uuid,
    pub username: String,
    pub role: UserRole,
    pub created_at: DateTime<Utc>,
}

pub async fn create(tx: &TenantTx, username: &str, role: UserRole) -> Result<User, StoreError> {
    let id = Uuid::now_v7();
    let row = tx
        .client()
        .query_one(
            "INSERT INTO users (id, tenant_id, username, role) VALUES ($1, $2, $3, $4)
             RETURNING created_at",
            &[&id, &tx.tenant().as_str(), &username, &role.as_str()],
        )
        .await?;
    Ok(User {
        id,
        username: username.to_owned(),
        role,
        created_at: row.get(0),
    })
}

pub async fn by_username(tx: &TenantTx, username: &str) -> Result<Option<User>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT id, username, role, created_at FROM users WHERE username = $1",
            &[&username],
        )
        .await?;
    row.map(|row| {
        Ok(User {
            id: row.get(0),
            username: row.get(1),
            role: UserRole::parse(row.get(2))?,
            created_at: row.get(3),
        })
    })
    .transpose()
}

pub async fn list(tx: &TenantTx) -> Result<Vec<User>, StoreError> {
    let rows = tx
        .client()
        .query(
            "SELECT id, username, role, created_at FROM users ORDER BY created_at, id",
            &[],
        )
        .await?;
    rows.iter()
        .map(|row| {
            Ok(User {
                id: row.get(0),
                username: row.get(1),
                role: UserRole::parse(row.get(2))?,
                created_at: row.get(3),
            })
        })
        .collect()
}

/// Shortest password accepted.
pub const MIN_PASSWORD_LEN: usize = 12;
/// Longest password accepted (hashing cost grows with it).
pub const MAX_PASSWORD_LEN: usize = 256;

/// Why a password was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasswordError {
    #[error("a password needs at least {MIN_PASSWORD_LEN} characters")]
    TooShort,
    #[error("a password has at most {MAX_PASSWORD_LEN} characters")]
    TooLong,
}

/// A random password of 24 letters and digits (about 142 bits), for a user created without one.
pub fn generate_password() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let mut bytes = [0_u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    bytes
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

/// The argon2id hash (PHC string, default parameters, random salt) of an acceptable password.
/// CPU-bound for tens of milliseconds: call it off the async threads.
pub fn hash_password(password: &str) -> Result<String, PasswordError> {
    let chars = password.chars().count();
    if chars < MIN_PASSWORD_LEN {
        return Err(PasswordError::TooShort);
    }
    if chars > MAX_PASSWORD_LEN {
        return Err(PasswordError::TooLong);
    }
    let mut salt = [0_u8; 16];
    rand::rng().fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).expect("16 bytes is a valid salt length");
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .expect("argon2id with default parameters hashes any password")
        .to_string())
}

/// Hash checked when there is no user or no password, so a wrong username costs the same time
/// as a wrong password.
static DECOY_HASH: LazyLock<String> =
    LazyLock::new(|| hash_password(&generate_password()).expect("a generated password is valid"));

/// Whether `password` matches `hash` (a PHC string); `None` (no user, or no password set) is
/// checked against a decoy so it takes as long and always fails. CPU-bound like
/// [`hash_password`].
pub fn verify_password(hash: Option<&str>, password: &str) -> bool {
    let (phc, real) = match hash {
        Some(hash) => (hash, true),
        None => (DECOY_HASH.as_str(), false),
    };
    if password.len() > MAX_PASSWORD_LEN * 4 {
        return false;
    }
    let Ok(parsed) = PasswordHash::new(phc) else {
        return false;
    };
    let matched = Argon2::default()
        .verify_password(password.as_bytes(), &parsed)
        .is_ok();
    real && matched
}

/// Stores an argon2id hash from [`hash_password`] as the user's password; false when the tenant
/// has no such user.
pub async fn set_password_hash(
    tx: &TenantTx,
    user_id: Uuid,
    password_hash: &str,
) -> Result<bool, StoreError> {
    let updated = tx
        .client()
        .execute(
            "UPDATE users SET password_hash = $2 WHERE id = $1",
            &[&user_id, &password_hash],
        )
        .await?;
    Ok(updated == 1)
}

/// A user of the tenant by username, with its password hash (absent when none was set).
pub async fn credentials(
    tx: &TenantTx,
    username: &str,
) -> Result<Option<(User, Option<String>)>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT id, username, role, created_at, password_hash FROM users WHERE username = $1",
            &[&username],
        )
        .await?;
    row.map(|row| {
        Ok((
            User {
                id: row.get(0),
                username: row.get(1),
                role: UserRole::parse(row.get(2))?,
                created_at: row.get(3),
            },
            row.get(4),
        ))
    })
    .transpose()
}

/// The user id of an actor written as `user:<id>`; `None` for tokens, services and anything
/// malformed.
pub fn actor_user_id(actor: &str) -> Option<Uuid> {
    actor
        .strip_prefix("user:")
        .and_then(|id| Uuid::parse_str(id).ok())
}

/// Usernames of the tenant's users among `ids`, by id; ids of no user (or of another tenant)
/// are absent.
pub async fn usernames(tx: &TenantTx, ids: &[Uuid]) -> Result<HashMap<Uuid, String>, StoreError> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = tx
        .client()
        .query("SELECT id, username FROM users WHERE id = ANY($1)", &[&ids])
        .await?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_hash_with_argon2id_and_verify() {
        let hash = hash_password("correct horse battery").unwrap();
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        assert!(verify_password(Some(&hash), "correct horse battery"));
        assert!(!verify_password(Some(&hash), "correct horse batterY"));
        assert!(!verify_password(None, "correct horse battery"));
        assert!(!verify_password(Some("not a phc string"), "x"));
        assert_eq!(hash_password("short"), Err(PasswordError::TooShort));
        assert_eq!(hash_password(&"x".repeat(257)), Err(PasswordError::TooLong));
        let generated = generate_password();
        assert_eq!(generated.len(), 24);
        assert!(hash_password(&generated).is_ok());
    }

    #[test]
    fn roles_map_to_scopes() {
        assert!(UserRole::Admin.scopes().contains(&Scope::Admin));
        let operator = UserRole::Operator.scopes();
        assert!(!operator.contains(&Scope::Admin));
        assert!(operator.contains(&Scope::ActionsApprove));
        assert_eq!(
            UserRole::Viewer.scopes().into_iter().collect::<Vec<_>>(),
            vec![Scope::MonitoringRead]
        );
    }

    #[test]
    fn only_user_actors_name_a_user() {
        let id = Uuid::now_v7();
        assert_eq!(actor_user_id(&format!("user:{id}")), Some(id));
        assert_eq!(actor_user_id(&format!("token:{id}")), None);
        assert_eq!(actor_user_id("user:not-a-uuid"), None);
        assert_eq!(actor_user_id("service:bootstrap"), None);
    }
}
