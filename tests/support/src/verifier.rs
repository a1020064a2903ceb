//! The `pulse-verifier` binary for tests, on the same database, NATS server and subject prefix
//! as a [`TestGateway`].

use std::path::Path;
use std::time::Duration;

use crate::service::{ServiceProcess, TestGateway, free_port, small_streams_env};

/// A running verifier; dropping it kills the process.
pub struct TestVerifier {
    pub process: ServiceProcess,
    /// `http://127.0.0.1:<port>` of its health listener.
    pub health_url: String,
}

impl TestVerifier {
    /// Starts the verifier with `extra_env`, logging to `<dir>/verifier.log`, and waits until it
    /// is ready.
    pub async fn start(
        gateway: &TestGateway,
        dir: &Path,
        extra_env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let port = free_port()?;
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
            ("PULSE_TELEMETRY__LOG_FILTER".to_owned(), "info".to_owned()),
        ];
        env.extend(small_streams_env());
        env.extend(
            extra_env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let process = ServiceProcess::spawn("pulse-verifier", &env, &dir.join("verifier.log"))?;
        let health_url = format!("http://127.0.0.1:{port}");
        process.wait_ready(&gateway.http, &health_url).await?;
        Ok(Self {
            process,
            health_url,
        })
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        let status = self.process.stop(Duration::from_secs(10)).await?;
        anyhow::ensure!(status.success(), "verifier exited with {status}");
        Ok(())
    }
}
