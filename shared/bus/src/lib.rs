//! pulse-bus: subjects, the message envelope, typed request/reply, JetStream jobs and events,
//! the job worker, the transactional outbox and the heartbeat wire type.
//!
//! - [`Subjects`] builds `[<prefix>.]pulse.<tenant>.<domain>.<verb>` subjects and stream names.
//! - [`Message`] types travel in an envelope ([`envelope`]): `Nats-Msg-Id`, `Pulse-Type`,
//!   `Pulse-Schema: v<N>`, `Pulse-Tenant`, `traceparent`; body = serde JSON.
//! - [`Bus`] sends typed requests ([`Request`]), serves them ([`Bus::serve`]), publishes jobs
//!   and events.
//! - [`ensure_streams`] and [`ensure_job_consumer`] set up JetStream idempotently.
//! - [`JobWorker`] consumes one job kind: ack after success, progress while running, Nak with
//!   backoff on failure, dead letter after the last delivery, graceful shutdown.
//! - [`redelivery`]: one delivery's ack, Nak with backoff or dead letter, for the job worker and
//!   the services' durable event consumers ([`SerialPull`]).
//! - [`outbox`]: enqueue in the caller's transaction; [`OutboxRelay`] publishes exactly once.
//! - [`message_id`]: every `Nats-Msg-Id` the bus sends, unique across databases and time.

pub mod bus;
pub mod envelope;
pub mod error;
pub mod events;
pub mod heartbeat;
pub mod message_id;
pub mod outbox;
pub mod redelivery;
pub mod relay_api;
pub mod responder;
pub mod streams;
pub mod subjects;
pub mod trace;
pub mod worker;

pub use bus::{Bus, Published, Request, TypedSubscriber};
pub use envelope::{Decoded, Encoded, EnvelopeError, EnvelopeMeta, Message, decode, encode};
pub use error::{BusError, ErrorReply};
pub use heartbeat::Heartbeat;
pub use outbox::{OutboxError, OutboxRelay, OutboxRow, RelayConfig, RelayHooks, enqueue};
pub use redelivery::{
    Delivery, EventConsumerConfig, JobError, PullFailures, Redelivery, SerialPull, Settled,
    ensure_event_consumer,
};
pub use responder::{RequestContext, Responder};
pub use streams::{
    JobConsumerConfig, StreamSettings, ensure_job_consumer, ensure_streams, ensure_streams_with,
};
pub use subjects::{SubjectError, Subjects};
pub use worker::{JobContext, JobWorker, JobWorkerConfig};

/// Re-exported so users name the same versions.
pub use async_nats;
