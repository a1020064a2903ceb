//! The one stream parser: framing, the protocol's chunk decoder and the assembler, fed raw bytes.
//!
//! A provider call reads the body and hands every chunk to [`StreamParser::push`]; when the body
//! ends (or a chunk held the protocol's end marker) it calls [`StreamParser::finish`]. The caller
//! owns only IO (timeouts, stalls, transport errors). Fuzz targets and property tests drive this
//! same parser, so the code they exercise is the code that runs.

use crate::Protocol;
use crate::assembler::{Assembler, Delta};
use crate::failure::ProviderFailure;
use crate::framing::{FrameDecoder, Framing};
use crate::types::{ChatResponse, StreamEvent};
use crate::{anthropic, gemini, ollama, openai};

/// Whether more of the body is wanted after a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// The turn is not over: keep reading.
    Continue,
    /// The protocol's end marker arrived: stop reading, bytes after it are ignored.
    Terminal,
}

/// Parses one streamed response; never panics, whatever the bytes or where chunks are cut.
#[derive(Debug)]
pub struct StreamParser {
    protocol: Protocol,
    decoder: FrameDecoder,
    assembler: Assembler,
}

impl StreamParser {
    pub fn new(protocol: Protocol) -> Self {
        let framing = match protocol {
            Protocol::Ollama => Framing::Ndjson,
            Protocol::OpenAiCompatible | Protocol::Anthropic | Protocol::Gemini => Framing::Sse,
        };
        Self {
            protocol,
            decoder: FrameDecoder::new(framing),
            assembler: Assembler::default(),
        }
    }

