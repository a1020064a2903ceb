//! The model catalogue and provider test requests and the catalogue reply, snapshotted: a
//! changed snapshot is a changed contract between the gateway and the model-runner. (The test's
//! reply is the preflight record, snapshotted in `preflight_snapshots.rs`.)

use chrono::{TimeZone, Utc};
use pulse_bus::models_api::{MODELS_QUEUE_GROUP, ModelCatalogueRequest, ProviderTestRequest};
use pulse_bus::{Endpoint, Message};
use pulse_domain::model_catalogue::{
    CatalogueError, CatalogueErrorCode, CatalogueModel, ModelCatalogue, ProviderCatalogue,
};

#[test]
fn catalogue_and_test_wire_shapes() {
    assert_eq!(ModelCatalogueRequest::SUBJECT, "models.catalogue.request");
    assert_eq!(ProviderTestRequest::SUBJECT, "models.test.request");
    assert_eq!(ModelCatalogueRequest::QUEUE_GROUP, MODELS_QUEUE_GROUP);
    assert_eq!(ProviderTestRequest::QUEUE_GROUP, MODELS_QUEUE_GROUP);
    assert_eq!(ModelCatalogue::TYPE, "pulse.models.catalogue");
    insta::assert_json_snapshot!(
        "catalogue_request",
        ModelCatalogueRequest {
            requested_by: "token:ops".to_owned(),
        }
    );
    insta::assert_json_snapshot!(
        "provider_test_request",
        ProviderTestRequest {
            provider: "ollama".to_owned(),
            model: "qwen3:8b".to_owned(),
            requested_by: "token:ops".to_owned(),
        }
    );
    let catalogue = ModelCatalogue {
        providers: vec![
            ProviderCatalogue {
                provider: "ollama".to_owned(),
                display_name: "Ollama".to_owned(),
                protocol: "ollama".to_owned(),
                ok: true,
                models: vec![CatalogueModel {
                    id: "qwen3:8b".to_owned(),
                    route: "ollama:qwen3:8b".to_owned(),
                    display_name: None,
                    context_window: None,
                    owned_by: None,
                    details: Some("qwen3 8.2B Q4_K_M".to_owned()),
                }],
                error: None,
                elapsed_ms: 12,
            },
            ProviderCatalogue {
                provider: "anthropic".to_owned(),
                display_name: "Anthropic".to_owned(),
                protocol: "anthropic".to_owned(),
                ok: false,
                models: vec![],
                error: Some(CatalogueError::new(
                    CatalogueErrorCode::ProviderAuthFailed,
                    "the provider rejected the API key (HTTP 401)",
                )),
                elapsed_ms: 80,
            },
        ],
        listed_at: Utc.with_ymd_and_hms(2026, 12, 6, 18, 0, 0).unwrap(),
    };
    insta::assert_json_snapshot!("model_catalogue", catalogue);
}
