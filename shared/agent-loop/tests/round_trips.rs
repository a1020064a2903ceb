//! Tool-call round trips over real HTTP for each protocol, streaming and not.

mod common;

use common::{ALL, dones, errors, provider, request, run};
use pulse_agent_loop::provider::{
    Message, Protocol, StreamEvent, ToolChoice, Usage, gemini::strip_additional_properties,
};
use pulse_test_support::provider_sim::{ProviderSim, Script, Turn, thought_signature};
use serde_json::{Value, json};

async fn round_trip(protocol: Protocol, stream: bool) {
    let sim = ProviderSim::start(Script::turns([
        Turn::text("Checking the host now.").with_tool("get_status", json!({"host": "db1"})),
        Turn::text("db1 is healthy and replicating."),
    ]))
    .await
    .expect("sim");
    let p = provider(&sim, protocol);
    let mut req = request(stream);

    let (events, first) = run(&p, &req).await;
    let first = first.unwrap_or_else(|e| panic!("{protocol:?} stream={stream}: {e}"));
    assert_eq!(first.content, "Checking the host now.");
    assert_eq!(first.tool_calls.len(), 1, "{protocol:?}");
    let call = first.tool_calls[0].clone();
    assert_eq!(call.name, "get_status");
    assert_eq!(call.arguments, json!({"host": "db1"}));
    assert!(first.orphaned_tool_calls.is_empty());
    assert!(events.contains(&StreamEvent::ToolStart {
        id: call.id.clone(),
        name: "get_status".into()
    }));
    assert!(events.contains(&StreamEvent::ToolEnd { call: call.clone() }));
    if stream && matches!(protocol, Protocol::OpenAiCompatible | Protocol::Anthropic) {
        // Argument fragments arrive as progress, and add up to the final arguments.
        let streamed: String = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolProgress {
                    id,
                    arguments_delta,
                } if *id == call.id => Some(arguments_delta.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(streamed, r#"{"host":"db1"}"#);
    }
    assert_eq!(dones(&events), 1);
    assert_eq!(errors(&events), 0);
    assert!(matches!(events.last(), Some(StreamEvent::Done { .. })));

    // Usage equals the simulator's tiktoken counts.
    let recorded = sim.requests()[0].usage.expect("usage recorded");
    assert_eq!(
        first.usage,
        Usage {
            input_tokens: recorded.input_tokens,
            output_tokens: recorded.output_tokens,
            cached_input_tokens: recorded.cached_input_tokens,
            cache_write_input_tokens: recorded.cache_write_input_tokens,
        }
    );
    assert_eq!(
        recorded.output_tokens,
        pulse_test_support::provider_sim::count_tokens("Checking the host now.")
            + pulse_test_support::provider_sim::count_tokens("get_status")
            + pulse_test_support::provider_sim::count_tokens(r#"{"host":"db1"}"#)
    );
    assert!(recorded.input_tokens > 0);

    req.messages.push(first.assistant_message());
    req.messages
        .push(Message::tool_result(call.id.clone(), "status: healthy"));
    let (events, second) = run(&p, &req).await;
    let second = second.expect("second turn");
    assert_eq!(second.content, "db1 is healthy and replicating.");
    assert!(second.tool_calls.is_empty());
    assert_eq!(dones(&events), 1);

    let requests = sim.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].stream, stream);
    let body = &requests[1].body;
    match protocol {
        Protocol::OpenAiCompatible => {
            assert_eq!(requests[1].path, "/v1/chat/completions");
            assert_eq!(
                requests[1].headers.get("authorization").map(String::as_str),
                Some("Bearer sk-test-key")
            );
            let msgs = body["messages"].as_array().expect("messages");
            let assistant = &msgs[2];
            assert_eq!(assistant["tool_calls"][0]["id"], json!(call.id));
            assert_eq!(
                assistant["tool_calls"][0]["function"]["arguments"],
                json!(r#"{"host":"db1"}"#)
            );
            assert_eq!(
                msgs[3],
                json!({"role": "tool", "tool_call_id": call.id, "content": "status: healthy"})
            );
        }
        Protocol::Anthropic => {
            assert_eq!(requests[1].path, "/v1/messages");
            assert_eq!(
                requests[1].headers.get("x-api-key").map(String::as_str),
                Some("sk-test-key")
            );
            assert!(requests[1].headers.contains_key("anthropic-version"));
            // The system prompt is one text block carrying a prompt-cache breakpoint.
            assert_eq!(
                body["system"],
                json!([{"type": "text", "text": "You watch infrastructure.",
                        "cache_control": {"type": "ephemeral"}}])
            );
            let msgs = body["messages"].as_array().expect("messages");
            assert_eq!(msgs[1]["role"], json!("assistant"));
            assert_eq!(msgs[1]["content"][1]["type"], json!("tool_use"));
            assert_eq!(msgs[1]["content"][1]["input"], json!({"host": "db1"}));
            assert_eq!(
                msgs[2],
                json!({"role": "user", "content": [{"type": "tool_result",
                       "tool_use_id": call.id, "content": "status: healthy", "is_error": false,
                       "cache_control": {"type": "ephemeral"}}]})
            );
        }
        Protocol::Gemini => {
            let action = if stream {
                ":streamGenerateContent?alt=sse"
            } else {
                ":generateContent"
            };
            assert_eq!(
                requests[1].path,
                format!("/v1beta/models/sim-model{action}")
            );
            assert_eq!(
                requests[1]
                    .headers
                    .get("x-goog-api-key")
                    .map(String::as_str),
                Some("sk-test-key")
            );
            let contents = body["contents"].as_array().expect("contents");
            assert_eq!(contents[1]["role"], json!("model"));
            assert_eq!(
                contents[1]["parts"][1]["functionCall"]["id"],
                json!(call.id)
            );
            // The thought signature travels back with its call.
            assert_eq!(
                contents[1]["parts"][1]["thoughtSignature"],
                json!(thought_signature(&call.id))
            );
            assert_eq!(
                contents[2],
                json!({"role": "user", "parts": [{"functionResponse": {"id": call.id,
                       "name": "get_status", "response": {"result": "status: healthy"}}}]})
            );
        }
        Protocol::Ollama => {
            assert_eq!(requests[1].path, "/api/chat");
            let msgs = body["messages"].as_array().expect("messages");
            assert_eq!(
                msgs[2]["tool_calls"][0]["function"]["arguments"],
                json!({"host": "db1"})
            );
            assert_eq!(
                msgs[3],
                json!({"role": "tool", "tool_name": "get_status", "content": "status: healthy"})
            );
        }
    }
}

#[tokio::test]
async fn openai_round_trip() {
    round_trip(Protocol::OpenAiCompatible, false).await;
    round_trip(Protocol::OpenAiCompatible, true).await;
}

#[tokio::test]
async fn anthropic_round_trip() {
    round_trip(Protocol::Anthropic, false).await;
    round_trip(Protocol::Anthropic, true).await;
}

#[tokio::test]
async fn gemini_round_trip() {
    round_trip(Protocol::Gemini, false).await;
    round_trip(Protocol::Gemini, true).await;
}

#[tokio::test]
async fn ollama_round_trip() {
    round_trip(Protocol::Ollama, false).await;
    round_trip(Protocol::Ollama, true).await;
}

#[tokio::test]
async fn tool_choice_required_maps_per_protocol() {
    for protocol in ALL {
        let sim = ProviderSim::start(Script::lazy("fine")).await.expect("sim");
        let p = provider(&sim, protocol);
        let mut req = request(false);
        req.tool_choice = ToolChoice::Required;
        run(&p, &req).await.1.expect("call");
        let body = &sim.requests()[0].body;
        assert!(body.get("tools").is_some(), "{protocol:?}");
        match protocol {
            Protocol::OpenAiCompatible => assert_eq!(body["tool_choice"], json!("required")),
            Protocol::Anthropic => assert_eq!(body["tool_choice"], json!({"type": "any"})),
            Protocol::Gemini => assert_eq!(
                body["toolConfig"],
                json!({"functionCallingConfig": {"mode": "ANY"}})
            ),
            // Ollama has no tool_choice; the tools are still offered.
            Protocol::Ollama => assert!(body.get("tool_choice").is_none()),
        }
    }
}

#[tokio::test]
async fn tool_choice_auto_is_explicit_where_the_protocol_has_it_and_none_omits_tools() {
    for protocol in ALL {
        let sim = ProviderSim::start(Script::lazy("fine")).await.expect("sim");
        let p = provider(&sim, protocol);
        let mut req = request(true);
        run(&p, &req).await.1.expect("auto");
        req.tool_choice = ToolChoice::None;
        run(&p, &req).await.1.expect("none");
        let requests = sim.requests();
        let auto = &requests[0].body;
        assert!(auto.get("tools").is_some(), "{protocol:?}");
        assert!(auto.get("toolConfig").is_none(), "{protocol:?}");
        match protocol {
            // Local OpenAI-compatible servers ignore `tools` without an explicit choice.
            Protocol::OpenAiCompatible => assert_eq!(auto["tool_choice"], json!("auto")),
            _ => assert!(auto.get("tool_choice").is_none(), "{protocol:?}"),
        }
        let none = &requests[1].body;
        assert!(none.get("tools").is_none(), "{protocol:?}: {none}");
        assert!(none.get("tool_choice").is_none(), "{protocol:?}");
        assert!(none.get("toolConfig").is_none(), "{protocol:?}");
    }
}

fn has_additional_properties(v: &Value) -> bool {
    match v {
        Value::Object(m) => {
            m.contains_key("additionalProperties") || m.values().any(has_additional_properties)
        }
        Value::Array(a) => a.iter().any(has_additional_properties),
        _ => false,
    }
}

#[tokio::test]
async fn additional_properties_stripped_only_for_gemini() {
    for protocol in ALL {
        let sim = ProviderSim::start(Script::lazy("fine")).await.expect("sim");
        let p = provider(&sim, protocol);
        run(&p, &request(false)).await.1.expect("call");
        let body = &sim.requests()[0].body;
        let stripped = !has_additional_properties(&body["tools"]);
        assert_eq!(stripped, protocol == Protocol::Gemini, "{protocol:?}");
        if protocol == Protocol::Gemini {
            let params = &body["tools"][0]["functionDeclarations"][0]["parameters"];
            assert_eq!(
                params["properties"]["filter"]["properties"]["kind"]["type"],
                json!("string")
            );
            assert_eq!(params["required"], json!(["host"]));
        }
    }
    let nested = json!({"anyOf": [{"additionalProperties": true, "type": "object"}]});
    assert_eq!(
        strip_additional_properties(&nested),
        json!({"anyOf": [{"type": "object"}]})
    );
}

#[tokio::test]
async fn gemini_preserves_function_call_ids() {
    for stream in [false, true] {
        let sim = ProviderSim::start(Script::turns([
            Turn::default()
                .with_tool_id("gem-call-7f3a", "get_status", json!({"host": "a"}))
                .with_tool_id("gem-call-9b21", "get_status", json!({"host": "b"})),
            Turn::text("both fine"),
        ]))
        .await
        .expect("sim");
        let p = provider(&sim, Protocol::Gemini);
        let mut req = request(stream);
        let first = run(&p, &req).await.1.expect("first");
        let ids: Vec<&str> = first.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["gem-call-7f3a", "gem-call-9b21"]);
        req.messages.push(first.assistant_message());
        req.messages
            .push(Message::tool_result("gem-call-9b21", "b ok"));
        req.messages
            .push(Message::tool_result("gem-call-7f3a", "a ok"));
        run(&p, &req).await.1.expect("second");
        let body = &sim.requests()[1].body;
        let parts = &body["contents"][2]["parts"];
        assert_eq!(parts[0]["functionResponse"]["id"], json!("gem-call-9b21"));
        assert_eq!(parts[1]["functionResponse"]["id"], json!("gem-call-7f3a"));
        assert_eq!(parts[1]["functionResponse"]["name"], json!("get_status"));
    }
}

#[tokio::test]
async fn deepseek_reasoning_content_carried_to_next_turn() {
    for stream in [false, true] {
        let sim = ProviderSim::start(Script::turns([
            Turn::tool("get_status", json!({"host": "db1"}))
                .with_reasoning("The user asks about db1, so I check its status."),
            Turn::text("healthy"),
        ]))
        .await
        .expect("sim");
        let p = provider(&sim, Protocol::OpenAiCompatible);
        let mut req = request(stream);
        let (events, first) = run(&p, &req).await;
        let first = first.expect("first");
        assert_eq!(
            first.reasoning_content.as_deref(),
            Some("The user asks about db1, so I check its status.")
        );
        // Reasoning never becomes answer text.
        assert_eq!(first.content, "");
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, StreamEvent::Content { .. }))
        );
        req.messages.push(first.assistant_message());
        req.messages
            .push(Message::tool_result(first.tool_calls[0].id.clone(), "ok"));
        run(&p, &req).await.1.expect("second");
        let msgs = &sim.requests()[1].body["messages"];
        assert_eq!(
            msgs[2]["reasoning_content"],
            json!("The user asks about db1, so I check its status.")
        );
        assert!(msgs[1].get("reasoning_content").is_none());
    }
}

