//! The typed client: request/reply, core publish, JetStream publish of jobs and events.

use std::marker::PhantomData;
use std::time::Duration;

use async_nats::jetstream::{self, context::PublishErrorKind, publish::PublishAck};
use async_nats::{Client, HeaderMap, RequestErrorKind};
use bytes::Bytes;
use futures::StreamExt;
use pulse_domain::TenantId;

use crate::envelope::{
    self, Decoded, EnvelopeError, Message, decode, encode, encode_system, headers,
};
use crate::error::{BusError, RawErrorReply};
use crate::heartbeat::Heartbeat;
use crate::streams::{self, JobConsumerConfig, StreamSettings};
use crate::subjects::{Subjects, check_publish_subject, check_token};

/// A request with its typed reply.
pub trait Request: Message {
    type Reply: Message;
}

/// The outcome of a JetStream publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub message_id: String,
    pub stream: String,
    pub stream_sequence: u64,
    /// The stream already held a message with this id (within its duplicate window) and did
    /// not store this one.
    pub duplicate: bool,
}

/// A NATS connection with the subjects of one deployment.
#[derive(Debug, Clone)]
pub struct Bus {
    client: Client,
    js: jetstream::Context,
    subjects: Subjects,
}

impl Bus {
    pub fn new(client: Client, subjects: Subjects) -> Self {
        let js = jetstream::new(client.clone());
        Self {
            client,
            js,
            subjects,
        }
    }

