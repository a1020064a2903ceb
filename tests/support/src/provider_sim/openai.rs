//! OpenAI chat completions wire shapes.
//!
//! As the official clients expect: a completion id unique per request (`chatcmpl-…`), shared by
//! every chunk of one stream; `created` in Unix seconds; `content: null` when the turn is only
//! tool calls; `finish_reason` `tool_calls` when it has any.

use serde_json::{Value, json};

use super::{Answering, Delivery, Rendered, SimUsage, Turn, pieces};

/// `cached_tokens` is part of `prompt_tokens`, as OpenAI reports automatic prefix caching.
fn usage_json(u: SimUsage) -> Value {
    json!({"prompt_tokens": u.input_tokens, "completion_tokens": u.output_tokens,
           "total_tokens": u.input_tokens + u.output_tokens,
           "prompt_tokens_details": {"cached_tokens": u.cached_input_tokens, "audio_tokens": 0},
           "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                         "accepted_prediction_tokens": 0,
                                         "rejected_prediction_tokens": 0}})
}

fn finish_reason(turn: &Turn) -> &'static str {
    if turn.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    }
}

fn completion_id(answer: &Answering<'_>) -> String {
    format!("chatcmpl-sim{}", answer.request_no)
}

pub(crate) fn full(turn: &Turn, ids: &[String], usage: SimUsage, answer: &Answering<'_>) -> Value {
    let content = if turn.text.is_empty() && !turn.tool_calls.is_empty() {
        Value::Null
    } else {
        json!(turn.text)
    };
    let mut message = json!({"role": "assistant", "content": content});
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
        "id": completion_id(answer), "object": "chat.completion", "created": answer.created,
        "model": answer.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(turn),
                     "logprobs": null}],
        "usage": usage_json(usage),
    })
}

fn frame(answer: &Answering<'_>, choices: Value, usage: Option<Value>) -> String {
    let mut chunk = json!({"id": completion_id(answer), "object": "chat.completion.chunk",
                           "created": answer.created, "model": answer.model, "choices": choices});
    if let Some(u) = usage {
        chunk["usage"] = u;
    }
    format!("data: {chunk}\n\n")
}

fn delta(answer: &Answering<'_>, delta: Value) -> String {
    frame(
        answer,
        json!([{"index": 0, "delta": delta, "finish_reason": null}]),
        None,
    )
}

pub(crate) fn frames(
    turn: &Turn,
    ids: &[String],
    usage: SimUsage,
    answer: &Answering<'_>,
    delivery: &Delivery,
) -> Rendered {
    let mut frames = vec![delta(answer, json!({"role": "assistant", "content": ""}))];
    if let Some(r) = &turn.reasoning {
        for p in pieces(r) {
            frames.push(delta(answer, json!({"reasoning_content": p})));
        }
    }
    for p in pieces(&turn.text) {
        frames.push(delta(answer, json!({"content": p})));
    }
    for (i, (call, id)) in turn.tool_calls.iter().zip(ids).enumerate() {
        frames.push(delta(
            answer,
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
                answer,
                json!({"tool_calls": [{"index": i, "function": {"arguments": fragment}}]}),
            ));
        }
    }
    frames.push(frame(
        answer,
        json!([{"index": 0, "delta": {}, "finish_reason": finish_reason(turn)}]),
        None,
    ));
    frames.push(frame(answer, json!([]), Some(usage_json(usage))));
    Rendered {
        frames,
        terminal: Some("data: [DONE]\n\n".into()),
    }
}
