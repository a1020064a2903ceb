//! The model catalogue and provider tests: `GET /api/ai/models` (the domain's
//! [`ModelCatalogue`]) and `POST /api/ai/test/{id}` (`{id}`: a provider id).

use std::borrow::Cow;

use pulse_domain::patrol::readiness::PreflightState;
use pulse_domain::text;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

pub use pulse_domain::model_catalogue::{
    CatalogueError, CatalogueErrorCode, CatalogueModel, ModelCatalogue, ProviderCatalogue,
};

use crate::settings::PreflightView;

/// The longest model a test takes: any provider's route of it stays within the route limit.
pub const MAX_MODEL_CHARS: usize = 500;

/// The body of `POST /api/ai/test/{id}`: the model to test on that provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderTestBody {
    /// The model id as the provider names it (what follows `provider:` in a route), like
    /// `gpt-4.1-mini` or `qwen3:8b`: no white space around it, no control characters.
    #[schemars(schema_with = "model_schema")]
    pub model: String,
}

fn model_schema(_: &mut SchemaGenerator) -> Schema {
    let blank = text::class(text::BLANK);
    let control = text::class(text::CONTROL);
    json_schema!({
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_MODEL_CHARS,
        "pattern": format!("^[^{blank}]([^{control}]*[^{blank}])?$"),
    })
}

/// A provider id of the provider table (`openai`, `anthropic`, `gemini`, `ollama`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ProviderId(pub String);

impl JsonSchema for ProviderId {
    fn schema_name() -> Cow<'static, str> {
        "ProviderId".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "a provider id of the provider table",
            "enum": pulse_domain::ai_settings::PROVIDER_IDS,
        })
    }
}

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
