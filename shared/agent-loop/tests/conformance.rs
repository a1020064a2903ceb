//! Transport conformance: each of the four wire protocols against the provider simulator over
//! real HTTP, one test per (protocol, case) cell, asserting the exact sequence of neutral events a
//! call emits and its one terminal `Done` or `Error`.

mod common;

use std::time::Duration;

use pulse_agent_loop::provider::{
    ChatRequest, ChatResponse, FailureCause, Protocol, Provider, ProviderFailure, StopReason,
    StreamEvent, Timeouts, Usage,
};
use pulse_test_support::provider_sim::{
    Delivery, ProviderSim, Script, SimError, Step, Turn, split_chars, thought_signature,
};
use serde_json::{Value, json};

/// Streamed in three pieces by every protocol: two words per piece.
const ANSWER: &str = "db1 is healthy and replicating.";
const ANSWER_PIECES: [&str; 3] = ["db1 is ", "healthy and ", "replicating."];
const LOOKING: &str = "Checking both hosts.";
const LOOKING_PIECES: [&str; 2] = ["Checking both ", "hosts."];
/// Wait the simulator's 429 asks for (`retry-after: 1`).
const RATE_LIMIT_WAIT_MS: u64 = 1_000;

/// A neutral event with what the conformance asserts of it.
#[derive(Debug, Clone, PartialEq)]
enum Ev {
    Content(String),
    ToolStart {
        id: String,
        name: String,
    },
    ToolArgs {
        id: String,
        delta: String,
    },
    ToolEnd {
        id: String,
        name: String,
        arguments: Value,
        signature: Option<String>,
    },
    Retry {
        attempt: u32,
        max_attempts: u32,
        retry_after_ms: u64,
    },
    Done {
        usage: Usage,
        stop: StopReason,
    },
    Error {
        cause: FailureCause,
        status: Option<u16>,
    },
    Other(String),
}

fn neutral(event: &StreamEvent) -> Ev {
    match event {
        StreamEvent::Content { text } => Ev::Content(text.clone()),
        StreamEvent::ToolStart { id, name } => Ev::ToolStart {
            id: id.clone(),
            name: name.clone(),
        },
        StreamEvent::ToolProgress {
            id,
            arguments_delta,
        } => Ev::ToolArgs {
            id: id.clone(),
            delta: arguments_delta.clone(),
        },
        StreamEvent::ToolEnd { call } => Ev::ToolEnd {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
            signature: call.thought_signature.clone(),
        },
        StreamEvent::ProviderRetry {
            attempt,
            max_attempts,
            retry_after_ms,
        } => Ev::Retry {
            attempt: *attempt,
            max_attempts: *max_attempts,
            retry_after_ms: *retry_after_ms,
        },
        StreamEvent::Done { usage, stop_reason } => Ev::Done {
            usage: *usage,
            stop: stop_reason.clone(),
        },
        StreamEvent::Error { failure } => Ev::Error {
            cause: failure.cause,
            status: failure.status,
        },
        other => Ev::Other(format!("{other:?}")),
    }
}

/// A tool call the scripted model makes in a cell.
struct Call {
    id: &'static str,
    name: &'static str,
    arguments: Value,
}

fn host_calls() -> Vec<Call> {
    vec![
        Call {
            id: "call-db1",
            name: "get_status",
            arguments: json!({"host": "db1"}),
        },
        Call {
            id: "call-web2",
            name: "get_status",
            arguments: json!({"host": "web2", "filter": {"kind": "disk"}}),
        },
    ]
}

/// Arguments long enough to arrive in many fragments, with escapes and multi-byte text.
fn long_call() -> Call {
    Call {
        id: "call-logs",
        name: "get_status",
        arguments: json!({
            "host": "db1",
            "filter": {"kind": "logs \"since boot\" – ünïcode ✓"},
            "lines": [1, 2, 3, 5, 8, 13],
        }),
    }
}

fn turn_with(text: &str, calls: &[Call]) -> Turn {
    calls.iter().fold(Turn::text(text), |turn, c| {
        turn.with_tool_id(c.id, c.name, c.arguments.clone())
    })
}

