//! The per-tenant event feed: the one owner of the JetStream consumers behind the gateway's event
//! streams (`GET /api/agent/events`, [`Topic::Agent`]; `GET /api/ai/patrol/stream`,
//! [`Topic::PatrolRuns`]) and of the delivery to each subscriber.
//!
//! The flow, and why it scales to many subscribers:
//!
//! - One live feed per tenant with at least one subscriber on this gateway, whatever stream it
//!   reads: a JetStream ordered consumer (ephemeral, in memory, no acks; it recreates itself from
//!   the last sequence it saw, so it neither skips nor repeats) on `pulse.<tenant>.events.>`.
//!   Each event a topic carries becomes a frame (its name from the subject, its stream sequence,
//!   its JSON body) and goes to that topic's subscribers through one broadcast channel per topic:
//!   a thousand subscribers cost one consumer, not a thousand. NATS 2.9 gives a consumer one
//!   filter subject, hence the topics' filters here.
//! - The feed keeps its newest [`RETAINED_FRAMES`] frames. It starts at the stream's newest
//!   sequence when created (`covered_from`) and has seen everything of the tenant up to `head`;
//!   each evicted frame moves `covered_from` up to it.
//! - A subscriber joins under the feed's lock with the sequence it is owed events after: it
//!   subscribes to its topic's broadcast and takes the retained frames after that sequence in the
//!   same critical section, so no frame is missed between the two and the live frames it then
//!   receives are exactly those after `head`. A sequence beyond `head` needs nothing but live
//!   frames; one before `covered_from` is read from JetStream by sequence first, with a
//!   short-lived consumer filtered to the topic ([`TenantFeeds::replay_consumer`]); the seam
//!   between what was read and the live frames is deduplicated by sequence. The stream decides
//!   the sequence (a resume point, with the [`crate::event_stream`] retention rules) and what
//!   goes out before it (a first frame, a `gap` notice).
//! - A subscriber more than [`SUBSCRIBER_BACKLOG`] frames of its topic behind the live feed is
//!   ended; it reconnects with its last id and loses nothing (the missed frames are retained or
//!   read from JetStream). A feed whose consumer fails ends every subscriber the same way.
//! - A feed without subscribers stays up for [`IDLE_LINGER`], so reconnecting subscribers resume
//!   from memory, then stops; the server removes its consumer once nobody pulls from it.
//! - Subscribers count against `gateway.max_streams_per_tenant` ([`StreamPermit`]); at shutdown
//!   every subscriber and feed ends.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use axum::response::sse::Event;
use futures::{Stream, StreamExt};
use pulse_api::events::Gap;
use pulse_bus::Subjects;
use pulse_bus::events::{
    ACTION_COMPLETED, APPROVAL_PENDING, FINDING_CREATED, FINDING_RESOLVED, FINDING_UPDATED,
};
use pulse_domain::TenantId;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::event_stream::{
    CONSUMER_INACTIVE_THRESHOLD, KEEPALIVE_INTERVAL, StreamPermit, bus_unavailable, event_data,
    event_name, gap_event,
};

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
/// Frames of its topic a subscriber may fall behind the live feed before it is ended.
pub const SUBSCRIBER_BACKLOG: usize = 1024;
/// How long a feed without subscribers stays up.
pub const IDLE_LINGER: Duration = Duration::from_secs(30);
/// Frames rendered for one subscriber but not yet written to its connection.
const BUFFERED_FRAMES: usize = 64;

/// A stream over the feed: the selection of the tenant's events it sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic {
    /// `GET /api/agent/events`: the finding, approval and action events of
    /// [`AGENT_EVENT_KINDS`].
    Agent,
    /// `GET /api/ai/patrol/stream`: every `events.run.<verb>` event.
    PatrolRuns,
}

/// The domain token of the Patrol run events.
const RUN_DOMAIN: &str = pulse_bus::events::RUN_ACCEPTED.0;

impl Topic {
    const ALL: [Topic; 2] = [Topic::Agent, Topic::PatrolRuns];

    fn index(self) -> usize {
        self as usize
    }

    /// The topic of an event, by its name (the subject after the tenant's events prefix).
    fn of(name: &str) -> Option<Topic> {
        let (domain, event) = name.split_once('.')?;
        if AGENT_EVENT_KINDS.contains(&(domain, event)) {
            Some(Topic::Agent)
        } else if domain == RUN_DOMAIN && !event.is_empty() {
            Some(Topic::PatrolRuns)
        } else {
            None
        }
    }

