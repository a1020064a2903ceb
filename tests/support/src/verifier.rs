//! The `pulse-verifier` binary for tests, on the same database, NATS server and subject prefix
//! as a [`TestGateway`].

use std::path::Path;

use crate::service::{ServiceProcess, TestGateway, start_backend, stop_backend};

/// A running verifier; dropping it kills the process.
pub struct TestVerifier {
    pub process: ServiceProcess,
    /// `http://127.0.0.1:<port>` of its health listener.
    pub health_url: String,
}

impl TestVerifier {
    /// Starts the verifier with `extra_env`, logging to `<dir>/verifier.log`, and waits until it is
    /// ready (see [`start_backend`]).
    pub async fn start(
        gateway: &TestGateway,
        dir: &Path,
        extra_env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let env = extra_env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
        let (process, health_url) = start_backend(gateway, "pulse-verifier", dir, env).await?;
        Ok(Self {
            process,
            health_url,
        })
    }

    /// SIGTERM and a clean exit.
    pub async fn stop(self) -> anyhow::Result<()> {
        stop_backend(self.process, "verifier").await
    }
}
