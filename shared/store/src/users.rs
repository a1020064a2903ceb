//! Human users of a tenant.
//!
//! Audit rows and actions name a human by the stable actor id `user:<id>`; a username can be
//! shown beside it ([`usernames`]) but never replaces it in what is stored.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
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
    pub fn as_str(self) -> &'static str {
        match self {
            UserRole::Admin => "admin",
            UserRole::Operator => "operator",
            UserRole::Viewer => "viewer",
        }
    }

    fn parse(value: &str) -> Result<Self, StoreError> {
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
    fn only_user_actors_name_a_user() {
        let id = Uuid::now_v7();
        assert_eq!(actor_user_id(&format!("user:{id}")), Some(id));
        assert_eq!(actor_user_id(&format!("token:{id}")), None);
        assert_eq!(actor_user_id("user:not-a-uuid"), None);
        assert_eq!(actor_user_id("service:bootstrap"), None);
    }
}
