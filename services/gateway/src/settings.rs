//! `GET /api/settings/ai` and `PUT /api/settings/ai` (scope `admin`).
//!
//! The effective settings are the compiled defaults, then the operator's `ai.*` config, then the
//! tenant's stored document. Provider keys are write-only: a response says per provider whether
//! a key is configured and where it came from, never the key.

use axum::routing;
use pulse_api::system::{ActionMode, ApprovalPolicy, Category};
use pulse_domain::Scope;
use std::collections::BTreeSet;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use pulse_api::settings::{
    KeySource, PreflightView, ProviderView, SettingsPreflightState, SettingsView,
};
use pulse_bus::{OutboxRow, events};
use pulse_capabilities::ErrorCode;
use pulse_domain::ai_settings::{
    self, AUTOPILOT_ACK_VERSION, AiSettings, KeyChange, PROVIDER_IDS, PatchBody, SettingsChanged,
    SettingsError, SettingsPatch,
};
use pulse_domain::patrol::readiness::PreflightRecord;
use pulse_store::audit::{self, AuditEntry};
use pulse_store::settings::{self as store, SettingsStoreError};
use pulse_store::{TenantTx, patrol_readiness};
use serde_json::{Value, json};

use crate::authorized::{AdminScope, Authorized};
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::route::{Answer, Body, RouteSpec, schema};
use crate::settings_context::SettingsContext;
use crate::state::AppState;

fn preflight_state(
    settings: &AiSettings,
    record: Option<&PreflightRecord>,
) -> SettingsPreflightState {
    let Some(record) = record else {
        return SettingsPreflightState::NotRun;
    };
    let current = settings
        .patrol_route()
        .is_some_and(|route| record.is_for(&route, settings.base_url(route.provider)));
    if current {
        record.state().into()
    } else {
        SettingsPreflightState::Stale
    }
}

fn view(
    settings: AiSettings,
    stored: &store::StoredSettings,
    version: i64,
    stored_keys: &BTreeSet<String>,
    environment_keys: &BTreeSet<String>,
    preflight: Option<&PreflightRecord>,
) -> SettingsView {
    let preflight_state = preflight_state(&settings, preflight);
    let patrol_model_simulated = settings
        .patrol_route()
        .is_some_and(|route| route.is_simulated());
    let providers = PROVIDER_IDS
        .iter()
        .map(|id| {
            let key_source = if stored_keys.contains(*id) {
                Some(KeySource::Settings)
            } else if environment_keys.contains(*id) {
                Some(KeySource::Environment)
            } else {
                None
            };
            let provider = ProviderView {
                configured: key_source.is_some(),
                key_source,
                base_url: settings.base_url(id).map(str::to_owned),
                options: settings.provider_options(id),
            };
            ((*id).to_owned(), provider)
        })
        .collect();
    SettingsView {
        version,
        updated_at: stored.updated_at,
        updated_by: stored.updated_by.clone(),
        providers,
        model: settings.model,
        chat_model: settings.chat_model,
        patrol_model: settings.patrol_model,
        auto_fix_model: settings.auto_fix_model,
        patrol_model_simulated,
        patrol_interval_minutes: settings.patrol_interval_minutes,
        autonomy_level: settings.autonomy_level,
        autopilot_acknowledgement: settings.autopilot_acknowledgement,
        autopilot_acknowledgement_version: AUTOPILOT_ACK_VERSION,
        alert_triggers: settings.alert_triggers,
        budgets: settings.budgets,
        patrol_enabled: settings.patrol_enabled,
        patrol_preflight: preflight.map(PreflightView::from),
        preflight_state,
    }
}

fn settings_error(error: SettingsError) -> ApiError {
    match error {
        SettingsError::AutopilotNotAcknowledged { .. } => {
            ApiError::new(ErrorCode::AutopilotNotAcknowledged, error.to_string())
        }
        other => ApiError::new(ErrorCode::InvalidRequest, other.to_string()),
    }
}

impl From<SettingsStoreError> for ApiError {
    fn from(error: SettingsStoreError) -> Self {
        match error {
            SettingsStoreError::VersionConflict { expected, current } => ApiError::new(
                ErrorCode::SettingsVersionConflict,
                format!("If-Match names version {expected}; the current version is {current}"),
            ),
            SettingsStoreError::Store(error) => ApiError::from(error),
            other => {
                tracing::error!(error = %other, "settings store error");
                ApiError::new(ErrorCode::InternalError, "unexpected settings error")
            }
        }
    }
}

