//! NDJSON framing on arbitrary bytes in arbitrary chunks: no panic, one non-blank line per
//! payload.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pulse_providers::framing::{FrameDecoder, Framing};

fuzz_target!(|data: &[u8]| {
    let mut decoder = FrameDecoder::new(Framing::Ndjson);
    let mut payloads = Vec::new();
    for chunk in pulse_fuzz::chunks(data) {
        payloads.extend(decoder.push(chunk));
    }
    payloads.extend(decoder.finish());
    // One NDJSON payload is one line.
    assert!(payloads.iter().all(|p| !p.contains('\n') && !p.trim().is_empty()));
});
