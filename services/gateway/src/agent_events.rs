//! `GET /api/agent/events` (scope `monitoring:read`): the caller's tenant's agent events as
//! Server-Sent Events: `finding.created`, `finding.updated`, `finding.resolved`,
//! `approval.pending` and `action.completed`, each `id: <events-stream sequence>` and
//! `data: <the event JSON>`, after a first `stream.connected` frame and with an
//! `event: heartbeat` frame every 15 seconds.
//!
//! The flow, and why it scales to many subscribers:
//!
//! - One live feed per tenant with at least one subscriber on this gateway: a JetStream ordered
//!   consumer (ephemeral, in memory, no acks; it recreates itself from the last sequence it saw,
//!   so it neither skips nor repeats) on `pulse.<tenant>.events.>`, filtered here to the kinds
//!   above. Its frames go to every local subscriber through one broadcast channel: a thousand
//!   subscribers cost one consumer, not a thousand. NATS 2.9 gives a consumer one filter
//!   subject, hence the filter here.
//! - The feed keeps its newest [`RETAINED_FRAMES`] frames. It starts at the stream's newest
//!   sequence when created (`covered_from`) and has seen everything of the tenant up to `head`;
//!   each evicted frame moves `covered_from` up to it.
//! - A subscriber joins under the feed's lock: it subscribes to the broadcast and takes the
//!   frames after its resume point in the same critical section, so no frame is missed between
//!   the two and the live frames it then receives are exactly those after `head`.
//!   - no `Last-Event-ID`: only events after `head`;
//!   - an id in `covered_from..=head`: the retained frames after it, then live, with no
//!     JetStream request at all (a reconnect right after a drop is the common case);
//!   - any other id: the missed range is read from JetStream by sequence with a short-lived
//!     consumer (the [`crate::event_stream`] rules: a `gap` frame when it is no longer
//!     retained), then live frames with a sequence above what was read or `head` (the seam is
//!     deduplicated by sequence).
//! - The `stream.connected` frame's `data.resume_point` (also its `id`) is where delivery
//!   continues from: reconnecting with it loses nothing.
//! - A subscriber more than [`SUBSCRIBER_BACKLOG`] frames behind the live feed is ended; it
//!   reconnects with its last id and loses nothing (the missed frames are retained or read from
//!   JetStream). A feed whose consumer fails ends every subscriber the same way.
//! - A feed without subscribers stays up for [`IDLE_LINGER`], so reconnecting subscribers
//!   resume from memory, then deletes its consumer.
//! - Streams count against `gateway.max_streams_per_tenant` with the Patrol run stream (429
//!   `too_many_streams`); at shutdown every stream and feed ends.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use pulse_api::events::StreamQuery;
use pulse_bus::Subjects;
use pulse_bus::events::{
    ACTION_COMPLETED, APPROVAL_PENDING, FINDING_CREATED, FINDING_RESOLVED, FINDING_UPDATED,
};
use pulse_capabilities::ErrorCode;
use pulse_domain::TenantId;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::authorized::{Authorized, MonitoringReadScope};
use crate::error::ApiError;
use crate::event_stream::{
    CONSUMER_INACTIVE_THRESHOLD, KEEPALIVE_INTERVAL, StreamPermit, bus_unavailable, event_data,
    event_name, gap_event, resume_point, start_for,
};
use crate::state::AppState;

/// The event kinds a subscriber receives, as `(domain, event)` subject tokens.
pub const AGENT_EVENT_KINDS: [(&str, &str); 5] = [
    FINDING_CREATED,
    FINDING_UPDATED,
    FINDING_RESOLVED,
    APPROVAL_PENDING,
    ACTION_COMPLETED,
];
/// Frames a tenant feed retains for resumes served from memory.
pub const RETAINED_FRAMES: usize = 4096;
/// Frames a subscriber may fall behind the live feed before it is ended.
pub const SUBSCRIBER_BACKLOG: usize = 1024;
/// How long a feed without subscribers stays up.
pub const IDLE_LINGER: Duration = Duration::from_secs(30);
/// Frames rendered for one subscriber but not yet written to its connection.
const BUFFERED_FRAMES: usize = 64;

