//! Operator state per resource through the real gateway binary
//! (`GET|PUT|DELETE /api/resources/{id}/operator-state`), with findings reported in its database
//! as Patrol reports them (`pulse_store::findings::report`, the one owner of finding
//! transitions):
//!
//! - round trip, scopes, validation (window ending before it starts or in the past, unknown
//!   fields, bad ids), another tenant's resource `404`, changes audited;
//! - setting a maintenance window on a failing resource dismisses its active finding
//!   (`expected_behavior`, `operator_state_cause: maintenance_window`, `maintenance_end_at`),
//!   and a new finding inside the window is recorded but dismissed the same way;
//! - once the window ended, a re-detection wakes the finding with `suppression_lifted`, while a
//!   finding the operator dismissed by hand after the automatic dismissal stays dismissed;
//! - intentionally offline dismisses without an end; DELETE clears every signal;
//! - `never_auto_remediate` set here is the remediation lock: the alias route reads it and the
//!   action broker refuses an approved plan on the resource (`resource_remediation_locked:`).

use std::time::Duration;

use chrono::Utc;
use pulse_api::actions::{DecisionOutcome, PlanBody};
use pulse_domain::action::{self, ActionState, ApprovalFloor};
use pulse_domain::ai_settings::AutonomyLevel;
use pulse_domain::finding::{Category, ReportedFinding, Severity};
use pulse_domain::{Scope, TenantId};
use pulse_store::{audit, findings, tenants};
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

fn state_path(resource_id: &str) -> String {
    format!("/api/resources/{resource_id}/operator-state")
}

fn reported(resource_id: &str, key: &str) -> ReportedFinding {
    ReportedFinding {
        key: key.to_owned(),
        severity: Severity::Warning,
        category: Category::Reliability,
        resource_id: resource_id.to_owned(),
        resource_name: "web".to_owned(),
        resource_type: "service".to_owned(),
        title: format!("{key} on web"),
        description: format!("{key} observed on web"),
        recommendation: "look at the service".to_owned(),
        evidence: "restarts=4 over 10m".to_owned(),
        impact: String::new(),
    }
}

/// Reports `key` on `resource_id` as Patrol would, now; the finding id.
async fn report(gw: &TestGateway, resource_id: &str, key: &str) -> anyhow::Result<String> {
    let tx = gw.db.store().tenant_tx(&TenantId::default_tenant()).await?;
    let outcome = findings::report(&tx, &reported(resource_id, key), None, Utc::now()).await?;
    tx.commit().await?;
    Ok(outcome.finding.finding.id.as_hex())
}

async fn finding(gw: &TestGateway, token: &str, id: &str) -> anyhow::Result<Value> {
    let (status, body) = get(gw, &format!("/api/ai/patrol/findings/{id}"), token).await?;
    anyhow::ensure!(status == StatusCode::OK, "get {id}: {status} {body}");
    Ok(body["finding"].clone())
}

/// The newest lifecycle event of `finding`.
fn last_event(finding: &Value) -> Value {
    finding["lifecycle"]
        .as_array()
        .and_then(|events| events.last().cloned())
        .unwrap_or(Value::Null)
}

async fn put_raw(
    gw: &TestGateway,
    path: &str,
    token: &str,
    body: &str,
) -> anyhow::Result<(StatusCode, Value)> {
    let response = gw
        .http
        .put(gw.url(path))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await?;
    let status = response.status();
    Ok((status, response.json().await?))
}

