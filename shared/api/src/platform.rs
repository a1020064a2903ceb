//! The platform-operator API (`/api/platform/...`): tenants, their users, suspension, quotas
//! and erasure, for a hosted installation serving many organizations.

use chrono::{DateTime, Utc};
use pulse_domain::TenantId;
use pulse_domain::tenant::TenantQuotas;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenantRequest {
    /// `[a-z0-9][a-z0-9_-]{0,62}`; the id in every subject and path of the tenant.
    pub id: String,
    pub name: String,
    /// The first admin user's name (default `admin`).
    #[serde(default)]
    pub admin_username: Option<String>,
    /// Quotas to start with (default: none).
    #[serde(default)]
    pub quotas: Option<TenantQuotas>,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProvisionedAdmin {
    pub id: Uuid,
    pub username: String,
    /// The web UI password, shown only in this answer.
    pub password: String,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProvisionedToken {
    pub id: Uuid,
    pub name: String,
    /// The admin token's secret, shown only in this answer.
    pub token: String,
}

/// The one answer that carries the new tenant's secrets.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CreatedTenant {
    pub tenant: TenantRecord,
    pub admin: ProvisionedAdmin,
    pub admin_token: ProvisionedToken,
    pub quotas: TenantQuotas,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TenantList {
    pub tenants: Vec<TenantRecord>,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TenantView {
    pub tenant: TenantRecord,
    pub quotas: TenantQuotas,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SuspendRequest {
    /// Why, shown to the tenant's callers and agents (1-500 characters).
    pub reason: String,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TenantErasure {
    pub id: String,
    /// Rows removed per table (`tenants` is the tenant itself).
    pub rows: std::collections::BTreeMap<String, u64>,
    /// JetStream messages removed from the tenant's subjects.
    pub stream_messages: u64,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlatformUser {
    pub id: Uuid,
    pub username: String,
    /// `admin`, `operator` or `viewer`.
    pub role: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlatformUserList {
    pub users: Vec<PlatformUser>,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUserRequest {
    pub username: String,
    /// `admin`, `operator` (default) or `viewer`.
    #[serde(default)]
    pub role: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CreatedUser {
    pub user: PlatformUser,
    /// The web UI password, shown only in this answer.
    pub password: String,
}

/// Whether a tenant may act: active, or suspended by the platform operator with a reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Standing {
    Active,
    Suspended {
        since: DateTime<Utc>,
        reason: String,
    },
}

/// A tenant as the platform operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TenantRecord {
    #[schemars(with = "String")]
    pub id: TenantId,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub standing: Standing,
}
