//! Ollama /api/chat wire shapes.
//!
//! As the official client expects: every line names the model and has an RFC 3339 `created_at`;
//! the last line has `done: true`, a `done_reason`, the token counts and the durations (in
//! nanoseconds); tool calls arrive whole, their arguments an object, never a string.

use serde_json::{Value, json};

use super::{Answering, Rendered, SimUsage, Turn, pieces};

/// Nanoseconds the simulated model takes per token, for the reported durations.
const NANOS_PER_TOKEN: u64 = 1_000_000;

fn line(answer: &Answering<'_>, message: Value) -> Value {
    json!({"model": answer.model, "created_at": answer.created_at(), "message": message,
           "done": false})
}

fn done(message: Value, usage: SimUsage, answer: &Answering<'_>) -> Value {
    let prompt_eval = usage.input_tokens * NANOS_PER_TOKEN;
    let eval = usage.output_tokens * NANOS_PER_TOKEN;
    let mut last = line(answer, message);
    last["done"] = json!(true);
    last["done_reason"] = json!("stop");
    last["total_duration"] = json!(prompt_eval + eval);
    last["load_duration"] = json!(0);
    last["prompt_eval_count"] = json!(usage.input_tokens);
    last["prompt_eval_duration"] = json!(prompt_eval);
    last["eval_count"] = json!(usage.output_tokens);
    last["eval_duration"] = json!(eval);
    last
}

fn calls(turn: &Turn) -> Value {
    turn.tool_calls
        .iter()
        .map(|c| json!({"function": {"name": c.name, "arguments": c.arguments}}))
        .collect()
}

pub(crate) fn full(turn: &Turn, usage: SimUsage, answer: &Answering<'_>) -> Value {
    let mut message = json!({"role": "assistant", "content": turn.text});
    if let Some(r) = &turn.reasoning {
        message["thinking"] = json!(r);
    }
    if !turn.tool_calls.is_empty() {
        message["tool_calls"] = calls(turn);
    }
    done(message, usage, answer)
}

pub(crate) fn frames(turn: &Turn, usage: SimUsage, answer: &Answering<'_>) -> Rendered {
    let mut frames = Vec::new();
    if let Some(r) = &turn.reasoning {
        for p in pieces(r) {
            let message = json!({"role": "assistant", "content": "", "thinking": p});
            frames.push(format!("{}\n", line(answer, message)));
        }
    }
    for p in pieces(&turn.text) {
        let message = json!({"role": "assistant", "content": p});
        frames.push(format!("{}\n", line(answer, message)));
    }
    if !turn.tool_calls.is_empty() {
        let message = json!({"role": "assistant", "content": "", "tool_calls": calls(turn)});
        frames.push(format!("{}\n", line(answer, message)));
    }
    let last = done(json!({"role": "assistant", "content": ""}), usage, answer);
    frames.push(format!("{last}\n"));
    Rendered {
        frames,
        terminal: None,
    }
}
