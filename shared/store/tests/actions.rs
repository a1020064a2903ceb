//! The action store against real Postgres: create and read back, the pending queue's order,
//! compare-and-swap transitions with their audit rows in the same transaction, refused
//! transitions and lost races writing nothing, tenant isolation, and remediation locks.

use chrono::{DateTime, Duration, SubsecRound, Utc};
use pulse_domain::TenantId;
use pulse_domain::action::{
    ActionEvent, ActionPlan, ActionState, ApprovalFloor, LockState, PolicyDecision, PolicyOutcome,
    ReasonCode, Severity, plan_hash,
};
use pulse_domain::agent_protocol::Capability;
use pulse_store::actions::{self, ActionsError, TransitionDetail};
use pulse_store::{Store, audit, tenants};
use pulse_test_support::db::TestDb;
use serde_json::json;
use uuid::Uuid;

async fn setup() -> anyhow::Result<(TestDb, TenantId, TenantId)> {
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    let globex = TenantId::new("globex")?;
    tenants::create(db.store(), &acme, "Acme").await?;
    tenants::create(db.store(), &globex, "Globex").await?;
    Ok((db, acme, globex))
}

fn plan(severity: Severity, planned_at: DateTime<Utc>, expires_at: DateTime<Utc>) -> ActionPlan {
    let mut plan = ActionPlan {
        action_id: Uuid::now_v7(),
        resource_id: "service:h1:nginx".to_owned(),
        agent_id: "h1".to_owned(),
        capability: Capability::ServiceRestart,
        params: json!({"target": "nginx"}),
        reason: "nginx stopped answering".to_owned(),
        severity,
        approval_floor: ApprovalFloor::Admin,
        requested_by: "user:alice".to_owned(),
        planned_at: planned_at.trunc_subsecs(6),
        expires_at: expires_at.trunc_subsecs(6),
        resource_version: "3".to_owned(),
        policy_decision: PolicyDecision {
            outcome: PolicyOutcome::NeedsApproval,
            reason_codes: vec![ReasonCode::FloorRequiresApproval],
        },
        plan_hash: String::new(),
    };
    plan.plan_hash = plan_hash(&plan.identity()).unwrap();
    plan
}

async fn create_pending(
    store: &Store,
    tenant: &TenantId,
    plan: &ActionPlan,
) -> anyhow::Result<actions::StoredAction> {
    let tx = store.tenant_tx(tenant).await?;
    let created = actions::create(&tx, plan, "user:alice").await?;
    let pending = actions::transition(
        &tx,
        &created,
        ActionEvent::RequestApproval,
        "service:action-broker",
        TransitionDetail::default(),
    )
    .await?;
    tx.commit().await?;
    Ok(pending)
}

#[tokio::test]
async fn a_plan_reads_back_and_every_transition_is_audited() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let now = Utc::now();
    let plan = plan(Severity::Critical, now, now + Duration::minutes(30));
    let pending = create_pending(db.store(), &acme, &plan).await?;
    assert_eq!(pending.state, ActionState::PendingApproval);
    assert_eq!(pending.version, 2);
    assert_eq!(pending.plan, plan);

    let tx = db.store().tenant_tx(&acme).await?;
    let approved = actions::transition(
        &tx,
        &pending,
        ActionEvent::Approve,
        "user:bob",
        TransitionDetail {
            reason: Some("looks right".into()),
            decided_by: Some("user:bob".into()),
            ..Default::default()
        },
    )
    .await?;
    let lease_until = (now + Duration::minutes(5)).trunc_subsecs(6);
    let executing = actions::transition(
        &tx,
        &approved,
        ActionEvent::StartExecution,
        "service:action-broker",
        TransitionDetail {
            lease: Some(("lease-1".into(), lease_until)),
            ..Default::default()
        },
    )
    .await?;
    let completed = actions::transition(
        &tx,
        &executing,
        ActionEvent::Complete,
        "service:action-broker",
        TransitionDetail {
            result: Some(json!({"status": "completed", "exit_status": 0})),
            ..Default::default()
        },
    )
    .await?;
    tx.commit().await?;
    assert_eq!(completed.state, ActionState::Completed);
    assert!(completed.human_approved);
    assert_eq!(completed.decided_by.as_deref(), Some("user:bob"));
    assert_eq!(completed.lease_id.as_deref(), Some("lease-1"));
    assert_eq!(completed.lease_expires_at, Some(lease_until));
    assert_eq!(completed.version, 5);

    let tx = db.store().tenant_tx(&acme).await?;
    let trail = actions::audit_trail(&tx, plan.action_id).await?;
    let kinds: Vec<&str> = trail.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "action.planned",
            "action.pending_approval",
            "action.approved",
            "action.executing",
            "action.completed"
        ]
    );
    assert_eq!(trail[2].actor, "user:bob");
    assert_eq!(trail[2].payload["from"], "pending_approval");
    assert_eq!(trail[2].payload["to"], "approved");
    assert_eq!(trail[2].payload["plan_hash"], plan.plan_hash.as_str());
    assert!(audit::verify(&tx).await?.is_intact());
    tx.rollback().await?;
    db.cleanup().await
}

