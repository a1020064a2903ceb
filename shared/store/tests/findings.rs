//! The finding store against real Postgres: new findings, heartbeat re-detection, the merge of an
//! equivalent sibling, distinct symptoms, regression, the fail-closed verifier gate, stale
//! reconciliation, operator actions and suppression, tenant isolation, the 50-event bound, and
//! concurrent writers racing on the compare-and-swap.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use pulse_domain::TenantId;
use pulse_domain::finding::{
    AssessRefusal, Category, DismissedReason, FindingId, FindingStatus, LifecycleEventType,
    OperatorAction, ReportKind, ReportedFinding, RunOutcome, Severity, SuppressBreadth, Verdict,
    VerdictInput, VerifierKey, VerifierOutcome,
};
use pulse_domain::patrol::run::RunId;
use pulse_store::findings::{self, FindingsError, ListFilter, ReportOutcome, StoredFinding};
use pulse_store::{Store, tenants};
use pulse_test_support::db::TestDb;
use uuid::Uuid;

async fn setup() -> anyhow::Result<(TestDb, TenantId, TenantId)> {
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    let globex = TenantId::new("globex")?;
    tenants::create(db.store(), &acme, "Acme").await?;
    tenants::create(db.store(), &globex, "Globex").await?;
    Ok((db, acme, globex))
}

fn run() -> RunId {
    RunId::from_uuid(Uuid::new_v4())
}

fn reported(key: &str, category: Category) -> ReportedFinding {
    ReportedFinding {
        key: key.to_owned(),
        severity: Severity::Warning,
        category,
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

async fn report_at(
    store: &Store,
    tenant: &TenantId,
    finding: &ReportedFinding,
    at: DateTime<Utc>,
) -> anyhow::Result<ReportOutcome> {
    let tx = store.tenant_tx(tenant).await?;
    let outcome = findings::report(&tx, finding, Some(run()), at).await?;
    tx.commit().await?;
    Ok(outcome)
}

async fn report(
    store: &Store,
    tenant: &TenantId,
    finding: &ReportedFinding,
) -> anyhow::Result<ReportOutcome> {
    report_at(store, tenant, finding, Utc::now()).await
}

async fn get(store: &Store, tenant: &TenantId, id: FindingId) -> anyhow::Result<StoredFinding> {
    let tx = store.tenant_tx(tenant).await?;
    let found = findings::get(&tx, id).await?;
    tx.commit().await?;
    found.ok_or_else(|| anyhow::anyhow!("finding {id} not found"))
}

async fn list(
    store: &Store,
    tenant: &TenantId,
    filter: ListFilter,
) -> anyhow::Result<Vec<StoredFinding>> {
    let tx = store.tenant_tx(tenant).await?;
    let all = findings::list(&tx, filter, None, Utc::now()).await?;
    tx.commit().await?;
    Ok(all)
}

async fn act(
    store: &Store,
    tenant: &TenantId,
    id: FindingId,
    action: OperatorAction,
    expected_version: Option<i64>,
) -> Result<StoredFinding, FindingsError> {
    let tx = store.tenant_tx(tenant).await?;
    let result =
        findings::operator_action(&tx, id, &action, "ops", expected_version, Utc::now()).await;
    if result.is_ok() {
        tx.commit().await?;
    }
    result
}

async fn assess(
    store: &Store,
    tenant: &TenantId,
    id: FindingId,
    verdict: Verdict,
    verifier: VerifierOutcome,
    run_id: RunId,
) -> Result<StoredFinding, FindingsError> {
    let input = VerdictInput {
        verdict,
        evidence: "cpu_percent=8 over 10m".to_owned(),
        reason: "load back to normal".to_owned(),
    };
    let tx = store.tenant_tx(tenant).await?;
    let result = findings::assess(&tx, id, &input, verifier, run_id, Utc::now()).await;
    if result.is_ok() {
        tx.commit().await?;
    }
    result
}

fn event_types(stored: &StoredFinding) -> Vec<LifecycleEventType> {
    stored
        .finding
        .lifecycle
        .iter()
        .map(|e| e.event_type)
        .collect()
}

#[tokio::test]
async fn a_new_report_creates_one_active_finding_with_a_detected_event() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let outcome = report(
        db.store(),
        &acme,
        &reported("high-cpu", Category::Performance),
    )
    .await?;
    assert!(outcome.is_new());
    assert_eq!(outcome.finding.version, 1);
    let stored = get(db.store(), &acme, outcome.reported_id).await?;
    assert_eq!(stored.finding.key.as_str(), "cpu-high", "key normalized");
    assert_eq!(stored.finding.status, FindingStatus::Active);
    assert_eq!(stored.finding.times_raised, 1);
    assert_eq!(event_types(&stored), [LifecycleEventType::Detected]);
    assert_eq!(stored, outcome.finding, "what was written is what is read");

    // Invalid reports are refused and write nothing.
    let mut bad = reported("cpu-high", Category::Performance);
    bad.severity = Severity::Info;
    let tx = db.store().tenant_tx(&acme).await?;
    let refused = findings::report(&tx, &bad, None, Utc::now()).await;
    assert!(
        matches!(refused, Err(FindingsError::Report(_))),
        "{refused:?}"
    );
    drop(tx);
    assert_eq!(
        list(db.store(), &acme, ListFilter::IncludeResolved)
            .await?
            .len(),
        1
    );
    Ok(())
}

#[tokio::test]
async fn a_redetection_is_a_heartbeat_without_lifecycle_events() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let first = report(
        db.store(),
        &acme,
        &reported("cpu-high", Category::Performance),
    )
    .await?;
    let mut again = reported("cpu-high", Category::Performance);
    again.title = "CPU saturated in the web container".to_owned();
    again.description = "cpu above 99%".to_owned();
    let second = report(db.store(), &acme, &again).await?;
    assert_eq!(second.kind, ReportKind::Redetected);
    assert_eq!(second.reported_id, first.reported_id);
    let stored = get(db.store(), &acme, first.reported_id).await?;
    assert_eq!(stored.version, 2);
    assert_eq!(stored.finding.times_raised, 2);
    assert_eq!(stored.finding.description, "cpu above 99%");
    assert!(stored.finding.last_seen_at >= first.finding.finding.last_seen_at);
    assert_eq!(
        event_types(&stored),
        [LifecycleEventType::Detected],
        "no second `detected` event for a heartbeat"
    );
    Ok(())
}

