//! The one way the model-runner turns a tenant's settings into a connection for its Patrol
//! route: the resolved settings (config layer over the stored document), the route, its base URL
//! and the route's key only (a stored key opened with the master key, else a key from config).
//! Both the Watch runner and the preflight use it, so a run and its preflight always talk to the
//! same place with the same key.

use std::collections::BTreeMap;

use pulse_domain::ai_settings::{AiSettings, ModelRoute};
use pulse_store::settings::{self, ConfigLayer, MasterKey, SettingsStoreError};
use pulse_store::{StoreError, TenantTx};

use crate::preflight::RouteConnection;
use pulse_agent_loop::route::Route;

/// A tenant's Patrol route, ready to call.
#[derive(Debug, Clone)]
pub struct PatrolConnection {
    pub route: ModelRoute,
    pub base_url: Option<String>,
    pub connection: RouteConnection,
    /// The version of the settings this connection was built from.
    pub settings_version: i64,
}

/// Why there is no connection.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// The settings name no usable Patrol route; the text says what is missing.
    #[error("{0}")]
    NoRoute(String),
    /// The route's stored key cannot be opened with this service's master key.
    #[error("the stored API key of provider {provider} cannot be opened: {reason}")]
    KeyUnreadable {
        route: ModelRoute,
        base_url: Option<String>,
        provider: String,
        reason: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn store_error(error: SettingsStoreError) -> StoreError {
    match error {
        SettingsStoreError::Store(error) => error,
        other => StoreError::Invalid(other.to_string()),
    }
}

/// The provider keys set in the service's own configuration (environment or file), by provider
/// id; empty keys are left out. Stored keys take part through the settings layer instead.
pub fn environment_keys(ai: &pulse_config::AiConfig) -> BTreeMap<String, String> {
    ai.providers
        .iter()
        .filter_map(|(id, p)| {
            p.api_key
                .as_ref()
                .filter(|k| !k.0.is_empty())
                .map(|k| (id.clone(), k.0.clone()))
        })
        .collect()
}

/// Which of the tenant's routes a connection is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoutePurpose {
    /// `patrol_model`, else `model`.
    Patrol,
    /// The Assistant: `chat_model`, else `model`.
    Chat,
}

impl RoutePurpose {
    fn label(self) -> &'static str {
        match self {
            Self::Patrol => "Patrol",
            Self::Chat => "Assistant",
        }
    }
}

/// Builds the tenant's Patrol connection inside `tx`. Only the route's own key is opened: an
/// unreadable key of another provider is not this route's concern.
pub async fn patrol_connection(
    tx: &TenantTx,
    config: &ConfigLayer,
    environment_keys: &BTreeMap<String, String>,
    master_key: &MasterKey,
) -> Result<PatrolConnection, ConnectionError> {
    route_connection(
        tx,
        config,
        environment_keys,
        master_key,
        RoutePurpose::Patrol,
    )
    .await
}

/// The connection of the tenant's route for `purpose`, built as [`patrol_connection`] builds
/// Patrol's.
pub async fn route_connection(
    tx: &TenantTx,
    config: &ConfigLayer,
    environment_keys: &BTreeMap<String, String>,
    master_key: &MasterKey,
    purpose: RoutePurpose,
) -> Result<PatrolConnection, ConnectionError> {
    let stored = settings::get(tx, false).await.map_err(store_error)?;
    let resolved = config
        .resolve(&stored)
        .map_err(|e| ConnectionError::NoRoute(format!("the AI settings do not resolve: {e}")))?;
    let chosen = match purpose {
        RoutePurpose::Patrol => resolved.patrol_route(),
        RoutePurpose::Chat => resolved.chat_route(),
    };
    let Some(patrol_route) = chosen else {
        return Err(ConnectionError::NoRoute(format!(
            "no {} model is selected",
            purpose.label()
        )));
    };
    connect(
        tx,
        &resolved,
        stored.version,
        patrol_route,
        environment_keys,
        master_key,
        purpose.label(),
    )
    .await
}