/// `If-Match: "3"` (or `3`, or `W/"3"`); absent means last writer wins.
fn expected_version(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let bad = || {
        ApiError::new(
            ErrorCode::InvalidParameter,
            "If-Match: expected the settings version from GET, like \"3\"",
        )
    };
    let text = value.to_str().map_err(|_| bad())?.trim();
    let text = text.strip_prefix("W/").unwrap_or(text);
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    text.parse::<i64>()
        .ok()
        .filter(|v| *v >= 0)
        .map(Some)
        .ok_or_else(bad)
}

fn with_etag(view: SettingsView) -> Response {
    let etag = HeaderValue::from_str(&format!("\"{}\"", view.version)).ok();
    let mut response = Json(view).into_response();
    if let Some(etag) = etag {
        response.headers_mut().insert(header::ETAG, etag);
    }
    response
}

async fn current_view(
    tx: &TenantTx,
    context: &SettingsContext,
    stored: &store::StoredSettings,
    version: i64,
    document: &Value,
) -> Result<SettingsView, ApiError> {
    let settings = ai_settings::resolve(&[&context.config.layer, document]).map_err(|error| {
        tracing::error!(%error, "stored ai settings no longer validate");
        ApiError::new(ErrorCode::InternalError, "stored settings are invalid")
    })?;
    let stored_keys: BTreeSet<String> = store::configured_credentials(tx)
        .await?
        .into_keys()
        .collect();
    let preflight = patrol_readiness::load_preflight(tx).await?;
    Ok(view(
        settings,
        stored,
        version,
        &stored_keys,
        &context.config.environment_keys,
        preflight.as_ref(),
    ))
}

pub async fn get(
    State(state): State<AppState>,
    auth: Authorized<AdminScope>,
) -> Result<Response, ApiError> {
    current(&state, &auth).await.map(with_etag)
}

/// The tenant's effective settings, as `GET` answers them (the web page reads them here).
pub(crate) async fn current(
    state: &AppState,
    auth: &Authorized<AdminScope>,
) -> Result<SettingsView, ApiError> {
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let stored = store::get(&tx, false).await?;
    let view = current_view(
        &tx,
        &state.settings,
        &stored,
        stored.version,
        &stored.document,
    )
    .await?;
    tx.commit().await?;
    Ok(view)
}

/// The Autopilot acknowledgement is the caller's: whatever a body says, `acknowledged_by` becomes
/// the calling user (`user:<id>`) and `at` now; a token that belongs to no user cannot give it.
fn bind_acknowledgement(
    body: &mut Value,
    principal: &pulse_store::tokens::Principal,
) -> Result<(), ApiError> {
    let Some(ack) = body
        .get_mut("autopilot_acknowledgement")
        .and_then(Value::as_object_mut)
    else {
        return Ok(());
    };
    let Some(user) = principal.user_id else {
        return Err(ApiError::new(
            ErrorCode::AcknowledgementRequiresHuman,
            "the Autopilot acknowledgement must come from a person; this token belongs to no user",
        ));
    };
    ack.insert("acknowledged_by".to_owned(), json!(format!("user:{user}")));
    ack.insert("at".to_owned(), json!(Utc::now()));
    Ok(())
}

pub async fn put(
    State(state): State<AppState>,
    auth: Authorized<AdminScope>,
    headers: HeaderMap,
    ApiJson(mut body, _): ApiJson<Value>,
) -> Result<Response, ApiError> {
    let expected = expected_version(&headers)?;
    bind_acknowledgement(&mut body, &auth.principal)?;
    let patch = ai_settings::parse_patch(&body).map_err(settings_error)?;
    save(&state, &auth, expected, patch).await.map(with_etag)
}

/// A typed body (a web form's) as the patch `PUT` would apply, refused as `PUT` refuses it.
pub(crate) fn typed_patch(body: &PatchBody) -> Result<SettingsPatch, ApiError> {
    body.parse().map_err(settings_error)
}

