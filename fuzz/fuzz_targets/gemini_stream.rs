//! The gemini stream parser production runs (framing, chunk decoder, assembler) on arbitrary bytes
//! in arbitrary chunks, fed the way a provider call feeds a response body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pulse_providers::Protocol;

fuzz_target!(|data: &[u8]| pulse_fuzz::drive(Protocol::Gemini, data));
