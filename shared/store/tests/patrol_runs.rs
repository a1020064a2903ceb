//! Patrol run records against real Postgres: the compare-and-swap that allows exactly one
//! terminal write per run, idempotent acceptance, listing order and limits, the status reads,
//! and tenant isolation.

use std::sync::Arc;

use chrono::{Duration, Utc};
use pulse_domain::TenantId;
use pulse_domain::patrol::run::{
    ErrorCause, PatrolRun, RunEvent, RunId, RunStatus, RunType, TriggerReason,
};
use pulse_store::patrol_runs::{self, ApplyError, MAX_LIST_LIMIT};
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

fn run(run_type: RunType, queued_minutes_ago: i64) -> PatrolRun {
    PatrolRun::queued(
        patrol_runs::new_run_id(),
        TriggerReason::Manual,
        run_type,
        Utc::now() - Duration::minutes(queued_minutes_ago),
    )
}

async fn insert(store: &Store, tenant: &TenantId, run: &PatrolRun) -> anyhow::Result<bool> {
    let tx = store.tenant_tx(tenant).await?;
    let inserted = patrol_runs::insert_queued(&tx, run, Some("ops-token")).await?;
    tx.commit().await?;
    Ok(inserted)
}

async fn apply(
    store: &Store,
    tenant: &TenantId,
    id: RunId,
    event: RunEvent,
) -> Result<PatrolRun, ApplyError> {
    let tx = store.tenant_tx(tenant).await?;
    let result = patrol_runs::apply(&tx, id, event, Utc::now(), Some("detail")).await;
    if result.is_ok() {
        tx.commit().await?;
    }
    result
}

#[tokio::test]
async fn insert_is_idempotent_and_round_trips_the_record() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let mut queued = run(RunType::Scoped, 0);
    queued.scope_resource_ids = vec!["web".to_owned()];
    queued.effective_scope_resource_ids = vec!["service:h1:web".to_owned()];
    assert!(insert(db.store(), &acme, &queued).await?);
    let mut again = queued.clone();
    again.scope_resource_ids = vec!["other".to_owned()];
    assert!(
        !insert(db.store(), &acme, &again).await?,
        "a second insert of the same id writes nothing"
    );

    let tx = db.store().tenant_tx(&acme).await?;
    let stored = patrol_runs::get(&tx, queued.id).await?.expect("stored");
    assert_eq!(stored.scope_resource_ids, vec!["web"]);
    assert_eq!(stored.effective_scope_resource_ids, vec!["service:h1:web"]);
    assert_eq!(stored.status, RunStatus::Queued);
    assert_eq!(
        stored.queued_at.timestamp_micros(),
        queued.queued_at.timestamp_micros()
    );
    assert!(
        patrol_runs::get(&tx, RunId::from_uuid(Uuid::new_v4()))
            .await?
            .is_none()
    );
    tx.commit().await?;
    db.cleanup().await
}

#[tokio::test]
async fn apply_follows_the_state_machine_and_refuses_events_on_terminal_runs() -> anyhow::Result<()>
{
    let (db, acme, _) = setup().await?;
    let full = run(RunType::Full, 0);
    insert(db.store(), &acme, &full).await?;

    let started = apply(db.store(), &acme, full.id, RunEvent::Started).await?;
    assert_eq!(started.status, RunStatus::Running);
    assert!(started.started_at.is_some());

    let done = apply(
        db.store(),
        &acme,
        full.id,
        RunEvent::Completed { issues_found: true },
    )
    .await?;
    assert_eq!(done.status, RunStatus::IssuesFound);
    assert!(done.completed_at.is_some() && done.duration_ms.is_some());

    for event in [
        RunEvent::Started,
        RunEvent::RunnerLost,
        RunEvent::Completed {
            issues_found: false,
        },
    ] {
        match apply(db.store(), &acme, full.id, event).await {
            Err(ApplyError::Illegal(illegal)) => assert_eq!(illegal.from, RunStatus::IssuesFound),
            other => panic!("expected an illegal transition, got {other:?}"),
        }
    }
    let tx = db.store().tenant_tx(&acme).await?;
    let stored = patrol_runs::get(&tx, full.id).await?.expect("stored");
    assert_eq!(stored.status, RunStatus::IssuesFound);
    assert_eq!(stored.completed_at, done.completed_at);
    tx.commit().await?;

    let unknown = RunId::from_uuid(Uuid::new_v4());
    assert!(matches!(
        apply(db.store(), &acme, unknown, RunEvent::Started).await,
        Err(ApplyError::NotFound(id)) if id == unknown
    ));
    db.cleanup().await
}

