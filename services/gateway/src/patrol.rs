//! Patrol runs over the API.
//!
//! - `POST /api/ai/patrol/run` (scopes `admin` and `ai:execute`): the body is parsed by the
//!   domain [`RunRequest`] parser (no body or `{}`: a full run; `{"resource_ids": []}` is a 422,
//!   an explicit empty scope being a caller bug) and forwarded to the patrol-scheduler over
//!   `pulse.<tenant>.patrol.run.request`, which resolves the scope, records the run `queued` and
//!   enqueues its job. The answer (`202 Accepted`) carries the `run_id`.
//! - `GET /api/ai/patrol/runs?limit=` and `GET /api/ai/patrol/runs/{id}` (scope
//!   `monitoring:read`): the run records, newest first.
//! - `GET /api/ai/patrol/status` (scope `monitoring:read`: it is an operational read like the
//!   resources and alerts, not a conversation with the model, so `ai:chat` is not asked for): the
//!   domain status projection over the stored runs and the readiness checks of
//!   [`pulse_store::patrol_readiness::assess`], the same evaluation the scheduler's admission
//!   gate uses: a known-bad provider or model shows `runtime_state: blocked` with the cause.
//! - `POST /api/ai/patrol/preflight` (scopes `admin` and `ai:execute`): asks a model-runner over
//!   `pulse.<tenant>.patrol.preflight.request` to run a fresh preflight of the Patrol route and
//!   answers its stored outcome (safe fields only).

use axum::routing;
use pulse_api::system::{ActionMode, ApprovalPolicy, Category};
use std::time::{Duration, Instant};

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use pulse_api::patrol::{PatrolRunAccepted, PreflightAnswer, RunAccepted, RunList, RunsQuery};
use pulse_api::settings::PreflightView;
use pulse_bus::PatrolClient;
use pulse_bus::patrol_api::{PatrolPreflightRequest, PatrolRunRequest};
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use pulse_domain::ai_settings;
use pulse_domain::patrol::cadence::Cadence;
use pulse_domain::patrol::run::{PatrolRun, RunId, RunStatus};
use pulse_domain::patrol::scope::{RunRequest, RunRequestError};
use pulse_domain::patrol::status::{
    CurrentRun, FullRunSummary, PatrolStatus, StatusInputs, project,
};
use pulse_store::patrol_readiness;
use pulse_store::patrol_runs::{self, DEFAULT_LIST_LIMIT};

use crate::authorized::{Authorized, MonitoringReadScope, RequiredScopes};
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery, PathParam, bytes_rejection};
use crate::route::{Answer, Body, JSON_BODY, RouteSpec, endpoint_errors, route_errors, schema};
use crate::state::AppState;

/// `POST /api/ai/patrol/run` needs both scopes.
pub struct PatrolExecuteScope;
impl RequiredScopes for PatrolExecuteScope {
    const SCOPES: &'static [Scope] = &[Scope::Admin, Scope::AiExecute];
}

/// How old the last full run may be for a health verdict, in intervals.
const HEALTH_WINDOW_INTERVALS: u64 = 2;

pub(crate) fn request_error(err: RunRequestError) -> ApiError {
    let code = ErrorCode::from_code(err.code())
        .filter(|c| *c == ErrorCode::InvalidJson)
        .unwrap_or(ErrorCode::InvalidRequest);
    ApiError::new(code, err.to_string())
}

/// A body, when there is one, is declared JSON like every other JSON route's.
fn check_content_type(headers: &HeaderMap, body: &[u8]) -> Result<(), ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| {
            let mime = mime.trim().to_ascii_lowercase();
            mime == "application/json"
                || (mime.starts_with("application/") && mime.ends_with("+json"))
        });
    if is_json {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "expected Content-Type: application/json",
        ))
    }
}

pub async fn run(
    State(state): State<AppState>,
    auth: Authorized<PatrolExecuteScope>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|e| bytes_rejection(&e, ErrorCode::InvalidJson))?;
    check_content_type(&headers, &body)?;
    let request = RunRequest::parse(&body).map_err(request_error)?;
    let accepted = start(&state, &auth, request).await?;
    Ok((StatusCode::ACCEPTED, Json(accepted)).into_response())
}

/// Asks the scheduler for a run as the caller (the web page's Run now calls it too) and answers
/// the run it queued.
pub(crate) async fn start(
    state: &AppState,
    auth: &Authorized<PatrolExecuteScope>,
    request: RunRequest,
) -> Result<RunAccepted, ApiError> {
    let scope = match request {
        RunRequest::Full => None,
        RunRequest::Scoped(scoped) => Some(scoped),
    };
    let tenant = &auth.principal.tenant;
    let request = PatrolRunRequest {
        scope,
        requested_by: auth.principal.named_actor(),
    };
    let accepted = PatrolClient::new(state.bus.clone())
        .run(tenant, &request, state.patrol_request_timeout)
        .await?;
    Ok(RunAccepted {
        status: RunStatus::Queued,
        accepted: PatrolRunAccepted {
            run_id: accepted.run_id,
            trigger_reason: accepted.trigger_reason,
            run_type: accepted.run_type,
            queued_at: accepted.queued_at,
            scope_resource_ids: accepted.scope_resource_ids,
            effective_scope_resource_ids: accepted.effective_scope_resource_ids,
        },
    })
}

