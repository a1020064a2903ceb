//! Outbox figures: rows enqueued per second in transactions, and rows per second through the
//! relay (claimed, published with ack, marked).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use pulse_bus::{Message, OutboxRelay, OutboxRow, RelayConfig, StreamSettings, Subjects, enqueue};
use pulse_domain::TenantId;
use pulse_test_support::db::TestDb;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::figure;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ResourceChanged {
    resource_id: String,
    seq: u64,
    detail: String,
}

impl Message for ResourceChanged {
    const TYPE: &'static str = "bench.resource_changed";
}

const ROWS_PER_TRANSACTION: usize = 100;

pub async fn run(args: &crate::BenchArgs) -> anyhow::Result<()> {
    let rows = if args.quick { 1_000 } else { 20_000 };
    let db = TestDb::create()
        .await
        .context("creating the bench database")?;
    let prefix = format!("bench{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let subjects = Subjects::try_new(Some(&prefix))?;
    let client = pulse_bus::async_nats::connect(args.nats_url.as_str())
        .await
        .with_context(|| format!("connecting to {}", args.nats_url))?;
    let js = pulse_bus::async_nats::jetstream::new(client);

    let result = measure(&db, &js, &subjects, rows).await;
    if let Err(err) = pulse_bus::streams::delete_streams(&js, &subjects).await {
        eprintln!("outbox bench: stream clean-up failed: {err}");
    }
    if let Err(err) = db.cleanup().await {
        eprintln!("outbox bench: database clean-up failed: {err}");
    }
    result
}

async fn measure(
    db: &TestDb,
    js: &pulse_bus::async_nats::jetstream::Context,
    subjects: &Subjects,
    rows: usize,
) -> anyhow::Result<()> {
    pulse_bus::ensure_streams_with(js, subjects, &StreamSettings::small()).await?;
    let tenant = TenantId::new("bench")?;
    db.owner_client()
        .await?
        .execute(
            "INSERT INTO tenants (id, name) VALUES ($1, 'Bench') ON CONFLICT DO NOTHING",
            &[&tenant.as_str()],
        )
        .await?;

    let pool = db.app_pool();
    let started = Instant::now();
    {
        let mut conn = pool.get().await?;
        let mut seq = 0u64;
        while (seq as usize) < rows {
            let tx = conn.transaction().await?;
            for _ in 0..ROWS_PER_TRANSACTION.min(rows - seq as usize) {
                let row = OutboxRow::event(
                    subjects,
                    &tenant,
                    "resource",
                    "changed",
                    &ResourceChanged {
                        resource_id: format!("host-{}", seq % 50),
                        seq,
                        detail: "x".repeat(200),
                    },
                )?;
                enqueue(&*tx, row).await?;
                seq += 1;
            }
            tx.commit().await?;
        }
    }
    let elapsed = started.elapsed();
    figure(
        "outbox",
        "enqueue rows/s (100 rows per tx)",
        rows as f64 / elapsed.as_secs_f64(),
        "rows/s",
    );

    let relay = OutboxRelay::new(
        pool.clone(),
        js.clone(),
        RelayConfig {
            batch_size: 200,
            interval: Duration::from_millis(20),
            max_backoff: Duration::from_secs(1),
        },
    );
    let stop = CancellationToken::new();
    let owner = db.owner_client().await?;
    let started = Instant::now();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move { relay.run(stop).await }
    });
    let deadline = Duration::from_secs(if rows > 5_000 { 600 } else { 60 });
    loop {
        let left: i64 = owner
            .query_one(
                "SELECT count(*) FROM outbox WHERE published_at IS NULL",
                &[],
            )
            .await?
            .get(0);
        if left == 0 {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < deadline,
            "relay did not drain the outbox within {deadline:?} ({left} rows left)"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let elapsed = started.elapsed();
    stop.cancel();
    task.await?;
    figure("outbox", "relay rows", rows as f64, "n");
    figure(
        "outbox",
        "relay rows/s (published, acked, marked)",
        rows as f64 / elapsed.as_secs_f64(),
        "rows/s",
    );

    let stored = js
        .get_stream(subjects.events_stream())
        .await?
        .get_info()
        .await?
        .state
        .messages;
    anyhow::ensure!(
        stored == rows as u64,
        "stream holds {stored} messages for {rows} rows"
    );
    Ok(())
}
