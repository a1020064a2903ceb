//! Shared input shaping for the stream-parser fuzz targets.

/// Splits fuzz input into chunks: the first byte says how many cuts (0-15), the next bytes give
/// each chunk's length, the rest is the stream. Chunks therefore end anywhere, including inside
/// a UTF-8 code point, a line ending or a JSON token.
pub fn chunks(data: &[u8]) -> Vec<&[u8]> {
    let Some((&head, rest)) = data.split_first() else {
        return vec![data];
    };
    let cuts = usize::from(head % 16).min(rest.len());
    let (sizes, mut stream) = rest.split_at(cuts);
    let mut out = Vec::with_capacity(cuts + 1);
    for &size in sizes {
        let n = usize::from(size).min(stream.len());
        let (chunk, tail) = stream.split_at(n);
        out.push(chunk);
        stream = tail;
    }
    out.push(stream);
    out
}

/// Feeds `data`, cut by [`chunks`], to the stream parser production runs for `protocol`, the way
/// a provider call feeds a response body: chunk by chunk until the parser reports the end or an
/// error, then `finish`.
pub fn drive(protocol: pulse_providers::Protocol, data: &[u8]) {
    use pulse_providers::{Progress, StreamParser};
    let mut parser = StreamParser::new(protocol);
    for chunk in chunks(data) {
        match parser.push(chunk, &mut |_| {}) {
            Ok(Progress::Continue) => {}
            Ok(Progress::Terminal) => break,
            Err(_) => return,
        }
    }
    let _ = parser.finish(&mut |_| {});
}
