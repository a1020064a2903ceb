//! Google Gemini `generateContent` / `streamGenerateContent`.

use serde_json::{Map, Value, json};

use crate::assembler::Delta;
use crate::failure::ProviderFailure;
use crate::types::{ChatRequest, Message, StopReason, ToolChoice, tool_name_for};
use crate::{ProviderConfig, WireRequest, embedded_error, parse_payload};

pub(crate) fn build(
    config: &ProviderConfig,
    req: &ChatRequest,
) -> Result<WireRequest, ProviderFailure> {
    let mut system = Vec::new();
    let mut contents: Vec<(String, Vec<Value>)> = Vec::new();
    let mut push = |role: &str, part: Value| match contents.last_mut() {
        Some((last, parts)) if last == role => parts.push(part),
        _ => contents.push((role.to_owned(), vec![part])),
    };
    for (at, m) in req.messages.iter().enumerate() {
        match m {
            Message::System { content } => system.push(content.clone()),
            Message::User { content } => push("user", json!({"text": content})),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                if !content.is_empty() {
                    push("model", json!({"text": content}));
                }
                for c in tool_calls {
                    let mut part =
                        json!({"functionCall": {"id": c.id, "name": c.name, "args": c.arguments}});
                    // Thinking models refuse a function call returned without its signature.
                    if let Some(sig) = &c.thought_signature {
                        part["thoughtSignature"] = json!(sig);
                    }
                    push("model", part);
                }
            }
            Message::Tool(r) => {
                let name = tool_name_for(&req.messages[..at], &r.call_id).unwrap_or_default();
                let response = if r.is_error {
                    json!({"error": r.content})
                } else {
                    json!({"result": r.content})
                };
                push(
                    "user",
                    json!({"functionResponse": {"id": r.call_id, "name": name, "response": response}}),
                );
            }
        }
    }
    let contents: Vec<Value> = contents
        .into_iter()
        .map(|(role, parts)| json!({"role": role, "parts": parts}))
        .collect();
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(contents));
    if !system.is_empty() {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": system.join("\n\n")}]}),
        );
    }
    let tools = req.wire_tools();
    if !tools.is_empty() {
        let decls: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({"name": t.name, "description": t.description,
                       "parameters": strip_additional_properties(&t.parameters)})
            })
            .collect();
        body.insert("tools".into(), json!([{"functionDeclarations": decls}]));
        if req.tool_choice == ToolChoice::Required {
            body.insert(
                "toolConfig".into(),
                json!({"functionCallingConfig": {"mode": "ANY"}}),
            );
        }
    }
    let mut generation = Map::new();
    if let Some(max) = req.max_output_tokens {
        generation.insert("maxOutputTokens".into(), json!(max));
    }
    if let Some(t) = req.temperature {
        generation.insert("temperature".into(), json!(t));
    }
    if !generation.is_empty() {
        body.insert("generationConfig".into(), Value::Object(generation));
    }
    let url = if req.stream {
        format!(
            "{}/models/{}:streamGenerateContent?alt=sse",
            config.base_url, req.model
        )
    } else {
        format!("{}/models/{}:generateContent", config.base_url, req.model)
    };
    let headers = config
        .api_key
        .as_ref()
        .filter(|k| !k.is_empty())
        .map(|k| ("x-goog-api-key", k.clone()))
        .into_iter()
        .collect();
    Ok(WireRequest {
        url,
        headers,
        body: Value::Object(body),
    })
}

/// Gemini rejects `additionalProperties` in function declarations: drop it at every depth.
/// Only this transport does so; the tool's schema is unchanged for every other provider.
pub fn strip_additional_properties(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| k.as_str() != "additionalProperties")
                .map(|(k, v)| (k.clone(), strip_additional_properties(v)))
                .collect(),
        ),
        Value::Array(items) => {
            Value::Array(items.iter().map(strip_additional_properties).collect())
        }
        other => other.clone(),
    }
}

fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "STOP" => StopReason::EndTurn,
        "MAX_TOKENS" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_lowercase()),
    }
}

fn decode(body: &Value) -> Result<Vec<Delta>, ProviderFailure> {
    if let Some(failure) = embedded_error(body) {
        return Err(failure);
    }
    let mut out = Vec::new();
    let candidate = body.get("candidates").and_then(|c| c.get(0));
    let parts = candidate
        .and_then(|c| c.get("content"))
        .and_then(|c| c.get("parts"))
        .and_then(Value::as_array);
    for part in parts.into_iter().flatten() {
        if let Some(call) = part.get("functionCall") {
            let Some(name) = call.get("name").and_then(Value::as_str) else {
                return Err(ProviderFailure::malformed("a function call has no name"));
            };
            out.push(Delta::ToolWhole {
                id: call.get("id").and_then(Value::as_str).map(str::to_owned),
                name: name.to_owned(),
                arguments: call.get("args").cloned().unwrap_or_else(|| json!({})),
                thought_signature: part
                    .get("thoughtSignature")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            });
        } else if let Some(text) = part.get("text").and_then(Value::as_str) {
            if part.get("thought").and_then(Value::as_bool) == Some(true) {
                out.push(Delta::Reasoning(text.to_owned()));
            } else {
                out.push(Delta::Text(text.to_owned()));
            }
        }
    }
    if let Some(u) = body.get("usageMetadata").filter(|u| u.is_object()) {
        out.push(Delta::Usage {
            input: u.get("promptTokenCount").and_then(Value::as_u64),
            output: u.get("candidatesTokenCount").and_then(Value::as_u64),
            // Part of `promptTokenCount` (implicit or explicit context caching).
            cached: u.get("cachedContentTokenCount").and_then(Value::as_u64),
            cache_write: None,
            uncached: None,
        });
    }
    if let Some(r) = candidate
        .and_then(|c| c.get("finishReason"))
        .and_then(Value::as_str)
    {
        out.push(Delta::Stop(stop_reason(r)));
        // Gemini streams have no end marker: the chunk with a finish reason is the last.
        out.push(Delta::Terminal);
    }
    Ok(out)
}

pub(crate) fn decode_response(body: &Value) -> Result<Vec<Delta>, ProviderFailure> {
    if body.get("candidates").is_none() && body.get("error").is_none() {
        return Err(ProviderFailure::malformed("the response has no candidates"));
    }
    let mut out = decode(body)?;
    if !out.contains(&Delta::Terminal) {
        out.push(Delta::Terminal);
    }
    Ok(out)
}

pub(crate) fn decode_chunk(payload: &str) -> Result<Vec<Delta>, ProviderFailure> {
    decode(&parse_payload(payload)?)
}
