//! Run leases against real Postgres: of two runners racing to start a run exactly one holds it;
//! only the holder renews or finishes it; a lapsed lease is found across tenants and ends the
//! run `runner_lost` once, while a renewed one is left alone.

use std::time::Duration;

use chrono::Utc;
use pulse_domain::TenantId;
use pulse_domain::patrol::run::{
    ErrorCause, PatrolRun, RunEvent, RunId, RunStatus, RunType, TriggerReason,
};
use pulse_store::patrol_runs::{self, ApplyError};
use pulse_store::{Store, tenants};
use pulse_test_support::db::TestDb;

const LEASE: Duration = Duration::from_secs(30);

async fn setup() -> anyhow::Result<(TestDb, TenantId, TenantId)> {
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    let globex = TenantId::new("globex")?;
    tenants::create(db.store(), &acme, "Acme").await?;
    tenants::create(db.store(), &globex, "Globex").await?;
    Ok((db, acme, globex))
}

async fn queued(store: &Store, tenant: &TenantId, run_type: RunType) -> anyhow::Result<RunId> {
    let mut run = PatrolRun::queued(
        patrol_runs::new_run_id(),
        TriggerReason::Manual,
        run_type,
        Utc::now(),
    );
    if run_type == RunType::Scoped {
        run.scope_resource_ids = vec!["web".to_owned(), "db".to_owned()];
        run.effective_scope_resource_ids =
            vec!["service:h1:db".to_owned(), "service:h1:web".to_owned()];
    }
    let tx = store.tenant_tx(tenant).await?;
    assert!(patrol_runs::insert_queued(&tx, &run, None).await?);
    tx.commit().await?;
    Ok(run.id)
}

async fn start(
    store: &Store,
    tenant: &TenantId,
    id: RunId,
    runner: &str,
) -> Result<(PatrolRun, patrol_runs::Lease), ApplyError> {
    let tx = store.tenant_tx(tenant).await?;
    let started = patrol_runs::start(&tx, id, runner, LEASE, Utc::now(), None).await;
    if started.is_ok() {
        tx.commit().await?;
    }
    started
}

async fn renew(
    store: &Store,
    tenant: &TenantId,
    id: RunId,
    runner: &str,
) -> anyhow::Result<Option<patrol_runs::Lease>> {
    let tx = store.tenant_tx(tenant).await?;
    let renewed = patrol_runs::renew_lease(&tx, id, runner, LEASE).await?;
    tx.commit().await?;
    Ok(renewed)
}

async fn get(store: &Store, tenant: &TenantId, id: RunId) -> anyhow::Result<PatrolRun> {
    let tx = store.tenant_tx(tenant).await?;
    let run = patrol_runs::get(&tx, id).await?.expect("the run exists");
    tx.commit().await?;
    Ok(run)
}

async fn lapse(db: &TestDb, id: RunId) -> anyhow::Result<()> {
    db.owner_client()
        .await?
        .execute(
            "UPDATE patrol_runs SET lease_expires_at = now() - interval '1 second' WHERE id = $1",
            &[&id.as_uuid()],
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn two_runners_race_to_start_a_run_and_exactly_one_holds_it() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    for _ in 0..5 {
        let id = queued(db.store(), &acme, RunType::Full).await?;
        let (a, b) = tokio::join!(
            start(db.store(), &acme, id, "runner-a"),
            start(db.store(), &acme, id, "runner-b")
        );
        let (winner, loser) = match (a, b) {
            (Ok(won), Err(lost)) => (("runner-a", won), lost),
            (Err(lost), Ok(won)) => (("runner-b", won), lost),
            (a, b) => panic!("exactly one start must win: {a:?} / {b:?}"),
        };
        assert!(
            matches!(
                loser,
                ApplyError::Conflict {
                    found: RunStatus::Running,
                    ..
                } | ApplyError::Illegal(_)
            ),
            "{loser:?}"
        );
        let (name, (run, lease)) = winner;
        assert_eq!(run.status, RunStatus::Running);
        assert_eq!(lease.runner_id, name);
        assert!(lease.expires_at > Utc::now() + chrono::Duration::seconds(20));
        let tx = db.store().tenant_tx(&acme).await?;
        assert_eq!(patrol_runs::lease(&tx, id).await?, Some(lease));
        tx.commit().await?;
        assert!(get(db.store(), &acme, id).await?.started_at.is_some());
    }
    db.cleanup().await
}

#[tokio::test]
async fn only_the_holder_renews_or_finishes_and_the_lease_is_released() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let id = queued(db.store(), &acme, RunType::Full).await?;
    let (_, first) = start(db.store(), &acme, id, "runner-a").await?;

    assert_eq!(renew(db.store(), &acme, id, "runner-b").await?, None);
    let renewed = renew(db.store(), &acme, id, "runner-a")
        .await?
        .expect("the holder renews");
    assert!(renewed.expires_at >= first.expires_at);

    // Progress lands only for the holder.
    let tx = db.store().tenant_tx(&acme).await?;
    let progress = |r: &mut PatrolRun| r.input_tokens = 120;
    assert!(
        patrol_runs::record_progress(&tx, id, "runner-b", progress)
            .await?
            .is_none()
    );
    assert_eq!(
        patrol_runs::record_progress(&tx, id, "runner-a", progress)
            .await?
            .map(|r| r.input_tokens),
        Some(120)
    );
    tx.commit().await?;

    let completed = RunEvent::Completed {
        issues_found: false,
    };
    let tx = db.store().tenant_tx(&acme).await?;
    let not_holder = patrol_runs::finish(
        &tx,
        id,
        Some("runner-b"),
        completed,
        Utc::now(),
        None,
        |_| {},
    )
    .await;
    assert!(
        matches!(
            not_holder,
            Err(ApplyError::Conflict {
                found: RunStatus::Running,
                ..
            })
        ),
        "{not_holder:?}"
    );
    let no_holder = patrol_runs::finish(&tx, id, None, completed, Utc::now(), None, |_| {}).await;
    assert!(
        matches!(no_holder, Err(ApplyError::Store(_))),
        "{no_holder:?}"
    );
    let not_terminal = patrol_runs::finish(
        &tx,
        id,
        Some("runner-a"),
        RunEvent::Started,
        Utc::now(),
        None,
        |_| {},
    )
    .await;
    assert!(not_terminal.is_err());
    let done = patrol_runs::finish(
        &tx,
        id,
        Some("runner-a"),
        completed,
        Utc::now(),
        None,
        |r| {
            r.output_tokens = 40;
            r.ai_analysis = Some("nothing looks wrong".to_owned());
        },
    )
    .await?;
    tx.commit().await?;
    assert_eq!(done.status, RunStatus::Healthy);
    assert_eq!((done.input_tokens, done.output_tokens), (120, 40));

    let stored = get(db.store(), &acme, id).await?;
    assert_eq!(stored, done);
    let tx = db.store().tenant_tx(&acme).await?;
    assert_eq!(patrol_runs::lease(&tx, id).await?, None, "released");
    tx.commit().await?;
    // Ended: the former holder can neither renew nor finish again.
    assert_eq!(renew(db.store(), &acme, id, "runner-a").await?, None);
    let tx = db.store().tenant_tx(&acme).await?;
    let again = patrol_runs::finish(
        &tx,
        id,
        Some("runner-a"),
        RunEvent::Failed {
            cause: ErrorCause::Internal,
        },
        Utc::now(),
        None,
        |_| {},
    )
    .await;
    assert!(matches!(again, Err(ApplyError::Illegal(_))), "{again:?}");
    tx.commit().await?;
    db.cleanup().await
}