/// One event as the feed keeps it: its sequence, its kind and its JSON body.
#[derive(Debug)]
struct Frame {
    sequence: u64,
    kind: &'static str,
    data: String,
}

impl Frame {
    fn event(&self) -> Event {
        Event::default()
            .event(self.kind)
            .id(self.sequence.to_string())
            .data(&self.data)
    }
}

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

/// The kind name of an event subject, when it is one of [`AGENT_EVENT_KINDS`].
fn agent_kind(events_prefix: &str, subject: &str) -> Option<&'static str> {
    const NAMES: [&str; 5] = KIND_NAMES;
    let name = event_name(events_prefix, subject)?;
    AGENT_EVENT_KINDS
        .iter()
        .zip(NAMES)
        .find(|((domain, event), _)| {
            name.strip_prefix(domain)
                .and_then(|rest| rest.strip_prefix('.'))
                == Some(event)
        })
        .map(|(_, full)| full)
}

/// What a feed holds, guarded by its lock.
#[derive(Debug)]
struct FeedState {
    /// Every agent event of the tenant after this sequence is in `recent`.
    covered_from: u64,
    /// The newest sequence of the tenant's events the feed has seen (`covered_from` at first).
    head: u64,
    recent: VecDeque<Arc<Frame>>,
}

impl FeedState {
    fn push(&mut self, sequence: u64, frame: Option<Arc<Frame>>) -> Option<Arc<Frame>> {
        self.head = sequence;
        let frame = frame?;
        if self.recent.len() == RETAINED_FRAMES
            && let Some(evicted) = self.recent.pop_front()
        {
            self.covered_from = evicted.sequence;
        }
        self.recent.push_back(frame.clone());
        Some(frame)
    }
}

/// One tenant's live feed.
#[derive(Debug)]
struct TenantFeed {
    state: Mutex<FeedState>,
    live: broadcast::Sender<Arc<Frame>>,
}

/// What a subscriber starts from.
struct Joined {
    live: broadcast::Receiver<Arc<Frame>>,
    /// Retained frames after the resume point, when the feed covers it.
    backlog: Option<Vec<Arc<Frame>>>,
    head: u64,
}

impl TenantFeed {
    fn join(&self, resume: Option<u64>) -> Joined {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let live = self.live.subscribe();
        let backlog = match resume {
            None => Some(Vec::new()),
            Some(id) if (state.covered_from..=state.head).contains(&id) => Some(
                state
                    .recent
                    .iter()
                    .filter(|f| f.sequence > id)
                    .cloned()
                    .collect(),
            ),
            Some(_) => None,
        };
        Joined {
            live,
            backlog,
            head: state.head,
        }
    }
}

/// The gateway's tenant feeds.
#[derive(Debug)]
pub struct AgentEvents {
    js: async_nats::jetstream::Context,
    subjects: Subjects,
    shutdown: CancellationToken,
    feeds: tokio::sync::Mutex<HashMap<TenantId, Arc<TenantFeed>>>,
}

