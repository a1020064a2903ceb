//! Byte streams to payloads: server-sent events and NDJSON lines, for chunks cut anywhere.
//!
//! [`SseDecoder`] is the workspace's one Server-Sent Events parser: the provider streams (through
//! [`FrameDecoder`]), the MCP adapter's event notifications and the tests' SSE client all read
//! through it. Bytes are buffered until a line is complete and only whole lines are decoded, so a
//! character whose bytes arrive in two chunks stays whole.

/// How a streaming response frames its payloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Server-sent events: the `data:` of each event.
    Sse,
    /// One JSON document per line.
    Ndjson,
}

/// A line (or an SSE event's data) longer than this is not a chunk of ours: the stream is treated
/// as malformed.
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// One server-sent event, as the
/// [event stream format](https://html.spec.whatwg.org/multipage/server-sent-events.html#parsing-an-event-stream)
/// defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `None` without one (or with an empty one): the type is `message`.
    pub event: Option<String>,
    /// The `id:` field of this event, when it had one.
    pub id: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

impl SseEvent {
    /// The event's type: its `event:` field, `message` without one.
    pub fn event_type(&self) -> &str {
        self.event.as_deref().unwrap_or("message")
    }
}

/// Whole lines out of byte chunks. A line ends with LF or CRLF, and in SSE also with a lone CR.
#[derive(Debug)]
struct LineBuffer {
    buf: Vec<u8>,
    /// Bytes of `buf` already searched for a line end.
    scanned: usize,
    cr_ends_line: bool,
    /// The last chunk ended with a CR that ended a line: a LF first in the next one is its pair.
    after_cr: bool,
    overflowed: bool,
}

impl LineBuffer {
    fn new(cr_ends_line: bool) -> Self {
        Self {
            buf: Vec::new(),
            scanned: 0,
            cr_ends_line,
            after_cr: false,
            overflowed: false,
        }
    }

    /// Appends a chunk and hands every line it completes, without its line end, to `line`.
    fn push(&mut self, chunk: &[u8], mut line: impl FnMut(&[u8])) {
        let mut chunk = chunk;
        if self.after_cr && !chunk.is_empty() {
            self.after_cr = false;
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
        }
        self.buf.extend_from_slice(chunk);
        let mut start = 0;
        let mut at = self.scanned;
        while let Some(offset) = self.buf[at..]
            .iter()
            .position(|b| *b == b'\n' || (self.cr_ends_line && *b == b'\r'))
        {
            let end = at + offset;
            at = end + 1;
            if self.buf[end] == b'\r' {
                match self.buf.get(at) {
                    Some(b'\n') => at += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
                line(&self.buf[start..end]);
            } else {
                line(strip_cr(&self.buf[start..end]));
            }
            start = at;
        }
        self.buf.drain(..start);
        self.scanned = self.buf.len();
        if self.buf.len() > MAX_LINE_BYTES {
            self.buf.clear();
            self.scanned = 0;
            self.overflowed = true;
        }
    }

    /// The last line, when the stream ended without its line end.
    fn finish(&mut self, line: impl FnOnce(&[u8])) {
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            self.scanned = 0;
            line(strip_cr(&rest));
        }
    }
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Server-sent events out of byte chunks cut anywhere. Comments (`:` lines), `retry:` and
/// unknown fields are skipped; an event without `data:` is not dispatched, as the format says.
#[derive(Debug)]
pub struct SseDecoder {
    lines: LineBuffer,
    fields: EventFields,
}

/// The fields of the event being read.
#[derive(Debug, Default)]
struct EventFields {
    started: bool,
    event: Option<String>,
    id: Option<String>,
    data: Vec<String>,
    data_bytes: usize,
    overflowed: bool,
}

impl Default for SseDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl SseDecoder {
    pub fn new() -> Self {
        Self {
            lines: LineBuffer::new(true),
            fields: EventFields::default(),
        }
    }

    /// True once a line or an event's data grew past [`MAX_LINE_BYTES`]; its bytes were dropped.
    pub fn overflowed(&self) -> bool {
        self.lines.overflowed || self.fields.overflowed
    }

    /// Feeds a chunk; returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        let fields = &mut self.fields;
        self.lines.push(chunk, |line| {
            fields.line(&String::from_utf8_lossy(line), &mut out)
        });
        out
    }

    /// Ends the stream: a final line without its line end and an event without its blank line
    /// are still delivered (an `EventSource` would drop the event; a provider stream that closes
    /// after its last `data:` line still said it).
    pub fn finish(&mut self) -> Vec<SseEvent> {
        let mut out = Vec::new();
        let fields = &mut self.fields;
        self.lines
            .finish(|line| fields.line(&String::from_utf8_lossy(line), &mut out));
        self.fields.dispatch(&mut out);
        out
    }
}

