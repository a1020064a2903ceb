//! Ollama /api/chat wire shapes.

use serde_json::{Value, json};

use super::{Rendered, SimUsage, Turn, pieces};

fn done(message: Value, usage: SimUsage, model: &str) -> Value {
    json!({"model": model, "created_at": "2026-01-01T00:00:00Z", "message": message,
           "done": true, "done_reason": "stop",
           "prompt_eval_count": usage.input_tokens, "eval_count": usage.output_tokens})
}

fn calls(turn: &Turn) -> Value {
    turn.tool_calls
        .iter()
        .map(|c| json!({"function": {"name": c.name, "arguments": c.arguments}}))
        .collect()
}

pub(crate) fn full(turn: &Turn, usage: SimUsage, model: &str) -> Value {
    let mut message = json!({"role": "assistant", "content": turn.text});
    if let Some(r) = &turn.reasoning {
        message["thinking"] = json!(r);
    }
    if !turn.tool_calls.is_empty() {
        message["tool_calls"] = calls(turn);
    }
    done(message, usage, model)
}

pub(crate) fn frames(turn: &Turn, usage: SimUsage, model: &str) -> Rendered {
    let mut frames = Vec::new();
    for p in pieces(&turn.text) {
        let line = json!({"model": model, "created_at": "2026-01-01T00:00:00Z",
                          "message": {"role": "assistant", "content": p}, "done": false});
        frames.push(format!("{line}\n"));
    }
    if !turn.tool_calls.is_empty() {
        let line = json!({"model": model, "created_at": "2026-01-01T00:00:00Z",
                          "message": {"role": "assistant", "content": "", "tool_calls": calls(turn)},
                          "done": false});
        frames.push(format!("{line}\n"));
    }
    let last = done(json!({"role": "assistant", "content": ""}), usage, model);
    frames.push(format!("{last}\n"));
    Rendered {
        frames,
        terminal: None,
    }
}
