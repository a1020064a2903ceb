//! A Server-Sent Events client for tests and benchmarks: reads frames off a response body as
//! they arrive, the way a browser's `EventSource` would.

use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::Value;

/// One SSE frame as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub event: String,
    pub id: Option<String>,
    pub data: String,
}

impl Frame {
    /// The frame's id as an events-stream sequence; an error without a numeric id.
    pub fn sequence(&self) -> anyhow::Result<u64> {
        self.id
            .as_deref()
            .and_then(|id| id.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("frame without a numeric id: {self:?}"))
    }

    /// The `data` as JSON (`null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or(Value::Null)
    }
}

/// Reads SSE frames off a response body incrementally. Comment-only blocks (keepalives) are
/// skipped; `data` lines are joined with `\n` as the SSE format says.
pub struct SseReader {
    body: BoxStream<'static, reqwest::Result<Vec<u8>>>,
    buffer: String,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> Self {
        Self {
            body: response
                .bytes_stream()
                .map(|chunk| chunk.map(|b| b.to_vec()))
                .boxed(),
            buffer: String::new(),
        }
    }

    /// The next frame, or an error when the body ends or `deadline` passes.
    pub async fn next_frame(&mut self, deadline: Duration) -> anyhow::Result<Frame> {
        tokio::time::timeout(deadline, async {
            loop {
                while let Some(end) = self.buffer.find("\n\n") {
                    let block: String = self.buffer.drain(..end + 2).collect();
                    if let Some(frame) = parse_block(&block) {
                        return Ok(frame);
                    }
                }
                let chunk = self
                    .body
                    .next()
                    .await
                    .ok_or_else(|| anyhow::anyhow!("the event stream ended"))??;
                self.buffer
                    .push_str(&String::from_utf8(chunk)?.replace("\r\n", "\n"));
            }
        })
        .await
        .map_err(|_| anyhow::anyhow!("no event within {deadline:?}"))?
    }

    /// Every frame up to and including the first one named in `last` (a turn's `done` or
    /// `error`), each within `deadline` of the one before.
    pub async fn frames_until(
        &mut self,
        last: &[&str],
        deadline: Duration,
    ) -> anyhow::Result<Vec<Frame>> {
        let mut frames = Vec::new();
        loop {
            let frame = self.next_frame(deadline).await?;
            let end = last.contains(&frame.event.as_str());
            frames.push(frame);
            if end {
                return Ok(frames);
            }
        }
    }

    /// The next frame that is not a `heartbeat`.
    pub async fn next_event(&mut self, deadline: Duration) -> anyhow::Result<Frame> {
        let until = tokio::time::Instant::now() + deadline;
        loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            let frame = self.next_frame(left).await?;
            if frame.event != "heartbeat" {
                return Ok(frame);
            }
        }
    }
}

/// One SSE block (the lines before a blank line) as a frame; `None` for a comment-only block.
pub fn parse_block(block: &str) -> Option<Frame> {
    let mut event = None;
    let mut id = None;
    let mut data: Vec<&str> = Vec::new();
    for line in block.lines() {
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event = Some(value.to_owned()),
            "id" => id = Some(value.to_owned()),
            "data" => data.push(value),
            _ => {}
        }
    }
    if event.is_none() && id.is_none() && data.is_empty() {
        return None;
    }
    Some(Frame {
        event: event.unwrap_or_else(|| "message".to_owned()),
        id,
        data: data.join("\n"),
    })
}

/// A client without a total timeout, which would cut a long-lived body.
pub fn client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_become_frames_and_comments_are_skipped() {
        assert_eq!(parse_block(": keepalive\n\n"), None);
        let frame = parse_block("event: finding.created\nid: 7\ndata: {\"a\":\ndata: 1}\n\n")
            .expect("a frame");
        assert_eq!(frame.event, "finding.created");
        assert_eq!(frame.sequence().ok(), Some(7));
        assert_eq!(frame.json()["a"], 1);
        let bare = parse_block("data: x\n\n").expect("a frame");
        assert_eq!(bare.event, "message");
        assert!(bare.sequence().is_err());
    }
}
