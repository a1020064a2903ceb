//! OpenAI chat completions wire shapes.

use serde_json::{Value, json};

use super::{Delivery, Rendered, SimUsage, Turn, pieces};

fn usage_json(u: SimUsage) -> Value {
    json!({"prompt_tokens": u.input_tokens, "completion_tokens": u.output_tokens,
           "total_tokens": u.input_tokens + u.output_tokens})
}

fn finish_reason(turn: &Turn) -> &'static str {
    if turn.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    }
}

pub(crate) fn full(turn: &Turn, ids: &[String], usage: SimUsage, model: &str) -> Value {
    let mut message = json!({"role": "assistant", "content": turn.text});
    if let Some(r) = &turn.reasoning {
        message["reasoning_content"] = json!(r);
    }
    if !turn.tool_calls.is_empty() {
        message["tool_calls"] = turn
            .tool_calls
            .iter()
            .zip(ids)
            .map(|(c, id)| {
                json!({"id": id, "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments.to_string()}})
            })
            .collect();
    }
    json!({
        "id": "chatcmpl-sim", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(turn)}],
        "usage": usage_json(usage),
    })
}

fn frame(model: &str, choices: Value, usage: Option<Value>) -> String {
    let mut chunk = json!({"id": "chatcmpl-sim", "object": "chat.completion.chunk",
                           "created": 0, "model": model, "choices": choices});
    if let Some(u) = usage {
        chunk["usage"] = u;
    }
    format!("data: {chunk}\n\n")
}

fn delta(model: &str, delta: Value) -> String {
    frame(
        model,
        json!([{"index": 0, "delta": delta, "finish_reason": null}]),
        None,
    )
}

pub(crate) fn frames(
    turn: &Turn,
    ids: &[String],
    usage: SimUsage,
    model: &str,
    delivery: &Delivery,
) -> Rendered {
    let mut frames = vec![delta(model, json!({"role": "assistant", "content": ""}))];
    if let Some(r) = &turn.reasoning {
        for p in pieces(r) {
            frames.push(delta(model, json!({"reasoning_content": p})));
        }
    }
    for p in pieces(&turn.text) {
        frames.push(delta(model, json!({"content": p})));
    }
    for (i, (call, id)) in turn.tool_calls.iter().zip(ids).enumerate() {
        frames.push(delta(
            model,
            json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                                   "function": {"name": call.name, "arguments": ""}}]}),
        ));
        let mut fragments = delivery.fragments_of(&call.arguments);
        if delivery.orphan_tool_calls {
            // The call never finishes: its last fragment is never sent.
            fragments.pop();
        }
        for fragment in fragments {
            frames.push(delta(
                model,
                json!({"tool_calls": [{"index": i, "function": {"arguments": fragment}}]}),
            ));
        }
    }
    frames.push(frame(
        model,
        json!([{"index": 0, "delta": {}, "finish_reason": finish_reason(turn)}]),
        None,
    ));
    frames.push(frame(model, json!([]), Some(usage_json(usage))));
    Rendered {
        frames,
        terminal: Some("data: [DONE]\n\n".into()),
    }
}
