//! The transactional outbox and its relay, against a fresh database and the real NATS.

mod common;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use common::{FindingCreated, acme, stream_messages};
use pulse_bus::envelope::{header, headers};
use pulse_bus::outbox::message_id_of;
use pulse_bus::{OutboxRelay, OutboxRow, RelayConfig, Subjects, enqueue};
use pulse_test_support::db::TestDb;
use pulse_test_support::nats::{TestNats, nats_url};
use pulse_test_support::wait;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(20);
const CHILD_DB_ENV: &str = "PULSE_BUS_TEST_RELAY_CHILD_DB";
const CHILD_PREFIX_ENV: &str = "PULSE_BUS_TEST_RELAY_CHILD_PREFIX";
const PUBLISHED_MARKER: &str = "relay-child: published and acked outbox row";

/// The `outbox_relay_child` example, built alongside the tests (`target/<profile>/examples/`).
fn relay_child_binary() -> anyhow::Result<std::path::PathBuf> {
    let path = pulse_test_support::service::bin_dir()?
        .join("examples")
        .join("outbox_relay_child");
    anyhow::ensure!(
        path.is_file(),
        "{} is missing; `cargo test -p pulse-bus` builds it",
        path.display()
    );
    Ok(path)
}

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

fn finding(subjects: &Subjects, n: u32) -> anyhow::Result<OutboxRow> {
    Ok(OutboxRow::event(
        subjects,
        &acme(),
        "finding",
        "created",
        &FindingCreated {
            finding_id: format!("f-{n}"),
            n,
        },
    )?)
}

/// `None`: no such row; `Some(marked)`: whether the relay marked it published.
async fn published(db: &TestDb, id: i64) -> anyhow::Result<Option<bool>> {
    let row = db
        .owner_client()
        .await?
        .query_opt(
            "SELECT published_at IS NOT NULL FROM outbox WHERE id = $1",
            &[&id],
        )
        .await?;
    Ok(row.map(|r| r.get::<_, bool>(0)))
}

fn relay(db: &TestDb, nats: &TestNats) -> OutboxRelay {
    OutboxRelay::new(
        db.app_pool(),
        nats.jetstream(),
        RelayConfig {
            batch_size: 50,
            interval: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        },
    )
}

#[tokio::test]
async fn committed_rows_are_published_and_rolled_back_rows_never() -> anyhow::Result<()> {
    let db = database().await?;
    let nats = TestNats::connect().await?;
    nats.ensure_streams().await?;
    let bus = nats.bus();
    let subjects = nats.subjects();
    let pool = db.app_pool();

    let mut conn = pool.get().await?;
    let tx = conn.transaction().await?;
    let committed = enqueue(&*tx, finding(&subjects, 1)?).await?;
    tx.commit().await?;
    let tx = conn.transaction().await?;
    let rolled_back = enqueue(&*tx, finding(&subjects, 2)?).await?;
    tx.rollback().await?;
    drop(conn);

    let relay = relay(&db, &nats);
    assert_eq!(relay.relay_batch().await?, 1);
    assert_eq!(relay.relay_batch().await?, 0, "nothing left to publish");

    assert_eq!(published(&db, committed).await?, Some(true));
    assert_eq!(
        published(&db, rolled_back).await?,
        None,
        "the row never existed"
    );
    let events = subjects.events_stream();
    assert_eq!(stream_messages(&bus, &events).await?, 1);
    let stream = bus.jetstream().get_stream(&events).await?;
    let msg = stream
        .get_last_raw_message_by_subject(&subjects.event(&acme(), "finding", "created"))
        .await?;
    let h = Some(&msg.headers);
    let expected_id = message_id_of(&db.owner_client().await?, committed)
        .await?
        .expect("the committed row");
    assert!(expected_id.starts_with("outbox-"), "{expected_id}");
    assert_ne!(expected_id, format!("outbox-{committed}"), "not the row id");
    assert_eq!(header(h, headers::MSG_ID), Some(expected_id.as_str()));
    assert_eq!(header(h, headers::TYPE), Some("test.finding_created"));
    assert_eq!(header(h, headers::SCHEMA), Some("v1"));
    assert_eq!(header(h, headers::TENANT), Some("acme"));
    let decoded = pulse_bus::decode::<FindingCreated>(h, &msg.payload)?;
    assert_eq!(
        decoded.payload,
        FindingCreated {
            finding_id: "f-1".to_owned(),
            n: 1
        }
    );

    nats.cleanup().await?;
    db.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn running_relay_wakes_on_notify() -> anyhow::Result<()> {
    let db = database().await?;
    let nats = TestNats::connect().await?;
    nats.ensure_streams().await?;
    let bus = nats.bus();
    let subjects = nats.subjects();
    let notify = Arc::new(Notify::new());
    // A long interval: only the notify can make it fast.
    let relay = OutboxRelay::new(
        db.app_pool(),
        nats.jetstream(),
        RelayConfig {
            batch_size: 50,
            interval: Duration::from_secs(60),
            max_backoff: Duration::from_secs(1),
        },
    )
    .with_notify(notify.clone());
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move { relay.run(stop).await }
    });

    let pool = db.app_pool();
    let mut conn = pool.get().await?;
    let tx = conn.transaction().await?;
    let id = enqueue(&*tx, finding(&subjects, 3)?).await?;
    tx.commit().await?;
    notify.notify_one();

    wait::until(
        Duration::from_secs(5),
        "the notified relay to publish",
        || {
            let db = &db;
            async move { matches!(published(db, id).await, Ok(Some(true))).then_some(()) }
        },
    )
    .await?;
    assert_eq!(stream_messages(&bus, &subjects.events_stream()).await?, 1);

    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), task).await??;
    nats.cleanup().await?;
    db.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn two_relays_publish_every_row_once() -> anyhow::Result<()> {
    let db = database().await?;
    let nats = TestNats::connect().await?;
    nats.ensure_streams().await?;
    let bus = nats.bus();
    let subjects = nats.subjects();
    let pool = db.app_pool();
    let rows = 120u32;
    {
        let mut conn = pool.get().await?;
        for chunk in (0..rows).collect::<Vec<_>>().chunks(30) {
            let tx = conn.transaction().await?;
            for n in chunk {
                enqueue(&*tx, finding(&subjects, *n)?).await?;
            }
            tx.commit().await?;
        }
    }

    let a = relay(&db, &nats);
    let b = relay(&db, &nats);
    let stop = CancellationToken::new();
    let ta = tokio::spawn({
        let stop = stop.clone();
        async move { a.run(stop).await }
    });
    let tb = tokio::spawn({
        let stop = stop.clone();
        async move { b.run(stop).await }
    });

    let owner = db.owner_client().await?;
    wait::until(DEADLINE, "every row to be marked", || {
        let owner = &owner;
        async move {
            let row = owner
                .query_one(
                    "SELECT count(*) FROM outbox WHERE published_at IS NULL",
                    &[],
                )
                .await
                .ok()?;
            (row.get::<_, i64>(0) == 0).then_some(())
        }
    })
    .await?;
    stop.cancel();
    ta.await?;
    tb.await?;

    assert_eq!(
        stream_messages(&bus, &subjects.events_stream()).await?,
        u64::from(rows)
    );
    nats.cleanup().await?;
    db.cleanup().await?;
    Ok(())
}

