//! Provider-neutral request, response and stream-event types shared by every transport.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::failure::ProviderFailure;

/// A tool offered to the model: a name, what it does, and a JSON schema for its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// How the model may use the offered tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides (sent as `auto` where the protocol has the field and tools are offered).
    #[default]
    Auto,
    /// No tools: the tools are omitted from the request rather than sending `tool_choice=none`.
    None,
    /// The model must call at least one tool.
    Required,
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
    /// Gemini's opaque `thoughtSignature` for this call, echoed back on the next turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thought_signature: Option<String>,
}

impl ToolCall {
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
            thought_signature: None,
        }
    }
}

/// The result of a tool call, sent back to the model on the next turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub call_id: String,
    pub content: String,
    pub is_error: bool,
}

impl ToolResult {
    /// A successful result for the call `call_id`.
    pub fn ok(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            call_id: call_id.into(),
            content: content.into(),
            is_error: false,
        }
    }

    /// An error result (`is_error=true`) for the call `call_id`.
    pub fn error(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            call_id: call_id.into(),
            content: content.into(),
            is_error: true,
        }
    }
}

/// One conversation message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    System {
        content: String,
    },
    User {
        content: String,
    },
    Assistant {
        content: String,
        #[serde(default)]
        tool_calls: Vec<ToolCall>,
        /// Provider reasoning (DeepSeek `reasoning_content`), carried into the next request.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning_content: Option<String>,
    },
    Tool(ToolResult),
}

impl Message {
    pub fn system(content: impl Into<String>) -> Self {
        Self::System {
            content: content.into(),
        }
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::User {
            content: content.into(),
        }
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Self::Assistant {
            content: content.into(),
            tool_calls: Vec::new(),
            reasoning_content: None,
        }
    }

    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self::Tool(ToolResult {
            call_id: call_id.into(),
            content: content.into(),
            is_error: false,
        })
    }
}

/// One call to a provider.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
    pub tool_choice: ToolChoice,
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub stream: bool,
}

impl ChatRequest {
    /// The tools to put on the wire: none at all when the choice is `None`.
    pub(crate) fn wire_tools(&self) -> &[Tool] {
        match self.tool_choice {
            ToolChoice::None => &[],
            ToolChoice::Auto | ToolChoice::Required => &self.tools,
        }
    }
}

/// Token usage as the provider reported it, normalised across protocols.
///
/// `input_tokens` is always the whole prompt, cached parts included (Anthropic reports the
/// uncached remainder alone; its parser adds the cache reads and writes back). The two cache
/// counts are the parts of `input_tokens` that were read from, or written to, the provider's
/// prompt cache; both are zero where the provider reports no caching.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Prompt tokens served from the provider's cache (OpenAI and compatible
    /// `prompt_tokens_details.cached_tokens`, Anthropic `cache_read_input_tokens`, Gemini
    /// `cachedContentTokenCount`), billed at the cached price.
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Prompt tokens written to the provider's cache on this call (Anthropic
    /// `cache_creation_input_tokens`), billed at the cache-write price.
    #[serde(default)]
    pub cache_write_input_tokens: u64,
}

impl Usage {
    /// Usage with no cache activity.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Self {
            input_tokens,
            output_tokens,
            ..Self::default()
        }
    }

    /// Prompt tokens billed at the plain input price: neither read from nor written to a cache.
    pub fn uncached_input_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_sub(self.cached_input_tokens)
            .saturating_sub(self.cache_write_input_tokens)
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(other.cached_input_tokens);
        self.cache_write_input_tokens = self
            .cache_write_input_tokens
            .saturating_add(other.cache_write_input_tokens);
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    Other(String),
}

/// A finished model turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    pub content: String,
    pub reasoning_content: Option<String>,
    /// Complete tool calls, safe to execute.
    pub tool_calls: Vec<ToolCall>,
    /// Tool calls the provider started but never finished: never executable. They stay in the
    /// assistant turn so the next request carries a synthetic error result for each.
    pub orphaned_tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    pub stop_reason: StopReason,
    /// The turn came as one buffered answer, not a stream (the request did not stream, or the
    /// route does not).
    #[serde(default)]
    pub buffered: bool,
}