impl EventFields {
    fn line(&mut self, line: &str, out: &mut Vec<SseEvent>) {
        let line = if self.started {
            line
        } else {
            self.started = true;
            line.strip_prefix('\u{feff}').unwrap_or(line)
        };
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                self.data_bytes += value.len() + 1;
                if self.data_bytes > MAX_LINE_BYTES {
                    self.overflowed = true;
                    self.data.clear();
                    self.data_bytes = 0;
                } else {
                    self.data.push(value.to_owned());
                }
            }
            // An id with a NUL is ignored, as the format says.
            "id" if !value.contains('\0') => self.id = Some(value.to_owned()),
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take().filter(|e| !e.is_empty());
        let id = self.id.take();
        if self.data.is_empty() {
            return;
        }
        out.push(SseEvent {
            event,
            id,
            data: self.data.join("\n"),
        });
        self.data.clear();
        self.data_bytes = 0;
    }
}

/// Turns arbitrary byte chunks into payload strings: an SSE event's data, or an NDJSON line.
#[derive(Debug)]
pub struct FrameDecoder {
    framing: Decoder,
}

#[derive(Debug)]
enum Decoder {
    Sse(SseDecoder),
    Ndjson(LineBuffer),
}

impl FrameDecoder {
    pub fn new(framing: Framing) -> Self {
        Self {
            framing: match framing {
                Framing::Sse => Decoder::Sse(SseDecoder::new()),
                Framing::Ndjson => Decoder::Ndjson(LineBuffer::new(false)),
            },
        }
    }

    /// True once a line grew past [`MAX_LINE_BYTES`]; its bytes were dropped.
    pub fn overflowed(&self) -> bool {
        match &self.framing {
            Decoder::Sse(sse) => sse.overflowed(),
            Decoder::Ndjson(lines) => lines.overflowed,
        }
    }

    /// Feeds a chunk; returns the payloads it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<String> {
        match &mut self.framing {
            Decoder::Sse(sse) => sse.push(chunk).into_iter().map(|e| e.data).collect(),
            Decoder::Ndjson(lines) => {
                let mut out = Vec::new();
                lines.push(chunk, |line| ndjson_line(line, &mut out));
                out
            }
        }
    }

    /// Ends the stream: a final line without its newline and an event without its blank line
    /// are still delivered.
    pub fn finish(&mut self) -> Vec<String> {
        match &mut self.framing {
            Decoder::Sse(sse) => sse.finish().into_iter().map(|e| e.data).collect(),
            Decoder::Ndjson(lines) => {
                let mut out = Vec::new();
                lines.finish(|line| ndjson_line(line, &mut out));
                out
            }
        }
    }
}

