use std::time::Duration;

use deadpool_postgres::Object;
use pulse_domain::TenantId;
use pulse_domain::backoff::Backoff;

use crate::StoreError;

/// How [`crate::Store::retry_tenant_tx`] runs a transaction again: at most `attempts` runs in
/// all, pausing `backoff.delay(n)` after failed run `n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxRetry {
    pub attempts: u32,
    pub backoff: Backoff,
}

impl Default for TxRetry {
    /// Four runs, the pauses doubling from 200 ms (jittered, at most 2 s).
    fn default() -> Self {
        Self {
            attempts: 4,
            backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(2)),
        }
    }
}

/// The error of a transaction body run by [`crate::Store::retry_tenant_tx`]: a store error,
/// which may be retried, or the body's own refusal, which never is.
pub trait TxError: From<StoreError> {
    /// The store error this is, if it is one.
    fn store_error(&self) -> Option<&StoreError>;
}

impl TxError for StoreError {
    fn store_error(&self) -> Option<&StoreError> {
        Some(self)
    }
}

/// A transaction in which row-level security shows exactly one tenant.
///
/// `app.tenant_id` is set with `set_config(..., true)`, which is local to this transaction, so
/// it cannot leak to the next user of the pooled connection. Dropping a `TenantTx` without
/// `commit` rolls it back.
pub struct TenantTx {
    client: Option<Object>,
    tenant: TenantId,
    subjects: pulse_bus::Subjects,
}

impl TenantTx {
    pub(crate) async fn begin(
        client: Object,
        tenant: TenantId,
        subjects: pulse_bus::Subjects,
    ) -> Result<Self, StoreError> {
        let mut tx = Self {
            client: Some(client),
            tenant,
            subjects,
        };
        // One round trip for both statements. The tenant id is safe to inline: TenantId admits
        // only [a-z0-9_-], so it cannot close the string literal.
        let sql = format!(
            "BEGIN; SELECT set_config('app.tenant_id', '{}', true)",
            tx.tenant.as_str()
        );
        tx.client_mut()?.batch_execute(&sql).await?;
        Ok(tx)
    }

    fn client_mut(&mut self) -> Result<&mut Object, StoreError> {
        self.client
            .as_mut()
            .ok_or_else(|| StoreError::Invalid("transaction already finished".to_owned()))
    }

    /// The connection, inside the open transaction. It derefs to `tokio_postgres::Client` and
    /// adds `prepare_cached` for hot statements.
    pub fn client(&self) -> &deadpool_postgres::ClientWrapper {
        // `client` is only `None` after commit/rollback, which consume `self`.
        match &self.client {
            Some(object) => object,
            None => unreachable!("TenantTx used after it finished"),
        }
    }

    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// The subjects of the events this transaction enqueues in the outbox.
    pub fn subjects(&self) -> &pulse_bus::Subjects {
        &self.subjects
    }

    pub async fn commit(mut self) -> Result<(), StoreError> {
        let client = self.client.take();
        if let Some(client) = client {
            client.batch_execute("COMMIT").await?;
        }
        Ok(())
    }

    pub async fn rollback(mut self) -> Result<(), StoreError> {
        let client = self.client.take();
        if let Some(client) = client {
            client.batch_execute("ROLLBACK").await?;
        }
        Ok(())
    }
}

impl Drop for TenantTx {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        // Never hand a connection with an open transaction back to the pool.
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    if client.batch_execute("ROLLBACK").await.is_err() {
                        drop(Object::take(client));
                    }
                });
            }
            Err(_) => drop(Object::take(client)),
        }
    }
}
