//! Governed actions end to end: the real gateway, action-broker, agent-relay and an agent with
//! `--enable-commands` supervising a service that counts its starts.
//!
//! Covers authority (an `ai:chat` token cannot plan, approve or execute; another tenant's action
//! id is `action_not_found`; the requester cannot approve an `admin`-floor plan; the decider is
//! never a body field), the approve path up to one restart on the agent (the approval executes it;
//! a resubmission never re-executes; with no verifier running the fix is `inconclusive`), plan
//! drift (`plan_drift:` audit row) and the remediation lock (`resource_remediation_locked:`), both
//! refused when the approval triggers the execution, all on an intact hash-chained audit.

use std::time::Duration;

use pulse_domain::action::{ActionEvent, ActionState};
use pulse_domain::{Scope, TenantId};
use pulse_store::actions::TransitionDetail;
use pulse_store::{actions, audit, tenants};
use pulse_test_support::action_api::{
    APPROVED_EXECUTED_VERIFIED, action_in_state, audit_kinds, audit_rows, call, decision,
    error_code, get, plan_pending, post, restart_plan, set_autonomy_level, spawn_counter_agent,
    starts, user_token as token, wait_starts,
};
use pulse_test_support::action_broker::TestActionBroker;
use pulse_test_support::agent::{AgentStack, host_id};
use pulse_test_support::service::TestGateway;
use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

const INTERVAL: Duration = Duration::from_secs(1);
/// Time for a freshly spawned binary to start and connect, on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(30);

/// A critical restart of the counter service with approval floor `floor`.
fn plan(resource_id: &str, floor: &str) -> Value {
    let mut plan = restart_plan(resource_id, "counter", "critical");
    plan["approval_floor"] = json!(floor);
    plan
}

fn approve() -> Value {
    decision("approved", "checked the logs")
}

/// Plans a `none`-floor restart as `requester`; returns the action id.
async fn plan_restart(
    gw: &TestGateway,
    resource_id: &str,
    requester: &str,
) -> anyhow::Result<String> {
    plan_pending(gw, requester, plan(resource_id, "none")).await
}

/// Approves action `id` as `approver` (which starts its execution).
async fn approved(gw: &TestGateway, id: &str, approver: &str) -> anyhow::Result<()> {
    let (status, decided) = post(
        gw,
        &format!("/api/actions/{id}/decision"),
        approver,
        Some(approve()),
    )
    .await?;
    anyhow::ensure!(status == StatusCode::OK, "{status} {decided}");
    anyhow::ensure!(decided["state"] == "approved", "{decided}");
    Ok(())
}

/// Waits until action `id` is in `state` (and, for `completed`, verified); its view.
async fn settled(gw: &TestGateway, id: &str, token: &str, state: &str) -> anyhow::Result<Value> {
    action_in_state(gw, id, token, state, Duration::from_secs(60)).await
}

