//! First start: the `default` tenant, its admin user and an admin token with every scope; and
//! the way back in when that token is lost.
//!
//! Invariants: the bootstrap token is issued exactly once per tenant (to whoever created the
//! tenant). Recovery never creates users or tenants and revokes nothing: it adds one more admin
//! token for an existing admin user, and the same transaction appends a `token.recovered` row to
//! the tenant's audit chain, so a recovered token never exists without its audit row.

use std::collections::BTreeSet;

use pulse_domain::{Scope, TenantId};
use serde_json::json;

use crate::audit::{self, AuditEntry};
use crate::tokens::{self, IssuedToken, NewToken};
use crate::users::{self, User, UserRole};
use crate::{Store, StoreError, tenants};

pub const ADMIN_USERNAME: &str = "admin";
pub const ADMIN_TOKEN_NAME: &str = "bootstrap-admin";
/// Name of a token issued by [`recover_admin_token`].
pub const RECOVERED_TOKEN_NAME: &str = "recovered-admin";
/// Audit actor of a recovery: whoever holds the database owner's credentials, not a token.
pub const RECOVERY_ACTOR: &str = "service:admin-recovery";

/// What the bootstrap hands out once: the admin token and the admin user's web password.
#[derive(Debug, Clone)]
pub struct BootstrapSecrets {
    pub token: IssuedToken,
    pub admin_password: String,
}

/// Creates the default tenant, admin user (with a generated password for the web UI) and admin
/// token if the tenant does not exist yet.
///
/// Returns the secrets only to the one caller that created the tenant; concurrent starters race
/// on the tenant's primary key and the losers get `None`. `persist` runs before the transaction
/// commits, so a secret that could not be saved is never left valid.
pub async fn ensure_default_tenant<F>(
    store: &Store,
    persist: F,
) -> Result<Option<BootstrapSecrets>, StoreError>
where
    F: FnOnce(&BootstrapSecrets) -> Result<(), String>,
{
    let admin_password = users::generate_password();
    let hashed = admin_password.clone();
    let password_hash = tokio::task::spawn_blocking(move || users::hash_password(&hashed))
        .await
        .map_err(|e| StoreError::Invalid(format!("password hashing did not finish: {e}")))?
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let tenant = TenantId::default_tenant();
    let tx = store.tenant_tx(&tenant).await?;
    let Some((_, issued)) = provision_in(
        &tx,
        "Default organization",
        ADMIN_USERNAME,
        &password_hash,
        "service:bootstrap",
        "tenant.bootstrapped",
    )
    .await?
    else {
        tx.rollback().await?;
        return Ok(None);
    };
    let secrets = BootstrapSecrets {
        token: issued,
        admin_password,
    };
    persist(&secrets).map_err(StoreError::Invalid)?;
    tx.commit().await?;
    Ok(Some(secrets))
}

/// Creates the transaction's tenant with its first admin user (password hash given) and an
/// admin token with every scope, and records `kind` in the new tenant's audit chain; `None`
/// when the tenant already exists (nothing written).
async fn provision_in(
    tx: &crate::TenantTx,
    name: &str,
    admin_username: &str,
    password_hash: &str,
    actor: &str,
    kind: &str,
) -> Result<Option<(User, IssuedToken)>, StoreError> {
    if tenants::insert(tx, name).await?.is_none() {
        return Ok(None);
    }
    let admin = users::create(tx, admin_username, UserRole::Admin).await?;
    users::set_password_hash(tx, admin.id, password_hash).await?;
    let issued = tokens::issue(
        tx,
        NewToken {
            name: ADMIN_TOKEN_NAME.to_owned(),
            scopes: Scope::ALL.into_iter().collect::<BTreeSet<_>>(),
            expires_at: None,
            created_by: Some(admin.id),
        },
    )
    .await?;
    audit::append(
        tx,
        &AuditEntry {
            actor: actor.to_owned(),
            kind: kind.to_owned(),
            subject: tx.tenant().to_string(),
            payload: json!({"admin_user": admin.id, "admin_token": issued.token.id}),
        },
    )
    .await?;
    Ok(Some((admin, issued)))
}

/// A tenant the platform operator created: its first admin and the secrets shown once.
#[derive(Debug, Clone)]
pub struct ProvisionedTenant {
    pub tenant: tenants::Tenant,
    pub admin: User,
    pub admin_password: String,
    pub token: IssuedToken,
}