    /// The subject a consumer reading this topic's events of `tenant` filters on.
    fn filter_subject(self, subjects: &Subjects, tenant: &TenantId) -> String {
        match self {
            // Three domains: NATS 2.9 takes one filter subject, so the tenant's every event.
            Topic::Agent => subjects.tenant_events(tenant),
            Topic::PatrolRuns => subjects.event(tenant, RUN_DOMAIN, ">"),
        }
    }
}

/// One event as the feed keeps it: its sequence, its topic, its name and its JSON body.
#[derive(Debug)]
pub struct Frame {
    sequence: u64,
    topic: Topic,
    name: String,
    data: String,
}

impl Frame {
    /// The frame of an event message of the tenant whose events subjects start with
    /// `events_prefix`; `None` when no topic carries it or its body is not JSON.
    fn of_message(
        events_prefix: &str,
        subject: &str,
        payload: &[u8],
        sequence: u64,
    ) -> Option<Self> {
        let name = event_name(events_prefix, subject)?;
        let topic = Topic::of(name)?;
        let Some(data) = event_data(payload) else {
            tracing::warn!(%subject, sequence, "event body is not JSON; skipped");
            return None;
        };
        Some(Self {
            sequence,
            topic,
            name: name.to_owned(),
            data,
        })
    }

    fn event(&self) -> Event {
        Event::default()
            .event(&self.name)
            .id(self.sequence.to_string())
            .data(&self.data)
    }
}

/// What a feed holds, guarded by its lock.
#[derive(Debug)]
struct FeedState {
    /// Every frame of the tenant after this sequence is in `recent`.
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
    /// One channel per topic, indexed by [`Topic::index`].
    live: [broadcast::Sender<Arc<Frame>>; Topic::ALL.len()],
}

/// What a subscriber starts from.
pub struct Joined {
    topic: Topic,
    live: broadcast::Receiver<Arc<Frame>>,
    /// The topic's retained frames after the sequence joined with, when the feed covers it.
    pub backlog: Option<Vec<Arc<Frame>>>,
    /// The newest sequence the feed had seen: live frames come after it.
    pub head: u64,
}

impl TenantFeed {
    fn new(from: u64) -> Self {
        Self {
            state: Mutex::new(FeedState {
                covered_from: from,
                head: from,
                recent: VecDeque::new(),
            }),
            live: Topic::ALL.map(|_| broadcast::channel(SUBSCRIBER_BACKLOG).0),
        }
    }

    fn subscribers(&self) -> usize {
        self.live
            .iter()
            .map(broadcast::Sender::receiver_count)
            .sum()
    }

    /// Joins `topic` owed the frames after `after` (`None`: after `head`, only what comes next).
    fn join(&self, topic: Topic, after: Option<u64>) -> Joined {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let live = self.live[topic.index()].subscribe();
        let backlog = match after {
            None => Some(Vec::new()),
            Some(id) if (state.covered_from..=state.head).contains(&id) => Some(
                state
                    .recent
                    .iter()
                    .filter(|f| f.topic == topic && f.sequence > id)
                    .cloned()
                    .collect(),
            ),
            Some(_) => None,
        };
        Joined {
            topic,
            live,
            backlog,
            head: state.head,
        }
    }
}

/// The gateway's tenant feeds.
#[derive(Debug)]
pub struct TenantFeeds {
    js: async_nats::jetstream::Context,
    subjects: Subjects,
    shutdown: CancellationToken,
    feeds: tokio::sync::Mutex<HashMap<TenantId, Arc<TenantFeed>>>,
}