#[tokio::test]
async fn ollama_sends_keep_alive_and_num_ctx() {
    let sim = ProviderSim::start(Script::lazy("fine")).await.expect("sim");
    pulse_test_support::install_crypto_provider();
    let mut cfg = sim.route_config(Protocol::Ollama);
    cfg.ollama_keep_alive = Some("10m".into());
    cfg.ollama_num_ctx = Some(16384);
    cfg.ollama_think = Some(false);
    let p = pulse_agent_loop::provider::Provider::new(cfg).expect("provider");
    run(&p, &request(true)).await.1.expect("call");
    let body = &sim.requests()[0].body;
    assert_eq!(body["keep_alive"], json!("10m"));
    assert_eq!(body["think"], json!(false));
    assert_eq!(body["options"]["num_ctx"], json!(16384));
    assert_eq!(body["options"]["num_predict"], json!(512));

    // Unset, none of them is sent: the server's own defaults apply.
    sim.clear_requests();
    let plain = pulse_agent_loop::provider::Provider::new(sim.route_config(Protocol::Ollama))
        .expect("provider");
    run(&plain, &request(true)).await.1.expect("call");
    let body = &sim.requests()[0].body;
    assert!(
        body.get("keep_alive").is_none() && body.get("think").is_none(),
        "{body}"
    );
    assert!(body["options"].get("num_ctx").is_none(), "{body}");
}

