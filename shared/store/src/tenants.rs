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
