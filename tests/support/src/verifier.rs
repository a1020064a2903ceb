//! The `pulse-verifier` binary for tests, on the same database, NATS server and subject prefix
//! as a [`TestGateway`].

use std::path::Path;
use std::time::Duration;

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

    /// Starts the verifier with its postcondition checks polling every `poll` for at most
    /// `wait` when a request names no wait (`verify.postcondition_wait_ms` /
    /// `verify.postcondition_poll_ms`), plus `extra_env`.
    pub async fn start_with_postcondition_timing(
        gateway: &TestGateway,
        dir: &Path,
        wait: Duration,
        poll: Duration,
        extra_env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let wait_ms = wait.as_millis().to_string();
        let poll_ms = poll.as_millis().to_string();
        let mut env = vec![
            ("PULSE_VERIFY__POSTCONDITION_WAIT_MS", wait_ms.as_str()),
            ("PULSE_VERIFY__POSTCONDITION_POLL_MS", poll_ms.as_str()),
        ];
        env.extend_from_slice(extra_env);
        Self::start(gateway, dir, &env).await
    }

    /// SIGTERM and a clean exit.
    pub async fn stop(self) -> anyhow::Result<()> {
        stop_backend(self.process, "verifier").await
    }
}