/// Applies a checked patch as `PUT` does (`expected`: the version `If-Match` names): keys,
/// document, the settings event, the audit record; answers the saved settings.
pub(crate) async fn save(
    state: &AppState,
    auth: &Authorized<AdminScope>,
    expected: Option<i64>,
    patch: SettingsPatch,
) -> Result<SettingsView, ApiError> {
    let context = &state.settings;
    let tenant = auth.principal.tenant.clone();
    let actor = format!("token:{}", auth.principal.token_id);
    let tx = state.store.tenant_tx(&tenant).await?;
    let stored = store::get(&tx, true).await?;
    if let Some(expected) = expected
        && expected != stored.version
    {
        return Err(SettingsStoreError::VersionConflict {
            expected,
            current: stored.version,
        }
        .into());
    }
    let before = ai_settings::resolve(&[&context.config.layer, &stored.document]).ok();
    let document = ai_settings::apply_patch(&stored.document, &patch);
    let after =
        ai_settings::resolve(&[&context.config.layer, &document]).map_err(settings_error)?;
    let mut keys_changed = BTreeSet::new();
    for (provider, change) in &patch.keys {
        let changed = match change {
            KeyChange::Set(key) => {
                store::set_credential(&tx, &context.master_key, provider, key).await?;
                true
            }
            KeyChange::Clear => store::clear_credential(&tx, provider).await?,
        };
        if changed {
            keys_changed.insert(provider.clone());
        }
    }
    let version = store::put(&tx, stored.version, &document, &actor).await?;
    let patrol_route_changed = match &before {
        Some(before) => before.patrol_transport_differs(&after),
        None => true,
    } || after
        .patrol_route()
        .is_some_and(|route| keys_changed.contains(route.provider));
    let (domain, event) = events::SETTINGS_CHANGED;
    let changed = SettingsChanged {
        version,
        patrol_route_changed,
    };
    let row =
        OutboxRow::event(&context.subjects, &tenant, domain, event, &changed).map_err(|error| {
            tracing::error!(%error, "settings event not encoded");
            ApiError::new(
                ErrorCode::InternalError,
                "settings event could not be queued",
            )
        })?;
    pulse_bus::enqueue(&**tx.client(), row)
        .await
        .map_err(|error| {
            tracing::warn!(%error, "settings event not queued");
            ApiError::new(
                ErrorCode::ServiceUnavailable,
                "the database is unavailable; retry shortly",
            )
        })?;
    audit::append(
        &tx,
        &AuditEntry {
            actor: actor.clone(),
            kind: "settings.ai.updated".to_owned(),
            subject: "ai".to_owned(),
            payload: json!({
                "changed_fields": patch.changed_fields(),
                "version": version,
                "patrol_route_changed": patrol_route_changed,
            }),
        },
    )
    .await?;
    let saved = store::StoredSettings {
        document: document.clone(),
        version,
        updated_at: Some(Utc::now()),
        updated_by: Some(actor),
    };
    let view = current_view(&tx, context, &saved, version, &document).await?;
    tx.commit().await?;
    context.outbox_notify.notify_one();
    tracing::info!(tenant = %tenant, version, patrol_route_changed, "ai settings saved");
    Ok(view)
}

