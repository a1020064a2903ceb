//! A Server-Sent Events client for tests and benchmarks: reads frames off a response body as
//! they arrive, the way a browser's `EventSource` would.

use std::collections::VecDeque;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};
use pulse_providers::framing::{SseDecoder, SseEvent};
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

impl From<SseEvent> for Frame {
    fn from(event: SseEvent) -> Self {
        Self {
            event: event.event_type().to_owned(),
            id: event.id,
            data: event.data,
        }
    }
}

/// Reads SSE frames off a response body incrementally, through the one SSE parser
/// (`pulse_providers::framing`): comments (keepalives) are skipped, `data` lines are joined with
/// `\n`, and a character split between two network chunks stays whole.
pub struct SseReader {
    body: BoxStream<'static, anyhow::Result<bytes::Bytes>>,
    decoder: SseDecoder,
    ready: VecDeque<Frame>,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> Self {
        Self::over(response.bytes_stream().map_err(anyhow::Error::from))
    }

    fn over(body: impl Stream<Item = anyhow::Result<bytes::Bytes>> + Send + 'static) -> Self {
        Self {
            body: body.boxed(),
            decoder: SseDecoder::new(),
            ready: VecDeque::new(),
        }
    }

    /// The next frame, or an error when the body ends or `deadline` passes.
    pub async fn next_frame(&mut self, deadline: Duration) -> anyhow::Result<Frame> {
        tokio::time::timeout(deadline, async {
            loop {
                if let Some(frame) = self.ready.pop_front() {
                    return Ok(frame);
                }
                let chunk = self
                    .body
                    .next()
                    .await
                    .ok_or_else(|| anyhow::anyhow!("the event stream ended"))??;
                self.ready
                    .extend(self.decoder.push(&chunk).into_iter().map(Frame::from));
                anyhow::ensure!(
                    !self.decoder.overflowed(),
                    "the event stream sent a line or event past the parser's bound"
                );
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

/// A client without a total timeout, which would cut a long-lived body.
pub fn client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(chunks: &[&'static [u8]]) -> SseReader {
        let chunks: Vec<anyhow::Result<bytes::Bytes>> = chunks
            .iter()
            .map(|c| Ok(bytes::Bytes::from_static(c)))
            .collect();
        SseReader::over(futures::stream::iter(chunks))
    }

    #[tokio::test]
    async fn frames_arrive_whole_and_comments_are_skipped() -> anyhow::Result<()> {
        let within = Duration::from_secs(5);
        let mut reader = reader(&[
            b": keepalive\n\nevent: finding.created\nid: 7\ndata: {\"a\":\ndata: 1,",
            // "\u{e9}" is C3 A9, cut between the chunks.
            b"\"t\":\"caf\xC3",
            b"\xA9\"}\n\ndata: x\n\n",
        ]);
        let frame = reader.next_frame(within).await?;
        assert_eq!(frame.event, "finding.created");
        assert_eq!(frame.sequence()?, 7);
        assert_eq!(frame.json()["a"], 1);
        assert_eq!(frame.json()["t"], "caf\u{e9}");
        let bare = reader.next_frame(within).await?;
        assert_eq!(bare.event, "message");
        assert!(bare.sequence().is_err());
        let ended = reader.next_frame(within).await.expect_err("no more frames");
        assert_eq!(ended.to_string(), "the event stream ended");
        Ok(())
    }
}