#[tokio::test]
async fn an_equivalent_sibling_is_merged_into_one_row() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let first = report(
        db.store(),
        &acme,
        &reported("cpu-high", Category::Performance),
    )
    .await?;
    let mut sibling = reported("cpu-pressure", Category::Performance);
    sibling.severity = Severity::Critical;
    sibling.title = "CPU pressure on web".to_owned();
    let merged = report(db.store(), &acme, &sibling).await?;
    assert_eq!(merged.kind, ReportKind::Merged);
    assert_eq!(merged.finding.finding.id, first.reported_id);
    assert_ne!(merged.reported_id, first.reported_id);

    let all = list(db.store(), &acme, ListFilter::IncludeResolved).await?;
    assert_eq!(all.len(), 1, "no second row");
    let stored = &all[0];
    assert_eq!(
        stored.finding.severity,
        Severity::Critical,
        "highest severity kept"
    );
    assert_eq!(stored.finding.recurrence, 1);
    assert_eq!(
        event_types(stored),
        [
            LifecycleEventType::Detected,
            LifecycleEventType::DuplicateMerged
        ]
    );
    let tx = db.store().tenant_tx(&acme).await?;
    assert!(findings::get(&tx, merged.reported_id).await?.is_none());
    Ok(())
}

#[tokio::test]
async fn distinct_symptoms_on_one_resource_stay_separate() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let cpu = report(
        db.store(),
        &acme,
        &reported("cpu-high", Category::Performance),
    )
    .await?;
    let mut memory = reported("memory-high", Category::Performance);
    memory.title = "Memory pressure on web".to_owned();
    let mem = report(db.store(), &acme, &memory).await?;
    let restarts = report(
        db.store(),
        &acme,
        &reported("restart-loop", Category::Reliability),
    )
    .await?;
    for outcome in [&cpu, &mem, &restarts] {
        assert!(outcome.is_new());
    }
    let active = list(db.store(), &acme, ListFilter::Active).await?;
    assert_eq!(active.len(), 3);
    Ok(())
}

