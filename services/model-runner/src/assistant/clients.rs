//! The provider HTTP clients shared by the turns and compactions of this process.

use crate::provider::Provider;

use super::AssistantService;

impl AssistantService {
    /// A provider over the shared client for the config's connect timeout.
    pub(super) fn provider(
        &self,
        config: crate::provider::ProviderConfig,
    ) -> Result<Provider, crate::provider::ProviderFailure> {
        let timeout = config.timeouts.effective_header();
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        let client = match clients.get(&timeout) {
            Some(client) => client.clone(),
            None => {
                let client = Provider::http_client(timeout)?;
                clients.insert(timeout, client.clone());
                client
            }
        };
        Ok(Provider::with_client(config, client))
    }
}
