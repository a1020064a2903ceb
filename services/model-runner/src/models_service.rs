//! The provider API of the model-runner ([`pulse_bus::models_api`]): the model catalogue and
//! provider tests. Provider keys are opened here and nowhere else.
//!
//! - Catalogue: every provider the tenant uses is asked for its own model list at once, each
//!   within [`LIST_TIMEOUT`]; a provider that fails is answered as its own classified entry
//!   (`provider_unreachable`, `provider_auth_failed`, ...) while the others still list.
//! - Test: the Patrol preflight's one model turn ([`Preflight::check`]) on any provider and
//!   model with the tenant's settings for that provider. Nothing is stored: not the settings,
//!   not the Patrol preflight record the readiness gate reads, not the preflight cache.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use pulse_agent_loop::provider::pool::ProviderPool;
use pulse_agent_loop::provider::{ProviderConfig, ProviderFailure, Timeouts};
use pulse_bus::models_api::{ModelCatalogueRequest, ProviderTestRequest};
use pulse_bus::{Bus, ErrorCode, ErrorReply, Responder};
use pulse_domain::TenantId;
use pulse_domain::ai_settings::ModelRoute;
use pulse_domain::model_catalogue::{
    CatalogueError, CatalogueErrorCode, CatalogueModel, ModelCatalogue, ProviderCatalogue,
};
use pulse_domain::patrol::readiness::PreflightRecord;
use pulse_providers::registry::{ApiKey, protocol_name};
use pulse_runtime::ServiceContext;
use pulse_store::settings::{ConfigLayer, MasterKey};
use pulse_store::{Store, StoreError};

use crate::patrol_connection::{self, ConnectionError, ProviderAccess};
use crate::preflight::{NotConfigured, Preflight, PreflightCache, SystemClock};
use crate::readiness_service::record_of;

/// How long one provider may take to list its models (every page of it).
pub const LIST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a catalogue or a test could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum ModelsError {
    #[error("no provider {0}")]
    UnknownProvider(String),
    #[error("{0}")]
    NotConfigured(String),
    #[error("{0}")]
    InvalidModel(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<ModelsError> for ErrorReply {
    fn from(error: ModelsError) -> Self {
        match error {
            ModelsError::UnknownProvider(provider) => ErrorReply::new(
                ErrorCode::ProviderNotFound,
                format!("no provider {provider}; use a provider id of the provider table"),
            ),
            ModelsError::NotConfigured(reason) => ErrorReply::new(
                ErrorCode::ProviderNotConfigured,
                format!("{reason}; set it in Settings (PUT /api/settings/ai), then test again"),
            ),
            ModelsError::InvalidModel(reason) => {
                ErrorReply::new(ErrorCode::InvalidRequest, format!("model: {reason}"))
            }
            ModelsError::Store(StoreError::Unavailable(reason)) => {
                tracing::warn!(%reason, "database unavailable");
                ErrorReply::new(
                    ErrorCode::ServiceUnavailable,
                    "the database is unavailable; retry shortly",
                )
            }
            ModelsError::Store(other) => {
                tracing::error!(error = %other, "provider request failed");
                ErrorReply::new(
                    ErrorCode::InternalError,
                    "the request could not be answered",
                )
            }
        }
    }
}

fn connection_error(error: ConnectionError) -> ModelsError {
    match error {
        ConnectionError::Store(error) => ModelsError::Store(error),
        ConnectionError::NoRoute(reason) => ModelsError::Store(StoreError::Invalid(reason)),
        ConnectionError::KeyUnreadable { provider, .. } => ModelsError::NotConfigured(format!(
            "the stored API key of provider {provider} cannot be opened with this service's \
             master key"
        )),
    }
}

/// Answers catalogue and test requests.
pub struct ProviderDesk {
    store: Store,
    config: ConfigLayer,
    environment_keys: std::collections::BTreeMap<String, String>,
    master_key: MasterKey,
    providers: Arc<ProviderPool>,
    preflight: Preflight,
    list_timeout: Duration,
}

impl std::fmt::Debug for ProviderDesk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderDesk")
            .field("list_timeout", &self.list_timeout)
            .finish_non_exhaustive()
    }
}

