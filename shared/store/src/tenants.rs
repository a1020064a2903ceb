//! Tenants (organizations).

use chrono::{DateTime, Utc};
use pulse_domain::TenantId;
use serde::Serialize;

use crate::{Store, StoreError, TenantTx};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tenant {
    pub id: TenantId,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

/// Creates a tenant; `Ok(None)` when it already exists. Row-level security only lets a
/// transaction create the tenant it is scoped to.
pub async fn create(
    store: &Store,
    id: &TenantId,
    name: &str,
) -> Result<Option<Tenant>, StoreError> {
    let tx = store.tenant_tx(id).await?;
    let created = insert(&tx, name).await?;
    tx.commit().await?;
    Ok(created)
}

/// Inserts the transaction's own tenant; `Ok(None)` when it already exists.
pub async fn insert(tx: &TenantTx, name: &str) -> Result<Option<Tenant>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "INSERT INTO tenants (id, name) VALUES ($1, $2)
             ON CONFLICT (id) DO NOTHING
             RETURNING created_at",
            &[&tx.tenant().as_str(), &name],
        )
        .await?;
    Ok(row.map(|row| Tenant {
        id: tx.tenant().clone(),
        name: name.to_owned(),
        created_at: row.get(0),
    }))
}

/// The transaction's tenant, if it exists.
pub async fn current(tx: &TenantTx) -> Result<Option<Tenant>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT name, created_at FROM tenants WHERE id = $1",
            &[&tx.tenant().as_str()],
        )
        .await?;
    Ok(row.map(|row| Tenant {
        id: tx.tenant().clone(),
        name: row.get(0),
        created_at: row.get(1),
    }))
}

/// Whether a tenant may act: active, or suspended by the platform operator with a reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Standing {
    Active,
    Suspended {
        since: DateTime<Utc>,
        reason: String,
    },
}

impl Standing {
    fn from_columns(at: Option<DateTime<Utc>>, reason: Option<String>) -> Self {
        match at {
            Some(since) => Standing::Suspended {
                since,
                reason: reason.unwrap_or_default(),
            },
            None => Standing::Active,
        }
    }

    /// The suspension reason, when suspended.
    pub fn suspension_reason(&self) -> Option<&str> {
        match self {
            Standing::Active => None,
            Standing::Suspended { reason, .. } => Some(reason),
        }
    }
}

/// A tenant as the platform operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TenantRecord {
    pub id: TenantId,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub standing: Standing,
}

/// The standing of `tenant` (`None` when there is no such tenant). Needs no tenant transaction:
/// token checks call it before any tenant is known.
pub async fn standing(store: &Store, tenant: &TenantId) -> Result<Option<Standing>, StoreError> {
    let client = store.pool().get().await?;
    let row = client
        .query_opt(
            "SELECT suspended_at, suspended_reason FROM pulse_tenant_standing($1)",
            &[&tenant.as_str()],
        )
        .await?;
    Ok(row.map(|row| Standing::from_columns(row.get(0), row.get(1))))
}

/// The standing of the transaction's tenant (`None` when it does not exist).
pub async fn current_standing(tx: &TenantTx) -> Result<Option<Standing>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT suspended_at, suspended_reason FROM tenants WHERE id = $1",
            &[&tx.tenant().as_str()],
        )
        .await?;
    Ok(row.map(|row| Standing::from_columns(row.get(0), row.get(1))))
}

fn record_from_row(row: &tokio_postgres::Row) -> Result<TenantRecord, StoreError> {
    let id: String = row.get(0);
    Ok(TenantRecord {
        id: TenantId::new(id).map_err(|e| StoreError::Invalid(e.to_string()))?,
        name: row.get(1),
        created_at: row.get(2),
        standing: Standing::from_columns(row.get(3), row.get(4)),
    })
}

/// Every tenant, oldest first (platform operator only).
pub async fn list_all(store: &Store) -> Result<Vec<TenantRecord>, StoreError> {
    let client = store.pool().get().await?;
    let rows = client
        .query(
            "SELECT id, name, created_at, suspended_at, suspended_reason
             FROM pulse_platform_tenants()",
            &[],
        )
        .await?;
    rows.iter().map(record_from_row).collect()
}

/// One tenant with its standing, if it exists.
pub async fn get(store: &Store, tenant: &TenantId) -> Result<Option<TenantRecord>, StoreError> {
    let tx = store.tenant_tx(tenant).await?;
    let row = tx
        .client()
        .query_opt(
            "SELECT id, name, created_at, suspended_at, suspended_reason FROM tenants
             WHERE id = $1",
            &[&tenant.as_str()],
        )
        .await?;
    tx.rollback().await?;
    row.as_ref().map(record_from_row).transpose()
}

/// Suspends the transaction's tenant with `reason` (`Some(reason)`) or resumes it (`None`);
/// false when the tenant does not exist. A second suspension keeps the first time and takes the
/// new reason.
pub async fn set_suspension(tx: &TenantTx, reason: Option<&str>) -> Result<bool, StoreError> {
    let updated = tx
        .client()
        .execute(
            "UPDATE tenants
             SET suspended_reason = $2,
                 suspended_at = CASE WHEN $2::text IS NULL THEN NULL
                                     ELSE COALESCE(suspended_at, now()) END
             WHERE id = $1",
            &[&tx.tenant().as_str(), &reason],
        )
        .await?;
    Ok(updated == 1)
}

/// What erasing a tenant removed: rows per table (the `tenants` row last).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Erasure {
    pub rows: std::collections::BTreeMap<String, u64>,
}

impl Erasure {
    pub fn total(&self) -> u64 {
        self.rows.values().sum()
    }

    /// Whether the tenant existed (its own row was removed).
    pub fn found(&self) -> bool {
        self.rows.get("tenants").copied().unwrap_or(0) > 0
    }
}

/// Removes every row of `tenant` in every table with a `tenant_id` column, then the tenant,
/// in one transaction (`pulse_platform_delete_tenant`). Irreversible.
pub async fn erase(store: &Store, tenant: &TenantId) -> Result<Erasure, StoreError> {
    let mut client = store.pool().get().await?;
    let tx = client.transaction().await?;
    let rows = tx
        .query(
            "SELECT table_name, deleted FROM pulse_platform_delete_tenant($1)",
            &[&tenant.as_str()],
        )
        .await?;
    tx.commit().await?;
    let mut erasure = Erasure::default();
    for row in rows {
        let table: String = row.get(0);
        let deleted: i64 = row.get(1);
        *erasure.rows.entry(table).or_default() += u64::try_from(deleted).unwrap_or(0);
    }
    Ok(erasure)
}
