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

use pulse_api::actions::{ActionView, DecisionBody, DecisionOutcome, PlanBody};
use pulse_domain::action::{
    ActionEvent, ActionState, ApprovalFloor, PolicyOutcome, Severity, Verification,
};
use pulse_domain::ai_settings::AutonomyLevel;
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
use serde_json::json;
use uuid::Uuid;

const INTERVAL: Duration = Duration::from_secs(1);
/// Time for a freshly spawned binary to start and connect, on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(30);

/// A critical restart of the counter service with approval floor `floor`.
fn plan(resource_id: &str, floor: ApprovalFloor) -> PlanBody {
    PlanBody {
        approval_floor: Some(floor),
        ..restart_plan(resource_id, "counter", Severity::Critical)
    }
}

fn approve() -> DecisionBody {
    decision(DecisionOutcome::Approved, "checked the logs")
}

/// Plans a `none`-floor restart as `requester`; returns the action id.
async fn plan_restart(
    gw: &TestGateway,
    resource_id: &str,
    requester: &str,
) -> anyhow::Result<String> {
    plan_pending(gw, requester, &plan(resource_id, ApprovalFloor::None)).await
}

/// Approves action `id` as `approver` (which starts its execution).
async fn approved(gw: &TestGateway, id: &str, approver: &str) -> anyhow::Result<()> {
    let decided = gw
        .client_as(approver)?
        .decide_action(id, &approve())
        .await?;
    // The approval is recorded; the answer may already show the execution it started (a
    // locked resource's refusal can land before the answer is read back).
    anyhow::ensure!(
        decided.human_approved
            && matches!(
                decided.state,
                ActionState::Approved
                    | ActionState::Executing
                    | ActionState::Completed
                    | ActionState::Failed
            ),
        "{decided:?}"
    );
    Ok(())
}

/// Waits until action `id` is in `state` (and, for `completed`, verified); its view.
async fn settled(
    gw: &TestGateway,
    id: &str,
    token: &str,
    state: ActionState,
) -> anyhow::Result<ActionView> {
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
    set_autonomy_level(gw, AutonomyLevel::Approval).await?;

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
        Some(json!(plan(&resource_id, ApprovalFloor::Admin))),
    )
    .await?;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(error_code(&body), "missing_scope");

    // Alice plans an admin-floor restart: it waits for a human other than her.
    let as_alice = gw.client_as(&alice)?;
    let planned = as_alice
        .plan_action(&plan(&resource_id, ApprovalFloor::Admin))
        .await?;
    assert_eq!(planned.state, ActionState::PendingApproval, "{planned:?}");
    assert_eq!(planned.plan.agent_id, host);
    assert_eq!(planned.plan.approval_floor, ApprovalFloor::Admin);
    assert_eq!(planned.plan.plan_hash.len(), 64);
    assert_eq!(
        planned.plan.policy_decision.outcome,
        PolicyOutcome::NeedsApproval
    );
    let id = planned.plan.action_id.to_string();
    let pending = as_alice.actions(true, None).await?;
    assert!(
        pending.iter().any(|a| a.plan.action_id.to_string() == id),
        "{pending:?}"
    );

    for (token, path, body) in [
        (
            &chat,
            format!("/api/actions/{id}/decision"),
            Some(json!(approve())),
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
            Some(json!(approve())),
        )
        .await?,
        post(gw, &format!("/api/actions/{id}/execute"), &outsider, None).await?,
    ] {
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert_eq!(error_code(&body), "action_not_found");
    }
    // The decider is never a body field; a token of no user cannot decide; the requester
    // cannot approve her own admin-floor plan; nothing runs before approval.
    let mut forged = json!(approve());
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
        Some(json!(approve())),
    )
    .await?;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(error_code(&body), "action_decision_requires_human");
    let (status, body) = post(
        gw,
        &format!("/api/actions/{id}/decision"),
        &alice,
        Some(json!(approve())),
    )
    .await?;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(error_code(&body), "action_self_approval_forbidden");
    let (status, body) = post(gw, &format!("/api/actions/{id}/execute"), &alice, None).await?;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(error_code(&body), "action_not_approved");

    // Bob approves, which executes it: one restart on the agent.
    let decided = gw.client_as(&bob)?.decide_action(&id, &approve()).await?;
    assert_eq!(decided.state, ActionState::Approved);
    assert!(
        decided
            .decided_by
            .as_deref()
            .is_some_and(|d| d.starts_with("user:"))
    );
    let executed = settled(gw, &id, &alice, ActionState::Completed).await?;
    let result = executed.result.clone().unwrap_or_default();
    assert_eq!(result["status"], "completed");
    // No verifier runs here: the fix is never verified, it is inconclusive.
    assert_eq!(
        executed.verification,
        Some(Verification::Inconclusive),
        "{executed:?}"
    );
    assert!(
        executed
            .verification_reason
            .as_deref()
            .is_some_and(|r| r.starts_with("verifier_unavailable:")),
        "{executed:?}"
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
    settled(gw, &drifted, &alice, ActionState::Failed).await?;
    let (status, body) = post(gw, &format!("/api/actions/{drifted}/execute"), &alice, None).await?;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(error_code(&body), "action_execution_final");
    let rows = audit_rows(gw, &drifted, &alice).await?;
    let last = rows.last().expect("an audit row");
    assert_eq!(last.kind, "action.refused", "{last:?}");
    assert_eq!(last.payload["to"], "failed");
    assert!(
        last.payload["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("plan_drift:")),
        "{last:?}"
    );
    let action = as_alice.action(&drifted).await?;
    assert_eq!(action.state, ActionState::Failed);

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
    settled(gw, &late, &alice, ActionState::Failed).await?;
    let rows = audit_rows(gw, &late, &alice).await?;
    let last = rows.last().expect("an audit row");
    assert_eq!(last.kind, "action.refused", "{last:?}");
    assert!(
        last.payload["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("plan_drift:")),
        "{last:?}"
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
    let body = settled(gw, &locked, &alice, ActionState::Failed).await?;
    let result = body.result.clone().unwrap_or_default();
    assert_eq!(result["refused"], "resource_remediation_locked", "{body:?}");
    assert!(
        result["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("resource_remediation_locked:")),
        "{body:?}"
    );
    let rows = audit_rows(gw, &locked, &alice).await?;
    let last = rows.last().expect("an audit row");
    assert!(
        last.payload["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("resource_remediation_locked:")),
        "{last:?}"
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
