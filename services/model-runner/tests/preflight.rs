//! Provider preflight over real HTTP against the provider simulator: classification, the
//! per-route cache with its TTL (on an injected clock), and local cold starts.

use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone as _, Utc};
use pulse_agent_loop::provider::FailureCause;
use pulse_agent_loop::provider::pool::ProviderPool;
use pulse_agent_loop::route::Route;
use pulse_domain::ai_settings::{AutoSwitch, ProviderOptions};
use pulse_domain::patrol::readiness::TurnTransport;
use pulse_model_runner::preflight::{
    ManualClock, PREFLIGHT_TOOL, Preflight, PreflightCache, PreflightCause, PreflightSettings,
    Readiness, RouteConnection,
};
use pulse_model_runner::registry::RouteClass;
use pulse_test_support::provider_sim::{
    Delivery, Persona, ProviderSim, Script, SimError, Step, Turn,
};
use serde_json::json;

const TTL: Duration = Duration::from_secs(600);

fn settings() -> PreflightSettings {
    PreflightSettings {
        request_timeout: Duration::from_secs(10),
        request_timeout_cap: Duration::from_secs(10),
        response_header_timeout: Duration::from_secs(5),
        retry_backoff: Duration::from_millis(20),
    }
}

fn preflight(settings: PreflightSettings) -> (Preflight, Arc<ManualClock>) {
    let start = Utc
        .with_ymd_and_hms(2026, 11, 29, 12, 0, 0)
        .single()
        .unwrap_or_else(Utc::now);
    let clock = Arc::new(ManualClock::new(start));
    let cache = PreflightCache::new(TTL, clock.clone());
    (
        Preflight::new(settings, cache, Arc::new(ProviderPool::new())),
        clock,
    )
}

fn route(text: &str) -> Route {
    Route::parse(text).expect("valid route")
}

/// The route at the simulator, with the base URL its protocol expects.
fn at_sim(sim: &ProviderSim, text: &str) -> RouteConnection {
    let route = route(text);
    let base = match route.provider_id() {
        "anthropic" | "ollama" => sim.base_url(),
        "gemini" => sim.gemini_base_url(),
        _ => sim.openai_base_url(),
    };
    RouteConnection::new(route)
        .with_base_url(base)
        .with_api_key("sk-test-key")
}

fn diligent() -> Turn {
    Turn::tool(PREFLIGHT_TOOL, json!({"ok": true}))
}

/// The same step twice: a transient failure gets its one same-route retry.
fn twice(step: Step) -> Script {
    Script::steps([step.clone(), step])
}