fn ndjson_line(line: &[u8], out: &mut Vec<String>) {
    let line = String::from_utf8_lossy(line);
    if !line.trim().is_empty() {
        out.push(line.into_owned());
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode(framing: Framing, bytes: &[u8], cuts: &[usize]) -> Vec<String> {
        let mut dec = FrameDecoder::new(framing);
        let mut out = Vec::new();
        let mut start = 0;
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        for cut in cuts {
            out.extend(dec.push(&bytes[start..cut]));
            start = cut;
        }
        out.extend(dec.push(&bytes[start..]));
        out.extend(dec.finish());
        out
    }

    fn payload() -> impl Strategy<Value = String> {
        // JSON-ish text without newlines, with multi-byte characters so cuts split code points.
        "[a-z0-9{}\":, é€😀\\[\\]]{1,40}".prop_filter("not blank", |s| !s.trim().is_empty())
    }

    proptest! {
        #[test]
        fn sse_survives_any_chunking(
            payloads in proptest::collection::vec(payload(), 1..8),
            cuts in proptest::collection::vec(any::<usize>(), 0..12),
            crlf in any::<bool>(),
            terminated in any::<bool>(),
        ) {
            let nl = if crlf { "\r\n" } else { "\n" };
            let mut wire = String::from(": keepalive");
            wire.push_str(nl);
            wire.push_str(nl);
            for p in &payloads {
                wire.push_str(&format!("event: x{nl}data: {p}{nl}{nl}"));
            }
            if !terminated {
                // The stream closes without the blank line (or even the newline) of the last event.
                let trimmed = wire.trim_end_matches(['\r', '\n']).len();
                wire.truncate(trimmed);
            }
            prop_assert_eq!(decode(Framing::Sse, wire.as_bytes(), &cuts), payloads);
        }

        #[test]
        fn ndjson_survives_any_chunking(
            payloads in proptest::collection::vec(payload(), 1..8),
            cuts in proptest::collection::vec(any::<usize>(), 0..12),
            terminated in any::<bool>(),
        ) {
            let mut wire = payloads.join("\n");
            if terminated {
                wire.push('\n');
            }
            prop_assert_eq!(decode(Framing::Ndjson, wire.as_bytes(), &cuts), payloads);
        }
    }

    #[test]
    fn endless_line_overflows_instead_of_growing() {
        let mut dec = FrameDecoder::new(Framing::Ndjson);
        let chunk = vec![b'x'; 1024 * 1024];
        for _ in 0..9 {
            assert!(dec.push(&chunk).is_empty());
        }
        assert!(dec.overflowed());
    }

    #[test]
    fn multi_line_sse_data_is_joined() {
        let mut dec = FrameDecoder::new(Framing::Sse);
        assert_eq!(dec.push(b"data: a\ndata: b\n\n"), vec!["a\nb".to_owned()]);
    }

    #[test]
    fn a_character_split_across_pushes_comes_out_whole() {
        for text in ["caf\u{e9}", "go \u{1f680}", "\u{20ac}\u{1f600}\u{e9}"] {
            let wire = format!("event: note\nid: 1\ndata: {text}\n\n");
            let bytes = wire.as_bytes();
            // Every cut, including those inside the multi-byte characters.
            for cut in 0..=bytes.len() {
                let mut sse = SseDecoder::new();
                let mut events = sse.push(&bytes[..cut]);
                events.extend(sse.push(&bytes[cut..]));
                assert_eq!(events.len(), 1, "cut at {cut}");
                assert_eq!(events[0].data, text, "cut at {cut}");
                let mut ndjson = FrameDecoder::new(Framing::Ndjson);
                let mut lines = ndjson.push(&text.as_bytes()[..cut.min(text.len())]);
                lines.extend(ndjson.push(&text.as_bytes()[cut.min(text.len())..]));
                lines.extend(ndjson.push(b"\n"));
                assert_eq!(lines, vec![text.to_owned()], "cut at {cut}");
            }
        }
    }

    #[test]
    fn sse_fields_follow_the_format() {
        let mut sse = SseDecoder::new();
        let wire = "\u{feff}: a comment\n\
                    event: finding.created\nid: 7\nretry: 100\nunknown: x\ndata:{\"a\":\ndata:  1}\n\n\
                    event: lonely\nid: 8\n\n\
                    data\nevent:\nid: bad\0id\n\n";
        let events = sse.push(wire.as_bytes());
        assert_eq!(
            events,
            vec![
                SseEvent {
                    event: Some("finding.created".to_owned()),
                    id: Some("7".to_owned()),
                    // One space after the colon is dropped, the rest is data.
                    data: "{\"a\":\n 1}".to_owned(),
                },
                // No data: nothing is dispatched for `lonely`. A field name alone has an empty
                // value; an empty type is the default one; an id with NUL is ignored.
                SseEvent {
                    event: None,
                    id: None,
                    data: String::new(),
                },
            ]
        );
        assert_eq!(events[0].event_type(), "finding.created");
        assert_eq!(events[1].event_type(), "message");
        assert!(sse.finish().is_empty());
        assert!(!sse.overflowed());
    }

    #[test]
    fn endless_event_data_overflows_instead_of_growing() {
        let mut sse = SseDecoder::new();
        let line = format!("data: {}\n", "x".repeat(1024 * 1024));
        for _ in 0..9 {
            assert!(sse.push(line.as_bytes()).is_empty());
        }
        assert!(sse.overflowed());
    }

    /// An event and how it is written: optional `event:` and `id:`, one or more `data:` lines.
    fn sse_event() -> impl Strategy<Value = SseEvent> {
        (
            proptest::option::of("[a-z.]{1,12}"),
            proptest::option::of("[0-9]{1,6}"),
            proptest::collection::vec("[a-z0-9{}\":, é€😀]{0,20}", 1..4),
        )
            .prop_map(|(event, id, data)| SseEvent {
                event,
                id,
                data: data.join("\n"),
            })
    }

    proptest! {
        #[test]
        fn sse_events_survive_any_chunking_and_line_ends(
            events in proptest::collection::vec(sse_event(), 1..6),
            cuts in proptest::collection::vec(any::<usize>(), 0..12),
            line_end in prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
        ) {
            let nl = line_end;
            let mut wire = format!(": keepalive{nl}{nl}");
            for event in &events {
                if let Some(name) = &event.event {
                    wire.push_str(&format!("event: {name}{nl}"));
                }
                if let Some(id) = &event.id {
                    wire.push_str(&format!("id:{id}{nl}"));
                }
                for line in event.data.split('\n') {
                    wire.push_str(&format!("data: {line}{nl}"));
                }
                wire.push_str(nl);
            }
            let bytes = wire.as_bytes();
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut sse = SseDecoder::new();
            let mut decoded = Vec::new();
            let mut start = 0;
            for cut in cuts {
                decoded.extend(sse.push(&bytes[start..cut]));
                start = cut;
            }
            decoded.extend(sse.push(&bytes[start..]));
            decoded.extend(sse.finish());
            prop_assert_eq!(decoded, events);
        }
    }
}
