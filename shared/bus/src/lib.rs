//! pulse-bus: subjects, the message envelope, typed request/reply, JetStream jobs and events,
//! the job worker, the transactional outbox and the heartbeat wire type.
//!
//! - [`Subjects`] builds `[<prefix>.]pulse.<tenant>.<domain>.<verb>` subjects and stream names.
//! - [`Message`] types travel in an envelope ([`envelope`]): `Nats-Msg-Id`, `Pulse-Type`,
//!   `Pulse-Schema: v<N>`, `Pulse-Tenant`, `traceparent`; body = serde JSON.
//! - [`Bus`] sends typed requests ([`Request`]), serves them ([`Bus::serve`]), publishes jobs
//!   and events.
//! - Each service's request/reply API is one module of [`Endpoint`] types ([`patrol_api`],
//!   [`actions_api`], [`verify_api`], [`relay_api`], [`models_api`]); [`events`] holds the domain events. Callers
//!   use the typed [`clients`]; a failed request answers with an [`ErrorReply`] whose code is
//!   one of the stable table ([`ErrorCode`]).
//! - [`ensure_streams`] and [`ensure_job_consumer`] set up JetStream idempotently.
//! - [`JobWorker`] consumes one job kind: ack after success, progress while running, Nak with
//!   backoff on failure, dead letter after the last delivery, graceful shutdown.
//! - [`redelivery`]: one delivery's ack, Nak with backoff or dead letter, for the job worker and
//!   the services' durable event consumers ([`SerialPull`]).
//! - [`outbox`]: enqueue in the caller's transaction; [`OutboxRelay`] publishes exactly once.
//! - [`message_id`]: every `Nats-Msg-Id` the bus sends, unique across databases and time.

pub mod actions_api;
pub mod assistant_api;
pub mod bus;
pub mod clients;
pub mod delivery_metrics;
pub mod endpoint;
pub mod envelope;
pub mod error;
pub mod events;
pub mod heartbeat;
pub mod message_id;
pub mod models_api;
pub mod outbox;
pub mod patrol_api;
pub mod redelivery;
pub mod relay_api;
pub mod responder;
pub mod streams;
pub mod subjects;
pub mod trace;
pub mod verify_api;
pub mod worker;

pub use bus::{Bus, Published, Request, TypedSubscriber};
pub use clients::{
    ActionBrokerClient, AssistantClient, ClientError, ModelsClient, PatrolClient, RelayClient,
    VerifierClient,
};
pub use endpoint::Endpoint;
pub use envelope::{Decoded, Encoded, EnvelopeError, EnvelopeMeta, Message, decode, encode};
pub use error::{BusError, CodedError, ErrorReply};
pub use heartbeat::Heartbeat;
pub use outbox::{OutboxError, OutboxRelay, OutboxRow, RelayConfig, RelayHooks, enqueue};
pub use pulse_capabilities::ErrorCode;
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
