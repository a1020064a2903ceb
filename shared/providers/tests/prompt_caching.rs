//! Prompt caching on the wire: the breakpoints Anthropic requests carry, and the cached input
//! tokens each protocol reports, streamed and not, normalised into one [`Usage`].

use pulse_providers::{
    ChatRequest, Message, Progress, Protocol, ProviderConfig, StreamParser, Tool, ToolCall,
    ToolChoice, Usage, build, parse_response,
};
use serde_json::{Value, json};

fn request() -> ChatRequest {
    let tool = |name: &str| Tool {
        name: name.to_owned(),
        description: format!("{name} tool"),
        parameters: json!({"type": "object", "properties": {}}),
    };
    ChatRequest {
        model: "m1".to_owned(),
        messages: vec![
            Message::system("sys"),
            Message::user("seed"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall::new("c1", "read", json!({}))],
                reasoning_content: None,
            },
            Message::tool_result("c1", "ok"),
        ],
        tools: vec![tool("read"), tool("report")],
        tool_choice: ToolChoice::Auto,
        max_output_tokens: Some(100),
        temperature: None,
        stream: false,
    }
}

fn whole(protocol: Protocol, body: Value) -> Usage {
    parse_response(protocol, body.to_string().as_bytes(), &mut |_| {})
        .expect("a response")
        .usage
}

fn streamed(protocol: Protocol, frames: &[Value]) -> Usage {
    let mut parser = StreamParser::new(protocol);
    for frame in frames {
        let bytes = format!("data: {frame}\n\n");
        if parser.push(bytes.as_bytes(), &mut |_| {}).expect("a frame") == Progress::Terminal {
            break;
        }
    }
    parser.finish(&mut |_| {}).expect("a response").usage
}

/// Every JSON object in `v` (depth first) carrying a `cache_control` key, as a path.
fn breakpoints(v: &Value, path: String, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            if map.contains_key("cache_control") {
                out.push(path.clone());
            }
            for (k, child) in map {
                breakpoints(child, format!("{path}/{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                breakpoints(child, format!("{path}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn anthropic_marks_the_tools_the_system_prompt_and_the_conversation_end() {
    let config = ProviderConfig::new(Protocol::Anthropic, "http://sim");
    let body = build(&config, &request()).expect("built").body;
    let mut marks = Vec::new();
    breakpoints(&body, String::new(), &mut marks);
    marks.sort();
    assert_eq!(
        marks,
        ["/messages/2/content/0", "/system/0", "/tools/1"],
        "{body:#}"
    );
    assert_eq!(body["system"][0]["text"], "sys");
    assert_eq!(
        body["system"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert_eq!(body["messages"][2]["content"][0]["type"], "tool_result");
    // Anthropic allows at most four breakpoints per request.
    assert!(marks.len() <= 4);
}

#[test]
fn other_protocols_carry_no_breakpoints() {
    for protocol in [
        Protocol::OpenAiCompatible,
        Protocol::Gemini,
        Protocol::Ollama,
    ] {
        let body = build(&ProviderConfig::new(protocol, "http://sim"), &request())
            .expect("built")
            .body;
        let mut marks = Vec::new();
        breakpoints(&body, String::new(), &mut marks);
        assert!(marks.is_empty(), "{protocol:?}: {marks:?}");
    }
}

fn cached(input: u64, output: u64, read: u64, write: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        cached_input_tokens: read,
        cache_write_input_tokens: write,
    }
}

#[test]
fn openai_reports_cached_tokens_inside_prompt_tokens() {
    let usage = json!({"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
                       "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0}});
    let body = json!({"choices": [{"message": {"role": "assistant", "content": "ok"},
                                   "finish_reason": "stop"}], "usage": usage});
    assert_eq!(
        whole(Protocol::OpenAiCompatible, body),
        cached(2006, 300, 1920, 0)
    );
    let frames = [
        json!({"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        json!({"choices": [], "usage": usage}),
    ];
    let got = streamed(Protocol::OpenAiCompatible, &frames);
    assert_eq!(got, cached(2006, 300, 1920, 0));
    assert_eq!(got.uncached_input_tokens(), 86);
    // A compatible server without caching details: nothing cached.
    let plain = json!({"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 2}});
    assert_eq!(whole(Protocol::OpenAiCompatible, plain), Usage::new(10, 2));
}

#[test]
fn anthropic_input_is_the_uncached_rest_plus_cache_reads_and_writes() {
    let body = json!({"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                      "usage": {"input_tokens": 50, "output_tokens": 7,
                                "cache_read_input_tokens": 1800,
                                "cache_creation_input_tokens": 248}});
    let got = whole(Protocol::Anthropic, body);
    assert_eq!(got, cached(2098, 7, 1800, 248));
    assert_eq!(got.uncached_input_tokens(), 50);
    let frames = [
        json!({"type": "message_start", "message": {"id": "msg_1", "usage": {
            "input_tokens": 50, "output_tokens": 1,
            "cache_read_input_tokens": 1800, "cache_creation_input_tokens": 248}}}),
        json!({"type": "content_block_start", "index": 0,
               "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "text_delta", "text": "ok"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
               "usage": {"output_tokens": 7}}),
        json!({"type": "message_stop"}),
    ];
    assert_eq!(
        streamed(Protocol::Anthropic, &frames),
        cached(2098, 7, 1800, 248)
    );
}

#[test]
fn gemini_reports_cached_content_inside_the_prompt_count() {
    let usage = json!({"promptTokenCount": 3000, "candidatesTokenCount": 12,
                       "cachedContentTokenCount": 2048, "totalTokenCount": 3012});
    let body = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]},
                                      "finishReason": "STOP"}], "usageMetadata": usage});
    assert_eq!(
        whole(Protocol::Gemini, body.clone()),
        cached(3000, 12, 2048, 0)
    );
    assert_eq!(
        streamed(Protocol::Gemini, &[body]),
        cached(3000, 12, 2048, 0)
    );
}

#[test]
fn usage_adds_every_count() {
    let mut total = cached(100, 10, 60, 20);
    total += cached(5, 1, 0, 5);
    assert_eq!(total, cached(105, 11, 60, 25));
    // A provider reporting more cached than prompt tokens never underflows.
    assert_eq!(cached(10, 0, 30, 0).uncached_input_tokens(), 0);
}
