//! The `pulse-model-runner` binary for tests, on the same database, NATS server, subject prefix
//! and master key as a [`TestGateway`].

use std::path::Path;
use std::time::Duration;

use crate::service::{ServiceProcess, TestGateway, signal, start_backend, stop_backend};

/// A running model-runner; dropping it kills the process.
pub struct TestModelRunner {
    pub process: ServiceProcess,
    /// `http://127.0.0.1:<port>` of its health listener.
    pub health_url: String,
}

impl TestModelRunner {
    /// Starts the model-runner with `extra_env`, logging to `<dir>/model-runner.log`, and waits until it is
    /// ready (see [`start_backend`]).
    pub async fn start(
        gateway: &TestGateway,
        dir: &Path,
        extra_env: &[(&str, String)],
    ) -> anyhow::Result<Self> {
        let env = extra_env.iter().map(|(k, v)| ((*k).to_owned(), v.clone()));
        let (process, health_url) = start_backend(gateway, "pulse-model-runner", dir, env).await?;
        Ok(Self {
            process,
            health_url,
        })
    }

    /// SIGKILL: no drain, no goodbye; in-flight work is left as a crash would leave it.
    pub async fn kill(self) -> anyhow::Result<()> {
        let Some(pid) = self.process.pid() else {
            return Ok(());
        };
        signal(pid, libc::SIGKILL);
        let status = self.process.stop(Duration::from_secs(10)).await?;
        anyhow::ensure!(!status.success(), "model-runner was not killed: {status}");
        Ok(())
    }

    /// SIGTERM and a clean exit.
    pub async fn stop(self) -> anyhow::Result<()> {
        stop_backend(self.process, "model-runner").await
    }
}
