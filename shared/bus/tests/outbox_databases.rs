//! Two databases relaying through their outboxes to one NATS server within one duplicate window
//! lose nothing: their row ids are the same (each database counts from 1), their message ids are
//! not, and every row of both arrives in the stream.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{FindingCreated, acme, stream_messages};
use pulse_bus::envelope::{header, headers};
use pulse_bus::{OutboxRelay, OutboxRow, RelayConfig, Subjects, enqueue};
use pulse_test_support::db::TestDb;
use pulse_test_support::nats::TestNats;
use pulse_test_support::wait;
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(30);
const ROWS: u32 = 150;

async fn database() -> anyhow::Result<TestDb> {
    let db = TestDb::create().await?;
    db.owner_client()
        .await?
        .execute(
            "INSERT INTO tenants (id, name) VALUES ('acme', 'Acme') ON CONFLICT DO NOTHING",
            &[],
        )
        .await?;
    Ok(db)
}

/// Writes `ROWS` events `<label>-<n>` in a few transactions; returns their row ids.
async fn write_rows(db: &TestDb, subjects: &Subjects, label: &str) -> anyhow::Result<Vec<i64>> {
    let pool = db.app_pool();
    let mut conn = pool.get().await?;
    let mut ids = Vec::new();
    for chunk in (0..ROWS).collect::<Vec<_>>().chunks(50) {
        let tx = conn.transaction().await?;
        for n in chunk {
            let row = OutboxRow::event(
                subjects,
                &acme(),
                "finding",
                "created",
                &FindingCreated {
                    finding_id: format!("{label}-{n}"),
                    n: *n,
                },
            )?;
            ids.push(enqueue(&*tx, row).await?);
        }
        tx.commit().await?;
    }
    Ok(ids)
}

async fn unpublished(db: &TestDb) -> Option<i64> {
    let row = db
        .owner_client()
        .await
        .ok()?
        .query_one(
            "SELECT count(*) FROM outbox WHERE published_at IS NULL",
            &[],
        )
        .await
        .ok()?;
    Some(row.get(0))
}

#[tokio::test]
async fn two_databases_on_one_stream_lose_no_message() -> anyhow::Result<()> {
    let first = database().await?;
    let second = database().await?;
    let nats = TestNats::connect().await?;
    nats.ensure_streams().await?;
    let subjects = nats.subjects();

    let first_ids = write_rows(&first, &subjects, "first").await?;
    let second_ids = write_rows(&second, &subjects, "second").await?;
    // The situation that used to lose messages: the same row ids in both databases.
    let shared: BTreeSet<i64> = first_ids
        .iter()
        .copied()
        .collect::<BTreeSet<_>>()
        .intersection(&second_ids.iter().copied().collect())
        .copied()
        .collect();
    assert_eq!(shared.len(), ROWS as usize, "both databases count from 1");

    let config = RelayConfig {
        batch_size: 40,
        interval: Duration::from_millis(50),
        max_backoff: Duration::from_secs(1),
    };
    let stop = CancellationToken::new();
    let mut tasks = Vec::new();
    for db in [&first, &second] {
        let relay = OutboxRelay::new(db.app_pool(), nats.jetstream(), config.clone());
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move { relay.run(stop).await }));
    }
    wait::until(DEADLINE, "both outboxes to be relayed", || async {
        (unpublished(&first).await == Some(0) && unpublished(&second).await == Some(0))
            .then_some(())
    })
    .await?;
    stop.cancel();
    for task in tasks {
        task.await?;
    }

    let bus = nats.bus();
    let events = subjects.events_stream();
    assert_eq!(
        stream_messages(&bus, &events).await?,
        u64::from(2 * ROWS),
        "every row of both databases is in the stream"
    );
    // Read the stream back: each row of each database exactly once, each with its own id.
    let stream = bus.jetstream().get_stream(&events).await?;
    let mut seen = BTreeSet::new();
    let mut message_ids = BTreeSet::new();
    for sequence in 1..=u64::from(2 * ROWS) {
        let msg = stream.get_raw_message(sequence).await?;
        let id = header(Some(&msg.headers), headers::MSG_ID)
            .unwrap_or_default()
            .to_owned();
        assert!(id.starts_with("outbox-"), "{id}");
        message_ids.insert(id);
        let decoded = pulse_bus::decode::<FindingCreated>(Some(&msg.headers), &msg.payload)?;
        assert!(
            seen.insert(decoded.payload.finding_id.clone()),
            "{} arrived twice",
            decoded.payload.finding_id
        );
    }
    let expected: BTreeSet<String> = ["first", "second"]
        .iter()
        .flat_map(|label| (0..ROWS).map(move |n| format!("{label}-{n}")))
        .collect();
    assert_eq!(seen, expected);
    assert_eq!(message_ids.len(), 2 * ROWS as usize);

    nats.cleanup().await?;
    first.cleanup().await?;
    second.cleanup().await?;
    Ok(())
}
