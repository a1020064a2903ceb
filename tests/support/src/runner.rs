//! The `pulse-model-runner` binary for tests, on the same database, NATS server, subject prefix
//! and master key as a [`TestGateway`].

use std::path::Path;
use std::time::Duration;

use crate::service::{ServiceProcess, TestGateway, free_port, signal, small_streams_env};

/// A running model-runner; dropping it kills the process.
pub struct TestModelRunner {
    pub process: ServiceProcess,
    /// `http://127.0.0.1:<port>` of its health listener.
    pub health_url: String,
}

impl TestModelRunner {
    /// Starts the model-runner with `extra_env`, logging to `<dir>/model-runner.log`, and waits
    /// until it is ready. It opens provider keys with the gateway's master key.
    pub async fn start(
        gateway: &TestGateway,
        dir: &Path,
        extra_env: &[(&str, String)],
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let port = free_port()?;
        let master_key = gateway.state_dir.join("secrets").join("master.key");
        let mut env = vec![
            (
                "PULSE_DATABASE_URL".to_owned(),
                gateway.db.owner_url().to_owned(),
            ),
            ("PULSE_NATS_URL".to_owned(), crate::nats::nats_url()),
            (
                "PULSE_NATS__SUBJECT_PREFIX".to_owned(),
                gateway.prefix.clone(),
            ),
            ("PULSE_STATE_DIR".to_owned(), dir.display().to_string()),
            ("PULSE_HTTP__LISTEN".to_owned(), format!("127.0.0.1:{port}")),
            (
                "PULSE_SECRETS__MASTER_KEY_FILE".to_owned(),
                master_key.display().to_string(),
            ),
            ("PULSE_TELEMETRY__LOG_FILTER".to_owned(), "info".to_owned()),
        ];
        env.extend(small_streams_env());
        env.extend(extra_env.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        let process =
            ServiceProcess::spawn("pulse-model-runner", &env, &dir.join("model-runner.log"))?;
        let health_url = format!("http://127.0.0.1:{port}");
        process.wait_ready(&gateway.http, &health_url).await?;
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
        let status = self.process.stop(Duration::from_secs(10)).await?;
        anyhow::ensure!(status.success(), "model-runner exited with {status}");
        Ok(())
    }
}
