//! Stream robustness, retries and failure classification over real HTTP.

mod common;

use std::time::{Duration, Instant};

use common::{ALL, dones, errors, provider, request, retries, run};
use pulse_agent_loop::provider::{
    FailureCause, INTERRUPTED_TOOL_RESULT, Message, Protocol, Provider, StreamEvent, Timeouts,
};
use pulse_test_support::provider_sim::{Delivery, ProviderSim, Script, SimError, Step, Turn};
use serde_json::json;

#[tokio::test]
async fn stream_without_terminal_marker_keeps_the_last_chunk() {
    for protocol in ALL {
        let sim = ProviderSim::start(Script::steps([Step::delivered(
            Turn::text("disk usage is at 91 percent"),
            Delivery {
                truncate: true,
                ..Delivery::default()
            },
        )]))
        .await
        .expect("sim");
        let p = provider(&sim, protocol);
        let (events, result) = run(&p, &request(true)).await;
        let resp = result.unwrap_or_else(|e| panic!("{protocol:?}: {e}"));
        assert_eq!(resp.content, "disk usage is at 91 percent", "{protocol:?}");
        assert_eq!(dones(&events), 1);
        assert_eq!(errors(&events), 0);
    }
}

#[tokio::test]
async fn stream_closed_before_the_model_finished_fails_closed() {
    for protocol in ALL {
        // Everything but the frames that finish the turn: text and a partial tool call.
        let frames = match protocol {
            Protocol::OpenAiCompatible => 4,
            Protocol::Anthropic => 8,
            Protocol::Gemini | Protocol::Ollama => 1,
        };
        let sim = ProviderSim::start(Script::steps([Step::delivered(
            Turn::text("looking").with_tool("get_status", json!({"host": "db1"})),
            Delivery {
                cut_after_frames: Some(frames),
                ..Delivery::default()
            },
        )]))
        .await
        .expect("sim");
        let p = provider(&sim, protocol);
        let (events, result) = run(&p, &request(true)).await;
        let failure = result.expect_err("cut stream");
        assert_eq!(
            failure.cause,
            FailureCause::MalformedResponse,
            "{protocol:?}"
        );
        assert_eq!(dones(&events), 0);
        assert_eq!(errors(&events), 1);
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, StreamEvent::ToolEnd { .. }))
        );
        assert!(
            events
                .iter()
                .any(|e| matches!(e, StreamEvent::Content { .. }))
        );
    }
}

#[tokio::test]
async fn malformed_stream_chunk_is_a_malformed_response() {
    for protocol in ALL {
        for stream in [false, true] {
            let sim = ProviderSim::start(Script::steps([Step::delivered(
                Turn::text("hello there"),
                Delivery {
                    malformed_json: true,
                    ..Delivery::default()
                },
            )]))
            .await
            .expect("sim");
            let p = provider(&sim, protocol);
            let (events, result) = run(&p, &request(stream)).await;
            let failure = result.expect_err("malformed");
            assert_eq!(
                failure.cause,
                FailureCause::MalformedResponse,
                "{protocol:?}"
            );
            assert_eq!(errors(&events), 1);
            assert_eq!(dones(&events), 0);
            // Not transient: never retried.
            assert_eq!(sim.requests().len(), 1);
        }
    }
}

#[tokio::test]
async fn orphan_tool_call_gets_a_synthetic_error_result() {
    for protocol in [Protocol::Anthropic, Protocol::OpenAiCompatible] {
        let sim = ProviderSim::start(Script::steps([
            Step::delivered(
                Turn::text("Let me look.").with_tool("get_status", json!({"host": "db1"})),
                Delivery {
                    orphan_tool_calls: true,
                    ..Delivery::default()
                },
            ),
            Step::reply(Turn::text("I could not check db1.")),
        ]))
        .await
        .expect("sim");
        let p = provider(&sim, protocol);
        let mut req = request(true);
        let (events, first) = run(&p, &req).await;
        let first = first.unwrap_or_else(|e| panic!("{protocol:?}: {e}"));
        // Never executable.
        assert!(first.tool_calls.is_empty(), "{protocol:?}");
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, StreamEvent::ToolEnd { .. }))
        );
        assert_eq!(first.orphaned_tool_calls.len(), 1);
        let orphan_id = first.orphaned_tool_calls[0].id.clone();

        req.messages.push(first.assistant_message());
        req.messages.push(Message::user("continue"));
        run(&p, &req).await.1.expect("second");
        let body = &sim.requests()[1].body;
        match protocol {
            Protocol::Anthropic => {
                let result = &body["messages"][2]["content"][0];
                assert_eq!(result["type"], json!("tool_result"));
                assert_eq!(result["tool_use_id"], json!(orphan_id));
                assert_eq!(result["is_error"], json!(true));
                assert_eq!(result["content"], json!(INTERRUPTED_TOOL_RESULT));
            }
            _ => {
                let result = &body["messages"][3];
                assert_eq!(result["role"], json!("tool"));
                assert_eq!(result["tool_call_id"], json!(orphan_id));
                assert!(
                    result["content"]
                        .as_str()
                        .is_some_and(|c| c.contains("interrupted"))
                );
            }
        }
    }
}

