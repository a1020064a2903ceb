//! The client against a small local server that answers as the gateway does: the requests it
//! sends (path, query, token, body) and how it reads answers and error envelopes.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{delete, get, post, put};
use pulse_domain::patrol::run::{RunStatus, RunType};
use pulse_domain::patrol::status::{HealthBasis, RuntimeState};
use serde_json::{Value, json};

use super::*;

const RUN_ID: &str = "0193a1b2-0000-7000-8000-000000000001";

/// What the server saw: `(path and query, authorization, body)`.
type Seen = Arc<Mutex<Vec<(String, String, String)>>>;

fn remember(seen: &Seen, path: String, query: Option<String>, headers: &HeaderMap, body: String) {
    let target = match query {
        Some(query) => format!("{path}?{query}"),
        None => path,
    };
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    seen.lock().unwrap().push((target, auth, body));
}

fn status_answer() -> Value {
    json!({
        "runtime_state": "active", "enabled": true, "running": false,
        "current_run_id": null, "current_run_type": null,
        "last_patrol_at": "2026-11-29T11:00:05Z", "last_activity_at": null,
        "next_patrol_at": null, "interval_ms": 1_800_000, "last_duration_ms": null,
        "resources_checked": 4, "findings_count": 1,
        "active_findings": {"critical": 0, "warning": 1, "watch": 0, "info": 0, "total": 1},
        "error_count": null, "queued_scoped_runs": 0, "healthy": false,
        "health_basis": "active_findings", "blocked_reason": null, "blocked_cause": null,
        "blocked_until": null, "readiness_checks": [],
    })
}

fn accepted_answer(scoped: bool) -> Value {
    json!({
        "status": "queued", "run_id": RUN_ID, "trigger_reason": "manual",
        "type": if scoped { "scoped" } else { "full" },
        "queued_at": "2026-11-29T12:00:00Z",
        "scope_resource_ids": if scoped { json!(["web-1"]) } else { json!([]) },
        "effective_scope_resource_ids": if scoped { json!(["host:web-1"]) } else { json!([]) },
    })
}

fn run_answer() -> Value {
    let id = serde_json::from_value(json!(RUN_ID)).unwrap();
    let queued_at = "2026-11-29T12:00:00Z".parse().unwrap();
    let run = PatrolRun::queued(
        id,
        pulse_domain::patrol::run::TriggerReason::Manual,
        RunType::Full,
        queued_at,
    );
    serde_json::to_value(run).unwrap()
}

fn settings_answer() -> Value {
    json!({
        "version": 2, "updated_at": null, "updated_by": null, "providers": {},
        "model": null, "chat_model": null, "patrol_model": "ollama:llama3.2",
        "auto_fix_model": null, "patrol_model_simulated": false, "patrol_interval_minutes": 30,
        "autonomy_level": "approval", "autopilot_acknowledgement": null,
        "autopilot_acknowledgement_version": 1,
        "alert_triggers": {"enabled": true, "min_severity": "warning", "alert_types": []},
        "budgets": {
            "daily_usd": null, "monthly_usd": null, "daily_tokens": null, "monthly_tokens": null,
        },
        "patrol_enabled": false, "patrol_preflight": null, "preflight_state": "not_run",
    })
}

fn action_answer(state: &str) -> Value {
    json!({
        "action_id": RUN_ID, "resource_id": "service:h1:web", "agent_id": "h1",
        "capability": "service.restart", "params": {"target": "web"},
        "reason": "web stopped answering", "severity": "critical", "approval_floor": "none",
        "requested_by": "user:alice", "planned_at": "2026-11-29T11:00:00Z",
        "expires_at": "2026-11-29T12:00:00Z", "resource_version": "v1",
        "policy_decision": {"outcome": "needs_approval", "reason_codes": []},
        "plan_hash": "5d41402abc4b2a76b9719d911017c592", "state": state, "version": 1,
        "decided_by": null, "decided_by_name": null, "decision_reason": null,
        "human_approved": false, "lease_id": null, "lease_expires_at": null, "result": null,
        "updated_at": "2026-11-29T11:00:01Z", "finding_id": null, "verification": null,
        "verification_reason": null, "verified_at": null,
    })
}

fn audit_answer() -> Value {
    json!([{
        "seq": 7, "occurred_at": "2026-11-29T11:00:00Z", "actor": "user:alice",
        "kind": "action.planned", "subject": RUN_ID, "payload": {"to": "planned"},
        "prev_hash": "00", "row_hash": "01",
    }])
}