#[tokio::test]
async fn stale_versions_and_illegal_events_write_nothing() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let now = Utc::now();
    let plan = plan(Severity::Warning, now, now + Duration::minutes(30));
    let pending = create_pending(db.store(), &acme, &plan).await?;

    // The first decision lands; a second one that read the same version loses.
    let tx = db.store().tenant_tx(&acme).await?;
    actions::transition(
        &tx,
        &pending,
        ActionEvent::Approve,
        "user:bob",
        Default::default(),
    )
    .await?;
    tx.commit().await?;
    let tx = db.store().tenant_tx(&acme).await?;
    let lost = actions::transition(
        &tx,
        &pending,
        ActionEvent::Reject,
        "user:carol",
        Default::default(),
    )
    .await;
    assert!(
        matches!(lost, Err(ActionsError::Conflict { expected: 2, .. })),
        "{lost:?}"
    );
    tx.rollback().await?;

    let tx = db.store().tenant_tx(&acme).await?;
    let approved = actions::get(&tx, plan.action_id).await?.expect("stored");
    assert_eq!(approved.state, ActionState::Approved);
    let illegal = actions::transition(
        &tx,
        &approved,
        ActionEvent::Complete,
        "x",
        Default::default(),
    )
    .await;
    assert!(
        matches!(illegal, Err(ActionsError::Illegal(_))),
        "{illegal:?}"
    );
    let trail = actions::audit_trail(&tx, plan.action_id).await?;
    assert_eq!(trail.len(), 3, "planned, pending, approved only");
    tx.rollback().await?;

    // The same id twice is refused.
    let tx = db.store().tenant_tx(&acme).await?;
    let dup = actions::create(&tx, &plan, "user:alice").await;
    assert!(matches!(dup, Err(ActionsError::Duplicate(_))), "{dup:?}");
    tx.rollback().await?;
    db.cleanup().await
}

#[tokio::test]
async fn the_pending_queue_orders_by_expiry_risk_age_and_id() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let t0 = Utc::now();
    let soon = t0 + Duration::minutes(10);
    let later = t0 + Duration::minutes(20);
    let late_warning = plan(Severity::Warning, t0, later);
    let soon_warning_old = plan(Severity::Warning, t0, soon);
    let soon_warning_new = plan(Severity::Warning, t0 + Duration::seconds(5), soon);
    let soon_critical = plan(Severity::Critical, t0 + Duration::seconds(9), soon);
    let mut same_a = plan(Severity::Critical, t0, later);
    let mut same_b = plan(Severity::Critical, t0, later);
    if same_a.action_id > same_b.action_id {
        std::mem::swap(&mut same_a, &mut same_b);
    }
    for p in [
        &late_warning,
        &same_b,
        &soon_warning_new,
        &soon_critical,
        &same_a,
        &soon_warning_old,
    ] {
        create_pending(db.store(), &acme, p).await?;
    }
    // An approved action is not in the queue.
    let approved = create_pending(db.store(), &acme, &plan(Severity::Critical, t0, t0)).await?;
    let tx = db.store().tenant_tx(&acme).await?;
    actions::transition(
        &tx,
        &approved,
        ActionEvent::Approve,
        "user:bob",
        Default::default(),
    )
    .await?;
    let queue: Vec<Uuid> = actions::pending(&tx, None)
        .await?
        .iter()
        .map(|a| a.plan.action_id)
        .collect();
    assert_eq!(
        queue,
        [
            soon_critical.action_id,
            soon_warning_old.action_id,
            soon_warning_new.action_id,
            same_a.action_id,
            same_b.action_id,
            late_warning.action_id,
        ]
    );
    assert_eq!(actions::list(&tx, None).await?.len(), 7);
    assert_eq!(actions::list(&tx, Some(2)).await?.len(), 2);
    tx.rollback().await?;
    db.cleanup().await
}

#[tokio::test]
async fn another_tenant_sees_no_action_and_locks_are_per_tenant() -> anyhow::Result<()> {
    let (db, acme, globex) = setup().await?;
    let now = Utc::now();
    let plan = plan(Severity::Warning, now, now + Duration::minutes(30));
    create_pending(db.store(), &acme, &plan).await?;

    let tx = db.store().tenant_tx(&globex).await?;
    assert!(actions::get(&tx, plan.action_id).await?.is_none());
    assert!(actions::list(&tx, None).await?.is_empty());
    assert!(actions::pending(&tx, None).await?.is_empty());
    assert!(actions::audit_trail(&tx, plan.action_id).await?.is_empty());
    tx.rollback().await?;

    let tx = db.store().tenant_tx(&acme).await?;
    assert_eq!(
        actions::remediation_lock(&tx, &plan.resource_id).await?,
        LockState::Unlocked
    );
    actions::set_remediation_lock(&tx, &plan.resource_id, true, "user:alice").await?;
    tx.commit().await?;
    let tx = db.store().tenant_tx(&acme).await?;
    assert_eq!(
        actions::remediation_lock(&tx, &plan.resource_id).await?,
        LockState::Locked
    );
    actions::set_remediation_lock(&tx, &plan.resource_id, false, "user:alice").await?;
    assert_eq!(
        actions::remediation_lock(&tx, &plan.resource_id).await?,
        LockState::Unlocked
    );
    tx.commit().await?;
    let tx = db.store().tenant_tx(&globex).await?;
    actions::set_remediation_lock(&tx, &plan.resource_id, true, "user:eve").await?;
    tx.commit().await?;
    let tx = db.store().tenant_tx(&acme).await?;
    assert_eq!(
        actions::remediation_lock(&tx, &plan.resource_id).await?,
        LockState::Unlocked
    );
    tx.rollback().await?;
    db.cleanup().await
}