#[tokio::test]
async fn looping_and_lazy_scripts_behave_as_named() {
    let sim = ProviderSim::start(Script::looping("get_status", json!({"host": "db1"})))
        .await
        .expect("sim");
    let p = provider(&sim, Protocol::OpenAiCompatible);
    for _ in 0..3 {
        let r = run(&p, &request(true)).await.1.expect("call");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].arguments, json!({"host": "db1"}));
    }
    let sim = ProviderSim::start(Script::lazy("all good"))
        .await
        .expect("sim");
    let p = provider(&sim, Protocol::Anthropic);
    for _ in 0..2 {
        let r = run(&p, &request(false)).await.1.expect("call");
        assert!(r.tool_calls.is_empty());
        assert_eq!(r.content, "all good");
    }
}

#[tokio::test]
async fn openai_compatible_without_api_key_sends_no_authorization() {
    let sim = ProviderSim::start(Script::lazy("local answer"))
        .await
        .expect("sim");
    pulse_test_support::install_crypto_provider();
    let mut cfg = sim.route_config(Protocol::OpenAiCompatible);
    cfg.api_key = None;
    let p = pulse_agent_loop::provider::Provider::new(cfg).expect("provider");
    let r = run(&p, &request(true)).await.1.expect("call");
    assert_eq!(r.content, "local answer");
    assert!(!sim.requests()[0].headers.contains_key("authorization"));
}

