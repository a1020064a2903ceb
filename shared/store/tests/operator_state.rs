//! Operator state against real Postgres: one row per resource holding every signal, the
//! remediation lock as its `never_auto_remediate`, audited writes, tenant isolation, and the
//! finding store honouring it (auto-dismiss under maintenance or intentionally offline, wake
//! with `suppression_lifted` once lifted, a manual dismissal never woken).

use chrono::{Duration, Utc};
use pulse_domain::TenantId;
use pulse_domain::action::LockState;
use pulse_domain::finding::operator_state::{
    Criticality, MaintenanceWindow, OperatorStateProjection, SuppressionCause,
};
use pulse_domain::finding::{
    Category, DismissedReason, FindingStatus, LifecycleEventType, OperatorAction, ReportedFinding,
    Severity,
};
use pulse_store::operator_state::{self, OperatorStateInput};
use pulse_store::{actions, audit, findings, tenants};
use pulse_test_support::db::TestDb;

const WEB: &str = "app-container:h1:web";

fn reported() -> ReportedFinding {
    ReportedFinding {
        key: "high-cpu".to_owned(),
        severity: Severity::Warning,
        category: Category::Performance,
        resource_id: WEB.to_owned(),
        resource_name: "web".to_owned(),
        resource_type: "app-container".to_owned(),
        title: "Web container CPU saturated".to_owned(),
        description: "cpu above 95% for 20 minutes".to_owned(),
        recommendation: "profile the request handler".to_owned(),
        evidence: "cpu_percent=97 over 20m".to_owned(),
        impact: String::new(),
    }
}

async fn setup() -> anyhow::Result<(TestDb, TenantId, TenantId)> {
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    let globex = TenantId::new("globex")?;
    tenants::create(db.store(), &acme, "Acme").await?;
    tenants::create(db.store(), &globex, "Globex").await?;
    Ok((db, acme, globex))
}

#[tokio::test]
async fn one_row_holds_every_signal_and_the_lock_is_its_never_auto_remediate() -> anyhow::Result<()>
{
    let (db, acme, globex) = setup().await?;
    let now = Utc::now();
    let tx = db.store().tenant_tx(&acme).await?;
    assert_eq!(operator_state::get(&tx, WEB).await?, None);
    assert_eq!(
        operator_state::projection(&tx, WEB).await?,
        OperatorStateProjection::default()
    );
    let window = MaintenanceWindow::new(Some(now), now + Duration::hours(2))?;
    let input = OperatorStateInput {
        projection: OperatorStateProjection {
            maintenance_window: Some(window),
            intentionally_offline: false,
            never_auto_remediate: true,
            criticality: Some(Criticality::High),
        },
        note: "db upgrade".to_owned(),
    };
    let stored = operator_state::put(&tx, WEB, &input, "user:alice").await?;
    assert!(stored.projection.never_auto_remediate);
    // Microsecond storage: compare what was read back.
    let read = operator_state::get(&tx, WEB).await?.expect("stored");
    assert_eq!(read, stored);
    assert_eq!(read.note, "db upgrade");
    assert_eq!(read.set_by, "user:alice");
    // The broker's lock is the same fact.
    assert_eq!(
        actions::remediation_lock(&tx, WEB).await?,
        LockState::Locked
    );
    // The lock route changes only that column.
    actions::set_remediation_lock(&tx, WEB, false, "user:bob").await?;
    let after = operator_state::get(&tx, WEB).await?.expect("stored");
    assert!(!after.projection.never_auto_remediate);
    assert_eq!(after.projection.criticality, Some(Criticality::High));
    assert!(after.projection.maintenance_window.is_some());
    assert_eq!(
        actions::remediation_lock(&tx, WEB).await?,
        LockState::Unlocked
    );
    assert!(operator_state::clear(&tx, WEB, "user:alice").await?);
    assert!(!operator_state::clear(&tx, WEB, "user:alice").await?);
    assert_eq!(operator_state::get(&tx, WEB).await?, None);
    let kinds: Vec<String> = audit::list(&tx, 0, 100)
        .await?
        .into_iter()
        .filter(|r| r.subject == WEB)
        .map(|r| r.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            "resource.operator_state",
            "resource.remediation_lock",
            "resource.operator_state_cleared"
        ]
    );
    operator_state::put(&tx, WEB, &input, "user:alice").await?;
    tx.commit().await?;

    // Another tenant sees nothing of it, and its own lock is its own.
    let tx = db.store().tenant_tx(&globex).await?;
    assert_eq!(operator_state::get(&tx, WEB).await?, None);
    assert_eq!(
        actions::remediation_lock(&tx, WEB).await?,
        LockState::Unlocked
    );
    assert!(!operator_state::clear(&tx, WEB, "user:eve").await?);
    tx.commit().await?;
    let tx = db.store().tenant_tx(&acme).await?;
    assert!(operator_state::get(&tx, WEB).await?.is_some());
    tx.commit().await?;
    Ok(())
}

