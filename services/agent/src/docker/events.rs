//! `GET /events` stream: one JSON object per line, parsed as bytes arrive.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use chrono::{DateTime, Utc};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde::{Deserialize, Serialize};

use super::error::DockerError;
use super::model::{HealthStatus, bounded};

/// Longest event line accepted; a longer one is dropped (events are a few hundred bytes).
pub const MAX_EVENT_BYTES: usize = 256 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "action", content = "detail")]
pub enum EventAction {
    Create,
    Start,
    Restart,
    Stop,
    Kill,
    Die,
    Oom,
    Pause,
    Unpause,
    Destroy,
    HealthStatus(HealthStatus),
    Other(String),
}

impl EventAction {
    pub fn parse(action: &str) -> Self {
        if let Some(status) = action.strip_prefix("health_status") {
            return Self::HealthStatus(HealthStatus::parse(status.trim_start_matches(':')));
        }
        match action {
            "create" => Self::Create,
            "start" => Self::Start,
            "restart" => Self::Restart,
            "stop" => Self::Stop,
            "kill" => Self::Kill,
            "die" => Self::Die,
            "oom" => Self::Oom,
            "pause" => Self::Pause,
            "unpause" => Self::Unpause,
            "destroy" => Self::Destroy,
            // exec_start: <cmd> and similar carry command lines; keep only the verb.
            other => Self::Other(bounded(other.split(':').next().unwrap_or_default(), 64)),
        }
    }
}

/// A container event. Actor attributes are not kept wholesale (they repeat every container
/// label); only name, image, exit code and signal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContainerEvent {
    pub action: EventAction,
    pub container_id: String,
    pub name: Option<String>,
    pub image: Option<String>,
    pub exit_code: Option<i64>,
    pub signal: Option<String>,
    pub time: Option<DateTime<Utc>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawEvent {
    #[serde(rename = "Type")]
    kind: String,
    #[serde(rename = "Action")]
    action: String,
    #[serde(rename = "Actor")]
    actor: RawActor,
    time: Option<i64>,
    #[serde(rename = "timeNano")]
    time_nano: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawActor {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "Attributes")]
    attributes: BTreeMap<String, String>,
}

/// Incremental line decoder. Non-container events and undecodable lines are skipped and
/// counted, never fatal.
#[derive(Debug, Default)]
pub struct EventDecoder {
    buf: Vec<u8>,
    discarding: bool,
    ready: VecDeque<ContainerEvent>,
    skipped: u64,
}

impl EventDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Lines that were not container events or did not decode.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    pub fn push(&mut self, mut chunk: &[u8]) {
        while let Some(pos) = chunk.iter().position(|b| *b == b'\n') {
            let (line, rest) = chunk.split_at(pos);
            if !self.discarding {
                self.buf.extend_from_slice(line);
                let complete = std::mem::take(&mut self.buf);
                self.decode_line(&complete);
            }
            self.discarding = false;
            chunk = &rest[1..];
        }
        if !self.discarding {
            self.buf.extend_from_slice(chunk);
            if self.buf.len() > MAX_EVENT_BYTES {
                self.buf.clear();
                self.discarding = true;
                self.skipped += 1;
            }
        }
    }

    /// Decodes a final unterminated line, if any.
    pub fn finish(&mut self) {
        if !self.discarding && !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            self.decode_line(&rest);
        }
    }

    pub fn next_event(&mut self) -> Option<ContainerEvent> {
        self.ready.pop_front()
    }

    fn decode_line(&mut self, line: &[u8]) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let raw: RawEvent = match serde_json::from_slice(line) {
            Ok(raw) => raw,
            Err(_) => {
                self.skipped += 1;
                return;
            }
        };
        if raw.kind != "container" || raw.actor.id.is_empty() {
            self.skipped += 1;
            return;
        }
        let attr = |key: &str| raw.actor.attributes.get(key).map(|v| bounded(v, 256));
        let time = match (raw.time_nano, raw.time) {
            (Some(nanos), _) => Some(DateTime::<Utc>::from_timestamp_nanos(nanos)),
            (None, Some(secs)) => DateTime::<Utc>::from_timestamp(secs, 0),
            (None, None) => None,
        };
        self.ready.push_back(ContainerEvent {
            action: EventAction::parse(&raw.action),
            container_id: bounded(&raw.actor.id, 128),
            name: attr("name"),
            image: attr("image"),
            exit_code: attr("exitCode").and_then(|c| c.parse().ok()),
            signal: attr("signal"),
            time,
        });
    }
}

