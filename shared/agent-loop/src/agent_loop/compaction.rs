//! Evidence-preserving context compaction: when the history outgrows its token budget, older tool
//! results are replaced in place by short stubs that keep the tool name, the call id and a bounded
//! head of the result. The system prompt, the messages before the first model turn (the goal) and
//! the most recent turns are never touched, and because a stub replaces its result in place, every
//! result still directly follows the call it answers.

use std::collections::HashMap;

use crate::provider::types::{Message, ToolResult};

/// Every stub starts with this, so a stub is never compacted again.
pub const STUB_MARKER: &str = "[compacted tool result]";

/// A cheap token count for one message; compaction only needs an estimate.
pub trait TokenEstimator: Send + Sync {
    fn estimate(&self, message: &Message) -> u64;
}

/// Characters divided by a fixed ratio (four characters per token is close for English and JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CharsPerToken(pub u64);

impl Default for CharsPerToken {
    fn default() -> Self {
        Self(4)
    }
}

impl TokenEstimator for CharsPerToken {
    fn estimate(&self, message: &Message) -> u64 {
        let chars = match message {
            Message::System { content } | Message::User { content } => content.len(),
            Message::Assistant {
                content,
                tool_calls,
                reasoning_content,
            } => {
                content.len()
                    + reasoning_content.as_ref().map_or(0, String::len)
                    + tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.id.len() + json_len(&c.arguments))
                        .sum::<usize>()
            }
            Message::Tool(result) => result.content.len() + result.call_id.len(),
        };
        // A small per-message overhead for role and framing.
        (chars as u64).div_ceil(self.0.max(1)) + 4
    }
}

fn json_len(value: &serde_json::Value) -> usize {
    // Serializing to a counting sink would avoid the allocation; arguments are small.
    value.to_string().len()
}

/// When and how to compact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionPolicy {
    /// Compact when the estimated history exceeds this many tokens.
    pub budget_tokens: u64,
    /// The most recent model turns (an assistant message and its results) kept verbatim.
    pub keep_recent_turns: usize,
    /// Characters of the original result kept in its stub.
    pub stub_head_chars: usize,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        Self {
            budget_tokens: 24_000,
            keep_recent_turns: 2,
            stub_head_chars: 240,
        }
    }
}

/// What one compaction pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompactionReport {
    pub tokens_before: u64,
    pub tokens_after: u64,
    /// Tool results replaced by stubs in this pass.
    pub stubbed: usize,
}

/// Compacts `messages` in place when they exceed the budget; `None` when nothing was needed.
/// Oldest eligible results are stubbed first, and only until the history fits.
pub fn compact(
    messages: &mut [Message],
    policy: &CompactionPolicy,
    estimator: &dyn TokenEstimator,
) -> Option<CompactionReport> {
    let tokens_before: u64 = messages.iter().map(|m| estimator.estimate(m)).sum();
    if tokens_before <= policy.budget_tokens {
        return None;
    }
    let assistants: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m, Message::Assistant { .. }))
        .map(|(i, _)| i)
        .collect();
    // Everything before the first model turn is the system prompt and the goal.
    let first_turn = assistants.first().copied()?;
    let recent_start = match assistants.len().checked_sub(policy.keep_recent_turns) {
        Some(n) if n < assistants.len() => assistants[n],
        _ => messages.len(),
    };
    if recent_start <= first_turn {
        return Some(CompactionReport {
            tokens_before,
            tokens_after: tokens_before,
            stubbed: 0,
        });
    }

    let mut names: HashMap<String, String> = HashMap::new();
    for message in &messages[first_turn..recent_start] {
        if let Message::Assistant { tool_calls, .. } = message {
            for call in tool_calls {
                names.insert(call.id.clone(), call.name.clone());
            }
        }
    }

    let mut tokens = tokens_before;
    let mut stubbed = 0;
    for message in &mut messages[first_turn..recent_start] {
        if tokens <= policy.budget_tokens {
            break;
        }
        let Message::Tool(result) = message else {
            continue;
        };
        if result.content.starts_with(STUB_MARKER) {
            continue;
        }
        let name = names.get(&result.call_id).map_or("unknown", String::as_str);
        let stub = stub_for(name, result, policy.stub_head_chars);
        if stub.len() >= result.content.len() {
            continue;
        }
        let before = estimator.estimate(message);
        if let Message::Tool(result) = message {
            result.content = stub;
        }
        let after = estimator.estimate(message);
        tokens = tokens.saturating_sub(before.saturating_sub(after));
        stubbed += 1;
    }
    Some(CompactionReport {
        tokens_before,
        tokens_after: tokens,
        stubbed,
    })
}

fn stub_for(name: &str, result: &ToolResult, head_chars: usize) -> String {
    let head = bounded_head(&result.content, head_chars);
    format!(
        "{STUB_MARKER} tool={name} call_id={} original_chars={} head: {head}",
        result.call_id,
        result.content.chars().count()
    )
}

/// At most `max_chars` characters, with an ellipsis when cut.
pub(crate) fn bounded_head(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::types::ToolCall;
    use serde_json::json;

    fn turn(id: &str, result_len: usize) -> [Message; 2] {
        [
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall::new(id, "pulse_query", json!({"action": "list"}))],
                reasoning_content: None,
            },
            Message::tool_result(id, "x".repeat(result_len)),
        ]
    }

    #[test]
    fn under_budget_is_untouched() {
        let mut msgs = vec![Message::system("s"), Message::user("goal")];
        msgs.extend(turn("a", 100));
        let before = msgs.clone();
        let policy = CompactionPolicy {
            budget_tokens: 10_000,
            ..CompactionPolicy::default()
        };
        assert!(compact(&mut msgs, &policy, &CharsPerToken::default()).is_none());
        assert_eq!(msgs, before);
    }

    #[test]
    fn stubs_oldest_results_and_keeps_protected_messages() {
        let mut msgs = vec![Message::system("s".repeat(4000)), Message::user("goal")];
        for i in 0..5 {
            msgs.extend(turn(&format!("c{i}"), 4000));
        }
        let policy = CompactionPolicy {
            budget_tokens: 3000,
            keep_recent_turns: 2,
            stub_head_chars: 10,
        };
        let report = compact(&mut msgs, &policy, &CharsPerToken::default()).expect("compacted");
        assert!(report.stubbed > 0);
        assert_eq!(msgs[0], Message::system("s".repeat(4000)));
        assert_eq!(msgs[1], Message::user("goal"));
        for recent in &msgs[msgs.len() - 4..] {
            if let Message::Tool(r) = recent {
                assert!(!r.content.starts_with(STUB_MARKER));
            }
        }
        let Message::Tool(first) = &msgs[3] else {
            panic!("pairing broken");
        };
        assert!(first.content.starts_with(STUB_MARKER));
        assert!(first.content.contains("tool=pulse_query call_id=c0"));
    }
}
