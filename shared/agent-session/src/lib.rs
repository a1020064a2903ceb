//! The agent side of the relay's WebSocket session, shared by the host agent and the connector
//! (ADR 0013): Hello, then reports from the backlog, each awaited until acked or rejected. Reconnects with bounded exponential backoff, fully jittered so the
//! agents of a restarted relay do not all reconnect at the same instant; while disconnected the
//! backlog keeps the newest reports and drops the oldest.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use pulse_domain::agent_protocol::{
    AGENT_WS_PATH, AgentMessage, Hello, Refused, RelayMessage, Report,
};
use pulse_domain::backoff::{Backoff, Jitter};
use tokio::sync::{Notify, mpsc};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_util::sync::CancellationToken;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const REPLY_TIMEOUT: Duration = Duration::from_secs(15);
/// The pause before reconnect number n: up to 500 ms doubling to 30 s, drawn from all of it.
const RECONNECT: Backoff =
    Backoff::new(Duration::from_millis(500), Duration::from_secs(30)).jitter(Jitter::Full);
/// A session that lasted this long resets the backoff.
const STABLE_SESSION: Duration = Duration::from_secs(30);
/// Answers waiting to be written to the relay.
const ANSWER_QUEUE: usize = 64;

/// Reports waiting to be sent, oldest first, at most `capacity`.
pub struct Backlog {
    queue: Mutex<VecDeque<Report>>,
    capacity: usize,
    ready: Notify,
    /// Woken each time a report leaves the queue (acked or rejected).
    taken: Notify,
}

impl Backlog {
    pub fn new(capacity: usize) -> Self {
        Self {
            queue: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
            ready: Notify::new(),
            taken: Notify::new(),
        }
    }

    /// Queues `report`; returns the report dropped to make room, if any.
    pub fn push(&self, report: Report) -> Option<Report> {
        let dropped = {
            let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            let dropped = (queue.len() >= self.capacity)
                .then(|| queue.pop_front())
                .flatten();
            queue.push_back(report);
            dropped
        };
        self.ready.notify_one();
        dropped
    }

    fn front(&self) -> Option<Report> {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .front()
            .cloned()
    }

    fn pop_if(&self, seq: u64) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.front().is_some_and(|r| r.seq == seq) {
            queue.pop_front();
            self.taken.notify_waiters();
        }
    }

    /// Waits until the queue is empty (every report acked or rejected) or `within` has passed;
    /// whether it emptied.
    pub async fn drained(&self, within: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let taken = self.taken.notified();
            tokio::pin!(taken);
            taken.as_mut().enable();
            if self.is_empty() {
                return true;
            }
            if tokio::time::timeout_at(deadline, taken).await.is_err() {
                return self.is_empty();
            }
        }
    }

    pub fn len(&self) -> usize {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The relay's agent endpoint for a base URL: `http(s)://host:port` becomes
/// `ws(s)://host:port/api/agent/ws`; a `ws(s)://` URL with a path is used as given.
pub fn ws_url(relay_url: &str) -> String {
    let trimmed = relay_url.trim_end_matches('/');
    let (scheme, rest) = match trimmed.split_once("://") {
        Some(("https", rest)) => ("wss", rest),
        Some(("http", rest)) => ("ws", rest),
        Some((scheme, rest)) => (scheme, rest),
        None => ("ws", trimmed),
    };
    if rest.contains('/') {
        format!("{scheme}://{rest}")
    } else {
        format!("{scheme}://{rest}{AGENT_WS_PATH}")
    }
}

#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    pub relay_url: String,
    pub token: String,
    pub hello: Hello,
}

/// What answers the relay's requests (commands, observations, reads) for one agent: `None` from
/// [`Answer::answer`] for a message that is not a request it serves.
pub trait Answer: Send + Sync + 'static {
    fn answer(
        &self,
        request: RelayMessage,
    ) -> impl std::future::Future<Output = Option<AgentMessage>> + Send;
}

/// An agent that answers no requests: each is refused with a reason.
pub struct NoAnswers;

impl Answer for NoAnswers {
    async fn answer(&self, _request: RelayMessage) -> Option<AgentMessage> {
        None
    }
}

type Answerer<A> = Option<std::sync::Arc<A>>;