impl ProviderDesk {
    pub fn new(
        store: Store,
        ai: &pulse_config::AiConfig,
        master_key: MasterKey,
        providers: Arc<ProviderPool>,
    ) -> anyhow::Result<Self> {
        let config = ConfigLayer::from_config(ai)
            .map_err(|e| anyhow::anyhow!("invalid ai configuration: {e}"))?;
        // The cache is never read: a test records nothing.
        let cache = PreflightCache::new(Duration::ZERO, Arc::new(SystemClock));
        let preflight = Preflight::new(
            crate::readiness_service::preflight_settings(),
            cache,
            providers.clone(),
        );
        Ok(Self {
            store,
            config,
            environment_keys: patrol_connection::environment_keys(ai),
            master_key,
            providers,
            preflight,
            list_timeout: LIST_TIMEOUT,
        })
    }

    /// The providers the tenant uses (key, base URL or model route), with their access.
    async fn providers_in_use(
        &self,
        tx: &pulse_store::TenantTx,
    ) -> Result<Vec<ProviderAccess>, ModelsError> {
        patrol_connection::providers_in_use(
            tx,
            &self.config,
            &self.environment_keys,
            &self.master_key,
        )
        .await
        .map_err(connection_error)
    }

    /// The models of every provider the tenant uses, asked all at once.
    pub async fn catalogue(&self, tenant: &TenantId) -> Result<ModelCatalogue, ModelsError> {
        let tx = self.store.tenant_tx(tenant).await?;
        let used = self.providers_in_use(&tx).await?;
        tx.commit().await?;
        let lists = used.iter().map(|access| self.list(access));
        let providers = futures::future::join_all(lists).await;
        Ok(ModelCatalogue {
            providers,
            listed_at: Utc::now(),
        })
    }

    async fn list(&self, access: &ProviderAccess) -> ProviderCatalogue {
        let entry = access.entry;
        let started = tokio::time::Instant::now();
        let result = match self.list_config(access) {
            Ok(config) => match self.providers.provider(config) {
                Ok(provider) => tokio::time::timeout(self.list_timeout, provider.list_models())
                    .await
                    .unwrap_or_else(|_| {
                        Err(ProviderFailure::timeout(
                            "the provider did not list its models in time",
                        ))
                    })
                    .map_err(|failure| {
                        tracing::warn!(
                            provider = entry.id,
                            cause = %failure.cause,
                            status = ?failure.status,
                            detail = %failure.message,
                            "provider model list failed"
                        );
                        CatalogueError::of_failure(failure.cause, failure.status)
                    }),
                Err(failure) => Err(CatalogueError::of_failure(failure.cause, None)),
            },
            Err(error) => Err(error),
        };
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let (models, error) = match result {
            Ok(listed) => (
                listed
                    .into_iter()
                    .map(|m| CatalogueModel {
                        route: format!("{}:{}", entry.id, m.id),
                        id: m.id,
                        display_name: m.display_name,
                        context_window: m.context_window,
                        owned_by: m.owned_by,
                        details: m.details,
                    })
                    .collect(),
                None,
            ),
            Err(error) => (Vec::new(), Some(error)),
        };
        ProviderCatalogue {
            provider: entry.id.to_owned(),
            display_name: entry.display_name.to_owned(),
            protocol: protocol_name(entry.protocol).to_owned(),
            ok: error.is_none(),
            models,
            error,
            elapsed_ms,
        }
    }

    /// The list request's transport for `access`, or why it cannot be asked.
    fn list_config(&self, access: &ProviderAccess) -> Result<ProviderConfig, CatalogueError> {
        let entry = access.entry;
        let base_url = access
            .base_url
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .or(entry.default_base_url)
            .ok_or_else(|| {
                CatalogueError::new(
                    CatalogueErrorCode::ProviderNotConfigured,
                    NotConfigured::BaseUrl.to_string(),
                )
            })?;
        let key = match &access.api_key {
            Ok(key) => key.as_deref().filter(|k| !k.trim().is_empty()),
            Err(_) => {
                return Err(CatalogueError::new(
                    CatalogueErrorCode::ProviderNotConfigured,
                    "the stored API key cannot be opened with this service's master key",
                ));
            }
        };
        let timeouts = Timeouts {
            request: self.list_timeout,
            response_header: self.list_timeout,
            stall: self.list_timeout,
        };
        let mut config = ProviderConfig::new(entry.protocol, base_url).with_timeouts(timeouts);
        match (key, entry.api_key) {
            (Some(key), _) => config = config.with_api_key(key),
            (None, ApiKey::Required) => {
                return Err(CatalogueError::new(
                    CatalogueErrorCode::ProviderNotConfigured,
                    NotConfigured::ApiKey.to_string(),
                ));
            }
            (None, ApiKey::Optional) => {}
        }
        Ok(config)
    }