#[tokio::test]
async fn a_queued_run_is_refused_without_a_holder_keeping_its_requested_scope() -> anyhow::Result<()>
{
    let (db, acme, _) = setup().await?;
    let id = queued(db.store(), &acme, RunType::Scoped).await?;
    let tx = db.store().tenant_tx(&acme).await?;
    let refused = patrol_runs::finish(
        &tx,
        id,
        None,
        RunEvent::Failed {
            cause: ErrorCause::ScopeEmpty,
        },
        Utc::now(),
        Some("none of the requested resources exists any more"),
        |r| r.effective_scope_resource_ids.clear(),
    )
    .await?;
    tx.commit().await?;
    assert_eq!(refused.status, RunStatus::Error);
    assert_eq!(refused.error_cause, Some(ErrorCause::ScopeEmpty));
    assert_eq!(refused.scope_resource_ids, ["web", "db"]);
    assert!(refused.effective_scope_resource_ids.is_empty());
    assert_eq!(refused.started_at, None);
    let row = db
        .owner_client()
        .await?
        .query_one(
            "SELECT effective_scope_resource_ids, runner_id FROM patrol_runs WHERE id = $1",
            &[&id.as_uuid()],
        )
        .await?;
    let column: Vec<String> = row.get(0);
    let runner: Option<String> = row.get(1);
    assert!(column.is_empty());
    assert_eq!(runner, None);
    db.cleanup().await
}

#[tokio::test]
async fn lapsed_leases_are_found_across_tenants_and_lost_once() -> anyhow::Result<()> {
    let (db, acme, globex) = setup().await?;
    let lapsed_a = queued(db.store(), &acme, RunType::Full).await?;
    let renewed_a = queued(db.store(), &acme, RunType::Full).await?;
    let lapsed_g = queued(db.store(), &globex, RunType::Full).await?;
    start(db.store(), &acme, lapsed_a, "runner-a").await?;
    start(db.store(), &acme, renewed_a, "runner-a").await?;
    start(db.store(), &globex, lapsed_g, "runner-g").await?;
    for id in [lapsed_a, renewed_a, lapsed_g] {
        lapse(&db, id).await?;
    }
    // The holder of one renews before the sweep: its run is no longer lapsed.
    assert!(
        renew(db.store(), &acme, renewed_a, "runner-a")
            .await?
            .is_some()
    );

    let mut expired = patrol_runs::expired_leases(db.store(), 100).await?;
    expired.sort();
    let mut want = vec![(acme.clone(), lapsed_a), (globex.clone(), lapsed_g)];
    want.sort();
    assert_eq!(expired, want);

    // A tenant's transaction cannot lose another tenant's run.
    let tx = db.store().tenant_tx(&acme).await?;
    assert!(
        patrol_runs::lose_expired(&tx, lapsed_g, Utc::now())
            .await?
            .is_none()
    );
    assert!(
        patrol_runs::lose_expired(&tx, renewed_a, Utc::now())
            .await?
            .is_none()
    );
    let lost = patrol_runs::lose_expired(&tx, lapsed_a, Utc::now())
        .await?
        .expect("lapsed");
    tx.commit().await?;
    assert_eq!(lost.status, RunStatus::Error);
    assert_eq!(lost.error_cause, Some(ErrorCause::RunnerLost));
    let tx = db.store().tenant_tx(&acme).await?;
    assert!(
        patrol_runs::lose_expired(&tx, lapsed_a, Utc::now())
            .await?
            .is_none(),
        "once"
    );
    tx.commit().await?;
    assert_eq!(
        patrol_runs::expired_leases(db.store(), 100).await?,
        vec![(globex.clone(), lapsed_g)]
    );
    assert_eq!(
        get(db.store(), &acme, renewed_a).await?.status,
        RunStatus::Running
    );
    db.cleanup().await
}
