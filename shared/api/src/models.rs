//! The model catalogue and provider tests: `GET /api/ai/models` (the domain's
//! [`ModelCatalogue`]) and `POST /api/ai/test/{id}` (`{id}`: a provider id).

use pulse_domain::patrol::readiness::PreflightState;
use serde::{Deserialize, Serialize};

pub use pulse_domain::model_catalogue::{
    CatalogueError, CatalogueErrorCode, CatalogueModel, ModelCatalogue, ProviderCatalogue,
};

use crate::settings::PreflightView;

/// The body of `POST /api/ai/test/{id}`: the model to test on that provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderTestBody {
    /// The model id as the provider names it (what follows `provider:` in a route), like
    /// `gpt-4.1-mini` or `qwen3:8b`.
    #[schemars(length(min = 1, max = 200))]
    pub model: String,
}

/// A provider id of the provider table (`openai`, `anthropic`, `gemini`, `ollama`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct ProviderId(#[schemars(length(min = 1, max = 64))] pub String);

/// The answer to `POST /api/ai/test/{id}`: the preflight's outcome for that provider and
/// model. Nothing was saved: the settings and the Patrol preflight are as they were.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProviderTestAnswer {
    pub provider: String,
    pub model: String,
    /// `passed` (the model called the tool), `warning` (not proven, not known broken) or
    /// `failed`.
    pub state: PreflightState,
    /// The outcome's safe fields: ok, cause, summary, recommendation, transport, tool calls
    /// recovered from text.
    pub outcome: PreflightView,
}
