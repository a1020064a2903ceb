//! The action lifecycle's store side against real Postgres (migration 0016): an action names
//! the finding it fixes; a verification is recorded once, only on a completed action, with its
//! audit row; the fix outcome lands on the finding (resolving it when verified); the recovery
//! read sees unfinished actions of every tenant and nothing else.

use chrono::{Duration, SubsecRound, Utc};
use pulse_domain::TenantId;
use pulse_domain::action::{
    ActionEvent, ActionPlan, ActionState, ApprovalFloor, FixOutcome, PolicyDecision, PolicyOutcome,
    ReasonCode, Severity, Verification, plan_hash,
};
use pulse_domain::agent_protocol::Capability;
use pulse_domain::finding::{
    Category, FindingId, FindingStatus, InvestigationOutcome, LifecycleEventType, ReportedFinding,
};
use pulse_store::actions::{self, ActionsError, StoredAction, TransitionDetail};
use pulse_store::{Store, audit, findings, tenants};
use pulse_test_support::db::TestDb;
use serde_json::json;
use uuid::Uuid;

const BROKER: &str = "service:action-broker";

async fn setup() -> anyhow::Result<(TestDb, TenantId, TenantId)> {
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    let globex = TenantId::new("globex")?;
    tenants::create(db.store(), &acme, "Acme").await?;
    tenants::create(db.store(), &globex, "Globex").await?;
    Ok((db, acme, globex))
}

fn plan(expires_in: Duration) -> ActionPlan {
    let now = Utc::now();
    let mut plan = ActionPlan {
        action_id: Uuid::now_v7(),
        resource_id: "service:h1:nginx".to_owned(),
        agent_id: "h1".to_owned(),
        capability: Capability::ServiceRestart,
        params: json!({"target": "nginx"}),
        reason: "nginx stopped answering".to_owned(),
        severity: Severity::Critical,
        approval_floor: ApprovalFloor::None,
        requested_by: "user:alice".to_owned(),
        planned_at: now.trunc_subsecs(6),
        expires_at: (now + expires_in).trunc_subsecs(6),
        resource_version: "3".to_owned(),
        policy_decision: PolicyDecision {
            outcome: PolicyOutcome::AutoAuthorized,
            reason_codes: vec![ReasonCode::AssistedWarning],
        },
        plan_hash: String::new(),
    };
    plan.plan_hash = plan_hash(&plan.identity()).unwrap();
    plan
}

async fn finding(store: &Store, tenant: &TenantId) -> anyhow::Result<FindingId> {
    let tx = store.tenant_tx(tenant).await?;
    let reported = ReportedFinding {
        key: "service-down".to_owned(),
        severity: pulse_domain::finding::Severity::Critical,
        category: Category::Reliability,
        resource_id: "service:h1:nginx".to_owned(),
        resource_name: "nginx".to_owned(),
        resource_type: "service".to_owned(),
        title: "nginx is down".to_owned(),
        description: "nginx exited".to_owned(),
        recommendation: "restart nginx".to_owned(),
        evidence: "status=failed".to_owned(),
        impact: String::new(),
    };
    let outcome = findings::report(&tx, &reported, None, Utc::now()).await?;
    tx.commit().await?;
    Ok(outcome.finding.finding.id)
}

/// Creates `plan` for `finding` and walks it through `events` in one transaction.
async fn walk(
    store: &Store,
    tenant: &TenantId,
    plan: &ActionPlan,
    finding: Option<FindingId>,
    events: &[ActionEvent],
) -> anyhow::Result<StoredAction> {
    let tx = store.tenant_tx(tenant).await?;
    let mut action = actions::create_for_finding(&tx, plan, finding, "user:alice").await?;
    for event in events {
        let detail = TransitionDetail {
            lease: (*event == ActionEvent::StartExecution)
                .then(|| ("lease-1".to_owned(), Utc::now() + Duration::minutes(2))),
            ..Default::default()
        };
        action = actions::transition(&tx, &action, *event, BROKER, detail).await?;
    }
    tx.commit().await?;
    Ok(action)
}

