//! Container log tails. Without a TTY the engine multiplexes stdout and stderr into frames with
//! an 8-byte header: `[stream, 0, 0, 0, len_be_u32]` then `len` bytes. With a TTY the stream is
//! raw bytes. [`LogDemuxer`] accepts bytes in arbitrary chunks.

use std::collections::VecDeque;

use serde::Serialize;

use super::model::bounded;

/// Longest single line kept, in bytes; longer lines are cut (at a char boundary).
pub const MAX_LINE_BYTES: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogStream {
    Stdin,
    Stdout,
    Stderr,
    /// TTY containers: one undifferentiated stream.
    Console,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogLine {
    pub stream: LogStream,
    pub text: String,
}

/// The last lines of a container's output.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LogTail {
    pub lines: Vec<LogLine>,
    /// Output was dropped to stay within the line or byte bounds.
    pub truncated: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Undecided,
    Multiplexed,
    Raw,
}

/// Incremental demultiplexer that keeps only the last `max_lines` complete lines.
#[derive(Debug)]
pub struct LogDemuxer {
    framing: Framing,
    pending: Vec<u8>,
    /// Bytes left in the current frame and its stream.
    frame_left: usize,
    frame_stream: LogStream,
    partial_out: Vec<u8>,
    partial_err: Vec<u8>,
    partial_other: Vec<u8>,
    lines: VecDeque<LogLine>,
    max_lines: usize,
    truncated: bool,
}

impl LogDemuxer {
    /// `tty`: `Some(true)` raw, `Some(false)` multiplexed, `None` decide from the first bytes.
    pub fn new(tty: Option<bool>, max_lines: usize) -> Self {
        Self {
            framing: match tty {
                Some(true) => Framing::Raw,
                Some(false) => Framing::Multiplexed,
                None => Framing::Undecided,
            },
            pending: Vec::new(),
            frame_left: 0,
            frame_stream: LogStream::Stdout,
            partial_out: Vec::new(),
            partial_err: Vec::new(),
            partial_other: Vec::new(),
            lines: VecDeque::new(),
            max_lines,
            truncated: false,
        }
    }

    pub fn push(&mut self, mut chunk: &[u8]) {
        if self.framing == Framing::Undecided {
            self.pending.extend_from_slice(chunk);
            if self.pending.len() < 8 {
                return;
            }
            let header = &self.pending[..8];
            self.framing = if header[0] <= 2 && header[1..4] == [0, 0, 0] {
                Framing::Multiplexed
            } else {
                Framing::Raw
            };
            let buffered = std::mem::take(&mut self.pending);
            self.push(&buffered);
            return;
        }
        if self.framing == Framing::Raw {
            self.append(LogStream::Console, chunk);
            return;
        }
        while !chunk.is_empty() {
            if self.frame_left > 0 {
                let take = self.frame_left.min(chunk.len());
                let (data, rest) = chunk.split_at(take);
                self.append(self.frame_stream, data);
                self.frame_left -= take;
                chunk = rest;
                continue;
            }
            // Collect a full 8-byte header, possibly across chunks.
            let need = 8 - self.pending.len();
            let take = need.min(chunk.len());
            self.pending.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
            if self.pending.len() < 8 {
                return;
            }
            let header: [u8; 8] = match self.pending[..8].try_into() {
                Ok(h) => h,
                Err(_) => return,
            };
            self.pending.clear();
            self.frame_stream = match header[0] {
                0 => LogStream::Stdin,
                1 => LogStream::Stdout,
                _ => LogStream::Stderr,
            };
            self.frame_left =
                u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
        }
    }

    fn partial(&mut self, stream: LogStream) -> &mut Vec<u8> {
        match stream {
            LogStream::Stdout => &mut self.partial_out,
            LogStream::Stderr => &mut self.partial_err,
            LogStream::Stdin | LogStream::Console => &mut self.partial_other,
        }
    }

    fn append(&mut self, stream: LogStream, data: &[u8]) {
        let mut rest = data;
        while let Some(pos) = rest.iter().position(|b| *b == b'\n') {
            let (line, tail) = rest.split_at(pos);
            self.extend_partial(stream, line);
            let bytes = std::mem::take(self.partial(stream));
            self.emit(stream, &bytes);
            rest = &tail[1..];
        }
        self.extend_partial(stream, rest);
    }