/// The id the transport gives a call: Ollama's wire has no call ids, so the assembler numbers
/// the calls of a turn.
fn wire_id(protocol: Protocol, call: &Call, position: usize) -> String {
    match protocol {
        Protocol::Ollama => format!("call_{}", position + 1),
        _ => call.id.to_owned(),
    }
}

fn content(stream: bool, full: &str, pieces: &[&str]) -> Vec<Ev> {
    if stream {
        pieces
            .iter()
            .map(|p| Ev::Content((*p).to_owned()))
            .collect()
    } else {
        vec![Ev::Content(full.to_owned())]
    }
}

/// The tool events of one turn, in the order the protocol's wire delivers them.
fn tool_events(protocol: Protocol, stream: bool, calls: &[Call], delivery: &Delivery) -> Vec<Ev> {
    let start = |i: usize, c: &Call| Ev::ToolStart {
        id: wire_id(protocol, c, i),
        name: c.name.to_owned(),
    };
    let end = |i: usize, c: &Call| Ev::ToolEnd {
        id: wire_id(protocol, c, i),
        name: c.name.to_owned(),
        arguments: c.arguments.clone(),
        signature: (protocol == Protocol::Gemini).then(|| thought_signature(c.id)),
    };
    let args = |i: usize, c: &Call| -> Vec<Ev> {
        let fragments = if stream {
            delivery.fragments_of(&c.arguments)
        } else {
            vec![c.arguments.to_string()]
        };
        fragments
            .into_iter()
            .filter(|f| !f.is_empty())
            .map(|delta| Ev::ToolArgs {
                id: wire_id(protocol, c, i),
                delta,
            })
            .collect()
    };
    let mut out = Vec::new();
    match protocol {
        // Arguments arrive in fragments; every call completes at the finish reason.
        Protocol::OpenAiCompatible => {
            for (i, c) in calls.iter().enumerate() {
                out.push(start(i, c));
                out.extend(args(i, c));
            }
            out.extend(calls.iter().enumerate().map(|(i, c)| end(i, c)));
        }
        // Each content block completes on its own stop.
        Protocol::Anthropic => {
            for (i, c) in calls.iter().enumerate() {
                out.push(start(i, c));
                out.extend(args(i, c));
                out.push(end(i, c));
            }
        }
        // Whole calls, no argument deltas on the wire.
        Protocol::Gemini | Protocol::Ollama => {
            for (i, c) in calls.iter().enumerate() {
                out.push(start(i, c));
                out.push(end(i, c));
            }
        }
    }
    out
}

fn provider_with(sim: &ProviderSim, protocol: Protocol, stall: Duration) -> Provider {
    pulse_test_support::install_crypto_provider();
    let config = sim.route_config(protocol).with_timeouts(Timeouts {
        request: Duration::from_secs(15),
        response_header: Duration::from_secs(5),
        stall,
    });
    Provider::new(config).expect("provider")
}

struct Observed {
    events: Vec<Ev>,
    result: Result<ChatResponse, ProviderFailure>,
}

async fn call(provider: &Provider, request: &ChatRequest) -> Observed {
    let mut raw = Vec::new();
    let result = provider
        .chat(request, &mut |ev: StreamEvent| raw.push(ev))
        .await;
    let terminals = raw
        .iter()
        .filter(|e| matches!(e, StreamEvent::Done { .. } | StreamEvent::Error { .. }))
        .count();
    assert_eq!(terminals, 1, "exactly one terminal event: {raw:?}");
    assert!(
        matches!(
            raw.last(),
            Some(StreamEvent::Done { .. } | StreamEvent::Error { .. })
        ),
        "the terminal event is the last: {raw:?}"
    );
    if let (Some(StreamEvent::Error { failure }), Err(returned)) = (raw.last(), &result) {
        assert_eq!(failure, returned, "the error event is the returned failure");
    }
    Observed {
        events: raw.iter().map(neutral).collect(),
        result,
    }
}

/// The usage the simulator reported for its last answered request.
fn reported_usage(sim: &ProviderSim) -> Usage {
    let usage = sim
        .requests()
        .iter()
        .rev()
        .find_map(|r| r.usage)
        .expect("the simulator answered with a turn");
    Usage {
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        cached_input_tokens: usage.cached_input_tokens,
        cache_write_input_tokens: usage.cache_write_input_tokens,
    }
}