#[tokio::test]
async fn the_database_refuses_a_window_ending_before_it_starts() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let now = Utc::now();
    let tx = db.store().tenant_tx(&acme).await?;
    let input = OperatorStateInput {
        projection: OperatorStateProjection {
            // Built without the domain check, as a careless writer would.
            maintenance_window: Some(MaintenanceWindow {
                starts_at: Some(now),
                ends_at: now - Duration::minutes(1),
            }),
            ..Default::default()
        },
        note: String::new(),
    };
    assert!(
        operator_state::put(&tx, WEB, &input, "user:alice")
            .await
            .is_err()
    );
    Ok(())
}

#[tokio::test]
async fn findings_follow_the_operator_state_of_their_resource() -> anyhow::Result<()> {
    let (db, acme, globex) = setup().await?;
    let t0 = Utc::now();
    let store = db.store();

    // An active finding, then maintenance is set: it is dismissed at once.
    let tx = store.tenant_tx(&acme).await?;
    let first = findings::report(&tx, &reported(), None, t0).await?;
    assert_eq!(first.finding.finding.status, FindingStatus::Active);
    let id = first.finding.finding.id;
    let window = MaintenanceWindow::new(None, t0 + Duration::hours(1))?;
    operator_state::put(
        &tx,
        WEB,
        &OperatorStateInput {
            projection: OperatorStateProjection {
                maintenance_window: Some(window),
                ..Default::default()
            },
            note: String::new(),
        },
        "user:alice",
    )
    .await?;
    let cause = SuppressionCause::MaintenanceWindow {
        ends_at: window.ends_at,
    };
    assert_eq!(
        findings::apply_operator_state(&tx, WEB, cause, t0).await?,
        [id]
    );
    tx.commit().await?;

    // Another tenant's identical finding is untouched by acme's state.
    let tx = store.tenant_tx(&globex).await?;
    let theirs = findings::report(&tx, &reported(), None, t0).await?;
    assert_eq!(theirs.finding.finding.status, FindingStatus::Active);
    assert!(
        findings::apply_operator_state(&tx, "nothing-here", cause, t0)
            .await?
            .is_empty()
    );
    tx.commit().await?;

    let tx = store.tenant_tx(&acme).await?;
    let held = findings::get(&tx, id).await?.expect("kept for audit");
    assert_eq!(held.finding.status, FindingStatus::Dismissed);
    assert_eq!(
        held.finding.dismissed_reason,
        Some(DismissedReason::ExpectedBehavior)
    );
    let dismissed = held.finding.lifecycle.last().expect("event");
    assert_eq!(dismissed.event_type, LifecycleEventType::Dismissed);
    assert_eq!(
        dismissed.metadata["operator_state_cause"],
        "maintenance_window"
    );
    assert_eq!(
        dismissed.metadata["maintenance_end_at"],
        window.ends_at.to_rfc3339()
    );

    // Re-detected inside the window: a heartbeat, still dismissed.
    let again = findings::report(&tx, &reported(), None, t0 + Duration::minutes(5)).await?;
    assert_eq!(again.finding.finding.status, FindingStatus::Dismissed);
    assert_eq!(again.finding.finding.times_raised, 2);

    // Re-detected after the window: woken with `suppression_lifted`.
    let woken = findings::report(&tx, &reported(), None, t0 + Duration::hours(2)).await?;
    assert_eq!(woken.finding.finding.status, FindingStatus::Active);
    let lifted = woken.finding.finding.lifecycle.last().expect("event");
    assert_eq!(lifted.event_type, LifecycleEventType::SuppressionLifted);

    // Intentionally offline now, and the operator dismisses by hand afterwards.
    operator_state::put(
        &tx,
        WEB,
        &OperatorStateInput {
            projection: OperatorStateProjection {
                intentionally_offline: true,
                ..Default::default()
            },
            note: String::new(),
        },
        "user:alice",
    )
    .await?;
    let offline = findings::report(&tx, &reported(), None, t0 + Duration::hours(3)).await?;
    assert_eq!(offline.finding.finding.status, FindingStatus::Dismissed);
    let event = offline.finding.finding.lifecycle.last().expect("event");
    assert_eq!(
        event.metadata["operator_state_cause"],
        "intentionally_offline"
    );
    assert!(!event.metadata.contains_key("maintenance_end_at"));
    let at = t0 + Duration::hours(4);
    findings::operator_action(
        &tx,
        id,
        &OperatorAction::UndoDismiss,
        "user:alice",
        None,
        at,
    )
    .await?;
    findings::operator_action(
        &tx,
        id,
        &OperatorAction::Dismiss {
            reason: DismissedReason::NotAnIssue,
            note: String::new(),
        },
        "user:alice",
        None,
        at,
    )
    .await?;
    assert!(operator_state::clear(&tx, WEB, "user:alice").await?);
    // Re-detected with nothing set: the manual dismissal stands.
    let later = findings::report(&tx, &reported(), None, t0 + Duration::hours(5)).await?;
    assert_eq!(later.finding.finding.status, FindingStatus::Dismissed);
    assert_eq!(
        later.finding.finding.dismissed_reason,
        Some(DismissedReason::NotAnIssue)
    );
    tx.commit().await?;
    Ok(())
}