impl TenantFeeds {
    pub fn new(bus: &pulse_bus::Bus, shutdown: CancellationToken) -> Self {
        Self {
            js: bus.jetstream().clone(),
            subjects: bus.subjects().clone(),
            shutdown,
            feeds: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The events stream's oldest and newest retained sequence (`first` is `last + 1` when it
    /// is empty).
    pub async fn retained(&self) -> Result<(u64, u64), ApiError> {
        let mut stream = self
            .js
            .get_stream(self.subjects.events_stream())
            .await
            .map_err(|e| bus_unavailable("events stream lookup failed", e))?;
        let info = stream
            .info()
            .await
            .map_err(|e| bus_unavailable("events stream info failed", e))?;
        Ok((info.state.first_sequence, info.state.last_sequence))
    }

    /// Joins `tenant`'s feed for `topic`, starting the feed when there is none. Under the map
    /// lock, so a feed that is stopping for want of subscribers cannot be joined.
    pub async fn join(
        self: &Arc<Self>,
        tenant: &TenantId,
        topic: Topic,
        after: Option<u64>,
    ) -> Result<Joined, ApiError> {
        let mut feeds = self.feeds.lock().await;
        if let Some(feed) = feeds.get(tenant) {
            return Ok(feed.join(topic, after));
        }
        let feed = self.start_feed(tenant).await?;
        let joined = feed.join(topic, after);
        feeds.insert(tenant.clone(), feed);
        Ok(joined)
    }

    async fn start_feed(self: &Arc<Self>, tenant: &TenantId) -> Result<Arc<TenantFeed>, ApiError> {
        let (_, last) = self.retained().await?;
        let stream = self
            .js
            .get_stream(self.subjects.events_stream())
            .await
            .map_err(|e| bus_unavailable("events stream lookup failed", e))?;
        let consumer = stream
            .create_consumer(pull::OrderedConfig {
                description: Some(format!("pulse event feed of {tenant}")),
                filter_subject: self.subjects.tenant_events(tenant),
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: last + 1,
                },
                ..Default::default()
            })
            .await
            .map_err(|e| bus_unavailable("event feed consumer create failed", e))?;
        let messages = consumer
            .messages()
            .await
            .map_err(|e| bus_unavailable("event feed pull failed", e))?;
        let feed = Arc::new(TenantFeed::new(last));
        tracing::debug!(%tenant, from = last, "event feed started");
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
                    if feed.subscribers() > 0 {
                        idle_since = None;
                        continue;
                    }
                    let since = *idle_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() < IDLE_LINGER {
                        continue;
                    }
                    let mut feeds = self.feeds.lock().await;
                    // A subscriber may have joined while the map lock was awaited.
                    if feed.subscribers() == 0 {
                        feeds.remove(&tenant);
                        tracing::debug!(%tenant, "event feed stopped: no subscribers");
                        return;
                    }
                    idle_since = None;
                }
                next = messages.next() => {
                    let message = match next {
                        Some(Ok(message)) => message,
                        Some(Err(error)) => {
                            tracing::warn!(%tenant, %error, "event feed failed; its subscribers reconnect");
                            break;
                        }
                        None => {
                            tracing::warn!(%tenant, "event feed consumer ended");
                            break;
                        }
                    };
                    let sequence = match message.info() {
                        Ok(info) => info.stream_sequence,
                        Err(error) => {
                            tracing::warn!(%tenant, %error, "event without delivery info");
                            break;
                        }
                    };
                    let frame =
                        Frame::of_message(&prefix, &message.subject, &message.payload, sequence)
                            .map(Arc::new);
                    let mut state = feed.state.lock().unwrap_or_else(|e| e.into_inner());
                    if sequence <= state.head {
                        continue;
                    }
                    if let Some(frame) = state.push(sequence, frame) {
                        // No receiver is fine: the frame stays retained for resumes.
                        let _ = feed.live[frame.topic.index()].send(frame);
                    }
                }
            }
        }
        let mut feeds = self.feeds.lock().await;
        if feeds.get(&tenant).is_some_and(|f| Arc::ptr_eq(f, &feed)) {
            feeds.remove(&tenant);
        }
    }

    /// A short-lived consumer that reads `topic`'s events of `tenant` after `after`, for a
    /// subscriber owed events the feed does not hold.
    pub async fn replay_consumer(
        &self,
        tenant: &TenantId,
        topic: Topic,
        after: u64,
    ) -> Result<PullConsumer, ApiError> {
        let stream = self
            .js
            .get_stream(self.subjects.events_stream())
            .await
            .map_err(|e| bus_unavailable("events stream lookup failed", e))?;
        stream
            .create_consumer(pull::Config {
                description: Some(format!("pulse event resume of {tenant}")),
                filter_subject: topic.filter_subject(&self.subjects, tenant),
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: after.saturating_add(1),
                },
                ack_policy: AckPolicy::None,
                inactive_threshold: CONSUMER_INACTIVE_THRESHOLD,
                memory_storage: true,
                num_replicas: 1,
                ..Default::default()
            })
            .await
            .map_err(|e| bus_unavailable("event resume consumer create failed", e))
    }

    /// Starts delivering to one subscriber: `first` (a stream's own opening frame), the `gap`
    /// notice, the backlog, what `replay` reads, then the live frames after `after` (and after
    /// the feed's head when it joined), with `heartbeat` every [`KEEPALIVE_INTERVAL`] while
    /// live. The answer is the response's event stream; it ends when the subscriber is ended or
    /// the gateway shuts down.
    pub fn deliver(
        self: &Arc<Self>,
        tenant: TenantId,
        delivery: Delivery,
        permit: StreamPermit,
        shutdown: CancellationToken,
    ) -> impl Stream<Item = Result<Event, Infallible>> + use<> {
        let (tx, rx) = mpsc::channel(BUFFERED_FRAMES);
        if let Some(first) = delivery.first {
            // The channel is new and empty: this cannot fail for lack of room.
            let _ = tx.try_send(first);
        }
        let subscriber = Subscriber {
            tenant,
            tx,
            cursor: delivery.after,
            head: delivery.joined.head,
            heartbeat: delivery.heartbeat,
            _permit: permit,
        };
        let feeds = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = subscriber.run(delivery.gap, delivery.joined, delivery.replay, feeds) => {}
                () = shutdown.cancelled() => {}
            }
        });
        futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|event| (Ok(event), rx))
        })
    }
}

