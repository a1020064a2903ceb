//! A Watch job that dead-letters must not leave its run `queued` (which blocks the tenant's full
//! runs): [`end_dead_lettered`] ends a queued run `error` (`internal`, the detail saying the job
//! failed repeatedly) with its `events.run.completed` in the outbox, and leaves running and
//! terminal runs alone. Real Postgres.

use std::time::Duration;

use chrono::Utc;
use pulse_bus::Subjects;
use pulse_domain::TenantId;
use pulse_domain::patrol::run::{ErrorCause, PatrolRun, RunId, RunStatus, RunType, TriggerReason};
use pulse_model_runner::watch::end_dead_lettered;
use pulse_store::{patrol_runs, tenants};
use pulse_test_support::db::TestDb;

const REASON: &str = "the watch job failed repeatedly and was dead-lettered: database unavailable";

async fn queued(db: &TestDb, tenant: &TenantId) -> anyhow::Result<RunId> {
    let run = PatrolRun::queued(
        patrol_runs::new_run_id(),
        TriggerReason::Manual,
        RunType::Full,
        Utc::now(),
    );
    let tx = db.store().tenant_tx(tenant).await?;
    anyhow::ensure!(patrol_runs::insert_queued(&tx, &run, None).await?);
    tx.commit().await?;
    Ok(run.id)
}

async fn get(db: &TestDb, tenant: &TenantId, id: RunId) -> anyhow::Result<PatrolRun> {
    let tx = db.store().tenant_tx(tenant).await?;
    let run = patrol_runs::get(&tx, id).await?;
    tx.commit().await?;
    run.ok_or_else(|| anyhow::anyhow!("run {id} not found"))
}

async fn completed_events(db: &TestDb, id: RunId) -> anyhow::Result<usize> {
    let client = db.owner_client().await?;
    let rows = client
        .query(
            "SELECT 1 FROM outbox WHERE subject LIKE '%run.completed%' AND payload::text LIKE $1",
            &[&format!("%{id}%")],
        )
        .await?;
    Ok(rows.len())
}

#[tokio::test]
async fn a_dead_lettered_job_ends_its_queued_run_and_nothing_else() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let tenant = TenantId::new("acme")?;
    tenants::create(db.store(), &tenant, "Acme").await?;
    let subjects = Subjects::new(None);

    // Queued: ended error/internal with the detail, its completion event enqueued.
    let id = queued(&db, &tenant).await?;
    let ended = end_dead_lettered(db.store(), &subjects, &tenant, id, REASON).await?;
    let ended = ended.expect("a queued run is ended");
    assert_eq!(ended.status, RunStatus::Error);
    let stored = get(&db, &tenant, id).await?;
    assert_eq!(stored.status, RunStatus::Error);
    assert_eq!(stored.error_cause, Some(ErrorCause::Internal));
    assert!(
        stored
            .error_detail
            .as_deref()
            .is_some_and(|d| d.contains("failed repeatedly")),
        "{stored:?}"
    );
    assert_eq!(completed_events(&db, id).await?, 1);
    // The tenant is no longer blocked: no current (queued or running) run remains.
    let tx = db.store().tenant_tx(&tenant).await?;
    assert!(patrol_runs::current(&tx).await?.is_none());
    tx.commit().await?;

    // Already terminal: untouched, no second event.
    assert!(
        end_dead_lettered(db.store(), &subjects, &tenant, id, REASON)
            .await?
            .is_none()
    );
    assert_eq!(completed_events(&db, id).await?, 1);

    // Running: left to its lease holder and the sweeper.
    let running = queued(&db, &tenant).await?;
    let tx = db.store().tenant_tx(&tenant).await?;
    patrol_runs::start(
        &tx,
        running,
        "runner-a",
        Duration::from_secs(30),
        Utc::now(),
        None,
    )
    .await?;
    tx.commit().await?;
    assert!(
        end_dead_lettered(db.store(), &subjects, &tenant, running, REASON)
            .await?
            .is_none()
    );
    let still = get(&db, &tenant, running).await?;
    assert_eq!(still.status, RunStatus::Running);
    assert_eq!(completed_events(&db, running).await?, 0);

    // An unknown run: nothing to do.
    let unknown = patrol_runs::new_run_id();
    assert!(
        end_dead_lettered(db.store(), &subjects, &tenant, unknown, REASON)
            .await?
            .is_none()
    );

    db.cleanup().await
}