#[tokio::test]
async fn stall_timeout_is_one_timeout_error_without_retry_after_output() {
    for protocol in ALL {
        // Enough frames that visible text went out (Anthropic opens with two silent events).
        let frames = if protocol == Protocol::Anthropic {
            4
        } else {
            2
        };
        let sim = ProviderSim::start(Script::steps([Step::delivered(
            Turn::text("one two three four five six"),
            Delivery {
                stall_after_frames: Some(frames),
                ..Delivery::default()
            },
        )]))
        .await
        .expect("sim");
        pulse_test_support::install_crypto_provider();
        let cfg = sim.route_config(protocol).with_timeouts(Timeouts {
            request: Duration::from_secs(10),
            response_header: Duration::from_secs(5),
            stall: Duration::from_millis(400),
        });
        let p = Provider::new(cfg).expect("provider");
        let started = Instant::now();
        let (events, result) = run(&p, &request(true)).await;
        let failure = result.expect_err("stall");
        assert_eq!(failure.cause, FailureCause::Timeout, "{protocol:?}");
        assert!(failure.message.contains("stalled"), "{}", failure.message);
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(errors(&events), 1);
        assert!(matches!(events.last(), Some(StreamEvent::Error { .. })));
        assert!(
            events
                .iter()
                .any(|e| matches!(e, StreamEvent::Content { .. }))
        );
        assert_eq!(retries(&events), 0, "no retry after visible output");
        assert_eq!(sim.requests().len(), 1);
    }
}

#[tokio::test]
async fn stall_is_capped_by_request_timeout() {
    let sim = ProviderSim::start(Script::steps([Step::delivered(
        Turn::text("a b c d"),
        Delivery {
            stall_after_frames: Some(2),
            ..Delivery::default()
        },
    )]))
    .await
    .expect("sim");
    pulse_test_support::install_crypto_provider();
    let cfg = sim
        .route_config(Protocol::OpenAiCompatible)
        .with_timeouts(Timeouts::patrol(Duration::from_millis(700)));
    let p = Provider::new(cfg).expect("provider");
    let started = Instant::now();
    let failure = run(&p, &request(true)).await.1.expect_err("timeout");
    assert_eq!(failure.cause, FailureCause::Timeout);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        Timeouts::patrol(Duration::from_secs(300)).stall,
        Duration::from_secs(60)
    );
}

#[tokio::test]
async fn one_retry_before_output_on_502() {
    for protocol in ALL {
        let sim = ProviderSim::start(Script::steps([
            Step::Error(SimError::html_502()),
            Step::reply(Turn::text("recovered")),
        ]))
        .await
        .expect("sim");
        let p = provider(&sim, protocol);
        let (events, result) = run(&p, &request(true)).await;
        assert_eq!(result.expect("second attempt").content, "recovered");
        assert_eq!(retries(&events), 1);
        assert_eq!(
            events[0],
            StreamEvent::ProviderRetry {
                attempt: 2,
                max_attempts: 2,
                retry_after_ms: 50
            }
        );
        assert_eq!(errors(&events), 0);
        assert_eq!(dones(&events), 1);
        assert_eq!(sim.requests().len(), 2);
    }
}

#[tokio::test]
async fn at_most_one_retry_and_one_error() {
    let sim = ProviderSim::start(Script::steps([
        Step::Error(SimError::html_502()),
        Step::Error(SimError::html_502()),
        Step::reply(Turn::text("never reached")),
    ]))
    .await
    .expect("sim");
    let p = provider(&sim, Protocol::Anthropic);
    let (events, result) = run(&p, &request(false)).await;
    let failure = result.expect_err("two 502s");
    assert_eq!(failure.cause, FailureCause::Connectivity);
    assert_eq!(failure.status, Some(502));
    assert_eq!(retries(&events), 1);
    assert_eq!(errors(&events), 1);
    assert_eq!(sim.requests().len(), 2);
    // The same route both times: same path and model.
    let requests = sim.requests();
    assert_eq!(requests[0].path, requests[1].path);
    assert_eq!(requests[0].body["model"], requests[1].body["model"]);
}

