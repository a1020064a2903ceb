//! Wire-neutral deltas and the one assembler that turns them into events and a response.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::failure::ProviderFailure;
use crate::types::{ChatResponse, StopReason, StreamEvent, ToolCall, Usage};

/// What a protocol decoder extracted from one payload.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Delta {
    Text(String),
    Reasoning(String),
    /// A tool call began (or more of its header arrived) at a provider-side position.
    ToolStart {
        index: u64,
        id: Option<String>,
        name: Option<String>,
    },
    ToolArgs {
        index: u64,
        fragment: String,
    },
    /// The call at `index` will get no more argument fragments.
    ToolComplete {
        index: u64,
    },
    /// Every call started so far is complete (OpenAI `finish_reason`).
    AllToolsComplete,
    /// A whole call in one piece (Gemini, Ollama).
    ToolWhole {
        id: Option<String>,
        name: String,
        arguments: Value,
        thought_signature: Option<String>,
    },
    /// Each count the payload carried; `None` leaves the count as it was. `input` is the whole
    /// prompt, cached parts included.
    Usage {
        input: Option<u64>,
        output: Option<u64>,
        cached: Option<u64>,
        cache_write: Option<u64>,
        /// The prompt tokens outside the cache (Anthropic's `input_tokens`): the whole prompt is
        /// this plus the cache counts, whichever payload carried them.
        uncached: Option<u64>,
    },
    Stop(StopReason),
    /// The protocol's end-of-stream marker.
    Terminal,
}

#[derive(Debug, Default)]
struct ToolBuilder {
    id: Option<String>,
    name: Option<String>,
    args: String,
    started: bool,
    complete: bool,
}

/// Collects deltas, emits stream events, and builds the final response.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    content: String,
    reasoning: String,
    tools: BTreeMap<u64, ToolBuilder>,
    finished: Vec<ToolCall>,
    whole_count: u64,
    usage: Usage,
    uncached_input: Option<u64>,
    stop: Option<StopReason>,
    terminal: bool,
}

impl Assembler {
    pub(crate) fn saw_terminal(&self) -> bool {
        self.terminal
    }

    pub(crate) fn saw_stop(&self) -> bool {
        self.stop.is_some()
    }