/// A live `/events` subscription. Each [`EventStream::next`] waits at most the idle timeout;
/// on [`DockerError::Timeout`] the caller reconnects with `since` set to the last event time.
pub struct EventStream {
    body: Incoming,
    decoder: EventDecoder,
    idle_timeout: Duration,
    ended: bool,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("idle_timeout", &self.idle_timeout)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl EventStream {
    pub(crate) fn new(body: Incoming, idle_timeout: Duration) -> Self {
        Self {
            body,
            decoder: EventDecoder::new(),
            idle_timeout,
            ended: false,
        }
    }

    /// The next container event; `Ok(None)` when the engine closed the stream.
    pub async fn next(&mut self) -> Result<Option<ContainerEvent>, DockerError> {
        loop {
            if let Some(event) = self.decoder.next_event() {
                return Ok(Some(event));
            }
            if self.ended {
                return Ok(None);
            }
            let frame = tokio::time::timeout(self.idle_timeout, self.body.frame())
                .await
                .map_err(|_| DockerError::Timeout {
                    operation: "events".to_owned(),
                    timeout_ms: u64::try_from(self.idle_timeout.as_millis()).unwrap_or(u64::MAX),
                })?;
            match frame {
                None => {
                    self.decoder.finish();
                    self.ended = true;
                }
                Some(Err(e)) => {
                    return Err(DockerError::Transport {
                        operation: "events".to_owned(),
                        reason: e.to_string(),
                    });
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.decoder.push(&data);
                    }
                }
            }
        }
    }

    pub fn skipped(&self) -> u64 {
        self.decoder.skipped()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINES: &str = concat!(
        r#"{"status":"start","id":"abc","Type":"container","Action":"start","Actor":{"ID":"abc","Attributes":{"name":"web","image":"nginx:1.25","com.example.secret":"x"}},"time":1764410000,"timeNano":1764410000123456789}"#,
        "\n",
        r#"{"Type":"network","Action":"connect","Actor":{"ID":"net1","Attributes":{}},"time":1764410001}"#,
        "\n",
        r#"{"Type":"container","Action":"health_status: unhealthy","Actor":{"ID":"def","Attributes":{"name":"api"}},"time":1764410002}"#,
        "\n",
        "not json\n",
        r#"{"Type":"container","Action":"die","Actor":{"ID":"ghi","Attributes":{"exitCode":"137"}},"time":1764410003}"#,
        "\n",
    );

    #[test]
    fn decodes_split_anywhere() {
        for split in 1..LINES.len() {
            let mut decoder = EventDecoder::new();
            let (a, b) = LINES.as_bytes().split_at(split);
            decoder.push(a);
            decoder.push(b);
            let mut events = Vec::new();
            while let Some(e) = decoder.next_event() {
                events.push(e);
            }
            assert_eq!(events.len(), 3, "split at {split}");
            assert_eq!(events[0].action, EventAction::Start);
            assert_eq!(events[0].name.as_deref(), Some("web"));
            assert_eq!(
                events[1].action,
                EventAction::HealthStatus(HealthStatus::Unhealthy)
            );
            assert_eq!(events[2].exit_code, Some(137));
            assert_eq!(decoder.skipped(), 2);
        }
    }

    #[test]
    fn overlong_line_is_skipped_and_decoding_resumes() {
        let mut decoder = EventDecoder::new();
        decoder.push(&vec![b'x'; MAX_EVENT_BYTES + 10]);
        decoder.push(b"yyy\n");
        decoder.push(br#"{"Type":"container","Action":"oom","Actor":{"ID":"a","Attributes":{}}}"#);
        decoder.finish();
        assert_eq!(
            decoder.next_event().map(|e| e.action),
            Some(EventAction::Oom)
        );
        assert_eq!(decoder.skipped(), 1);
    }

    #[test]
    fn exec_actions_drop_the_command_line() {
        assert_eq!(
            EventAction::parse("exec_start: sh -c echo $SECRET"),
            EventAction::Other("exec_start".into())
        );
    }
}
