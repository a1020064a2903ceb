//! Shared helpers for the transport tests against the provider simulator.
#![allow(dead_code)]

use pulse_agent_loop::provider::{
    ChatRequest, ChatResponse, Message, Protocol, Provider, ProviderFailure, StreamEvent, Tool,
    ToolChoice,
};
use pulse_test_support::provider_sim::ProviderSim;
use serde_json::json;

pub const ALL: [Protocol; 4] = [
    Protocol::OpenAiCompatible,
    Protocol::Anthropic,
    Protocol::Gemini,
    Protocol::Ollama,
];

pub fn provider(sim: &ProviderSim, protocol: Protocol) -> Provider {
    pulse_test_support::install_crypto_provider();
    Provider::new(sim.route_config(protocol)).expect("provider")
}

pub fn status_tool() -> Tool {
    Tool {
        name: "get_status".into(),
        description: "Current status of a host".into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "host": {"type": "string"},
                "filter": {"type": "object", "properties": {"kind": {"type": "string"}},
                           "additionalProperties": false}
            },
            "required": ["host"],
            "additionalProperties": false
        }),
    }
}

pub fn request(stream: bool) -> ChatRequest {
    ChatRequest {
        model: "sim-model".into(),
        messages: vec![
            Message::system("You watch infrastructure."),
            Message::user("Is db1 healthy?"),
        ],
        tools: vec![status_tool()],
        tool_choice: ToolChoice::Auto,
        max_output_tokens: Some(512),
        temperature: Some(0.2),
        stream,
    }
}

/// Runs one call and returns every event with the outcome.
pub async fn run(
    provider: &Provider,
    request: &ChatRequest,
) -> (Vec<StreamEvent>, Result<ChatResponse, ProviderFailure>) {
    let mut events = Vec::new();
    let result = provider
        .chat(request, &mut |ev: StreamEvent| events.push(ev))
        .await;
    (events, result)
}

pub fn count<F: Fn(&StreamEvent) -> bool>(events: &[StreamEvent], f: F) -> usize {
    events.iter().filter(|e| f(e)).count()
}

pub fn errors(events: &[StreamEvent]) -> usize {
    count(events, |e| matches!(e, StreamEvent::Error { .. }))
}

pub fn dones(events: &[StreamEvent]) -> usize {
    count(events, |e| matches!(e, StreamEvent::Done { .. }))
}

pub fn retries(events: &[StreamEvent]) -> usize {
    count(events, |e| matches!(e, StreamEvent::ProviderRetry { .. }))
}
