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