    /// Runs the preflight's model turn on `provider:model` and answers its outcome; stores
    /// nothing.
    pub async fn test(
        &self,
        tenant: &TenantId,
        provider: &str,
        model: &str,
    ) -> Result<PreflightRecord, ModelsError> {
        let entry = pulse_providers::registry::lookup(provider)
            .ok_or_else(|| ModelsError::UnknownProvider(provider.to_owned()))?;
        if model.trim() != model {
            return Err(ModelsError::InvalidModel(
                "the model has leading or trailing spaces".to_owned(),
            ));
        }
        let route = ModelRoute::parse("model", &format!("{}:{model}", entry.id))
            .map_err(|e| ModelsError::InvalidModel(e.to_string()))?;
        let tx = self.store.tenant_tx(tenant).await?;
        let used = self.providers_in_use(&tx).await?;
        if !used.iter().any(|access| access.entry.id == entry.id) {
            tx.commit().await?;
            return Err(ModelsError::NotConfigured(format!(
                "provider {} is not set up for this tenant: it has no API key, no base URL and \
                 no model route",
                entry.id
            )));
        }
        let connection = patrol_connection::provider_connection(
            &tx,
            &self.config,
            &self.environment_keys,
            &self.master_key,
            route,
        )
        .await
        .map_err(connection_error)?;
        tx.commit().await?;
        if let Err(missing) = connection
            .connection
            .provider_config(&crate::readiness_service::preflight_settings())
        {
            return Err(ModelsError::NotConfigured(format!(
                "provider {}: {missing}",
                entry.id
            )));
        }
        let outcome = self.preflight.check(&connection.connection).await;
        tracing::info!(
            tenant = %tenant,
            route = %outcome.route,
            ready = outcome.ready,
            cause = outcome.cause.map(|c| c.as_str()).unwrap_or("-"),
            "provider tested"
        );
        Ok(record_of(outcome, connection.base_url))
    }
}

/// The running provider API.
#[derive(Debug)]
pub struct ModelsService {
    catalogue: Responder,
    test: Responder,
}

impl ModelsService {
    /// Loads the master key and serves the catalogue and test requests.
    pub async fn start(ctx: &ServiceContext, providers: Arc<ProviderPool>) -> anyhow::Result<Self> {
        let path = ctx.config.master_key_path();
        let master_key =
            tokio::task::spawn_blocking(move || MasterKey::load_or_create(&path)).await??;
        let desk = ProviderDesk::new(ctx.store.clone(), &ctx.config.ai, master_key, providers)?;
        Self::start_with(&ctx.bus, Arc::new(desk)).await
    }

    pub async fn start_with(bus: &Bus, desk: Arc<ProviderDesk>) -> anyhow::Result<Self> {
        let listing = desk.clone();
        let catalogue = bus
            .serve_endpoint::<ModelCatalogueRequest, ErrorReply, _, _>(move |ctx, request| {
                let desk = listing.clone();
                async move {
                    tracing::info!(tenant = %ctx.tenant, requested_by = %request.requested_by, "model catalogue requested");
                    Ok(desk.catalogue(&ctx.tenant).await?)
                }
            })
            .await?;
        let test = bus
            .serve_endpoint::<ProviderTestRequest, ErrorReply, _, _>(move |ctx, request| {
                let desk = desk.clone();
                async move {
                    tracing::info!(tenant = %ctx.tenant, requested_by = %request.requested_by, provider = %request.provider, "provider test requested");
                    Ok(desk
                        .test(&ctx.tenant, &request.provider, &request.model)
                        .await?)
                }
            })
            .await?;
        Ok(Self { catalogue, test })
    }

    pub async fn stop(self) {
        self.catalogue.stop().await;
        self.test.stop().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulse_bus::Endpoint;

    #[test]
    fn every_error_is_declared_by_the_test_endpoint() {
        for error in [
            ModelsError::UnknownProvider("nosuch".to_owned()),
            ModelsError::NotConfigured("no key".to_owned()),
            ModelsError::InvalidModel("empty".to_owned()),
            ModelsError::Store(StoreError::Unavailable("down".to_owned())),
            ModelsError::Store(StoreError::InvalidUrl("x".to_owned())),
        ] {
            let code = ErrorReply::from(error).code;
            assert!(ProviderTestRequest::ERRORS.contains(&code), "{code}");
        }
        for error in [
            ModelsError::Store(StoreError::Unavailable("down".to_owned())),
            ModelsError::Store(StoreError::InvalidUrl("x".to_owned())),
        ] {
            let code = ErrorReply::from(error).code;
            assert!(ModelCatalogueRequest::ERRORS.contains(&code), "{code}");
        }
    }
}
