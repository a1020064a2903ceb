//! Durable jobs: stream setup, dedupe, the worker's acks, backoff, dead letters and shutdown.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Job, Other, acme, consumer_drained, stream_messages};
use pulse_bus::envelope::{header, headers};
use pulse_bus::{
    Bus, JobConsumerConfig, JobError, JobWorker, JobWorkerConfig, StreamSettings,
    ensure_job_consumer, ensure_streams_with,
};
use pulse_test_support::nats::TestNats;
use pulse_test_support::wait;
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(15);

fn fast_config(ack_wait: Duration, max_deliver: i64) -> JobWorkerConfig {
    JobWorkerConfig {
        consumer: JobConsumerConfig {
            ack_wait,
            max_deliver,
            max_ack_pending: 100,
        },
        concurrency: 2,
        backoff_base: Duration::from_millis(200),
        backoff_max: Duration::from_secs(5),
        pull_expires: Duration::from_millis(300),
        shutdown_grace: Duration::from_secs(1),
        progress_interval: None,
    }
}

/// Starts `worker` with `handler` in a task; returns the shutdown switch and the task.
fn start<F, Fut>(
    worker: JobWorker<Job>,
    handler: F,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<Result<(), pulse_bus::BusError>>,
)
where
    F: Fn(pulse_bus::JobContext, Job) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), JobError>> + Send + 'static,
{
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(worker.run(handler, shutdown.clone()));
    (shutdown, task)
}

async fn stop(
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), pulse_bus::BusError>>,
) -> anyhow::Result<()> {
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), task).await???;
    Ok(())
}