#[tokio::test]
async fn actions_are_governed_audited_and_run_once_on_the_agent() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let stack = AgentStack::start(&[("PULSE_RELAY__REQUEST_TIMEOUT_MS", "30000")]).await?;
    let gw = &stack.gateway;
    let store = gw.db.store();
    let tenant = TenantId::default_tenant();

    // The agent: commands enabled, one supervised service counting its starts.
    let host = host_id("act");
    let (starts_file, agent) = spawn_counter_agent(&stack, &host, INTERVAL, STARTUP).await?;
    let broker = TestActionBroker::start(gw, &stack.dir.join("broker"), &[]).await?;

    // Patrol mode `approval`: every fix needs a human.
    set_autonomy_level(gw, "approval").await?;

    let all = [
        Scope::ActionsPlan,
        Scope::ActionsApprove,
        Scope::ActionsExecute,
        Scope::MonitoringRead,
    ];
    let alice = token(store, &tenant, Some("alice"), &all).await?;
    let bob = token(store, &tenant, Some("bob"), &[Scope::ActionsApprove]).await?;
    let chat = token(
        store,
        &tenant,
        Some("carol"),
        &[Scope::AiChat, Scope::MonitoringRead],
    )
    .await?;
    let userless = token(store, &tenant, None, &[Scope::ActionsApprove]).await?;
    let globex = TenantId::new("globex")?;
    tenants::create(store, &globex, "Globex").await?;
    let outsider = token(store, &globex, Some("eve"), &all).await?;

    // The service as a resource of the agent.
    let resource_id = stack
        .service_resource_id(&alice, &host, "counter", STARTUP)
        .await?;

    // Authority: ai:chat cannot plan, approve or execute.
    let (status, body) = post(
        gw,
        "/api/actions/plan",
        &chat,
        Some(plan(&resource_id, "admin")),
    )
    .await?;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(error_code(&body), "missing_scope");

    // Alice plans an admin-floor restart: it waits for a human other than her.
    let (status, planned) = post(
        gw,
        "/api/actions/plan",
        &alice,
        Some(plan(&resource_id, "admin")),
    )
    .await?;
    assert_eq!(status, StatusCode::CREATED, "{planned}");
    assert_eq!(planned["state"], "pending_approval", "{planned}");
    assert_eq!(planned["agent_id"], host.as_str());
    assert_eq!(planned["approval_floor"], "admin");
    assert_eq!(planned["plan_hash"].as_str().map(str::len), Some(64));
    assert_eq!(planned["policy_decision"]["outcome"], "needs_approval");
    let id = planned["action_id"].as_str().unwrap_or_default().to_owned();
    let (status, pending) = get(gw, "/api/actions/pending", &alice).await?;
    assert_eq!(status, StatusCode::OK);
    assert!(
        pending
            .as_array()
            .is_some_and(|l| l.iter().any(|a| a["action_id"] == id.as_str())),
        "{pending}"
    );

    for (token, path, body) in [
        (
            &chat,
            format!("/api/actions/{id}/decision"),
            Some(approve()),
        ),
        (&chat, format!("/api/actions/{id}/execute"), None),
    ] {
        let (status, body) = post(gw, &path, token, body).await?;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        assert_eq!(error_code(&body), "missing_scope");
    }
    // Another tenant's action id is not found, for reads and writes.
    for (status, body) in [
        get(gw, &format!("/api/actions/{id}"), &outsider).await?,
        post(
            gw,
            &format!("/api/actions/{id}/decision"),
            &outsider,
            Some(approve()),
        )
        .await?,
        post(gw, &format!("/api/actions/{id}/execute"), &outsider, None).await?,
    ] {
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert_eq!(error_code(&body), "action_not_found");
    }
    // The decider is never a body field; a token of no user cannot decide; the requester
    // cannot approve her own admin-floor plan; nothing runs before approval.
    let mut forged = approve();
    forged["decided_by"] = json!("user:someone-else");
    let (status, body) = post(
        gw,
        &format!("/api/actions/{id}/decision"),
        &bob,
        Some(forged),
    )
    .await?;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) = post(
        gw,
        &format!("/api/actions/{id}/decision"),
        &userless,
        Some(approve()),
    )
    .await?;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(error_code(&body), "action_decision_requires_human");
    let (status, body) = post(
        gw,
        &format!("/api/actions/{id}/decision"),
        &alice,
        Some(approve()),
    )
    .await?;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(error_code(&body), "action_self_approval_forbidden");
    let (status, body) = post(gw, &format!("/api/actions/{id}/execute"), &alice, None).await?;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(error_code(&body), "action_not_approved");

    // Bob approves, which executes it: one restart on the agent.
    let (status, decided) = post(
        gw,
        &format!("/api/actions/{id}/decision"),
        &bob,
        Some(approve()),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{decided}");
    assert_eq!(decided["state"], "approved");
    assert!(
        decided["decided_by"]
            .as_str()
            .is_some_and(|d| d.starts_with("user:"))
    );
    let executed = settled(gw, &id, &alice, "completed").await?;
    assert_eq!(executed["result"]["status"], "completed");
    // No verifier runs here: the fix is never verified, it is inconclusive.
    assert_eq!(executed["verification"], "inconclusive", "{executed}");
    assert!(
        executed["verification_reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("verifier_unavailable:")),
        "{executed}"
    );
    wait_starts(
        &starts_file,
        2,
        Duration::from_secs(15),
        "the restart to start the service again",
    )
    .await?;
    // Resubmission never re-executes.
    let (status, body) = post(gw, &format!("/api/actions/{id}/execute"), &alice, None).await?;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(error_code(&body), "action_execution_final");
    let rows = audit_rows(gw, &id, &alice).await?;
    assert_eq!(audit_kinds(&rows), APPROVED_EXECUTED_VERIFIED);

    // (4) Plan drift: the params change after planning; the hash recomputed right before the
    // approved plan runs differs, so it never runs.
    let drifted = plan_restart(gw, &resource_id, &alice).await?;
    let tx = store.tenant_tx(&tenant).await?;
    let changed = tx
        .client()
        .execute(
            "UPDATE actions SET plan = jsonb_set(plan, '{params,target}', '\"other\"')
             WHERE id = $1",
            &[&Uuid::parse_str(&drifted)?],
        )
        .await?;
    assert_eq!(changed, 1);
    tx.commit().await?;
    approved(gw, &drifted, &bob).await?;
    settled(gw, &drifted, &alice, "failed").await?;
    let (status, body) = post(gw, &format!("/api/actions/{drifted}/execute"), &alice, None).await?;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(error_code(&body), "action_execution_final");
    let rows = audit_rows(gw, &drifted, &alice).await?;
    let last = rows.last().cloned().unwrap_or_default();
    assert_eq!(last["kind"], "action.refused", "{last}");
    assert_eq!(last["payload"]["to"], "failed");
    assert!(
        last["payload"]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("plan_drift:")),
        "{last}"
    );
    let (_, action) = get(gw, &format!("/api/actions/{drifted}"), &alice).await?;
    assert_eq!(action["state"], "failed");

    // (4) The params change after the approval: a human's approval is recorded and, in the same
    // transaction, the stored plan is altered. The broker's recovery sweep takes the approved
    // action up, recomputes the hash, and refuses it with `plan_drift:`; it never runs.
    let late = plan_restart(gw, &resource_id, &alice).await?;
    let late_id = Uuid::parse_str(&late)?;
    let tx = store.tenant_tx(&tenant).await?;
    let pending = actions::get(&tx, late_id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("action {late} missing"))?;
    actions::transition(
        &tx,
        &pending,
        ActionEvent::Approve,
        "user:bob",
        TransitionDetail {
            reason: Some("approved as planned".to_owned()),
            decided_by: Some("user:bob".to_owned()),
            ..Default::default()
        },
    )
    .await?;
    let changed = tx
        .client()
        .execute(
            "UPDATE actions SET plan = jsonb_set(plan, '{params,target}', '\"other\"')
             WHERE id = $1",
            &[&late_id],
        )
        .await?;
    assert_eq!(changed, 1);
    tx.commit().await?;
    settled(gw, &late, &alice, "failed").await?;
    let rows = audit_rows(gw, &late, &alice).await?;
    let last = rows.last().cloned().unwrap_or_default();
    assert_eq!(last["kind"], "action.refused", "{last}");
    assert!(
        last["payload"]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("plan_drift:")),
        "{last}"
    );

    // (7) The remediation lock, set while the plan waits, refuses the approved, matching plan
    // when the approval runs it.
    let locked = plan_restart(gw, &resource_id, &alice).await?;
    let (status, body) = call(
        gw,
        reqwest::Method::PUT,
        &format!("/api/resources/{resource_id}/remediation-lock"),
        &bob,
        Some(json!({"never_auto_remediate": true})),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["never_auto_remediate"], true, "{body}");
    approved(gw, &locked, &bob).await?;
    let body = settled(gw, &locked, &alice, "failed").await?;
    assert_eq!(
        body["result"]["refused"], "resource_remediation_locked",
        "{body}"
    );
    assert!(
        body["result"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("resource_remediation_locked:")),
        "{body}"
    );
    let rows = audit_rows(gw, &locked, &alice).await?;
    let last = rows.last().cloned().unwrap_or_default();
    assert!(
        last["payload"]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("resource_remediation_locked:")),
        "{last}"
    );

    // Only the approved, matching, unlocked plan ran; the chain is intact.
    let tx = store.tenant_tx(&tenant).await?;
    for (id, state) in [
        (&id, ActionState::Completed),
        (&drifted, ActionState::Failed),
        (&locked, ActionState::Failed),
    ] {
        let stored = actions::get(&tx, Uuid::parse_str(id)?).await?;
        assert_eq!(stored.map(|a| a.state), Some(state), "{id}");
    }
    assert!(audit::verify(&tx).await?.is_intact());
    tx.rollback().await?;
    assert_eq!(starts(&starts_file), 2, "a refused action ran");

    broker.stop().await?;
    drop(agent);
    stack.stop().await
}
