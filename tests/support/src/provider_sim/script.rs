//! What the simulator answers, request by request.

use std::time::Duration;

use serde_json::Value;

use super::tokens::count_tokens;

/// A tool call the scripted model makes. Without an id, the simulator makes one up
/// (`call_<request number>_<position>`).
#[derive(Debug, Clone, PartialEq)]
pub struct SimToolCall {
    pub id: Option<String>,
    pub name: String,
    pub arguments: Value,
}

/// One scripted model turn: text and/or tool calls, optionally with reasoning.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turn {
    pub text: String,
    pub reasoning: Option<String>,
    pub tool_calls: Vec<SimToolCall>,
}

impl Turn {
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }

    pub fn tool(name: impl Into<String>, arguments: Value) -> Self {
        Self::default().with_tool(name, arguments)
    }

    /// A Patrol Watch model's first read, the inventory list: Patrol sends a model that
    /// concludes before any read back to read once, and refuses a report with no read behind
    /// it, so a scripted Watch run opens with this turn.
    pub fn watch_read() -> Self {
        Self::tool("pulse_query", serde_json::json!({"action": "list"}))
    }

    pub fn with_tool(mut self, name: impl Into<String>, arguments: Value) -> Self {
        self.tool_calls.push(SimToolCall {
            id: None,
            name: name.into(),
            arguments,
        });
        self
    }

    pub fn with_tool_id(
        mut self,
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: Value,
    ) -> Self {
        self.tool_calls.push(SimToolCall {
            id: Some(id.into()),
            name: name.into(),
            arguments,
        });
        self
    }

    pub fn with_reasoning(mut self, reasoning: impl Into<String>) -> Self {
        self.reasoning = Some(reasoning.into());
        self
    }

    /// Output tokens the simulator reports for this turn: text, reasoning, and each call's
    /// name and JSON arguments, counted with o200k_base.
    pub fn output_tokens(&self) -> u64 {
        let mut n = count_tokens(&self.text);
        if let Some(r) = &self.reasoning {
            n += count_tokens(r);
        }
        for c in &self.tool_calls {
            n += count_tokens(&c.name) + count_tokens(&c.arguments.to_string());
        }
        n
    }
}

/// How a turn is delivered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Delivery {
    /// Delay before the response headers (a model loading on a local server).
    pub cold_start: Duration,
    /// Send this many stream frames, then go silent without closing.
    pub stall_after_frames: Option<usize>,
    /// End the stream without its terminal marker and without the last line ending.
    pub truncate: bool,
    /// Close the stream cleanly after this many frames, before the model finished its turn.
    pub cut_after_frames: Option<usize>,
    /// Insert a frame of broken JSON (non-streaming: a cut-off JSON body).
    pub malformed_json: bool,
    /// Leave each tool call unfinished: all but the last fragment of its arguments, and
    /// (Anthropic) no block stop.
    /// Honoured by the OpenAI and Anthropic streams.
    pub orphan_tool_calls: bool,
    /// Stream each call's JSON arguments in this many fragments (default 2). Honoured by the
    /// OpenAI and Anthropic streams; Gemini and Ollama send a call's arguments whole.
    pub argument_fragments: Option<usize>,
}

impl Delivery {
    /// The fragments a stream sends a call's JSON arguments in.
    pub fn fragments_of(&self, arguments: &Value) -> Vec<String> {
        split_chars(&arguments.to_string(), self.argument_fragments.unwrap_or(2))
    }
}

/// Splits text into `parts` pieces of near-equal character counts (at least one piece; pieces
/// may be empty when the text is shorter than `parts`).
pub fn split_chars(text: &str, parts: usize) -> Vec<String> {
    let parts = parts.max(1);
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    (0..parts)
        .map(|i| chars[i * n / parts..(i + 1) * n / parts].iter().collect())
        .collect()
}

/// An error answer.
#[derive(Debug, Clone, PartialEq)]
pub struct SimError {
    pub status: u16,
    pub body: SimErrorBody,
    pub retry_after_secs: Option<u64>,
}

/// The body of an error answer.
#[derive(Debug, Clone, PartialEq)]
pub enum SimErrorBody {
    /// A provider error message, rendered in the requested protocol's own error shape.
    Message { code: String, message: String },
    /// Exactly these bytes (an HTML proxy page, say).
    Raw { content_type: String, body: String },
}

impl SimError {
    /// An error in the protocol's own JSON shape.
    pub fn message(status: u16, code: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            body: SimErrorBody::Message {
                code: code.to_owned(),
                message: message.into(),
            },
            retry_after_secs: None,
        }
    }

    pub fn raw(status: u16, content_type: &str, body: impl Into<String>) -> Self {
        Self {
            status,
            body: SimErrorBody::Raw {
                content_type: content_type.to_owned(),
                body: body.into(),
            },
            retry_after_secs: None,
        }
    }

    /// A proxy's HTML 502 page.
    pub fn html_502() -> Self {
        Self::raw(
            502,
            "text/html",
            "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\
             <body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx/1.25.3 \
             edge-proxy-internal-7</center></body></html>\n",
        )
    }

    pub fn unauthorized() -> Self {
        Self::message(401, "authentication_error", "invalid x-api-key")
    }

    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Self {
            retry_after_secs: Some(retry_after_secs),
            ..Self::message(
                429,
                "rate_limit_error",
                "Rate limit reached for requests per minute",
            )
        }
    }

    pub fn model_not_found(model: &str) -> Self {
        Self::message(404, "not_found_error", format!("model '{model}' not found"))
    }
}

