//! Gemini generateContent wire shapes.

use serde_json::{Value, json};

use super::{Rendered, SimUsage, Turn, pieces};

fn usage_json(u: SimUsage) -> Value {
    json!({"promptTokenCount": u.input_tokens, "candidatesTokenCount": u.output_tokens,
           "totalTokenCount": u.input_tokens + u.output_tokens})
}

fn call_parts(turn: &Turn, ids: &[String]) -> Vec<Value> {
    turn.tool_calls
        .iter()
        .zip(ids)
        .map(|(c, id)| {
            json!({"functionCall": {"id": id, "name": c.name, "args": c.arguments},
                   "thoughtSignature": format!("sig-{id}")})
        })
        .collect()
}

fn response(parts: Vec<Value>, finish: Option<&str>, usage: Option<SimUsage>) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(f) = finish {
        candidate["finishReason"] = json!(f);
    }
    let mut out = json!({"candidates": [candidate], "modelVersion": "sim"});
    if let Some(u) = usage {
        out["usageMetadata"] = usage_json(u);
    }
    out
}

pub(crate) fn full(turn: &Turn, ids: &[String], usage: SimUsage) -> Value {
    let mut parts = Vec::new();
    if let Some(r) = &turn.reasoning {
        parts.push(json!({"text": r, "thought": true}));
    }
    if !turn.text.is_empty() {
        parts.push(json!({"text": turn.text}));
    }
    parts.extend(call_parts(turn, ids));
    response(parts, Some("STOP"), Some(usage))
}

pub(crate) fn frames(turn: &Turn, ids: &[String], usage: SimUsage) -> Rendered {
    let mut frames = Vec::new();
    if let Some(r) = &turn.reasoning {
        let part = json!([{"text": r, "thought": true}]);
        frames.push(format!(
            "data: {}\r\n\r\n",
            response(part.as_array().cloned().unwrap_or_default(), None, None)
        ));
    }
    for p in pieces(&turn.text) {
        frames.push(format!(
            "data: {}\r\n\r\n",
            response(vec![json!({"text": p})], None, None)
        ));
    }
    frames.push(format!(
        "data: {}\r\n\r\n",
        response(call_parts(turn, ids), Some("STOP"), Some(usage))
    ));
    // Gemini streams have no end marker.
    Rendered {
        frames,
        terminal: None,
    }
}