/// How long the gateway waits for a preflight: one bounded model turn plus its one retry.
pub const PREFLIGHT_REQUEST_TIMEOUT: Duration = Duration::from_secs(150);

pub async fn preflight(
    State(state): State<AppState>,
    auth: Authorized<PatrolExecuteScope>,
) -> Result<Json<PreflightAnswer>, ApiError> {
    let tenant = &auth.principal.tenant;
    let request = PatrolPreflightRequest {
        requested_by: auth.principal.named_actor(),
    };
    let record = PatrolClient::new(state.bus.clone())
        .preflight(tenant, &request, PREFLIGHT_REQUEST_TIMEOUT)
        .await?;
    Ok(Json(PreflightAnswer {
        preflight_state: record.state(),
        patrol_preflight: PreflightView::from(&record),
    }))
}

pub async fn list(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    ApiQuery(query, _): ApiQuery<RunsQuery>,
) -> Result<Json<RunList>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIST_LIMIT);
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let runs = patrol_runs::list(&tx, limit).await?;
    tx.commit().await?;
    Ok(Json(RunList { runs }))
}

impl PathParam for RunId {
    fn from_segment(raw: String) -> Result<Self, ApiError> {
        raw.parse()
            .map_err(|e| ApiError::new(ErrorCode::InvalidParameter, format!("id: {e}")))
    }
}

pub async fn get(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    ApiPath(id): ApiPath<RunId>,
) -> Result<Json<PatrolRun>, ApiError> {
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let run = patrol_runs::get(&tx, id).await?;
    tx.commit().await?;
    run.map(Json)
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, format!("no patrol run {id}")))
}

fn full_run_summary(run: &PatrolRun) -> Option<FullRunSummary> {
    Some(FullRunSummary {
        id: run.id,
        status: run.status,
        completed_at: run.completed_at?,
        duration_ms: run.duration_ms.unwrap_or(0),
        resources_checked: run.counts.resources_checked,
        error_count: run.error_count,
    })
}

pub async fn status(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
) -> Result<Json<PatrolStatus>, ApiError> {
    let (status, _) = status_projection(&state, &auth.principal).await?;
    Ok(Json(status))
}

/// The status projection of the caller's tenant, with the effective AI settings it was computed
/// under (`None` when the stored settings no longer resolve).
pub(crate) async fn status_projection(
    state: &AppState,
    principal: &pulse_store::tokens::Principal,
) -> Result<(PatrolStatus, Option<ai_settings::AiSettings>), ApiError> {
    let tx = state.store.tenant_tx(&principal.tenant).await?;
    let current = patrol_runs::current(&tx).await?;
    let last_full = patrol_runs::last_full_run(&tx).await?;
    let last_successful = patrol_runs::last_successful_full_run(&tx).await?;
    let last_activity_at = patrol_runs::last_activity_at(&tx).await?;
    let queued_scoped_runs = patrol_runs::queued_scoped(&tx).await?;
    let now = Utc::now();
    let active_findings = pulse_store::findings::active_counts(&tx, now)
        .await
        .map_err(crate::findings::store_error)?;
    let stored = pulse_store::settings::get(&tx, false).await.map_err(|e| {
        tracing::error!(error = %e, "reading ai settings failed");
        ApiError::new(ErrorCode::InternalError, "the settings could not be read")
    })?;
    let readiness = patrol_readiness::assess(&tx, &state.settings.config, now).await?;
    tx.commit().await?;
    let settings = ai_settings::resolve(&[&state.settings.config.layer, &stored.document]).ok();
    let interval_minutes = settings
        .as_ref()
        .map(|s| s.patrol_interval_minutes)
        .unwrap_or(0);
    // The dispatcher's cadence: the override (tests, benchmarks) or the tenant's interval.
    let interval_ms = state
        .patrol
        .cadence_override_ms
        .unwrap_or(u64::from(interval_minutes) * 60_000);
    let next_patrol_at = (interval_ms > 0).then(|| {
        Cadence::new(interval_ms, state.patrol.jitter_pct).next_after(&principal.tenant, now)
    });
    let runner_available = state
        .fleet
        .report(Instant::now())
        .services
        .get("model-runner")
        .is_some_and(|s| s.ready);
    let inputs = StatusInputs {
        now,
        enabled: ai_settings::patrol_enabled_in(&stored.document),
        runner_available,
        readiness,
        current_run: current.map(|run| CurrentRun {
            id: run.id,
            run_type: run.run_type,
        }),
        last_full_run: last_full.as_ref().and_then(full_run_summary),
        last_successful_full_at: last_successful.and_then(|run| run.completed_at),
        last_activity_at,
        next_patrol_at,
        interval_ms,
        active_findings,
        queued_scoped_runs,
        health_window_ms: interval_ms
            .saturating_mul(HEALTH_WINDOW_INTERVALS)
            .max(Duration::from_secs(3600).as_millis() as u64),
    };
    Ok((project(&inputs), settings))
}