#[tokio::test]
async fn tool_results_name_their_own_call_when_ids_repeat_across_turns() {
    // Ollama (and Gemini without ids) calls are numbered per turn: both turns have a `call_1`.
    let turn = |name: &str| Message::Assistant {
        content: String::new(),
        tool_calls: vec![pulse_agent_loop::provider::ToolCall::new(
            "call_1",
            name,
            json!({"host": "db1"}),
        )],
        reasoning_content: None,
    };
    for protocol in [Protocol::Ollama, Protocol::Gemini] {
        let sim = ProviderSim::start(Script::lazy("done")).await.expect("sim");
        let p = provider(&sim, protocol);
        let mut req = request(false);
        req.messages.extend([
            turn("get_status"),
            Message::tool_result("call_1", "status: degraded"),
            turn("get_logs"),
            Message::tool_result("call_1", "log: disk full"),
        ]);
        run(&p, &req).await.1.expect("call");
        let body = &sim.requests()[0].body;
        let names: Vec<Value> = match protocol {
            Protocol::Ollama => body["messages"]
                .as_array()
                .expect("messages")
                .iter()
                .filter(|m| m["role"] == "tool")
                .map(|m| m["tool_name"].clone())
                .collect(),
            _ => body["contents"]
                .as_array()
                .expect("contents")
                .iter()
                .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
                .filter_map(|part| part.get("functionResponse").map(|r| r["name"].clone()))
                .collect(),
        };
        assert_eq!(
            names,
            [json!("get_status"), json!("get_logs")],
            "{protocol:?}"
        );
    }
}