/// The relay dies (SIGKILL) after the stream acked a row and before the row was marked; a second
/// relay then publishes it again, the stream drops the copy, and the row gets marked.
#[tokio::test]
async fn row_is_published_once_when_the_relay_dies_before_marking() -> anyhow::Result<()> {
    let db = database().await?;
    let nats = TestNats::connect().await?;
    nats.ensure_streams().await?;
    let bus = nats.bus();
    let subjects = nats.subjects();
    let pool = db.app_pool();
    let id = {
        let mut conn = pool.get().await?;
        let tx = conn.transaction().await?;
        let id = enqueue(&*tx, finding(&subjects, 9)?).await?;
        tx.commit().await?;
        id
    };

    let mut child = tokio::process::Command::new(relay_child_binary()?)
        .env(CHILD_DB_ENV, db.owner_url())
        .env(CHILD_PREFIX_ENV, nats.prefix())
        .env("PULSE_NATS_URL", nats_url())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("child stdout not captured"))?;
    let mut lines = BufReader::new(stdout).lines();
    let acked = tokio::time::timeout(DEADLINE, async {
        while let Some(line) = lines.next_line().await? {
            if let Some((_, rest)) = line.split_once(PUBLISHED_MARKER) {
                return Ok(rest.trim().parse::<i64>()?);
            }
        }
        anyhow::bail!("relay child exited before publishing")
    })
    .await??;
    assert_eq!(acked, id);

    child.start_kill()?; // SIGKILL
    let status = child.wait().await?;
    assert!(
        !status.success(),
        "the child was killed, not finished: {status:?}"
    );

    // Killed between ack and mark: in the stream, not marked.
    assert_eq!(published(&db, id).await?, Some(false));
    let events = subjects.events_stream();
    assert_eq!(stream_messages(&bus, &events).await?, 1);

    // A second relay publishes it again (a duplicate the stream drops) and marks it. Its claim
    // may skip the row until Postgres has noticed the dead connection and released its lock.
    let second = relay(&db, &nats);
    wait::until(DEADLINE, "the second relay to mark the row", || {
        let second = &second;
        let db = &db;
        async move {
            let _ = second.relay_batch().await;
            matches!(published(db, id).await, Ok(Some(true))).then_some(())
        }
    })
    .await?;
    assert_eq!(
        stream_messages(&bus, &events).await?,
        1,
        "published exactly once"
    );
    let msg = bus
        .jetstream()
        .get_stream(&events)
        .await?
        .get_last_raw_message_by_subject(&subjects.event(&acme(), "finding", "created"))
        .await?;
    let expected_id = message_id_of(&db.owner_client().await?, id)
        .await?
        .expect("the published row");
    assert_eq!(
        header(Some(&msg.headers), headers::MSG_ID),
        Some(expected_id.as_str())
    );

    nats.cleanup().await?;
    db.cleanup().await?;
    Ok(())
}