#[tokio::test]
async fn diligent_model_is_ready_on_every_protocol() -> anyhow::Result<()> {
    let sim = ProviderSim::start(Script::looping(PREFLIGHT_TOOL, json!({"ok": true}))).await?;
    let (pf, _clock) = preflight(settings());
    for text in [
        "openai:sim-model",
        "anthropic:sim-model",
        "gemini:sim-model",
        "ollama:sim-model",
    ] {
        let conn = at_sim(&sim, text);
        let outcome = pf.run(&conn).await;
        assert!(outcome.ready, "{text}: {outcome:?}");
        assert!(outcome.observed_tool_call, "{text}");
        assert_eq!(outcome.cause, None);
        assert_eq!(outcome.action, None);
        assert_eq!(outcome.route, text);
        let usage = outcome.usage.expect("usage reported");
        assert!(
            usage.input_tokens > 0 && usage.output_tokens > 0,
            "{usage:?}"
        );
        assert!(pf.readiness(&conn).is_ready(), "{text}");
    }
    let requests = sim.requests();
    assert_eq!(requests.len(), 4, "one call per route, no retries");
    for r in &requests {
        assert!(r.stream, "preflight runs the streaming chat path");
        assert!(
            r.body.to_string().contains(PREFLIGHT_TOOL),
            "the request offers the preflight tool: {}",
            r.body
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_server_that_cannot_stream_tool_requests_passes_unstreamed_and_says_so()
-> anyhow::Result<()> {
    // llama-cpp-python's server breaks a streamed request with tools; auto asks again unstreamed.
    let sim = ProviderSim::start_as(
        Script::looping(PREFLIGHT_TOOL, json!({"ok": true})),
        Persona::LlamaCppPython,
    )
    .await?;
    let (pf, _clock) = preflight(settings());
    let conn = at_sim(&sim, "lmstudio:qwen2.5-coder-1.5b");
    let outcome = pf.run(&conn).await;
    assert!(outcome.ready, "{outcome:?}");
    assert!(outcome.observed_tool_call);
    assert_eq!(outcome.transport, Some(TurnTransport::Buffered));
    let streamed: Vec<bool> = sim.requests().iter().map(|r| r.stream).collect();
    assert_eq!(streamed, [true, false]);

    // Streaming on: the broken stream is the outcome, and no unstreamed request is made.
    sim.clear_requests();
    let forced = at_sim(&sim, "lmstudio:qwen2.5-coder-1.5b").with_options(ProviderOptions {
        streaming: AutoSwitch::On,
        ..ProviderOptions::default()
    });
    let outcome = pf.run(&forced).await;
    assert!(!outcome.ready, "{outcome:?}");
    assert_eq!(outcome.transport, None);
    assert!(sim.requests().iter().all(|r| r.stream));

    // A standard server streams.
    let standard = ProviderSim::start(Script::looping(PREFLIGHT_TOOL, json!({"ok": true}))).await?;
    let outcome = pf.run(&at_sim(&standard, "openai:sim-model")).await;
    assert_eq!(outcome.transport, Some(TurnTransport::Streamed));
    Ok(())
}

#[test]
fn the_provider_options_of_the_settings_reach_the_transport() {
    use pulse_agent_loop::provider::Streaming;
    let options = ProviderOptions {
        streaming: AutoSwitch::Off,
        request_timeout_seconds: Some(900),
        keep_alive: Some("-1m".to_owned()),
        num_ctx: Some(8_192),
        think: Some(true),
        ..ProviderOptions::default()
    };
    let conn = RouteConnection::new(route("ollama:qwen2.5")).with_options(options);
    let bounds = PreflightSettings {
        request_timeout_cap: Duration::from_secs(600),
        ..settings()
    };
    let config = conn.provider_config(&bounds).expect("configured");
    assert_eq!(config.streaming, Streaming::Off);
    assert_eq!(config.ollama_keep_alive.as_deref(), Some("-1m"));
    assert_eq!(config.ollama_num_ctx, Some(8_192));
    assert_eq!(config.ollama_think, Some(true));
    // The provider's 900 s, capped by the service's 600 s; a local server waits as long for
    // its first byte.
    assert_eq!(config.timeouts.request, Duration::from_secs(600));
    assert_eq!(config.timeouts.response_header, Duration::from_secs(600));
    assert_eq!(config.retry_backoff, Duration::from_millis(20));
    // No option set: the service's own bound, streaming auto, nothing of Ollama's.
    let plain = RouteConnection::new(route("ollama:qwen2.5"))
        .provider_config(&bounds)
        .expect("configured");
    assert_eq!(plain.timeouts.request, Duration::from_secs(10));
    assert_eq!(plain.streaming, Streaming::Auto);
    assert_eq!(plain.ollama_keep_alive, None);
    // Tool calls from text: auto is on for a model server the operator runs, off for a hosted
    // API, and the setting overrides either.
    assert!(RouteConnection::new(route("ollama:qwen2.5")).tool_calls_from_text());
    assert!(!RouteConnection::new(route("openai:gpt-4.1-mini")).tool_calls_from_text());
    let on = ProviderOptions {
        tool_calls_from_text: AutoSwitch::On,
        ..ProviderOptions::default()
    };
    assert!(
        RouteConnection::new(route("openai:gpt-4.1-mini"))
            .with_options(on)
            .tool_calls_from_text()
    );
}

#[tokio::test]
async fn a_provider_request_timeout_bounds_the_call_within_the_cap() -> anyhow::Result<()> {
    // A local server slower than the provider's own 5 s timeout (the cap is 10 s) times out.
    let slow = Delivery {
        cold_start: Duration::from_secs(8),
        ..Delivery::default()
    };
    let sim = ProviderSim::start(Script::steps([
        Step::delivered(diligent(), slow.clone()),
        Step::delivered(diligent(), slow),
    ]))
    .await?;
    let (pf, _clock) = preflight(settings());
    let conn = at_sim(&sim, "ollama:qwen2.5").with_options(ProviderOptions {
        request_timeout_seconds: Some(5),
        ..ProviderOptions::default()
    });
    // Within the service's 10 s bound the 8 s answer would have come: the provider's 5 s
    // bound is the one applied.
    let outcome = pf.run(&conn).await;
    assert!(!outcome.ready, "{outcome:?}");
    assert_eq!(
        outcome.cause,
        Some(PreflightCause::Provider(FailureCause::Timeout)),
        "{outcome:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_model_that_answers_without_calling_the_tool_is_not_ready() -> anyhow::Result<()> {
    let sim = ProviderSim::start(Script::lazy("Sure, everything works.")).await?;
    let (pf, _clock) = preflight(settings());
    let conn = at_sim(&sim, "openai:sim-model");
    let outcome = pf.run(&conn).await;
    assert!(!outcome.ready);
    assert!(!outcome.observed_tool_call);
    assert_eq!(
        outcome.cause,
        Some(PreflightCause::Provider(FailureCause::NoToolSupport))
    );
    assert_eq!(
        outcome.summary,
        "the model answered but did not call the preflight tool"
    );
    assert_eq!(
        outcome.recommendation.as_deref(),
        Some("choose a model that supports tool calling")
    );
    assert!(pf.readiness(&conn).is_known_not_ready());
    Ok(())
}

#[tokio::test]
async fn each_failure_mode_is_classified_cached_and_expires() -> anyhow::Result<()> {
    let stall = Delivery {
        stall_after_frames: Some(1),
        ..Delivery::default()
    };
    let malformed = Delivery {
        malformed_json: true,
        ..Delivery::default()
    };
    let cases: Vec<(&str, Script, FailureCause, usize)> = vec![
        (
            "401",
            twice(Step::Error(SimError::unauthorized())),
            FailureCause::Auth,
            1,
        ),
        (
            "429",
            twice(Step::Error(SimError::rate_limited(1))),
            FailureCause::RateLimit,
            // A short retry-after is waited out once on the same route.
            2,
        ),
        (
            "404 model",
            twice(Step::Error(SimError::model_not_found("sim-model"))),
            FailureCause::ModelNotFound,
            1,
        ),
        (
            "html 502",
            twice(Step::Error(SimError::html_502())),
            FailureCause::Connectivity,
            2,
        ),
        (
            "stall",
            twice(Step::delivered(diligent(), stall)),
            FailureCause::Timeout,
            2,
        ),
        (
            "malformed",
            twice(Step::delivered(diligent(), malformed)),
            FailureCause::MalformedResponse,
            1,
        ),
    ];
    let short = PreflightSettings {
        request_timeout: Duration::from_secs(1),
        ..settings()
    };
    for (name, script, cause, calls) in cases {
        let sim = ProviderSim::start(script).await?;
        let (pf, clock) = preflight(short);
        let conn = at_sim(&sim, "openai:sim-model");
        let outcome = pf.run(&conn).await;
        assert!(!outcome.ready, "{name}");
        assert_eq!(
            outcome.cause,
            Some(PreflightCause::Provider(cause)),
            "{name}"
        );
        assert_eq!(outcome.summary, cause.summary(), "{name}");
        assert_eq!(
            outcome.recommendation.as_deref(),
            Some(cause.recommendation()),
            "{name}"
        );
        assert_eq!(
            outcome.action,
            Some("/settings/pulse-intelligence/provider"),
            "{name}"
        );
        assert_eq!(sim.requests().len(), calls, "{name}: provider calls");
        // Only safe fields go out: no raw HTML, no provider wording.
        let shown = serde_json::to_string(&outcome)?;
        assert!(!shown.contains('<'), "{name}: {shown}");
        assert!(!shown.contains("nginx"), "{name}: {shown}");
        assert!(!shown.contains("invalid x-api-key"), "{name}: {shown}");

        let readiness = pf.readiness(&conn);
        let Readiness::NotReady {
            cause: cached,
            summary,
            ..
        } = readiness
        else {
            anyhow::bail!("{name}: expected not ready, got {readiness:?}");
        };
        assert_eq!(cached, PreflightCause::Provider(cause), "{name}");
        assert_eq!(summary, cause.summary(), "{name}");
        clock.advance(TTL - Duration::from_secs(1));
        assert!(pf.readiness(&conn).is_known_not_ready(), "{name}");
        clock.advance(Duration::from_secs(2));
        assert_eq!(
            pf.readiness(&conn),
            Readiness::NotAssessed,
            "{name}: expired"
        );
        assert!(pf.cache().get(&conn).is_none(), "{name}");
    }
    Ok(())
}

#[tokio::test]
async fn ready_outcome_expires_after_ttl_and_routes_are_cached_apart() -> anyhow::Result<()> {
    let sim = ProviderSim::start(Script::steps([
        Step::reply(diligent()),
        Step::Error(SimError::unauthorized()),
    ]))
    .await?;
    let (pf, clock) = preflight(settings());
    let good = at_sim(&sim, "openai:sim-model");
    let other = at_sim(&sim, "openai:other-model");
    assert_eq!(pf.readiness(&good), Readiness::NotAssessed);

    assert!(pf.run(&good).await.ready);
    assert!(!pf.run(&other).await.ready);
    assert!(pf.readiness(&good).is_ready());
    assert!(pf.readiness(&other).is_known_not_ready());

    clock.advance(TTL);
    assert_eq!(pf.readiness(&good), Readiness::NotAssessed);
    assert_eq!(pf.readiness(&other), Readiness::NotAssessed);
    Ok(())
}

#[tokio::test]
async fn cold_local_model_is_slow_not_broken() -> anyhow::Result<()> {
    let cold = Delivery {
        cold_start: Duration::from_millis(1500),
        ..Delivery::default()
    };
    // A hosted API would be held to a 500 ms first-byte bound; a local server gets the whole
    // request timeout.
    let tight = PreflightSettings {
        request_timeout: Duration::from_secs(10),
        request_timeout_cap: Duration::from_secs(10),
        response_header_timeout: Duration::from_millis(500),
        retry_backoff: Duration::from_millis(20),
    };
    for text in ["ollama:qwen3:8b", "lmstudio:qwen2.5-7b-instruct"] {
        let sim =
            ProviderSim::start(Script::steps([Step::delivered(diligent(), cold.clone())])).await?;
        let (pf, _clock) = preflight(tight);
        let conn = at_sim(&sim, text);
        assert_eq!(conn.route_class(), RouteClass::LocalModelServer);
        let outcome = pf.run(&conn).await;
        assert!(outcome.ready, "{text}: {outcome:?}");
        assert!(
            outcome.elapsed_ms >= 1500,
            "{text}: waited for the model to load"
        );
        assert_eq!(sim.requests().len(), 1, "{text}: no retry");
    }

    // The same cold start on a metered route exceeds its first-byte bound.
    let sim = ProviderSim::start(twice(Step::delivered(diligent(), cold))).await?;
    let (pf, _clock) = preflight(tight);
    let outcome = pf.run(&at_sim(&sim, "openai:sim-model")).await;
    assert_eq!(
        outcome.cause,
        Some(PreflightCause::Provider(FailureCause::Timeout))
    );
    Ok(())
}

#[tokio::test]
async fn missing_settings_are_not_ready_without_a_call() {
    let (pf, _clock) = preflight(settings());
    let no_key = RouteConnection::new(route("openai:gpt-4o"));
    let outcome = pf.run(&no_key).await;
    assert_eq!(outcome.cause, Some(PreflightCause::NotConfigured));
    assert_eq!(outcome.summary, "the provider needs an API key");
    assert!(pf.readiness(&no_key).is_known_not_ready());

    let no_url = RouteConnection::new(route("litellm:gpt-4o"));
    let outcome = pf.run(&no_url).await;
    assert_eq!(outcome.cause, Some(PreflightCause::NotConfigured));
    assert_eq!(outcome.summary, "the provider needs a base URL");
    assert_eq!(
        serde_json::to_value(&outcome)
            .ok()
            .and_then(|v| v.get("cause").cloned()),
        Some(json!("not_configured"))
    );
}

#[tokio::test]
async fn a_changed_key_or_address_is_not_covered_by_the_cached_outcome() -> anyhow::Result<()> {
    let sim = ProviderSim::start(Script::looping(PREFLIGHT_TOOL, json!({"ok": true}))).await?;
    let (pf, _clock) = preflight(settings());
    let conn = at_sim(&sim, "openai:sim-model");
    assert!(pf.run(&conn).await.ready);
    assert!(pf.readiness(&conn).is_ready());

    let rotated = conn.clone().with_api_key("sk-rotated");
    assert_eq!(pf.readiness(&rotated), Readiness::NotAssessed);
    let moved = conn.clone().with_base_url("http://127.0.0.1:1/v1");
    assert_eq!(pf.readiness(&moved), Readiness::NotAssessed);
    assert!(
        !conn.cache_key().contains("sk-test-key"),
        "the key itself is never part of the cache key"
    );
    Ok(())
}

#[tokio::test]
async fn a_preflight_call_written_as_text_passes_on_a_local_route_and_says_so() -> anyhow::Result<()>
{
    let written =
        format!("<tools> <function name=\"{PREFLIGHT_TOOL}\" arguments='{{\"ok\": true}}'/>");
    let sim = ProviderSim::start(Script::turns([
        Turn::text(written.clone()),
        Turn::text(written),
    ]))
    .await?;
    let (pf, _clock) = preflight(settings());

    // A local model server recovers it by default.
    let local = at_sim(&sim, "llamacpp:sim-model");
    let outcome = pf.run(&local).await;
    assert!(outcome.ready, "{outcome:?}");
    assert!(outcome.observed_tool_call);
    assert_eq!(outcome.tool_calls_recovered, 1);
    assert!(
        outcome.summary.contains("tool calls recovered from text"),
        "{}",
        outcome.summary
    );
    assert!(pf.readiness(&local).is_ready());

    // Turned off, the same answer is a model that did not call the tool.
    let off = at_sim(&sim, "llamacpp:sim-model").with_options(ProviderOptions {
        tool_calls_from_text: AutoSwitch::Off,
        ..ProviderOptions::default()
    });
    let outcome = pf.run(&off).await;
    assert!(!outcome.ready);
    assert_eq!(outcome.tool_calls_recovered, 0);
    assert_eq!(
        outcome.cause,
        Some(PreflightCause::Provider(FailureCause::NoToolSupport))
    );
    Ok(())
}

#[tokio::test]
async fn a_text_call_with_arguments_the_schema_refuses_does_not_pass() -> anyhow::Result<()> {
    let sim = ProviderSim::start(Script::lazy(format!(
        "```json\n{{\"name\": \"{PREFLIGHT_TOOL}\", \"arguments\": {{\"ok\": \"yes\"}}}}\n```"
    )))
    .await?;
    let (pf, _clock) = preflight(settings());
    let outcome = pf.run(&at_sim(&sim, "llamacpp:sim-model")).await;
    assert!(!outcome.ready, "{outcome:?}");
    assert_eq!(outcome.tool_calls_recovered, 0);
    Ok(())
}