    /// With a JetStream context configured by the caller (timeouts, domain).
    pub fn with_jetstream(client: Client, js: jetstream::Context, subjects: Subjects) -> Self {
        Self {
            client,
            js,
            subjects,
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn jetstream(&self) -> &jetstream::Context {
        &self.js
    }

    pub fn subjects(&self) -> &Subjects {
        &self.subjects
    }

    /// Creates or updates the JOBS, EVENTS and DLQ streams with the default limits.
    pub async fn ensure_streams(&self) -> Result<(), BusError> {
        streams::ensure_streams(&self.js, &self.subjects).await
    }

    /// Creates or updates the streams with the given limits.
    pub async fn ensure_streams_with(&self, settings: &StreamSettings) -> Result<(), BusError> {
        streams::ensure_streams_with(&self.js, &self.subjects, settings).await
    }

    /// Creates (or updates) the durable consumer of one job kind.
    pub async fn ensure_job_consumer(
        &self,
        kind: &str,
        config: &JobConsumerConfig,
    ) -> Result<jetstream::consumer::PullConsumer, BusError> {
        streams::ensure_job_consumer(&self.js, &self.subjects, kind, config).await
    }

    /// Sends a typed request over core NATS and waits up to `timeout` for the typed reply.
    pub async fn request<R: Request>(
        &self,
        tenant: &TenantId,
        subject: &str,
        req: &R,
        timeout: Duration,
    ) -> Result<R::Reply, BusError> {
        check_publish_subject(subject)?;
        let enc = encode(tenant, req, None)?;
        let request = async_nats::Request::new()
            .headers(enc.headers)
            .payload(enc.body)
            .timeout(Some(timeout));
        let reply = match self.client.send_request(subject.to_owned(), request).await {
            Ok(reply) => reply,
            Err(err) => {
                return Err(match err.kind() {
                    RequestErrorKind::TimedOut => BusError::Timeout {
                        subject: subject.to_owned(),
                    },
                    RequestErrorKind::NoResponders => BusError::NoResponders {
                        subject: subject.to_owned(),
                    },
                    _ => BusError::nats("request", err),
                });
            }
        };
        let reply_headers = reply.headers.as_ref();
        if envelope::header(reply_headers, headers::STATUS) == Some("error") {
            // An error reply may come from a responder that could not read our tenant.
            let err = decode::<RawErrorReply>(reply_headers, &reply.payload)?;
            return Err(err.payload.into());
        }
        let decoded = decode::<R::Reply>(reply_headers, &reply.payload)?;
        check_same_tenant(tenant, &decoded)?;
        Ok(decoded.payload)
    }

    /// Publishes a tenant message over core NATS (fire and forget).
    pub async fn publish<M: Message>(
        &self,
        tenant: &TenantId,
        subject: &str,
        msg: &M,
    ) -> Result<(), BusError> {
        check_publish_subject(subject)?;
        let enc = encode(tenant, msg, None)?;
        self.core_publish(subject, enc.headers, enc.body).await
    }

    /// Publishes this instance's heartbeat on `pulse._sys.heartbeat` (core NATS).
    pub async fn publish_heartbeat(&self, heartbeat: &Heartbeat) -> Result<(), BusError> {
        let enc = encode_system(heartbeat, None)?;
        self.core_publish(&self.subjects.heartbeat(), enc.headers, enc.body)
            .await
    }

    async fn core_publish(
        &self,
        subject: &str,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<(), BusError> {
        self.client
            .publish_with_headers(subject.to_owned(), headers, body)
            .await
            .map_err(|err| BusError::nats("publish", err))
    }

    /// Publishes a job on `pulse.<tenant>.jobs.<kind>` and waits for the stream's ack. A given
    /// message id makes the publish idempotent within the stream's duplicate window.
    pub async fn publish_job<M: Message>(
        &self,
        tenant: &TenantId,
        kind: &str,
        msg: &M,
        message_id: Option<&str>,
    ) -> Result<Published, BusError> {
        check_token(kind)?;
        let enc = encode(tenant, msg, message_id)?;
        let subject = self.subjects.job(tenant, kind);
        self.publish_durable(&subject, enc.message_id, enc.headers, enc.body)
            .await
    }

    /// Publishes an event on `pulse.<tenant>.events.<domain>.<event>` straight to the EVENTS
    /// stream. Changes to the database announce themselves through the outbox instead.
    pub async fn publish_event<M: Message>(
        &self,
        tenant: &TenantId,
        domain: &str,
        event: &str,
        msg: &M,
        message_id: Option<&str>,
    ) -> Result<Published, BusError> {
        check_token(domain)?;
        let subject = self.subjects.event(tenant, domain, event);
        check_publish_subject(&subject)?;
        let enc = encode(tenant, msg, message_id)?;
        self.publish_durable(&subject, enc.message_id, enc.headers, enc.body)
            .await
    }

    /// JetStream publish of already encoded headers and body, awaiting the ack.
    pub(crate) async fn publish_durable(
        &self,
        subject: &str,
        message_id: String,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Published, BusError> {
        let ack = js_publish(&self.js, subject, headers, body).await?;
        Ok(Published {
            message_id,
            stream: ack.stream,
            stream_sequence: ack.sequence,
            duplicate: ack.duplicate,
        })
    }

    /// Subscribes to `subject` (wildcards allowed) and decodes each message as `M`.
    pub async fn subscribe<M: Message>(
        &self,
        subject: &str,
    ) -> Result<TypedSubscriber<M>, BusError> {
        let subscriber = self
            .client
            .subscribe(subject.to_owned())
            .await
            .map_err(|err| BusError::nats("subscribe", err))?;
        // Make sure the server has the interest before the caller relies on it.
        self.client
            .flush()
            .await
            .map_err(|err| BusError::nats("flush", err))?;
        Ok(TypedSubscriber {
            subscriber,
            _message: PhantomData,
        })
    }
}

/// JetStream publish with headers, awaiting the ack.
pub(crate) async fn js_publish(
    js: &jetstream::Context,
    subject: &str,
    headers: HeaderMap,
    body: Bytes,
) -> Result<PublishAck, BusError> {
    let no_stream = |kind: PublishErrorKind| kind == PublishErrorKind::StreamNotFound;
    let pending = js
        .publish_with_headers(subject.to_owned(), headers, body)
        .await
        .map_err(|err| {
            if no_stream(err.kind()) {
                BusError::NoStream {
                    subject: subject.to_owned(),
                }
            } else {
                BusError::nats("jetstream publish", err)
            }
        })?;
    pending.await.map_err(|err| {
        if no_stream(err.kind()) {
            BusError::NoStream {
                subject: subject.to_owned(),
            }
        } else {
            BusError::nats("jetstream publish ack", err)
        }
    })
}

fn check_same_tenant<M>(tenant: &TenantId, decoded: &Decoded<M>) -> Result<(), EnvelopeError> {
    match &decoded.meta.tenant {
        Some(t) if t == tenant => Ok(()),
        Some(t) => Err(EnvelopeError::BadTenant(t.as_str().to_owned())),
        None => Err(EnvelopeError::BadTenant(
            crate::subjects::SYSTEM_TENANT.to_owned(),
        )),
    }
}

/// A core subscription that decodes every message as `M`.
#[derive(Debug)]
pub struct TypedSubscriber<M> {
    subscriber: async_nats::Subscriber,
    _message: PhantomData<fn() -> M>,
}

impl<M: Message> TypedSubscriber<M> {
    /// The next message, or `None` when the subscription ended. A message that does not decode
    /// as `M` is returned as an error; the subscription goes on.
    pub async fn next(&mut self) -> Option<Result<Decoded<M>, EnvelopeError>> {
        let msg = self.subscriber.next().await?;
        Some(decode::<M>(msg.headers.as_ref(), &msg.payload))
    }

    /// The underlying subscriber.
    pub fn into_inner(self) -> async_nats::Subscriber {
        self.subscriber
    }
}
