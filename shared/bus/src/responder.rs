//! Serving typed requests: decode, call the handler, send the typed reply or an [`ErrorReply`].

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use async_nats::{HeaderMap, Subject};
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use pulse_domain::TenantId;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::Instrument;

use crate::bus::{Bus, Request};
use crate::envelope::{EnvelopeMeta, decode, encode, encode_system, headers};
use crate::error::{BusError, CodedError, ErrorReply};
use crate::trace;
use pulse_capabilities::ErrorCode;

/// Requests handled at once by one responder; more wait in the subscription's buffer.
const MAX_IN_FLIGHT: usize = 256;

/// What a handler knows about the request besides its body.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub tenant: TenantId,
    pub subject: String,
    pub meta: EnvelopeMeta,
}

impl RequestContext {
    /// The caller's trace, to continue it in spans the handler creates itself.
    pub fn otel_context(&self) -> Option<opentelemetry::Context> {
        self.meta.otel_context()
    }
}

/// A running responder. Dropping it (or calling [`Responder::stop`]) unsubscribes; `stop` also
/// waits for the requests in flight to be answered.
#[derive(Debug)]
pub struct Responder {
    /// Cancels the serving task when dropped.
    stop: DropGuard,
    task: tokio::task::JoinHandle<()>,
}

impl Responder {
    /// Stops taking requests and waits until every request in flight got its reply.
    pub async fn stop(self) {
        let Self { stop, task } = self;
        drop(stop);
        if let Err(err) = task.await {
            tracing::warn!(error = %err, "responder task ended abnormally");
        }
    }
}

impl Bus {
    /// Serves requests of type `R` on `subject` (wildcards allowed, e.g.
    /// `subjects.any_tenant("patrol.run.request")`), in `queue_group` when given so replicas share
    /// them. The handler's `Err` travels as a typed error reply: its [`CodedError::code`] and
    /// its message.
    pub async fn serve<R, E, F, Fut>(
        &self,
        subject: &str,
        queue_group: Option<&str>,
        handler: F,
    ) -> Result<Responder, BusError>
    where
        R: Request,
        E: CodedError + Send + 'static,
        F: Fn(RequestContext, R) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R::Reply, E>> + Send + 'static,
    {
        let client = self.client().clone();
        let mut subscriber = match queue_group {
            Some(group) => client
                .queue_subscribe(subject.to_owned(), group.to_owned())
                .await
                .map_err(|err| BusError::nats("queue subscribe", err))?,
            None => client
                .subscribe(subject.to_owned())
                .await
                .map_err(|err| BusError::nats("subscribe", err))?,
        };
        // The server has our interest once the flush returns: a request sent after `serve`
        // returned finds this responder.
        client
            .flush()
            .await
            .map_err(|err| BusError::nats("flush", err))?;

        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let handler = Arc::new(handler);
        let bus = self.clone();
        let serving = subject.to_owned();
        let task = tokio::spawn(async move {
            let limit = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
            let mut in_flight = JoinSet::new();
            loop {
                let msg = tokio::select! {
                    msg = subscriber.next() => msg,
                    _ = stopped.cancelled() => None,
                };
                let Some(msg) = msg else { break };
                let Ok(permit) = limit.clone().acquire_owned().await else {
                    break;
                };
                let handler = handler.clone();
                let bus = bus.clone();
                in_flight.spawn(async move {
                    handle::<R, E, F, Fut>(&bus, msg, handler.as_ref()).await;
                    drop(permit);
                });
                // Reap finished handlers so the set does not grow.
                while in_flight.try_join_next().is_some() {}
            }
            if let Err(err) = subscriber.unsubscribe().await {
                tracing::debug!(subject = %serving, error = %err, "unsubscribe failed");
            }
            // Once stopped, the server knows: later requests see no responders.
            let _ = bus.client().flush().await;
            while in_flight.join_next().await.is_some() {}
        });
        Ok(Responder {
            stop: stop.drop_guard(),
            task,
        })
    }
}

