//! First start: the `default` tenant, its admin user and an admin token with every scope.

use std::collections::BTreeSet;

use pulse_domain::{Scope, TenantId};
use serde_json::json;

use crate::audit::{self, AuditEntry};
use crate::tokens::{self, IssuedToken, NewToken};
use crate::users::{self, UserRole};
use crate::{Store, StoreError, tenants};

pub const ADMIN_USERNAME: &str = "admin";
pub const ADMIN_TOKEN_NAME: &str = "bootstrap-admin";

/// Creates the default tenant, admin user and admin token if the tenant does not exist yet.
///
/// Returns the issued token only to the one caller that created the tenant; concurrent starters
/// race on the tenant's primary key and the losers get `None`. `persist` runs before the
/// transaction commits, so a secret that could not be saved is never left valid.
pub async fn ensure_default_tenant<F>(
    store: &Store,
    persist: F,
) -> Result<Option<IssuedToken>, StoreError>
where
    F: FnOnce(&IssuedToken) -> Result<(), String>,
{
    let tenant = TenantId::default_tenant();
    let tx = store.tenant_tx(&tenant).await?;
    if tenants::insert(&tx, "Default organization")
        .await?
        .is_none()
    {
        tx.rollback().await?;
        return Ok(None);
    }
    let admin = users::create(&tx, ADMIN_USERNAME, UserRole::Admin).await?;
    let issued = tokens::issue(
        &tx,
        NewToken {
            name: ADMIN_TOKEN_NAME.to_owned(),
            scopes: Scope::ALL.into_iter().collect::<BTreeSet<_>>(),
            expires_at: None,
            created_by: Some(admin.id),
        },
    )
    .await?;
    audit::append(
        &tx,
        &AuditEntry {
            actor: "service:bootstrap".to_owned(),
            kind: "tenant.bootstrapped".to_owned(),
            subject: tenant.to_string(),
            payload: json!({"admin_user": admin.id, "admin_token": issued.token.id}),
        },
    )
    .await?;
    persist(&issued).map_err(StoreError::Invalid)?;
    tx.commit().await?;
    Ok(Some(issued))
}
