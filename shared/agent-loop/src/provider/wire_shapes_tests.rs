//! Snapshots of each protocol's request shape: a change here is a change to a wire contract.

use serde_json::{Value, json};

use super::*;

fn conversation(tool_choice: ToolChoice, stream: bool) -> ChatRequest {
    ChatRequest {
        model: "m1".into(),
        messages: vec![
            Message::system("sys"),
            Message::user("check db1"),
            Message::Assistant {
                content: "looking".into(),
                tool_calls: vec![
                    ToolCall {
                        thought_signature: Some("sig-1".into()),
                        ..ToolCall::new("c1", "get_status", json!({"host": "db1"}))
                    },
                    ToolCall::new("c2", "get_logs", json!({})),
                ],
                reasoning_content: Some("think".into()),
            },
            Message::Tool(ToolResult {
                call_id: "c1".into(),
                content: "down".into(),
                is_error: true,
            }),
        ],
        tools: vec![Tool {
            name: "get_status".into(),
            description: "status".into(),
            parameters: json!({"type": "object", "properties": {"host": {"type": "string"}},
                               "additionalProperties": false}),
        }],
        tool_choice,
        max_output_tokens: Some(100),
        temperature: None,
        stream,
    }
}

fn shape(protocol: Protocol, req: &ChatRequest) -> Value {
    let mut config = ProviderConfig::new(protocol, "http://sim").with_api_key("k");
    config.ollama_num_ctx = Some(8192);
    let provider = Provider::new(config).expect("client");
    let wire = provider.build(req).expect("build");
    let headers: Vec<&str> = wire.headers.iter().map(|(n, _)| *n).collect();
    json!({"url": wire.url, "headers": headers, "body": wire.body})
}

#[test]
fn request_shapes() {
    for (name, protocol) in [
        ("openai", Protocol::OpenAiCompatible),
        ("anthropic", Protocol::Anthropic),
        ("gemini", Protocol::Gemini),
        ("ollama", Protocol::Ollama),
    ] {
        insta::assert_json_snapshot!(
            format!("{name}_required_stream"),
            shape(protocol, &conversation(ToolChoice::Required, true))
        );
        insta::assert_json_snapshot!(
            format!("{name}_none"),
            shape(protocol, &conversation(ToolChoice::None, false))
        );
    }
}