const TO_COMPLETED: [ActionEvent; 3] = [
    ActionEvent::AutoAuthorize,
    ActionEvent::StartExecution,
    ActionEvent::Complete,
];

#[tokio::test]
async fn a_verification_is_recorded_once_on_a_completed_action() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let store = db.store();
    let fid = finding(store, &acme).await?;
    let completed = walk(
        store,
        &acme,
        &plan(Duration::minutes(30)),
        Some(fid),
        &TO_COMPLETED,
    )
    .await?;
    assert_eq!(completed.finding_id, Some(fid));
    assert_eq!(completed.verification, None);

    let tx = store.tenant_tx(&acme).await?;
    let verified = actions::record_verification(
        &tx,
        &completed,
        Verification::Verified,
        json!({"reason": "running and restarted after the command", "observations": 2}),
        BROKER,
    )
    .await?;
    tx.commit().await?;
    assert_eq!(verified.verification, Some(Verification::Verified));
    assert_eq!(verified.version, completed.version + 1);
    assert!(verified.verified_at.is_some());
    assert_eq!(
        verified
            .verification_detail
            .as_ref()
            .map(|d| &d["observations"]),
        Some(&json!(2))
    );

    // A second outcome is refused: on the fresh row (already verified) and on the stale one
    // (lost race), and nothing is written.
    let tx = store.tenant_tx(&acme).await?;
    let again = actions::record_verification(
        &tx,
        &verified,
        Verification::StillFailing,
        json!({"reason": "x"}),
        BROKER,
    )
    .await;
    assert!(
        matches!(again, Err(ActionsError::NotVerifiable { .. })),
        "{again:?}"
    );
    let stale = actions::record_verification(
        &tx,
        &completed,
        Verification::Inconclusive,
        json!({"reason": "x"}),
        BROKER,
    )
    .await;
    assert!(
        matches!(stale, Err(ActionsError::Conflict { .. })),
        "{stale:?}"
    );
    let trail = actions::audit_trail(&tx, completed.plan.action_id).await?;
    let kinds: Vec<&str> = trail.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "action.verification")
            .count(),
        1
    );
    let last = trail.last().expect("audit rows");
    assert_eq!(last.kind, "action.verification");
    assert_eq!(last.payload["verification"], "verified");
    assert_eq!(
        last.payload["reason"],
        "running and restarted after the command"
    );
    assert!(audit::verify(&tx).await?.is_intact());
    drop(tx);

    // Only a completed action takes a verification.
    let failed = walk(
        store,
        &acme,
        &plan(Duration::minutes(30)),
        None,
        &[
            ActionEvent::AutoAuthorize,
            ActionEvent::StartExecution,
            ActionEvent::Fail,
        ],
    )
    .await?;
    let tx = store.tenant_tx(&acme).await?;
    let refused = actions::record_verification(
        &tx,
        &failed,
        Verification::Verified,
        json!({"reason": "x"}),
        BROKER,
    )
    .await;
    assert!(
        matches!(refused, Err(ActionsError::NotVerifiable { .. })),
        "{refused:?}"
    );
    Ok(())
}

