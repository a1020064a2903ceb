//! The lifecycle against real Postgres and NATS: what a stale read, a receipt without a time and
//! a plan without a target do.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{SubsecRound, Utc};
use pulse_bus::relay_api::{RelayCommandReceipt, RelayCommandRequest};
use pulse_bus::{ErrorCode, ErrorReply};
use pulse_domain::TenantId;
use pulse_domain::action::{
    ActionEvent, ActionPlan, ActionState, ApprovalFloor, PolicyDecision, PolicyOutcome, ReasonCode,
    Severity, Verification, plan_hash,
};
use pulse_domain::agent_protocol::Capability;
use pulse_store::actions::{self, StoredAction, TransitionDetail};
use pulse_store::settings::ConfigLayer;
use pulse_store::tenants;
use pulse_test_support::db::TestDb;
use pulse_test_support::nats::TestNats;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Delivery, receipt_executed_at};
use crate::broker::{Broker, BrokerSettings, SERVICE_ACTOR};

struct Harness {
    db: TestDb,
    nats: TestNats,
    tenant: TenantId,
    broker: Broker,
}

async fn harness() -> anyhow::Result<Harness> {
    let db = TestDb::create().await?;
    let tenant = TenantId::new("acme")?;
    tenants::create(db.store(), &tenant, "Acme").await?;
    let nats = TestNats::connect().await?;
    let layer = ConfigLayer::from_config(&pulse_config::PulseConfig::default().ai)?;
    let broker = Broker::new(db.store().clone(), nats.bus(), layer).with_settings(BrokerSettings {
        relay_timeout: Duration::from_secs(5),
        verify_timeout: Duration::from_secs(5),
        resend_backoff: Duration::from_millis(10),
        ..BrokerSettings::default()
    });
    Ok(Harness {
        db,
        nats,
        tenant,
        broker,
    })
}

fn plan(params: Value) -> ActionPlan {
    let now = Utc::now();
    let mut plan = ActionPlan {
        action_id: Uuid::now_v7(),
        resource_id: "service:h1:nginx".to_owned(),
        agent_id: "h1".to_owned(),
        capability: Capability::ServiceRestart,
        params,
        reason: "nginx stopped answering".to_owned(),
        severity: Severity::Critical,
        approval_floor: ApprovalFloor::None,
        requested_by: "user:alice".to_owned(),
        planned_at: now.trunc_subsecs(6),
        expires_at: (now + chrono::Duration::minutes(30)).trunc_subsecs(6),
        resource_version: "absent".to_owned(),
        policy_decision: PolicyDecision {
            outcome: PolicyOutcome::AutoAuthorized,
            reason_codes: vec![ReasonCode::AssistedWarning],
        },
        plan_hash: String::new(),
    };
    plan.plan_hash = plan_hash(&plan.identity()).unwrap();
    plan
}

/// Stores `plan` and moves it by `events` (each with `detail`), committed.
async fn stored(
    h: &Harness,
    plan: &ActionPlan,
    events: &[(ActionEvent, TransitionDetail)],
) -> anyhow::Result<StoredAction> {
    let tx = h.db.store().tenant_tx(&h.tenant).await?;
    let mut action = actions::create(&tx, plan, SERVICE_ACTOR).await?;
    for (event, detail) in events {
        action = actions::transition(&tx, &action, *event, SERVICE_ACTOR, detail.clone()).await?;
    }
    tx.commit().await?;
    Ok(action)
}

fn lease() -> TransitionDetail {
    TransitionDetail {
        lease: Some((
            "lease-test".to_owned(),
            Utc::now() + chrono::Duration::minutes(2),
        )),
        ..Default::default()
    }
}

async fn get(h: &Harness, id: Uuid) -> anyhow::Result<StoredAction> {
    let tx = h.db.store().tenant_tx(&h.tenant).await?;
    let action = actions::get(&tx, id).await?.expect("action stored");
    tx.rollback().await?;
    Ok(action)
}

