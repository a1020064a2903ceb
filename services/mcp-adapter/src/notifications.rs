//! `pulse-mcp --emit-notifications`: the gateway's agent events (`GET /api/agent/events`) as
//! `notifications/<kind>` messages, every event but heartbeats.
//!
//! The body is read as bytes through the one SSE parser (`pulse_providers::framing`), which
//! decodes only whole lines: a character whose bytes arrive in two network chunks stays whole.

use futures::{Stream, StreamExt};
use pulse_providers::framing::{SseDecoder, SseEvent};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Reads `GET /api/agent/events` and sends each notification to `out`, one JSON message per
/// string, until the stream ends or the receiver goes away.
pub async fn forward(base_url: &str, token: Option<&str>, out: mpsc::Sender<String>) {
    let mut request = reqwest::Client::new()
        .get(format!(
            "{}/api/agent/events",
            base_url.trim_end_matches('/')
        ))
        .header(crate::SURFACE_HEADER, crate::SURFACE);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = match request.send().await {
        Ok(response) if response.status().is_success() => response,
        Ok(response) => {
            eprintln!(
                "pulse-mcp: the event stream answered {}; no notifications",
                response.status()
            );
            return;
        }
        Err(error) => {
            eprintln!("pulse-mcp: cannot open the event stream: {error}");
            return;
        }
    };
    let mut notes = std::pin::pin!(notifications(response.bytes_stream()));
    while let Some(note) = notes.next().await {
        if out.send(note.to_string()).await.is_err() {
            return;
        }
    }
}

/// The notifications of an event stream's body, in order, until the body ends, fails, or is no
/// event stream (a line past the parser's bound).
pub fn notifications<B, E>(body: impl Stream<Item = Result<B, E>>) -> impl Stream<Item = Value>
where
    B: AsRef<[u8]>,
{
    body.scan(SseDecoder::new(), |decoder, chunk| {
        let events = chunk
            .ok()
            .map(|chunk| decoder.push(chunk.as_ref()))
            .filter(|_| !decoder.overflowed());
        std::future::ready(events)
    })
    .flat_map(|events| {
        futures::stream::iter(events.iter().filter_map(notification).collect::<Vec<_>>())
    })
}

/// The notification an event becomes: `notifications/<event type>` with the event's JSON data as
/// its params (`{"data": ...}` when it is not JSON); `None` for heartbeats and untyped events.
fn notification(event: &SseEvent) -> Option<Value> {
    let kind = event.event.as_deref()?;
    if kind == "heartbeat" {
        return None;
    }
    let params: Value =
        serde_json::from_str(&event.data).unwrap_or_else(|_| json!({"data": event.data}));
    Some(json!({
        "jsonrpc": "2.0",
        "method": format!("notifications/{kind}"),
        "params": params,
    }))
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use super::*;

    async fn collect(chunks: Vec<&'static [u8]>) -> Vec<Value> {
        let body = futures::stream::iter(chunks.into_iter().map(Ok::<_, Infallible>));
        notifications(body).collect().await
    }

    #[tokio::test]
    async fn a_character_split_across_chunks_arrives_whole() {
        // "é" is C3 A9 and "🚀" F0 9F 9A 80: each is cut between two network chunks.
        let notes = collect(vec![
            b"event: finding.created\nid: 7\ndata: {\"title\":\"caf\xC3",
            b"\xA9 \xF0\x9F",
            b"\x9A\x80\"}\n\n",
        ])
        .await;
        assert_eq!(
            notes,
            vec![json!({
                "jsonrpc": "2.0",
                "method": "notifications/finding.created",
                "params": {"title": "caf\u{e9} \u{1f680}"},
            })]
        );
    }

    #[tokio::test]
    async fn every_event_but_heartbeats_becomes_a_notification() {
        let notes = collect(vec![
            b"event: stream.connected\nid: 3\ndata: {\"resume_point\":\"3\"}\n\n",
            b": keepalive\n\nevent: heartbeat\ndata: {\"at\":\"now\"}\n\n",
            b"data: {\"untyped\":true}\n\n",
            b"event: approval.pending\r\ndata: not json\r\n\r\n",
            // Cut off before its blank line: not an event yet.
            b"event: action.completed\ndata: {}\n",
        ])
        .await;
        let methods: Vec<&str> = notes.iter().filter_map(|n| n["method"].as_str()).collect();
        assert_eq!(
            methods,
            [
                "notifications/stream.connected",
                "notifications/approval.pending"
            ]
        );
        assert_eq!(notes[0]["params"]["resume_point"], "3");
        assert_eq!(notes[1]["params"], json!({"data": "not json"}));
    }

    #[tokio::test]
    async fn a_failed_body_ends_the_notifications() {
        let body = futures::stream::iter(vec![
            Ok(b"event: finding.created\ndata: {}\n\n".as_slice()),
            Err("connection reset"),
            Ok(b"event: finding.updated\ndata: {}\n\n".as_slice()),
        ]);
        let notes: Vec<Value> = notifications(body).collect().await;
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0]["method"], "notifications/finding.created");
    }
}
