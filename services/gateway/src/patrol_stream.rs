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

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use pulse_capabilities::ErrorCode;
use pulse_domain::TenantId;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::auth::{Authorized, MonitoringReadScope};
use crate::{ApiError, AppState};

/// How often an idle stream sends a comment line.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(15);
/// The server deletes a consumer nobody pulls from for this long (the gateway died).
const CONSUMER_INACTIVE_THRESHOLD: Duration = Duration::from_secs(30);
/// Events rendered but not yet written to a slow client.
const BUFFERED_EVENTS: usize = 64;
/// The `Last-Event-ID` header (a browser's `EventSource` sends it on reconnect).
const LAST_EVENT_ID: &str = "last-event-id";

/// The open event streams: counted per tenant against the bound, and ended at shutdown (an open
/// stream would otherwise hold the graceful shutdown forever).
#[derive(Debug)]
pub struct StreamLimits {
    max_per_tenant: usize,
    open: Mutex<HashMap<TenantId, usize>>,
    shutdown: CancellationToken,
}

/// One open stream; closing it (dropping this) frees the slot.
#[derive(Debug)]
pub struct StreamPermit {
    limits: Arc<StreamLimits>,
    tenant: TenantId,
}

impl StreamLimits {
    pub fn new(max_per_tenant: usize, shutdown: CancellationToken) -> Self {
        Self {
            max_per_tenant,
            open: Mutex::new(HashMap::new()),
            shutdown,
        }
    }

    pub fn max_per_tenant(&self) -> usize {
        self.max_per_tenant
    }

    /// A slot for one more stream of `tenant`, or `None` when it holds the maximum.
    pub fn try_acquire(self: &Arc<Self>, tenant: &TenantId) -> Option<StreamPermit> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(tenant.clone()).or_insert(0);
        if *count >= self.max_per_tenant {
            return None;
        }
        *count += 1;
        Some(StreamPermit {
            limits: self.clone(),
            tenant: tenant.clone(),
        })
    }

    /// Streams `tenant` holds open.
    pub fn open_for(&self, tenant: &TenantId) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(tenant).copied().unwrap_or(0)
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut open = self.limits.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.tenant) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.tenant);
            }
        }
    }
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    pub last_event_id: Option<String>,
}

fn parse_event_id(raw: &str) -> Result<Option<u64>, ApiError> {
    let raw = raw.trim_matches([' ', '\t']);
    if raw.is_empty() {
        // An empty id is how SSE resets the last event id: no resume point.
        return Ok(None);
    }
    if !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid_id(raw));
    }
    raw.parse::<u64>().map(Some).map_err(|_| invalid_id(raw))
}

fn invalid_id(raw: &str) -> ApiError {
    let shown: String = raw.chars().take(40).collect();
    ApiError::new(
        ErrorCode::InvalidLastEventId,
        format!("Last-Event-ID {shown:?} is not an event id: expected a decimal sequence number"),
    )
}

/// The resume point: the `Last-Event-ID` header, else the `last_event_id` query parameter.
fn resume_point(headers: &HeaderMap, query: Option<&str>) -> Result<Option<u64>, ApiError> {
    match headers.get(LAST_EVENT_ID) {
        Some(value) => {
            let value = value
                .to_str()
                .map_err(|_| invalid_id(&String::from_utf8_lossy(value.as_bytes())))?;
            parse_event_id(value)
        }
        None => query.map_or(Ok(None), parse_event_id),
    }
}

/// Where delivery starts and whether events before it were lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Start {
    policy: DeliverPolicy,
    gap: Option<Gap>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
struct Gap {
    last_event_id: u64,
    /// Delivery resumes with the first event after this id.
    resumed_after: u64,
}

/// The start for a resume point, given the stream's oldest and newest retained sequence
/// (`first_seq` is `last_seq + 1` for an empty stream).
fn start_for(resume: Option<u64>, first_seq: u64, last_seq: u64) -> Start {
    let Some(last_seen) = resume else {
        return Start {
            policy: DeliverPolicy::New,
            gap: None,
        };
    };
    let wanted = last_seen.saturating_add(1);
    // An id beyond the newest event belongs to a stream that was reset: all it holds is unseen.
    let start = if last_seen > last_seq {
        first_seq
    } else {
        wanted.max(first_seq)
    };
    let gap = (start != wanted).then(|| Gap {
        last_event_id: last_seen,
        resumed_after: start.saturating_sub(1),
    });
    Start {
        policy: DeliverPolicy::ByStartSequence {
            start_sequence: start.max(1),
        },
        gap,
    }
}

fn gap_event(gap: Gap) -> Event {
    let data = serde_json::json!({
        "last_event_id": gap.last_event_id.to_string(),
        "resumed_after": gap.resumed_after.to_string(),
        "message": "events after last_event_id are no longer retained; \
                    some events up to resumed_after were lost",
    });
    Event::default()
        .event("gap")
        .id(gap.resumed_after.to_string())
        .data(data.to_string())
}