#[tokio::test]
async fn a_resolved_finding_regresses_on_redetection() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let first = report(
        db.store(),
        &acme,
        &reported("pbs-job-failed", Category::Reliability),
    )
    .await?;
    let id = first.reported_id;
    act(db.store(), &acme, id, OperatorAction::Acknowledge, None).await?;
    // pbs-job-failed has no deterministic verifier: the model's evidence resolves it.
    let resolved = assess(
        db.store(),
        &acme,
        id,
        Verdict::Resolved,
        VerifierOutcome::NotRun,
        run(),
    )
    .await?;
    assert_eq!(resolved.finding.status, FindingStatus::Resolved);
    assert!(resolved.finding.auto_resolved);
    assert!(
        list(db.store(), &acme, ListFilter::Active)
            .await?
            .is_empty()
    );

    let again = report(
        db.store(),
        &acme,
        &reported("pbs-job-failed", Category::Reliability),
    )
    .await?;
    assert_eq!(again.kind, ReportKind::Regressed);
    let stored = get(db.store(), &acme, id).await?;
    assert_eq!(stored.finding.status, FindingStatus::Active);
    assert_eq!(stored.finding.regression_count, 1);
    assert_eq!(
        stored.finding.acknowledged_at, None,
        "regression clears the ack"
    );
    assert_eq!(stored.finding.resolved_at, None);
    assert_eq!(
        event_types(&stored),
        [
            LifecycleEventType::Detected,
            LifecycleEventType::Acknowledged,
            LifecycleEventType::AutoResolved,
            LifecycleEventType::Regressed
        ]
    );
    Ok(())
}

#[tokio::test]
async fn resolved_verdict_is_refused_until_the_verifier_confirms() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let first = report(
        db.store(),
        &acme,
        &reported("cpu-high", Category::Performance),
    )
    .await?;
    let id = first.reported_id;
    for (outcome, want) in [
        (
            VerifierOutcome::StillPresent,
            AssessRefusal::StillPresent(VerifierKey::CpuHigh),
        ),
        (
            VerifierOutcome::Inconclusive,
            AssessRefusal::Inconclusive(VerifierKey::CpuHigh),
        ),
        (
            VerifierOutcome::NotRun,
            AssessRefusal::VerifierNotRun(VerifierKey::CpuHigh),
        ),
    ] {
        match assess(db.store(), &acme, id, Verdict::Resolved, outcome, run()).await {
            Err(FindingsError::Assess(refusal)) => assert_eq!(refusal, want),
            other => panic!("expected a refusal for {outcome:?}, got {other:?}"),
        }
        let stored = get(db.store(), &acme, id).await?;
        assert_eq!(stored.finding.status, FindingStatus::Active, "{outcome:?}");
        assert_eq!(stored.version, 1, "a refusal writes nothing");
    }
    let resolved = assess(
        db.store(),
        &acme,
        id,
        Verdict::Resolved,
        VerifierOutcome::Confirmed,
        run(),
    )
    .await?;
    assert_eq!(resolved.finding.status, FindingStatus::Resolved);
    let stored = get(db.store(), &acme, id).await?;
    assert_eq!(stored.finding.status, FindingStatus::Resolved);
    assert_eq!(
        event_types(&stored).last(),
        Some(&LifecycleEventType::AutoResolved)
    );

    let missing = assess(
        db.store(),
        &acme,
        "0000000000000000".parse()?,
        Verdict::Present,
        VerifierOutcome::NotRun,
        run(),
    )
    .await;
    assert!(matches!(missing, Err(FindingsError::NotFound(_))));
    Ok(())
}

