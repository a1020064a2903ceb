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
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::bus::{Bus, js_publish};
use crate::envelope::{EnvelopeMeta, Message, check_header_value, decode, header_text, headers};
use crate::error::BusError;
use crate::streams::JobConsumerConfig;
use crate::subjects::check_token;
use crate::trace;

/// Why a handler did not finish its job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// Worth another try later (a dependency was down, a lock was taken...).
    #[error("{0}")]
    Retry(String),
    /// Will fail the same way every time (bad input): dead-letter now.
    #[error("{0}")]
    Fatal(String),
}

impl JobError {
    pub fn retry(reason: impl std::fmt::Display) -> Self {
        Self::Retry(reason.to_string())
    }

    pub fn fatal(reason: impl std::fmt::Display) -> Self {
        Self::Fatal(reason.to_string())
    }
}

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

/// The Nak delay after delivery number `delivered` (1-based) failed: `base * 2^(delivered-1)`,
/// at most `max`.
pub fn backoff_delay(base: Duration, max: Duration, delivered: u64) -> Duration {
    let exponent = delivered.saturating_sub(1).min(31) as u32;
    base.saturating_mul(1u32 << exponent).min(max)
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
        self.max_deliver > 0 && self.delivery >= self.max_deliver as u64
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
    config: JobWorkerConfig,
    progress_every: Duration,
    max_deliver: i64,
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

const MAX_CONSECUTIVE_PULL_ERRORS: u32 = 60;

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

    /// Runs until `shutdown` turns true (or its sender is dropped): then stops pulling, lets
    /// running handlers finish for up to `shutdown_grace`, acks what finished, Naks what did
    /// not, and returns.
    pub async fn run<F, Fut>(
        self,
        handler: F,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), BusError>
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
            config: self.config.clone(),
            progress_every,
            max_deliver: self.max_deliver,
            seen: DeliveryLedger::default(),
        });
        let limit = Arc::new(Semaphore::new(concurrency));
        let (abandon_tx, abandon_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let mut pull_errors = 0u32;
        let mut outcome = Ok(());

        loop {
            if *shutdown.borrow() {
                break;
            }
            let first = tokio::select! {
                permit = limit.clone().acquire_owned() => permit,
                _ = raised(&mut shutdown) => break,
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
                                    abandon_rx.clone(),
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
                None => pull_errors = 0,
                Some(err) => {
                    // Pull refused or broken (server restarting, too many waiting pulls...):
                    // back off instead of spinning, and give up after a long run of failures.
                    pull_errors += 1;
                    tracing::warn!(kind = %self.kind, error = %err, attempt = pull_errors, "job pull failed");
                    if pull_errors >= MAX_CONSECUTIVE_PULL_ERRORS {
                        outcome = Err(BusError::nats("job pull", err));
                        break;
                    }
                    let pause = backoff_delay(
                        Duration::from_millis(100),
                        Duration::from_secs(5),
                        pull_errors.into(),
                    );
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = raised(&mut shutdown) => break,
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
            let _ = abandon_tx.send(true);
            while tasks.join_next().await.is_some() {}
        }
        outcome
    }
}

async fn process_job<M, F, Fut>(
    shared: Arc<Shared<F>>,
    msg: jetstream::Message,
    permit: OwnedSemaphorePermit,
    mut abandon: watch::Receiver<bool>,
) where
    M: Message,
    F: Fn(JobContext, M) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), JobError>> + Send + 'static,
{
    let _permit = permit;
    let (delivered, stream_sequence) = match msg.info() {
        Ok(info) => (
            shared.seen.observe(
                info.stream_sequence,
                u64::try_from(info.delivered).unwrap_or(1).max(1),
            ),
            info.stream_sequence,
        ),
        Err(err) => {
            tracing::warn!(subject = %msg.subject, error = %err, "message without jetstream metadata dropped");
            return;
        }
    };
    let subject = msg.subject.to_string();
    let subject_tenant = shared
        .bus
        .subjects()
        .tenant_token(&subject)
        .map(str::to_owned);
    let delivery = Delivery {
        delivered,
        stream_sequence,
        subject: subject.clone(),
        subject_tenant,
    };

    let decoded = match decode::<M>(msg.headers.as_ref(), &msg.payload) {
        Ok(decoded) => decoded,
        Err(err) => {
            let reason = format!("undecodable job: {err}");
            dead_letter(&shared, &msg, &delivery, &reason).await;
            return;
        }
    };
    let tenant = match &decoded.meta.tenant {
        Some(t) if delivery.subject_tenant.as_deref() == Some(t.as_str()) => t.clone(),
        _ => {
            dead_letter(
                &shared,
                &msg,
                &delivery,
                "job tenant header does not match its subject",
            )
            .await;
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
    let msg = Arc::new(msg);
    let ctx = JobContext {
        tenant,
        kind: shared.kind.clone(),
        subject,
        meta: decoded.meta,
        delivery: delivered,
        max_deliver: shared.max_deliver,
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
            _ = raised(&mut abandon) => break None,
        }
    };
    // Drop the handler before answering the server: an abandoned handler's transaction rolls
    // back before another worker can get the job.
    drop(run);

    let failure = match outcome {
        None => {
            tracing::warn!(parent: &span, "job abandoned at shutdown, handing it back");
            if let Err(err) = msg.ack_with(AckKind::Nak(None)).await {
                tracing::warn!(parent: &span, error = %err, "nak failed; job redelivered after ack_wait");
            }
            return;
        }
        Some(Ok(Ok(()))) => {
            shared.seen.forget(stream_sequence);
            if let Err(err) = msg.double_ack().await {
                tracing::warn!(parent: &span, error = %err, "ack failed; job will be redelivered");
            }
            return;
        }
        Some(Ok(Err(err))) => err,
        Some(Err(_)) => JobError::Retry("job handler panicked".to_owned()),
    };

    let last = shared.max_deliver > 0 && delivered >= shared.max_deliver as u64;
    match &failure {
        JobError::Retry(reason) if !last => {
            let delay = backoff_delay(
                shared.config.backoff_base,
                shared.config.backoff_max,
                delivered,
            );
            tracing::info!(parent: &span, reason = %reason, delay_ms = delay.as_millis() as u64, "job failed, retrying later");
            if let Err(err) = msg.ack_with(AckKind::Nak(Some(delay))).await {
                tracing::warn!(parent: &span, error = %err, "nak failed; job redelivered after ack_wait");
            }
        }
        JobError::Retry(reason) | JobError::Fatal(reason) => {
            async { dead_letter(&shared, &msg, &delivery, reason).await }
                .instrument(span.clone())
                .await;
        }
    }
}

/// Resolves once the flag is true or its sender is gone.
pub(crate) async fn raised(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|set| *set).await;
}