async fn handle<R, E, F, Fut>(bus: &Bus, msg: async_nats::Message, handler: &F)
where
    R: Request,
    E: CodedError + Send + 'static,
    F: Fn(RequestContext, R) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R::Reply, E>> + Send + 'static,
{
    let Some(reply_to) = msg.reply.clone() else {
        tracing::warn!(subject = %msg.subject, "request without reply subject dropped");
        return;
    };
    let subject = msg.subject.to_string();
    let decoded = match decode::<R>(msg.headers.as_ref(), &msg.payload) {
        Ok(decoded) => decoded,
        Err(err) => {
            tracing::warn!(%subject, error = %err, "undecodable request");
            let reply = ErrorReply::new(ErrorCode::InvalidRequest, err.to_string());
            send_error(bus, reply_to, None, &reply).await;
            return;
        }
    };
    let Some(tenant) = decoded.meta.tenant.clone() else {
        let reply = ErrorReply::new(ErrorCode::InvalidRequest, "request carries no tenant");
        send_error(bus, reply_to, None, &reply).await;
        return;
    };
    if let Some(token) = bus.subjects().tenant_token(&subject)
        && token != "*"
        && token != tenant.as_str()
    {
        let reply = ErrorReply::new(
            ErrorCode::InvalidRequest,
            "tenant header does not match the subject",
        );
        send_error(bus, reply_to, Some(&tenant), &reply).await;
        return;
    }

    let span = tracing::info_span!(
        "bus.request",
        subject = %subject,
        message_type = R::TYPE,
        tenant = %tenant,
        message_id = %decoded.meta.message_id,
    );
    trace::continue_trace(&span, decoded.meta.traceparent.as_deref());
    let ctx = RequestContext {
        tenant: tenant.clone(),
        subject: subject.clone(),
        meta: decoded.meta,
    };
    let outcome = AssertUnwindSafe(handler(ctx, decoded.payload))
        .catch_unwind()
        .instrument(span.clone())
        .await;
    reply_with::<R, E>(bus, reply_to, &tenant, outcome)
        .instrument(span)
        .await;
}

async fn reply_with<R: Request, E: CodedError>(
    bus: &Bus,
    reply_to: Subject,
    tenant: &TenantId,
    outcome: std::thread::Result<Result<R::Reply, E>>,
) {
    let tenant = tenant.clone();
    match outcome {
        Ok(Ok(reply)) => match encode(&tenant, &reply, None) {
            Ok(enc) => send(bus, reply_to, enc.headers, enc.body).await,
            Err(err) => {
                tracing::error!(error = %err, "reply could not be encoded");
                let reply = ErrorReply::new(ErrorCode::InternalError, "reply could not be encoded");
                send_error(bus, reply_to, Some(&tenant), &reply).await;
            }
        },
        Ok(Err(error)) => {
            let reply = error.into_reply();
            send_error(bus, reply_to, Some(&tenant), &reply).await;
        }
        Err(_) => {
            tracing::error!("request handler panicked");
            let reply = ErrorReply::new(ErrorCode::InternalError, "request handler failed");
            send_error(bus, reply_to, Some(&tenant), &reply).await;
        }
    }
}

async fn send_error(bus: &Bus, reply_to: Subject, tenant: Option<&TenantId>, reply: &ErrorReply) {
    let encoded = match tenant {
        Some(t) => encode(t, reply, None),
        None => encode_system(reply, None),
    };
    match encoded {
        Ok(mut enc) => {
            enc.headers.insert(headers::STATUS, "error");
            send(bus, reply_to, enc.headers, enc.body).await;
        }
        Err(err) => tracing::error!(error = %err, "error reply could not be encoded"),
    }
}

async fn send(bus: &Bus, reply_to: Subject, headers: HeaderMap, body: Bytes) {
    if let Err(err) = bus
        .client()
        .publish_with_headers(reply_to, headers, body)
        .await
    {
        tracing::warn!(error = %err, "reply could not be sent");
    }
}
