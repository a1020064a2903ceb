//! `GET /api/ai/patrol/stream` (scope `monitoring:read`): the caller's Patrol run events as
//! Server-Sent Events, read from the JetStream events stream.
//!
//! - Every `pulse.<tenant>.events.run.>` event of the caller's tenant, and only those (the
//!   consumer's filter names the tenant), is sent as `event: run.<verb>` (from the subject),
//!   `id: <stream sequence>` and `data: <the message body JSON>`. Other tenants' events never reach
//!   the consumer.
//! - Without `Last-Event-ID` only events published after the stream opened are sent. With
//!   `Last-Event-ID: <id>` (or `?last_event_id=<id>` for clients that cannot set headers; the
//!   header wins) delivery resumes right after that id, so every later event arrives exactly once
//!   and in order. An id that is not a decimal sequence number is refused with 400
//!   `invalid_last_event_id`.
//! - Events are retained for a bounded time and size. When events after the given id are no
//!   longer retained, delivery starts at the oldest retained event and the first frame is
//!   `event: gap` telling the client that events were lost: its `data` gives the id asked for and
//!   the id delivery resumes after (also its `id`, so a reconnect does not report the same loss
//!   twice). An id beyond the newest event (the stream was reset) is treated the same way. This is
//!   checked when the stream opens.
//! - A comment line (`: keepalive`) goes out every 15 seconds so proxies keep the connection.
//! - One tenant may hold `gateway.max_streams_per_tenant` streams open on one gateway; more get
//!   429 `too_many_streams`.
//! - The consumer is ephemeral (no acks, in memory) and is deleted as soon as the client goes
//!   away; the server also removes it after 30 s without pulls if the gateway dies. A gap in the
//!   consumer's own delivery sequence or a bus error ends the response; the client reconnects
//!   with its last id and loses nothing.
//! - At shutdown every stream ends, so clients reconnect (with their last id) to another gateway.
//! - Opening or resuming a stream only reads events: it never requests a run.

use std::convert::Infallible;

use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use pulse_api::events::StreamQuery;
use pulse_capabilities::ErrorCode;
use tokio::sync::mpsc;

use crate::authorized::{Authorized, MonitoringReadScope};
use crate::error::ApiError;
use crate::event_stream::{
    CONSUMER_INACTIVE_THRESHOLD, KEEPALIVE_INTERVAL, bus_unavailable, gap_event, render,
    resume_point, start_for,
};
use crate::state::AppState;

/// Events rendered but not yet written to a slow client.
const BUFFERED_EVENTS: usize = 64;

/// Every event name the stream sends: the run events (`run.<verb>` of the bus's run events)
/// and the gap notice.
pub const EVENT_NAMES: [&str; 6] = [
    "run.accepted",
    "run.started",
    "run.progress",
    "run.tool",
    "run.completed",
    "gap",
];

