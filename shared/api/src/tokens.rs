//! API tokens of the tenant: `POST /api/tokens`, `GET /api/tokens`, `DELETE /api/tokens/{id}`.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use pulse_domain::Scope;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::constraints::Name;

pub const MAX_NAME_CHARS: usize = 200;

uuid_id! {
    /// A token's id (`DELETE /api/tokens/{id}`).
    TokenId
}

/// A token's name.
pub type TokenName = Name<MAX_NAME_CHARS>;

/// A scope as requested: a tenant scope, or a platform one that is refused by name (platform
/// authority is never a tenant token's; ADR 0010).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestedScope {
    Tenant(Scope),
    Platform(String),
}

impl Serialize for RequestedScope {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            RequestedScope::Tenant(scope) => scope.serialize(serializer),
            RequestedScope::Platform(raw) => serializer.serialize_str(raw),
        }
    }
}

impl<'de> Deserialize<'de> for RequestedScope {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        if pulse_domain::scope::is_platform_scope(&raw) {
            return Ok(RequestedScope::Platform(raw));
        }
        raw.parse::<Scope>()
            .map(RequestedScope::Tenant)
            .map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTokenRequest {
    #[schemars(with = "TokenName")]
    pub name: String,
    /// At least one.
    #[schemars(with = "Vec<Scope>", length(min = 1))]
    pub scopes: Vec<RequestedScope>,
    /// When the token stops working; in the future.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

/// The one response that carries the secret.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CreatedToken {
    pub id: Uuid,
    pub name: String,
    pub scopes: BTreeSet<Scope>,
    pub token: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
}

// A token as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TokenList {
    pub tokens: Vec<ApiToken>,
}
