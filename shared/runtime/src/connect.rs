//! Connecting to NATS and Postgres with bounded retry and backoff.

use std::time::Duration;

use pulse_config::PulseConfig;
use pulse_domain::backoff::Backoff;
use pulse_store::Store;

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(
        "NATS at {url} is unreachable after {attempts} attempts ({last}); start it with `nats-server -js` or set PULSE_NATS_URL"
    )]
    Nats {
        url: String,
        attempts: u32,
        last: String,
    },
    #[error(
        "Postgres is unreachable or refused the schema after {attempts} attempts ({last}); start it (e.g. `pg_ctlcluster <version> main start`) or set PULSE_DATABASE_URL"
    )]
    Postgres { attempts: u32, last: String },
    #[error("startup cancelled")]
    Cancelled,
}

/// A bounded number of attempts, with a jittered backoff between them.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub attempts: u32,
    pub backoff: Backoff,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        // About a minute in all: long enough for a compose stack to come up in any order.
        Self {
            attempts: 15,
            backoff: Backoff::new(Duration::from_millis(100), Duration::from_secs(5)),
        }
    }
}

impl RetryPolicy {
    /// The pause after failed attempt `attempt` (0-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        self.backoff.delay(attempt.saturating_add(1))
    }
}

pub async fn connect_nats(
    config: &PulseConfig,
    policy: &RetryPolicy,
    name: &str,
) -> Result<async_nats::Client, ConnectError> {
    let mut last = String::new();
    for attempt in 0..policy.attempts {
        let options = async_nats::ConnectOptions::new()
            .name(name)
            .connection_timeout(Duration::from_secs(3))
            .request_timeout(Some(Duration::from_millis(config.nats.request_timeout_ms)))
            // After the first connection, keep reconnecting forever; readiness reports it.
            .retry_on_initial_connect();
        let attempt_result = tokio::time::timeout(
            Duration::from_secs(5),
            options.connect(config.nats.url.as_str()),
        )
        .await;
        match attempt_result {
            Ok(Ok(client)) => {
                // retry_on_initial_connect returns before the first connect; wait for it.
                if wait_connected(&client, Duration::from_secs(5)).await {
                    return Ok(client);
                }
                last = "connection not established".to_owned();
                drop(client);
            }
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "connect timed out".to_owned(),
        }
        tracing::warn!(attempt = attempt + 1, error = %last, url = %config.nats.url, "nats not reachable yet");
        tokio::time::sleep(policy.delay(attempt)).await;
    }
    Err(ConnectError::Nats {
        url: config.nats.url.clone(),
        attempts: policy.attempts,
        last,
    })
}

async fn wait_connected(client: &async_nats::Client, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if client.connection_state() == async_nats::connection::State::Connected {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Connects as the owner, applies migrations (under the advisory lock), then opens the
/// application pool.
pub async fn connect_store(
    config: &PulseConfig,
    policy: &RetryPolicy,
) -> Result<Store, ConnectError> {
    let mut last = String::new();
    for attempt in 0..policy.attempts {
        match Store::connect(&config.database).await {
            Ok(store) => return Ok(store),
            Err(e @ pulse_store::StoreError::UnsafeAppRole { .. })
            | Err(e @ pulse_store::StoreError::MigrationChanged { .. })
            | Err(e @ pulse_store::StoreError::SchemaAhead(_))
            | Err(e @ pulse_store::StoreError::InvalidUrl(_)) => {
                // Retrying cannot fix these.
                return Err(ConnectError::Postgres {
                    attempts: attempt + 1,
                    last: e.to_string(),
                });
            }
            Err(e) => last = e.to_string(),
        }
        tracing::warn!(attempt = attempt + 1, error = %last, "postgres not reachable yet");
        tokio::time::sleep(policy.delay(attempt)).await;
    }
    Err(ConnectError::Postgres {
        attempts: policy.attempts,
        last,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let policy = RetryPolicy::default();
        let within = |attempt: u32, ceiling: Duration| {
            let delay = policy.delay(attempt);
            delay >= ceiling / 2 && delay <= ceiling
        };
        assert!(within(0, Duration::from_millis(100)));
        assert!(within(1, Duration::from_millis(200)));
        assert!(within(3, Duration::from_millis(800)));
        assert!(within(10, Duration::from_secs(5)));
        assert!(within(u32::MAX, Duration::from_secs(5)));
    }
}