    pub(crate) fn apply(&mut self, delta: Delta, emit: &mut dyn FnMut(StreamEvent)) {
        match delta {
            Delta::Text(text) if !text.is_empty() => {
                self.content.push_str(&text);
                emit(StreamEvent::Content { text });
            }
            Delta::Reasoning(text) if !text.is_empty() => {
                self.reasoning.push_str(&text);
                emit(StreamEvent::Thinking { text });
            }
            Delta::Text(_) | Delta::Reasoning(_) => {}
            Delta::ToolStart { index, id, name } => {
                let b = self.tools.entry(index).or_default();
                if b.id.is_none() {
                    b.id = id.filter(|s| !s.is_empty());
                }
                if b.name.is_none() {
                    b.name = name.filter(|s| !s.is_empty());
                }
                Self::announce(index, b, emit);
            }
            Delta::ToolArgs { index, fragment } => {
                let b = self.tools.entry(index).or_default();
                b.args.push_str(&fragment);
                Self::announce(index, b, emit);
                if b.started && !fragment.is_empty() {
                    emit(StreamEvent::ToolProgress {
                        id: Self::builder_id(index, b),
                        arguments_delta: fragment,
                    });
                }
            }
            Delta::ToolComplete { index } => {
                if let Some(b) = self.tools.get_mut(&index) {
                    b.complete = true;
                }
                self.finish_complete_tools(emit);
            }
            Delta::AllToolsComplete => {
                for b in self.tools.values_mut() {
                    b.complete = true;
                }
                self.finish_complete_tools(emit);
            }
            Delta::ToolWhole {
                id,
                name,
                arguments,
                thought_signature,
            } => {
                self.whole_count += 1;
                let id = id
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| format!("call_{}", self.whole_count));
                emit(StreamEvent::ToolStart {
                    id: id.clone(),
                    name: name.clone(),
                });
                let call = ToolCall {
                    thought_signature,
                    ..ToolCall::new(id, name, arguments)
                };
                emit(StreamEvent::ToolEnd { call: call.clone() });
                self.finished.push(call);
            }
            Delta::Usage {
                input,
                output,
                cached,
                cache_write,
                uncached,
            } => {
                if uncached.is_some() {
                    self.uncached_input = uncached;
                }
                if let Some(i) = input {
                    self.usage.input_tokens = i;
                }
                if let Some(o) = output {
                    self.usage.output_tokens = o;
                }
                if let Some(c) = cached {
                    self.usage.cached_input_tokens = c;
                }
                if let Some(w) = cache_write {
                    self.usage.cache_write_input_tokens = w;
                }
            }
            Delta::Stop(reason) => self.stop = Some(reason),
            Delta::Terminal => self.terminal = true,
        }
    }

    fn builder_id(index: u64, b: &ToolBuilder) -> String {
        b.id.clone().unwrap_or_else(|| format!("call_idx_{index}"))
    }

    fn announce(index: u64, b: &mut ToolBuilder, emit: &mut dyn FnMut(StreamEvent)) {
        if !b.started {
            if let Some(name) = &b.name {
                b.started = true;
                emit(StreamEvent::ToolStart {
                    id: Self::builder_id(index, b),
                    name: name.clone(),
                });
            }
        }
    }

    fn finish_complete_tools(&mut self, emit: &mut dyn FnMut(StreamEvent)) {
        let done: Vec<u64> = self
            .tools
            .iter()
            .filter(|(_, b)| b.complete)
            .map(|(i, _)| *i)
            .collect();
        for index in done {
            let Some(b) = self.tools.remove(&index) else {
                continue;
            };
            let Some(name) = b.name.clone() else {
                // A call without a name cannot run; it stays an orphan.
                self.tools.insert(
                    index,
                    ToolBuilder {
                        complete: false,
                        ..b
                    },
                );
                continue;
            };
            let arguments = if b.args.trim().is_empty() {
                Ok(Value::Object(Default::default()))
            } else {
                serde_json::from_str::<Value>(&b.args)
            };
            match arguments {
                Ok(arguments) => {
                    let call = ToolCall::new(Self::builder_id(index, &b), name, arguments);
                    emit(StreamEvent::ToolEnd { call: call.clone() });
                    self.finished.push(call);
                }
                Err(_) => {
                    self.tools.insert(
                        index,
                        ToolBuilder {
                            complete: false,
                            ..b
                        },
                    );
                }
            }
        }
    }

    /// The response; calls still open become orphans, never executable calls.
    pub(crate) fn finish(mut self) -> Result<ChatResponse, ProviderFailure> {
        if let Some(uncached) = self.uncached_input {
            self.usage.input_tokens = uncached
                .saturating_add(self.usage.cached_input_tokens)
                .saturating_add(self.usage.cache_write_input_tokens);
        }
        let orphaned_tool_calls: Vec<ToolCall> = self
            .tools
            .iter()
            .filter_map(|(index, b)| {
                b.name.as_ref().map(|name| {
                    ToolCall::new(
                        Self::builder_id(*index, b),
                        name.clone(),
                        Value::Object(Default::default()),
                    )
                })
            })
            .collect();
        let stop_reason = match self.stop {
            Some(StopReason::EndTurn) if !self.finished.is_empty() => StopReason::ToolUse,
            Some(reason) => reason,
            None if !self.finished.is_empty() => StopReason::ToolUse,
            None => StopReason::EndTurn,
        };
        Ok(ChatResponse {
            content: self.content,
            reasoning_content: (!self.reasoning.is_empty()).then_some(self.reasoning),
            tool_calls: self.finished,
            orphaned_tool_calls,
            usage: self.usage,
            stop_reason,
            buffered: false,
        })
    }
}
