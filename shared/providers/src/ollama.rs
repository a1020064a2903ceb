//! Ollama native `/api/chat`.

use serde_json::{Map, Value, json};

use crate::assembler::Delta;
use crate::failure::ProviderFailure;
use crate::types::{ChatRequest, Message, StopReason, tool_name_for};
use crate::{ProviderConfig, WireRequest, bearer, embedded_error, parse_payload};

pub(crate) fn build(
    config: &ProviderConfig,
    req: &ChatRequest,
) -> Result<WireRequest, ProviderFailure> {
    let messages: Vec<Value> = req
        .messages
        .iter()
        .enumerate()
        .map(|(at, m)| match m {
            Message::System { content } => json!({"role": "system", "content": content}),
            Message::User { content } => json!({"role": "user", "content": content}),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                let mut out = json!({"role": "assistant", "content": content});
                if !tool_calls.is_empty() {
                    out["tool_calls"] = tool_calls
                        .iter()
                        .map(|c| json!({"function": {"name": c.name, "arguments": c.arguments}}))
                        .collect();
                }
                out
            }
            Message::Tool(r) => {
                let content = if r.is_error {
                    format!("error: {}", r.content)
                } else {
                    r.content.clone()
                };
                let name = tool_name_for(&req.messages[..at], &r.call_id).unwrap_or_default();
                json!({"role": "tool", "tool_name": name, "content": content})
            }
        })
        .collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("messages".into(), Value::Array(messages));
    // Ollama has no tool_choice: `Required` still offers the tools, `None` omits them.
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
    }
    body.insert("stream".into(), json!(req.stream));
    if let Some(keep) = &config.ollama_keep_alive {
        body.insert("keep_alive".into(), json!(keep));
    }
    if let Some(think) = config.ollama_think {
        body.insert("think".into(), json!(think));
    }
    let mut options = Map::new();
    if let Some(ctx) = config.ollama_num_ctx {
        options.insert("num_ctx".into(), json!(ctx));
    }
    if let Some(max) = req.max_output_tokens {
        options.insert("num_predict".into(), json!(max));
    }
    if let Some(t) = req.temperature {
        options.insert("temperature".into(), json!(t));
    }
    if !options.is_empty() {
        body.insert("options".into(), Value::Object(options));
    }
    Ok(WireRequest {
        url: format!("{}/api/chat", config.base_url),
        headers: bearer(config).into_iter().collect(),
        body: Value::Object(body),
    })
}

fn decode(body: &Value) -> Result<Vec<Delta>, ProviderFailure> {
    if let Some(failure) = embedded_error(body) {
        return Err(failure);
    }
    let mut out = Vec::new();
    if let Some(msg) = body.get("message") {
        if let Some(t) = msg.get("thinking").and_then(Value::as_str) {
            out.push(Delta::Reasoning(t.to_owned()));
        }
        if let Some(t) = msg.get("content").and_then(Value::as_str) {
            out.push(Delta::Text(t.to_owned()));
        }
        for call in msg
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let f = call.get("function");
            let Some(name) = f.and_then(|f| f.get("name")).and_then(Value::as_str) else {
                return Err(ProviderFailure::malformed("a tool call has no name"));
            };
            let arguments = match f.and_then(|f| f.get("arguments")) {
                Some(Value::String(s)) => serde_json::from_str(s)
                    .map_err(|_| ProviderFailure::malformed("tool call arguments are not JSON"))?,
                Some(v) => v.clone(),
                None => json!({}),
            };
            out.push(Delta::ToolWhole {
                id: call.get("id").and_then(Value::as_str).map(str::to_owned),
                name: name.to_owned(),
                arguments,
                thought_signature: None,
            });
        }
    }
    if body.get("done").and_then(Value::as_bool) == Some(true) {
        out.push(Delta::Usage {
            input: body.get("prompt_eval_count").and_then(Value::as_u64),
            output: body.get("eval_count").and_then(Value::as_u64),
            // Ollama reports no prompt-cache counts.
            cached: None,
            cache_write: None,
            uncached: None,
        });
        let reason = match body.get("done_reason").and_then(Value::as_str) {
            None | Some("stop") => StopReason::EndTurn,
            Some("length") => StopReason::MaxTokens,
            Some(other) => StopReason::Other(other.to_owned()),
        };
        out.push(Delta::Stop(reason));
        out.push(Delta::Terminal);
    }
    Ok(out)
}

pub(crate) fn decode_response(body: &Value) -> Result<Vec<Delta>, ProviderFailure> {
    if body.get("message").is_none() && body.get("error").is_none() {
        return Err(ProviderFailure::malformed("the response has no message"));
    }
    decode(body)
}

pub(crate) fn decode_chunk(payload: &str) -> Result<Vec<Delta>, ProviderFailure> {
    decode(&parse_payload(payload)?)
}