/// What one subscriber is owed, as its stream decided.
pub struct Delivery {
    /// The stream's own first frame.
    pub first: Option<Event>,
    /// Events after the client's resume point were lost: said before anything else.
    pub gap: Option<Gap>,
    /// Frames up to this sequence are not owed.
    pub after: u64,
    pub joined: Joined,
    /// Reads what the feed does not hold, before the live frames.
    pub replay: Option<PullConsumer>,
    /// Sent every [`KEEPALIVE_INTERVAL`] while live (a stream whose keepalive is a comment has
    /// none).
    pub heartbeat: Option<fn() -> Event>,
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
    heartbeat: Option<fn() -> Event>,
    _permit: StreamPermit,
}

impl Subscriber {
    async fn run(
        mut self,
        gap: Option<Gap>,
        joined: Joined,
        replay: Option<PullConsumer>,
        feeds: Arc<TenantFeeds>,
    ) {
        if let Some(gap) = gap {
            tracing::info!(tenant = %self.tenant, last_event_id = gap.last_event_id, resumed_after = gap.resumed_after, "event stream resumed past lost events");
            if self.tx.send(gap_event(gap)).await.is_err() {
                return;
            }
        }
        for frame in joined.backlog.into_iter().flatten() {
            if self.tx.send(frame.event()).await.is_err() {
                return;
            }
        }
        if let Some(consumer) = replay {
            let name = consumer.cached_info().name.clone();
            let prefix = feeds.subjects.tenant_events_prefix(&self.tenant);
            let outcome = self.replay(&consumer, &prefix, joined.topic).await;
            if let Err(error) = feeds
                .js
                .delete_consumer_from_stream(&name, feeds.subjects.events_stream())
                .await
            {
                tracing::debug!(%error, consumer = %name, "resume consumer not deleted; the server expires it");
            }
            if let Err(reason) = outcome {
                tracing::info!(tenant = %self.tenant, %reason, "event stream closed during resume");
                return;
            }
        }
        self.cursor = self.cursor.max(self.head);
        let mut live = joined.live;
        if let Err(reason) = self.forward_live(&mut live).await {
            tracing::info!(tenant = %self.tenant, %reason, "event stream ended; the client resumes by id");
        }
    }