#[tokio::test]
async fn stale_reconcile_resolves_only_eligible_findings_after_a_successful_full_run()
-> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let seeded_at = Utc::now() - Duration::hours(1);
    let seed = |key: &str, category| {
        let mut r = reported(key, category);
        r.title = format!("{key} on web");
        r
    };
    let stale_cpu = report_at(
        db.store(),
        &acme,
        &seed("cpu-high", Category::Performance),
        seeded_at,
    )
    .await?
    .reported_id;
    let stale_disk = report_at(
        db.store(),
        &acme,
        &seed("disk-high", Category::Capacity),
        seeded_at,
    )
    .await?
    .reported_id;
    let reliability = report_at(
        db.store(),
        &acme,
        &seed("restart-loop", Category::Reliability),
        seeded_at,
    )
    .await?
    .reported_id;
    let touched = report_at(
        db.store(),
        &acme,
        &seed("memory-high", Category::Performance),
        seeded_at,
    )
    .await?
    .reported_id;
    let uncertain = report_at(
        db.store(),
        &acme,
        &seed("swap-high", Category::Performance),
        seeded_at,
    )
    .await?
    .reported_id;

    let full_run = run();
    assess(
        db.store(),
        &acme,
        uncertain,
        Verdict::Uncertain,
        VerifierOutcome::NotRun,
        full_run,
    )
    .await?;

    let reconcile = |outcome: RunOutcome| {
        let store = db.store().clone();
        let acme = acme.clone();
        async move {
            let tx = store.tenant_tx(&acme).await?;
            let ids =
                findings::reconcile_stale(&tx, &outcome, &HashSet::from([touched]), Utc::now())
                    .await?;
            tx.commit().await?;
            anyhow::Ok(ids)
        }
    };
    // No reconciliation after an error run or a scoped run.
    assert!(
        reconcile(RunOutcome::Error { run_id: run() })
            .await?
            .is_empty()
    );
    assert!(
        reconcile(RunOutcome::SuccessfulScoped { run_id: run() })
            .await?
            .is_empty()
    );
    assert_eq!(list(db.store(), &acme, ListFilter::Active).await?.len(), 5);

    let mut resolved = reconcile(RunOutcome::SuccessfulFull {
        run_id: full_run,
        started_at: Utc::now() - Duration::minutes(5),
    })
    .await?;
    resolved.sort();
    let mut want = vec![stale_cpu, stale_disk];
    want.sort();
    assert_eq!(resolved, want);
    for id in [stale_cpu, stale_disk] {
        let stored = get(db.store(), &acme, id).await?;
        assert_eq!(stored.finding.status, FindingStatus::Resolved);
        assert!(stored.finding.auto_resolved);
    }
    for id in [reliability, touched, uncertain] {
        assert_eq!(
            get(db.store(), &acme, id).await?.finding.status,
            FindingStatus::Active
        );
    }
    Ok(())
}

