//! Gemini generateContent wire shapes, and how a Gemini request names its model and action.
//!
//! Invariants the official clients rely on:
//! - every function call part carries a `thoughtSignature` that is base64 (clients decode it to
//!   bytes); it is derived from the call id alone, so the same call always has the same
//!   signature, and it uses only characters the standard and URL-safe alphabets share, without
//!   padding, so a client that decodes and re-encodes it sends back the same text;
//! - every chunk of one answer carries the same `responseId`, unique per request;
//! - the model path segment may arrive percent-encoded (`sim%3Adiligent:generateContent`).

use serde_json::{Value, json};

use super::{Answering, Rendered, SimUsage, Turn, pieces};

/// What a Gemini request asks for, from the last segment of its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    Generate,
    StreamGenerate,
    /// An action the simulator does not serve (e.g. `countTokens`).
    Other(String),
}

/// The model and action of `models/<model>:<action>`, percent-decoded (a `sim:` model has colons
/// of its own, so the action is after the last one).
pub(crate) fn model_and_action(path: &str) -> (String, Action) {
    let last = path.rsplit('/').next().unwrap_or_default();
    let decoded = percent_decode(last);
    let (model, action) = decoded.rsplit_once(':').unwrap_or((decoded.as_str(), ""));
    let action = match action {
        "generateContent" => Action::Generate,
        "streamGenerateContent" => Action::StreamGenerate,
        other => Action::Other(other.to_owned()),
    };
    (model.to_owned(), action)
}

/// Decodes `%XX` escapes; a malformed escape is kept as it is, and bytes that are not UTF-8
/// become U+FFFD.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `thoughtSignature` the simulator gives the call `call_id`: base64 of the call's own
/// opaque bytes (lowercase hex text, padded to whole 3-byte groups). Base64 of hex digits never
/// yields `+` or `/`, and whole groups need no `=`.
pub fn thought_signature(call_id: &str) -> String {
    let mut hex: String = format!("pulse-sim-thought:{call_id}")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect();
    while hex.len() % 3 != 0 {
        hex.push('0');
    }
    base64(hex.as_bytes())
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let n = group
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= group.len() {
                let index = (n >> (18 - 6 * i)) & 0x3f;
                out.push(char::from(ALPHABET[index as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The `google.rpc.Code` name Gemini puts in an error's `status` for an HTTP status; other
/// statuses keep the simulator's own code, uppercased.
pub(crate) fn rpc_status(http: u16, code: &str) -> String {
    let name = match http {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        500 => "INTERNAL",
        501 => "UNIMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => return code.to_uppercase(),
    };
    name.to_owned()
}

/// `cachedContentTokenCount` is part of `promptTokenCount` and present only on a cache hit, as
/// Gemini's implicit caching reports it.
fn usage_json(u: SimUsage) -> Value {
    let mut usage = json!({"promptTokenCount": u.input_tokens,
                           "candidatesTokenCount": u.output_tokens,
                           "totalTokenCount": u.input_tokens + u.output_tokens});
    if u.cached_input_tokens > 0 {
        usage["cachedContentTokenCount"] = json!(u.cached_input_tokens);
    }
    usage
}

fn call_parts(turn: &Turn, ids: &[String]) -> Vec<Value> {
    turn.tool_calls
        .iter()
        .zip(ids)
        .map(|(c, id)| {
            json!({"functionCall": {"id": id, "name": c.name, "args": c.arguments},
                   "thoughtSignature": thought_signature(id)})
        })
        .collect()
}

fn response(
    answer: &Answering<'_>,
    parts: Vec<Value>,
    finish: Option<&str>,
    usage: Option<SimUsage>,
) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(f) = finish {
        candidate["finishReason"] = json!(f);
    }
    let mut out = json!({"candidates": [candidate], "modelVersion": answer.model,
                         "responseId": format!("sim-{}", answer.request_no)});
    if let Some(u) = usage {
        out["usageMetadata"] = usage_json(u);
    }
    out
}

pub(crate) fn full(turn: &Turn, ids: &[String], usage: SimUsage, answer: &Answering<'_>) -> Value {
    let mut parts = Vec::new();
    if let Some(r) = &turn.reasoning {
        parts.push(json!({"text": r, "thought": true}));
    }
    if !turn.text.is_empty() {
        parts.push(json!({"text": turn.text}));
    }
    parts.extend(call_parts(turn, ids));
    response(answer, parts, Some("STOP"), Some(usage))
}

pub(crate) fn frames(
    turn: &Turn,
    ids: &[String],
    usage: SimUsage,
    answer: &Answering<'_>,
) -> Rendered {
    let mut frames = Vec::new();
    if let Some(r) = &turn.reasoning {
        frames.push(format!(
            "data: {}\r\n\r\n",
            response(
                answer,
                vec![json!({"text": r, "thought": true})],
                None,
                None
            )
        ));
    }
    for p in pieces(&turn.text) {
        frames.push(format!(
            "data: {}\r\n\r\n",
            response(answer, vec![json!({"text": p})], None, None)
        ));
    }
    frames.push(format!(
        "data: {}\r\n\r\n",
        response(answer, call_parts(turn, ids), Some("STOP"), Some(usage))
    ));
    // Gemini streams have no end marker.
    Rendered {
        frames,
        terminal: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(&[0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff]), "+vv8/f7/");
    }

    #[test]
    fn thought_signatures_are_stable_unpadded_and_alphabet_neutral() {
        for id in ["call_1_0", "call_10_0", "call_105_0", "call-db1", "ünï", ""] {
            let sig = thought_signature(id);
            assert_eq!(sig, thought_signature(id));
            assert_eq!(sig.len() % 4, 0, "{sig}");
            assert!(sig.bytes().all(|b| b.is_ascii_alphanumeric()), "{sig}");
        }
        assert_ne!(thought_signature("call_1_0"), thought_signature("call_2_0"));
    }

    #[test]
    fn model_segments_are_percent_decoded() {
        let cases = [
            (
                "/v1beta/models/sim:diligent:generateContent",
                "sim:diligent",
            ),
            (
                "/v1beta/models/sim%3Adiligent:generateContent",
                "sim:diligent",
            ),
            (
                "/v1/models/sim%3adiligent%3AgenerateContent",
                "sim:diligent",
            ),
            (
                "/v1beta/models/gemini-2.5-flash:generateContent",
                "gemini-2.5-flash",
            ),
        ];
        for (path, model) in cases {
            assert_eq!(
                model_and_action(path),
                (model.to_owned(), Action::Generate),
                "{path}"
            );
        }
        assert_eq!(
            model_and_action("/v1beta/models/sim%3Astall:streamGenerateContent"),
            ("sim:stall".to_owned(), Action::StreamGenerate)
        );
        assert_eq!(
            model_and_action("/v1beta/models/m:countTokens"),
            ("m".to_owned(), Action::Other("countTokens".to_owned()))
        );
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("a%zz%4"), "a%zz%4");
        assert_eq!(percent_decode("%C3%BC"), "ü");
    }
}
