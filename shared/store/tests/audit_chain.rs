//! The audit chain: appends verify, and any tampering is named by row.

use pulse_domain::TenantId;
use pulse_store::audit::{self, AuditEntry, ChainBreak};
use pulse_store::tenants;
use pulse_test_support::db::TestDb;
use serde_json::json;

fn entry(i: usize) -> AuditEntry {
    AuditEntry {
        actor: format!("user:{}", i % 7),
        kind: "test.event".to_owned(),
        subject: format!("subject-{i}"),
        payload: json!({"i": i, "note": "ünïcode ✓", "nested": {"b": 1, "a": [1.5, null]}}),
    }
}

async fn tenant_with_chain(db: &TestDb, id: &str, rows: usize) -> anyhow::Result<TenantId> {
    let tenant = TenantId::new(id)?;
    tenants::create(db.store(), &tenant, id).await?;
    for i in 0..rows {
        let tx = db.store().tenant_tx(&tenant).await?;
        let record = audit::append(&tx, &entry(i)).await?;
        assert_eq!(record.seq, i as i64 + 1);
        tx.commit().await?;
    }
    Ok(tenant)
}

async fn verify(db: &TestDb, tenant: &TenantId) -> anyhow::Result<audit::VerifyReport> {
    let tx = db.store().tenant_tx(tenant).await?;
    let report = audit::verify(&tx).await?;
    tx.commit().await?;
    Ok(report)
}

/// Runs SQL as the owner with triggers off, the way an attacker with database access would.
async fn tamper(db: &TestDb, sql: &str) -> anyhow::Result<()> {
    let owner = db.owner_client().await?;
    owner
        .batch_execute(&format!(
            "BEGIN; SET LOCAL session_replication_role = replica; {sql}; COMMIT;"
        ))
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_thousand_appends_verify() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let tenant = tenant_with_chain(&db, "acme", 1_000).await?;
    let report = verify(&db, &tenant).await?;
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.rows_checked, 1_000);
    db.cleanup().await
}

#[tokio::test]
async fn altering_any_row_is_reported_at_that_row() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let tenant = tenant_with_chain(&db, "acme", 1_000).await?;
    let cases = [
        (
            1,
            "UPDATE audit_events SET payload = '{\"i\": 0}' WHERE seq = 1",
            ChainBreak::RowHashMismatch,
        ),
        (
            500,
            "UPDATE audit_events SET actor = 'user:mallory' WHERE seq = 500",
            ChainBreak::RowHashMismatch,
        ),
        (
            731,
            "UPDATE audit_events SET occurred_at = occurred_at + interval '1 second' WHERE seq = 731",
            ChainBreak::RowHashMismatch,
        ),
        (
            1_000,
            "UPDATE audit_events SET kind = 'test.other' WHERE seq = 1000",
            ChainBreak::RowHashMismatch,
        ),
    ];
    // Keep a pristine copy so each tamper is judged on its own.
    let owner = db.owner_client().await?;
    owner
        .batch_execute("CREATE TABLE audit_backup AS SELECT * FROM audit_events")
        .await?;
    for (seq, sql, reason) in cases {
        tamper(&db, sql).await?;
        let report = verify(&db, &tenant).await?;
        let broken = report.first_broken.expect("tampering must be detected");
        assert_eq!((broken.seq, broken.reason), (seq, reason), "after: {sql}");
        tamper(
            &db,
            "DELETE FROM audit_events; INSERT INTO audit_events SELECT * FROM audit_backup",
        )
        .await?;
        assert!(
            verify(&db, &tenant).await?.is_intact(),
            "restored after: {sql}"
        );
    }
    db.cleanup().await
}

#[tokio::test]
async fn deleting_rows_is_reported() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let tenant = tenant_with_chain(&db, "acme", 20).await?;
    tamper(&db, "DELETE FROM audit_events WHERE seq = 20").await?;
    let report = verify(&db, &tenant).await?;
    assert_eq!(
        report.first_broken.map(|b| (b.seq, b.reason)),
        Some((20, ChainBreak::HeadMismatch))
    );
    tamper(&db, "DELETE FROM audit_events WHERE seq = 7").await?;
    let report = verify(&db, &tenant).await?;
    assert_eq!(
        report.first_broken.map(|b| (b.seq, b.reason)),
        Some((7, ChainBreak::MissingRow))
    );
    db.cleanup().await
}

#[tokio::test]
async fn rewriting_a_row_and_its_hash_breaks_the_next_link() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let tenant = tenant_with_chain(&db, "acme", 10).await?;
    // An attacker who recomputes row 4's hash still cannot make row 5 chain from it.
    tamper(
        &db,
        "UPDATE audit_events SET row_hash = sha256('forged'::bytea) WHERE seq = 4",
    )
    .await?;
    let report = verify(&db, &tenant).await?;
    assert_eq!(
        report.first_broken.map(|b| (b.seq, b.reason)),
        Some((4, ChainBreak::RowHashMismatch))
    );
    db.cleanup().await
}

#[tokio::test]
async fn the_application_role_cannot_change_or_delete_audit_rows() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let tenant = tenant_with_chain(&db, "acme", 3).await?;
    let tx = db.store().tenant_tx(&tenant).await?;
    let update = tx
        .client()
        .execute("UPDATE audit_events SET actor = 'x' WHERE seq = 1", &[])
        .await;
    assert!(update.is_err(), "update must be refused");
    drop(tx);
    let tx = db.store().tenant_tx(&tenant).await?;
    let delete = tx.client().execute("DELETE FROM audit_events", &[]).await;
    assert!(delete.is_err(), "delete must be refused");
    drop(tx);
    // The owner is stopped by the trigger unless triggers are disabled.
    let owner = db.owner_client().await?;
    assert!(
        owner
            .execute("DELETE FROM audit_events", &[])
            .await
            .is_err()
    );
    assert!(verify(&db, &tenant).await?.is_intact());
    db.cleanup().await
}

#[tokio::test]
async fn concurrent_appends_stay_gap_free() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let tenant = tenant_with_chain(&db, "acme", 0).await?;
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let store = db.store().clone();
        let tenant = tenant.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..25 {
                let tx = store.tenant_tx(&tenant).await?;
                audit::append(&tx, &entry(worker * 100 + i)).await?;
                tx.commit().await?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let report = verify(&db, &tenant).await?;
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.rows_checked, 200);
    db.cleanup().await
}
