//! The HTTP clients of the provider transports, kept for the life of the service.
//!
//! Building a client sets up TLS and starts an empty connection pool; Watch runs,
//! investigations, preflights and Assistant turns on the same route would each pay for that.
//! [`ProviderPool`] keeps one client per base URL and connect timeout (what a
//! [`Provider::new`] client is built from) and hands every provider of that pair the same one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{BufferedRoutes, Provider, ProviderConfig, ProviderFailure};

/// The shared provider HTTP clients of one service, by base URL and connect timeout, and what
/// the service learned about routes that refuse streamed requests.
#[derive(Debug, Default)]
pub struct ProviderPool {
    clients: Mutex<HashMap<(String, Duration), Arc<reqwest::Client>>>,
    buffered: Arc<BufferedRoutes>,
}

impl ProviderPool {
    pub fn new() -> Self {
        Self::default()
    }

    /// A provider for `config` over the pooled client of its base URL and connect timeout,
    /// sharing what the pool learned about routes that refuse streaming.
    pub fn provider(&self, config: ProviderConfig) -> Result<Provider, ProviderFailure> {
        let client = self.client(&config.base_url, config.timeouts.effective_header())?;
        Ok(Provider::with_client(config, client.as_ref().clone())
            .with_buffered_routes(self.buffered.clone()))
    }

    /// The client of `base_url` with `connect_timeout`, built on first use.
    pub fn client(
        &self,
        base_url: &str,
        connect_timeout: Duration,
    ) -> Result<Arc<reqwest::Client>, ProviderFailure> {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        let key = (base_url.to_owned(), connect_timeout);
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let client = Arc::new(Provider::http_client(connect_timeout)?);
        clients.insert(key, client.clone());
        Ok(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_route_and_timeout_share_a_client_and_another_timeout_or_route_does_not() {
        let pool = ProviderPool::new();
        let url = "https://api.openai.com/v1";
        let short = Duration::from_secs(10);
        let first = pool.client(url, short).expect("client");
        let again = pool.client(url, short).expect("client");
        assert!(
            Arc::ptr_eq(&first, &again),
            "a second run on the route got a new client"
        );
        let longer = pool.client(url, Duration::from_secs(60)).expect("client");
        assert!(
            !Arc::ptr_eq(&first, &longer),
            "another timeout shared the client"
        );
        let other_route = pool
            .client("http://127.0.0.1:11434", short)
            .expect("client");
        assert!(
            !Arc::ptr_eq(&first, &other_route),
            "another base URL shared the client"
        );
    }

    #[test]
    fn providers_of_one_route_and_timeout_are_served_from_the_pool() {
        let pool = ProviderPool::new();
        let config = ProviderConfig::new(
            super::super::Protocol::OpenAiCompatible,
            "http://127.0.0.1:9",
        );
        let timeout = config.timeouts.effective_header();
        let url = config.base_url.clone();
        pool.provider(config.clone()).expect("provider");
        let pooled = pool.client(&url, timeout).expect("client");
        pool.provider(config).expect("provider");
        let after = pool.client(&url, timeout).expect("client");
        assert!(Arc::ptr_eq(&pooled, &after));
        assert_eq!(pool.clients.lock().expect("lock").len(), 1);
    }
}
