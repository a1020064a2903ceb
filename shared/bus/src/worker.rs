//! The work-queue consumer: pulls jobs of one kind from its durable consumer and runs a handler
//! on each, acking only after the handler succeeded (it commits its transaction first), with
//! progress acks while it runs, Nak with backoff on failure and a dead letter after the last
//! delivery.

use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer::PullConsumer};
use futures::{FutureExt, StreamExt};
use pulse_domain::TenantId;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::bus::Bus;
use crate::envelope::{EnvelopeMeta, Message};
use crate::error::BusError;
use crate::redelivery::{Delivery, JobError, PullFailures, Redelivery, Settled, is_last_delivery};
use crate::streams::JobConsumerConfig;
use crate::subjects::check_token;
use crate::trace;

/// How a worker runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobWorkerConfig {
    /// The durable consumer's settings (applied when the worker is created).
    pub consumer: JobConsumerConfig,
    /// Handlers running at once in this worker.
    pub concurrency: usize,
    /// Nak delay after the first failed delivery; doubles with each delivery.
    pub backoff_base: Duration,
    /// Upper bound of the Nak delay.
    pub backoff_max: Duration,
    /// How long one pull waits for jobs; also how long shutdown may wait for the pull to end.
    pub pull_expires: Duration,
    /// How long shutdown lets running handlers finish before abandoning them (they are Nak'd,
    /// so another worker gets them at once).
    pub shutdown_grace: Duration,
    /// Interval of automatic progress acks while a handler runs; `None` means ack_wait / 3.
    pub progress_interval: Option<Duration>,
}

impl Default for JobWorkerConfig {
    fn default() -> Self {
        Self {
            consumer: JobConsumerConfig::default(),
            concurrency: 4,
            backoff_base: Duration::from_secs(2),
            backoff_max: Duration::from_secs(300),
            pull_expires: Duration::from_secs(2),
            shutdown_grace: Duration::from_secs(30),
            progress_interval: None,
        }
    }
}

/// Everything a job handler knows besides the job itself.
#[derive(Debug, Clone)]
pub struct JobContext {
    pub tenant: TenantId,
    pub kind: String,
    pub subject: String,
    pub meta: EnvelopeMeta,
    /// 1 on the first delivery.
    pub delivery: u64,
    pub max_deliver: i64,
    pub stream_sequence: u64,
    message: Arc<jetstream::Message>,
}

impl JobContext {
    /// Tells the server the job is still being worked on (resets its ack timer). The worker
    /// already does this every ack_wait / 3; call it around long steps for finer control.
    pub async fn progress(&self) -> Result<(), BusError> {
        self.message
            .ack_with(AckKind::Progress)
            .await
            .map_err(|err| BusError::nats("progress ack", err))
    }

    /// Whether a failure now sends the job to the dead-letter subject.
    pub fn is_last_delivery(&self) -> bool {
        is_last_delivery(self.max_deliver, self.delivery)
    }

    /// The publisher's trace.
    pub fn otel_context(&self) -> Option<opentelemetry::Context> {
        self.meta.otel_context()
    }
}

/// Consumes one job kind.
#[derive(Debug)]
pub struct JobWorker<M> {
    bus: Bus,
    kind: String,
    consumer: PullConsumer,
    config: JobWorkerConfig,
    ack_wait: Duration,
    max_deliver: i64,
    _message: PhantomData<fn() -> M>,
}

/// What the pull loop hands each job task.
struct Shared<F> {
    bus: Bus,
    kind: String,
    handler: F,
    redelivery: Redelivery,
    progress_every: Duration,
    seen: DeliveryLedger,
}

/// The highest delivery number this worker has seen per job (stream sequence), so a delivery
/// count that the server restarts at 1 for a job it already delivered (seen on NATS 2.9 under
/// load after Naks with a delay) cannot hold a failing job back from its dead letter. Entries go
/// when the job is acked or terminated; the ledger is bounded and forgets its oldest jobs first.
#[derive(Default)]
struct DeliveryLedger {
    highest: std::sync::Mutex<std::collections::BTreeMap<u64, u64>>,
}

impl DeliveryLedger {
    const CAPACITY: usize = 16_384;

    /// The delivery number to act on: the server's, or one past the highest seen before.
    fn observe(&self, stream_sequence: u64, server_count: u64) -> u64 {
        let mut highest = self.highest.lock().unwrap_or_else(|p| p.into_inner());
        let effective = match highest.get(&stream_sequence) {
            Some(&seen) if server_count <= seen => seen + 1,
            _ => server_count,
        };
        highest.insert(stream_sequence, effective);
        while highest.len() > Self::CAPACITY {
            highest.pop_first();
        }
        effective
    }