/// The routes of this module, in the order the API lists them.
pub(crate) const ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: "GET",
        path: "/api/settings/ai",
        scopes: &[Scope::Admin],
        public: false,
        name: "get_ai_settings",
        title: "Get the AI settings",
        description: "The effective AI settings (defaults, config, then the tenant's document) with per-provider key presence; never a key. The ETag is the version.",
        category: Category::Settings,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::settings::SettingsView>,
        },
        errors: &[],
        handler: || routing::get(get),
    },
    RouteSpec {
        method: "PUT",
        path: "/api/settings/ai",
        scopes: &[Scope::Admin],
        public: false,
        name: "update_ai_settings",
        title: "Update the AI settings",
        description: "Applies a partial settings document (provider keys are write-only); If-Match with the version refuses a stale write.",
        category: Category::Settings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(
            schema::<pulse_domain::ai_settings::SettingsPatchSchema>,
        )),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::settings::SettingsView>,
        },
        errors: &[
            ErrorCode::InvalidJson,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidParameter,
            ErrorCode::SettingsVersionConflict,
            ErrorCode::AutopilotNotAcknowledged,
            ErrorCode::AcknowledgementRequiresHuman,
        ],
        handler: || routing::put(put),
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use chrono::DateTime;
    use pulse_bus::Subjects;
    use pulse_domain::patrol::readiness::TurnTransport;
    use pulse_store::settings::MasterKey;

    #[test]
    fn if_match_forms() {
        let mut headers = HeaderMap::new();
        assert_eq!(expected_version(&headers).unwrap(), None);
        for (text, version) in [("\"3\"", 3), ("3", 3), ("W/\"7\"", 7)] {
            headers.insert(header::IF_MATCH, HeaderValue::from_static(text));
            assert_eq!(expected_version(&headers).unwrap(), Some(version));
        }
        headers.insert(header::IF_MATCH, HeaderValue::from_static("\"abc\""));
        assert_eq!(
            expected_version(&headers).unwrap_err().code,
            ErrorCode::InvalidParameter
        );
    }

    #[test]
    fn config_layer_keeps_keys_out_and_rejects_bad_values() {
        let mut config = pulse_config::AiConfig {
            patrol_model: Some("openai:gpt-4.1-mini".to_owned()),
            ..Default::default()
        };
        config.providers.insert(
            "openai".to_owned(),
            pulse_config::AiProviderConfig {
                api_key: Some(pulse_config::SecretString("sk-env".to_owned())),
                base_url: Some("http://127.0.0.1:9/v1".to_owned()),
                ..Default::default()
            },
        );
        let subjects = Subjects::new(None);
        let context = SettingsContext::new(
            &config,
            MasterKey::generate(),
            subjects.clone(),
            Arc::default(),
        )
        .unwrap();
        assert!(!context.config.layer.to_string().contains("sk-env"));
        assert!(context.config.environment_keys.contains("openai"));
        config.patrol_model = Some("nosuch:model".to_owned());
        let err = SettingsContext::new(&config, MasterKey::generate(), subjects, Arc::default())
            .unwrap_err();
        assert_eq!(err.field(), "patrol_model");
    }

    #[test]
    fn view_shape() {
        let settings =
            ai_settings::resolve(&[&json!({"patrol_model": "openai:gpt-4.1-mini"})]).unwrap();
        let stored = store::StoredSettings {
            document: json!({}),
            version: 2,
            updated_at: Some(
                DateTime::parse_from_rfc3339("2026-11-29T18:00:00Z")
                    .unwrap()
                    .with_timezone(&Utc),
            ),
            updated_by: Some("token:01a22885-50e2-75d7-ba82-2d4f4e2bbf70".to_owned()),
        };
        let view = view(
            settings,
            &stored,
            2,
            &BTreeSet::from(["openai".to_owned()]),
            &BTreeSet::from(["openai".to_owned(), "groq".to_owned()]),
            None,
        );
        assert_eq!(
            view.providers["openai"].key_source,
            Some(KeySource::Settings)
        );
        assert_eq!(
            view.providers["groq"].key_source,
            Some(KeySource::Environment)
        );
        assert!(!view.providers["anthropic"].configured);
        insta::assert_json_snapshot!("ai_settings_view", view);
    }

    #[test]
    fn a_simulated_patrol_model_is_labelled() {
        let stored = store::StoredSettings {
            document: json!({}),
            version: 1,
            updated_at: None,
            updated_by: None,
        };
        let empty = BTreeSet::new();
        let shown = |document: Value| {
            let settings = ai_settings::resolve(&[&document]).unwrap();
            view(settings, &stored, 1, &empty, &empty, None).patrol_model_simulated
        };
        assert!(shown(json!({"patrol_model": "openai:sim:diligent"})));
        assert!(shown(json!({"model": "openai:sim:diligent"})));
        assert!(!shown(json!({"patrol_model": "openai:gpt-4.1-mini"})));
        assert!(!shown(json!({})));
    }

    #[test]
    fn view_with_a_preflight_shows_safe_fields_and_its_state() {
        let settings = ai_settings::resolve(&[&json!({
            "patrol_model": "openai:gpt-4.1-mini",
            "providers": {"openai": {"base_url": "https://llm.internal/v1"}}
        })])
        .unwrap();
        let stored = store::StoredSettings {
            document: json!({}),
            version: 3,
            updated_at: None,
            updated_by: None,
        };
        let mut record = PreflightRecord {
            route: "openai:gpt-4.1-mini".to_owned(),
            model: "gpt-4.1-mini".to_owned(),
            base_url: Some("https://llm.internal/v1".to_owned()),
            ok: false,
            tool_call_observed: false,
            tool_calls_recovered: 0,
            cause: Some("auth".to_owned()),
            summary: "the provider rejected the API key".to_owned(),
            recommendation: Some("check the API key and its permissions".to_owned()),
            action: Some("/settings/pulse-intelligence/provider".to_owned()),
            checked_at: DateTime::parse_from_rfc3339("2026-11-29T18:00:00Z")
                .unwrap()
                .with_timezone(&Utc),
            transport: Some(TurnTransport::Streamed),
        };
        let empty = BTreeSet::new();
        let shown = view(settings.clone(), &stored, 3, &empty, &empty, Some(&record));
        assert_eq!(shown.preflight_state, SettingsPreflightState::Failed);
        insta::assert_json_snapshot!("ai_settings_view_preflight", shown.patrol_preflight);
        // The address is shown once, with its provider.
        let text = serde_json::to_string(&shown.patrol_preflight).unwrap();
        assert!(!text.contains("llm.internal"), "{text}");
        record.route = "openai:gpt-4.1".to_owned();
        let other = view(settings.clone(), &stored, 3, &empty, &empty, Some(&record));
        assert_eq!(other.preflight_state, SettingsPreflightState::Stale);
        let none = view(settings, &stored, 3, &empty, &empty, None);
        assert_eq!(
            (none.preflight_state, none.patrol_preflight),
            (SettingsPreflightState::NotRun, None)
        );
    }
}