#[tokio::test]
async fn fix_outcomes_land_on_the_finding() -> anyhow::Result<()> {
    let (db, acme, globex) = setup().await?;
    let store = db.store();
    let fid = finding(store, &acme).await?;
    let action = Uuid::now_v7();

    let tx = store.tenant_tx(&acme).await?;
    assert!(
        findings::record_fix_outcome(
            &tx,
            fid,
            FixOutcome::VerificationFailed,
            action,
            "still unhealthy",
            Utc::now()
        )
        .await?
    );
    // The same outcome of the same action again writes nothing.
    assert!(
        findings::record_fix_outcome(
            &tx,
            fid,
            FixOutcome::VerificationFailed,
            action,
            "still unhealthy",
            Utc::now()
        )
        .await?
    );
    let stored = findings::get(&tx, fid).await?.expect("finding");
    assert_eq!(stored.finding.status, FindingStatus::Active);
    assert_eq!(
        stored.finding.investigation_outcome,
        Some(InvestigationOutcome::FixVerificationFailed)
    );
    let fix_events = stored
        .finding
        .lifecycle
        .iter()
        .filter(|e| e.event_type == LifecycleEventType::FixVerificationFailed)
        .count();
    assert_eq!(fix_events, 1);

    let next = Uuid::now_v7();
    findings::record_fix_outcome(
        &tx,
        fid,
        FixOutcome::Verified,
        next,
        "restarted",
        Utc::now(),
    )
    .await?;
    tx.commit().await?;
    let tx = store.tenant_tx(&acme).await?;
    let stored = findings::get(&tx, fid).await?.expect("finding");
    assert_eq!(stored.finding.status, FindingStatus::Resolved);
    assert!(stored.finding.auto_resolved);
    assert!(stored.finding.resolve_reason.contains(&next.to_string()));
    assert_eq!(
        stored.finding.lifecycle.last().map(|e| e.event_type),
        Some(LifecycleEventType::FixVerified)
    );
    drop(tx);

    // Another tenant's finding id is not found, and nothing is written there.
    let tx = store.tenant_tx(&globex).await?;
    assert!(
        !findings::record_fix_outcome(&tx, fid, FixOutcome::Rejected, action, "no", Utc::now())
            .await?
    );
    Ok(())
}

#[tokio::test]
async fn the_recovery_read_sees_unfinished_actions_of_every_tenant() -> anyhow::Result<()> {
    let (db, acme, globex) = setup().await?;
    let store = db.store();
    let approved = walk(
        store,
        &acme,
        &plan(Duration::minutes(30)),
        None,
        &[ActionEvent::AutoAuthorize],
    )
    .await?;
    let executing = walk(
        store,
        &globex,
        &plan(Duration::minutes(30)),
        None,
        &[ActionEvent::AutoAuthorize, ActionEvent::StartExecution],
    )
    .await?;
    let unverified = walk(
        store,
        &acme,
        &plan(Duration::minutes(30)),
        None,
        &TO_COMPLETED,
    )
    .await?;
    let lapsed = walk(
        store,
        &acme,
        &plan(Duration::milliseconds(1)),
        None,
        &[ActionEvent::RequestApproval],
    )
    .await?;
    // Not unfinished: a pending plan still in time, a failed action, a verified one.
    let waiting = walk(
        store,
        &acme,
        &plan(Duration::minutes(30)),
        None,
        &[ActionEvent::RequestApproval],
    )
    .await?;
    let failed = walk(
        store,
        &globex,
        &plan(Duration::minutes(30)),
        None,
        &[
            ActionEvent::AutoAuthorize,
            ActionEvent::StartExecution,
            ActionEvent::Fail,
        ],
    )
    .await?;
    let done = walk(
        store,
        &acme,
        &plan(Duration::minutes(30)),
        None,
        &TO_COMPLETED,
    )
    .await?;
    let tx = store.tenant_tx(&acme).await?;
    actions::record_verification(
        &tx,
        &done,
        Verification::Inconclusive,
        json!({"reason": "x"}),
        BROKER,
    )
    .await?;
    tx.commit().await?;

    let unfinished = actions::unfinished(store, 100).await?;
    let seen: Vec<(TenantId, Uuid, ActionState)> = unfinished
        .into_iter()
        .map(|a| (a.tenant, a.action_id, a.state))
        .collect();
    for (tenant, action) in [
        (&acme, &approved),
        (&globex, &executing),
        (&acme, &unverified),
        (&acme, &lapsed),
    ] {
        assert!(
            seen.contains(&(tenant.clone(), action.plan.action_id, action.state)),
            "{:?} missing from {seen:?}",
            action.state
        );
    }
    for action in [&waiting, &failed, &done] {
        assert!(
            !seen.iter().any(|(_, id, _)| *id == action.plan.action_id),
            "{:?} listed",
            action.state
        );
    }
    Ok(())
}