impl AgentEvents {
    pub fn new(bus: &pulse_bus::Bus, shutdown: CancellationToken) -> Self {
        Self {
            js: bus.jetstream().clone(),
            subjects: bus.subjects().clone(),
            shutdown,
            feeds: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Joins `tenant`'s feed, starting it when there is none. Under the map lock, so a feed
    /// that is stopping for want of subscribers cannot be joined.
    async fn join(
        self: &Arc<Self>,
        tenant: &TenantId,
        resume: Option<u64>,
    ) -> Result<Joined, ApiError> {
        let mut feeds = self.feeds.lock().await;
        if let Some(feed) = feeds.get(tenant) {
            return Ok(feed.join(resume));
        }
        let feed = self.start_feed(tenant).await?;
        let joined = feed.join(resume);
        feeds.insert(tenant.clone(), feed);
        Ok(joined)
    }

    async fn start_feed(self: &Arc<Self>, tenant: &TenantId) -> Result<Arc<TenantFeed>, ApiError> {
        let stream_name = self.subjects.events_stream();
        let mut stream = self
            .js
            .get_stream(&stream_name)
            .await
            .map_err(|e| bus_unavailable("events stream lookup failed", e))?;
        let last = stream
            .info()
            .await
            .map_err(|e| bus_unavailable("events stream info failed", e))?
            .state
            .last_sequence;
        let consumer = stream
            .create_consumer(pull::OrderedConfig {
                description: Some(format!("pulse agent event feed of {tenant}")),
                filter_subject: self.subjects.tenant_events(tenant),
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: last + 1,
                },
                ..Default::default()
            })
            .await
            .map_err(|e| bus_unavailable("agent event feed consumer create failed", e))?;
        let messages = consumer
            .messages()
            .await
            .map_err(|e| bus_unavailable("agent event feed pull failed", e))?;
        let (live, _) = broadcast::channel(SUBSCRIBER_BACKLOG);
        let feed = Arc::new(TenantFeed {
            state: Mutex::new(FeedState {
                covered_from: last,
                head: last,
                recent: VecDeque::new(),
            }),
            live,
        });
        tracing::debug!(%tenant, from = last, "agent event feed started");
        tokio::spawn(
            self.clone()
                .run_feed(tenant.clone(), feed.clone(), messages),
        );
        Ok(feed)
    }

    /// Moves the consumer's messages into the feed until shutdown, a bus failure, or
    /// [`IDLE_LINGER`] without subscribers; then removes the feed, which ends its subscribers.
    async fn run_feed(
        self: Arc<Self>,
        tenant: TenantId,
        feed: Arc<TenantFeed>,
        mut messages: pull::Ordered,
    ) {
        let prefix = self.subjects.tenant_events_prefix(&tenant);
        let mut idle_check = tokio::time::interval(IDLE_LINGER / 3);
        let mut idle_since: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => break,
                _ = idle_check.tick() => {
                    if feed.live.receiver_count() > 0 {
                        idle_since = None;
                        continue;
                    }
                    let since = *idle_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() < IDLE_LINGER {
                        continue;
                    }
                    let mut feeds = self.feeds.lock().await;
                    // A subscriber may have joined while the map lock was awaited.
                    if feed.live.receiver_count() == 0 {
                        feeds.remove(&tenant);
                        tracing::debug!(%tenant, "agent event feed stopped: no subscribers");
                        return;
                    }
                    idle_since = None;
                }
                next = messages.next() => {
                    let message = match next {
                        Some(Ok(message)) => message,
                        Some(Err(error)) => {
                            tracing::warn!(%tenant, %error, "agent event feed failed; its subscribers reconnect");
                            break;
                        }
                        None => {
                            tracing::warn!(%tenant, "agent event feed consumer ended");
                            break;
                        }
                    };
                    let sequence = match message.info() {
                        Ok(info) => info.stream_sequence,
                        Err(error) => {
                            tracing::warn!(%tenant, %error, "agent event without delivery info");
                            break;
                        }
                    };
                    let frame = agent_kind(&prefix, &message.subject).and_then(|kind| {
                        let data = event_data(&message.payload);
                        if data.is_none() {
                            tracing::warn!(subject = %message.subject, sequence, "event body is not JSON; skipped");
                        }
                        data.map(|data| Arc::new(Frame { sequence, kind, data }))
                    });
                    let mut state = feed.state.lock().unwrap_or_else(|e| e.into_inner());
                    if sequence <= state.head {
                        continue;
                    }
                    if let Some(frame) = state.push(sequence, frame) {
                        // No receiver is fine: the frame stays retained for resumes.
                        let _ = feed.live.send(frame);
                    }
                }
            }
        }
        let mut feeds = self.feeds.lock().await;
        if feeds.get(&tenant).is_some_and(|f| Arc::ptr_eq(f, &feed)) {
            feeds.remove(&tenant);
        }
    }
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
    let permit = state.streams.acquire(&tenant)?;
    let hub = state.agent_events.clone();
    let joined = hub.join(&tenant, resume).await?;

    // Where delivery continues from, and what has to be read from JetStream first.
    let (resume_after, replay) = match resume {
        None => (joined.head, None),
        Some(id) if joined.backlog.is_some() => (id, None),
        Some(id) => {
            let subjects = &hub.subjects;
            let mut events = hub
                .js
                .get_stream(subjects.events_stream())
                .await
                .map_err(|e| bus_unavailable("events stream lookup failed", e))?;
            let info = events
                .info()
                .await
                .map_err(|e| bus_unavailable("events stream info failed", e))?;
            let start = start_for(
                Some(id),
                info.state.first_sequence,
                info.state.last_sequence,
            );
            let after = start.gap.map_or(id, |gap| gap.resumed_after);
            let consumer = replay_consumer(&events, subjects, &tenant, start.policy).await?;
            (after, Some((start, consumer)))
        }
    };

    let connected = Event::default()
        .event("stream.connected")
        .id(resume_after.to_string())
        .data(
            serde_json::json!({
                "resume_point": resume_after.to_string(),
                "kinds": AGENT_EVENT_KINDS
                    .iter()
                    .map(|(domain, event)| format!("{domain}.{event}"))
                    .collect::<Vec<_>>(),
                "heartbeat_interval_s": KEEPALIVE_INTERVAL.as_secs(),
            })
            .to_string(),
        );
    let (tx, rx) = mpsc::channel(BUFFERED_FRAMES);
    // The channel is new and empty: this cannot fail for lack of room.
    let _ = tx.try_send(connected);
    let events_prefix = hub.subjects.tenant_events_prefix(&tenant);
    let shutdown = state.streams.shutdown().clone();
    let subscriber = Subscriber {
        tenant,
        tx,
        cursor: resume_after,
        head: joined.head,
        _permit: permit,
    };
    let backlog = joined.backlog.unwrap_or_default();
    let live = joined.live;
    tokio::spawn(async move {
        tokio::select! {
            () = subscriber.run(backlog, replay, events_prefix, live, hub) => {}
            () = shutdown.cancelled() => {}
        }
    });
    let frames = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|event| (Ok::<_, std::convert::Infallible>(event), rx))
    });
    Ok(Sse::new(frames).into_response())
}