#[tokio::test]
async fn stream_setup_is_idempotent_and_race_free() -> anyhow::Result<()> {
    let nats = TestNats::connect().await?;
    let js = nats.jetstream();
    let subjects = nats.subjects();
    let settings = StreamSettings::small();

    // Four processes starting at once, then a restart.
    let results =
        futures::future::join_all((0..4).map(|_| ensure_streams_with(&js, &subjects, &settings)))
            .await;
    for r in results {
        r?;
    }
    ensure_streams_with(&js, &subjects, &settings).await?;
    let consumer_config = JobConsumerConfig::default();
    let consumers = futures::future::join_all(
        (0..3).map(|_| ensure_job_consumer(&js, &subjects, "watch", &consumer_config)),
    )
    .await;
    for c in consumers {
        c?;
    }

    for name in [
        subjects.jobs_stream(),
        subjects.events_stream(),
        subjects.dlq_stream(),
    ] {
        js.get_stream(&name).await?;
    }
    let jobs = js
        .get_stream(subjects.jobs_stream())
        .await?
        .get_info()
        .await?;
    assert_eq!(jobs.config.subjects, vec![subjects.jobs_wildcard()]);
    assert_eq!(jobs.config.duplicate_window, Duration::from_secs(120));
    nats.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn same_message_id_is_stored_and_handled_once() -> anyhow::Result<()> {
    let nats = TestNats::connect().await?;
    nats.ensure_streams().await?;
    let bus = nats.bus();

    let first = bus
        .publish_job(&acme(), "dedupe", &Job { n: 1 }, Some("job-42"))
        .await?;
    let second = bus
        .publish_job(&acme(), "dedupe", &Job { n: 1 }, Some("job-42"))
        .await?;
    assert!(!first.duplicate);
    assert!(second.duplicate);
    assert_eq!(first.stream_sequence, second.stream_sequence);
    assert_eq!(
        stream_messages(&bus, &bus.subjects().jobs_stream()).await?,
        1
    );

    let calls = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = calls.clone();
    let worker =
        JobWorker::<Job>::new(&bus, "dedupe", fast_config(Duration::from_secs(5), 3)).await?;
    let (tx, task) = start(worker, move |ctx, _job| {
        let seen = seen.clone();
        async move {
            seen.lock()
                .map_err(JobError::retry)?
                .push(ctx.meta.message_id.clone());
            Ok(())
        }
    });

    wait::until(DEADLINE, "the job to be handled", || {
        let n = calls.lock().map(|c| c.len()).unwrap_or(0);
        async move { (n >= 1).then_some(()) }
    })
    .await?;
    consumer_drained(&bus, "dedupe", DEADLINE).await?;
    stop(tx, task).await?;

    assert_eq!(
        *calls.lock().map_err(|e| anyhow::anyhow!("{e}"))?,
        vec!["job-42".to_owned()]
    );
    // Acked: the work queue is empty.
    assert_eq!(
        stream_messages(&bus, &bus.subjects().jobs_stream()).await?,
        0
    );
    nats.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn failing_job_backs_off_then_is_dead_lettered_once() -> anyhow::Result<()> {
    let nats = TestNats::connect().await?;
    nats.ensure_streams().await?;
    let bus = nats.bus();
    let kind = "flaky";
    let max_deliver = 4;
    let mut dlq = nats
        .client()
        .subscribe(bus.subjects().dlq(&acme(), kind))
        .await?;
    nats.client().flush().await?;

    let deliveries = Arc::new(Mutex::new(Vec::<(u64, Instant)>::new()));
    let seen = deliveries.clone();
    let worker =
        JobWorker::<Job>::new(&bus, kind, fast_config(Duration::from_secs(1), max_deliver)).await?;
    let (tx, task) = start(worker, move |ctx, job| {
        let seen = seen.clone();
        async move {
            seen.lock()
                .map_err(JobError::retry)?
                .push((ctx.delivery, Instant::now()));
            Err(JobError::retry(format!(
                "database unavailable for job {}",
                job.n
            )))
        }
    });
    let published = bus.publish_job(&acme(), kind, &Job { n: 7 }, None).await?;

    let dead = tokio::time::timeout(DEADLINE, futures::StreamExt::next(&mut dlq))
        .await
        .map_err(|_| {
            let seen: Vec<(u64, Duration)> = deliveries
                .lock()
                .map(|d| d.iter().map(|(n, at)| (*n, at.elapsed())).collect())
                .unwrap_or_default();
            anyhow::anyhow!(
                "no dead letter within {DEADLINE:?}; deliveries (number, ago): {seen:?}"
            )
        })?
        .ok_or_else(|| anyhow::anyhow!("dead-letter subscription ended"))?;
    let h = dead.headers.as_ref();
    assert_eq!(
        header(h, headers::DLQ_REASON),
        Some("database unavailable for job 7")
    );
    assert_eq!(header(h, headers::DLQ_DELIVERIES), Some("4"));
    assert_eq!(
        header(h, headers::DLQ_SUBJECT),
        Some(bus.subjects().job(&acme(), kind).as_str())
    );
    assert_eq!(
        header(h, headers::DLQ_ORIGINAL_MSG_ID),
        Some(published.message_id.as_str())
    );
    assert_eq!(header(h, headers::TYPE), Some("test.job"));
    assert_eq!(header(h, headers::TENANT), Some("acme"));
    let body: Job = serde_json::from_slice(&dead.payload)?;
    assert_eq!(body, Job { n: 7 });

    // Terminated, not left pending: nothing more to deliver, and no delivery comes after the
    // last one even past ack_wait.
    consumer_drained(&bus, kind, DEADLINE).await?;
    let after = deliveries.lock().map_err(|e| anyhow::anyhow!("{e}"))?.len();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop(tx, task).await?;
    let deliveries = deliveries
        .lock()
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .clone();
    assert_eq!(deliveries.len(), after);
    assert_eq!(
        deliveries.iter().map(|(d, _)| *d).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(
        stream_messages(&bus, &bus.subjects().dlq_stream()).await?,
        1
    );
    assert_eq!(
        stream_messages(&bus, &bus.subjects().jobs_stream()).await?,
        0
    );

    // Backoff 200 ms, 400 ms, 800 ms: every gap at least its own delay (so the lower bounds
    // grow), and the last clearly longer than the first. Pairwise comparisons of neighbours
    // would only add scheduling noise.
    let gaps: Vec<Duration> = deliveries
        .windows(2)
        .map(|w| w[1].1.duration_since(w[0].1))
        .collect();
    assert_eq!(gaps.len(), 3);
    for (gap, expected_ms) in gaps.iter().zip([200u64, 400, 800]) {
        assert!(
            *gap >= Duration::from_millis(expected_ms * 9 / 10),
            "gap {gap:?} shorter than the {expected_ms} ms backoff; gaps {gaps:?}"
        );
    }
    assert!(
        gaps[2] > gaps[0] + Duration::from_millis(300),
        "gaps do not grow: {gaps:?}"
    );
    nats.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn undecodable_job_goes_straight_to_the_dead_letters() -> anyhow::Result<()> {
    let nats = TestNats::connect().await?;
    nats.ensure_streams().await?;
    let bus = nats.bus();
    let kind = "typed";
    let mut dlq = nats
        .client()
        .subscribe(bus.subjects().dlq(&acme(), kind))
        .await?;
    nats.client().flush().await?;

    let calls = Arc::new(Mutex::new(0u32));
    let seen = calls.clone();
    let worker = JobWorker::<Job>::new(&bus, kind, fast_config(Duration::from_secs(5), 5)).await?;
    let (tx, task) = start(worker, move |_ctx, _job| {
        let seen = seen.clone();
        async move {
            *seen.lock().map_err(JobError::retry)? += 1;
            Ok(())
        }
    });
    // Another type on the same job subject.
    bus.publish_job(&acme(), kind, &Other { x: "?".to_owned() }, None)
        .await?;

    let dead = tokio::time::timeout(DEADLINE, futures::StreamExt::next(&mut dlq))
        .await?
        .ok_or_else(|| anyhow::anyhow!("dead-letter subscription ended"))?;
    let h = dead.headers.as_ref();
    let reason = header(h, headers::DLQ_REASON)
        .unwrap_or_default()
        .to_owned();
    assert!(reason.contains("wrong message type"), "{reason}");
    assert_eq!(header(h, headers::DLQ_DELIVERIES), Some("1"));
    consumer_drained(&bus, kind, DEADLINE).await?;
    stop(tx, task).await?;
    assert_eq!(*calls.lock().map_err(|e| anyhow::anyhow!("{e}"))?, 0);
    nats.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn progress_acks_keep_a_long_job_from_redelivery() -> anyhow::Result<()> {
    let nats = TestNats::connect().await?;
    nats.ensure_streams().await?;
    let bus = nats.bus();
    let kind = "long";
    let deliveries = Arc::new(Mutex::new(Vec::<u64>::new()));
    let seen = deliveries.clone();
    // ack_wait 1 s; the handler takes 2.5 s; progress every 333 ms keeps the job ours.
    let worker = JobWorker::<Job>::new(&bus, kind, fast_config(Duration::from_secs(1), 5)).await?;
    let (tx, task) = start(worker, move |ctx, _job| {
        let seen = seen.clone();
        async move {
            seen.lock().map_err(JobError::retry)?.push(ctx.delivery);
            tokio::time::sleep(Duration::from_millis(1200)).await;
            ctx.progress().await.map_err(JobError::retry)?;
            tokio::time::sleep(Duration::from_millis(1300)).await;
            Ok(())
        }
    });
    bus.publish_job(&acme(), kind, &Job { n: 1 }, None).await?;

    wait::until(DEADLINE, "the long job to start", || {
        let n = deliveries.lock().map(|d| d.len()).unwrap_or(0);
        async move { (n >= 1).then_some(()) }
    })
    .await?;
    consumer_drained(&bus, kind, DEADLINE).await?;
    stop(tx, task).await?;
    assert_eq!(
        *deliveries.lock().map_err(|e| anyhow::anyhow!("{e}"))?,
        vec![1]
    );
    nats.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn shutdown_acks_finished_jobs_and_hands_back_unfinished_ones() -> anyhow::Result<()> {
    let nats = TestNats::connect().await?;
    nats.ensure_streams().await?;
    let bus = nats.bus();
    let kind = "shutdown";
    // ack_wait far beyond the test: a redelivery within it can only come from the Nak.
    let config = fast_config(Duration::from_secs(30), 5);

    bus.publish_job(&acme(), kind, &Job { n: 1 }, None).await?;
    bus.publish_job(&acme(), kind, &Job { n: 2 }, None).await?;

    #[derive(Default)]
    struct Seen {
        started: Vec<u32>,
        finished: Vec<u32>,
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s = seen.clone();
    let worker = JobWorker::<Job>::new(&bus, kind, config.clone()).await?;
    let (tx, task) = start(worker, move |_ctx, job| {
        let s = s.clone();
        async move {
            s.lock().map_err(JobError::retry)?.started.push(job.n);
            if job.n == 1 {
                tokio::time::sleep(Duration::from_millis(300)).await;
            } else {
                // Never finishes on its own.
                std::future::pending::<()>().await;
            }
            s.lock().map_err(JobError::retry)?.finished.push(job.n);
            Ok(())
        }
    });
    wait::until(DEADLINE, "both jobs to start", || {
        let n = seen.lock().map(|s| s.started.len()).unwrap_or(0);
        async move { (n == 2).then_some(()) }
    })
    .await?;

    stop(tx, task).await?;
    {
        let s = seen.lock().map_err(|e| anyhow::anyhow!("{e}"))?;
        assert_eq!(
            s.finished,
            vec![1],
            "job 1 finished during the grace period"
        );
    }
    // Job 1 was acked (gone from the work queue), job 2 was not.
    assert_eq!(
        stream_messages(&bus, &bus.subjects().jobs_stream()).await?,
        1
    );

    let second = Arc::new(Mutex::new(BTreeMap::<u32, u64>::new()));
    let s2 = second.clone();
    let worker = JobWorker::<Job>::new(&bus, kind, config).await?;
    let (tx, task) = start(worker, move |ctx, job| {
        let s2 = s2.clone();
        async move {
            s2.lock()
                .map_err(JobError::retry)?
                .insert(job.n, ctx.delivery);
            Ok(())
        }
    });
    wait::until(
        DEADLINE,
        "the unfinished job to reach the new worker",
        || {
            let got = second.lock().map(|s| s.contains_key(&2)).unwrap_or(false);
            async move { got.then_some(()) }
        },
    )
    .await?;
    consumer_drained(&bus, kind, DEADLINE).await?;
    stop(tx, task).await?;

    let second = second.lock().map_err(|e| anyhow::anyhow!("{e}"))?.clone();
    assert_eq!(
        second,
        BTreeMap::from([(2, 2)]),
        "only job 2, on its second delivery"
    );
    assert_eq!(
        stream_messages(&bus, &bus.subjects().jobs_stream()).await?,
        0
    );
    nats.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn job_kind_must_be_one_token() -> anyhow::Result<()> {
    let nats = TestNats::connect().await?;
    let bus: Bus = nats.bus();
    let err = bus
        .publish_job(&acme(), "a.b", &Job { n: 1 }, None)
        .await
        .expect_err("a dotted kind would escape its consumer's filter");
    assert!(matches!(err, pulse_bus::BusError::Subject(_)), "{err:?}");
    Ok(())
}
