//! A protocol-neutral view of a chat request: the tools offered, the texts sent, and the tool
//! calls and results already in the conversation.

use serde_json::Value;

use super::SimProtocol;

/// A tool the request offers the model.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferedTool {
    pub name: String,
    /// The JSON schema of its arguments (`Null` when none was given).
    pub schema: Value,
}

/// A tool call the model made earlier in the conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct PastCall {
    pub name: String,
    pub arguments: Value,
}

/// What the simulated model can see of a request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conversation {
    pub tools: Vec<OfferedTool>,
    pub system: Vec<String>,
    pub user: Vec<String>,
    pub tool_results: Vec<String>,
    pub past_calls: Vec<PastCall>,
}

impl Conversation {
    pub fn from_request(protocol: SimProtocol, body: &Value) -> Self {
        let mut c = Self::default();
        match protocol {
            SimProtocol::OpenAi | SimProtocol::Ollama => c.read_openai_like(body),
            SimProtocol::Anthropic => c.read_anthropic(body),
            SimProtocol::Gemini => c.read_gemini(body),
        }
        c
    }

    pub fn offers(&self, name: &str) -> Option<&OfferedTool> {
        self.tools.iter().find(|t| t.name == name)
    }

    pub fn calls_of(&self, name: &str) -> usize {
        self.past_calls.iter().filter(|c| c.name == name).count()
    }

    /// The first user message's text, the key of a conversation's session.
    pub fn first_user(&self) -> &str {
        self.user.first().map(String::as_str).unwrap_or_default()
    }

    fn read_openai_like(&mut self, body: &Value) {
        for tool in array(body.get("tools")) {
            let f = tool.get("function").unwrap_or(tool);
            if let Some(name) = f.get("name").and_then(Value::as_str) {
                self.tools.push(OfferedTool {
                    name: name.to_owned(),
                    schema: f.get("parameters").cloned().unwrap_or(Value::Null),
                });
            }
        }
        for m in array(body.get("messages")) {
            let text = text_of(m.get("content"));
            match m.get("role").and_then(Value::as_str).unwrap_or_default() {
                "system" | "developer" => self.system.push(text),
                "user" => self.user.push(text),
                "tool" | "function" => self.tool_results.push(text),
                "assistant" => {
                    for call in array(m.get("tool_calls")) {
                        let f = call.get("function").unwrap_or(call);
                        let Some(name) = f.get("name").and_then(Value::as_str) else {
                            continue;
                        };
                        let arguments = match f.get("arguments") {
                            Some(Value::String(s)) => {
                                serde_json::from_str(s).unwrap_or(Value::String(s.clone()))
                            }
                            Some(v) => v.clone(),
                            None => Value::Null,
                        };
                        self.past_calls.push(PastCall {
                            name: name.to_owned(),
                            arguments,
                        });
                    }
                }
                _ => {}
            }
        }
    }

    fn read_anthropic(&mut self, body: &Value) {
        for tool in array(body.get("tools")) {
            if let Some(name) = tool.get("name").and_then(Value::as_str) {
                self.tools.push(OfferedTool {
                    name: name.to_owned(),
                    schema: tool.get("input_schema").cloned().unwrap_or(Value::Null),
                });
            }
        }
        if let Some(system) = body.get("system") {
            self.system.push(text_of(Some(system)));
        }
        for m in array(body.get("messages")) {
            let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
            let content = m.get("content");
            if let Some(Value::String(s)) = content {
                if role == "user" {
                    self.user.push(s.clone());
                }
                continue;
            }
            let mut user_text = Vec::new();
            for block in array(content) {
                match block
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                {
                    "text" if role == "user" => {
                        user_text.push(text_of(block.get("text")));
                    }
                    "tool_result" => self.tool_results.push(text_of(block.get("content"))),
                    "tool_use" => {
                        if let Some(name) = block.get("name").and_then(Value::as_str) {
                            self.past_calls.push(PastCall {
                                name: name.to_owned(),
                                arguments: block.get("input").cloned().unwrap_or(Value::Null),
                            });
                        }
                    }
                    _ => {}
                }
            }
            if !user_text.is_empty() {
                self.user.push(user_text.join("\n"));
            }
        }
    }

    fn read_gemini(&mut self, body: &Value) {
        for tool in array(body.get("tools")) {
            for f in array(tool.get("functionDeclarations")) {
                if let Some(name) = f.get("name").and_then(Value::as_str) {
                    // A plain JSON schema comes as `parametersJsonSchema`; the API also takes
                    // proto field names (`parameters_json_schema`), which clients send.
                    let schema = [
                        "parameters",
                        "parametersJsonSchema",
                        "parameters_json_schema",
                    ]
                    .iter()
                    .find_map(|k| f.get(*k));
                    self.tools.push(OfferedTool {
                        name: name.to_owned(),
                        schema: schema.cloned().unwrap_or(Value::Null),
                    });
                }
            }
        }
        if let Some(si) = body.get("systemInstruction") {
            self.system.push(parts_text(si));
        }
        for content in array(body.get("contents")) {
            let role = content
                .get("role")
                .and_then(Value::as_str)
                .unwrap_or("user");
            let mut user_text = Vec::new();
            for part in array(content.get("parts")) {
                if let Some(t) = part.get("text").and_then(Value::as_str) {
                    if role == "user" {
                        user_text.push(t.to_owned());
                    }
                }
                if let Some(fc) = part.get("functionCall") {
                    if let Some(name) = fc.get("name").and_then(Value::as_str) {
                        self.past_calls.push(PastCall {
                            name: name.to_owned(),
                            arguments: fc.get("args").cloned().unwrap_or(Value::Null),
                        });
                    }
                }
                if let Some(fr) = part.get("functionResponse") {
                    let response = fr.get("response").unwrap_or(fr);
                    // `{"content": "..."}` and the like wrap the tool's own text.
                    let inner = ["content", "result", "output"]
                        .iter()
                        .find_map(|k| response.get(*k).filter(|v| v.is_string()));
                    self.tool_results
                        .push(text_of(Some(inner.unwrap_or(response))));
                }
            }
            if !user_text.is_empty() {
                self.user.push(user_text.join("\n"));
            }
        }
    }
}

fn array(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn parts_text(v: &Value) -> String {
    array(v.get("parts"))
        .iter()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text of a content value: a string, an array of text blocks, or any JSON as text.
fn text_of(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(|b| match b {
                Value::String(s) => s.clone(),
                other => match other.get("text").and_then(Value::as_str) {
                    Some(t) => t.to_owned(),
                    None => other.to_string(),
                },
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => other.to_string(),
    }
}