    fn extend_partial(&mut self, stream: LogStream, data: &[u8]) {
        let buf = self.partial(stream);
        let room = MAX_LINE_BYTES.saturating_sub(buf.len());
        let cut = data.len() > room;
        buf.extend_from_slice(&data[..room.min(data.len())]);
        if cut {
            self.truncated = true;
        }
    }

    fn emit(&mut self, stream: LogStream, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let text = bounded(text.trim_end_matches('\r'), MAX_LINE_BYTES);
        self.lines.push_back(LogLine { stream, text });
        while self.lines.len() > self.max_lines {
            self.lines.pop_front();
            self.truncated = true;
        }
    }

    /// Mark that the caller stopped reading early (byte bound).
    pub fn mark_truncated(&mut self) {
        self.truncated = true;
    }

    /// Flushes unterminated lines and returns the tail.
    pub fn finish(mut self) -> LogTail {
        if self.framing == Framing::Undecided && !self.pending.is_empty() {
            // Fewer than 8 bytes in total: cannot be a frame, so it is raw output.
            let pending = std::mem::take(&mut self.pending);
            self.framing = Framing::Raw;
            self.append(LogStream::Console, &pending);
        }
        if self.frame_left > 0 || !self.pending.is_empty() {
            self.truncated = true;
        }
        for stream in [LogStream::Stdout, LogStream::Stderr, LogStream::Console] {
            let bytes = std::mem::take(self.partial(stream));
            if !bytes.is_empty() {
                self.emit(stream, &bytes);
            }
        }
        LogTail {
            lines: self.lines.into_iter().collect(),
            truncated: self.truncated,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(stream: u8, text: &str) -> Vec<u8> {
        let mut out = vec![stream, 0, 0, 0];
        out.extend_from_slice(&(text.len() as u32).to_be_bytes());
        out.extend_from_slice(text.as_bytes());
        out
    }

    fn lines(tail: &LogTail) -> Vec<(LogStream, &str)> {
        tail.lines
            .iter()
            .map(|l| (l.stream, l.text.as_str()))
            .collect()
    }

    #[test]
    fn demuxes_frames_split_at_every_byte() {
        let mut bytes = frame(1, "hello\n");
        bytes.extend(frame(2, "oops\n"));
        bytes.extend(frame(1, "partial "));
        bytes.extend(frame(1, "line\n"));
        let mut demux = LogDemuxer::new(None, 100);
        for b in &bytes {
            demux.push(std::slice::from_ref(b));
        }
        let tail = demux.finish();
        assert_eq!(
            lines(&tail),
            vec![
                (LogStream::Stdout, "hello"),
                (LogStream::Stderr, "oops"),
                (LogStream::Stdout, "partial line"),
            ]
        );
        assert!(!tail.truncated);
    }

    #[test]
    fn keeps_only_the_last_lines() {
        let mut demux = LogDemuxer::new(Some(false), 2);
        for i in 0..5 {
            demux.push(&frame(1, &format!("line {i}\n")));
        }
        let tail = demux.finish();
        assert_eq!(
            lines(&tail),
            vec![(LogStream::Stdout, "line 3"), (LogStream::Stdout, "line 4")]
        );
        assert!(tail.truncated);
    }

    #[test]
    fn raw_tty_stream_is_detected() {
        let mut demux = LogDemuxer::new(None, 10);
        demux.push(b"plain tty output\r\nsecond\n");
        let tail = demux.finish();
        assert_eq!(
            lines(&tail),
            vec![
                (LogStream::Console, "plain tty output"),
                (LogStream::Console, "second")
            ]
        );
    }

    #[test]
    fn a_truncated_frame_is_flagged_not_a_panic() {
        let mut bytes = frame(1, "complete\n");
        bytes.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 50, b'a', b'b']);
        let mut demux = LogDemuxer::new(None, 10);
        demux.push(&bytes);
        let tail = demux.finish();
        assert!(tail.truncated);
        assert_eq!(tail.lines[0].text, "complete");
        assert_eq!(tail.lines[1].text, "ab");
    }

    #[test]
    fn overlong_lines_are_cut() {
        let long = "x".repeat(MAX_LINE_BYTES * 2);
        let mut demux = LogDemuxer::new(Some(true), 10);
        demux.push(long.as_bytes());
        demux.push(b"\n");
        let tail = demux.finish();
        assert_eq!(tail.lines[0].text.len(), MAX_LINE_BYTES);
        assert!(tail.truncated);
    }
}
