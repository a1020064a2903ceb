//! The providers' model list endpoints, each in its provider's own shape:
//!
//! - OpenAI `GET /v1/models`: `{"object":"list","data":[{"id","object":"model","created","owned_by"}]}`
//! - Anthropic `GET /v1/models` (told apart by its `anthropic-version` header):
//!   `{"data":[{"type":"model","id","display_name","created_at"}],"has_more","first_id","last_id"}`,
//!   paged by `limit` and `after_id`
//! - Gemini `GET /v1beta/models` (or `/v1/models` with a Gemini key):
//!   `{"models":[{"name":"models/..","displayName","inputTokenLimit","supportedGenerationMethods"}]}`,
//!   paged by `pageSize` and `pageToken` (`nextPageToken`)
//! - Ollama `GET /api/tags`:
//!   `{"models":[{"name","model","modified_at","size","digest","details":{..}}]}`
//!
//! The models are the script's ([`super::Script::with_models`]), by default every built-in
//! behaviour's model; [`super::Script::with_list_error`] makes every list answer an error.

use serde_json::{Value, json};
use std::hash::{DefaultHasher, Hash as _, Hasher as _};

use super::SimProtocol;

/// The models a simulator lists when its script names none: the built-in behaviours a route
/// can name.
pub const BEHAVIOUR_MODELS: &[&str] = &[
    "sim:diligent",
    "sim:lazy",
    "sim:empty",
    "sim:looping",
    "sim:malformed",
    "sim:injectable",
    "sim:cold-start",
    "sim:error-401",
    "sim:error-429-then-ok",
    "sim:error-500",
    "sim:error-html-502",
    "sim:stall",
    "sim:truncated",
    "sim:double-report",
    "sim:text-calls-invalid",
];

/// Context window the simulator states for every model.
pub const CONTEXT_WINDOW: u64 = 131_072;

/// The fixed time the simulator's models were "created": 2026-01-01T00:00:00Z.
const CREATED: i64 = 1_767_225_600;

fn query_value<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One page of `models` in `protocol`'s list shape, as asked by `query`.
pub(crate) fn page(protocol: SimProtocol, models: &[String], query: &str) -> Value {
    match protocol {
        SimProtocol::OpenAi => json!({
            "object": "list",
            "data": models.iter().map(|id| json!({
                "id": id,
                "object": "model",
                "created": CREATED,
                "owned_by": "pulse-sim",
            })).collect::<Vec<_>>(),
        }),
        SimProtocol::Ollama => json!({
            "models": models.iter().map(|name| {
                let digest = digest(name);
                json!({
                    "name": name,
                    "model": name,
                    "modified_at": "2026-01-01T00:00:00Z",
                    "size": 4_920_753_328_u64,
                    "digest": digest,
                    "details": {
                        "parent_model": "",
                        "format": "gguf",
                        "family": "sim",
                        "families": ["sim"],
                        "parameter_size": "8.0B",
                        "quantization_level": "Q4_K_M",
                    },
                })
            }).collect::<Vec<_>>(),
        }),
        SimProtocol::Anthropic => {
            let limit = query_value(query, "limit")
                .and_then(|l| l.parse::<usize>().ok())
                .unwrap_or(20)
                .clamp(1, 1000);
            let start = query_value(query, "after_id")
                .map(decode)
                .and_then(|after| models.iter().position(|m| *m == after).map(|i| i + 1))
                .unwrap_or(0);
            let shown: Vec<&String> = models.iter().skip(start).take(limit).collect();
            let has_more = start + shown.len() < models.len();
            json!({
                "data": shown.iter().map(|id| json!({
                    "type": "model",
                    "id": id,
                    "display_name": display_name(id),
                    "created_at": "2026-01-01T00:00:00Z",
                })).collect::<Vec<_>>(),
                "has_more": has_more,
                "first_id": shown.first(),
                "last_id": shown.last(),
            })
        }
        SimProtocol::Gemini => {
            let size = query_value(query, "pageSize")
                .and_then(|l| l.parse::<usize>().ok())
                .unwrap_or(50)
                .clamp(1, 1000);
            let start = query_value(query, "pageToken")
                .map(decode)
                .and_then(|t| t.parse::<usize>().ok())
                .unwrap_or(0);
            let shown: Vec<&String> = models.iter().skip(start).take(size).collect();
            let mut body = json!({
                "models": shown.iter().map(|id| json!({
                    "name": format!("models/{id}"),
                    "baseModelId": id,
                    "version": "001",
                    "displayName": display_name(id),
                    "description": "a model of the provider simulator",
                    "inputTokenLimit": CONTEXT_WINDOW,
                    "outputTokenLimit": 8192,
                    "supportedGenerationMethods": ["generateContent", "countTokens"],
                })).collect::<Vec<_>>(),
            });
            if start + shown.len() < models.len() {
                body["nextPageToken"] = json!((start + shown.len()).to_string());
            }
            body
        }
    }
}

fn display_name(id: &str) -> String {
    format!("Simulated {id}")
}

/// 64 hex digits that stand for `name`'s blob digest (Ollama shows a sha256).
fn digest(name: &str) -> String {
    (0..4_u8)
        .map(|part| {
            let mut hasher = DefaultHasher::new();
            (part, name).hash(&mut hasher);
            format!("{:016x}", hasher.finish())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn models(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("m{i}")).collect()
    }

    #[test]
    fn anthropic_and_gemini_lists_page() {
        let all = models(5);
        let first = page(SimProtocol::Anthropic, &all, "limit=2");
        assert_eq!(first["has_more"], true);
        assert_eq!(first["last_id"], "m1");
        let last = page(SimProtocol::Anthropic, &all, "limit=2&after_id=m3");
        assert_eq!(last["data"].as_array().unwrap().len(), 1);
        assert_eq!(last["has_more"], false);
        let gemini = page(SimProtocol::Gemini, &all, "pageSize=3");
        assert_eq!(gemini["nextPageToken"], "3");
        assert_eq!(gemini["models"][0]["name"], "models/m0");
        let rest = page(SimProtocol::Gemini, &all, "pageSize=3&pageToken=3");
        assert!(rest.get("nextPageToken").is_none());
        assert_eq!(rest["models"].as_array().unwrap().len(), 2);
        assert_eq!(decode("a%2Bb%3D"), "a+b=");
    }
}
