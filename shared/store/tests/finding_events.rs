//! The finding store's lifecycle events against real Postgres: each finding change puts one
//! `events.finding.created|updated|resolved` row in the outbox of its own transaction, on the
//! store's subjects and the writer's tenant; a rolled-back change leaves no row; a heartbeat
//! re-detection that changes nothing a reader sees publishes nothing.

use chrono::{Duration, Utc};
use pulse_bus::Subjects;
use pulse_bus::events::{FindingChange, FindingChanged};
use pulse_domain::TenantId;
use pulse_domain::finding::{
    Category, DismissedReason, FindingId, FindingStatus, LifecycleEventType, OperatorAction,
    ReportedFinding, Severity,
};
use pulse_store::{Store, findings, tenants};
use pulse_test_support::db::TestDb;

const PREFIX: &str = "fevents";

async fn setup() -> anyhow::Result<(TestDb, Store, TenantId, TenantId)> {
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    let globex = TenantId::new("globex")?;
    tenants::create(db.store(), &acme, "Acme").await?;
    tenants::create(db.store(), &globex, "Globex").await?;
    let store = db
        .store()
        .clone()
        .with_subjects(Subjects::try_new(Some(PREFIX))?);
    Ok((db, store, acme, globex))
}

fn reported(key: &str, severity: Severity) -> ReportedFinding {
    ReportedFinding {
        key: key.to_owned(),
        severity,
        category: Category::Performance,
        resource_id: "app-container:h1:web".to_owned(),
        resource_name: "web".to_owned(),
        resource_type: "app-container".to_owned(),
        title: "Web container CPU saturated".to_owned(),
        description: "cpu above 95% for 20 minutes".to_owned(),
        recommendation: "profile the request handler".to_owned(),
        evidence: "cpu_percent=97 over 20m".to_owned(),
        impact: String::new(),
    }
}

/// The finding events in the outbox, oldest first: (tenant, subject, payload).
async fn events(db: &TestDb) -> anyhow::Result<Vec<(String, String, FindingChanged)>> {
    let client = db.owner_client().await?;
    let rows = client
        .query(
            "SELECT tenant_id, subject, payload FROM outbox
             WHERE message_type = 'pulse.finding.changed' ORDER BY id",
            &[],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let payload: serde_json::Value = row.get(2);
            Ok((row.get(0), row.get(1), serde_json::from_value(payload)?))
        })
        .collect()
}

async fn report(
    store: &Store,
    tenant: &TenantId,
    finding: &ReportedFinding,
    at: chrono::DateTime<Utc>,
) -> anyhow::Result<FindingId> {
    let tx = store.tenant_tx(tenant).await?;
    let outcome = findings::report(&tx, finding, None, at).await?;
    tx.commit().await?;
    Ok(outcome.finding.finding.id)
}

async fn act(
    store: &Store,
    tenant: &TenantId,
    id: FindingId,
    action: OperatorAction,
) -> anyhow::Result<()> {
    let tx = store.tenant_tx(tenant).await?;
    findings::operator_action(&tx, id, &action, "ops", None, Utc::now()).await?;
    tx.commit().await?;
    Ok(())
}

