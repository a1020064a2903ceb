//! Byte streams to payloads: SSE `data:` events and NDJSON lines, for chunks split anywhere.

/// How a streaming response frames its payloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Server-sent events: `data:` lines, events separated by a blank line.
    Sse,
    /// One JSON document per line.
    Ndjson,
}

/// A line longer than this is not a provider chunk: the stream is treated as malformed.
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// Turns arbitrary byte chunks into payload strings.
#[derive(Debug)]
pub struct FrameDecoder {
    framing: Framing,
    buf: Vec<u8>,
    overflowed: bool,
    /// `data:` lines of the SSE event being read.
    data: Vec<String>,
}

impl FrameDecoder {
    pub fn new(framing: Framing) -> Self {
        Self {
            framing,
            buf: Vec::new(),
            overflowed: false,
            data: Vec::new(),
        }
    }

    /// True once a line grew past [`MAX_LINE_BYTES`]; its bytes were dropped.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Feeds a chunk; returns the payloads it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line[..line.len() - 1]);
            let line = line.strip_suffix('\r').unwrap_or(&line);
            self.line(line, &mut out);
        }
        if self.buf.len() > MAX_LINE_BYTES {
            self.buf.clear();
            self.overflowed = true;
        }
        out
    }

    /// Ends the stream: a final line without its newline and an event without its blank line
    /// are still delivered.
    pub fn finish(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            let line = String::from_utf8_lossy(&rest);
            let line = line.strip_suffix('\r').unwrap_or(&line);
            self.line(line, &mut out);
        }
        self.dispatch(&mut out);
        out
    }

    fn line(&mut self, line: &str, out: &mut Vec<String>) {
        match self.framing {
            Framing::Ndjson => {
                if !line.trim().is_empty() {
                    out.push(line.to_owned());
                }
            }
            Framing::Sse => {
                if line.is_empty() {
                    self.dispatch(out);
                } else if let Some(value) = line.strip_prefix("data:") {
                    self.data
                        .push(value.strip_prefix(' ').unwrap_or(value).to_owned());
                }
                // `event:`, `id:`, `retry:` and `:` comments carry nothing the payloads lack.
            }
        }
    }

    fn dispatch(&mut self, out: &mut Vec<String>) {
        if !self.data.is_empty() {
            out.push(self.data.join("\n"));
            self.data.clear();
        }
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
}