    fn forget(&self, stream_sequence: u64) {
        let mut highest = self.highest.lock().unwrap_or_else(|p| p.into_inner());
        highest.remove(&stream_sequence);
    }
}

impl<M: Message> JobWorker<M> {
    /// Ensures the durable consumer of `kind` with `config.consumer` and prepares a worker on it.
    pub async fn new(bus: &Bus, kind: &str, config: JobWorkerConfig) -> Result<Self, BusError> {
        check_token(kind)?;
        let consumer = bus.ensure_job_consumer(kind, &config.consumer).await?;
        let server_config = &consumer.cached_info().config;
        let ack_wait = server_config.ack_wait;
        let max_deliver = server_config.max_deliver;
        Ok(Self {
            bus: bus.clone(),
            kind: kind.to_owned(),
            consumer,
            config,
            ack_wait,
            max_deliver,
            _message: PhantomData,
        })
    }

    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// Runs until `shutdown` is cancelled: then stops pulling, lets running handlers finish for
    /// up to `shutdown_grace`, acks what finished, Naks what did not, and returns.
    pub async fn run<F, Fut>(self, handler: F, shutdown: CancellationToken) -> Result<(), BusError>
    where
        F: Fn(JobContext, M) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), JobError>> + Send + 'static,
    {
        let concurrency = self.config.concurrency.max(1);
        let progress_every = self
            .config
            .progress_interval
            .unwrap_or(self.ack_wait / 3)
            .max(Duration::from_millis(10));
        let shared = Arc::new(Shared {
            bus: self.bus.clone(),
            kind: self.kind.clone(),
            handler,
            redelivery: Redelivery {
                dlq_kind: {
                    crate::delivery_metrics::delivery_metrics().touch(&self.kind);
                    self.kind.clone()
                },
                max_deliver: self.max_deliver,
                backoff_base: self.config.backoff_base,
                backoff_max: self.config.backoff_max,
            },
            progress_every,
            seen: DeliveryLedger::default(),
        });
        let limit = Arc::new(Semaphore::new(concurrency));
        let abandon = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let mut pull_failures = PullFailures::default();
        let mut outcome = Ok(());

        loop {
            if shutdown.is_cancelled() {
                break;
            }
            let first = tokio::select! {
                permit = limit.clone().acquire_owned() => permit,
                _ = shutdown.cancelled() => break,
            };
            let Ok(first) = first else { break };
            let mut permits = vec![first];
            while permits.len() < concurrency {
                match limit.clone().try_acquire_owned() {
                    Ok(permit) => permits.push(permit),
                    Err(_) => break,
                }
            }

            let batch = self
                .consumer
                .batch()
                .max_messages(permits.len())
                .expires(self.config.pull_expires)
                .messages()
                .await;
            let failure = match batch {
                Ok(mut batch) => {
                    // The batch ends when it is full or the server expires the pull; messages
                    // already on their way are never dropped, so a shutdown waits for it to end.
                    let mut failure = None;
                    while let Some(item) = batch.next().await {
                        match item {
                            Ok(msg) => {
                                let Some(permit) = permits.pop() else {
                                    // The server never sends more than asked; if it did, hand
                                    // the job back.
                                    let _ = msg.ack_with(AckKind::Nak(None)).await;
                                    continue;
                                };
                                tasks.spawn(process_job::<M, F, Fut>(
                                    shared.clone(),
                                    msg,
                                    permit,
                                    abandon.clone(),
                                ));
                            }
                            Err(err) => {
                                failure = Some(err);
                                break;
                            }
                        }
                    }
                    failure
                }
                Err(err) => Some(err.into()),
            };
            drop(permits);
            while tasks.try_join_next().is_some() {}

            match failure {
                None => pull_failures.succeeded(),
                Some(err) => {
                    // Pull refused or broken (server restarting, too many waiting pulls...):
                    // back off instead of spinning, and give up after a long run of failures.
                    let pause = pull_failures.failed();
                    tracing::warn!(kind = %self.kind, error = %err, attempt = pull_failures.count(), "job pull failed");
                    let Some(pause) = pause else {
                        outcome = Err(BusError::nats("job pull", err));
                        break;
                    };
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = shutdown.cancelled() => break,
                    }
                }
            }
        }

        let drained = tokio::time::timeout(self.config.shutdown_grace, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                kind = %self.kind,
                running = tasks.len(),
                "shutdown grace elapsed, abandoning running jobs"
            );
            abandon.cancel();
            while tasks.join_next().await.is_some() {}
        }
        outcome
    }
}

