//! The ollama stream parser (framing, chunk decoder, assembler) on arbitrary bytes in arbitrary chunks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pulse_model_runner::provider::{Protocol, parse_stream_chunks};

fuzz_target!(|data: &[u8]| {
    let chunks = pulse_fuzz::chunks(data);
    let _ = parse_stream_chunks(Protocol::Ollama, &chunks, &mut |_| {});
});
