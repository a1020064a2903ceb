//! A durable event consumer read with `SerialPull`: each delivery settled by `Delivery`, with
//! bounded redeliveries, backoff and a dead letter.

mod common;

use std::time::Duration;

use common::{Job, acme};
use pulse_bus::async_nats::jetstream::consumer::PullConsumer;
use pulse_bus::envelope::{header, headers};
use pulse_bus::{
    Bus, Delivery, EventConsumerConfig, JobError, Redelivery, SerialPull, Settled,
    ensure_event_consumer,
};
use pulse_domain::TenantId;
use pulse_test_support::nats::TestNats;
use pulse_test_support::wait;

const DEADLINE: Duration = Duration::from_secs(15);
const DURABLE: &str = "test-redelivery";

fn redelivery(max_deliver: i64) -> Redelivery {
    Redelivery {
        dlq_kind: "test_events".to_owned(),
        max_deliver,
        backoff_base: Duration::from_millis(200),
        backoff_max: Duration::from_secs(5),
    }
}

async fn consumer(bus: &Bus, max_deliver: i64) -> anyhow::Result<PullConsumer> {
    Ok(ensure_event_consumer(
        bus,
        &EventConsumerConfig {
            durable_name: DURABLE.to_owned(),
            description: "redelivery test".to_owned(),
            filter_subject: bus.subjects().any_tenant("events.test.>"),
            ack_wait: Duration::from_secs(1),
            max_deliver,
        },
    )
    .await?)
}

/// The next delivery, within the deadline.
async fn next(bus: &Bus, pull: &mut SerialPull) -> anyhow::Result<Delivery> {
    let message = tokio::time::timeout(DEADLINE, pull.next(std::future::pending()))
        .await
        .map_err(|_| anyhow::anyhow!("no delivery within {DEADLINE:?}"))?
        .ok_or_else(|| anyhow::anyhow!("the pull ended"))?;
    Delivery::new(bus.subjects(), message)
        .ok_or_else(|| anyhow::anyhow!("a delivery without jetstream metadata"))
}

/// Waits until the test consumer has nothing pending and nothing unacked.
async fn drained(bus: &Bus) -> anyhow::Result<()> {
    let js = bus.jetstream().clone();
    let stream = bus.subjects().events_stream();
    wait::until(DEADLINE, "the event consumer to drain", || {
        let js = js.clone();
        let stream = stream.clone();
        async move {
            let s = js.get_stream(&stream).await.ok()?;
            let info = s.consumer_info(DURABLE).await.ok()?;
            (info.num_pending == 0 && info.num_ack_pending == 0).then_some(())
        }
    })
    .await
}

