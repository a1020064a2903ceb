//! Human users of a tenant.

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