/// Why a tenant could not be provisioned.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    #[error("tenant '{0}' already exists")]
    Exists(TenantId),
    #[error("invalid {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn check_username(username: &str) -> Result<&str, String> {
    let username = username.trim();
    if username.is_empty()
        || username.chars().count() > 200
        || username
            .chars()
            .any(|c| c.is_control() || c.is_whitespace())
    {
        return Err("1 to 200 characters, no spaces or control characters".to_owned());
    }
    Ok(username)
}

/// Creates a tenant with its first admin user (a generated password) and an admin token, in one
/// transaction with a `tenant.provisioned` audit row naming `actor`.
pub async fn provision_tenant(
    store: &Store,
    tenant: &TenantId,
    name: &str,
    admin_username: &str,
    actor: &str,
) -> Result<ProvisionedTenant, ProvisionError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(ProvisionError::Invalid {
            field: "name",
            reason: "1 to 200 characters, no control characters".to_owned(),
        });
    }
    let admin_username =
        check_username(admin_username).map_err(|reason| ProvisionError::Invalid {
            field: "admin_username",
            reason,
        })?;
    let admin_password = users::generate_password();
    let hashed = admin_password.clone();
    let password_hash = tokio::task::spawn_blocking(move || users::hash_password(&hashed))
        .await
        .map_err(|e| StoreError::Invalid(format!("password hashing did not finish: {e}")))?
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let tx = store.tenant_tx(tenant).await?;
    let Some((admin, token)) = provision_in(
        &tx,
        name,
        admin_username,
        &password_hash,
        actor,
        "tenant.provisioned",
    )
    .await?
    else {
        tx.rollback().await?;
        return Err(ProvisionError::Exists(tenant.clone()));
    };
    let created = tenants::current(&tx)
        .await?
        .ok_or_else(|| StoreError::Invalid("the new tenant is not visible".to_owned()))?;
    tx.commit().await?;
    Ok(ProvisionedTenant {
        tenant: created,
        admin,
        admin_password,
        token,
    })
}

/// Why a user could not be created.
#[derive(Debug, thiserror::Error)]
pub enum CreateUserError {
    #[error(
        "tenant '{0}' does not exist in this database; start the stack (`pulsectl up`) to \
         create the default tenant, or name an existing tenant with --tenant"
    )]
    NoTenant(TenantId),
    #[error("tenant '{tenant}' already has a user named '{username}'")]
    Exists { tenant: TenantId, username: String },
    #[error("invalid username: {0}")]
    Username(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Creates a user with a password hash (from [`users::hash_password`]) in an existing tenant, and
/// records `user.created` in the tenant's audit chain in the same transaction.
pub async fn create_user(
    store: &Store,
    tenant: &TenantId,
    username: &str,
    role: UserRole,
    password_hash: &str,
    actor: &str,
) -> Result<User, CreateUserError> {
    let username = check_username(username).map_err(CreateUserError::Username)?;
    let tx = store.tenant_tx(tenant).await?;
    if tenants::current(&tx).await?.is_none() {
        return Err(CreateUserError::NoTenant(tenant.clone()));
    }
    if users::by_username(&tx, username).await?.is_some() {
        return Err(CreateUserError::Exists {
            tenant: tenant.clone(),
            username: username.to_owned(),
        });
    }
    let user = users::create(&tx, username, role).await?;
    users::set_password_hash(&tx, user.id, password_hash).await?;
    audit::append(
        &tx,
        &AuditEntry {
            actor: actor.to_owned(),
            kind: "user.created".to_owned(),
            subject: format!("user:{}", user.id),
            payload: json!({"username": user.username, "role": role.as_str()}),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(user)
}

/// Why no admin token could be recovered.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    #[error(
        "tenant '{0}' does not exist in this database; start the stack (`pulsectl up`) to \
         create it, or name an existing tenant with --tenant"
    )]
    NoTenant(TenantId),
    #[error(
        "tenant '{0}' has no users, so there is no admin to recover a token for; start the stack \
         (`pulsectl up`) on an empty database to bootstrap one"
    )]
    NoUsers(TenantId),
    #[error("tenant '{tenant}' has {users} user(s) but none with the admin role")]
    NoAdmin { tenant: TenantId, users: usize },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A token issued by [`recover_admin_token`], with the admin it acts for.