#[tokio::test]
async fn a_failing_event_backs_off_then_is_dead_lettered_on_its_last_delivery() -> anyhow::Result<()>
{
    let nats = TestNats::connect().await?;
    nats.ensure_streams().await?;
    let bus = nats.bus();
    let policy = redelivery(3);
    let mut dlq = nats
        .client()
        .subscribe(bus.subjects().dlq(&acme(), &policy.dlq_kind))
        .await?;
    nats.client().flush().await?;
    let mut pull = SerialPull::new(
        consumer(&bus, 3).await?,
        DURABLE,
        4,
        Duration::from_millis(300),
    );
    let published = bus
        .publish_event(&acme(), "test", "ping", &Job { n: 5 }, None)
        .await?;

    let mut settled = Vec::new();
    let mut numbers = Vec::new();
    while settled.last() != Some(&Settled::DeadLettered) && settled.len() < 5 {
        let delivery = next(&bus, &mut pull).await?;
        let (tenant, decoded) = delivery
            .decode::<Job>("test event")
            .map_err(anyhow::Error::msg)?;
        assert_eq!(tenant, acme());
        numbers.push(delivery.delivered);
        let failure = Err(JobError::retry(format!(
            "backend down for {}",
            decoded.payload.n
        )));
        settled.push(delivery.settle(&bus, &policy, failure).await);
    }
    assert_eq!(numbers, vec![1, 2, 3]);
    assert_eq!(
        settled,
        vec![
            Settled::Retrying(Duration::from_millis(200)),
            Settled::Retrying(Duration::from_millis(400)),
            Settled::DeadLettered,
        ]
    );

    let dead = tokio::time::timeout(DEADLINE, futures::StreamExt::next(&mut dlq))
        .await
        .map_err(|_| anyhow::anyhow!("no dead letter within {DEADLINE:?}"))?
        .ok_or_else(|| anyhow::anyhow!("dead-letter subscription ended"))?;
    let h = dead.headers.as_ref();
    assert_eq!(header(h, headers::DLQ_REASON), Some("backend down for 5"));
    assert_eq!(header(h, headers::DLQ_DELIVERIES), Some("3"));
    assert_eq!(
        header(h, headers::DLQ_SUBJECT),
        Some(bus.subjects().event(&acme(), "test", "ping").as_str())
    );
    assert_eq!(
        header(h, headers::DLQ_ORIGINAL_MSG_ID),
        Some(published.message_id.as_str())
    );
    let body: Job = serde_json::from_slice(&dead.payload)?;
    assert_eq!(body, Job { n: 5 });
    // Terminated: nothing left to deliver.
    drained(&bus).await?;
    nats.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn an_event_of_another_tenant_is_dead_lettered_at_once_and_a_success_is_acked()
-> anyhow::Result<()> {
    let nats = TestNats::connect().await?;
    nats.ensure_streams().await?;
    let bus = nats.bus();
    let policy = redelivery(5);
    let other = TenantId::new("other")?;
    let mut dlq = nats
        .client()
        .subscribe(bus.subjects().dlq(&other, &policy.dlq_kind))
        .await?;
    nats.client().flush().await?;
    let mut pull = SerialPull::new(
        consumer(&bus, 5).await?,
        DURABLE,
        4,
        Duration::from_millis(300),
    );

    // acme's envelope on the other tenant's subject.
    let forged = pulse_bus::encode(&acme(), &Job { n: 1 }, None)?;
    bus.jetstream()
        .publish_with_headers(
            bus.subjects().event(&other, "test", "ping"),
            forged.headers,
            forged.body,
        )
        .await?
        .await?;
    let delivery = next(&bus, &mut pull).await?;
    let reason = delivery
        .decode::<Job>("test event")
        .err()
        .ok_or_else(|| anyhow::anyhow!("a forged tenant decoded"))?;
    assert_eq!(
        reason,
        "test event tenant header does not match its subject"
    );
    assert_eq!(
        delivery.dead_letter(&bus, &policy, &reason).await,
        Settled::DeadLettered
    );
    let dead = tokio::time::timeout(DEADLINE, futures::StreamExt::next(&mut dlq))
        .await
        .map_err(|_| anyhow::anyhow!("no dead letter within {DEADLINE:?}"))?
        .ok_or_else(|| anyhow::anyhow!("dead-letter subscription ended"))?;
    assert_eq!(
        header(dead.headers.as_ref(), headers::DLQ_DELIVERIES),
        Some("1")
    );

    bus.publish_event(&acme(), "test", "ping", &Job { n: 2 }, None)
        .await?;
    let delivery = next(&bus, &mut pull).await?;
    assert_eq!(delivery.settle(&bus, &policy, Ok(())).await, Settled::Acked);
    drained(&bus).await?;
    nats.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn an_event_whose_dead_letter_failed_on_its_last_delivery_is_delivered_again()
-> anyhow::Result<()> {
    let nats = TestNats::connect().await?;
    nats.ensure_streams().await?;
    let bus = nats.bus();
    let policy = redelivery(2);
    let mut pull = SerialPull::new(
        consumer(&bus, 2).await?,
        DURABLE,
        4,
        Duration::from_millis(300),
    );
    bus.publish_event(&acme(), "test", "ping", &Job { n: 7 }, None)
        .await?;

    let first = next(&bus, &mut pull).await?;
    assert_eq!(first.delivered, 1);
    assert_eq!(
        first
            .settle(&bus, &policy, Err(JobError::retry("backend down")))
            .await,
        Settled::Retrying(Duration::from_millis(200))
    );

    // The last delivery fails and its dead letter cannot be published: no DLQ stream.
    let last = next(&bus, &mut pull).await?;
    assert_eq!(last.delivered, 2);
    bus.jetstream()
        .delete_stream(bus.subjects().dlq_stream())
        .await?;
    assert_eq!(
        last.settle(&bus, &policy, Err(JobError::retry("backend down")))
            .await,
        Settled::Kept
    );

    // Once the DLQ is back, the event comes again and is dead-lettered rather than lost.
    nats.ensure_streams().await?;
    let mut dlq = nats
        .client()
        .subscribe(bus.subjects().dlq(&acme(), &policy.dlq_kind))
        .await?;
    nats.client().flush().await?;
    let again = next(&bus, &mut pull).await?;
    assert_eq!(again.delivered, 3);
    assert_eq!(
        again
            .settle(&bus, &policy, Err(JobError::retry("backend down")))
            .await,
        Settled::DeadLettered
    );
    let dead = tokio::time::timeout(DEADLINE, futures::StreamExt::next(&mut dlq))
        .await
        .map_err(|_| anyhow::anyhow!("no dead letter within {DEADLINE:?}"))?
        .ok_or_else(|| anyhow::anyhow!("dead-letter subscription ended"))?;
    assert_eq!(
        header(dead.headers.as_ref(), headers::DLQ_DELIVERIES),
        Some("3")
    );
    drained(&bus).await?;
    nats.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn an_existing_event_consumer_bounded_by_the_server_is_updated_to_unbounded()
-> anyhow::Result<()> {
    let nats = TestNats::connect().await?;
    nats.ensure_streams().await?;
    let bus = nats.bus();
    // A consumer as an earlier version created it: the server bounded deliveries.
    bus.jetstream()
        .create_consumer_on_stream(
            pulse_bus::async_nats::jetstream::consumer::pull::Config {
                durable_name: Some(DURABLE.to_owned()),
                filter_subject: bus.subjects().any_tenant("events.test.>"),
                ack_policy: pulse_bus::async_nats::jetstream::consumer::AckPolicy::Explicit,
                deliver_policy: pulse_bus::async_nats::jetstream::consumer::DeliverPolicy::New,
                ack_wait: Duration::from_secs(1),
                max_deliver: 3,
                ..Default::default()
            },
            bus.subjects().events_stream(),
        )
        .await?;
    for _ in 0..2 {
        let mut ensured = consumer(&bus, 3).await?;
        assert_eq!(ensured.info().await?.config.max_deliver, -1);
    }
    nats.cleanup().await?;
    Ok(())
}