    /// Sends the live frames after the cursor, and the heartbeat every [`KEEPALIVE_INTERVAL`],
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
                _ = heartbeat.tick(), if self.heartbeat.is_some() => {
                    let beat = self.heartbeat.map(|beat| beat());
                    if let Some(beat) = beat && self.tx.send(beat).await.is_err() {
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

    /// Sends the consumer's events of `topic` until it has none pending, moving the cursor over
    /// every sequence read. `Err` when delivery can no longer be trusted to be complete.
    async fn replay(
        &mut self,
        consumer: &PullConsumer,
        events_prefix: &str,
        topic: Topic,
    ) -> Result<(), String> {
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
                let frame =
                    Frame::of_message(events_prefix, &message.subject, &message.payload, sequence);
                if let Some(frame) = frame.filter(|f| f.topic == topic) {
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

    fn frame(sequence: u64, topic: Topic) -> Arc<Frame> {
        let name = match topic {
            Topic::Agent => "finding.created",
            Topic::PatrolRuns => "run.accepted",
        };
        Arc::new(Frame {
            sequence,
            topic,
            name: name.to_owned(),
            data: "{}".to_owned(),
        })
    }

    #[test]
    fn each_topic_carries_its_events_of_the_tenant_only() {
        let prefix = "p.pulse.acme.events.";
        let topic =
            |subject: &str| Frame::of_message(prefix, subject, b"{}", 1).map(|f| (f.topic, f.name));
        for (subject, name) in [
            ("p.pulse.acme.events.finding.created", "finding.created"),
            ("p.pulse.acme.events.approval.pending", "approval.pending"),
            ("p.pulse.acme.events.action.completed", "action.completed"),
        ] {
            assert_eq!(topic(subject), Some((Topic::Agent, name.to_owned())));
        }
        for (subject, name) in [
            ("p.pulse.acme.events.run.accepted", "run.accepted"),
            ("p.pulse.acme.events.run.completed", "run.completed"),
        ] {
            assert_eq!(topic(subject), Some((Topic::PatrolRuns, name.to_owned())));
        }
        for other in [
            "p.pulse.acme.events.finding.createdx",
            "p.pulse.acme.events.resource.changed",
            "p.pulse.acme.events.settings.changed",
            "p.pulse.other.events.finding.created",
            "p.pulse.other.events.run.accepted",
        ] {
            assert_eq!(topic(other), None, "{other}");
        }
        let body = Frame::of_message(prefix, "p.pulse.acme.events.run.tool", b"{\"a\":\n1}", 9)
            .expect("a run event");
        assert_eq!((body.sequence, body.data.as_str()), (9, r#"{"a":1}"#));
        assert!(
            Frame::of_message(prefix, "p.pulse.acme.events.run.tool", b"not json", 9).is_none()
        );
    }

    #[test]
    fn a_join_takes_its_topics_retained_frames_after_its_sequence_and_the_live_ones_after_head() {
        let feed = TenantFeed::new(10);
        {
            let mut state = feed.state.lock().unwrap();
            state.push(11, Some(frame(11, Topic::Agent)));
            state.push(12, None); // an event no topic carries: moves head only
            state.push(13, Some(frame(13, Topic::PatrolRuns)));
            state.push(14, Some(frame(14, Topic::Agent)));
        }
        let sequences = |joined: Joined| {
            joined
                .backlog
                .map(|b| b.iter().map(|f| f.sequence).collect::<Vec<_>>())
        };
        let fresh = feed.join(Topic::Agent, None);
        assert_eq!(fresh.head, 14);
        assert_eq!(sequences(fresh), Some(vec![]));
        assert_eq!(sequences(feed.join(Topic::Agent, Some(11))), Some(vec![14]));
        assert_eq!(
            sequences(feed.join(Topic::Agent, Some(10))),
            Some(vec![11, 14])
        );
        assert_eq!(
            sequences(feed.join(Topic::PatrolRuns, Some(10))),
            Some(vec![13])
        );
        assert_eq!(
            sequences(feed.join(Topic::PatrolRuns, Some(14))),
            Some(vec![])
        );
        // Before the feed started, or beyond what it saw: not the feed's to answer.
        assert_eq!(sequences(feed.join(Topic::Agent, Some(9))), None);
        assert_eq!(sequences(feed.join(Topic::PatrolRuns, Some(15))), None);

        // A topic's subscribers get only its live frames.
        let mut runs = feed.join(Topic::PatrolRuns, None).live;
        let _ = feed.live[Topic::Agent.index()].send(frame(15, Topic::Agent));
        let _ = feed.live[Topic::PatrolRuns.index()].send(frame(16, Topic::PatrolRuns));
        assert_eq!(runs.try_recv().map(|f| f.sequence).ok(), Some(16));
        assert!(runs.try_recv().is_err());
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
            heartbeat: None,
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
            live.send(frame(sequence, Topic::PatrolRuns)).unwrap();
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
            live.send(frame(sequence, Topic::Agent)).unwrap();
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
        let feed = TenantFeed::new(0);
        let mut state = feed.state.lock().unwrap();
        for sequence in 1..=(RETAINED_FRAMES as u64 + 2) {
            state.push(sequence, Some(frame(sequence, Topic::Agent)));
        }
        assert_eq!(state.recent.len(), RETAINED_FRAMES);
        assert_eq!(state.covered_from, 2);
        assert_eq!(state.recent.front().map(|f| f.sequence), Some(3));
    }
}
