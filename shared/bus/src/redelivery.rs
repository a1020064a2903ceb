//! Consuming a durable JetStream consumer with bounded redeliveries and a dead letter: the one
//! owner of what the job worker ([`crate::worker`]) and the services' event consumers do with a
//! delivery.
//!
//! - [`Delivery`]: one received message and where it stands (delivery number, stream and
//!   sequence, the subject's tenant token); [`Delivery::decode`] checks the envelope's tenant
//!   against the subject.
//! - [`JobError`]: why a handler did not finish a delivery: worth another try, or never.
//! - [`Redelivery`]: how many deliveries, the Nak backoff between them and the dead-letter kind;
//!   [`Delivery::settle`] acks a success, Naks a retryable failure with backoff, and
//!   dead-letters a fatal one or the last delivery ([`Delivery::dead_letter`]: the message as it
//!   arrived plus why, to `pulse.<tenant>.dlq.<kind>`, then terminated).
//! - [`PullFailures`]: the backoff after failed pulls, and when a run of them is worth a warning.
//! - [`SerialPull`] and [`ensure_event_consumer`]: a durable consumer of EVENTS read one message
//!   at a time, which the server redelivers without bound: the code dead-letters on the last
//!   delivery, so an event whose dead letter could not be published is delivered again.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{
    self, AckKind,
    consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull},
};
use futures::StreamExt;
use pulse_domain::TenantId;
use pulse_domain::backoff::{Backoff, Jitter};

use crate::bus::{Bus, js_publish};
use crate::envelope::{Decoded, Message, check_header_value, decode, header_text, headers};
use crate::error::BusError;
use crate::subjects::{SYSTEM_TENANT, Subjects, check_token};

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

/// Bounded redeliveries ending in a dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redelivery {
    /// The `<kind>` of `pulse.<tenant>.dlq.<kind>`.
    pub dlq_kind: String,
    /// Deliveries of one message before it is dead-lettered (0 or less: no bound).
    pub max_deliver: i64,
    /// Nak delay after the first failed delivery; doubles with each delivery. Not jittered:
    /// the server redelivers each message on its own clock, and the setting means this delay.
    pub backoff_base: Duration,
    /// Upper bound of the Nak delay.
    pub backoff_max: Duration,
}

impl Redelivery {
    /// Whether a failure of delivery number `delivered` (1-based) is its last.
    pub fn is_last(&self, delivered: u64) -> bool {
        is_last_delivery(self.max_deliver, delivered)
    }

    /// The Nak delay after delivery number `delivered` failed.
    pub fn delay(&self, delivered: u64) -> Duration {
        Backoff::new(self.backoff_base, self.backoff_max)
            .jitter(Jitter::None)
            .delay(u32::try_from(delivered).unwrap_or(u32::MAX))
    }
}

/// Whether delivery number `delivered` is the last of `max_deliver` (0 or less: no bound).
pub(crate) fn is_last_delivery(max_deliver: i64, delivered: u64) -> bool {
    max_deliver > 0 && delivered >= max_deliver as u64
}

/// What [`Delivery::settle`] did with a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Acked (the ack itself may have failed: then it is delivered again).
    Acked,
    /// Nak'd with this delay.
    Retrying(Duration),
    /// Published to the dead-letter subject and terminated.
    DeadLettered,
    /// The dead-letter publish failed: Nak'd, so a later delivery tries again (an event consumer
    /// from [`ensure_event_consumer`] is always delivered again).
    Kept,
}

/// One received message and where it stands.
#[derive(Debug, Clone)]
pub struct Delivery {
    message: Arc<jetstream::Message>,
    /// 1 on the first delivery.
    pub delivered: u64,
    /// The stream the message was delivered from.
    pub stream: String,
    pub stream_sequence: u64,
    pub subject: String,
    /// The subject's tenant token, if it has one.
    pub subject_tenant: Option<String>,
}