impl ChatResponse {
    /// The assistant message to append to the conversation for the next turn.
    pub fn assistant_message(&self) -> Message {
        let mut tool_calls = self.tool_calls.clone();
        tool_calls.extend(self.orphaned_tool_calls.iter().cloned());
        Message::Assistant {
            content: self.content.clone(),
            tool_calls,
            reasoning_content: self.reasoning_content.clone(),
        }
    }
}

/// What a transport reports while a call runs.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    Content {
        text: String,
    },
    Thinking {
        text: String,
    },
    ToolStart {
        id: String,
        name: String,
    },
    ToolProgress {
        id: String,
        arguments_delta: String,
    },
    ToolEnd {
        call: ToolCall,
    },
    /// A transient pre-output failure: the same route is tried again after `retry_after_ms`.
    ProviderRetry {
        attempt: u32,
        max_attempts: u32,
        retry_after_ms: u64,
    },
    Done {
        usage: Usage,
        stop_reason: StopReason,
    },
    Error {
        failure: ProviderFailure,
    },
}

impl StreamEvent {
    /// Output the user can see; once any was emitted the call is never retried.
    pub fn is_visible_output(&self) -> bool {
        matches!(
            self,
            Self::Content { .. }
                | Self::Thinking { .. }
                | Self::ToolStart { .. }
                | Self::ToolProgress { .. }
                | Self::ToolEnd { .. }
        )
    }
}

/// Content of the synthetic result given to a tool call that never got one.
pub const INTERRUPTED_TOOL_RESULT: &str =
    "this tool call was interrupted before it returned a result; it did not run";

/// Gives every assistant tool call without a downstream result a synthetic error result, placed
/// after the results the call's turn did get, so no provider sees a dangling call.
pub fn repair_orphan_tool_calls(messages: &[Message]) -> Vec<Message> {
    let mut out = Vec::with_capacity(messages.len());
    let mut i = 0;
    while i < messages.len() {
        let msg = &messages[i];
        out.push(msg.clone());
        i += 1;
        let Message::Assistant { tool_calls, .. } = msg else {
            continue;
        };
        let mut answered = Vec::new();
        while let Some(Message::Tool(result)) = messages.get(i) {
            answered.push(result.call_id.clone());
            out.push(messages[i].clone());
            i += 1;
        }
        for call in tool_calls {
            if !answered.contains(&call.id) {
                out.push(Message::Tool(ToolResult {
                    call_id: call.id.clone(),
                    content: INTERRUPTED_TOOL_RESULT.to_owned(),
                    is_error: true,
                }));
            }
        }
    }
    out
}

/// The name of the tool a call id belongs to, searched backwards through `earlier` (the messages
/// before the result). Ids need not be unique across turns: Ollama and Gemini may send calls
/// without ids, and those are numbered per turn, so a later turn's `call_1` must not name an
/// earlier result.
pub(crate) fn tool_name_for(earlier: &[Message], call_id: &str) -> Option<String> {
    earlier.iter().rev().find_map(|m| match m {
        Message::Assistant { tool_calls, .. } => tool_calls
            .iter()
            .find(|c| c.id == call_id)
            .map(|c| c.name.clone()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn orphan_calls_get_one_synthetic_error_result_each() {
        let call = |id: &str| ToolCall::new(id, "t", json!({}));
        let msgs = vec![
            Message::user("hi"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![call("a"), call("b")],
                reasoning_content: None,
            },
            Message::tool_result("a", "ok"),
            Message::user("next"),
        ];
        let fixed = repair_orphan_tool_calls(&msgs);
        assert_eq!(fixed.len(), 5);
        assert_eq!(
            fixed[3],
            Message::Tool(ToolResult {
                call_id: "b".into(),
                content: INTERRUPTED_TOOL_RESULT.into(),
                is_error: true
            })
        );
        assert_eq!(repair_orphan_tool_calls(&fixed), fixed);
    }
}