async fn serve(seen: Seen) -> String {
    let app = Router::new()
        .route(
            "/base/api/ai/patrol/status",
            get(|State(seen): State<Seen>, headers: HeaderMap| async move {
                remember(&seen, "/api/ai/patrol/status".into(), None, &headers, String::new());
                axum::Json(status_answer())
            }),
        )
        .route(
            "/base/api/ai/patrol/run",
            post(
                |State(seen): State<Seen>, headers: HeaderMap, body: String| async move {
                    let scoped = !body.is_empty();
                    remember(&seen, "/api/ai/patrol/run".into(), None, &headers, body);
                    (StatusCode::ACCEPTED, axum::Json(accepted_answer(scoped)))
                },
            ),
        )
        .route(
            "/base/api/ai/patrol/runs",
            get(
                |State(seen): State<Seen>, RawQuery(query): RawQuery, headers: HeaderMap| async move {
                    remember(&seen, "/api/ai/patrol/runs".into(), query, &headers, String::new());
                    axum::Json(json!({"runs": [run_answer()]}))
                },
            ),
        )
        .route(
            "/base/api/ai/patrol/runs/{id}",
            get(|Path(id): Path<String>| async move {
                match id.as_str() {
                    RUN_ID => axum::Json(run_answer()).into_response(),
                    "proxy" => (StatusCode::BAD_GATEWAY, "<html>bad gateway</html>").into_response(),
                    "renamed" => axum::Json(json!({"identifier": RUN_ID})).into_response(),
                    _ => (
                        StatusCode::BAD_REQUEST,
                        axum::Json(json!({
                            "error": "invalid_parameter",
                            "message": "invalid run id \"nope\" (expected a UUID)",
                        })),
                    )
                        .into_response(),
                }
            }),
        )
        .route(
            "/base/api/ai/patrol/findings",
            get(
                |State(seen): State<Seen>, RawQuery(query): RawQuery, headers: HeaderMap| async move {
                    remember(&seen, "/api/ai/patrol/findings".into(), query, &headers, String::new());
                    axum::Json(json!({
                        "findings": [], "count": 0, "limit": 20, "include_resolved": true,
                    }))
                },
            ),
        )
        .route(
            "/base/api/tokens",
            post(
                |State(seen): State<Seen>, headers: HeaderMap, body: String| async move {
                    remember(&seen, "/api/tokens".into(), None, &headers, body);
                    (
                        StatusCode::CREATED,
                        axum::Json(json!({
                            "id": RUN_ID, "name": "ci", "scopes": ["agent:report"],
                            "token": "pulse_new_secret", "created_at": "2026-11-29T12:00:00Z",
                            "expires_at": null,
                        })),
                    )
                },
            ),
        )
        .route(
            "/base/api/settings/ai",
            put(
                |State(seen): State<Seen>, headers: HeaderMap, body: String| async move {
                    remember(&seen, "/api/settings/ai".into(), None, &headers, body);
                    axum::Json(settings_answer())
                },
            ),
        )
        .route(
            "/base/api/actions/plan",
            post(
                |State(seen): State<Seen>, headers: HeaderMap, body: String| async move {
                    remember(&seen, "/api/actions/plan".into(), None, &headers, body);
                    (
                        StatusCode::CREATED,
                        axum::Json(action_answer("pending_approval")),
                    )
                },
            ),
        )
        .route(
            "/base/api/actions/{id}/audit",
            get(
                |State(seen): State<Seen>, Path(id): Path<String>, headers: HeaderMap| async move {
                    remember(&seen, format!("/api/actions/{id}/audit"), None, &headers, String::new());
                    axum::Json(audit_answer())
                },
            ),
        )
        .route(
            "/base/api/tokens/{id}",
            delete(
                |State(seen): State<Seen>, Path(id): Path<String>, headers: HeaderMap| async move {
                    remember(&seen, format!("/api/tokens/{id}"), None, &headers, String::new());
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .with_state(seen);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/base/")
}

#[tokio::test]
async fn answers_are_read_as_the_api_types_and_the_token_is_sent() {
    let seen = Seen::default();
    let client = Client::new(&serve(seen.clone()).await, "pulse_secret").unwrap();

    let status = client.patrol_status().await.unwrap();
    assert_eq!(status.runtime_state, RuntimeState::Active);
    assert_eq!(status.health_basis, HealthBasis::ActiveFindings);
    assert_eq!(status.active_findings.warning, 1);

    let runs = client.patrol_runs(Some(5)).await.unwrap();
    assert_eq!(runs.runs.len(), 1);
    assert_eq!(runs.runs[0].id.to_string(), RUN_ID);
    client.patrol_runs(None).await.unwrap();

    let run = client.patrol_run(RUN_ID).await.unwrap();
    assert_eq!(run.status, RunStatus::Queued);
    let again = client.patrol_run_by_id(run.id).await.unwrap();
    assert_eq!(again, run);

    let seen = seen.lock().unwrap();
    let targets: Vec<&str> = seen.iter().map(|(t, _, _)| t.as_str()).collect();
    assert_eq!(
        targets,
        [
            "/api/ai/patrol/status",
            "/api/ai/patrol/runs?limit=5",
            "/api/ai/patrol/runs"
        ]
    );
    assert!(
        seen.iter()
            .all(|(_, auth, _)| auth == "Bearer pulse_secret")
    );
}

#[tokio::test]
async fn a_full_run_sends_no_body_and_a_scoped_run_only_what_it_names() {
    let seen = Seen::default();
    let client = Client::new(&serve(seen.clone()).await, "t").unwrap();

    let full = client.run_patrol(&RawRunRequest::default()).await.unwrap();
    assert_eq!(full.status, RunStatus::Queued);
    assert_eq!(full.accepted.run_type, RunType::Full);

    let scoped = RawRunRequest {
        resource_ids: Some(vec!["web-1".into()]),
        context: Some("after the deploy".into()),
        ..RawRunRequest::default()
    };
    let accepted = client.run_patrol(&scoped).await.unwrap();
    assert_eq!(accepted.accepted.run_type, RunType::Scoped);
    assert_eq!(
        accepted.accepted.effective_scope_resource_ids,
        ["host:web-1"]
    );

    let seen = seen.lock().unwrap();
    let bodies: Vec<&str> = seen.iter().map(|(_, _, b)| b.as_str()).collect();
    assert_eq!(
        bodies,
        [
            "",
            r#"{"resource_ids":["web-1"],"context":"after the deploy"}"#
        ]
    );
}

#[tokio::test]
async fn queries_and_bodies_are_sent_as_their_types_write_them() {
    use pulse_api::findings::ListQuery;
    use pulse_api::tokens::{CreateTokenRequest, RequestedScope};
    use pulse_domain::Scope;

    let seen = Seen::default();
    let client = Client::new(&serve(seen.clone()).await, "t").unwrap();

    let everything = ListQuery {
        include_resolved: true,
        limit: Some(20),
        ..ListQuery::default()
    };
    let list = client.findings(&everything).await.unwrap();
    assert!(list.include_resolved && list.findings.is_empty());
    client.findings(&ListQuery::default()).await.unwrap();

    let request = CreateTokenRequest {
        name: "ci".into(),
        scopes: vec![RequestedScope::Tenant(Scope::AgentReport)],
        expires_at: None,
    };
    let created = client.create_token(&request).await.unwrap();
    assert_eq!(created.token, "pulse_new_secret");
    assert_eq!(created.scopes, [Scope::AgentReport].into());
    // An answer without a body is fine where none is documented.
    client.revoke_token("a b").await.unwrap();

    let seen = seen.lock().unwrap();
    let sent: Vec<(&str, &str)> = seen
        .iter()
        .map(|(target, _, body)| (target.as_str(), body.as_str()))
        .collect();
    assert_eq!(
        sent,
        [
            ("/api/ai/patrol/findings?include_resolved=true&limit=20", ""),
            ("/api/ai/patrol/findings", ""),
            (
                "/api/tokens",
                r#"{"name":"ci","scopes":["agent:report"],"expires_at":null}"#
            ),
            ("/api/tokens/a b", ""),
        ]
    );
}

#[tokio::test]
async fn settings_patches_and_plans_are_sent_as_their_types_write_them() {
    use pulse_api::actions::PlanBody;
    use pulse_domain::action::{ActionState, ApprovalFloor, Severity};
    use pulse_domain::ai_settings::{AutonomyLevel, PatchBody};

    let seen = Seen::default();
    let client = Client::new(&serve(seen.clone()).await, "t").unwrap();

    // Only the fields a patch sets are sent; `Some(None)` resets one.
    let patch = PatchBody {
        autonomy_level: Some(Some(AutonomyLevel::Approval)),
        patrol_enabled: Some(Some(false)),
        chat_model: Some(None),
        ..PatchBody::default()
    };
    let saved = client.patch_ai_settings(&patch).await.unwrap();
    assert_eq!(saved.autonomy_level, AutonomyLevel::Approval);
    assert!(!saved.patrol_enabled);

    let plan = PlanBody {
        resource_id: "service:h1:web".into(),
        capability: "service.restart".into(),
        params: json!({"target": "web"}),
        reason: "web stopped answering".into(),
        severity: Severity::Critical,
        approval_floor: Some(ApprovalFloor::None),
        finding_id: None,
    };
    let planned = client.plan_action(&plan).await.unwrap();
    assert_eq!(planned.state, ActionState::PendingApproval);
    assert_eq!(planned.plan.action_id.to_string(), RUN_ID);

    let trail = client.action_audit(RUN_ID).await.unwrap();
    assert_eq!(trail.len(), 1);
    assert_eq!(trail[0].kind, "action.planned");

    let seen = seen.lock().unwrap();
    let sent: Vec<(&str, &str)> = seen
        .iter()
        .map(|(target, _, body)| (target.as_str(), body.as_str()))
        .collect();
    let audit = format!("/api/actions/{RUN_ID}/audit");
    assert_eq!(
        sent,
        [
            (
                "/api/settings/ai",
                r#"{"chat_model":null,"autonomy_level":"approval","patrol_enabled":false}"#
            ),
            (
                "/api/actions/plan",
                concat!(
                    r#"{"resource_id":"service:h1:web","capability":"service.restart","#,
                    r#""params":{"target":"web"},"reason":"web stopped answering","#,
                    r#""severity":"critical","approval_floor":"none","finding_id":null}"#
                )
            ),
            (audit.as_str(), ""),
        ]
    );
}

#[tokio::test]
async fn errors_carry_the_stable_code_or_the_status() {
    let client = Client::new(&serve(Seen::default()).await, "t").unwrap();

    let err = client.patrol_run("nope").await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Api { status: 400, code: ErrorCode::InvalidParameter, message }
                if message.contains("expected a UUID")
        ),
        "{err:?}"
    );
    assert_eq!(err.status(), Some(400));
    assert_eq!(err.code(), Some(ErrorCode::InvalidParameter));

    let err = client.patrol_run("proxy").await.unwrap_err();
    assert!(
        matches!(&err, Error::Status { status: 502, body } if body == "<html>bad gateway</html>"),
        "{err:?}"
    );
    assert_eq!(err.code(), None);

    // A success answer of another shape is refused, not half-read.
    let err = client.patrol_run("renamed").await.unwrap_err();
    assert!(matches!(err, Error::Decode { .. }), "{err:?}");
}

#[tokio::test]
async fn a_closed_port_is_connection_refused() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = Client::new(&format!("http://127.0.0.1:{port}/"), "t").unwrap();
    let err = client.patrol_status().await.unwrap_err();
    assert!(
        matches!(&err, Error::ConnectionRefused { url } if *url == format!("http://127.0.0.1:{port}")),
        "{err:?}"
    );
    assert_eq!(err.status(), None);
}