impl Delivery {
    /// The delivery of `message`; `None` (logged) for a message without JetStream metadata.
    pub fn new(subjects: &Subjects, message: jetstream::Message) -> Option<Self> {
        let (delivered, stream, stream_sequence) = match message.info() {
            Ok(info) => (
                u64::try_from(info.delivered).unwrap_or(1).max(1),
                info.stream.to_owned(),
                info.stream_sequence,
            ),
            Err(error) => {
                tracing::warn!(subject = %message.subject, %error, "message without jetstream metadata dropped");
                return None;
            }
        };
        let subject = message.subject.to_string();
        let subject_tenant = subjects.tenant_token(&subject).map(str::to_owned);
        Some(Self {
            message: Arc::new(message),
            delivered,
            stream,
            stream_sequence,
            subject,
            subject_tenant,
        })
    }

    pub fn message(&self) -> &Arc<jetstream::Message> {
        &self.message
    }

    /// The envelope of a `what` (`job`, `alert event`...) and its tenant, which must be the
    /// subject's; the error is the dead-letter reason.
    pub fn decode<M: Message>(&self, what: &str) -> Result<(TenantId, Decoded<M>), String> {
        decode_for_subject(
            self.subject_tenant.as_deref(),
            self.message.headers.as_ref(),
            &self.message.payload,
            what,
        )
    }

    /// Acks the delivery; a failed ack is logged (the message is delivered again).
    pub async fn ack(&self) {
        if let Err(error) = self.message.double_ack().await {
            tracing::warn!(subject = %self.subject, %error, "ack failed; the message will be redelivered");
        }
    }

    /// Hands the message back for another delivery after `delay` (`None`: at once).
    pub async fn nak(&self, delay: Option<Duration>) {
        if let Err(error) = self.message.ack_with(AckKind::Nak(delay)).await {
            tracing::warn!(subject = %self.subject, %error, "nak failed; the message is redelivered after ack_wait");
        }
    }

    /// Acks a success; Naks a [`JobError::Retry`] with backoff unless this is the last
    /// delivery; dead-letters a [`JobError::Fatal`] or the last delivery's failure.
    pub async fn settle(
        &self,
        bus: &Bus,
        redelivery: &Redelivery,
        result: Result<(), JobError>,
    ) -> Settled {
        match result {
            Ok(()) => {
                self.ack().await;
                Settled::Acked
            }
            Err(JobError::Retry(reason)) if !redelivery.is_last(self.delivered) => {
                let delay = redelivery.delay(self.delivered);
                tracing::info!(kind = %redelivery.dlq_kind, reason = %reason, delay_ms = delay.as_millis() as u64, "delivery failed, retrying later");
                self.nak(Some(delay)).await;
                crate::delivery_metrics::delivery_metrics().redelivery(&redelivery.dlq_kind);
                Settled::Retrying(delay)
            }
            Err(JobError::Retry(reason) | JobError::Fatal(reason)) => {
                self.dead_letter(bus, redelivery, &reason).await
            }
        }
    }