/// One event message as an SSE frame: `run.<verb>`, its stream sequence and its JSON body. A
/// body that is not JSON is not one of ours and is skipped.
fn render(events_prefix: &str, subject: &str, payload: &[u8], sequence: u64) -> Option<Event> {
    let name = subject.strip_prefix(events_prefix)?;
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    // A body with raw line breaks is re-encoded: SSE data lines cannot carry them.
    let data = match std::str::from_utf8(payload) {
        Ok(text) if !text.contains(['\r', '\n']) => text.to_owned(),
        _ => value.to_string(),
    };
    Some(
        Event::default()
            .event(name)
            .id(sequence.to_string())
            .data(data),
    )
}

fn bus_unavailable(what: &str, error: impl std::fmt::Display) -> ApiError {
    tracing::warn!(%error, "{what}");
    ApiError::new(
        ErrorCode::ServiceUnavailable,
        "the message bus is unavailable; retry shortly",
    )
}

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
    let permit = state.streams.try_acquire(&tenant).ok_or_else(|| {
        ApiError::new(
            ErrorCode::TooManyStreams,
            format!(
                "this tenant already has {} event streams open (gateway.max_streams_per_tenant)",
                state.streams.max_per_tenant()
            ),
        )
    })?;

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
    let shutdown = state.streams.shutdown.clone();
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
    use super::*;

    fn tenant(name: &str) -> TenantId {
        TenantId::new(name).unwrap()
    }

    #[test]
    fn event_ids_are_decimal_sequences() {
        assert_eq!(parse_event_id("42").unwrap(), Some(42));
        assert_eq!(parse_event_id(" 7 ").unwrap(), Some(7));
        assert_eq!(parse_event_id("").unwrap(), None);
        assert_eq!(parse_event_id("0").unwrap(), Some(0));
        for bad in ["-1", "+1", "abc", "1.5", "0x10", "99999999999999999999999"] {
            let err = parse_event_id(bad).expect_err(bad);
            assert_eq!(err.code, ErrorCode::InvalidLastEventId, "{bad}");
        }
    }

    #[test]
    fn the_header_wins_over_the_query() {
        let mut headers = HeaderMap::new();
        assert_eq!(resume_point(&headers, Some("5")).unwrap(), Some(5));
        assert_eq!(resume_point(&headers, None).unwrap(), None);
        headers.insert(LAST_EVENT_ID, "9".parse().unwrap());
        assert_eq!(resume_point(&headers, Some("5")).unwrap(), Some(9));
        headers.insert(LAST_EVENT_ID, "nine".parse().unwrap());
        assert!(resume_point(&headers, Some("5")).is_err());
    }

    #[test]
    fn resume_starts_after_the_id_or_reports_a_gap() {
        // No id: only new events.
        assert_eq!(
            start_for(None, 1, 10),
            Start {
                policy: DeliverPolicy::New,
                gap: None
            }
        );
        // Retained: right after the id, no gap.
        assert_eq!(
            start_for(Some(7), 3, 10),
            Start {
                policy: DeliverPolicy::ByStartSequence { start_sequence: 8 },
                gap: None
            }
        );
        // The newest id: waits for the next event.
        assert_eq!(start_for(Some(10), 3, 10).gap, None);
        // Trimmed: from the oldest retained, with a gap.
        assert_eq!(
            start_for(Some(1), 5, 10),
            Start {
                policy: DeliverPolicy::ByStartSequence { start_sequence: 5 },
                gap: Some(Gap {
                    last_event_id: 1,
                    resumed_after: 4
                })
            }
        );
        // Purged (empty, first = last + 1).
        assert_eq!(
            start_for(Some(2), 11, 10).gap,
            Some(Gap {
                last_event_id: 2,
                resumed_after: 10
            })
        );
        // An id from before a reset: everything retained, with a gap.
        assert_eq!(
            start_for(Some(50), 1, 10),
            Start {
                policy: DeliverPolicy::ByStartSequence { start_sequence: 1 },
                gap: Some(Gap {
                    last_event_id: 50,
                    resumed_after: 0
                })
            }
        );
    }

    #[test]
    fn renders_the_verb_the_sequence_and_the_body() {
        let prefix = "p.pulse.acme.events.";
        let event = render(
            prefix,
            "p.pulse.acme.events.run.accepted",
            br#"{"run_id":"r1"}"#,
            12,
        )
        .expect("rendered");
        let text = format!("{event:?}");
        assert!(text.contains("run.accepted"), "{text}");
        assert!(render(prefix, "p.pulse.other.events.run.accepted", b"{}", 1).is_none());
        assert!(render(prefix, "p.pulse.acme.events.run.accepted", b"not json", 1).is_none());
    }

    #[test]
    fn permits_bound_streams_per_tenant() {
        let limits = Arc::new(StreamLimits::new(2, CancellationToken::new()));
        let (a, b) = (tenant("a"), tenant("b"));
        let first = limits.try_acquire(&a).expect("first");
        let second = limits.try_acquire(&a).expect("second");
        assert!(limits.try_acquire(&a).is_none());
        // Another tenant has its own budget.
        let other = limits.try_acquire(&b).expect("other tenant");
        drop(first);
        assert_eq!(limits.open_for(&a), 1);
        let third = limits.try_acquire(&a).expect("a freed slot");
        drop((second, third, other));
        assert_eq!(limits.open_for(&a), 0);
        assert_eq!(limits.open_for(&b), 0);
    }
}