pub async fn stream(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    headers: HeaderMap,
    query: Result<Query<StreamQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) =
        query.map_err(|e| ApiError::new(ErrorCode::InvalidParameter, e.body_text()))?;
    let resume = resume_point(&headers, query.last_event_id.as_deref())?;
    let tenant = auth.principal.tenant;
    let permit = state.streams.acquire(&tenant)?;

    let subjects = state.bus.subjects();
    let js = state.bus.jetstream().clone();
    let stream_name = subjects.events_stream();
    let mut events_stream = js
        .get_stream(&stream_name)
        .await
        .map_err(|e| bus_unavailable("events stream lookup failed", e))?;
    let info = events_stream
        .info()
        .await
        .map_err(|e| bus_unavailable("events stream info failed", e))?;
    let start = start_for(resume, info.state.first_sequence, info.state.last_sequence);
    let consumer: PullConsumer = events_stream
        .create_consumer(pull::Config {
            description: Some(format!("pulse patrol event stream of {tenant}")),
            filter_subject: subjects.event(&tenant, "run", ">"),
            deliver_policy: start.policy,
            ack_policy: AckPolicy::None,
            inactive_threshold: CONSUMER_INACTIVE_THRESHOLD,
            memory_storage: true,
            num_replicas: 1,
            ..Default::default()
        })
        .await
        .map_err(|e| bus_unavailable("event stream consumer create failed", e))?;
    let consumer_name = consumer.cached_info().name.clone();
    if let Some(gap) = start.gap {
        tracing::info!(%tenant, last_event_id = gap.last_event_id, resumed_after = gap.resumed_after, "event stream resumed past lost events");
    }

    let (tx, rx) = mpsc::channel(BUFFERED_EVENTS);
    if let Some(gap) = start.gap {
        // The channel is new and empty, so this cannot fail for lack of room.
        let _ = tx.try_send(gap_event(gap));
    }
    let events_prefix = subjects.tenant_events_prefix(&tenant);
    let shutdown = state.streams.shutdown().clone();
    tokio::spawn(async move {
        let outcome = tokio::select! {
            outcome = forward(&consumer, &events_prefix, &tx) => outcome,
            () = shutdown.cancelled() => Ok(()),
        };
        if let Err(reason) = outcome {
            tracing::info!(%tenant, consumer = %consumer_name, %reason, "event stream closed");
        }
        drop(tx);
        if let Err(error) = js
            .delete_consumer_from_stream(&consumer_name, &stream_name)
            .await
        {
            tracing::debug!(%error, consumer = %consumer_name, "event stream consumer not deleted; the server expires it");
        }
        drop(permit);
    });
    let events = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|event| (Ok::<_, Infallible>(event), rx))
    });
    Ok(Sse::new(events)
        .keep_alive(
            KeepAlive::new()
                .interval(KEEPALIVE_INTERVAL)
                .text("keepalive"),
        )
        .into_response())
}

/// Pulls the consumer's events into `tx` until the client goes away (`Ok`) or delivery can no
/// longer be trusted to be complete and in order (`Err`, the client resumes by id).
async fn forward(
    consumer: &PullConsumer,
    events_prefix: &str,
    tx: &mpsc::Sender<Event>,
) -> Result<(), String> {
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| format!("cannot pull events: {e}"))?;
    let mut consumer_sequence = 0;
    loop {
        let next = tokio::select! {
            () = tx.closed() => return Ok(()),
            next = messages.next() => next,
        };
        let message = next
            .ok_or("the consumer stopped")?
            .map_err(|e| format!("pulling events failed: {e}"))?;
        let info = message
            .info()
            .map_err(|e| format!("event without delivery info: {e}"))?;
        if info.consumer_sequence != consumer_sequence + 1 {
            return Err(format!(
                "delivery skipped from {consumer_sequence} to {}",
                info.consumer_sequence
            ));
        }
        consumer_sequence = info.consumer_sequence;
        let Some(event) = render(
            events_prefix,
            &message.subject,
            &message.payload,
            info.stream_sequence,
        ) else {
            tracing::warn!(subject = %message.subject, sequence = info.stream_sequence, "event body is not JSON; skipped");
            continue;
        };
        if tx.send(event).await.is_err() {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use pulse_bus::events::{RUN_ACCEPTED, RUN_COMPLETED, RUN_PROGRESS, RUN_STARTED, RUN_TOOL};

    use super::EVENT_NAMES;

    #[test]
    fn the_documented_names_are_the_run_events() {
        let run: Vec<String> = [
            RUN_ACCEPTED,
            RUN_STARTED,
            RUN_PROGRESS,
            RUN_TOOL,
            RUN_COMPLETED,
        ]
        .iter()
        .map(|(domain, event)| format!("{domain}.{event}"))
        .collect();
        assert_eq!(
            EVENT_NAMES[..5],
            run.iter().map(String::as_str).collect::<Vec<_>>()[..]
        );
    }
}
