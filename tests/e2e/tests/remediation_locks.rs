//! The remediation-lock route against the real gateway and action-broker: operators set and read
//! `never_auto_remediate` per resource (`PUT`/`GET /api/resources/{id}/remediation-lock`); the
//! change is audited with the caller as actor; a token without `actions:approve` cannot set it;
//! another tenant's resource is `404`; and an approved, matching plan on a locked resource is
//! refused at execution with `resource_remediation_locked:`.

use std::time::Duration;

use pulse_api::actions::{DecisionOutcome, PlanBody};
use pulse_domain::action::{ActionState, ApprovalFloor, Severity};
use pulse_domain::ai_settings::AutonomyLevel;
use pulse_domain::{Scope, TenantId};
use pulse_store::{audit, tenants};
use pulse_test_support::action_api::{
    action_view, audit_rows, call, decision, error_code, get, plan_pending, post, restart_plan,
    set_autonomy_level, user_token,
};
use pulse_test_support::action_broker::TestActionBroker;
use pulse_test_support::seed::{seed_service, service_resource};
use pulse_test_support::service::TestGateway;
use pulse_test_support::wait;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

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

/// One agent of `tenant` reporting one service named `name`; returns the service's canonical id.
async fn seed(gw: &TestGateway, tenant: &TenantId, name: &str) -> anyhow::Result<String> {
    seed_service(gw.db.store(), tenant, "lock", service_resource(name)).await
}

/// `PUT <path>` setting `never_auto_remediate` to `locked`.
async fn put_lock(
    gw: &TestGateway,
    path: &str,
    token: &str,
    locked: bool,
) -> anyhow::Result<(StatusCode, Value)> {
    call(
        gw,
        Method::PUT,
        path,
        token,
        Some(json!({"never_auto_remediate": locked})),
    )
    .await
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
    set_autonomy_level(&gw, AutonomyLevel::Approval).await?;

    let web = seed(&gw, &tenant, "web").await?;
    let reader = user_token(store, &tenant, None, &[Scope::MonitoringRead]).await?;
    let globex = TenantId::new("globex")?;
    tenants::create(store, &globex, "Globex").await?;
    let theirs = seed(&gw, &globex, "billing").await?;
    let outsider = user_token(
        store,
        &globex,
        None,
        &[Scope::ActionsApprove, Scope::MonitoringRead],
    )
    .await?;

    // A resource never locked is unlocked.
    let (status, body) = get(&gw, &lock_path(&web), &reader).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"resource_id": web, "never_auto_remediate": false})
    );

    // Setting it needs actions:approve.
    let (status, body) = put_lock(&gw, &lock_path(&web), &reader, true).await?;
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
        let (status, body) = get(&gw, &path, token).await?;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(error_code(&body), "not_found");
        let (status, body) = put_lock(&gw, &path, token, true).await?;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(error_code(&body), "not_found");
    }

    // A plan made while the resource is unlocked waits for a human.
    let plan = PlanBody {
        approval_floor: Some(ApprovalFloor::None),
        ..restart_plan(&web, "web", Severity::Critical)
    };
    let id = plan_pending(&gw, &admin, &plan).await?;

    // The operator locks it; the read says so; the change is audited with the caller as actor.
    let (status, body) = put_lock(&gw, &lock_path(&web), &admin, true).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"resource_id": web, "never_auto_remediate": true})
    );
    let (status, body) = get(&gw, &lock_path(&web), &reader).await?;
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
    let decided = gw
        .client()?
        .decide_action(
            &id,
            &decision(DecisionOutcome::Approved, "checked the logs"),
        )
        .await?;
    assert!(decided.human_approved, "{decided:?}");
    // The approval may start the execution itself (then this request finds it taken or ended);
    // when it is still approved here, executing it is refused by the lock.
    if decided.state == ActionState::Approved {
        let (status, body) = post(&gw, &format!("/api/actions/{id}/execute"), &admin, None).await?;
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
            let action = action_view(&gw, &id, &admin).await?;
            if action.state != ActionState::Failed {
                return None;
            }
            audit_rows(&gw, &id, &admin).await.ok()?.last().cloned()
        },
    )
    .await?;
    assert!(
        last.payload["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("resource_remediation_locked:")),
        "{last:?}"
    );

    // Clearing the lock is audited too; the chain stays intact.
    let (status, body) = put_lock(&gw, &lock_path(&web), &admin, false).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = get(&gw, &lock_path(&web), &reader).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["never_auto_remediate"], false, "{body}");
    let (status, report) = get(&gw, "/api/audit/verify", &admin).await?;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["ok"], true, "{report}");

    broker.stop().await?;
    gw.stop().await
}