/// Keeps a session with the relay until `shutdown`.
pub async fn run<A: Answer>(
    config: ConnectionConfig,
    backlog: std::sync::Arc<Backlog>,
    requests: Answerer<A>,
    shutdown: CancellationToken,
) {
    let url = ws_url(&config.relay_url);
    let mut reconnect = RECONNECT;
    loop {
        let started = Instant::now();
        match session(&url, &config, &backlog, &requests, &shutdown).await {
            Ok(()) => return,
            Err(error) => {
                if started.elapsed() >= STABLE_SESSION {
                    reconnect.reset();
                }
                let pause = reconnect.next_delay();
                let failures = reconnect.attempts();
                tracing::warn!(relay = %url, error = %error, failures, pause_ms = pause.as_millis() as u64, backlog = backlog.len(), "relay session ended; reconnecting");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
        }
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn send(socket: &mut Socket, message: &AgentMessage) -> anyhow::Result<()> {
    let text = serde_json::to_string(message)?;
    tokio::time::timeout(REPLY_TIMEOUT, socket.send(Message::text(text)))
        .await
        .map_err(|_| anyhow::anyhow!("send timed out"))??;
    Ok(())
}

/// The next relay message (pings are answered by the library; other frames are skipped).
async fn receive(socket: &mut Socket) -> anyhow::Result<RelayMessage> {
    loop {
        let frame = tokio::time::timeout(REPLY_TIMEOUT, socket.next())
            .await
            .map_err(|_| anyhow::anyhow!("no answer from the relay within {REPLY_TIMEOUT:?}"))?
            .ok_or_else(|| anyhow::anyhow!("relay closed the connection"))??;
        match frame {
            Message::Text(text) => return Ok(serde_json::from_str(text.as_str())?),
            Message::Close(frame) => {
                anyhow::bail!("relay closed the connection: {frame:?}")
            }
            _ => continue,
        }
    }
}

async fn session<A: Answer>(
    url: &str,
    config: &ConnectionConfig,
    backlog: &Backlog,
    requests: &Answerer<A>,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let mut request = url.into_client_request()?;
    request.headers_mut().insert(
        http::header::AUTHORIZATION,
        format!("Bearer {}", config.token).parse()?,
    );
    let connected = tokio::select! {
        _ = shutdown.cancelled() => return Ok(()),
        connected = tokio::time::timeout(CONNECT_TIMEOUT, tokio_tungstenite::connect_async(request)) => connected,
    };
    let (mut socket, _) = match connected {
        Err(_) => anyhow::bail!("connecting timed out after {CONNECT_TIMEOUT:?}"),
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
            anyhow::bail!(
                "relay refused the connection with HTTP {}",
                response.status()
            )
        }
        Ok(result) => result?,
    };
    send(&mut socket, &AgentMessage::Hello(config.hello.clone())).await?;
    match receive(&mut socket).await? {
        RelayMessage::Welcome { agent_id, .. } => {
            tracing::info!(relay = %url, agent_id = %agent_id, "connected to the relay");
        }
        RelayMessage::Rejected { reason, .. } => anyhow::bail!("relay rejected hello: {reason}"),
        other => anyhow::bail!("unexpected answer to hello: {other:?}"),
    }
    // Full duplex: reports go out one at a time and wait for their ack, while requests from
    // the relay are answered by tasks whose answers come back through `answers`.
    let (answers_tx, mut answers) = mpsc::channel::<AgentMessage>(ANSWER_QUEUE);
    let mut in_flight: Option<(u64, Instant)> = None;
    loop {
        if in_flight.is_none()
            && !shutdown.is_cancelled()
            && let Some(report) = backlog.front()
        {
            let seq = report.seq;
            send(&mut socket, &AgentMessage::Report(report)).await?;
            in_flight = Some((seq, Instant::now()));
        }
        let ack_deadline = in_flight.map(|(_, sent)| sent + REPLY_TIMEOUT);
        tokio::select! {
            _ = shutdown.cancelled() => {
                let _ = tokio::time::timeout(Duration::from_secs(2), socket.close(None)).await;
                return Ok(());
            }
            _ = backlog.ready.notified(), if in_flight.is_none() => {}
            _ = sleep_until_opt(ack_deadline) => {
                anyhow::bail!("no answer from the relay within {REPLY_TIMEOUT:?}");
            }
            answer = answers.recv() => {
                if let Some(answer) = answer {
                    send(&mut socket, &answer).await?;
                }
            }
            frame = socket.next() => match frame {
                None => anyhow::bail!("relay closed the connection"),
                Some(Err(error)) => return Err(error.into()),
                Some(Ok(Message::Close(frame))) => anyhow::bail!("relay closed the connection: {frame:?}"),
                Some(Ok(Message::Text(text))) => {
                    let message = match serde_json::from_str::<RelayMessage>(text.as_str()) {
                        Ok(message) => message,
                        Err(error) => {
                            tracing::warn!(%error, "unreadable message from the relay ignored");
                            continue;
                        }
                    };
                    match message {
                        RelayMessage::Ack { seq } => {
                            if in_flight.is_some_and(|(s, _)| s == seq) {
                                backlog.pop_if(seq);
                                in_flight = None;
                            }
                        }
                        RelayMessage::Rejected { seq, reason } => {
                            match (seq, in_flight) {
                                (Some(s), Some((f, _))) if s == f => {
                                    tracing::warn!(seq = s, %reason, "relay rejected a report");
                                    backlog.pop_if(s);
                                    in_flight = None;
                                }
                                (None, Some((f, _))) => {
                                    tracing::warn!(seq = f, %reason, "relay rejected a message");
                                    backlog.pop_if(f);
                                    in_flight = None;
                                }
                                _ => tracing::warn!(%reason, "relay rejected a message"),
                            }
                        }
                        RelayMessage::Welcome { .. } => {}
                        request => {
                            let request_id = request.request_id().unwrap_or_default().to_owned();
                            let Some(requests) = requests.clone() else {
                                let refusal = AgentMessage::Refused(Refused {
                                    request_id,
                                    reason: "this agent does not answer requests".to_owned(),
                                    code: None,
                                });
                                send(&mut socket, &refusal).await?;
                                continue;
                            };
                            let answers = answers_tx.clone();
                            tokio::spawn(async move {
                                if let Some(answer) = requests.answer(request).await {
                                    let _ = answers.send(answer).await;
                                }
                            });
                        }
                    }
                }
                Some(Ok(_)) => {}
            },
        }
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(seq: u64) -> Report {
        Report {
            seq,
            observed_at: chrono::Utc::now(),
            resources: Vec::new(),
        }
    }

    #[tokio::test]
    async fn drained_waits_for_the_last_report_to_leave_and_no_longer() {
        let backlog = std::sync::Arc::new(Backlog::new(3));
        assert!(backlog.drained(Duration::from_millis(1)).await);
        backlog.push(report(1));
        backlog.push(report(2));
        assert!(!backlog.drained(Duration::from_millis(20)).await);
        let taker = backlog.clone();
        let acks = tokio::spawn(async move {
            taker.pop_if(1);
            tokio::task::yield_now().await;
            taker.pop_if(2);
        });
        assert!(backlog.drained(Duration::from_secs(10)).await);
        acks.await.unwrap();
    }

    #[test]
    fn backlog_is_bounded_and_drops_the_oldest() {
        let backlog = Backlog::new(3);
        for seq in 1..=3 {
            assert!(backlog.push(report(seq)).is_none());
        }
        assert_eq!(backlog.push(report(4)).map(|r| r.seq), Some(1));
        assert_eq!(backlog.len(), 3);
        assert_eq!(backlog.front().map(|r| r.seq), Some(2));
        backlog.pop_if(9);
        assert_eq!(backlog.len(), 3);
        backlog.pop_if(2);
        assert_eq!(backlog.front().map(|r| r.seq), Some(3));
    }

    #[test]
    fn relay_urls() {
        assert_eq!(
            ws_url("http://127.0.0.1:7656"),
            "ws://127.0.0.1:7656/api/agent/ws"
        );
        assert_eq!(
            ws_url("https://relay.example/"),
            "wss://relay.example/api/agent/ws"
        );
        assert_eq!(ws_url("ws://h:1/custom"), "ws://h:1/custom");
        assert_eq!(ws_url("127.0.0.1:7656"), "ws://127.0.0.1:7656/api/agent/ws");
    }

    #[test]
    fn reconnect_backoff_is_bounded() {
        assert_eq!(RECONNECT.ceiling(1), Duration::from_millis(500));
        assert_eq!(RECONNECT.ceiling(3), Duration::from_secs(2));
        assert_eq!(RECONNECT.ceiling(100), Duration::from_secs(30));
        let mut reconnect = RECONNECT;
        for _ in 0..100 {
            assert!(reconnect.next_delay() <= Duration::from_secs(30));
        }
    }
}
