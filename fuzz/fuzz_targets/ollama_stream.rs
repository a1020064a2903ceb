//! The ollama stream parser production runs (framing, chunk decoder, assembler) on arbitrary bytes
//! in arbitrary chunks, fed the way a provider call feeds a response body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pulse_providers::{Progress, Protocol, StreamParser};

fuzz_target!(|data: &[u8]| {
    let mut parser = StreamParser::new(Protocol::Ollama);
    for chunk in pulse_fuzz::chunks(data) {
        match parser.push(chunk, &mut |_| {}) {
            Ok(Progress::Continue) => {}
            Ok(Progress::Terminal) => break,
            Err(_) => return,
        }
    }
    let _ = parser.finish(&mut |_| {});
});