struct Delivery {
    delivered: u64,
    stream_sequence: u64,
    subject: String,
    subject_tenant: Option<String>,
}

/// Publishes the job as it arrived (body and headers) plus why it failed to
/// `pulse.<tenant>.dlq.<kind>`, then terminates it. Its dead-letter message id is its place in
/// the jobs stream, so a retried dead-letter publish is stored once.
async fn dead_letter<F>(
    shared: &Shared<F>,
    msg: &jetstream::Message,
    delivery: &Delivery,
    reason: &str,
) {
    let subjects = shared.bus.subjects();
    let tenant_token = delivery
        .subject_tenant
        .as_deref()
        .filter(|t| check_token(t).is_ok())
        .unwrap_or(crate::subjects::SYSTEM_TENANT);
    let dlq_subject = subjects.dlq_for_token(tenant_token, &shared.kind);

    let mut dlq_headers = msg.headers.clone().unwrap_or_default();
    if let Some(original) = dlq_headers.get(headers::MSG_ID).cloned() {
        dlq_headers.insert(headers::DLQ_ORIGINAL_MSG_ID, original);
    }
    let dlq_id = format!("{}-{}", subjects.jobs_stream(), delivery.stream_sequence);
    dlq_headers.insert(headers::MSG_ID, dlq_id.as_str());
    dlq_headers.insert(headers::DLQ_REASON, header_text(reason, 1024));
    dlq_headers.insert(headers::DLQ_DELIVERIES, delivery.delivered.to_string());
    let original_subject = if check_header_value(&delivery.subject).is_ok() {
        delivery.subject.clone()
    } else {
        header_text(&delivery.subject, 1024)
    };
    dlq_headers.insert(headers::DLQ_SUBJECT, original_subject);
    dlq_headers.insert(
        headers::DLQ_STREAM_SEQUENCE,
        delivery.stream_sequence.to_string(),
    );

    match js_publish(
        shared.bus.jetstream(),
        &dlq_subject,
        dlq_headers,
        msg.payload.clone(),
    )
    .await
    {
        Ok(_) => {
            tracing::warn!(
                kind = %shared.kind,
                subject = %delivery.subject,
                deliveries = delivery.delivered,
                reason = %reason,
                "job dead-lettered"
            );
            shared.seen.forget(delivery.stream_sequence);
            if let Err(err) = msg.double_ack_with(AckKind::Term).await {
                tracing::warn!(error = %err, "terminating a dead-lettered job failed");
            }
        }
        Err(err) => {
            // Keep the job: Nak it so a later delivery (if any is left) tries again; after the
            // last one it stays in the stream, unacked, for an operator.
            tracing::error!(
                kind = %shared.kind,
                subject = %delivery.subject,
                stream_sequence = delivery.stream_sequence,
                error = %err,
                "dead-letter publish failed"
            );
            let delay = backoff_delay(
                shared.config.backoff_base,
                shared.config.backoff_max,
                delivery.delivered,
            );
            let _ = msg.ack_with(AckKind::Nak(Some(delay))).await;
        }
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

    #[test]
    fn backoff_grows_and_is_bounded() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(1);
        assert_eq!(backoff_delay(base, max, 0), base);
        assert_eq!(backoff_delay(base, max, 1), base);
        assert_eq!(backoff_delay(base, max, 2), base * 2);
        assert_eq!(backoff_delay(base, max, 3), base * 4);
        assert_eq!(backoff_delay(base, max, 5), max);
        assert_eq!(backoff_delay(base, max, u64::MAX), max);
        assert_eq!(
            backoff_delay(Duration::MAX, Duration::MAX, 40),
            Duration::MAX
        );
    }
}