#[tokio::test]
async fn slow_cold_start_within_header_timeout_succeeds_and_beyond_it_times_out() {
    let slow = |ms| {
        Step::delivered(
            Turn::text("loaded"),
            Delivery {
                cold_start: Duration::from_millis(ms),
                ..Delivery::default()
            },
        )
    };
    let sim = ProviderSim::start(Script::steps([slow(300), slow(3000), slow(3000)]))
        .await
        .expect("sim");
    pulse_test_support::install_crypto_provider();
    let cfg = sim.route_config(Protocol::Ollama).with_timeouts(Timeouts {
        request: Duration::from_secs(10),
        response_header: Duration::from_secs(1),
        stall: Duration::from_secs(1),
    });
    let p = Provider::new(cfg).expect("provider");
    assert_eq!(
        run(&p, &request(true)).await.1.expect("warm").content,
        "loaded"
    );
    let (events, result) = run(&p, &request(true)).await;
    assert_eq!(result.expect_err("cold").cause, FailureCause::Timeout);
    // Header timeout is before output: one retry, then one error.
    assert_eq!(retries(&events), 1);
    assert_eq!(errors(&events), 1);
}

#[tokio::test]
async fn error_statuses_are_classified() {
    for protocol in ALL {
        let sim = ProviderSim::start(Script::steps([
            Step::Error(SimError::unauthorized()),
            Step::Error(SimError::rate_limited(7)),
            Step::Error(SimError::model_not_found("sim-model")),
            Step::Error(SimError::html_502()),
            Step::Error(SimError::html_502()),
        ]))
        .await
        .expect("sim");
        let p = provider(&sim, protocol);

        let (events, r) = run(&p, &request(true)).await;
        let f = r.expect_err("401");
        assert_eq!(f.cause, FailureCause::Auth);
        assert_eq!(f.status, Some(401));
        assert_eq!(errors(&events), 1);
        assert_eq!(retries(&events), 0);

        let f = run(&p, &request(false)).await.1.expect_err("429");
        assert_eq!(f.cause, FailureCause::RateLimit);
        assert_eq!(f.retry_after_ms, Some(7000));

        let f = run(&p, &request(true)).await.1.expect_err("404");
        assert_eq!(f.cause, FailureCause::ModelNotFound);
        assert!(!f.recommendation().is_empty() && !f.summary().is_empty());

        let (events, r) = run(&p, &request(true)).await;
        let f = r.expect_err("502 page");
        assert_eq!(retries(&events), 1);
        for text in [f.message.clone(), f.to_string()] {
            assert!(!text.contains('<'), "{text}");
            assert!(!text.contains("nginx"), "{text}");
            assert!(!text.contains("edge-proxy"), "{text}");
        }
        assert!(f.message.contains("502"));
        assert_eq!(sim.requests().len(), 5, "{protocol:?}");
    }
}

#[tokio::test]
async fn connection_refused_is_connectivity_after_one_retry() {
    let sim = ProviderSim::start(Script::lazy("x")).await.expect("sim");
    pulse_test_support::install_crypto_provider();
    let mut cfg = sim.route_config(Protocol::OpenAiCompatible);
    drop(sim);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    cfg.base_url = format!("http://127.0.0.1:{port}/v1");
    let p = Provider::new(cfg).expect("provider");
    let (events, result) = run(&p, &request(true)).await;
    assert_eq!(
        result.expect_err("refused").cause,
        FailureCause::Connectivity
    );
    assert_eq!(retries(&events), 1);
    assert_eq!(errors(&events), 1);
}

#[tokio::test]
async fn stall_before_output_is_retried_once_on_the_same_route() {
    let sim = ProviderSim::start(Script::steps([
        Step::delivered(
            Turn::text("first try"),
            Delivery {
                stall_after_frames: Some(1),
                ..Delivery::default()
            },
        ),
        Step::reply(Turn::text("second try")),
    ]))
    .await
    .expect("sim");
    pulse_test_support::install_crypto_provider();
    let cfg = sim
        .route_config(Protocol::Anthropic)
        .with_timeouts(Timeouts {
            request: Duration::from_secs(10),
            response_header: Duration::from_secs(5),
            stall: Duration::from_millis(300),
        });
    let p = Provider::new(cfg).expect("provider");
    let (events, result) = run(&p, &request(true)).await;
    assert_eq!(result.expect("retried").content, "second try");
    assert_eq!(retries(&events), 1);
    assert_eq!(errors(&events), 0);
    assert_eq!(dones(&events), 1);
}