/// The connection of `route` with the resolved settings of its provider: base URL, options and
/// the provider's key (the stored one opened with the master key, else the configured one).
async fn connect(
    tx: &TenantTx,
    resolved: &AiSettings,
    version: i64,
    patrol_route: ModelRoute,
    environment_keys: &BTreeMap<String, String>,
    master_key: &MasterKey,
    label: &str,
) -> Result<PatrolConnection, ConnectionError> {
    let route = Route::parse(&patrol_route.to_string())
        .map_err(|e| ConnectionError::NoRoute(format!("the {label} route is not usable: {e}")))?;
    let base_url = resolved.base_url(patrol_route.provider).map(str::to_owned);
    let mut connection = RouteConnection::new(route)
        .with_options(resolved.provider_options(patrol_route.provider))
        .with_settings_version(version);
    if let Some(url) = &base_url {
        connection = connection.with_base_url(url.clone());
    }
    let provider = patrol_route.provider;
    match provider_key(tx, environment_keys, master_key, provider).await? {
        Ok(Some(key)) => connection = connection.with_api_key(key),
        Ok(None) => {}
        Err(reason) => {
            return Err(ConnectionError::KeyUnreadable {
                provider: provider.to_owned(),
                reason,
                route: patrol_route,
                base_url,
            });
        }
    }
    Ok(PatrolConnection {
        route: patrol_route,
        base_url,
        connection,
        settings_version: version,
    })
}

/// `provider`'s key: the stored one opened with the master key, else the one from the service's
/// configuration; the inner error says why a stored key cannot be opened.
async fn provider_key(
    tx: &TenantTx,
    environment_keys: &BTreeMap<String, String>,
    master_key: &MasterKey,
    provider: &str,
) -> Result<Result<Option<String>, String>, ConnectionError> {
    let sealed = settings::sealed_credentials(tx)
        .await
        .map_err(store_error)?;
    Ok(key_of(&sealed, tx, environment_keys, master_key, provider))
}

fn key_of(
    sealed: &BTreeMap<String, settings::SealedCredential>,
    tx: &TenantTx,
    environment_keys: &BTreeMap<String, String>,
    master_key: &MasterKey,
    provider: &str,
) -> Result<Option<String>, String> {
    if let Some(sealed) = sealed.get(provider) {
        match settings::open(master_key, tx.tenant().as_str(), provider, sealed) {
            Ok(key) => Ok(Some(key)),
            Err(error) => {
                tracing::warn!(%provider, %error, "stored provider key cannot be opened");
                Err(error.to_string())
            }
        }
    } else {
        Ok(environment_keys.get(provider).cloned())
    }
}

/// The connection for `model` on `provider`, with the tenant's settings for that provider, as
/// a Patrol route on it would be built: what a provider test calls.
pub async fn provider_connection(
    tx: &TenantTx,
    config: &ConfigLayer,
    environment_keys: &BTreeMap<String, String>,
    master_key: &MasterKey,
    route: ModelRoute,
) -> Result<PatrolConnection, ConnectionError> {
    let stored = settings::get(tx, false).await.map_err(store_error)?;
    let resolved = config
        .resolve(&stored)
        .map_err(|e| ConnectionError::NoRoute(format!("the AI settings do not resolve: {e}")))?;
    connect(
        tx,
        &resolved,
        stored.version,
        route,
        environment_keys,
        master_key,
        "tested",
    )
    .await
}

/// One provider the tenant uses, with what calling it takes.
#[derive(Clone)]
pub struct ProviderAccess {
    pub entry: &'static pulse_providers::registry::ProviderEntry,
    /// The settings' base URL, when they give one.
    pub base_url: Option<String>,
    /// The key, none, or why the stored key cannot be opened.
    pub api_key: Result<Option<String>, String>,
}

impl std::fmt::Debug for ProviderAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderAccess")
            .field("provider", &self.entry.id)
            .field("base_url", &self.base_url)
            .field(
                "api_key",
                &self.api_key.as_ref().map(|k| k.as_ref().map(|_| "..")),
            )
            .finish_non_exhaustive()
    }
}

/// The providers the tenant uses ([`pulse_domain::model_catalogue::providers_in_use`]), each
/// with its address and key.
pub async fn providers_in_use(
    tx: &TenantTx,
    config: &ConfigLayer,
    environment_keys: &BTreeMap<String, String>,
    master_key: &MasterKey,
) -> Result<Vec<ProviderAccess>, ConnectionError> {
    let stored = settings::get(tx, false).await.map_err(store_error)?;
    let resolved = config
        .resolve(&stored)
        .map_err(|e| ConnectionError::NoRoute(format!("the AI settings do not resolve: {e}")))?;
    let sealed = settings::sealed_credentials(tx)
        .await
        .map_err(store_error)?;
    let used = pulse_domain::model_catalogue::providers_in_use(&resolved, |id| {
        sealed.contains_key(id) || environment_keys.contains_key(id)
    });
    Ok(used
        .into_iter()
        .filter_map(pulse_providers::registry::lookup)
        .map(|entry| ProviderAccess {
            entry,
            base_url: resolved.base_url(entry.id).map(str::to_owned),
            api_key: key_of(&sealed, tx, environment_keys, master_key, entry.id),
        })
        .collect())
}
