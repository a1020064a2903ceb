//! The model catalogue: for each provider a tenant uses, the models the provider itself lists,
//! or why it could not be asked. One provider's failure is its own entry, never the whole
//! answer's: the others still list.
//!
//! A provider is in the catalogue when the tenant uses it: it has a key (stored or from the
//! service's configuration), its settings name a base URL, or a model route names it
//! ([`providers_in_use`]).

use chrono::{DateTime, Utc};
use pulse_providers::FailureCause;
use serde::{Deserialize, Serialize};

use crate::ai_settings::AiSettings;

/// Why a provider's models could not be listed (or a provider cannot be tested), as a stable
/// code with what to do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum CatalogueErrorCode {
    /// A setting the call needs is missing (a key, a base URL), or the stored key cannot be
    /// opened.
    ProviderNotConfigured,
    /// Nothing answered at the base URL (refused, unresolvable, a gateway error page, no list
    /// endpoint there).
    ProviderUnreachable,
    /// The provider did not answer within the bound.
    ProviderTimeout,
    /// The provider refused the key.
    ProviderAuthFailed,
    /// The provider is rate limiting the account or its quota is spent.
    ProviderRateLimited,
    /// The answer was not the provider's model list.
    ProviderBadResponse,
    /// Any other error the provider answered with.
    ProviderError,
}

impl CatalogueErrorCode {
    pub const ALL: [Self; 7] = [
        Self::ProviderNotConfigured,
        Self::ProviderUnreachable,
        Self::ProviderTimeout,
        Self::ProviderAuthFailed,
        Self::ProviderRateLimited,
        Self::ProviderBadResponse,
        Self::ProviderError,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ProviderNotConfigured => "provider_not_configured",
            Self::ProviderUnreachable => "provider_unreachable",
            Self::ProviderTimeout => "provider_timeout",
            Self::ProviderAuthFailed => "provider_auth_failed",
            Self::ProviderRateLimited => "provider_rate_limited",
            Self::ProviderBadResponse => "provider_bad_response",
            Self::ProviderError => "provider_error",
        }
    }

    /// The code of a classified provider failure.
    pub fn of_failure(cause: FailureCause) -> Self {
        match cause {
            FailureCause::Connectivity => Self::ProviderUnreachable,
            FailureCause::Timeout => Self::ProviderTimeout,
            FailureCause::Auth => Self::ProviderAuthFailed,
            FailureCause::Quota | FailureCause::RateLimit => Self::ProviderRateLimited,
            FailureCause::MalformedResponse => Self::ProviderBadResponse,
            FailureCause::ContextWindow
            | FailureCause::ModelNotFound
            | FailureCause::NoToolSupport
            | FailureCause::ToolChoiceRejected
            | FailureCause::ProviderError => Self::ProviderError,
        }
    }

    /// What to do about it, in one line.
    pub fn remedy(self) -> &'static str {
        match self {
            Self::ProviderNotConfigured => {
                "set the provider's API key and base URL in Settings (PUT /api/settings/ai)"
            }
            Self::ProviderUnreachable => {
                "check the provider's base URL and that the server is running and reachable from the model-runner"
            }
            Self::ProviderTimeout => "check the provider's health, then list again",
            Self::ProviderAuthFailed => "check the API key configured for this provider",
            Self::ProviderRateLimited => {
                "wait for the rate limit to reset, or add credit to the provider account"
            }
            Self::ProviderBadResponse => {
                "check that the base URL points at the provider's API (not a web page or another service)"
            }
            Self::ProviderError => "retry later; if it persists check the provider's status page",
        }
    }
}

impl std::fmt::Display for CatalogueErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why one provider has no list: safe to show, never the provider's raw answer or a key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct CatalogueError {
    pub code: CatalogueErrorCode,
    /// What happened, in one line.
    pub message: String,
    /// What to do about it.
    pub remedy: String,
}

impl CatalogueError {
    pub fn new(code: CatalogueErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            remedy: code.remedy().to_owned(),
        }
    }

    /// A classified provider failure: its summary, the HTTP status when one came.
    pub fn of_failure(cause: FailureCause, status: Option<u16>) -> Self {
        let message = match status {
            Some(status) => format!("{} (HTTP {status})", cause.summary()),
            None => cause.summary().to_owned(),
        };
        Self::new(CatalogueErrorCode::of_failure(cause), message)
    }
}