async fn process_job<M, F, Fut>(
    shared: Arc<Shared<F>>,
    msg: jetstream::Message,
    permit: OwnedSemaphorePermit,
    abandon: CancellationToken,
) where
    M: Message,
    F: Fn(JobContext, M) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), JobError>> + Send + 'static,
{
    let _permit = permit;
    let Some(mut delivery) = Delivery::new(shared.bus.subjects(), msg) else {
        return;
    };
    let stream_sequence = delivery.stream_sequence;
    delivery.delivered = shared.seen.observe(stream_sequence, delivery.delivered);
    let delivered = delivery.delivered;

    let (tenant, decoded) = match delivery.decode::<M>("job") {
        Ok(decoded) => decoded,
        Err(reason) => {
            settled(
                &shared,
                stream_sequence,
                delivery
                    .dead_letter(&shared.bus, &shared.redelivery, &reason)
                    .await,
            );
            return;
        }
    };

    let span = tracing::info_span!(
        "bus.job",
        kind = %shared.kind,
        tenant = %tenant,
        message_id = %decoded.meta.message_id,
        delivery = delivered,
    );
    trace::continue_trace(&span, decoded.meta.traceparent.as_deref());
    let msg = delivery.message().clone();
    let ctx = JobContext {
        tenant,
        kind: shared.kind.clone(),
        subject: delivery.subject.clone(),
        meta: decoded.meta,
        delivery: delivered,
        max_deliver: shared.redelivery.max_deliver,
        stream_sequence,
        message: msg.clone(),
    };

    let mut run = Box::pin(
        AssertUnwindSafe((shared.handler)(ctx, decoded.payload))
            .catch_unwind()
            .instrument(span.clone()),
    );
    let mut ticker = tokio::time::interval_at(
        tokio::time::Instant::now() + shared.progress_every,
        shared.progress_every,
    );
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let outcome = loop {
        tokio::select! {
            outcome = &mut run => break Some(outcome),
            _ = ticker.tick() => {
                if let Err(err) = msg.ack_with(AckKind::Progress).await {
                    tracing::warn!(parent: &span, error = %err, "progress ack failed");
                }
            }
            _ = abandon.cancelled() => break None,
        }
    };
    // Drop the handler before answering the server: an abandoned handler's transaction rolls
    // back before another worker can get the job.
    drop(run);

    let result = match outcome {
        None => {
            tracing::warn!(parent: &span, "job abandoned at shutdown, handing it back");
            delivery.nak(None).instrument(span.clone()).await;
            return;
        }
        Some(Ok(result)) => result,
        Some(Err(_)) => Err(JobError::Retry("job handler panicked".to_owned())),
    };
    let outcome = delivery
        .settle(&shared.bus, &shared.redelivery, result)
        .instrument(span.clone())
        .await;
    settled(&shared, stream_sequence, outcome);
}

/// Forgets a job the server is done with (acked or terminated).
fn settled<F>(shared: &Shared<F>, stream_sequence: u64, outcome: Settled) {
    match outcome {
        Settled::Acked | Settled::DeadLettered => shared.seen.forget(stream_sequence),
        Settled::Retrying(_) | Settled::Kept => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restarted_delivery_count_continues_from_the_highest_seen() {
        let ledger = DeliveryLedger::default();
        assert_eq!(ledger.observe(7, 1), 1);
        assert_eq!(ledger.observe(7, 2), 2);
        assert_eq!(ledger.observe(7, 3), 3);
        // The server starts again at 1 for the same job: it is the fourth delivery.
        assert_eq!(ledger.observe(7, 1), 4);
        // A higher server count still wins.
        assert_eq!(ledger.observe(7, 9), 9);
        // Other jobs are counted on their own, and a forgotten job starts afresh.
        assert_eq!(ledger.observe(8, 1), 1);
        ledger.forget(7);
        assert_eq!(ledger.observe(7, 1), 1);
    }

    #[test]
    fn the_ledger_is_bounded() {
        let ledger = DeliveryLedger::default();
        for seq in 0..(DeliveryLedger::CAPACITY as u64 + 10) {
            ledger.observe(seq, 1);
        }
        let len = ledger.highest.lock().unwrap().len();
        assert_eq!(len, DeliveryLedger::CAPACITY);
        // The oldest went first.
        assert_eq!(ledger.observe(0, 1), 1);
    }
}
