//! Anthropic Messages wire shapes.
//!
//! As the official clients expect: a message id unique per request (`msg_…`); each SSE frame
//! named after its `type`; a thinking block that carries a `signature` (empty at its start,
//! then one `signature_delta` before its stop, as the real API streams it); `stop_reason`
//! `tool_use` when the turn has tool calls.

use serde_json::{Value, json};

use super::{Answering, Delivery, Rendered, SimUsage, Turn, pieces};

fn message_id(answer: &Answering<'_>) -> String {
    format!("msg_sim{}", answer.request_no)
}

/// The opaque signature of the turn's thinking block.
fn thinking_signature(answer: &Answering<'_>) -> String {
    super::gemini::thought_signature(&message_id(answer))
}

/// Usage as Anthropic reports it: `input_tokens` is only the prompt after the cache; the cache
/// reads and writes are counted apart.
fn usage_json(usage: SimUsage, output_tokens: u64) -> Value {
    json!({"input_tokens": usage.input_tokens
               - usage.cached_input_tokens
               - usage.cache_write_input_tokens,
           "cache_creation_input_tokens": usage.cache_write_input_tokens,
           "cache_read_input_tokens": usage.cached_input_tokens,
           "output_tokens": output_tokens})
}

fn stop_reason(turn: &Turn) -> &'static str {
    if turn.tool_calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    }
}

pub(crate) fn full(turn: &Turn, ids: &[String], usage: SimUsage, answer: &Answering<'_>) -> Value {
    let mut content = Vec::new();
    if let Some(r) = &turn.reasoning {
        content.push(json!({"type": "thinking", "thinking": r,
                            "signature": thinking_signature(answer)}));
    }
    if !turn.text.is_empty() {
        content.push(json!({"type": "text", "text": turn.text}));
    }
    for (c, id) in turn.tool_calls.iter().zip(ids) {
        content.push(json!({"type": "tool_use", "id": id, "name": c.name, "input": c.arguments}));
    }
    json!({
        "id": message_id(answer), "type": "message", "role": "assistant", "model": answer.model,
        "content": content, "stop_reason": stop_reason(turn), "stop_sequence": null,
        "usage": usage_json(usage, usage.output_tokens),
    })
}

fn event(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

pub(crate) fn frames(
    turn: &Turn,
    ids: &[String],
    usage: SimUsage,
    answer: &Answering<'_>,
    delivery: &Delivery,
) -> Rendered {
    let mut frames = vec![event(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": message_id(answer), "type": "message", "role": "assistant",
            "model": answer.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": usage_json(usage, 1)}}),
    )];
    let mut index = 0;
    if let Some(r) = &turn.reasoning {
        frames.push(event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ));
        for p in pieces(r) {
            frames.push(event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "thinking_delta", "thinking": p}}),
            ));
        }
        frames.push(event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index,
                   "delta": {"type": "signature_delta", "signature": thinking_signature(answer)}}),
        ));
        frames.push(event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    if !turn.text.is_empty() {
        frames.push(event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "text", "text": ""}}),
        ));
        frames.push(event("ping", json!({"type": "ping"})));
        for p in pieces(&turn.text) {
            frames.push(event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "text_delta", "text": p}}),
            ));
        }
        frames.push(event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for (c, id) in turn.tool_calls.iter().zip(ids) {
        frames.push(event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "tool_use", "id": id, "name": c.name, "input": {}}}),
        ));
        let mut parts = delivery.fragments_of(&c.arguments);
        if delivery.orphan_tool_calls {
            parts.pop();
        }
        for p in parts {
            frames.push(event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "input_json_delta", "partial_json": p}}),
            ));
        }
        if !delivery.orphan_tool_calls {
            frames.push(event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
        }
        index += 1;
    }
    frames.push(event(
        "message_delta",
        json!({"type": "message_delta",
               "delta": {"stop_reason": stop_reason(turn), "stop_sequence": null},
               "usage": usage_json(usage, usage.output_tokens)}),
    ));
    Rendered {
        frames,
        terminal: Some(event("message_stop", json!({"type": "message_stop"}))),
    }
}
