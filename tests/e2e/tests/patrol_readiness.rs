//! Patrol readiness through the real binaries (gateway, patrol-scheduler, model-runner) against
//! the provider simulator: a save that moves the Patrol route triggers one preflight, whose
//! outcome `GET /api/settings/ai` shows and the readiness gate uses. A route known not to work
//! blocks the status and refuses manual runs before any model call; a working route is not
//! blocked, and routine saves cost no preflight.

use std::path::Path;
use std::time::Duration;

use pulse_model_runner::preflight::PREFLIGHT_TOOL;
use pulse_test_support::provider_sim::{ProviderSim, Script, SimError, Step};
use pulse_test_support::runner::TestModelRunner;
use pulse_test_support::scheduler::TestScheduler;
use pulse_test_support::service::{TestGateway, scratch_dir};
use pulse_test_support::wait;
use reqwest::Method;
use serde_json::{Value, json};

const KEY: &str = "sk-readiness-marker-51c7e2";
const DEADLINE: Duration = Duration::from_secs(30);

async fn call(
    gw: &TestGateway,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<(u16, String, Value)> {
    let mut request = gw
        .http
        .request(method, gw.url(path))
        .bearer_auth(&gw.admin_token)
        .timeout(Duration::from_secs(60));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let text = response.text().await?;
    let value = serde_json::from_str(&text).unwrap_or(Value::Null);
    Ok((status, text, value))
}

async fn save(gw: &TestGateway, body: Value) -> anyhow::Result<Value> {
    let (status, text, value) = call(gw, Method::PUT, "/api/settings/ai", Some(body)).await?;
    anyhow::ensure!(status == 200, "settings save answered {status} {text}");
    Ok(value)
}

/// Waits until `GET /api/settings/ai` shows a preflight accepted by `done`; returns the body.
async fn settings_when(
    gw: &TestGateway,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> anyhow::Result<Value> {
    wait::until(DEADLINE, what, || async {
        let (status, _, body) = call(gw, Method::GET, "/api/settings/ai", None).await.ok()?;
        (status == 200 && done(&body)).then_some(body)
    })
    .await
}

/// Waits until the status is past `unavailable` (the gateway saw the model-runner).
async fn status(gw: &TestGateway) -> anyhow::Result<Value> {
    wait::until(DEADLINE, "a patrol status with a runner", || async {
        let (status, _, body) = call(gw, Method::GET, "/api/ai/patrol/status", None)
            .await
            .ok()?;
        (status == 200 && body["runtime_state"] != "unavailable").then_some(body)
    })
    .await
}

struct Stack {
    gateway: TestGateway,
    scheduler: TestScheduler,
    runner: TestModelRunner,
}

async fn stack(dir: &Path) -> anyhow::Result<Stack> {
    pulse_test_support::install_crypto_provider();
    let gateway = TestGateway::start().await?;
    let scheduler = TestScheduler::start(&gateway, &dir.join("scheduler"), &[]).await?;
    let runner = TestModelRunner::start(&gateway, &dir.join("runner"), &[]).await?;
    Ok(Stack {
        gateway,
        scheduler,
        runner,
    })
}

impl Stack {
    async fn stop(self) -> anyhow::Result<()> {
        self.runner.kill().await?;
        self.scheduler.stop().await?;
        self.gateway.stop().await
    }
}

#[tokio::test]
async fn a_route_known_not_to_work_blocks_runs_before_any_model_call() -> anyhow::Result<()> {
    // A provider that rejects the key: the preflight's one request is its only request.
    let sim = ProviderSim::start(Script::steps([Step::Error(SimError::unauthorized())])).await?;
    let dir = scratch_dir("readiness-blocked")?;
    let stack = stack(&dir).await?;
    let gw = &stack.gateway;

    save(
        gw,
        json!({
            "patrol_model": "openai:gpt-readiness",
            "providers": {"openai": {"api_key": KEY, "base_url": sim.openai_base_url()}}
        }),
    )
    .await?;
    let settings = settings_when(gw, "the failed preflight in the settings", |body| {
        body["preflight_state"] == "failed"
    })
    .await?;
    let preflight = &settings["patrol_preflight"];
    assert_eq!(preflight["route"], "openai:gpt-readiness", "{settings}");
    assert_eq!(preflight["ok"], false);
    assert_eq!(preflight["tool_call_observed"], false);
    assert_eq!(preflight["cause"], "auth");
    assert!(preflight["summary"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(preflight["recommendation"].is_string());
    assert!(preflight["checked_at"].is_string());
    assert!(preflight.get("base_url").is_none(), "{preflight}");
    assert!(
        !settings.to_string().contains(KEY),
        "a key leaked: {settings}"
    );
    assert_eq!(sim.requests().len(), 1, "the preflight's own request");

    let patrol = status(gw).await?;
    assert_eq!(patrol["runtime_state"], "blocked", "{patrol}");
    assert_eq!(patrol["blocked_cause"], "provider_auth");
    let reason = patrol["blocked_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("POST /api/ai/patrol/preflight"), "{reason}");
    let provider = patrol["readiness_checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["id"] == "provider"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(provider["status"], "fail", "{patrol}");
    assert_eq!(provider["cause"], "provider_auth");

    // Full and scoped manual runs are refused before anything is written or called.
    for body in [None, Some(json!({"resource_ids": ["anything"]}))] {
        let (code, text, refused) =
            call(gw, Method::POST, "/api/ai/patrol/run", body.clone()).await?;
        assert_eq!(code, 409, "{body:?}: {text}");
        assert_eq!(refused["error"], "patrol_not_ready", "{text}");
        let message = refused["message"].as_str().unwrap_or_default();
        assert!(message.contains("provider_auth"), "{message}");
        assert!(message.contains("PUT /api/settings/ai"), "{message}");
    }
    let (_, _, runs) = call(gw, Method::GET, "/api/ai/patrol/runs", None).await?;
    assert_eq!(runs["runs"], json!([]));
    assert_eq!(sim.requests().len(), 1, "no model call after the preflight");

    // Clearing the key moves the transport: a new preflight finds the route unconfigured
    // without calling the provider, and the gate names the missing key.
    save(gw, json!({"providers": {"openai": {"api_key": ""}}})).await?;
    let settings = settings_when(gw, "the unconfigured preflight", |body| {
        body["patrol_preflight"]["cause"] == "not_configured"
    })
    .await?;
    assert_eq!(settings["preflight_state"], "failed");
    let patrol = status(gw).await?;
    assert_eq!(patrol["runtime_state"], "blocked", "{patrol}");
    assert_eq!(patrol["blocked_cause"], "provider_not_configured");
    assert!(
        patrol["blocked_reason"]
            .as_str()
            .is_some_and(|r| r.contains("no API key")),
        "{patrol}"
    );
    let (code, text, _) = call(gw, Method::POST, "/api/ai/patrol/run", None).await?;
    assert_eq!(code, 409, "{text}");
    assert_eq!(sim.requests().len(), 1, "no call without a key");

    stack.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[tokio::test]
async fn a_working_route_is_ready_and_routine_saves_cost_no_preflight() -> anyhow::Result<()> {
    let sim = ProviderSim::start(Script::looping(PREFLIGHT_TOOL, json!({"ok": true}))).await?;
    let dir = scratch_dir("readiness-ready")?;
    let stack = stack(&dir).await?;
    let gw = &stack.gateway;

    save(
        gw,
        json!({
            "patrol_model": "openai:gpt-readiness",
            "providers": {"openai": {"api_key": KEY, "base_url": sim.openai_base_url()}}
        }),
    )
    .await?;
    let settings = settings_when(gw, "the passed preflight", |body| {
        body["preflight_state"] == "passed"
    })
    .await?;
    assert_eq!(settings["patrol_preflight"]["tool_call_observed"], true);
    assert_eq!(settings["patrol_preflight"]["cause"], Value::Null);
    assert_eq!(sim.requests().len(), 1);

    let patrol = status(gw).await?;
    assert_ne!(patrol["runtime_state"], "blocked", "{patrol}");
    assert_eq!(patrol["blocked_cause"], Value::Null);
    let checks = patrol["readiness_checks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(checks.len(), 7, "{patrol}");
    assert!(checks.iter().all(|c| c["status"] == "pass"), "{patrol}");

    // A routine save, then a route change: settings events are consumed in order, so once the
    // second one's preflight is stored the first was handled, and it called nothing.
    save(gw, json!({"patrol_interval_minutes": 30})).await?;
    save(gw, json!({"patrol_model": "openai:gpt-readiness-2"})).await?;
    settings_when(gw, "the second route's preflight", |body| {
        body["patrol_preflight"]["route"] == "openai:gpt-readiness-2"
            && body["preflight_state"] == "passed"
    })
    .await?;
    let models: Vec<String> = sim.requests().iter().map(|r| r.model.clone()).collect();
    assert_eq!(
        models,
        ["gpt-readiness", "gpt-readiness-2"],
        "one per route"
    );

    // An explicit preflight runs a fresh check and answers its outcome.
    let (code, text, answer) = call(gw, Method::POST, "/api/ai/patrol/preflight", None).await?;
    assert_eq!(code, 200, "{text}");
    assert_eq!(answer["preflight_state"], "passed", "{text}");
    assert_eq!(
        answer["patrol_preflight"]["route"],
        "openai:gpt-readiness-2"
    );
    assert!(!text.contains(KEY));
    assert_eq!(sim.requests().len(), 3);

    // The gate lets a manual run through.
    let (code, text, _) = call(gw, Method::POST, "/api/ai/patrol/run", None).await?;
    assert_eq!(code, 202, "{text}");

    stack.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[tokio::test]
async fn without_a_model_runner_a_preflight_request_says_what_to_do() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gw = TestGateway::start().await?;
    let (code, text, body) = call(&gw, Method::POST, "/api/ai/patrol/preflight", None).await?;
    assert_eq!(code, 503, "{text}");
    assert_eq!(body["error"], "patrol_runner_unavailable");
    assert!(text.contains("pulse-model-runner"), "{text}");
    // Nothing ran: the settings still say so.
    let (_, _, settings) = call(&gw, Method::GET, "/api/settings/ai", None).await?;
    assert_eq!(settings["preflight_state"], "not_run");
    assert_eq!(settings["patrol_preflight"], Value::Null);
    gw.stop().await
}
