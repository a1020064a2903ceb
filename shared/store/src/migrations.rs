//! Embedded migrations, applied by whichever service starts first.
//!
//! A session-level advisory lock serializes concurrent starters; each migration runs in its own
//! transaction and is recorded with a checksum so an edited migration is refused, not re-run.

use sha2::{Digest, Sha256};
use tokio_postgres::Client;

use crate::StoreError;

include!(concat!(env!("OUT_DIR"), "/migrations.rs"));

/// Arbitrary constant naming the migration lock ("pulse" in ASCII).
const MIGRATION_LOCK_KEY: i64 = 0x70_75_6c_73_65;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    pub version: &'static str,
    pub sql: &'static str,
}

impl Migration {
    pub fn checksum(&self) -> String {
        hex::encode(Sha256::digest(self.sql.as_bytes()))
    }
}

/// Every migration this build embeds, in order.
pub fn all() -> Vec<Migration> {
    MIGRATIONS
        .iter()
        .map(|(version, sql)| Migration { version, sql })
        .collect()
}

/// A short fingerprint of the embedded schema (used to name test templates).
pub fn fingerprint() -> String {
    let mut hasher = Sha256::new();
    for migration in all() {
        hasher.update(migration.version.as_bytes());
        hasher.update(migration.sql.as_bytes());
    }
    hex::encode(hasher.finalize())[..12].to_owned()
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    pub applied: Vec<String>,
    pub already_current: usize,
}

/// Applies pending migrations as the schema owner.
pub async fn run(owner: &mut Client) -> Result<MigrationReport, StoreError> {
    owner
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_KEY])
        .await?;
    let result = apply_locked(owner).await;
    // Unlock even when a migration failed; the session may be pooled or reused.
    let unlock = owner
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_KEY])
        .await;
    let report = result?;
    unlock?;
    Ok(report)
}

async fn apply_locked(owner: &mut Client) -> Result<MigrationReport, StoreError> {
    owner
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                version    text PRIMARY KEY,
                checksum   text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )",
        )
        .await?;
    let applied = applied_versions(owner).await?;
    let embedded = all();
    let unknown = applied
        .iter()
        .filter(|(version, _)| !embedded.iter().any(|m| m.version == version))
        .count();
    if unknown > 0 {
        return Err(StoreError::SchemaAhead(unknown));
    }
    let mut report = MigrationReport::default();
    for migration in embedded {
        let checksum = migration.checksum();
        if let Some((_, recorded)) = applied.iter().find(|(v, _)| v == migration.version) {
            if *recorded != checksum {
                return Err(StoreError::MigrationChanged {
                    version: migration.version.to_owned(),
                    applied: recorded.clone(),
                    embedded: checksum,
                });
            }
            report.already_current += 1;
            continue;
        }
        let tx = owner.transaction().await?;
        tx.batch_execute(migration.sql)
            .await
            .map_err(|source| StoreError::MigrationFailed {
                version: migration.version.to_owned(),
                source,
            })?;
        tx.execute(
            "INSERT INTO schema_migrations (version, checksum) VALUES ($1, $2)",
            &[&migration.version, &checksum],
        )
        .await?;
        tx.commit().await?;
        tracing::info!(version = migration.version, "applied migration");
        report.applied.push(migration.version.to_owned());
    }
    Ok(report)
}

async fn applied_versions(client: &Client) -> Result<Vec<(String, String)>, StoreError> {
    let rows = client
        .query(
            "SELECT version, checksum FROM schema_migrations ORDER BY version",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// How many embedded migrations the database has not applied yet (for `/readyz`).
pub async fn pending(client: &Client) -> Result<usize, StoreError> {
    let exists: bool = client
        .query_one(
            "SELECT to_regclass('public.schema_migrations') IS NOT NULL",
            &[],
        )
        .await?
        .get(0);
    if !exists {
        return Ok(all().len());
    }
    let applied = applied_versions(client).await?;
    Ok(all()
        .iter()
        .filter(|m| !applied.iter().any(|(v, _)| v == m.version))
        .count())
}