/// Many writers race `completed` against `runner_lost` on one running run: exactly one
/// commits, every other one gets a typed conflict or illegal transition, and the stored record
/// holds the winner's terminal status.
#[tokio::test]
async fn concurrent_terminal_events_write_exactly_once() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let store = Arc::new(db.store().clone());
    for round in 0..5 {
        let queued = run(RunType::Full, 0);
        insert(&store, &acme, &queued).await?;
        apply(&store, &acme, queued.id, RunEvent::Started).await?;

        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..16 {
            let store = store.clone();
            let tenant = acme.clone();
            let event = if i % 2 == 0 {
                RunEvent::Completed {
                    issues_found: false,
                }
            } else {
                RunEvent::RunnerLost
            };
            tasks.spawn(async move { (event, apply(&store, &tenant, queued.id, event).await) });
        }
        let mut winners = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            let (event, result) = joined?;
            match result {
                Ok(run) => winners.push((event, run.status)),
                Err(ApplyError::Conflict { expected, .. }) => {
                    assert_eq!(expected, RunStatus::Running)
                }
                Err(ApplyError::Illegal(illegal)) => assert!(illegal.from.is_terminal()),
                Err(other) => panic!("unexpected error: {other}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let (event, status) = winners[0];
        let expected = match event {
            RunEvent::RunnerLost => RunStatus::Error,
            _ => RunStatus::Healthy,
        };
        assert_eq!(status, expected);
        let tx = store.tenant_tx(&acme).await?;
        let stored = patrol_runs::get(&tx, queued.id).await?.expect("stored");
        tx.commit().await?;
        assert_eq!(stored.status, expected);
        assert_eq!(stored.error_count, u32::from(expected == RunStatus::Error));
        if expected == RunStatus::Error {
            assert_eq!(stored.error_cause, Some(ErrorCause::RunnerLost));
        }
    }
    db.cleanup().await
}

#[tokio::test]
async fn list_is_newest_first_and_limited() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let mut ids = Vec::new();
    for minutes_ago in (0..5).rev() {
        let r = run(RunType::Full, minutes_ago);
        insert(db.store(), &acme, &r).await?;
        ids.push(r.id);
    }
    ids.reverse();
    let tx = db.store().tenant_tx(&acme).await?;
    let all: Vec<RunId> = patrol_runs::list(&tx, patrol_runs::DEFAULT_LIST_LIMIT)
        .await?
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(all, ids);
    let two: Vec<RunId> = patrol_runs::list(&tx, 2)
        .await?
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(two, ids[..2]);
    assert_eq!(patrol_runs::list(&tx, 0).await?.len(), 1, "clamped up to 1");
    assert_eq!(
        patrol_runs::list(&tx, MAX_LIST_LIMIT + 1000).await?.len(),
        5
    );
    tx.commit().await?;
    db.cleanup().await
}

#[tokio::test]
async fn status_reads_find_current_and_last_runs() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let tx = db.store().tenant_tx(&acme).await?;
    assert!(patrol_runs::current(&tx).await?.is_none());
    assert!(patrol_runs::last_full_run(&tx).await?.is_none());
    assert!(patrol_runs::last_activity_at(&tx).await?.is_none());
    tx.commit().await?;

    let ok_full = run(RunType::Full, 30);
    insert(db.store(), &acme, &ok_full).await?;
    apply(db.store(), &acme, ok_full.id, RunEvent::Started).await?;
    let ok_done = apply(
        db.store(),
        &acme,
        ok_full.id,
        RunEvent::Completed {
            issues_found: false,
        },
    )
    .await?;
    let failed_full = run(RunType::Full, 20);
    insert(db.store(), &acme, &failed_full).await?;
    let failed = apply(
        db.store(),
        &acme,
        failed_full.id,
        RunEvent::Failed {
            cause: ErrorCause::NotReady,
        },
    )
    .await?;
    let scoped = run(RunType::Scoped, 10);
    insert(db.store(), &acme, &scoped).await?;
    let older_queued = run(RunType::Full, 15);
    insert(db.store(), &acme, &older_queued).await?;

    let tx = db.store().tenant_tx(&acme).await?;
    assert_eq!(
        patrol_runs::current(&tx).await?.map(|r| r.id),
        Some(scoped.id),
        "the newest non-terminal run"
    );
    assert_eq!(patrol_runs::queued_scoped(&tx).await?, 1);
    let last_full = patrol_runs::last_full_run(&tx).await?.expect("a full run");
    assert_eq!(last_full.id, failed_full.id);
    assert_eq!(last_full.error_cause, Some(ErrorCause::NotReady));
    assert_eq!(
        patrol_runs::last_successful_full_run(&tx)
            .await?
            .map(|r| r.id),
        Some(ok_full.id)
    );
    assert_eq!(
        patrol_runs::last_activity_at(&tx).await?,
        failed.completed_at
    );
    assert!(ok_done.completed_at < failed.completed_at);
    tx.commit().await?;
    db.cleanup().await
}

#[tokio::test]
async fn runs_are_isolated_per_tenant() -> anyhow::Result<()> {
    let (db, acme, globex) = setup().await?;
    let acme_run = run(RunType::Full, 0);
    insert(db.store(), &acme, &acme_run).await?;

    let tx = db.store().tenant_tx(&globex).await?;
    assert!(patrol_runs::get(&tx, acme_run.id).await?.is_none());
    assert!(patrol_runs::list(&tx, 30).await?.is_empty());
    assert!(patrol_runs::current(&tx).await?.is_none());
    tx.commit().await?;
    assert!(matches!(
        apply(db.store(), &globex, acme_run.id, RunEvent::Started).await,
        Err(ApplyError::NotFound(_))
    ));
    // The same id in another tenant is another run.
    assert!(insert(db.store(), &globex, &acme_run).await?);
    apply(db.store(), &globex, acme_run.id, RunEvent::Started).await?;
    let tx = db.store().tenant_tx(&acme).await?;
    assert_eq!(
        patrol_runs::get(&tx, acme_run.id).await?.map(|r| r.status),
        Some(RunStatus::Queued)
    );
    tx.commit().await?;
    db.cleanup().await
}
