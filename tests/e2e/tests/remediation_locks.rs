//! The remediation-lock route against the real gateway and action-broker: operators set and read
//! `never_auto_remediate` per resource (`PUT`/`GET /api/resources/{id}/remediation-lock`); the
//! change is audited with the caller as actor; a token without `actions:approve` cannot set it;
//! another tenant's resource is `404`; and an approved, matching plan on a locked resource is
//! refused at execution with `resource_remediation_locked:`.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;
use pulse_domain::resource::{Health, ObservedResource, ResourceStatus, ResourceType};
use pulse_domain::{Scope, TenantId};
use pulse_store::agents::{self, AgentSession};
use pulse_store::tokens::{self, NewToken};
use pulse_store::{Store, audit, resources, tenants};
use pulse_test_support::action_broker::TestActionBroker;
use pulse_test_support::service::TestGateway;
use pulse_test_support::wait;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

async fn call(
    gw: &TestGateway,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> anyhow::Result<(StatusCode, Value)> {
    let mut request = gw
        .http
        .request(method, gw.url(path))
        .timeout(Duration::from_secs(100))
        .bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await?;
    let status = response.status();
    let text = response.text().await?;
    Ok((
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

/// `PUT .../remediation-lock` with a raw body.
async fn put_raw(
    gw: &TestGateway,
    path: &str,
    token: &str,
    body: &'static str,
) -> anyhow::Result<(StatusCode, Value)> {
    let response = gw
        .http
        .put(gw.url(path))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?;
    let status = response.status();
    Ok((status, response.json().await?))
}

fn error_code(body: &Value) -> &str {
    body["error"].as_str().unwrap_or_default()
}

/// One agent of `tenant` reporting one service named `name`; returns the service's canonical id.
async fn seed_service(store: &Store, tenant: &TenantId, name: &str) -> anyhow::Result<String> {
    let host = pulse_test_support::agent::host_id("lock");
    let tx = store.tenant_tx(tenant).await?;
    agents::connect(
        &tx,
        &AgentSession {
            id: host.clone(),
            hostname: host.clone(),
            agent_version: "test".to_owned(),
            report_interval_ms: 1000,
            token_id: None,
        },
    )
    .await?;
    let service = ObservedResource {
        resource_type: ResourceType::Service,
        source_id: name.to_owned(),
        name: name.to_owned(),
        aliases: Vec::new(),
        status: ResourceStatus::Running,
        health: Health::Healthy,
        restart_count: Some(0),
        labels: BTreeMap::new(),
        details: Value::Null,
        metrics: BTreeMap::new(),
    };
    resources::apply_report(&tx, &host, Utc::now(), &[service]).await?;
    tx.commit().await?;
    Ok(pulse_domain::resource::ResourceId::service(&host, name).to_string())
}

/// A token of `tenant` with `scopes`, belonging to no user, issued through the store.
async fn token(store: &Store, tenant: &TenantId, scopes: &[Scope]) -> anyhow::Result<String> {
    let tx = store.tenant_tx(tenant).await?;
    let issued = tokens::issue(
        &tx,
        NewToken {
            name: format!("lock-{}", uuid::Uuid::now_v7().simple()),
            scopes: scopes.iter().copied().collect(),
            expires_at: None,
            created_by: None,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(issued.secret.expose().to_owned())
}

fn lock_path(resource_id: &str) -> String {
    format!("/api/resources/{resource_id}/remediation-lock")
}

#[tokio::test]
async fn operators_lock_a_resource_and_an_approved_plan_is_refused() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gw = TestGateway::start().await?;
    let store = gw.db.store();
    let tenant = TenantId::default_tenant();
    let broker = TestActionBroker::start(&gw, &gw.state_dir.join("broker"), &[]).await?;
    let admin = gw.admin_token.clone();
    let (status, body) = call(
        &gw,
        Method::PUT,
        "/api/settings/ai",
        &admin,
        Some(json!({"autonomy_level": "approval"})),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{body}");

    let web = seed_service(store, &tenant, "web").await?;
    let reader = token(store, &tenant, &[Scope::MonitoringRead]).await?;
    let globex = TenantId::new("globex")?;
    tenants::create(store, &globex, "Globex").await?;
    let theirs = seed_service(store, &globex, "billing").await?;
    let outsider = token(
        store,
        &globex,
        &[Scope::ActionsApprove, Scope::MonitoringRead],
    )
    .await?;

    // A resource never locked is unlocked.
    let (status, body) = call(&gw, Method::GET, &lock_path(&web), &reader, None).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"resource_id": web, "never_auto_remediate": false})
    );

    // Setting it needs actions:approve.
    let (status, body) = call(
        &gw,
        Method::PUT,
        &lock_path(&web),
        &reader,
        Some(json!({"never_auto_remediate": true})),
    )
    .await?;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(error_code(&body), "missing_scope");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("actions:approve")),
        "{body}"
    );

    // Bad bodies get stable codes and name the problem.
    for (raw, code, mentions) in [
        ("{}", "invalid_request", "never_auto_remediate"),
        (
            r#"{"never_auto_remediate": "yes"}"#,
            "invalid_request",
            "never_auto_remediate",
        ),
        (
            r#"{"never_auto_remediate": true, "set_by": "user:x"}"#,
            "invalid_request",
            "set_by",
        ),
        (r#"{"never_auto_remediate": "#, "invalid_json", ""),
    ] {
        let (status, body) = put_raw(&gw, &lock_path(&web), &admin, raw).await?;
        assert!(status.is_client_error(), "{raw}: {status} {body}");
        assert_eq!(error_code(&body), code, "{raw}: {body}");
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains(mentions)),
            "{raw}: {body}"
        );
    }

    // Another tenant's resource (and an unknown one) is not found, for reads and writes.
    for (path, token) in [
        (lock_path(&theirs), &admin),
        (lock_path(&web), &outsider),
        (lock_path("service:nowhere:web"), &admin),
    ] {
        let (status, body) = call(&gw, Method::GET, &path, token, None).await?;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(error_code(&body), "not_found");
        let (status, body) = call(
            &gw,
            Method::PUT,
            &path,
            token,
            Some(json!({"never_auto_remediate": true})),
        )
        .await?;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(error_code(&body), "not_found");
    }

    // A plan made while the resource is unlocked waits for a human.
    let (status, planned) = call(
        &gw,
        Method::POST,
        "/api/actions/plan",
        &admin,
        Some(json!({
            "resource_id": web,
            "capability": "service.restart",
            "params": {"target": "web"},
            "reason": "web stopped answering health checks",
            "severity": "critical",
            "approval_floor": "none",
        })),
    )
    .await?;
    assert_eq!(status, StatusCode::CREATED, "{planned}");
    assert_eq!(planned["state"], "pending_approval", "{planned}");
    let id = planned["action_id"].as_str().unwrap_or_default().to_owned();

    // The operator locks it; the read says so; the change is audited with the caller as actor.
    let (status, body) = call(
        &gw,
        Method::PUT,
        &lock_path(&web),
        &admin,
        Some(json!({"never_auto_remediate": true})),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"resource_id": web, "never_auto_remediate": true})
    );
    let (status, body) = call(&gw, Method::GET, &lock_path(&web), &reader, None).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["never_auto_remediate"], true, "{body}");
    let tx = store.tenant_tx(&tenant).await?;
    let rows = audit::list(&tx, 0, 10_000).await?;
    tx.rollback().await?;
    let locked = rows
        .iter()
        .filter(|r| r.kind == "resource.remediation_lock" && r.subject == web)
        .collect::<Vec<_>>();
    assert_eq!(locked.len(), 1, "{rows:?}");
    assert_eq!(locked[0].payload, json!({"never_auto_remediate": true}));
    assert!(locked[0].actor.starts_with("user:"), "{:?}", locked[0]);

    // The plan is approved; executing it is refused by the lock and fails the action.
    let (status, decided) = call(
        &gw,
        Method::POST,
        &format!("/api/actions/{id}/decision"),
        &admin,
        Some(json!({"outcome": "approved", "reason": "checked the logs"})),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{decided}");
    assert_eq!(decided["human_approved"], true, "{decided}");
    // The approval may start the execution itself (then this request finds it taken or ended);
    // when it is still approved here, executing it is refused by the lock.
    if decided["state"] == "approved" {
        let (status, body) = call(
            &gw,
            Method::POST,
            &format!("/api/actions/{id}/execute"),
            &admin,
            None,
        )
        .await?;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        let code = error_code(&body);
        if code == "resource_remediation_locked" {
            assert!(
                body["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("resource_remediation_locked:")),
                "{body}"
            );
        } else {
            assert!(
                ["action_already_executing", "action_execution_final"].contains(&code),
                "{body}"
            );
        }
    }
    // Whether the execution was requested here or started by the approval, it ends failed with
    // the lock as its reason.
    let last = wait::until(
        Duration::from_secs(30),
        "the locked action to be refused",
        || async {
            let (_, action) = call(
                &gw,
                Method::GET,
                &format!("/api/actions/{id}"),
                &admin,
                None,
            )
            .await
            .ok()?;
            if action["state"] != "failed" {
                return None;
            }
            let (_, rows) = call(
                &gw,
                Method::GET,
                &format!("/api/actions/{id}/audit"),
                &admin,
                None,
            )
            .await
            .ok()?;
            rows.as_array().and_then(|r| r.last().cloned())
        },
    )
    .await?;
    assert!(
        last["payload"]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("resource_remediation_locked:")),
        "{last}"
    );

    // Clearing the lock is audited too; the chain stays intact.
    let (status, body) = call(
        &gw,
        Method::PUT,
        &lock_path(&web),
        &admin,
        Some(json!({"never_auto_remediate": false})),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = call(&gw, Method::GET, &lock_path(&web), &reader, None).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["never_auto_remediate"], false, "{body}");
    let (status, report) = call(&gw, Method::GET, "/api/audit/verify", &admin, None).await?;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["ok"], true, "{report}");

    broker.stop().await?;
    gw.stop().await
}
