//! Audit append and verify throughput.

use std::time::Instant;

use pulse_domain::TenantId;
use pulse_store::audit::{self, AuditEntry};
use pulse_test_support::db::TestDb;
use serde_json::json;

use crate::{BenchArgs, figure};

fn entry(i: usize) -> AuditEntry {
    AuditEntry {
        actor: "service:bench".to_owned(),
        kind: "bench.appended".to_owned(),
        subject: format!("subject-{i}"),
        payload: json!({"i": i, "detail": "a typical small payload", "values": [1, 2, 3]}),
    }
}

pub async fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let n = if args.quick { 200 } else { 5_000 };
    let db = TestDb::create().await?;
    let tenant = TenantId::new("bench")?;
    pulse_store::tenants::create(db.store(), &tenant, "bench").await?;

    // One transaction per append: the shape of real callers.
    let start = Instant::now();
    for i in 0..n {
        let tx = db.store().tenant_tx(&tenant).await?;
        audit::append(&tx, &entry(i)).await?;
        tx.commit().await?;
    }
    let secs = start.elapsed().as_secs_f64();
    figure(
        "audit",
        "append rows/s (1 row per tx)",
        n as f64 / secs,
        "rows/s",
    );

    // Many appends in one transaction.
    let start = Instant::now();
    let tx = db.store().tenant_tx(&tenant).await?;
    for i in 0..n {
        audit::append(&tx, &entry(n + i)).await?;
    }
    tx.commit().await?;
    let secs = start.elapsed().as_secs_f64();
    figure(
        "audit",
        "append rows/s (batched in one tx)",
        n as f64 / secs,
        "rows/s",
    );

    let start = Instant::now();
    let tx = db.store().tenant_tx(&tenant).await?;
    let report = audit::verify(&tx).await?;
    tx.commit().await?;
    let secs = start.elapsed().as_secs_f64();
    anyhow::ensure!(report.is_intact(), "chain broken in bench: {report:?}");
    figure(
        "audit",
        "verify rows/s",
        report.rows_checked as f64 / secs,
        "rows/s",
    );
    db.cleanup().await
}
