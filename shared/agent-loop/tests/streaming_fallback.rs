//! Routes whose server cannot stream a request with tools: with `streaming: auto` the turn is
//! asked again unstreamed, the answer is the same turn with the same events, and the route
//! remembers it until its address or streaming setting changes; `off` never streams; `on` never
//! falls back.

mod common;

use std::time::Duration;

use common::{dones, errors, request, run};
use pulse_agent_loop::provider::pool::ProviderPool;
use pulse_agent_loop::provider::{Protocol, StreamEvent, Streaming, Timeouts};
use pulse_test_support::provider_sim::{Persona, ProviderSim, Script, SimError, Step, Turn};
use serde_json::json;

fn tool_turn() -> Turn {
    Turn::text("Checking db1.").with_tool("get_status", json!({"host": "db1"}))
}

/// The `stream` flag of every request the simulator saw, in order.
fn streamed(sim: &ProviderSim) -> Vec<bool> {
    sim.requests().iter().map(|r| r.stream).collect()
}

fn content(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Content { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_server_that_breaks_streamed_tool_requests_is_asked_unstreamed_and_remembered() {
    pulse_test_support::install_crypto_provider();
    let sim = ProviderSim::start_as(Script::always(tool_turn()), Persona::LlamaCppPython)
        .await
        .expect("sim");
    let pool = ProviderPool::new();
    let config = sim.route_config(Protocol::OpenAiCompatible);
    let provider = pool.provider(config.clone()).expect("provider");

    let (events, first) = run(&provider, &request(true)).await;
    let first = first.expect("the unstreamed request is answered");
    assert!(first.buffered, "the answer came unstreamed");
    assert_eq!(first.content, "Checking db1.");
    assert_eq!(first.tool_calls.len(), 1);
    assert_eq!(first.tool_calls[0].arguments, json!({"host": "db1"}));
    // The same events a streamed turn gives: its text, its call, one Done and no Error.
    assert_eq!(content(&events), "Checking db1.");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, StreamEvent::ToolStart { name, .. } if name == "get_status")),
        "{events:?}"
    );
    assert_eq!((dones(&events), errors(&events)), (1, 0), "{events:?}");
    assert_eq!(streamed(&sim), [true, false]);

    // The next turn on the route, from another provider of the same service, goes unstreamed
    // at once.
    sim.clear_requests();
    let again = pool.provider(config.clone()).expect("provider");
    let (_, second) = run(&again, &request(true)).await;
    assert!(second.expect("answered").buffered);
    assert_eq!(streamed(&sim), [false]);

    // Another caller's timeouts are the same route.
    sim.clear_requests();
    let bounded = config.clone().with_timeouts(Timeouts {
        request: Duration::from_secs(25),
        ..config.timeouts
    });
    let (_, bounded) = run(&pool.provider(bounded).expect("provider"), &request(true)).await;
    assert!(bounded.expect("answered").buffered);
    assert_eq!(streamed(&sim), [false]);

    // A settings change that leaves the server alone (the version moves: a Patrol interval, a
    // mode) keeps what the route learned: still unstreamed at once.
    sim.clear_requests();
    let mut moved = config.clone();
    moved.settings_version = Some(2);
    let (_, third) = run(&pool.provider(moved).expect("provider"), &request(true)).await;
    assert!(third.expect("answered").buffered);
    assert_eq!(streamed(&sim), [false]);

    // Another model on the server is a route of its own: it streams first (and falls back).
    sim.clear_requests();
    let mut other = request(true);
    other.model = "another-model".to_owned();
    let (_, other) = run(&pool.provider(config.clone()).expect("provider"), &other).await;
    assert!(other.expect("answered").buffered);
    assert_eq!(streamed(&sim), [true, false]);

    // A request without tools streams: that server streams plain chat.
    sim.clear_requests();
    let mut plain = request(true);
    plain.tools.clear();
    let (_, fourth) = run(
        &pool
            .provider(config.clone().with_streaming(Streaming::On))
            .expect("provider"),
        &plain,
    )
    .await;
    assert!(!fourth.expect("answered").buffered);
    assert_eq!(streamed(&sim), [true]);
}

#[tokio::test]
async fn an_error_that_names_streaming_is_asked_again_unstreamed() {
    pulse_test_support::install_crypto_provider();
    let sim = ProviderSim::start(Script::steps([
        Step::Error(SimError::message(
            400,
            "invalid_request_error",
            "streaming is not supported when tools are given",
        )),
        Step::reply(tool_turn()),
    ]))
    .await
    .expect("sim");
    let provider = common::provider(&sim, Protocol::OpenAiCompatible);
    let (events, answer) = run(&provider, &request(true)).await;
    let answer = answer.expect("answered unstreamed");
    assert!(answer.buffered);
    assert_eq!(answer.tool_calls.len(), 1);
    assert_eq!((dones(&events), errors(&events)), (1, 0));
    assert_eq!(streamed(&sim), [true, false]);
}

#[tokio::test]
async fn streaming_off_never_streams_and_on_never_falls_back() {
    pulse_test_support::install_crypto_provider();
    let sim = ProviderSim::start_as(Script::always(tool_turn()), Persona::LlamaCppPython)
        .await
        .expect("sim");
    let pool = ProviderPool::new();
    let config = sim.route_config(Protocol::OpenAiCompatible);

    let off = pool
        .provider(config.clone().with_streaming(Streaming::Off))
        .expect("provider");
    let (_, answer) = run(&off, &request(true)).await;
    assert!(answer.expect("answered").buffered);
    assert_eq!(streamed(&sim), [false]);

    sim.clear_requests();
    let on = pool
        .provider(config.with_streaming(Streaming::On))
        .expect("provider");
    let (events, refused) = run(&on, &request(true)).await;
    let failure = refused.expect_err("the broken stream is the answer");
    assert_eq!(errors(&events), 1);
    assert!(
        streamed(&sim).iter().all(|s| *s),
        "on never asks unstreamed: {:?} ({failure})",
        streamed(&sim)
    );
}

#[tokio::test]
async fn a_failure_that_is_not_about_streaming_is_not_asked_unstreamed() {
    pulse_test_support::install_crypto_provider();
    let sim = ProviderSim::start(Script::steps([
        Step::Error(SimError::unauthorized()),
        Step::reply(tool_turn()),
    ]))
    .await
    .expect("sim");
    let provider = common::provider(&sim, Protocol::OpenAiCompatible);
    let (_, answer) = run(&provider, &request(true)).await;
    assert!(answer.is_err(), "a refused key is the answer");
    assert_eq!(streamed(&sim), [true]);
}
