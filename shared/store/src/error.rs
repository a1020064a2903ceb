use thiserror::Error;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error("database error: {0}")]
    Database(#[from] tokio_postgres::Error),
    #[error("invalid database url: {0}")]
    InvalidUrl(String),
    #[error(
        "application role '{role}' is a superuser or bypasses row-level security; tenant isolation would not hold"
    )]
    UnsafeAppRole { role: String },
    #[error(
        "migration {version} was changed after it was applied (checksum {applied} != {embedded})"
    )]
    MigrationChanged {
        version: String,
        applied: String,
        embedded: String,
    },
    #[error("migration {version} failed: {source}")]
    MigrationFailed {
        version: String,
        source: tokio_postgres::Error,
    },
    #[error("database schema has {0} migration(s) this build does not know; upgrade the service")]
    SchemaAhead(usize),
    #[error("{0}")]
    Invalid(String),
    #[error("canonical json: {0}")]
    Canonical(#[from] pulse_domain::canonical_json::CanonicalJsonError),
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => StoreError::Database(e),
            other => StoreError::Unavailable(other.to_string()),
        }
    }
}

impl StoreError {
    /// The SQLSTATE of a database error, if this is one.
    pub fn sql_state(&self) -> Option<&tokio_postgres::error::SqlState> {
        match self {
            StoreError::Database(e) | StoreError::MigrationFailed { source: e, .. } => e.code(),
            _ => None,
        }
    }

    pub fn is_unique_violation(&self) -> bool {
        self.sql_state() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION)
    }

    /// Whether the same transaction, run again from the start, may succeed; what
    /// [`crate::Store::retry_tenant_tx`] retries:
    ///
    /// - `serialization_failure` (40001) and `deadlock_detected` (40P01): the server rolled the
    ///   transaction back because of a concurrent one;
    /// - [`StoreError::Unavailable`]: no connection could be had to begin it, so nothing ran.
    ///
    /// Nothing else is: a constraint or data error fails the same way again, and a connection
    /// lost mid-transaction may have lost the answer to a COMMIT that took effect.
    pub fn is_retryable(&self) -> bool {
        use tokio_postgres::error::SqlState;
        matches!(self, StoreError::Unavailable(_))
            || matches!(
                self.sql_state(),
                Some(state) if *state == SqlState::T_R_SERIALIZATION_FAILURE
                    || *state == SqlState::T_R_DEADLOCK_DETECTED
            )
    }
}
