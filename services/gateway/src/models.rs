//! The model catalogue and provider tests over the API (both asked of a model-runner, the only
//! holder of provider keys, over [`pulse_bus::models_api`]):
//!
//! - `GET /api/ai/models` (scope `admin`, as the AI settings it reads): each provider the
//!   tenant uses with the models it lists at its own list endpoint, or its own classified error
//!   (`provider_unreachable`, `provider_auth_failed`, ...). One provider's failure never fails
//!   the answer.
//! - `POST /api/ai/test/{id}` (scopes `admin` and `ai:execute`, as the Patrol preflight: it
//!   spends a model turn), body `{"model": "..."}`: the preflight's model turn on that provider
//!   and model with the tenant's settings for the provider, answering its outcome. Nothing is
//!   saved: not the settings, not the Patrol preflight record.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::routing;
use pulse_api::models::{
    MAX_MODEL_CHARS, ModelCatalogue, ProviderId, ProviderTestAnswer, ProviderTestBody,
};
use pulse_api::settings::PreflightView;
use pulse_api::system::{ActionMode, ApprovalPolicy, Category};
use pulse_bus::ModelsClient;
use pulse_bus::models_api::{ModelCatalogueRequest, ProviderTestRequest};
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use pulse_domain::ai_settings::ModelRoute;

use crate::authorized::{AdminScope, Authorized};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, PathParam};
use crate::patrol::{PREFLIGHT_REQUEST_TIMEOUT, PatrolExecuteScope};
use crate::route::{Answer, Body, JSON_BODY, RouteSpec, endpoint_errors, route_errors, schema};
use crate::state::AppState;

/// How long the gateway waits for the catalogue: every provider is asked at once, each within
/// the model-runner's 10 s bound.
pub const CATALOGUE_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A provider of the provider table, named in the path.
#[derive(Debug, Clone, Copy)]
pub struct Provider(&'static str);

impl PathParam for Provider {
    fn from_segment(raw: String) -> Result<Self, ApiError> {
        pulse_domain::ai_settings::PROVIDER_IDS
            .iter()
            .find(|id| **id == raw)
            .map(|id| Provider(id))
            .ok_or_else(|| {
                let known = pulse_domain::ai_settings::PROVIDER_IDS.join(", ");
                ApiError::new(
                    ErrorCode::ProviderNotFound,
                    format!("no provider {raw:?}; the providers are {known}"),
                )
            })
    }
}

pub async fn catalogue(
    State(state): State<AppState>,
    auth: Authorized<AdminScope>,
) -> Result<Json<ModelCatalogue>, ApiError> {
    let request = ModelCatalogueRequest {
        requested_by: auth.principal.named_actor(),
    };
    let catalogue = ModelsClient::new(state.bus.clone())
        .catalogue(&auth.principal.tenant, &request, CATALOGUE_REQUEST_TIMEOUT)
        .await?;
    Ok(Json(catalogue))
}

/// The model of a test body, as a route on `provider` would take it.
fn checked_model(provider: &str, body: &ProviderTestBody) -> Result<String, ApiError> {
    let invalid = |why: String| ApiError::new(ErrorCode::InvalidRequest, format!("model: {why}"));
    if body.model.trim() != body.model {
        return Err(invalid(
            "leading or trailing spaces are not part of a model id".to_owned(),
        ));
    }
    if body.model.chars().count() > MAX_MODEL_CHARS {
        return Err(invalid(format!("longer than {MAX_MODEL_CHARS} characters")));
    }
    ModelRoute::parse("model", &format!("{provider}:{}", body.model))
        .map(|route| route.model)
        .map_err(|e| invalid(e.to_string()))
}

pub async fn test(
    State(state): State<AppState>,
    auth: Authorized<PatrolExecuteScope>,
    ApiPath(Provider(provider)): ApiPath<Provider>,
    ApiJson(body, _): ApiJson<ProviderTestBody>,
) -> Result<Json<ProviderTestAnswer>, ApiError> {
    let model = checked_model(provider, &body)?;
    let request = ProviderTestRequest {
        provider: provider.to_owned(),
        model: model.clone(),
        requested_by: auth.principal.named_actor(),
    };
    let record = ModelsClient::new(state.bus.clone())
        .test(&auth.principal.tenant, &request, PREFLIGHT_REQUEST_TIMEOUT)
        .await?;
    Ok(Json(ProviderTestAnswer {
        provider: provider.to_owned(),
        model,
        state: record.state(),
        outcome: PreflightView::from(&record),
    }))
}

/// The routes of this module, in the order the API lists them.
pub(crate) const ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: "GET",
        path: "/api/ai/models",
        scopes: &[Scope::Admin],
        public: false,
        name: "list_ai_models",
        title: "List the providers' models",
        description: "Each provider the tenant uses (a key, a base URL or a model route) with the models it lists at its own list endpoint, or its classified error (provider_unreachable, provider_auth_failed, provider_bad_response, ...); one failing provider never fails the answer.",
        category: Category::Settings,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<ModelCatalogue>,
        },
        errors: endpoint_errors!(pulse_bus::models_api::ModelCatalogueRequest),
        handler: || routing::get(catalogue),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/test/{id}",
        scopes: &[Scope::Admin, Scope::AiExecute],
        public: false,
        name: "test_ai_provider",
        title: "Test a provider and model",
        description: "Runs the Patrol preflight's one model turn on the provider named by {id} and the body's model, with the tenant's settings for that provider, and answers its outcome; saves nothing (settings and the Patrol preflight stay as they were).",
        category: Category::Settings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<ProviderId>),
        query: None,
        body: Some(Body::required(schema::<ProviderTestBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<ProviderTestAnswer>,
        },
        errors: route_errors!(
            &JSON_BODY,
            // An id the router cannot read as text, or one that names no provider.
            &[ErrorCode::InvalidParameter, ErrorCode::ProviderNotFound],
            endpoint_errors!(pulse_bus::models_api::ProviderTestRequest)
        ),
        handler: || routing::post(test),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_body_model_is_checked_as_a_route_would_be() {
        let body = |model: &str| ProviderTestBody {
            model: model.to_owned(),
        };
        assert_eq!(
            checked_model("ollama", &body("qwen3:8b")).unwrap(),
            "qwen3:8b"
        );
        let long = "m".repeat(MAX_MODEL_CHARS + 1);
        for bad in ["", " gpt", "gpt ", "a\u{7}b", "a\u{85}", long.as_str()] {
            assert_eq!(
                checked_model("openai", &body(bad)).unwrap_err().code,
                ErrorCode::InvalidRequest,
                "{bad:?}"
            );
        }
        assert_eq!(
            ApiPath::<Provider>::parse("nosuch").err().map(|e| e.code),
            Some(ErrorCode::ProviderNotFound)
        );
        assert!(ApiPath::<Provider>::parse("anthropic").is_ok());
    }
}