#[tokio::test]
async fn operator_state_round_trips_and_silences_findings_until_it_lifts() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gw = TestGateway::start().await?;
    let store = gw.db.store();
    let tenant = TenantId::default_tenant();
    let web = seed_service(store, &tenant, "opstate", service_resource("web")).await?;
    let reader = user_token(store, &tenant, None, &[Scope::MonitoringRead]).await?;
    let ops = user_token(
        store,
        &tenant,
        Some("olivia"),
        &[
            Scope::ActionsApprove,
            Scope::MonitoringRead,
            Scope::AiExecute,
        ],
    )
    .await?;
    let globex = TenantId::new("globex")?;
    tenants::create(store, &globex, "Globex").await?;
    let theirs = seed_service(store, &globex, "opstate-g", service_resource("billing")).await?;
    let outsider = user_token(
        store,
        &globex,
        None,
        &[Scope::ActionsApprove, Scope::MonitoringRead],
    )
    .await?;

    // Never set: every signal unset.
    let (status, body) = get(&gw, &state_path(&web), &reader).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["resource_id"], web.as_str());
    assert_eq!(body["maintenance_window"], Value::Null);
    assert_eq!(body["intentionally_offline"], false);
    assert_eq!(body["never_auto_remediate"], false);
    assert_eq!(body["suppression_cause"], Value::Null);
    assert_eq!(body["set_by"], Value::Null);

    // Writing needs actions:approve.
    let quiet = json!({"intentionally_offline": false, "never_auto_remediate": false});
    let (status, body) = call(&gw, Method::PUT, &state_path(&web), &reader, Some(quiet)).await?;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(error_code(&body), "missing_scope");
    let (status, body) = call(&gw, Method::DELETE, &state_path(&web), &reader, None).await?;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");

    // Bad bodies get stable codes naming the problem.
    let soon = Utc::now() + chrono::Duration::hours(1);
    let later = soon + chrono::Duration::hours(1);
    let ends_before_start = format!(
        r#"{{"maintenance_window": {{"starts_at": "{later}", "ends_at": "{soon}"}},
            "intentionally_offline": false, "never_auto_remediate": false}}"#,
        later = later.to_rfc3339(),
        soon = soon.to_rfc3339()
    );
    let in_the_past = format!(
        r#"{{"maintenance_window": {{"ends_at": "{}"}},
            "intentionally_offline": false, "never_auto_remediate": false}}"#,
        (Utc::now() - chrono::Duration::minutes(1)).to_rfc3339()
    );
    for (raw, code, mentions) in [
        (ends_before_start.as_str(), "invalid_request", "ends_at"),
        (in_the_past.as_str(), "invalid_request", "ends_at"),
        (
            r#"{"intentionally_offline": false}"#,
            "invalid_request",
            "never_auto_remediate",
        ),
        (
            r#"{"intentionally_offline": false, "never_auto_remediate": false, "set_by": "x"}"#,
            "invalid_request",
            "set_by",
        ),
        (
            r#"{"intentionally_offline": false, "never_auto_remediate": false,
                "maintenanceWindow": {"endsAt": "2030-01-01T00:00:00Z"}}"#,
            "invalid_request",
            "maintenanceWindow",
        ),
        (
            r#"{"intentionally_offline": false, "never_auto_remediate": false,
                "criticality": "urgent"}"#,
            "invalid_request",
            "criticality",
        ),
        (r#"{"intentionally_offline": "#, "invalid_json", ""),
    ] {
        let (status, body) = put_raw(&gw, &state_path(&web), &ops, raw).await?;
        let expected = if code == "invalid_json" { 400 } else { 422 };
        assert_eq!(status.as_u16(), expected, "{raw}: {body}");
        assert_eq!(error_code(&body), code, "{raw}: {body}");
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains(mentions)),
            "{raw}: {body}"
        );
    }
    // A reference no resource can have.
    let long = "x".repeat(1025);
    for bad in [long.as_str(), "a%07b"] {
        let (status, body) = get(&gw, &state_path(bad), &reader).await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(error_code(&body), "invalid_parameter", "{body}");
    }

    // Another tenant's resource (and an unknown one) is not found, for every method.
    for (path, token) in [
        (state_path(&theirs), &ops),
        (state_path(&web), &outsider),
        (state_path("service:nowhere:web"), &ops),
    ] {
        let (status, body) = get(&gw, &path, token).await?;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(error_code(&body), "not_found");
        let (status, body) = call(
            &gw,
            Method::PUT,
            &path,
            token,
            Some(json!({"intentionally_offline": true, "never_auto_remediate": true})),
        )
        .await?;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        let (status, _) = call(&gw, Method::DELETE, &path, token, None).await?;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }

    // The resource is failing: an active finding.
    let restarts = report(&gw, &web, "restart-loop").await?;
    assert_eq!(finding(&gw, &ops, &restarts).await?["status"], "active");

    // The operator puts it in maintenance (by name, as every resource route accepts): the
    // active finding is dismissed in the same change and the answer names it.
    let ends_at = Utc::now() + chrono::Duration::seconds(20);
    let (status, set) = call(
        &gw,
        Method::PUT,
        &state_path("web"),
        &ops,
        Some(json!({
            "maintenance_window": {"ends_at": ends_at.to_rfc3339()},
            "intentionally_offline": false,
            "never_auto_remediate": false,
            "criticality": "high",
            "note": "kernel upgrade, back by noon"
        })),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{set}");
    assert_eq!(set["resource_id"], web.as_str(), "{set}");
    assert_eq!(set["maintenance_active"], true, "{set}");
    assert_eq!(set["suppression_cause"], "maintenance_window", "{set}");
    assert_eq!(set["criticality"], "high", "{set}");
    assert_eq!(set["dismissed_finding_ids"], json!([restarts]), "{set}");
    assert!(
        set["set_by"]
            .as_str()
            .is_some_and(|a| a.starts_with("user:")),
        "{set}"
    );
    let (status, read) = get(&gw, &state_path(&web), &reader).await?;
    assert_eq!(status, StatusCode::OK, "{read}");
    assert_eq!(read["note"], "kernel upgrade, back by noon", "{read}");
    assert_eq!(
        read["maintenance_window"], set["maintenance_window"],
        "{read}"
    );
    let held = finding(&gw, &ops, &restarts).await?;
    assert_eq!(held["status"], "dismissed", "{held}");
    assert_eq!(held["dismissed_reason"], "expected_behavior", "{held}");
    let event = last_event(&held);
    assert_eq!(event["type"], "dismissed", "{held}");
    assert_eq!(
        event["metadata"]["operator_state_cause"], "maintenance_window",
        "{held}"
    );
    let end = event["metadata"]["maintenance_end_at"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .expect("maintenance_end_at is RFC 3339");
    assert_eq!(end.timestamp(), ends_at.timestamp(), "{held}");

    // A new finding inside the window is recorded, and dismissed the same way.
    let disk = report(&gw, &web, "disk-errors").await?;
    let new_one = finding(&gw, &ops, &disk).await?;
    assert_eq!(new_one["status"], "dismissed", "{new_one}");
    assert_eq!(new_one["dismissed_reason"], "expected_behavior");
    let types: Vec<&str> = new_one["lifecycle"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(types, ["detected", "dismissed"], "{new_one}");
    // Neither shows among the active findings.
    let (_, active) = get(&gw, "/api/ai/patrol/findings", &ops).await?;
    assert_eq!(
        active["findings"].as_array().map(Vec::len),
        Some(0),
        "{active}"
    );

    // The operator takes over the second one: undo, then dismiss it by hand.
    for (route, body) in [
        ("dismiss/undo", json!({"finding_id": disk})),
        (
            "dismiss",
            json!({"finding_id": disk, "reason": "not_an_issue", "note": "known bad sector"}),
        ),
    ] {
        let (status, answer) =
            post(&gw, &format!("/api/ai/patrol/{route}"), &ops, Some(body)).await?;
        assert_eq!(status, StatusCode::OK, "{route}: {answer}");
    }

    // The window ends.
    wait::until(
        Duration::from_secs(60),
        "the maintenance window to end",
        || async {
            let (_, body) = get(&gw, &state_path(&web), &reader).await.ok()?;
            (body["maintenance_active"] == false && body["suppression_cause"].is_null())
                .then_some(())
        },
    )
    .await?;

    // Re-detected after it: the automatically dismissed finding wakes, the hand-dismissed one
    // does not.
    report(&gw, &web, "restart-loop").await?;
    report(&gw, &web, "disk-errors").await?;
    let woken = finding(&gw, &ops, &restarts).await?;
    assert_eq!(woken["status"], "active", "{woken}");
    let event = last_event(&woken);
    assert_eq!(event["type"], "suppression_lifted", "{woken}");
    assert_eq!(
        event["metadata"]["operator_state_cause"], "maintenance_window",
        "{woken}"
    );
    let manual = finding(&gw, &ops, &disk).await?;
    assert_eq!(manual["status"], "dismissed", "{manual}");
    assert_eq!(manual["dismissed_reason"], "not_an_issue", "{manual}");

    // Intentionally offline: dismissed with no scheduled end.
    let (status, set) = call(
        &gw,
        Method::PUT,
        &state_path(&web),
        &ops,
        Some(json!({"intentionally_offline": true, "never_auto_remediate": false})),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{set}");
    assert_eq!(set["suppression_cause"], "intentionally_offline", "{set}");
    assert_eq!(set["dismissed_finding_ids"], json!([restarts]), "{set}");
    assert_eq!(set["maintenance_window"], Value::Null, "{set}");
    let offline = last_event(&finding(&gw, &ops, &restarts).await?);
    assert_eq!(
        offline["metadata"]["operator_state_cause"], "intentionally_offline",
        "{offline}"
    );
    assert!(
        offline["metadata"].get("maintenance_end_at").is_none(),
        "{offline}"
    );

    // DELETE clears everything; the next re-detection wakes the finding.
    let (status, cleared) = call(&gw, Method::DELETE, &state_path(&web), &ops, None).await?;
    assert_eq!(status, StatusCode::OK, "{cleared}");
    assert_eq!(cleared["intentionally_offline"], false, "{cleared}");
    let (_, read) = get(&gw, &state_path(&web), &reader).await?;
    assert_eq!(read["set_by"], Value::Null, "{read}");
    report(&gw, &web, "restart-loop").await?;
    assert_eq!(finding(&gw, &ops, &restarts).await?["status"], "active");

    // Every change is audited with the caller as actor; the chain holds.
    let tx = store.tenant_tx(&tenant).await?;
    let rows = audit::list(&tx, 0, 10_000).await?;
    tx.rollback().await?;
    let kinds: Vec<&str> = rows
        .iter()
        .filter(|r| r.subject == web)
        .map(|r| r.kind.as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "resource.operator_state",
            "resource.operator_state",
            "resource.operator_state_cleared"
        ],
        "{rows:?}"
    );
    let (status, verified) = get(&gw, "/api/audit/verify", &gw.admin_token).await?;
    assert_eq!(status, StatusCode::OK, "{verified}");
    assert_eq!(verified["ok"], true, "{verified}");
    gw.stop().await
}

#[tokio::test]
async fn never_auto_remediate_is_the_lock_the_broker_refuses_on() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gw = TestGateway::start().await?;
    let store = gw.db.store();
    let tenant = TenantId::default_tenant();
    let broker = TestActionBroker::start(&gw, &gw.state_dir.join("broker"), &[]).await?;
    let admin = gw.admin_token.clone();
    set_autonomy_level(&gw, AutonomyLevel::Approval).await?;
    let web = seed_service(store, &tenant, "opstate-lock", service_resource("web")).await?;
    let lock_path = format!("/api/resources/{web}/remediation-lock");

    let plan = PlanBody {
        approval_floor: Some(ApprovalFloor::None),
        ..restart_plan(&web, "web", action::Severity::Critical)
    };
    let id = plan_pending(&gw, &admin, &plan).await?;

    // Set through operator state; the remediation-lock route reads the same fact.
    let (status, set) = call(
        &gw,
        Method::PUT,
        &state_path(&web),
        &admin,
        Some(json!({"intentionally_offline": false, "never_auto_remediate": true})),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{set}");
    let (status, lock) = get(&gw, &lock_path, &admin).await?;
    assert_eq!(status, StatusCode::OK, "{lock}");
    assert_eq!(
        lock,
        json!({"resource_id": web, "never_auto_remediate": true})
    );

    // An approved plan on the resource is refused at execution and fails.
    let decided = gw
        .client()?
        .decide_action(
            &id,
            &decision(DecisionOutcome::Approved, "checked the logs"),
        )
        .await?;
    if decided.state == ActionState::Approved {
        let (status, body) = post(&gw, &format!("/api/actions/{id}/execute"), &admin, None).await?;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
    }
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

    // Clearing it through the alias route shows in operator state, the other signals kept.
    let (status, _) = call(
        &gw,
        Method::PUT,
        &state_path(&web),
        &admin,
        Some(json!({"intentionally_offline": true, "never_auto_remediate": true})),
    )
    .await?;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = call(
        &gw,
        Method::PUT,
        &lock_path,
        &admin,
        Some(json!({"never_auto_remediate": false})),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, state) = get(&gw, &state_path(&web), &admin).await?;
    assert_eq!(state["never_auto_remediate"], false, "{state}");
    assert_eq!(state["intentionally_offline"], true, "{state}");

    broker.stop().await?;
    gw.stop().await
}