#[tokio::test]
async fn a_command_is_not_sent_for_an_action_another_writer_failed() -> anyhow::Result<()> {
    let h = harness().await?;
    let executing = stored(
        &h,
        &plan(json!({"target": "nginx"})),
        &[
            (ActionEvent::AutoAuthorize, TransitionDetail::default()),
            (ActionEvent::StartExecution, lease()),
        ],
    )
    .await?;
    // Another replica fails it (e.g. the relay refused the command there).
    stored_fail(&h, &executing).await?;
    let sent = Arc::new(AtomicUsize::new(0));
    let responder = {
        let sent = sent.clone();
        h.nats
            .bus()
            .serve::<RelayCommandRequest, _, _, _>(
                &h.nats.subjects().endpoint::<RelayCommandRequest>(&h.tenant),
                None,
                move |_, _| {
                    let sent = sent.clone();
                    async move {
                        sent.fetch_add(1, Ordering::SeqCst);
                        Err::<RelayCommandReceipt, _>(ErrorReply::new(
                            ErrorCode::AgentRefused,
                            "test relay refuses",
                        ))
                    }
                },
            )
            .await?
    };
    // `executing` is the stale read the resend loop holds.
    let after = h
        .broker
        .deliver(&h.tenant, &executing, Delivery::UntilReceipt)
        .await?;
    responder.stop().await;
    assert_eq!(after.state, ActionState::Failed);
    assert_eq!(
        sent.load(Ordering::SeqCst),
        0,
        "a failed action's command was sent"
    );
    Ok(())
}

async fn stored_fail(h: &Harness, current: &StoredAction) -> anyhow::Result<()> {
    let tx = h.db.store().tenant_tx(&h.tenant).await?;
    let current = actions::get_for_update(&tx, current.plan.action_id)
        .await?
        .expect("action stored");
    actions::transition(
        &tx,
        &current,
        ActionEvent::Fail,
        SERVICE_ACTOR,
        TransitionDetail {
            reason: Some("missing_scope: elsewhere".to_owned()),
            ..Default::default()
        },
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

#[tokio::test]
async fn a_receipt_without_a_time_is_inconclusive_without_asking_the_verifier() -> anyhow::Result<()>
{
    let h = harness().await?;
    let completed = stored(
        &h,
        &plan(json!({"target": "nginx"})),
        &[
            (ActionEvent::AutoAuthorize, TransitionDetail::default()),
            (ActionEvent::StartExecution, lease()),
            (
                ActionEvent::Complete,
                TransitionDetail {
                    result: Some(json!({"status": "completed", "at": null})),
                    ..Default::default()
                },
            ),
        ],
    )
    .await?;
    assert_eq!(receipt_executed_at(&completed), None);
    h.broker.verify(&h.tenant, &completed).await?;
    let verified = get(&h, completed.plan.action_id).await?;
    assert_eq!(verified.verification, Some(Verification::Inconclusive));
    let reason = verified.verification_detail.as_ref().unwrap()["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(reason.starts_with("receipt_time_unknown:"), "{reason}");
    Ok(())
}

#[test]
fn the_receipt_time_is_the_agents() {
    let mut action_result = json!({"status": "completed", "at": "2026-11-30T01:02:03.456Z"});
    let at = |result: &Value| {
        let mut action = dummy_action();
        action.result = Some(result.clone());
        receipt_executed_at(&action)
    };
    assert_eq!(
        at(&action_result).map(|t| t.to_rfc3339()),
        Some("2026-11-30T01:02:03.456+00:00".to_owned())
    );
    action_result["at"] = json!("yesterday");
    assert_eq!(at(&action_result), None);
}

fn dummy_action() -> StoredAction {
    StoredAction {
        plan: plan(json!({"target": "nginx"})),
        state: ActionState::Completed,
        version: 4,
        decided_by: None,
        decision_reason: None,
        human_approved: false,
        lease_id: None,
        lease_expires_at: None,
        result: None,
        updated_at: Utc::now(),
        finding_id: None,
        verification: None,
        verification_detail: None,
        verified_at: None,
    }
}

#[tokio::test]
async fn an_approved_plan_without_a_target_is_failed_not_retried() -> anyhow::Result<()> {
    let h = harness().await?;
    let approved = stored(
        &h,
        &plan(json!({})),
        &[(ActionEvent::AutoAuthorize, TransitionDetail::default())],
    )
    .await?;
    h.broker.advance(&h.tenant, approved.plan.action_id).await?;
    let after = get(&h, approved.plan.action_id).await?;
    assert_eq!(after.state, ActionState::Failed);
    assert_eq!(
        after.result.as_ref().unwrap()["refused"],
        "invalid_action_request"
    );
    let trail = actions::audit_trail(
        &h.db.store().tenant_tx(&h.tenant).await?,
        after.plan.action_id,
    )
    .await?;
    assert!(
        trail
            .iter()
            .any(|r| r.payload["to"] == "failed" && r.actor == SERVICE_ACTOR),
        "the refusal is audited"
    );
    Ok(())
}
