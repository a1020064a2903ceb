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