    /// Feeds a chunk of the body, cut anywhere. Events go to `emit` as payloads complete.
    pub fn push(
        &mut self,
        chunk: &[u8],
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<Progress, ProviderFailure> {
        if self.assembler.saw_terminal() {
            return Ok(Progress::Terminal);
        }
        let payloads = self.decoder.push(chunk);
        if self.decoder.overflowed() {
            return Err(ProviderFailure::malformed(
                "the provider sent a stream line that is too long",
            ));
        }
        for payload in payloads {
            self.feed(&payload, emit)?;
            if self.assembler.saw_terminal() {
                return Ok(Progress::Terminal);
            }
        }
        Ok(Progress::Continue)
    }

    /// Ends the stream: delivers a last unterminated payload, then builds the response. A stream
    /// that ended before the model finished its turn (no end marker and no stop reason) fails.
    pub fn finish(
        mut self,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<ChatResponse, ProviderFailure> {
        if !self.assembler.saw_terminal() {
            for payload in self.decoder.finish() {
                self.feed(&payload, emit)?;
            }
        }
        if !self.assembler.saw_terminal() {
            if !self.assembler.saw_stop() {
                return Err(ProviderFailure::malformed(
                    "the provider stream ended before the model finished its turn",
                ));
            }
            tracing::warn!("provider stream ended without terminal event");
        }
        self.assembler.finish()
    }

    fn feed(
        &mut self,
        payload: &str,
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<(), ProviderFailure> {
        for delta in decode_chunk(self.protocol, payload)? {
            self.assembler.apply(delta, emit);
        }
        Ok(())
    }
}

fn decode_chunk(protocol: Protocol, payload: &str) -> Result<Vec<Delta>, ProviderFailure> {
    match protocol {
        Protocol::OpenAiCompatible => openai::decode_chunk(payload),
        Protocol::Anthropic => anthropic::decode_chunk(payload),
        Protocol::Gemini => gemini::decode_chunk(payload),
        Protocol::Ollama => ollama::decode_chunk(payload),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailureCause;
    use crate::framing::MAX_LINE_BYTES;
    use crate::types::StopReason;
    use proptest::prelude::*;

    const PROTOCOLS: [Protocol; 4] = [
        Protocol::OpenAiCompatible,
        Protocol::Anthropic,
        Protocol::Gemini,
        Protocol::Ollama,
    ];

    /// Feeds every chunk, then finishes, as a provider call does with a body.
    fn parse(
        protocol: Protocol,
        chunks: &[&[u8]],
        emit: &mut dyn FnMut(StreamEvent),
    ) -> Result<ChatResponse, ProviderFailure> {
        let mut parser = StreamParser::new(protocol);
        for chunk in chunks {
            if parser.push(chunk, emit)? == Progress::Terminal {
                break;
            }
        }
        parser.finish(emit)
    }

    fn split<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut out = Vec::new();
        let mut start = 0;
        for cut in cuts {
            out.push(&bytes[start..cut]);
            start = cut;
        }
        out.push(&bytes[start..]);
        out
    }

    fn wire_like() -> impl Strategy<Value = Vec<u8>> {
        // Bytes biased towards the syntax of the streams, so decoders get past the framing.
        let piece = prop_oneof![
            Just(b"data: ".to_vec()),
            Just(b"\n\n".to_vec()),
            Just(b"\r\n".to_vec()),
            Just(b"[DONE]".to_vec()),
            Just(br#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}"#.to_vec()),
            Just(br#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}"#.to_vec()),
            Just(br#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"x","args":{}}}]}}]}"#.to_vec()),
            Just(br#"{"message":{"content":"a","tool_calls":[{"function":{"name":"x","arguments":{}}}]},"done":true}"#.to_vec()),
            proptest::collection::vec(any::<u8>(), 0..16),
        ];
        proptest::collection::vec(piece, 0..24).prop_map(|p| p.concat())
    }

    proptest! {
        #[test]
        fn every_protocol_survives_arbitrary_bytes(
            bytes in prop_oneof![proptest::collection::vec(any::<u8>(), 0..512), wire_like()],
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
        ) {
            let chunks = split(&bytes, &cuts);
            for protocol in PROTOCOLS {
                let _ = parse(protocol, &chunks, &mut |_| {});
            }
        }

        #[test]
        fn where_chunks_are_cut_changes_nothing(
            cuts in proptest::collection::vec(any::<usize>(), 0..12),
        ) {
            let body = "data: {\"choices\":[{\"delta\":{\"content\":\"h\u{e9}llo \"}}]}\n\n\
                        data: {\"choices\":[{\"delta\":{\"content\":\"w\u{f6}rld\"},\"finish_reason\":\"stop\"}]}\n\n\
                        data: [DONE]\n\n";
            let whole = parse(Protocol::OpenAiCompatible, &[body.as_bytes()], &mut |_| {});
            let cut = parse(Protocol::OpenAiCompatible, &split(body.as_bytes(), &cuts), &mut |_| {});
            prop_assert_eq!(whole.as_ref().map(|r| r.content.as_str()), Ok("h\u{e9}llo w\u{f6}rld"));
            prop_assert_eq!(cut, whole);
        }
    }

    #[test]
    fn a_stream_closed_mid_turn_fails_closed() {
        for (protocol, body) in [
            (
                Protocol::OpenAiCompatible,
                &b"data: {\"choices\":[{\"delta\":{\"content\":\"hal\"}}]}\n\n"[..],
            ),
            (
                Protocol::Anthropic,
                b"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hal\"}}\n\n",
            ),
            (
                Protocol::Gemini,
                b"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"hal\"}]}}]}\n\n",
            ),
            (Protocol::Ollama, b"{\"message\":{\"content\":\"hal\"}}\n"),
        ] {
            let mut shown = String::new();
            let failure = parse(protocol, &[body], &mut |ev| {
                if let StreamEvent::Content { text } = ev {
                    shown.push_str(&text);
                }
            })
            .expect_err("a turn without an end is not a response");
            assert_eq!(failure.cause, FailureCause::MalformedResponse, "{protocol:?}");
            assert!(
                failure.message.contains("ended before the model finished"),
                "{protocol:?}: {}",
                failure.message
            );
            assert_eq!(shown, "hal", "{protocol:?}");
        }
    }

    #[test]
    fn a_stop_reason_without_the_end_marker_is_a_response() {
        let body = b"data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n";
        let response = parse(Protocol::OpenAiCompatible, &[body], &mut |_| {}).expect("stopped");
        assert_eq!(response.content, "ok");
        assert_eq!(response.stop_reason, StopReason::EndTurn);
    }

    #[test]
    fn the_last_line_without_its_newline_still_counts() {
        let body = b"{\"message\":{\"content\":\"ok\"},\"done\":true}";
        let response = parse(Protocol::Ollama, &[body], &mut |_| {}).expect("done");
        assert_eq!(response.content, "ok");
    }

    #[test]
    fn bytes_after_the_end_marker_are_ignored() {
        let mut parser = StreamParser::new(Protocol::OpenAiCompatible);
        let progress = parser
            .push(
                b"data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\ndata: [DONE]\n\ndata: {not json\n\n",
                &mut |_| {},
            )
            .expect("the end marker comes before the bad chunk");
        assert_eq!(progress, Progress::Terminal);
        assert_eq!(
            parser.push(b"more garbage\n\n", &mut |_| {}),
            Ok(Progress::Terminal)
        );
        assert_eq!(parser.finish(&mut |_| {}).expect("done").content, "ok");
    }

    #[test]
    fn an_endless_line_is_a_malformed_response() {
        let mut parser = StreamParser::new(Protocol::Ollama);
        let chunk = vec![b'x'; 1024 * 1024];
        let mut result = Ok(Progress::Continue);
        for _ in 0..=MAX_LINE_BYTES / chunk.len() {
            result = parser.push(&chunk, &mut |_| {});
            if result.is_err() {
                break;
            }
        }
        let failure = result.expect_err("overflow");
        assert_eq!(failure.cause, FailureCause::MalformedResponse);
        assert!(failure.message.contains("too long"), "{}", failure.message);
    }

    #[test]
    fn a_chunk_that_is_not_json_is_a_malformed_response() {
        for protocol in PROTOCOLS {
            let body: &[u8] = if protocol == Protocol::Ollama {
                b"{oops\n"
            } else {
                b"data: {oops\n\n"
            };
            let failure = parse(protocol, &[body], &mut |_| {}).expect_err("not json");
            assert_eq!(
                failure.cause,
                FailureCause::MalformedResponse,
                "{protocol:?}"
            );
        }
    }
}