fn done(sim: &ProviderSim, stop: StopReason) -> Ev {
    Ev::Done {
        usage: reported_usage(sim),
        stop,
    }
}

/// What an operator may be shown of a failure carries no markup and no proxy internals.
fn assert_operator_safe(failure: &ProviderFailure) {
    for text in [
        failure.summary().to_owned(),
        failure.recommendation().to_owned(),
        failure.message.clone(),
        failure.to_string(),
    ] {
        for banned in ["<", ">", "doctype", "bad gateway", "nginx", "edge-proxy"] {
            assert!(
                !text.to_lowercase().contains(banned),
                "{banned:?} in operator text {text:?}"
            );
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Case {
    PlainText,
    OneToolCall,
    ParallelToolCalls,
    StreamedToolArgumentDeltas,
    NoTerminalMarker,
    Stall,
    RateLimitThenSuccess,
    Unauthorized,
    HtmlBadGateway,
}

async fn cell(protocol: Protocol, case: Case) {
    match case {
        Case::PlainText => plain_text(protocol).await,
        Case::OneToolCall => one_tool_call(protocol).await,
        Case::ParallelToolCalls => parallel_tool_calls(protocol).await,
        Case::StreamedToolArgumentDeltas => streamed_tool_argument_deltas(protocol).await,
        Case::NoTerminalMarker => no_terminal_marker(protocol).await,
        Case::Stall => stall(protocol).await,
        Case::RateLimitThenSuccess => rate_limit_then_success(protocol).await,
        Case::Unauthorized => unauthorized(protocol).await,
        Case::HtmlBadGateway => html_bad_gateway(protocol).await,
    }
}

async fn plain_text(protocol: Protocol) {
    for stream in [true, false] {
        let sim = ProviderSim::start(Script::turns([Turn::text(ANSWER)]))
            .await
            .expect("sim");
        let p = common::provider(&sim, protocol);
        let got = call(&p, &common::request(stream)).await;
        let mut expected = content(stream, ANSWER, &ANSWER_PIECES);
        expected.push(done(&sim, StopReason::EndTurn));
        assert_eq!(got.events, expected, "{protocol:?} stream={stream}");
        let response = got.result.expect("answer");
        assert_eq!(response.content, ANSWER);
        assert!(response.tool_calls.is_empty());
        assert_eq!(sim.requests().len(), 1);
        assert_eq!(sim.requests()[0].stream, stream);
    }
}

async fn tool_turn(protocol: Protocol, calls: Vec<Call>) {
    for stream in [true, false] {
        let sim = ProviderSim::start(Script::turns([turn_with(LOOKING, &calls)]))
            .await
            .expect("sim");
        let p = common::provider(&sim, protocol);
        let got = call(&p, &common::request(stream)).await;
        let mut expected = content(stream, LOOKING, &LOOKING_PIECES);
        expected.extend(tool_events(protocol, stream, &calls, &Delivery::default()));
        expected.push(done(&sim, StopReason::ToolUse));
        assert_eq!(got.events, expected, "{protocol:?} stream={stream}");
        let response = got.result.expect("tool turn");
        let executable: Vec<(String, &str, Value)> = response
            .tool_calls
            .iter()
            .map(|c| (c.id.clone(), c.name.as_str(), c.arguments.clone()))
            .collect();
        let wanted: Vec<(String, &str, Value)> = calls
            .iter()
            .enumerate()
            .map(|(i, c)| (wire_id(protocol, c, i), c.name, c.arguments.clone()))
            .collect();
        assert_eq!(executable, wanted, "{protocol:?} stream={stream}");
        assert!(response.orphaned_tool_calls.is_empty());
    }
}

async fn one_tool_call(protocol: Protocol) {
    let mut calls = host_calls();
    calls.truncate(1);
    tool_turn(protocol, calls).await;
}

async fn parallel_tool_calls(protocol: Protocol) {
    tool_turn(protocol, host_calls()).await;
}

async fn streamed_tool_argument_deltas(protocol: Protocol) {
    let delivery = Delivery {
        argument_fragments: Some(7),
        ..Delivery::default()
    };
    let calls = vec![long_call()];
    let sim = ProviderSim::start(Script::steps([Step::delivered(
        turn_with(LOOKING, &calls),
        delivery.clone(),
    )]))
    .await
    .expect("sim");
    let p = common::provider(&sim, protocol);
    let got = call(&p, &common::request(true)).await;
    let mut expected = content(true, LOOKING, &LOOKING_PIECES);
    expected.extend(tool_events(protocol, true, &calls, &delivery));
    expected.push(done(&sim, StopReason::ToolUse));
    assert_eq!(got.events, expected, "{protocol:?}");

    let deltas: Vec<&str> = got
        .events
        .iter()
        .filter_map(|e| match e {
            Ev::ToolArgs { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    let arguments = calls[0].arguments.to_string();
    match protocol {
        Protocol::OpenAiCompatible | Protocol::Anthropic => {
            // Seven fragments on the wire, seven progress events, in order, adding up to the
            // call's arguments; the call ends only after the last one.
            assert_eq!(deltas, split_chars(&arguments, 7), "{protocol:?}");
            assert_eq!(deltas.concat(), arguments);
            let last_delta = got
                .events
                .iter()
                .rposition(|e| matches!(e, Ev::ToolArgs { .. }));
            let end = got
                .events
                .iter()
                .position(|e| matches!(e, Ev::ToolEnd { .. }));
            assert!(last_delta < end, "{protocol:?}: {:?}", got.events);
        }
        // These wires carry a call's arguments whole: no partial arguments are ever shown.
        Protocol::Gemini | Protocol::Ollama => assert!(deltas.is_empty(), "{protocol:?}"),
    }
    let response = got.result.expect("tool turn");
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].arguments, calls[0].arguments);
}

async fn no_terminal_marker(protocol: Protocol) {
    let mut calls = host_calls();
    calls.truncate(1);
    let delivery = Delivery {
        truncate: true,
        ..Delivery::default()
    };
    let sim = ProviderSim::start(Script::steps([Step::delivered(
        turn_with(LOOKING, &calls),
        delivery.clone(),
    )]))
    .await
    .expect("sim");
    let p = common::provider(&sim, protocol);
    let got = call(&p, &common::request(true)).await;
    // The model finished its turn; only the end marker (and the last line ending) is missing.
    let mut expected = content(true, LOOKING, &LOOKING_PIECES);
    expected.extend(tool_events(protocol, true, &calls, &delivery));
    expected.push(done(&sim, StopReason::ToolUse));
    assert_eq!(got.events, expected, "{protocol:?}");
    let response = got.result.expect("complete turn");
    assert_eq!(response.content, LOOKING);
    assert_eq!(response.tool_calls.len(), 1);
}

async fn stall(protocol: Protocol) {
    // Frames up to and including the first text piece (Anthropic opens with message_start,
    // content_block_start and a ping; OpenAI with a role delta).
    let frames = match protocol {
        Protocol::OpenAiCompatible => 2,
        Protocol::Anthropic => 4,
        Protocol::Gemini | Protocol::Ollama => 1,
    };
    let sim = ProviderSim::start(Script::steps([Step::delivered(
        Turn::text(ANSWER),
        Delivery {
            stall_after_frames: Some(frames),
            ..Delivery::default()
        },
    )]))
    .await
    .expect("sim");
    let p = provider_with(&sim, protocol, Duration::from_millis(400));
    let started = std::time::Instant::now();
    let got = call(&p, &common::request(true)).await;
    assert!(started.elapsed() < Duration::from_secs(5), "{protocol:?}");
    // Output was shown, so the stall is not retried: one timeout error ends the call.
    let expected = vec![
        Ev::Content(ANSWER_PIECES[0].to_owned()),
        Ev::Error {
            cause: FailureCause::Timeout,
            status: None,
        },
    ];
    assert_eq!(got.events, expected, "{protocol:?}");
    let failure = got.result.expect_err("stall");
    assert!(failure.message.contains("stalled"), "{}", failure.message);
    assert_operator_safe(&failure);
    assert_eq!(sim.requests().len(), 1);
}

async fn rate_limit_then_success(protocol: Protocol) {
    for stream in [true, false] {
        let sim = ProviderSim::start(Script::steps([
            Step::Error(SimError::rate_limited(1)),
            Step::reply(Turn::text(ANSWER)),
        ]))
        .await
        .expect("sim");
        let p = common::provider(&sim, protocol);
        let started = std::time::Instant::now();
        let got = call(&p, &common::request(stream)).await;
        let mut expected = vec![Ev::Retry {
            attempt: 2,
            max_attempts: 2,
            retry_after_ms: RATE_LIMIT_WAIT_MS,
        }];
        expected.extend(content(stream, ANSWER, &ANSWER_PIECES));
        expected.push(done(&sim, StopReason::EndTurn));
        assert_eq!(got.events, expected, "{protocol:?} stream={stream}");
        // The provider's retry-after was waited out, on the same route.
        assert!(started.elapsed() >= Duration::from_millis(RATE_LIMIT_WAIT_MS));
        assert_eq!(got.result.expect("second attempt").content, ANSWER);
        let requests = sim.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].path, requests[1].path);
        assert_eq!(requests[0].body, requests[1].body);
    }
}

async fn unauthorized(protocol: Protocol) {
    for stream in [true, false] {
        let sim = ProviderSim::start(Script::steps([
            Step::Error(SimError::unauthorized()),
            Step::reply(Turn::text("never reached")),
        ]))
        .await
        .expect("sim");
        let p = common::provider(&sim, protocol);
        let got = call(&p, &common::request(stream)).await;
        // Not transient: no retry.
        let expected = vec![Ev::Error {
            cause: FailureCause::Auth,
            status: Some(401),
        }];
        assert_eq!(got.events, expected, "{protocol:?} stream={stream}");
        let failure = got.result.expect_err("401");
        assert_eq!(failure.summary(), "the provider rejected the API key");
        assert_operator_safe(&failure);
        assert_eq!(sim.requests().len(), 1);
    }
}

async fn html_bad_gateway(protocol: Protocol) {
    for stream in [true, false] {
        let sim = ProviderSim::start(Script::steps([
            Step::Error(SimError::html_502()),
            Step::Error(SimError::html_502()),
            Step::reply(Turn::text("never reached")),
        ]))
        .await
        .expect("sim");
        let p = common::provider(&sim, protocol);
        let got = call(&p, &common::request(stream)).await;
        // One same-route retry after the configured backoff, then one error.
        let expected = vec![
            Ev::Retry {
                attempt: 2,
                max_attempts: 2,
                retry_after_ms: 50,
            },
            Ev::Error {
                cause: FailureCause::Connectivity,
                status: Some(502),
            },
        ];
        assert_eq!(got.events, expected, "{protocol:?} stream={stream}");
        let failure = got.result.expect_err("502");
        assert!(failure.message.contains("502"), "{}", failure.message);
        assert_operator_safe(&failure);
        assert_eq!(sim.requests().len(), 2);
    }
}

macro_rules! matrix {
    ($($module:ident => $protocol:expr),* $(,)?) => {
        $(
            mod $module {
                use super::{Case, Protocol, cell};

                #[tokio::test]
                async fn plain_text() {
                    cell($protocol, Case::PlainText).await;
                }

                #[tokio::test]
                async fn one_tool_call() {
                    cell($protocol, Case::OneToolCall).await;
                }

                #[tokio::test]
                async fn parallel_tool_calls() {
                    cell($protocol, Case::ParallelToolCalls).await;
                }

                #[tokio::test]
                async fn streamed_tool_argument_deltas() {
                    cell($protocol, Case::StreamedToolArgumentDeltas).await;
                }

                #[tokio::test]
                async fn stream_ends_without_terminal_marker() {
                    cell($protocol, Case::NoTerminalMarker).await;
                }

                #[tokio::test]
                async fn stall() {
                    cell($protocol, Case::Stall).await;
                }

                #[tokio::test]
                async fn rate_limited_then_success() {
                    cell($protocol, Case::RateLimitThenSuccess).await;
                }

                #[tokio::test]
                async fn unauthorized() {
                    cell($protocol, Case::Unauthorized).await;
                }

                #[tokio::test]
                async fn html_bad_gateway() {
                    cell($protocol, Case::HtmlBadGateway).await;
                }
            }
        )*
    };
}

matrix! {
    openai => Protocol::OpenAiCompatible,
    anthropic => Protocol::Anthropic,
    gemini => Protocol::Gemini,
    ollama => Protocol::Ollama,
}
