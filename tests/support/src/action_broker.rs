//! The `pulse-action-broker` binary for tests, on the same database, NATS server and subject
//! prefix as a [`TestGateway`].

use std::path::Path;

use crate::service::{ServiceProcess, TestGateway, start_backend, stop_backend};

/// A running action-broker; dropping it kills the process.
pub struct TestActionBroker {
    pub process: ServiceProcess,
    /// `http://127.0.0.1:<port>` of its health listener.
    pub health_url: String,
}

impl TestActionBroker {
    /// Starts the action-broker with `extra_env`, logging to `<dir>/action-broker.log`, and waits
    /// until it is ready (see [`start_backend`]).
    pub async fn start(
        gateway: &TestGateway,
        dir: &Path,
        extra_env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let env = extra_env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
        let (process, health_url) = start_backend(gateway, "pulse-action-broker", dir, env).await?;
        Ok(Self {
            process,
            health_url,
        })
    }

    /// SIGTERM and a clean exit.
    pub async fn stop(self) -> anyhow::Result<()> {
        stop_backend(self.process, "action-broker").await
    }
}

/// Waits until the stored action `id` satisfies `done`; the action then.
pub async fn action_until(
    store: &pulse_store::Store,
    tenant: &pulse_domain::TenantId,
    id: uuid::Uuid,
    deadline: std::time::Duration,
    what: &str,
    done: impl Fn(&pulse_store::actions::StoredAction) -> bool,
) -> anyhow::Result<pulse_store::actions::StoredAction> {
    crate::wait::until(deadline, what, || async {
        let tx = store.tenant_tx(tenant).await.ok()?;
        let action = pulse_store::actions::get(&tx, id).await.ok()??;
        drop(tx);
        done(&action).then_some(action)
    })
    .await
}