#[tokio::test]
async fn operator_actions_and_suppression_rules() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let store = db.store();
    let cpu = report(store, &acme, &reported("cpu-high", Category::Performance)).await?;
    let id = cpu.reported_id;

    let snoozed = act(
        store,
        &acme,
        id,
        OperatorAction::Snooze {
            duration_seconds: 3600,
        },
        None,
    )
    .await?;
    assert_eq!(snoozed.finding.status, FindingStatus::Snoozed);
    assert!(list(store, &acme, ListFilter::Active).await?.is_empty());

    let dismissed = act(
        store,
        &acme,
        id,
        OperatorAction::Dismiss {
            reason: DismissedReason::WillFixLater,
            note: "after the migration".to_owned(),
        },
        None,
    )
    .await?;
    let remind_at = dismissed.finding.remind_at.expect("will_fix_later reminds");
    assert!(remind_at - Utc::now() > Duration::days(6));
    let undone = act(store, &acme, id, OperatorAction::UndoDismiss, None).await?;
    assert_eq!(undone.finding.status, FindingStatus::Active);

    // A narrow suppression silences the finding; a broad one needs allow_broad_scope.
    let broad = act(
        store,
        &acme,
        id,
        OperatorAction::Suppress {
            breadth: SuppressBreadth::CategoryOnAllResources,
            allow_broad_scope: false,
        },
        None,
    )
    .await;
    assert!(
        matches!(broad, Err(FindingsError::Operator(_))),
        "{broad:?}"
    );
    let suppressed = act(
        store,
        &acme,
        id,
        OperatorAction::Suppress {
            breadth: SuppressBreadth::ResourceAndCategory,
            allow_broad_scope: false,
        },
        None,
    )
    .await?;
    assert_eq!(suppressed.finding.status, FindingStatus::Suppressed);
    let tx = store.tenant_tx(&acme).await?;
    assert_eq!(findings::suppressions(&tx).await?.len(), 1);
    drop(tx);

    // A new report on the suppressed resource and category is held by the rule.
    let mut swap = reported("swap-high", Category::Performance);
    swap.title = "Swap thrashing".to_owned();
    let held = report(store, &acme, &swap).await?;
    assert!(held.is_new());
    assert_eq!(held.finding.finding.status, FindingStatus::Suppressed);

    // Undo lifts the rule and releases every finding it held.
    let lifted = act(store, &acme, id, OperatorAction::UndoSuppress, None).await?;
    assert_eq!(lifted.finding.status, FindingStatus::Active);
    assert_eq!(
        get(store, &acme, held.reported_id).await?.finding.status,
        FindingStatus::Active
    );
    let tx = store.tenant_tx(&acme).await?;
    assert!(findings::suppressions(&tx).await?.is_empty());
    drop(tx);

    let resolved = act(
        store,
        &acme,
        id,
        OperatorAction::Resolve {
            note: "moved to a bigger host".to_owned(),
        },
        None,
    )
    .await?;
    assert_eq!(resolved.finding.status, FindingStatus::Resolved);
    assert!(!resolved.finding.auto_resolved);
    let illegal = act(store, &acme, id, OperatorAction::Acknowledge, None).await;
    assert!(
        matches!(illegal, Err(FindingsError::Operator(_))),
        "{illegal:?}"
    );
    Ok(())
}

#[tokio::test]
async fn another_tenant_sees_nothing() -> anyhow::Result<()> {
    let (db, acme, globex) = setup().await?;
    let finding = reported("cpu-high", Category::Performance);
    let ours = report(db.store(), &acme, &finding).await?;
    act(
        db.store(),
        &acme,
        ours.reported_id,
        OperatorAction::Suppress {
            breadth: SuppressBreadth::ResourceAndCategory,
            allow_broad_scope: false,
        },
        None,
    )
    .await?;

    let tx = db.store().tenant_tx(&globex).await?;
    assert!(findings::get(&tx, ours.reported_id).await?.is_none());
    assert!(
        findings::list(&tx, ListFilter::IncludeResolved, None, Utc::now())
            .await?
            .is_empty()
    );
    assert!(findings::suppressions(&tx).await?.is_empty());
    let events: i64 = tx
        .client()
        .query_one("SELECT count(*) FROM finding_events", &[])
        .await?
        .get(0);
    assert_eq!(events, 0);
    let acted = findings::operator_action(
        &tx,
        ours.reported_id,
        &OperatorAction::Acknowledge,
        "intruder",
        None,
        Utc::now(),
    )
    .await;
    assert!(matches!(acted, Err(FindingsError::NotFound(_))));
    drop(tx);

    // The same report in the other tenant is its own finding (same id, separate row), and the
    // first tenant's suppression does not reach it.
    let theirs = report(db.store(), &globex, &finding).await?;
    assert!(theirs.is_new());
    assert_eq!(theirs.reported_id, ours.reported_id);
    assert_eq!(theirs.finding.finding.status, FindingStatus::Active);
    assert_eq!(
        get(db.store(), &acme, ours.reported_id)
            .await?
            .finding
            .status,
        FindingStatus::Suppressed
    );
    Ok(())
}

