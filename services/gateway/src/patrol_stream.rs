//! `GET /api/ai/patrol/stream` (scope `monitoring:read`): the caller's Patrol run events as
//! Server-Sent Events, read from the JetStream events stream.
//!
//! - Every `pulse.<tenant>.events.run.>` event of the caller's tenant, and only those, is sent as
//!   `event: run.<verb>` (from the subject), `id: <stream sequence>` and
//!   `data: <the message body JSON>`.
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
//! - A bus error, or a client that fell too far behind, ends the response; the client reconnects
//!   with its last id and loses nothing. At shutdown every stream ends, so clients reconnect
//!   (with their last id) to another gateway.
//! - Opening or resuming a stream only reads events: it never requests a run.
//!
//! The events come from the tenant's feed ([`crate::tenant_feed`], topic [`Topic::PatrolRuns`]),
//! the one JetStream consumer per tenant that `GET /api/agent/events` reads too: no consumer per
//! subscriber. The feed serves a resume from memory when it holds the events after the id, else
//! reads them from JetStream first. Unlike the agent stream, which asks JetStream only for an id
//! its feed does not hold, this stream reads the events stream's bounds every time it opens: a
//! resume point whose events are no longer retained must get its `gap` frame (as documented) even
//! while the feed still holds them, and "only events published after the stream opened" means
//! after the newest event at that moment, not after whatever the feed had seen.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use pulse_api::events::StreamQuery;

use crate::authorized::{Authorized, MonitoringReadScope};
use crate::error::ApiError;
use crate::event_stream::{KEEPALIVE_INTERVAL, Resume, resume_after, resume_point};
use crate::extract::ApiQuery;
use crate::state::AppState;
use crate::tenant_feed::{Delivery, Topic};

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
    ApiQuery(query, _): ApiQuery<StreamQuery>,
) -> Result<Response, ApiError> {
    let resume = resume_point(&headers, query.last_event_id.as_deref())?;
    let tenant = auth.principal.tenant;
    let permit = state.streams.acquire(&tenant)?;
    let feeds = state.event_feeds.clone();

    let (first, last) = feeds.retained().await?;
    let Resume { after, gap } = match resume {
        Some(id) => resume_after(id, first, last),
        None => Resume {
            after: last,
            gap: None,
        },
    };
    let joined = feeds.join(&tenant, Topic::PatrolRuns, Some(after)).await?;
    // The feed holds the events after `after`, or they are all still to come live (`after` at or
    // beyond its head); only a point older than what it covers is read from JetStream first.
    let replay = if joined.backlog.is_none() && after < joined.head {
        Some(
            feeds
                .replay_consumer(&tenant, Topic::PatrolRuns, after)
                .await?,
        )
    } else {
        None
    };
    let delivery = Delivery {
        first: None,
        gap,
        after,
        joined,
        replay,
        heartbeat: None,
    };
    let events = feeds.deliver(tenant, delivery, permit, state.streams.shutdown().clone());
    Ok(Sse::new(events)
        .keep_alive(
            KeepAlive::new()
                .interval(KEEPALIVE_INTERVAL)
                .text("keepalive"),
        )
        .into_response())
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