/// One model a provider lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct CatalogueModel {
    /// The model id, as a route names it after `provider:`.
    pub id: String,
    /// `provider:id`: the value a model setting takes.
    pub route: String,
    pub display_name: Option<String>,
    /// Input tokens the model takes, when the provider says.
    pub context_window: Option<u64>,
    pub owned_by: Option<String>,
    /// What the provider says the model is (family, size, quantization, description).
    pub details: Option<String>,
}

/// One provider's part of the catalogue: its models, or why there are none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ProviderCatalogue {
    /// The provider id (the prefix of its routes).
    pub provider: String,
    pub display_name: String,
    /// The wire protocol its list was asked in.
    pub protocol: String,
    /// Whether the provider answered with its list (`error` is then `null`).
    pub ok: bool,
    /// The listed models, in the provider's order; empty when not `ok`.
    pub models: Vec<CatalogueModel>,
    pub error: Option<CatalogueError>,
    /// How long the provider took to answer (or to fail).
    pub elapsed_ms: u64,
}

/// Every provider the tenant uses, with its models.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ModelCatalogue {
    /// In the provider table's order.
    pub providers: Vec<ProviderCatalogue>,
    pub listed_at: DateTime<Utc>,
}

impl ModelCatalogue {
    /// The entry of `provider`, when the tenant uses it.
    pub fn provider(&self, provider: &str) -> Option<&ProviderCatalogue> {
        self.providers.iter().find(|p| p.provider == provider)
    }

    /// Every listed route (`provider:model`), in order.
    pub fn routes(&self) -> impl Iterator<Item = &str> {
        self.providers
            .iter()
            .flat_map(|p| p.models.iter().map(|m| m.route.as_str()))
    }
}

/// The providers the tenant uses, in the provider table's order: those with a key
/// (`has_key`), a base URL in the settings, or named by a model route.
pub fn providers_in_use(
    settings: &AiSettings,
    has_key: impl Fn(&str) -> bool,
) -> Vec<&'static str> {
    let routed: Vec<String> = [
        &settings.model,
        &settings.chat_model,
        &settings.patrol_model,
        &settings.auto_fix_model,
    ]
    .into_iter()
    .flatten()
    .filter_map(|route| route.split_once(':').map(|(p, _)| p.trim().to_owned()))
    .collect();
    crate::ai_settings::PROVIDER_IDS
        .iter()
        .copied()
        .filter(|id| {
            has_key(id)
                || settings.base_url(id).is_some_and(|u| !u.trim().is_empty())
                || routed.iter().any(|p| p == id)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_provider_is_in_use_by_key_base_url_or_route() {
        let settings = crate::ai_settings::resolve(&[&json!({
            "patrol_model": "anthropic:claude-x",
            "providers": {"ollama": {"base_url": "http://10.0.0.5:11434"}}
        })])
        .unwrap();
        let used = providers_in_use(&settings, |id| id == "gemini");
        assert_eq!(used, vec!["ollama", "anthropic", "gemini"]);
        let none = crate::ai_settings::resolve(&[&json!({})]).unwrap();
        assert!(providers_in_use(&none, |_| false).is_empty());
    }

    #[test]
    fn failures_map_to_stable_codes_with_a_remedy() {
        let error = CatalogueError::of_failure(FailureCause::Auth, Some(401));
        assert_eq!(error.code, CatalogueErrorCode::ProviderAuthFailed);
        assert!(error.message.contains("HTTP 401"), "{}", error.message);
        assert_eq!(
            CatalogueErrorCode::of_failure(FailureCause::Connectivity),
            CatalogueErrorCode::ProviderUnreachable
        );
        assert_eq!(
            CatalogueErrorCode::of_failure(FailureCause::MalformedResponse),
            CatalogueErrorCode::ProviderBadResponse
        );
        for code in CatalogueErrorCode::ALL {
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                json!(code.as_str()),
                "the wire name is the code"
            );
            assert!(!code.remedy().is_empty());
        }
    }
}
