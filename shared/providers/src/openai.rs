//! OpenAI-compatible chat completions (OpenAI, OpenRouter, DeepSeek, Groq, LM Studio, ...).

use serde_json::{Map, Value, json};

use crate::assembler::Delta;
use crate::failure::ProviderFailure;
use crate::types::{ChatRequest, Message, StopReason, ToolChoice};
use crate::{ProviderConfig, WireRequest, bearer, embedded_error, parse_payload};

pub(crate) fn build(
    config: &ProviderConfig,
    req: &ChatRequest,
) -> Result<WireRequest, ProviderFailure> {
    let messages: Vec<Value> = req.messages.iter().map(message).collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("messages".into(), Value::Array(messages));
    let tools = req.wire_tools();
    if !tools.is_empty() {
        let tools: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        // Sent explicitly for `auto` too: some OpenAI-compatible local servers
        // (llama-cpp-python's) ignore `tools` unless `tool_choice` is present.
        let choice = if req.tool_choice == ToolChoice::Required {
            "required"
        } else {
            "auto"
        };
        body.insert("tool_choice".into(), json!(choice));
    }
    if let Some(max) = req.max_output_tokens {
        body.insert("max_tokens".into(), json!(max));
    }
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    body.insert("stream".into(), json!(req.stream));
    if req.stream {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(WireRequest {
        url: format!("{}/chat/completions", config.base_url),
        headers: bearer(config).into_iter().collect(),
        body: Value::Object(body),
    })
}

fn message(m: &Message) -> Value {
    match m {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Assistant {
            content,
            tool_calls,
            reasoning_content,
        } => {
            let mut out = Map::new();
            out.insert("role".into(), json!("assistant"));
            // A turn that only called tools has no `content` at all: the API allows leaving it
            // out, and llama-cpp-python's server refuses `"content": null` (422, "Input should
            // be a valid string") where it takes the field missing.
            if !content.is_empty() || tool_calls.is_empty() {
                out.insert("content".into(), json!(content));
            }
            if !tool_calls.is_empty() {
                let calls: Vec<Value> = tool_calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function", "function": {
                            "name": c.name, "arguments": c.arguments.to_string()}})
                    })
                    .collect();
                out.insert("tool_calls".into(), Value::Array(calls));
            }
            // DeepSeek requires the reasoning of a tool-calling turn on the following request.
            if let Some(r) = reasoning_content {
                out.insert("reasoning_content".into(), json!(r));
            }
            Value::Object(out)
        }
        Message::Tool(result) => {
            let content = if result.is_error {
                format!("error: {}", result.content)
            } else {
                result.content.clone()
            };
            json!({"role": "tool", "tool_call_id": result.call_id, "content": content})
        }
    }
}

fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "stop" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_owned()),
    }
}

fn usage(body: &Value) -> Option<Delta> {
    let u = body.get("usage").filter(|u| u.is_object())?;
    Some(Delta::Usage {
        input: u.get("prompt_tokens").and_then(Value::as_u64),
        output: u.get("completion_tokens").and_then(Value::as_u64),
        // Part of `prompt_tokens`; servers without prompt caching leave the details out.
        cached: u
            .get("prompt_tokens_details")
            .and_then(|d| d.get("cached_tokens"))
            .and_then(Value::as_u64),
        cache_write: None,
        uncached: None,
    })
}

pub(crate) fn decode_response(body: &Value) -> Result<Vec<Delta>, ProviderFailure> {
    if let Some(failure) = embedded_error(body) {
        return Err(failure);
    }
    let choice = body
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| ProviderFailure::malformed("the response has no choices"))?;
    let msg = choice
        .get("message")
        .ok_or_else(|| ProviderFailure::malformed("the response choice has no message"))?;
    let mut out = Vec::new();
    // Reasoning stays reasoning: it never becomes answer text.
    let reasoning = msg
        .get("reasoning_content")
        .or_else(|| msg.get("reasoning"))
        .and_then(Value::as_str);
    if let Some(r) = reasoning {
        out.push(Delta::Reasoning(r.to_owned()));
    }
    if let Some(text) = msg.get("content").and_then(Value::as_str) {
        out.push(Delta::Text(text.to_owned()));
    }
    if let Some(calls) = msg.get("tool_calls").and_then(Value::as_array) {
        for (i, call) in calls.iter().enumerate() {
            let index = i as u64;
            let f = call.get("function");
            out.push(Delta::ToolStart {
                index,
                id: call.get("id").and_then(Value::as_str).map(str::to_owned),
                name: f
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            });
            let args = match f.and_then(|f| f.get("arguments")) {
                Some(Value::String(s)) => s.clone(),
                Some(v @ Value::Object(_)) => v.to_string(),
                _ => String::new(),
            };
            out.push(Delta::ToolArgs {
                index,
                fragment: args,
            });
        }
    }
    out.push(Delta::AllToolsComplete);
    out.extend(usage(body));
    if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
        out.push(Delta::Stop(stop_reason(r)));
    }
    out.push(Delta::Terminal);
    Ok(out)
}

pub(crate) fn decode_chunk(payload: &str) -> Result<Vec<Delta>, ProviderFailure> {
    if payload.trim() == "[DONE]" {
        return Ok(vec![Delta::Terminal]);
    }
    let chunk = parse_payload(payload)?;
    if let Some(failure) = embedded_error(&chunk) {
        return Err(failure);
    }
    let mut out = Vec::new();
    if let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) {
        if let Some(delta) = choice.get("delta") {
            let reasoning = delta
                .get("reasoning_content")
                .or_else(|| delta.get("reasoning"))
                .and_then(Value::as_str);
            if let Some(r) = reasoning {
                out.push(Delta::Reasoning(r.to_owned()));
            }
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                out.push(Delta::Text(text.to_owned()));
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for (pos, call) in calls.iter().enumerate() {
                    // Deltas of one call share an index; some servers omit it for single calls.
                    let index = call
                        .get("index")
                        .and_then(Value::as_u64)
                        .unwrap_or(pos as u64);
                    let f = call.get("function");
                    out.push(Delta::ToolStart {
                        index,
                        id: call.get("id").and_then(Value::as_str).map(str::to_owned),
                        name: f
                            .and_then(|f| f.get("name"))
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                    });
                    if let Some(args) = f.and_then(|f| f.get("arguments")).and_then(Value::as_str) {
                        out.push(Delta::ToolArgs {
                            index,
                            fragment: args.to_owned(),
                        });
                    }
                }
            }
        }
        if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
            out.push(Delta::AllToolsComplete);
            out.push(Delta::Stop(stop_reason(r)));
        }
    }
    out.extend(usage(&chunk));
    Ok(out)
}
