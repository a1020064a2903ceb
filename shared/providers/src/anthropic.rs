//! Anthropic Messages API.
//!
//! Prompt caching: Anthropic caches only up to a `cache_control` breakpoint, and its prompt is
//! laid out tools, then system, then messages. Every request marks three breakpoints (of the four
//! allowed): the last tool (the tool schemas), the system prompt, and the last block of the last
//! message. The last one makes a multi-turn run incremental: the next request, which repeats
//! this one and appends to it, reads everything up to here from the cache (Anthropic looks back
//! up to 20 blocks from a breakpoint for an earlier entry). A prefix shorter than the model's
//! minimum is simply not cached; marking it costs nothing.

use serde_json::{Map, Value, json};

use crate::assembler::Delta;
use crate::failure::ProviderFailure;
use crate::types::{ChatRequest, Message, StopReason, ToolChoice};
use crate::{ProviderConfig, WireRequest, embedded_error, parse_payload};

/// Anthropic requires `max_tokens`; used when the request leaves it unset.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The breakpoint marker: the default (five-minute) cache.
fn cache_control() -> Value {
    json!({"type": "ephemeral"})
}

pub(crate) fn build(
    config: &ProviderConfig,
    req: &ChatRequest,
) -> Result<WireRequest, ProviderFailure> {
    let mut system = Vec::new();
    let mut messages: Vec<(String, Vec<Value>)> = Vec::new();
    let mut push = |role: &str, block: Value| match messages.last_mut() {
        // Consecutive same-role turns (for example several tool results) share one message.
        Some((last, blocks)) if last == role => blocks.push(block),
        _ => messages.push((role.to_owned(), vec![block])),
    };
    for m in &req.messages {
        match m {
            Message::System { content } => system.push(content.clone()),
            Message::User { content } => push("user", json!({"type": "text", "text": content})),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                if !content.is_empty() {
                    push("assistant", json!({"type": "text", "text": content}));
                }
                for c in tool_calls {
                    let input = if c.arguments.is_object() {
                        c.arguments.clone()
                    } else {
                        json!({})
                    };
                    push(
                        "assistant",
                        json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                    );
                }
            }
            Message::Tool(r) => push(
                "user",
                json!({"type": "tool_result", "tool_use_id": r.call_id,
                       "content": r.content, "is_error": r.is_error}),
            ),
        }
    }
    if let Some(last) = messages
        .last_mut()
        .and_then(|(_, blocks)| blocks.last_mut())
    {
        last["cache_control"] = cache_control();
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert(
        "max_tokens".into(),
        json!(req.max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
    );
    if !system.is_empty() {
        body.insert(
            "system".into(),
            json!([{"type": "text", "text": system.join("\n\n"), "cache_control": cache_control()}]),
        );
    }
    body.insert("messages".into(), Value::Array(messages));
    let tools = req.wire_tools();
    if !tools.is_empty() {
        let mut tools: Vec<Value> = tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        if let Some(last) = tools.last_mut() {
            last["cache_control"] = cache_control();
        }
        body.insert("tools".into(), Value::Array(tools));
        if req.tool_choice == ToolChoice::Required {
            body.insert("tool_choice".into(), json!({"type": "any"}));
        }
    }
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if req.stream {
        body.insert("stream".into(), json!(true));
    }
    let mut headers = vec![("anthropic-version", config.anthropic_version.clone())];
    if let Some(key) = config.api_key.as_ref().filter(|k| !k.is_empty()) {
        headers.push(("x-api-key", key.clone()));
    }
    Ok(WireRequest {
        url: format!("{}/v1/messages", config.base_url),
        headers,
        body: Value::Object(body),
    })
}

fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "end_turn" | "stop_sequence" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_owned()),
    }
}

/// Anthropic's `input_tokens` is only the part of the prompt after the last cache read or
/// write; the whole prompt is that plus `cache_read_input_tokens` and
/// `cache_creation_input_tokens`, which a stream sends in `message_start` and may repeat in
/// `message_delta`.
fn usage(u: Option<&Value>) -> Option<Delta> {
    let u = u.filter(|u| u.is_object())?;
    let count = |name: &str| u.get(name).and_then(Value::as_u64);
    Some(Delta::Usage {
        input: None,
        output: count("output_tokens"),
        cached: count("cache_read_input_tokens"),
        cache_write: count("cache_creation_input_tokens"),
        uncached: count("input_tokens"),
    })
}

pub(crate) fn decode_response(body: &Value) -> Result<Vec<Delta>, ProviderFailure> {
    if let Some(failure) = embedded_error(body) {
        return Err(failure);
    }
    let blocks = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| ProviderFailure::malformed("the response has no content blocks"))?;
    let mut out = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        let index = i as u64;
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                out.push(Delta::Text(text.to_owned()));
            }
            Some("thinking") => {
                let text = block
                    .get("thinking")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                out.push(Delta::Reasoning(text.to_owned()));
            }
            Some("tool_use") => {
                out.push(Delta::ToolStart {
                    index,
                    id: block.get("id").and_then(Value::as_str).map(str::to_owned),
                    name: block.get("name").and_then(Value::as_str).map(str::to_owned),
                });
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                out.push(Delta::ToolArgs {
                    index,
                    fragment: input.to_string(),
                });
                out.push(Delta::ToolComplete { index });
            }
            _ => {}
        }
    }
    out.extend(usage(body.get("usage")));
    if let Some(r) = body.get("stop_reason").and_then(Value::as_str) {
        out.push(Delta::Stop(stop_reason(r)));
    }
    out.push(Delta::Terminal);
    Ok(out)
}

pub(crate) fn decode_chunk(payload: &str) -> Result<Vec<Delta>, ProviderFailure> {
    let event = parse_payload(payload)?;
    let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
    let mut out = Vec::new();
    match event.get("type").and_then(Value::as_str) {
        Some("error") => {
            return Err(embedded_error(&event).unwrap_or_else(|| {
                ProviderFailure::malformed("the provider sent an error event")
            }));
        }
        Some("message_start") => {
            out.extend(usage(event.get("message").and_then(|m| m.get("usage"))));
        }
        Some("content_block_start") => {
            let block = event.get("content_block");
            match block.and_then(|b| b.get("type")).and_then(Value::as_str) {
                Some("tool_use") => out.push(Delta::ToolStart {
                    index,
                    id: block
                        .and_then(|b| b.get("id"))
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    name: block
                        .and_then(|b| b.get("name"))
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                }),
                Some("text") => {
                    let text = block
                        .and_then(|b| b.get("text"))
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    out.push(Delta::Text(text.to_owned()));
                }
                _ => {}
            }
        }
        Some("content_block_delta") => {
            let delta = event.get("delta");
            let field = |name: &str| {
                delta
                    .and_then(|d| d.get(name))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            match delta.and_then(|d| d.get("type")).and_then(Value::as_str) {
                Some("text_delta") => out.push(Delta::Text(field("text"))),
                Some("thinking_delta") => out.push(Delta::Reasoning(field("thinking"))),
                Some("input_json_delta") => out.push(Delta::ToolArgs {
                    index,
                    fragment: field("partial_json"),
                }),
                _ => {}
            }
        }
        Some("content_block_stop") => out.push(Delta::ToolComplete { index }),
        Some("message_delta") => {
            out.extend(usage(event.get("usage")));
            if let Some(r) = event
                .get("delta")
                .and_then(|d| d.get("stop_reason"))
                .and_then(Value::as_str)
            {
                out.push(Delta::Stop(stop_reason(r)));
            }
        }
        Some("message_stop") => out.push(Delta::Terminal),
        _ => {}
    }
    Ok(out)
}
