use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use pulse_config::DatabaseConfig;
use pulse_domain::TenantId;
use tokio_postgres::NoTls;

use crate::{StoreError, TenantTx, TxError, TxRetry, migrations};

/// Role name the migrations grant to; every application query runs as it.
pub const APP_ROLE: &str = "pulse_app";

/// Handle to the database as the application role.
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    /// Where the events the store's writers put in the outbox go (finding lifecycle events):
    /// the deployment's subjects, set by the service harness from `nats.subject_prefix`.
    subjects: pulse_bus::Subjects,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

/// The connection settings of the application role: `app_url` when given, otherwise the owner
/// url with the user replaced by `pulse_app` (and `app_password` when set).
pub fn app_connection_config(
    config: &DatabaseConfig,
) -> Result<tokio_postgres::Config, StoreError> {
    let parse = |url: &str| {
        tokio_postgres::Config::from_str(url).map_err(|e| StoreError::InvalidUrl(e.to_string()))
    };
    let mut pg = match &config.app_url {
        Some(url) => parse(url)?,
        None => {
            let mut pg = parse(&config.url)?;
            pg.user(APP_ROLE);
            match &config.app_password {
                Some(password) => pg.password(password.as_bytes()),
                None => pg.password(Vec::<u8>::new()),
            };
            pg
        }
    };
    pg.connect_timeout(Duration::from_millis(config.connect_timeout_ms));
    pg.application_name("pulse");
    Ok(pg)
}

/// Connects as the schema owner (for migrations and test setup).
pub async fn connect_owner(config: &DatabaseConfig) -> Result<tokio_postgres::Client, StoreError> {
    let mut pg = tokio_postgres::Config::from_str(&config.url)
        .map_err(|e| StoreError::InvalidUrl(e.to_string()))?;
    pg.connect_timeout(Duration::from_millis(config.connect_timeout_ms));
    let (client, connection) = pg
        .connect(NoTls)
        .await
        .map_err(|e| StoreError::Unavailable(e.to_string()))?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "owner connection closed");
        }
    });
    Ok(client)
}

/// Creates database `name` on the server `client` is connected to (as a role that may create
/// databases, on a maintenance database) unless it exists. Returns whether it created it; a
/// database created concurrently by someone else counts as existing.
pub async fn create_database_if_missing(
    client: &tokio_postgres::Client,
    name: &str,
) -> Result<bool, StoreError> {
    let exists = client
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
        .await?
        .is_some();
    if exists {
        return Ok(false);
    }
    match client
        .batch_execute(&format!("CREATE DATABASE {}", quote_ident(name)))
        .await
    {
        Ok(()) => Ok(true),
        Err(err) if err.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_DATABASE) => {
            Ok(false)
        }
        Err(err) => Err(err.into()),
    }
}

/// A Postgres identifier, double-quoted (`CREATE DATABASE` takes no bind parameter).
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl Store {
    /// Applies pending migrations as the owner, then opens the application pool and checks
    /// that the application role cannot bypass row-level security.
    pub async fn connect(config: &DatabaseConfig) -> Result<Self, StoreError> {
        let mut owner = connect_owner(config).await?;
        migrations::run(&mut owner).await?;
        drop(owner);
        Self::connect_app(config).await
    }

    /// Opens the application pool without migrating (the schema must be current).
    pub async fn connect_app(config: &DatabaseConfig) -> Result<Self, StoreError> {
        let pg = app_connection_config(config)?;
        let manager = Manager::from_config(
            pg,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(config.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_millis(config.connect_timeout_ms)))
            .create_timeout(Some(Duration::from_millis(config.connect_timeout_ms)))
            .build()
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let store = Self {
            pool,
            subjects: pulse_bus::Subjects::default(),
        };
        store.assert_role_is_isolated().await?;
        Ok(store)
    }

    async fn assert_role_is_isolated(&self) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_one(
                "SELECT current_user::text, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user",
                &[],
            )
            .await?;
        let (role, superuser, bypass): (String, bool, bool) = (row.get(0), row.get(1), row.get(2));
        if superuser || bypass {
            return Err(StoreError::UnsafeAppRole { role });
        }
        Ok(())
    }

    /// The same store with events enqueued on `subjects` (the deployment's subject prefix);
    /// without it they go to the unprefixed subjects.
    pub fn with_subjects(mut self, subjects: pulse_bus::Subjects) -> Self {
        self.subjects = subjects;
        self
    }

    /// The subjects events enqueued through this store are published on.
    pub fn subjects(&self) -> &pulse_bus::Subjects {
        &self.subjects
    }

    /// Opens a transaction scoped to one tenant.
    pub async fn tenant_tx(&self, tenant: &TenantId) -> Result<TenantTx, StoreError> {
        TenantTx::begin(
            self.pool.get().await?,
            tenant.clone(),
            self.subjects.clone(),
        )
        .await
    }

    /// Runs `body` with a new transaction of `tenant`, which `body` commits as its last step;
    /// while a run fails with a retryable store error ([`StoreError::is_retryable`]: a
    /// serialization failure or deadlock, or no connection to begin with), runs it again with a
    /// fresh transaction after the pause of `retry`, at most `retry.attempts` runs in all, and
    /// then returns the last error. Any other error, the body's own or the store's, is returned at
    /// once. A failed run's transaction is rolled back (dropped uncommitted), so `body` must not
    /// act outside the transaction it is given.
    ///
    /// `body` takes the transaction by value and commits it itself: the future it returns then
    /// borrows nothing from this function, which keeps the caller's future `Send`.
    pub async fn retry_tenant_tx<T, E, F, Fut>(
        &self,
        tenant: &TenantId,
        retry: &TxRetry,
        mut body: F,
    ) -> Result<T, E>
    where
        F: FnMut(TenantTx) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: TxError,
    {
        let mut attempt = 1;
        loop {
            let result = match self.tenant_tx(tenant).await {
                Ok(tx) => body(tx).await,
                Err(error) => Err(E::from(error)),
            };
            let retryable = match &result {
                Err(error) => error.store_error().filter(|e| e.is_retryable()),
                Ok(_) => None,
            };
            match retryable {
                Some(error) if attempt < retry.attempts => {
                    tracing::warn!(tenant = %tenant, attempt, %error, "tenant transaction failed; running it again");
                    tokio::time::sleep(retry.backoff.delay(attempt)).await;
                    attempt += 1;
                }
                _ => return result,
            }
        }
    }

    /// The raw application pool, for system tables without tenant scope (outbox).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Reachable, and the schema is what this build expects (for `/readyz`).
    pub async fn check_ready(&self) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        let pending = migrations::pending(&client).await?;
        if pending > 0 {
            return Err(StoreError::Unavailable(format!(
                "{pending} migration(s) not applied"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::quote_ident;

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("pulse_e2e"), "\"pulse_e2e\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