#[tokio::test]
async fn each_change_enqueues_its_event_in_its_transaction() -> anyhow::Result<()> {
    let (db, store, acme, globex) = setup().await?;
    let subjects = store.subjects().clone();
    let t0 = Utc::now();
    let id = report(&store, &acme, &reported("cpu-high", Severity::Warning), t0).await?;

    let created = events(&db).await?;
    assert_eq!(created.len(), 1, "{created:?}");
    let (tenant, subject, event) = &created[0];
    assert_eq!(tenant, "acme");
    assert_eq!(subject, &subjects.event(&acme, "finding", "created"));
    assert_eq!(event.change, FindingChange::Created);
    assert_eq!(event.finding_id, id);
    assert_eq!(event.key.as_str(), "cpu-high");
    assert_eq!(event.resource_id, "app-container:h1:web");
    assert_eq!(event.severity, Severity::Warning);
    assert_eq!(event.category, Category::Performance);
    assert_eq!(event.status, FindingStatus::Active);
    assert_eq!(event.title, "Web container CPU saturated");
    assert_eq!(event.lifecycle_event, Some(LifecycleEventType::Detected));
    assert_eq!(event.version, 1);

    // A heartbeat re-detection: only last_seen_at moves, nothing to tell.
    report(
        &store,
        &acme,
        &reported("cpu-high", Severity::Warning),
        t0 + Duration::minutes(5),
    )
    .await?;
    assert_eq!(events(&db).await?.len(), 1);

    // A re-detection at a higher severity changed something a reader sees.
    report(
        &store,
        &acme,
        &reported("cpu-high", Severity::Critical),
        t0 + Duration::minutes(10),
    )
    .await?;
    act(&store, &acme, id, OperatorAction::Acknowledge).await?;
    act(
        &store,
        &acme,
        id,
        OperatorAction::Note {
            text: "looking".to_owned(),
        },
    )
    .await?;
    act(
        &store,
        &acme,
        id,
        OperatorAction::Dismiss {
            reason: DismissedReason::NotAnIssue,
            note: "expected load".to_owned(),
        },
    )
    .await?;
    act(&store, &acme, id, OperatorAction::UndoDismiss).await?;
    act(
        &store,
        &acme,
        id,
        OperatorAction::Resolve {
            note: "scaled out".to_owned(),
        },
    )
    .await?;
    // Back after it resolved: a regression is created again.
    report(
        &store,
        &acme,
        &reported("cpu-high", Severity::Critical),
        t0 + Duration::minutes(20),
    )
    .await?;

    let all = events(&db).await?;
    let seen: Vec<(FindingChange, Option<LifecycleEventType>, FindingStatus)> = all
        .iter()
        .map(|(_, _, e)| (e.change, e.lifecycle_event, e.status))
        .collect();
    use FindingChange::{Created, Resolved, Updated};
    use FindingStatus::{Active, Dismissed};
    assert_eq!(
        seen,
        [
            (Created, Some(LifecycleEventType::Detected), Active),
            (Updated, None, Active),
            (Updated, Some(LifecycleEventType::Acknowledged), Active),
            (Updated, Some(LifecycleEventType::UserNoteUpdated), Active),
            (Updated, Some(LifecycleEventType::Dismissed), Dismissed),
            (Updated, Some(LifecycleEventType::Undismissed), Active),
            (
                Resolved,
                Some(LifecycleEventType::Resolved),
                FindingStatus::Resolved
            ),
            (Created, Some(LifecycleEventType::Regressed), Active),
        ]
    );
    assert_eq!(all[1].2.severity, Severity::Critical);
    for (tenant, subject, event) in &all {
        assert_eq!(tenant, "acme");
        let (domain, name) = event.change.event();
        assert_eq!(subject, &subjects.event(&acme, domain, name));
    }
    // Versions climb with the finding's: a reader can tell the newest.
    assert!(all.windows(2).all(|w| w[0].2.version < w[1].2.version));

    // Another tenant's change is enqueued under that tenant, never under acme.
    report(
        &store,
        &globex,
        &reported("disk-full", Severity::Warning),
        t0,
    )
    .await?;
    let all = events(&db).await?;
    let (tenant, subject, _) = all.last().expect("globex event");
    assert_eq!(tenant, "globex");
    assert_eq!(subject, &subjects.event(&globex, "finding", "created"));
    assert_eq!(all.iter().filter(|(t, _, _)| t == "globex").count(), 1);
    db.cleanup().await
}

#[tokio::test]
async fn a_rolled_back_change_publishes_nothing() -> anyhow::Result<()> {
    let (db, store, acme, _) = setup().await?;
    let tx = store.tenant_tx(&acme).await?;
    let outcome = findings::report(
        &tx,
        &reported("mem-high", Severity::Warning),
        None,
        Utc::now(),
    )
    .await?;
    // Inside the transaction the event is there, next to the finding ...
    let pending: i64 = tx
        .client()
        .query_one(
            "SELECT count(*) FROM outbox WHERE message_type = 'pulse.finding.changed'",
            &[],
        )
        .await?
        .get(0);
    assert_eq!(pending, 1);
    tx.rollback().await?;
    // ... and it goes with the finding.
    assert!(events(&db).await?.is_empty());
    let tx = store.tenant_tx(&acme).await?;
    assert!(
        findings::get(&tx, outcome.finding.finding.id)
            .await?
            .is_none()
    );
    tx.commit().await?;

    // A refused action writes neither the change nor an event.
    let id = report(
        &store,
        &acme,
        &reported("mem-high", Severity::Warning),
        Utc::now(),
    )
    .await?;
    let before = events(&db).await?.len();
    let tx = store.tenant_tx(&acme).await?;
    let refused = findings::operator_action(
        &tx,
        id,
        &OperatorAction::UndoSuppress,
        "ops",
        None,
        Utc::now(),
    )
    .await;
    assert!(refused.is_err());
    tx.rollback().await?;
    assert_eq!(events(&db).await?.len(), before);
    db.cleanup().await
}