    /// Publishes the message as it arrived (body and headers) plus why it failed to
    /// `pulse.<tenant>.dlq.<kind>` (`_sys` when the subject names no tenant), then terminates
    /// it. Its dead-letter message id names its place in its stream and its own id
    /// ([`crate::message_id::dead_letter`]), so a retried dead-letter publish is stored once. When the publish fails the message is Nak'd with backoff: a later
    /// delivery tries again (the consumer of [`ensure_event_consumer`] has no server bound on
    /// deliveries for that reason).
    pub async fn dead_letter(&self, bus: &Bus, redelivery: &Redelivery, reason: &str) -> Settled {
        let kind = redelivery.dlq_kind.as_str();
        let tenant_token = self
            .subject_tenant
            .as_deref()
            .filter(|t| check_token(t).is_ok())
            .unwrap_or(SYSTEM_TENANT);
        let dlq_subject = bus.subjects().dlq_for_token(tenant_token, kind);

        let mut dlq_headers = self.message.headers.clone().unwrap_or_default();
        let original = dlq_headers.get(headers::MSG_ID).cloned();
        if let Some(original) = &original {
            dlq_headers.insert(headers::DLQ_ORIGINAL_MSG_ID, original.clone());
        }
        let dlq_id = crate::message_id::dead_letter(
            &self.stream,
            self.stream_sequence,
            original.as_ref().map(|id| id.as_str()),
        );
        dlq_headers.insert(headers::MSG_ID, dlq_id.as_str());
        dlq_headers.insert(headers::DLQ_REASON, header_text(reason, 1024));
        dlq_headers.insert(headers::DLQ_DELIVERIES, self.delivered.to_string());
        let original_subject = if check_header_value(&self.subject).is_ok() {
            self.subject.clone()
        } else {
            header_text(&self.subject, 1024)
        };
        dlq_headers.insert(headers::DLQ_SUBJECT, original_subject);
        dlq_headers.insert(
            headers::DLQ_STREAM_SEQUENCE,
            self.stream_sequence.to_string(),
        );

        match js_publish(
            bus.jetstream(),
            &dlq_subject,
            dlq_headers,
            self.message.payload.clone(),
        )
        .await
        {
            Ok(_) => {
                tracing::warn!(
                    kind,
                    subject = %self.subject,
                    deliveries = self.delivered,
                    reason = %reason,
                    "message dead-lettered"
                );
                crate::delivery_metrics::delivery_metrics().dead_letter(kind);
                if let Err(error) = self.message.double_ack_with(AckKind::Term).await {
                    tracing::warn!(%error, "terminating a dead-lettered message failed");
                }
                Settled::DeadLettered
            }
            Err(error) => {
                tracing::error!(
                    kind,
                    subject = %self.subject,
                    stream_sequence = self.stream_sequence,
                    %error,
                    "dead-letter publish failed"
                );
                let _ = self
                    .message
                    .ack_with(AckKind::Nak(Some(redelivery.delay(self.delivered))))
                    .await;
                Settled::Kept
            }
        }
    }
}

/// Decodes the envelope of a `what` received on a subject whose tenant token is
/// `subject_tenant`: its tenant header must name the same tenant. The error is the reason a
/// consumer dead-letters it with.
pub fn decode_for_subject<M: Message>(
    subject_tenant: Option<&str>,
    headers: Option<&HeaderMap>,
    payload: &[u8],
    what: &str,
) -> Result<(TenantId, Decoded<M>), String> {
    let decoded =
        decode::<M>(headers, payload).map_err(|error| format!("undecodable {what}: {error}"))?;
    match &decoded.meta.tenant {
        Some(tenant) if subject_tenant == Some(tenant.as_str()) => Ok((tenant.clone(), decoded)),
        _ => Err(format!("{what} tenant header does not match its subject")),
    }
}

/// Consecutive failed pulls of a consumer: the pause before the next pull, when to log it at
/// warn, and (for the job worker) when to give up.
#[derive(Debug, Clone)]
pub struct PullFailures {
    backoff: Backoff,
}

impl Default for PullFailures {
    fn default() -> Self {
        Self {
            backoff: Backoff::new(Duration::from_millis(100), Self::MAX_PAUSE),
        }
    }
}

impl PullFailures {
    /// Failed pulls in a row after which [`PullFailures::failed`] gives up.
    pub const LIMIT: u32 = 60;
    /// After the first failed pull of a run, every this many failures is logged at warn.
    pub const WARN_EVERY: u32 = 12;
    /// Upper bound of the pause between failed pulls.
    pub const MAX_PAUSE: Duration = Duration::from_secs(5);

    /// A pull went through: the run of failures is over.
    pub fn succeeded(&mut self) {
        self.backoff.reset();
    }

    /// Counts a failed pull (refused or broken: a server restarting, too many waiting
    /// pulls...): the pause before the next, or `None` when the run is too long to go on.
    pub fn failed(&mut self) -> Option<Duration> {
        let pause = self.failed_retrying();
        (self.count() < Self::LIMIT).then_some(pause)
    }

    /// Counts a failed pull and returns the pause before the next, never giving up: the pause
    /// doubles from 100 ms up to [`PullFailures::MAX_PAUSE`], jittered so the consumers of a
    /// restarted server do not all pull again at once.
    pub fn failed_retrying(&mut self) -> Duration {
        self.backoff.next_delay()
    }

