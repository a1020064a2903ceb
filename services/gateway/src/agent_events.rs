//! `GET /api/agent/events` (scope `monitoring:read`): the caller's tenant's agent events as
//! Server-Sent Events: `finding.created`, `finding.updated`, `finding.resolved`,
//! `approval.pending` and `action.completed`, each `id: <events-stream sequence>` and
//! `data: <the event JSON>`, after a first `stream.connected` frame and with an
//! `event: heartbeat` frame every 15 seconds.
//!
//! The events come from the tenant's feed ([`crate::tenant_feed`], topic [`Topic::Agent`]): one
//! JetStream consumer per tenant, however many subscribers. Where delivery starts:
//!
//! - no `Last-Event-ID`: only events after the feed's head;
//! - an id the feed covers: the retained frames after it, then live, with no JetStream request at
//!   all (a reconnect right after a drop is the common case);
//! - any other id: the missed range is read from JetStream by sequence (the
//!   [`crate::event_stream`] rules: a `gap` frame when it is no longer retained), then live.
//!
//! The `stream.connected` frame's `data.resume_point` (also its `id`) is where delivery continues
//! from: reconnecting with it loses nothing. A subscriber too far behind, or whose feed failed,
//! is ended and resumes by id. Streams count against `gateway.max_streams_per_tenant` with the
//! Patrol run stream (429 `too_many_streams`); at shutdown every stream ends.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use pulse_api::events::StreamQuery;

use crate::authorized::{Authorized, MonitoringReadScope};
use crate::error::ApiError;
use crate::event_stream::{KEEPALIVE_INTERVAL, resume_after, resume_point};
use crate::extract::ApiQuery;
use crate::state::AppState;
use crate::tenant_feed::{AGENT_EVENT_KINDS, Delivery, Topic};

/// The frame names of [`AGENT_EVENT_KINDS`], in order.
const KIND_NAMES: [&str; 5] = [
    "finding.created",
    "finding.updated",
    "finding.resolved",
    "approval.pending",
    "action.completed",
];

/// Every event name a subscriber can receive: the first frame, the heartbeat, a gap notice and
/// the agent events.
pub const EVENT_NAMES: [&str; 8] = [
    "stream.connected",
    "heartbeat",
    "gap",
    KIND_NAMES[0],
    KIND_NAMES[1],
    KIND_NAMES[2],
    KIND_NAMES[3],
    KIND_NAMES[4],
];

pub async fn stream(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    headers: HeaderMap,
    ApiQuery(query, _): ApiQuery<StreamQuery>,
) -> Result<Response, ApiError> {
    let resume = resume_point(&headers, query.last_event_id.as_deref())?;
    let tenant = auth.principal.tenant;
    let permit = state.streams.acquire(&tenant)?;
    let feeds = state.event_feeds.clone();
    let joined = feeds.join(&tenant, Topic::Agent, resume).await?;

    // Where delivery continues from, and what has to be read from JetStream first.
    let (after, gap, replay) = match resume {
        None => (joined.head, None, None),
        Some(id) if joined.backlog.is_some() => (id, None, None),
        Some(id) => {
            let (first, last) = feeds.retained().await?;
            let resume = resume_after(id, first, last);
            let consumer = feeds
                .replay_consumer(&tenant, Topic::Agent, resume.after)
                .await?;
            (resume.after, resume.gap, Some(consumer))
        }
    };

    let connected = Event::default()
        .event("stream.connected")
        .id(after.to_string())
        .data(
            serde_json::json!({
                "resume_point": after.to_string(),
                "kinds": AGENT_EVENT_KINDS
                    .iter()
                    .map(|(domain, event)| format!("{domain}.{event}"))
                    .collect::<Vec<_>>(),
                "heartbeat_interval_s": KEEPALIVE_INTERVAL.as_secs(),
            })
            .to_string(),
        );
    let delivery = Delivery {
        first: Some(connected),
        gap,
        after,
        joined,
        replay,
        heartbeat: Some(heartbeat),
    };
    let frames = feeds.deliver(tenant, delivery, permit, state.streams.shutdown().clone());
    Ok(Sse::new(frames).into_response())
}

/// The frame an idle stream shows it is alive with.
fn heartbeat() -> Event {
    Event::default()
        .event("heartbeat")
        .data(serde_json::json!({ "at": chrono::Utc::now() }).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_names_are_the_agent_kinds() {
        let kinds: Vec<String> = AGENT_EVENT_KINDS
            .iter()
            .map(|(domain, event)| format!("{domain}.{event}"))
            .collect();
        assert_eq!(
            KIND_NAMES[..],
            kinds.iter().map(String::as_str).collect::<Vec<_>>()[..]
        );
        assert_eq!(EVENT_NAMES[3..], KIND_NAMES);
    }
}