/// The routes of this module, in the order the API lists them (with the event stream, whose
/// handler is `patrol_stream`).
pub(crate) const ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/run",
        scopes: &[Scope::Admin, Scope::AiExecute],
        public: false,
        name: "run_patrol",
        title: "Request a Patrol run",
        description: "Queues a full run (no body or {}) or a run scoped to resources; answers the run id once the scheduler accepted it.",
        category: Category::Patrol,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::optional(
            schema::<pulse_domain::patrol::scope::RawRunRequest>,
        )),
        response: Answer::Json {
            status: 202,
            schema: schema::<pulse_api::patrol::RunAccepted>,
        },
        errors: route_errors!(
            &JSON_BODY,
            endpoint_errors!(pulse_bus::patrol_api::PatrolRunRequest)
        ),
        handler: || routing::post(run),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/preflight",
        scopes: &[Scope::Admin, Scope::AiExecute],
        public: false,
        name: "run_patrol_preflight",
        title: "Run a Patrol preflight",
        description: "Checks the Patrol provider and model with one bounded model turn and answers the stored outcome.",
        category: Category::Patrol,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::patrol::PreflightAnswer>,
        },
        errors: endpoint_errors!(pulse_bus::patrol_api::PatrolPreflightRequest),
        handler: || routing::post(preflight),
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/patrol/runs",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "list_patrol_runs",
        title: "List Patrol runs",
        description: "The tenant's Patrol run records, newest first.",
        category: Category::Patrol,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::patrol::RunsQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::patrol::RunList>,
        },
        errors: &[ErrorCode::InvalidParameter],
        handler: || routing::get(list),
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/patrol/runs/{id}",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_patrol_run",
        title: "Get a Patrol run",
        description: "One Patrol run record.",
        category: Category::Patrol,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_domain::patrol::run::RunId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_domain::patrol::run::PatrolRun>,
        },
        errors: &[ErrorCode::InvalidParameter, ErrorCode::NotFound],
        handler: || routing::get(get),
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/patrol/status",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_patrol_status",
        title: "Patrol status",
        description: "Patrol's runtime state, last and next runs, health verdict and readiness checks.",
        category: Category::Patrol,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_domain::patrol::status::PatrolStatus>,
        },
        errors: &[],
        handler: || routing::get(status),
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/patrol/stream",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "stream_patrol_events",
        title: "Patrol run event stream",
        description: "The tenant's Patrol run events as Server-Sent Events, resumable with Last-Event-ID.",
        category: Category::Patrol,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::events::StreamQuery>),
        body: None,
        response: Answer::EventStream {
            events: &crate::patrol_stream::EVENT_NAMES,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::InvalidLastEventId,
            ErrorCode::TooManyStreams,
        ],
        handler: || routing::get(crate::patrol_stream::stream),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_is_bounded() {
        let read = |query: &str| ApiQuery::<RunsQuery>::parse(query).map(|q| q.0.limit);
        assert_eq!(read("").expect("no limit"), None);
        assert_eq!(read("limit=200").expect("valid"), Some(200));
        for bad in ["0", "201", "-1", "ten", ""] {
            let err = read(&format!("limit={bad}")).expect_err(bad);
            assert_eq!(err.code, ErrorCode::InvalidParameter);
            assert_eq!(err.message, "limit: must be an integer from 1 to 200");
        }
    }

    #[test]
    fn body_errors_keep_the_parser_codes() {
        let malformed = RunRequest::parse(b"{").expect_err("malformed");
        assert_eq!(request_error(malformed).code, ErrorCode::InvalidJson);
        let unknown = RunRequest::parse(br#"{"resource_ids":["a"],"command":"x"}"#)
            .expect_err("unknown field");
        let err = request_error(unknown);
        assert_eq!(err.code, ErrorCode::InvalidRequest);
        assert!(err.message.contains("command"), "{}", err.message);
    }

    #[test]
    fn an_empty_object_is_a_full_run_and_an_empty_scope_is_refused() {
        assert_eq!(RunRequest::parse(b"{}").unwrap(), RunRequest::Full);
        assert_eq!(RunRequest::parse(b"").unwrap(), RunRequest::Full);
        let empty_scope = RunRequest::parse(br#"{"resource_ids":[]}"#).expect_err("empty scope");
        let err = request_error(empty_scope);
        assert_eq!(err.code, ErrorCode::InvalidRequest);
        assert!(err.message.contains("resource_ids"), "{}", err.message);
    }

    #[test]
    fn a_body_must_be_declared_json_but_no_body_needs_no_type() {
        let mut headers = HeaderMap::new();
        assert!(check_content_type(&headers, b"").is_ok());
        assert!(check_content_type(&headers, b" \n").is_ok());
        let err = check_content_type(&headers, b"{}").expect_err("undeclared");
        assert_eq!(err.code, ErrorCode::UnsupportedMediaType);
        headers.insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        assert!(check_content_type(&headers, b"{}").is_err());
        headers.insert(
            header::CONTENT_TYPE,
            "application/json; charset=utf-8".parse().unwrap(),
        );
        assert!(check_content_type(&headers, b"{}").is_ok());
    }
}