/// A short-lived consumer that reads the tenant's missed events from `policy` on.
async fn replay_consumer(
    events: &async_nats::jetstream::stream::Stream,
    subjects: &Subjects,
    tenant: &TenantId,
    policy: DeliverPolicy,
) -> Result<PullConsumer, ApiError> {
    events
        .create_consumer(pull::Config {
            description: Some(format!("pulse agent event resume of {tenant}")),
            filter_subject: subjects.tenant_events(tenant),
            deliver_policy: policy,
            ack_policy: AckPolicy::None,
            inactive_threshold: CONSUMER_INACTIVE_THRESHOLD,
            memory_storage: true,
            num_replicas: 1,
            ..Default::default()
        })
        .await
        .map_err(|e| bus_unavailable("agent event resume consumer create failed", e))
}

/// One subscriber's delivery.
struct Subscriber {
    tenant: TenantId,
    tx: mpsc::Sender<Event>,
    /// Frames up to this sequence were delivered (or are not owed): live frames at or below it
    /// are the seam's duplicates.
    cursor: u64,
    /// The feed's head when the subscriber joined: the live frames start after it.
    head: u64,
    _permit: StreamPermit,
}

impl Subscriber {
    async fn run(
        mut self,
        backlog: Vec<Arc<Frame>>,
        replay: Option<(crate::event_stream::Start, PullConsumer)>,
        events_prefix: String,
        mut live: broadcast::Receiver<Arc<Frame>>,
        hub: Arc<AgentEvents>,
    ) {
        for frame in backlog {
            if self.tx.send(frame.event()).await.is_err() {
                return;
            }
        }
        if let Some((start, consumer)) = replay {
            if let Some(gap) = start.gap {
                tracing::info!(tenant = %self.tenant, last_event_id = gap.last_event_id, resumed_after = gap.resumed_after, "agent event stream resumed past lost events");
                if self.tx.send(gap_event(gap)).await.is_err() {
                    return;
                }
            }
            let name = consumer.cached_info().name.clone();
            let outcome = self.replay(&consumer, &events_prefix).await;
            if let Err(error) = hub
                .js
                .delete_consumer_from_stream(&name, hub.subjects.events_stream())
                .await
            {
                tracing::debug!(%error, consumer = %name, "resume consumer not deleted; the server expires it");
            }
            if let Err(reason) = outcome {
                tracing::info!(tenant = %self.tenant, %reason, "agent event stream closed during resume");
                return;
            }
        }
        self.cursor = self.cursor.max(self.head);
        if let Err(reason) = self.forward_live(&mut live).await {
            tracing::info!(tenant = %self.tenant, %reason, "agent event stream ended; the client resumes by id");
        }
    }