#[test]
fn urls_are_joined_and_encoded_and_bad_bases_refused() {
    let client = Client::new("http://127.0.0.1:7655/", "t").unwrap();
    assert_eq!(
        client.url(&["api", "tokens", "a b/c"]).as_str(),
        "http://127.0.0.1:7655/api/tokens/a%20b%2Fc"
    );
    let prefixed = Client::new("https://pulse.example/base", "t").unwrap();
    assert_eq!(
        prefixed.url(&["api", "tokens"]).as_str(),
        "https://pulse.example/base/api/tokens"
    );
    for bad in ["127.0.0.1:7655", "ftp://pulse.example", "not a url"] {
        assert!(
            matches!(Client::new(bad, "t"), Err(Error::BaseUrl(_))),
            "{bad}"
        );
    }
}

/// The published manifest, read as `Manifest` and written again, is the same document: the
/// typed read loses nothing an adapter that dispatches from the manifest relies on.
#[test]
fn the_published_manifest_reads_as_the_manifest_type_without_loss() {
    let published: Value =
        serde_json::from_str(include_str!("../../../docs/api/capabilities.json")).unwrap();
    let manifest: pulse_api::system::Manifest = serde_json::from_value(published.clone()).unwrap();
    assert!(!manifest.capabilities.is_empty());
    assert_eq!(serde_json::to_value(&manifest).unwrap(), published);
}

#[tokio::test]
async fn the_manifest_is_fetched_without_a_token() {
    let published = include_str!("../../../docs/api/capabilities.json");
    let app = Router::new().route(
        "/api/agent/capabilities",
        get(move |headers: HeaderMap| async move {
            assert!(headers.get("authorization").is_none());
            ([("content-type", "application/json")], published)
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client =
        Client::with_http(&format!("http://{addr}"), None, reqwest::Client::new()).unwrap();
    let manifest = client.capabilities().await.unwrap();
    assert!(
        manifest
            .capabilities
            .iter()
            .any(|c| c.path == "/api/ai/patrol/status")
    );
}
