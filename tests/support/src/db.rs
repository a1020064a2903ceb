//! A fresh, migrated database per test, cloned from a template built once per schema version.
//!
//! The template is named after the migrations' fingerprint, so a changed migration builds a new
//! one. Building is serialized across test processes with an advisory lock; clones are cheap.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use deadpool_postgres::Pool;
use pulse_config::DatabaseConfig;
use pulse_store::Store;
use tokio_postgres::{Client, NoTls};

/// Server to use, as a superuser connection to its maintenance database.
pub fn server_url() -> String {
    std::env::var("PULSE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/postgres".to_owned())
}

const TEMPLATE_LOCK_KEY: i64 = 0x70_74_65_6d_70; // "ptemp"
const TEST_DB_PREFIX: &str = "pulse_t_";
const STALE_AFTER: Duration = Duration::from_secs(3 * 3600);

pub struct TestDb {
    name: String,
    owner_url: String,
    store: Store,
}

/// `server_url` (a connection URL to any database of the server) pointed at `database`.
pub fn database_url(server_url: &str, database: &str) -> anyhow::Result<String> {
    let (base, params) = match server_url.split_once('?') {
        Some((base, params)) => (base, Some(params)),
        None => (server_url, None),
    };
    let authority_start = base.find("://").context("database url has no scheme")? + 3;
    let path_start = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    let mut url = format!("{}/{database}", &base[..path_start]);
    if let Some(params) = params {
        url.push('?');
        url.push_str(params);
    }
    Ok(url)
}

/// Drops a database of the test server (`crate::db::server_url`), disconnecting its sessions.
pub async fn drop_database(name: &str) -> anyhow::Result<()> {
    let server = crate::db::server_url();
    let (client, connection) = tokio_postgres::connect(&server, tokio_postgres::NoTls)
        .await
        .with_context(|| format!("connecting to {server}"))?;
    let connection = tokio::spawn(connection);
    let quoted = name.replace('"', "\"\"");
    let result = client
        .batch_execute(&format!(
            "DROP DATABASE IF EXISTS \"{quoted}\" WITH (FORCE)"
        ))
        .await;
    drop(client);
    let _ = connection.await;
    result.with_context(|| format!("dropping database {name}"))
}

async fn connect(url: &str) -> anyhow::Result<Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .with_context(|| format!("connecting to test Postgres at {url}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

fn database_config(owner_url: &str) -> DatabaseConfig {
    DatabaseConfig {
        url: owner_url.to_owned(),
        pool_size: 8,
        ..pulse_config::PulseConfig::default().database
    }
}

async fn ensure_template(admin: &Client, server: &str) -> anyhow::Result<String> {
    let template = format!("pulse_tpl_{}", pulse_store::migrations::fingerprint());
    admin
        .execute("SELECT pg_advisory_lock($1)", &[&TEMPLATE_LOCK_KEY])
        .await?;
    let result = async {
        let ready: Option<bool> = admin
            .query_opt(
                "SELECT datistemplate FROM pg_database WHERE datname = $1",
                &[&template],
            )
            .await?
            .map(|row| row.get(0));
        match ready {
            Some(true) => return Ok(()),
            Some(false) => {
                // A build that died half-way.
                admin
                    .batch_execute(&format!("DROP DATABASE \"{template}\" WITH (FORCE)"))
                    .await?;
            }
            None => {}
        }
        admin
            .batch_execute(&format!("CREATE DATABASE \"{template}\""))
            .await?;
        {
            let mut owner = connect(&database_url(server, &template)?).await?;
            pulse_store::migrations::run(&mut owner).await?;
        }
        admin
            .batch_execute(&format!(
                "ALTER DATABASE \"{template}\" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"
            ))
            .await?;
        sweep_stale(admin).await?;
        anyhow::Ok(())
    }
    .await;
    admin
        .execute("SELECT pg_advisory_unlock($1)", &[&TEMPLATE_LOCK_KEY])
        .await?;
    result?;
    Ok(template)
}

/// Drops test databases left behind by runs that ended more than a few hours ago.
async fn sweep_stale(admin: &Client) -> anyhow::Result<()> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let rows = admin
        .query(
            "SELECT datname FROM pg_database WHERE datname LIKE $1",
            &[&format!("{TEST_DB_PREFIX}%")],
        )
        .await?;
    for row in rows {
        let name: String = row.get(0);
        let created = name
            .strip_prefix(TEST_DB_PREFIX)
            .and_then(|rest| rest.split('_').next())
            .and_then(|secs| secs.parse::<u64>().ok());
        if created.is_some_and(|at| now.saturating_sub(at) > STALE_AFTER.as_secs()) {
            let _ = admin
                .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                .await;
        }
    }
    Ok(())
}

impl TestDb {
    /// A new database with every migration applied and the application role ready.
    pub async fn create() -> anyhow::Result<Self> {
        let server = server_url();
        let admin = connect(&server).await?;
        let template = ensure_template(&admin, &server).await?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
        let name = format!("{TEST_DB_PREFIX}{now}_{:016x}", rand::random::<u64>());
        let mut attempt = 0;
        loop {
            // Two clones of one template at the same instant can collide; retry briefly.
            match admin
                .batch_execute(&format!(
                    "CREATE DATABASE \"{name}\" TEMPLATE \"{template}\""
                ))
                .await
            {
                Ok(()) => break,
                Err(e) if attempt < 20 => {
                    attempt += 1;
                    tracing::debug!(error = %e, attempt, "retrying template clone");
                    tokio::time::sleep(Duration::from_millis(50 * attempt)).await;
                }
                Err(e) => return Err(e).context("cloning the test template database"),
            }
        }
        let owner_url = database_url(&server, &name)?;
        let store = Store::connect_app(&database_config(&owner_url))
            .await
            .context("connecting as the application role")?;
        Ok(Self {
            name,
            owner_url,
            store,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Superuser connection string of this database (bypasses row-level security).
    pub fn owner_url(&self) -> &str {
        &self.owner_url
    }

    /// Settings a service would use for this database.
    pub fn database_config(&self) -> DatabaseConfig {
        database_config(&self.owner_url)
    }

    /// The store, connected as the application role.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Events the store's writers enqueue (finding lifecycle events) go to `subjects`, the
    /// prefix of the stack relaying this database's outbox.
    pub fn use_subjects(&mut self, subjects: pulse_bus::Subjects) {
        self.store = self.store.clone().with_subjects(subjects);
    }

    /// The application role's pool.
    pub fn app_pool(&self) -> Pool {
        self.store.pool().clone()
    }

    /// A superuser client on this database, for tampering and inspection in tests.
    pub async fn owner_client(&self) -> anyhow::Result<Client> {
        connect(&self.owner_url).await
    }

    /// Drops the database now (otherwise a later run sweeps it).
    pub async fn cleanup(self) -> anyhow::Result<()> {
        self.store.pool().close();
        drop_database(&self.name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_url_swaps_only_the_path() {
        assert_eq!(
            database_url("postgres://root@127.0.0.1:5432/postgres", "x").unwrap(),
            "postgres://root@127.0.0.1:5432/x"
        );
        assert_eq!(
            database_url("postgres://u:p@h/db?sslmode=disable", "y").unwrap(),
            "postgres://u:p@h/y?sslmode=disable"
        );
        assert_eq!(
            database_url("postgres://root@h:5432", "z").unwrap(),
            "postgres://root@h:5432/z"
        );
        assert!(database_url("nonsense", "x").is_err());
    }
}
