//! pulse-agent: runs on each monitored host and reports to the agent relay. Report-only by
//! default; typed commands need `--enable-commands` and an `agent:exec` token (Step 2).
//!
//! This build checks that the relay is reachable and logs when that changes; the host,
//! Docker and supervised-service collectors arrive with Step 2.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
pub struct AgentOptions {
    pub relay_url: String,
    pub interval: Duration,
}

/// Whether the relay answered its health check.
pub async fn relay_reachable(client: &reqwest::Client, relay_url: &str) -> bool {
    let url = format!("{}/healthz", relay_url.trim_end_matches('/'));
    matches!(client.get(url).send().await, Ok(response) if response.status().is_success())
}

pub async fn run(options: AgentOptions, shutdown: CancellationToken) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let mut ticker = tokio::time::interval(options.interval);
    let mut last: Option<bool> = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = ticker.tick() => {
                let reachable = relay_reachable(&client, &options.relay_url).await;
                if last != Some(reachable) {
                    if reachable {
                        tracing::info!(relay = %options.relay_url, "relay reachable");
                    } else {
                        tracing::warn!(relay = %options.relay_url, "relay not reachable; will keep trying");
                    }
                    last = Some(reachable);
                }
            }
        }
    }
}
