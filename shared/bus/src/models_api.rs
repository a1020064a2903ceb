//! The model-runner's provider API: the model catalogue (each provider's own list of models)
//! and a provider test (the Patrol preflight's one model turn on any provider and model, with
//! nothing saved). Provider keys are opened only in the model-runner, so both are asked of it.
//!
//! | subject | request | reply | served by |
//! |---|---|---|---|
//! | `pulse.<tenant>.models.catalogue.request` | [`ModelCatalogueRequest`] | [`ModelCatalogue`](pulse_domain::model_catalogue::ModelCatalogue) | model-runner |
//! | `pulse.<tenant>.models.test.request` | [`ProviderTestRequest`] | [`PreflightRecord`](pulse_domain::patrol::readiness::PreflightRecord) | model-runner |
//!
//! Callers use [`crate::clients::ModelsClient`].

use pulse_capabilities::ErrorCode;
use pulse_domain::model_catalogue::ModelCatalogue;
use pulse_domain::patrol::readiness::PreflightRecord;

use crate::{Endpoint, Message};

/// The queue group the model-runner replicas share catalogue and test requests in.
pub const MODELS_QUEUE_GROUP: &str = "model-runner-models";

/// Ask for the models of every provider the tenant uses.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ModelCatalogueRequest {
    /// Who asked (token name), for the log.
    pub requested_by: String,
}

impl Message for ModelCatalogueRequest {
    const TYPE: &'static str = "pulse.models.catalogue_request";
}

impl crate::Request for ModelCatalogueRequest {
    type Reply = ModelCatalogue;
}

impl Message for ModelCatalogue {
    const TYPE: &'static str = "pulse.models.catalogue";
}

impl Endpoint for ModelCatalogueRequest {
    const SUBJECT: &'static str = "models.catalogue.request";
    const QUEUE_GROUP: &'static str = MODELS_QUEUE_GROUP;
    /// The settings could not be read; a provider's own failure is its entry, not an error.
    const ERRORS: &'static [ErrorCode] = &[ErrorCode::ServiceUnavailable, ErrorCode::InternalError];
    const UNAVAILABLE: ErrorCode = ErrorCode::ModelRunnerUnavailable;
}

/// Run the preflight's model turn on `provider:model` with the tenant's settings for that
/// provider, storing nothing: no settings change, no Patrol preflight record, no readiness.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProviderTestRequest {
    /// A provider id of the provider table (the gateway checked it).
    pub provider: String,
    pub model: String,
    pub requested_by: String,
}

impl Message for ProviderTestRequest {
    const TYPE: &'static str = "pulse.models.test_request";
}

impl crate::Request for ProviderTestRequest {
    type Reply = PreflightRecord;
}

impl Endpoint for ProviderTestRequest {
    const SUBJECT: &'static str = "models.test.request";
    const QUEUE_GROUP: &'static str = MODELS_QUEUE_GROUP;
    /// Not a provider, a provider the tenant has not set up, a model the route syntax refuses,
    /// or the settings could not be read.
    const ERRORS: &'static [ErrorCode] = &[
        ErrorCode::ProviderNotFound,
        ErrorCode::ProviderNotConfigured,
        ErrorCode::InvalidRequest,
        ErrorCode::ServiceUnavailable,
        ErrorCode::InternalError,
    ];
    const UNAVAILABLE: ErrorCode = ErrorCode::ModelRunnerUnavailable;
}