/// One scripted answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Reply { turn: Turn, delivery: Delivery },
    Error(SimError),
}

impl Step {
    /// Whether this step, used as a tool-offer reply, answers a request seeing `conv`.
    pub(crate) fn answers(&self, conv: &super::conversation::Conversation) -> bool {
        let called = match self {
            Step::Reply { turn, .. } => turn.tool_calls.first().map(|c| c.name.as_str()),
            Step::Error(_) => None,
        };
        match called {
            Some(name) => conv.offers(name).is_some(),
            None => !conv.tools.is_empty(),
        }
    }

    pub fn reply(turn: Turn) -> Self {
        Self::Reply {
            turn,
            delivery: Delivery::default(),
        }
    }

    pub fn delivered(turn: Turn, delivery: Delivery) -> Self {
        Self::Reply { turn, delivery }
    }
}

/// The answers, one step per request in order. After the last step the simulator repeats it
/// when the script loops, and otherwise answers 500 "script exhausted".
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    steps: Vec<Step>,
    repeat_last: bool,
    /// Answers every request that offers tools, outside the step order.
    tool_offer_reply: Option<Step>,
    /// What the model list endpoints list; `None`: every built-in behaviour's model.
    models: Option<Vec<String>>,
    /// What every model list endpoint answers instead of the list.
    list_error: Option<SimError>,
}

impl Script {
    pub fn steps(steps: impl IntoIterator<Item = Step>) -> Self {
        Self {
            steps: steps.into_iter().collect(),
            repeat_last: false,
            tool_offer_reply: None,
            models: None,
            list_error: None,
        }
    }

    /// A scripted sequence of turns, each delivered normally.
    pub fn turns(turns: impl IntoIterator<Item = Turn>) -> Self {
        Self::steps(turns.into_iter().map(Step::reply))
    }

    /// A model that answers in prose and never calls a tool, however often it is asked.
    pub fn lazy(text: impl Into<String>) -> Self {
        Self {
            steps: vec![Step::reply(Turn::text(text))],
            repeat_last: true,
            tool_offer_reply: None,
            models: None,
            list_error: None,
        }
    }

    /// A model that gives the same turn, however often it is asked.
    pub fn always(turn: Turn) -> Self {
        Self {
            steps: vec![Step::reply(turn)],
            repeat_last: true,
            tool_offer_reply: None,
            models: None,
            list_error: None,
        }
    }

    /// A model that calls the same tool with the same arguments forever.
    pub fn looping(tool: impl Into<String>, arguments: Value) -> Self {
        Self {
            steps: vec![Step::reply(Turn::tool(tool, arguments))],
            repeat_last: true,
            tool_offer_reply: None,
            models: None,
            list_error: None,
        }
    }

    /// Answers every request that offers the tool `step` calls (a provider preflight's probe
    /// tool, say) with `step`, without advancing the script and before any `sim:` behaviour:
    /// the scripted steps (or the behaviour) then answer the other requests, however many such
    /// requests arrive in between. A `step` that calls no tool answers every request that
    /// offers any tool.
    pub fn with_tool_offer_reply(mut self, step: Step) -> Self {
        self.tool_offer_reply = Some(step);
        self
    }

    /// The model list endpoints list `models` (in every protocol's shape).
    pub fn with_models<S: Into<String>>(mut self, models: impl IntoIterator<Item = S>) -> Self {
        self.models = Some(models.into_iter().map(Into::into).collect());
        self
    }

    /// Every model list endpoint answers `error` (a rejected key, a proxy's page, ...).
    pub fn with_list_error(mut self, error: SimError) -> Self {
        self.list_error = Some(error);
        self
    }

    /// What the model list endpoints list.
    pub(crate) fn models(&self) -> Vec<String> {
        match &self.models {
            Some(models) => models.clone(),
            None => super::models::BEHAVIOUR_MODELS
                .iter()
                .map(|m| (*m).to_owned())
                .collect(),
        }
    }

    pub(crate) fn list_error(&self) -> Option<&SimError> {
        self.list_error.as_ref()
    }

    pub(crate) fn tool_offer_reply(&self) -> Option<&Step> {
        self.tool_offer_reply.as_ref()
    }

    pub(crate) fn step(&self, request_no: usize) -> Step {
        match self.steps.get(request_no) {
            Some(step) => step.clone(),
            None if self.repeat_last && !self.steps.is_empty() => {
                self.steps[self.steps.len() - 1].clone()
            }
            None => Step::Error(SimError::message(
                500,
                "api_error",
                "provider simulator script exhausted",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_split_into_the_asked_number_of_fragments_at_character_boundaries() {
        assert_eq!(split_chars("abcdefg", 3), ["ab", "cd", "efg"]);
        assert_eq!(split_chars("ab", 1), ["ab"]);
        assert_eq!(split_chars("ab", 0), ["ab"]);
        let text = "{\"k\":\"ünïcode ✓\"}";
        let parts = split_chars(text, 7);
        assert_eq!(parts.len(), 7);
        assert_eq!(parts.concat(), text);
        // The default is two halves.
        let args = serde_json::json!({"host": "db1"});
        assert_eq!(
            Delivery::default().fragments_of(&args),
            ["{\"host\"", ":\"db1\"}"]
        );
    }
}