#[derive(Debug, Clone)]
pub struct RecoveredToken {
    pub issued: IssuedToken,
    pub admin: User,
    pub audit_seq: i64,
}

/// The admin a recovered token is issued for: the bootstrap admin (`admin`) when it still has
/// the admin role, otherwise the longest-standing admin.
pub fn recovery_admin(users: &[User]) -> Option<&User> {
    let admins = || users.iter().filter(|user| user.role == UserRole::Admin);
    admins()
        .find(|user| user.username == ADMIN_USERNAME)
        .or_else(|| admins().min_by_key(|user| (user.created_at, user.id)))
}

/// Issues a new token with every scope for the tenant's existing admin user and records it in
/// the tenant's audit chain. Nothing is revoked. Like the bootstrap, `persist` runs before the
/// transaction commits, so a secret that could not be saved is never left valid.
pub async fn recover_admin_token<F>(
    store: &Store,
    tenant: &TenantId,
    persist: F,
) -> Result<RecoveredToken, RecoveryError>
where
    F: FnOnce(&IssuedToken) -> Result<(), String>,
{
    let tx = store.tenant_tx(tenant).await?;
    if tenants::current(&tx).await?.is_none() {
        return Err(RecoveryError::NoTenant(tenant.clone()));
    }
    let users = users::list(&tx).await?;
    if users.is_empty() {
        return Err(RecoveryError::NoUsers(tenant.clone()));
    }
    let admin = recovery_admin(&users)
        .cloned()
        .ok_or_else(|| RecoveryError::NoAdmin {
            tenant: tenant.clone(),
            users: users.len(),
        })?;
    let issued = tokens::issue(
        &tx,
        NewToken {
            name: RECOVERED_TOKEN_NAME.to_owned(),
            scopes: Scope::ALL.into_iter().collect::<BTreeSet<_>>(),
            expires_at: None,
            created_by: Some(admin.id),
        },
    )
    .await?;
    let record = audit::append(
        &tx,
        &AuditEntry {
            actor: RECOVERY_ACTOR.to_owned(),
            kind: "token.recovered".to_owned(),
            subject: issued.token.id.to_string(),
            payload: json!({
                "name": issued.token.name,
                "scopes": issued.token.scopes,
                "admin_user": admin.id,
                "admin_username": admin.username,
            }),
        },
    )
    .await?;
    persist(&issued).map_err(StoreError::Invalid)?;
    tx.commit().await?;
    Ok(RecoveredToken {
        issued,
        admin,
        audit_seq: record.seq,
    })
}

/// How many users `tenant` has; 0 when the tenant does not exist.
pub async fn user_count(store: &Store, tenant: &TenantId) -> Result<usize, StoreError> {
    let tx = store.tenant_tx(tenant).await?;
    let count = users::list(&tx).await?.len();
    tx.rollback().await?;
    Ok(count)
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone as _, Utc};
    use uuid::Uuid;

    use super::*;

    fn user(name: &str, role: UserRole, minute: u32) -> User {
        User {
            id: Uuid::now_v7(),
            username: name.to_owned(),
            role,
            created_at: Utc.with_ymd_and_hms(2026, 1, 1, 0, minute, 0).unwrap(),
        }
    }

    #[test]
    fn recovery_prefers_the_bootstrap_admin_then_the_oldest_admin() {
        let ops = user("ops", UserRole::Operator, 0);
        let late = user("late-admin", UserRole::Admin, 9);
        let early = user("early-admin", UserRole::Admin, 5);
        let bootstrap = user(ADMIN_USERNAME, UserRole::Admin, 7);
        let all = [ops.clone(), late.clone(), early.clone(), bootstrap.clone()];
        assert_eq!(recovery_admin(&all), Some(&bootstrap));
        let without_bootstrap = [ops.clone(), late, early.clone()];
        assert_eq!(recovery_admin(&without_bootstrap), Some(&early));
        // A user named `admin` who lost the admin role is not an admin.
        let demoted = user(ADMIN_USERNAME, UserRole::Viewer, 1);
        assert_eq!(recovery_admin(&[demoted, ops.clone()]), None);
        assert_eq!(recovery_admin(&[]), None);
    }
}
