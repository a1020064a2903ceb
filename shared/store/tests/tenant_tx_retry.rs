//! `Store::retry_tenant_tx` against the real Postgres: a transaction that fails with a
//! serialization failure is run again in a fresh transaction (the failed runs leave nothing
//! behind), a real deadlock between two tenant transactions ends with both committed, the retries
//! stop at the bound with the last error, and any other error is returned after one run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use chrono::Utc;
use pulse_domain::TenantId;
use pulse_domain::backoff::Backoff;
use pulse_domain::patrol::run::RunId;
use pulse_providers::Usage;
use pulse_providers::registry::RouteClass;
use pulse_store::cost_ledger::{self, LedgerCall};
use pulse_store::patrol_runs::ApplyError;
use pulse_store::{StoreError, TenantTx, TxRetry, tenants};
use pulse_test_support::db::TestDb;
use tokio::sync::Barrier;
use tokio_postgres::error::SqlState;

/// Three runs at most, with pauses short enough for a test.
fn three_runs() -> TxRetry {
    TxRetry {
        attempts: 3,
        backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(5)),
    }
}

/// Makes the server fail the current statement with `code`, as it does for a real conflict.
async fn server_error(tx: &TenantTx, code: &str) -> Result<(), StoreError> {
    tx.client()
        .batch_execute(&format!(
            "DO $$ BEGIN RAISE EXCEPTION 'forced by the test' USING ERRCODE = '{code}'; END $$"
        ))
        .await?;
    Ok(())
}

/// One ledger row in `tx`, so a test can see which runs committed.
async fn write_row(tx: &TenantTx, run_id: &str) -> Result<(), StoreError> {
    cost_ledger::record(
        tx,
        &LedgerCall {
            occurred_at: Utc::now(),
            surface: "patrol",
            route: "ollama:llama3.2",
            provider: "ollama",
            model: "llama3.2",
            route_class: RouteClass::LocalModelServer,
            usage: Usage::new(1, 1),
            cost_usd: None,
            run_id: Some(run_id),
        },
    )
    .await?;
    Ok(())
}

async fn setup() -> anyhow::Result<(TestDb, TenantId)> {
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    tenants::create(db.store(), &acme, "Acme").await?;
    Ok((db, acme))
}

async fn rows_of(db: &TestDb, tenant: &TenantId, run_id: &str) -> anyhow::Result<u64> {
    let tx = db.store().tenant_tx(tenant).await?;
    let calls = cost_ledger::run_totals(&tx, run_id).await?.calls;
    tx.rollback().await?;
    Ok(calls)
}

#[tokio::test]
async fn a_serialization_failure_runs_the_transaction_again_until_it_commits() -> anyhow::Result<()>
{
    let (db, acme) = setup().await?;
    let runs = AtomicU32::new(0);
    let written = db
        .store()
        .retry_tenant_tx(&acme, &three_runs(), |tx| {
            let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                write_row(&tx, "serialization").await?;
                if run < 3 {
                    server_error(&tx, "40001").await?;
                }
                tx.commit().await?;
                Ok::<_, StoreError>(run)
            }
        })
        .await?;
    assert_eq!(written, 3, "the third run committed");
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert_eq!(
        rows_of(&db, &acme, "serialization").await?,
        1,
        "the failed runs were rolled back"
    );
    db.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn two_deadlocked_tenant_transactions_both_commit() -> anyhow::Result<()> {
    let (db, acme) = setup().await?;
    // Both first runs hold their first lock before either asks for its second: a real deadlock,
    // which the server breaks by failing one of them with deadlock_detected.
    let both_hold_one = Arc::new(Barrier::new(2));
    let runs = Arc::new(AtomicU32::new(0));
    let deadlocked = |first: i64, second: i64| {
        let (store, tenant) = (db.store().clone(), acme.clone());
        let (both_hold_one, runs) = (both_hold_one.clone(), runs.clone());
        tokio::spawn(async move {
            let mut run = 0;
            store
                .retry_tenant_tx(&tenant, &three_runs(), |tx| {
                    run += 1;
                    let this_run = run;
                    let (both_hold_one, runs) = (both_hold_one.clone(), runs.clone());
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        let lock = "SELECT pg_advisory_xact_lock($1)";
                        tx.client().execute(lock, &[&first]).await?;
                        if this_run == 1 {
                            both_hold_one.wait().await;
                        }
                        tx.client().execute(lock, &[&second]).await?;
                        write_row(&tx, "deadlock").await?;
                        tx.commit().await?;
                        Ok::<_, StoreError>(this_run)
                    }
                })
                .await
        })
    };
    let (a, b) = (deadlocked(1, 2), deadlocked(2, 1));
    let (a, b) = (a.await??, b.await??);
    let mut committed_at = [a, b];
    committed_at.sort_unstable();
    assert_eq!(
        committed_at,
        [1, 2],
        "one committed at once, the deadlock's victim on its second run"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert_eq!(rows_of(&db, &acme, "deadlock").await?, 2);
    db.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn retries_stop_at_the_bound_with_the_last_error() -> anyhow::Result<()> {
    let (db, acme) = setup().await?;
    let runs = AtomicU32::new(0);
    let result = db
        .store()
        .retry_tenant_tx(&acme, &three_runs(), |tx| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move {
                write_row(&tx, "bound").await?;
                server_error(&tx, "40001").await?;
                tx.commit().await?;
                Ok::<_, StoreError>(())
            }
        })
        .await;
    let error = result.expect_err("every run failed");
    assert_eq!(
        error.sql_state(),
        Some(&SqlState::T_R_SERIALIZATION_FAILURE)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 3, "three runs, no more");
    assert_eq!(rows_of(&db, &acme, "bound").await?, 0);
    db.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn other_errors_end_after_one_run() -> anyhow::Result<()> {
    let (db, acme) = setup().await?;
    // A store error that would fail the same way again.
    let runs = AtomicU32::new(0);
    let result = db
        .store()
        .retry_tenant_tx(&acme, &three_runs(), |tx| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move {
                server_error(&tx, "23505").await?;
                tx.commit().await?;
                Ok::<_, StoreError>(())
            }
        })
        .await;
    assert!(result.expect_err("refused").is_unique_violation());
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // The body's own refusal.
    let runs = AtomicU32::new(0);
    let missing = RunId::from_uuid(uuid::Uuid::nil());
    let result = db
        .store()
        .retry_tenant_tx(&acme, &three_runs(), |tx| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move {
                drop(tx);
                Err::<(), _>(ApplyError::NotFound(missing))
            }
        })
        .await;
    assert!(matches!(result, Err(ApplyError::NotFound(id)) if id == missing));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    db.cleanup().await?;
    Ok(())
}