    /// Sends the live frames after the cursor, and a heartbeat every [`KEEPALIVE_INTERVAL`],
    /// until the client goes away (`Ok`), or it fell too far behind or the feed ended (`Err`).
    async fn forward_live(
        &mut self,
        live: &mut broadcast::Receiver<Arc<Frame>>,
    ) -> Result<(), String> {
        let mut heartbeat = tokio::time::interval_at(
            tokio::time::Instant::now() + KEEPALIVE_INTERVAL,
            KEEPALIVE_INTERVAL,
        );
        loop {
            let frame = tokio::select! {
                () = self.tx.closed() => return Ok(()),
                _ = heartbeat.tick() => {
                    let beat = Event::default().event("heartbeat").data(
                        serde_json::json!({ "at": chrono::Utc::now() }).to_string(),
                    );
                    if self.tx.send(beat).await.is_err() {
                        return Ok(());
                    }
                    continue;
                }
                frame = live.recv() => frame,
            };
            let frame = match frame {
                Ok(frame) => frame,
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    return Err(format!("fell {missed} frames behind the live feed"));
                }
                Err(broadcast::error::RecvError::Closed) => {
                    return Err("the tenant's feed ended".to_owned());
                }
            };
            if frame.sequence <= self.cursor {
                continue;
            }
            self.cursor = frame.sequence;
            if self.tx.send(frame.event()).await.is_err() {
                return Ok(());
            }
        }
    }

    /// Sends the consumer's agent events until it has none pending, moving the cursor over
    /// every sequence read. `Err` when delivery can no longer be trusted to be complete.
    async fn replay(&mut self, consumer: &PullConsumer, events_prefix: &str) -> Result<(), String> {
        if consumer.cached_info().num_pending == 0 {
            return Ok(());
        }
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| format!("cannot pull missed events: {e}"))?;
        let mut consumer_sequence = 0;
        loop {
            let next = tokio::select! {
                () = self.tx.closed() => return Err("the client went away".to_owned()),
                next = messages.next() => next,
            };
            let message = next
                .ok_or("the resume consumer stopped")?
                .map_err(|e| format!("pulling missed events failed: {e}"))?;
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
            let (sequence, pending) = (info.stream_sequence, info.pending);
            if sequence > self.cursor {
                self.cursor = sequence;
                let kind = agent_kind(events_prefix, &message.subject);
                if let Some((kind, data)) = kind.zip(event_data(&message.payload)) {
                    let frame = Frame {
                        sequence,
                        kind,
                        data,
                    };
                    self.tx
                        .send(frame.event())
                        .await
                        .map_err(|_| "the client went away".to_owned())?;
                }
            }
            if pending == 0 {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(sequence: u64) -> Arc<Frame> {
        Arc::new(Frame {
            sequence,
            kind: "finding.created",
            data: "{}".to_owned(),
        })
    }

    #[test]
    fn only_the_agent_kinds_of_the_tenant_pass() {
        let prefix = "p.pulse.acme.events.";
        assert_eq!(
            agent_kind(prefix, "p.pulse.acme.events.finding.created"),
            Some("finding.created")
        );
        assert_eq!(
            agent_kind(prefix, "p.pulse.acme.events.approval.pending"),
            Some("approval.pending")
        );
        assert_eq!(
            agent_kind(prefix, "p.pulse.acme.events.action.completed"),
            Some("action.completed")
        );
        assert_eq!(agent_kind(prefix, "p.pulse.acme.events.run.accepted"), None);
        assert_eq!(
            agent_kind(prefix, "p.pulse.acme.events.finding.createdx"),
            None
        );
        assert_eq!(
            agent_kind(prefix, "p.pulse.other.events.finding.created"),
            None
        );
    }

    fn feed(covered_from: u64) -> TenantFeed {
        let (live, _) = broadcast::channel(8);
        TenantFeed {
            state: Mutex::new(FeedState {
                covered_from,
                head: covered_from,
                recent: VecDeque::new(),
            }),
            live,
        }
    }

    #[test]
    fn a_join_takes_the_retained_frames_after_its_id_and_the_live_ones_after_head() {
        let feed = feed(10);
        {
            let mut state = feed.state.lock().unwrap();
            state.push(11, Some(frame(11)));
            state.push(12, None); // another kind: moves head only
            state.push(14, Some(frame(14)));
        }
        let fresh = feed.join(None);
        assert_eq!((fresh.head, fresh.backlog.map(|b| b.len())), (14, Some(0)));
        let resumed = feed.join(Some(11));
        let ids: Vec<u64> = resumed
            .backlog
            .expect("covered")
            .iter()
            .map(|f| f.sequence)
            .collect();
        assert_eq!(ids, [14]);
        assert_eq!(feed.join(Some(10)).backlog.map(|b| b.len()), Some(2));
        // Before the feed started, or beyond what it saw: read from JetStream.
        assert!(feed.join(Some(9)).backlog.is_none());
        assert!(feed.join(Some(15)).backlog.is_none());
    }

    fn subscriber(cursor: u64, buffered: usize) -> (Subscriber, mpsc::Receiver<Event>) {
        let limits = Arc::new(crate::event_stream::StreamLimits::new(
            4,
            CancellationToken::new(),
        ));
        let tenant = TenantId::new("acme").unwrap();
        let permit = limits.try_acquire(&tenant).expect("a slot");
        let (tx, rx) = mpsc::channel(buffered);
        let subscriber = Subscriber {
            tenant,
            tx,
            cursor,
            head: cursor,
            _permit: permit,
        };
        (subscriber, rx)
    }

    fn ids(rx: &mut mpsc::Receiver<Event>) -> Vec<String> {
        let mut ids = Vec::new();
        while let Ok(event) = rx.try_recv() {
            let text = format!("{event:?}");
            let id = text
                .split("id: ")
                .nth(1)
                .and_then(|rest| rest.split('\\').next())
                .unwrap_or_default()
                .to_owned();
            ids.push(id);
        }
        ids
    }

    #[tokio::test]
    async fn live_frames_at_or_below_the_cursor_are_the_seams_duplicates() {
        let (mut subscriber, mut rx) = subscriber(5, 16);
        let (live, mut receiver) = broadcast::channel(16);
        for sequence in [4, 5, 6, 7] {
            live.send(frame(sequence)).unwrap();
        }
        drop(live);
        let ended = subscriber.forward_live(&mut receiver).await;
        assert_eq!(ended, Err("the tenant's feed ended".to_owned()));
        assert_eq!(ids(&mut rx), ["6", "7"]);
        assert_eq!(subscriber.cursor, 7);
    }

    #[tokio::test]
    async fn a_subscriber_too_far_behind_is_ended() {
        let (mut subscriber, mut rx) = subscriber(0, 16);
        let (live, mut receiver) = broadcast::channel(4);
        for sequence in 1..=6 {
            live.send(frame(sequence)).unwrap();
        }
        let ended = subscriber.forward_live(&mut receiver).await;
        assert_eq!(ended, Err("fell 2 frames behind the live feed".to_owned()));
        // Nothing was sent out of order: the client resumes from its last id.
        assert!(ids(&mut rx).is_empty());
        drop(subscriber);
        assert!(rx.recv().await.is_none());
    }

    #[test]
    fn eviction_moves_what_the_feed_covers() {
        let feed = feed(0);
        let mut state = feed.state.lock().unwrap();
        for sequence in 1..=(RETAINED_FRAMES as u64 + 2) {
            state.push(sequence, Some(frame(sequence)));
        }
        assert_eq!(state.recent.len(), RETAINED_FRAMES);
        assert_eq!(state.covered_from, 2);
        assert_eq!(state.recent.front().map(|f| f.sequence), Some(3));
    }
}