    /// Whether the failure just counted is logged at warn: the first of a run and every
    /// [`PullFailures::WARN_EVERY`]th after it (the others at debug).
    pub fn worth_a_warning(&self) -> bool {
        let count = self.count();
        count == 1 || (count > 1 && count % Self::WARN_EVERY == 0)
    }

    /// Failed pulls in a row so far.
    pub fn count(&self) -> u32 {
        self.backoff.attempts()
    }
}

/// A durable consumer read one message at a time, in batches, with backoff after failed pulls.
pub struct SerialPull {
    consumer: PullConsumer,
    name: String,
    batch: usize,
    expires: Duration,
    messages: Option<pull::Batch>,
    failures: PullFailures,
}

impl SerialPull {
    /// Reads `consumer` (`name` is for the logs), `batch` messages a pull, each pull waiting up
    /// to `expires`.
    pub fn new(consumer: PullConsumer, name: &str, batch: usize, expires: Duration) -> Self {
        Self {
            consumer,
            name: name.to_owned(),
            batch: batch.max(1),
            expires,
            messages: None,
            failures: PullFailures::default(),
        }
    }

    /// The next message; `None` only once `shutdown` resolves (unacked messages of the batch are
    /// redelivered after ack_wait). Failed pulls (NATS down or restarting) are retried with
    /// capped backoff for as long as it takes, logged at warn now and then.
    pub async fn next(&mut self, shutdown: impl Future<Output = ()>) -> Option<jetstream::Message> {
        tokio::pin!(shutdown);
        loop {
            let error = match &mut self.messages {
                Some(messages) => {
                    let next = tokio::select! {
                        _ = &mut shutdown => return None,
                        next = messages.next() => next,
                    };
                    match next {
                        Some(Ok(message)) => return Some(message),
                        None => {
                            self.messages = None;
                            self.failures.succeeded();
                            continue;
                        }
                        Some(Err(error)) => {
                            self.messages = None;
                            error.to_string()
                        }
                    }
                }
                None => {
                    let batch = tokio::select! {
                        _ = &mut shutdown => return None,
                        batch = self
                            .consumer
                            .batch()
                            .max_messages(self.batch)
                            .expires(self.expires)
                            .messages() => batch,
                    };
                    match batch {
                        Ok(messages) => {
                            self.messages = Some(messages);
                            continue;
                        }
                        Err(error) => error.to_string(),
                    }
                }
            };
            let pause = self.failures.failed_retrying();
            let attempt = self.failures.count();
            if self.failures.worth_a_warning() {
                tracing::warn!(consumer = %self.name, %error, attempt, retry_ms = pause.as_millis() as u64, "pull failed, retrying");
            } else {
                tracing::debug!(consumer = %self.name, %error, attempt, retry_ms = pause.as_millis() as u64, "pull failed, retrying");
            }
            tokio::select! {
                _ = &mut shutdown => return None,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}

/// A durable consumer on the EVENTS stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventConsumerConfig {
    pub durable_name: String,
    pub description: String,
    /// The events it reads, e.g. `pulse.*.events.alert.>`.
    pub filter_subject: String,
    /// How long a delivery may stay unacked before it is redelivered.
    pub ack_wait: Duration,
    /// Deliveries of one event before the consumer's code dead-letters it (its
    /// [`Redelivery::max_deliver`]). Not a server bound: the server redelivers without one, so
    /// an event whose dead-letter publish failed is delivered (and dead-lettered) again.
    pub max_deliver: i64,
}

/// The server's `max_deliver` of every event consumer: unbounded. The limit is enforced by the
/// code ([`Delivery::settle`]); a server bound would stop redelivering an event whose dead letter
/// failed on its last delivery, losing it.
const EVENT_CONSUMER_SERVER_MAX_DELIVER: i64 = -1;

/// Ensures the durable consumer `config` on the EVENTS stream (creates it, or updates an
/// existing one to this configuration). A consumer created for the first time starts at new
/// events; afterwards its position survives restarts.
pub async fn ensure_event_consumer(
    bus: &Bus,
    config: &EventConsumerConfig,
) -> Result<PullConsumer, BusError> {
    let subjects = bus.subjects();
    bus.jetstream()
        .create_consumer_on_stream(
            pull::Config {
                durable_name: Some(config.durable_name.clone()),
                description: Some(config.description.clone()),
                filter_subject: config.filter_subject.clone(),
                ack_policy: AckPolicy::Explicit,
                deliver_policy: DeliverPolicy::New,
                ack_wait: config.ack_wait,
                max_deliver: EVENT_CONSUMER_SERVER_MAX_DELIVER,
                max_ack_pending: 1000,
                ..Default::default()
            },
            subjects.events_stream(),
        )
        .await
        .map_err(|err| BusError::nats("consumer create", err))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_delivery_is_bounded_by_max_deliver() {
        let r = Redelivery {
            dlq_kind: "k".to_owned(),
            max_deliver: 3,
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(3),
        };
        assert!(!r.is_last(1));
        assert!(!r.is_last(2));
        assert!(r.is_last(3));
        assert!(r.is_last(4));
        assert_eq!(r.delay(1), Duration::from_secs(1));
        assert_eq!(r.delay(2), Duration::from_secs(2));
        assert_eq!(r.delay(3), Duration::from_secs(3));
        let unbounded = Redelivery {
            max_deliver: 0,
            ..r
        };
        assert!(!unbounded.is_last(u64::MAX));
    }

    fn within(pause: Duration, ceiling_ms: u64) -> bool {
        let ceiling = Duration::from_millis(ceiling_ms);
        pause >= ceiling / 2 && pause <= ceiling
    }

    #[test]
    fn failed_pulls_back_off_up_to_a_cap_and_never_give_up() {
        let mut f = PullFailures::default();
        assert!(within(f.failed_retrying(), 100));
        assert!(f.worth_a_warning());
        assert!(within(f.failed_retrying(), 200));
        assert!(!f.worth_a_warning());
        // Far past the limit of `failed` (an hour-long outage): still a pause, capped.
        let mut warnings = 0;
        for _ in 3..=PullFailures::LIMIT * 12 {
            assert!(f.failed_retrying() <= PullFailures::MAX_PAUSE);
            if f.worth_a_warning() {
                warnings += 1;
            }
        }
        assert_eq!(f.count(), PullFailures::LIMIT * 12);
        assert!(within(f.failed_retrying(), 5000));
        assert_eq!(
            warnings,
            PullFailures::LIMIT * 12 / PullFailures::WARN_EVERY
        );
        f.succeeded();
        assert!(within(f.failed_retrying(), 100));
        assert!(f.worth_a_warning());
    }

    #[test]
    fn pull_failures_back_off_and_give_up_after_the_limit() {
        let mut f = PullFailures::default();
        assert!(f.failed().is_some_and(|pause| within(pause, 100)));
        assert!(f.failed().is_some_and(|pause| within(pause, 200)));
        f.succeeded();
        assert_eq!(f.count(), 0);
        for _ in 1..PullFailures::LIMIT {
            assert!(f.failed().is_some());
        }
        assert_eq!(f.failed(), None);
        assert_eq!(f.count(), PullFailures::LIMIT);
    }

    #[test]
    fn a_tenant_header_must_match_the_subject() {
        #[derive(Debug, serde::Serialize, serde::Deserialize)]
        struct Ping {
            n: u32,
        }
        impl Message for Ping {
            const TYPE: &'static str = "test.ping";
            const SCHEMA: u32 = 1;
        }
        let tenant = TenantId::new("acme").unwrap();
        let encoded = crate::encode(&tenant, &Ping { n: 1 }, None).unwrap();
        let (got, decoded) =
            decode_for_subject::<Ping>(Some("acme"), Some(&encoded.headers), &encoded.body, "ping")
                .unwrap();
        assert_eq!(got, tenant);
        assert_eq!(decoded.payload.n, 1);
        let elsewhere = decode_for_subject::<Ping>(
            Some("other"),
            Some(&encoded.headers),
            &encoded.body,
            "ping",
        );
        assert_eq!(
            elsewhere.err().as_deref(),
            Some("ping tenant header does not match its subject")
        );
        let undecodable = decode_for_subject::<Ping>(Some("acme"), None, b"{}", "ping");
        assert!(undecodable.unwrap_err().starts_with("undecodable ping: "));
    }
}