#[tokio::test]
async fn lifecycle_events_are_bounded_at_fifty() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let id = report(
        db.store(),
        &acme,
        &reported("cpu-high", Category::Performance),
    )
    .await?
    .reported_id;
    for n in 0..60 {
        act(
            db.store(),
            &acme,
            id,
            OperatorAction::Note {
                text: format!("note {n}"),
            },
            None,
        )
        .await?;
    }
    let stored = get(db.store(), &acme, id).await?;
    assert_eq!(stored.finding.lifecycle.len(), 50);
    assert_eq!(stored.finding.user_note, "note 59");
    assert!(
        stored
            .finding
            .lifecycle
            .iter()
            .all(|e| e.event_type == LifecycleEventType::UserNoteUpdated),
        "the oldest (detected and the first notes) were dropped"
    );
    let tx = db.store().tenant_tx(&acme).await?;
    let (count, min_seq, max_seq): (i64, i64, i64) = {
        let row = tx
            .client()
            .query_one(
                "SELECT count(*), min(seq), max(seq) FROM finding_events WHERE finding_id = $1",
                &[&id.as_hex()],
            )
            .await?;
        (row.get(0), row.get(1), row.get(2))
    };
    assert_eq!((count, min_seq, max_seq), (50, 12, 61));
    Ok(())
}

#[tokio::test]
async fn concurrent_writers_never_lose_an_update() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let store = Arc::new(db.store().clone());
    let finding = reported("cpu-high", Category::Performance);
    const REPORTS: usize = 6;
    const NOTES: usize = 6;
    let mut tasks = Vec::new();
    for _ in 0..REPORTS {
        let (store, acme, finding) = (store.clone(), acme.clone(), finding.clone());
        tasks.push(tokio::spawn(async move {
            report(&store, &acme, &finding).await.map(|o| o.kind)
        }));
    }
    let results = futures_join(tasks).await?;
    let new = results.iter().filter(|k| **k == ReportKind::New).count();
    assert_eq!(
        new, 1,
        "exactly one report created the finding: {results:?}"
    );
    let id = FindingId::derive(
        &finding.resource_id,
        finding.category,
        &pulse_domain::finding::FindingKey::normalize(&finding.key)?,
    );

    // Operator notes race with more reports on the same row: every write lands exactly once.
    let mut tasks = Vec::new();
    for n in 0..NOTES {
        let (note_store, note_acme) = (store.clone(), acme.clone());
        tasks.push(tokio::spawn(async move {
            act(
                &note_store,
                &note_acme,
                id,
                OperatorAction::Note {
                    text: format!("note {n}"),
                },
                None,
            )
            .await
            .map(|_| ReportKind::Redetected)
            .map_err(anyhow::Error::from)
        }));
        let (store, acme, finding) = (store.clone(), acme.clone(), finding.clone());
        tasks.push(tokio::spawn(async move {
            report(&store, &acme, &finding).await.map(|o| o.kind)
        }));
    }
    futures_join(tasks).await?;

    let stored = get(&store, &acme, id).await?;
    assert_eq!(stored.finding.times_raised as usize, REPORTS + NOTES);
    assert_eq!(
        stored.version as usize,
        REPORTS + NOTES + NOTES,
        "one version per write"
    );
    assert_eq!(
        stored
            .finding
            .lifecycle
            .iter()
            .filter(|e| e.event_type == LifecycleEventType::UserNoteUpdated)
            .count(),
        NOTES
    );
    assert_eq!(
        list(&store, &acme, ListFilter::IncludeResolved)
            .await?
            .len(),
        1
    );

    // A caller naming a stale version is refused, not merged.
    let stale = act(
        &store,
        &acme,
        id,
        OperatorAction::Acknowledge,
        Some(stored.version - 1),
    )
    .await;
    match stale {
        Err(FindingsError::Conflict {
            expected, found, ..
        }) => assert_eq!((expected, found), (stored.version - 1, stored.version)),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let acked = act(
        &store,
        &acme,
        id,
        OperatorAction::Acknowledge,
        Some(stored.version),
    )
    .await?;
    assert_eq!(acked.version, stored.version + 1);
    Ok(())
}

async fn futures_join(
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<ReportKind>>>,
) -> anyhow::Result<Vec<ReportKind>> {
    let mut out = Vec::new();
    for task in tasks {
        out.push(task.await??);
    }
    Ok(out)
}
