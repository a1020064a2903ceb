//! The model catalogue and provider tests through the real gateway and model-runner binaries
//! against the provider simulator: `GET /api/ai/models` lists every provider the tenant uses
//! from that provider's own list endpoint, in each protocol's shape (OpenAI-compatible, Ollama,
//! Anthropic, Gemini), and classifies a failing provider (unreachable, rejected key, not the
//! list, not configured) while the others still list. `POST /api/ai/test/{id}` runs the
//! preflight's model turn on any provider and model and saves nothing: the settings and the
//! stored Patrol preflight are unchanged afterwards. Bad input gets stable codes and calls no
//! provider. `pulsectl models list` prints the same catalogue and `pulsectl models test` runs a
//! test.

use std::path::Path;
use std::time::Duration;

use pulse_api::models::{CatalogueErrorCode, ModelCatalogue};
use pulse_domain::patrol::readiness::PreflightState;
use pulse_model_runner::preflight::PREFLIGHT_TOOL;
use pulse_test_support::cli::{Pulsectl, describe, stdout};
use pulse_test_support::provider_sim::{ProviderSim, Script, SimError, SimProtocol, Turn};
use pulse_test_support::runner::TestModelRunner;
use pulse_test_support::service::{TestGateway, scratch_dir};
use pulse_test_support::wait;
use reqwest::Method;
use serde_json::{Value, json};

const KEY: &str = "sk-catalogue-marker-3b81d0";
const DEADLINE: Duration = Duration::from_secs(60);

struct Stack {
    gateway: TestGateway,
    runner: TestModelRunner,
}

async fn stack(dir: &Path) -> anyhow::Result<Stack> {
    pulse_test_support::install_crypto_provider();
    let gateway = TestGateway::start().await?;
    let runner = TestModelRunner::start(&gateway, &dir.join("runner"), &[]).await?;
    Ok(Stack { gateway, runner })
}

impl Stack {
    async fn stop(self) -> anyhow::Result<()> {
        self.runner.kill().await?;
        self.gateway.stop().await
    }
}

async fn call(
    gw: &TestGateway,
    method: Method,
    path: &str,
    body: Option<&str>,
) -> anyhow::Result<(u16, Value)> {
    let mut request = gw
        .http
        .request(method, gw.url(path))
        .bearer_auth(&gw.admin_token)
        .timeout(Duration::from_secs(90));
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_owned());
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let text = response.text().await?;
    Ok((
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

async fn save(gw: &TestGateway, body: Value) -> anyhow::Result<Value> {
    let (status, value) =
        call(gw, Method::PUT, "/api/settings/ai", Some(&body.to_string())).await?;
    anyhow::ensure!(status == 200, "settings save answered {status} {value}");
    Ok(value)
}

/// The catalogue, once a model-runner answers it.
async fn catalogue(gw: &TestGateway) -> anyhow::Result<ModelCatalogue> {
    let client = gw.client()?;
    wait::until(
        DEADLINE,
        "a model catalogue from the model-runner",
        || async { client.ai_models().await.ok() },
    )
    .await
}

/// An address nothing listens on.
fn closed_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

#[tokio::test]
async fn each_provider_lists_in_its_own_shape_and_a_failing_one_is_classified() -> anyhow::Result<()>
{
    let sim = ProviderSim::start(Script::lazy("no tools here").with_models(["alpha-1", "beta-2"]))
        .await?;
    let refusing = ProviderSim::start(Script::lazy("unused").with_list_error(SimError::message(
        401,
        "invalid_api_key",
        "Incorrect API key provided",
    )))
    .await?;
    let portal = ProviderSim::start(Script::lazy("unused").with_list_error(SimError::raw(
        200,
        "text/html",
        "<!doctype html><html><title>Sign in</title></html>",
    )))
    .await?;
    let unreachable = format!("http://127.0.0.1:{}/v1", closed_port()?);
    // Two servers that take the connection and never answer: each list's 10 s bound ends its
    // wait, and asked at once they cost one bound, not two.
    let silent = std::net::TcpListener::bind("127.0.0.1:0")?;
    let silent_url = format!("http://{}/v1", silent.local_addr()?);
    let silent_too = std::net::TcpListener::bind("127.0.0.1:0")?;
    let silent_too_url = format!("http://{}/v1", silent_too.local_addr()?);
    let dir = scratch_dir("models-catalogue")?;
    let stack = stack(&dir).await?;
    let gw = &stack.gateway;

    // No provider set up: an empty catalogue, not an error.
    let empty = catalogue(gw).await?;
    assert!(empty.providers.is_empty(), "{empty:?}");

    save(
        gw,
        json!({
            // Named by a route, with no key: in use but not configured.
            "chat_model": "deepseek:deepseek-chat",
            "providers": {
                "openai": {"api_key": KEY, "base_url": sim.openai_base_url()},
                "anthropic": {"api_key": KEY, "base_url": sim.base_url()},
                "gemini": {"api_key": KEY, "base_url": sim.gemini_base_url()},
                "ollama": {"base_url": sim.base_url()},
                "groq": {"api_key": KEY, "base_url": refusing.openai_base_url()},
                "mistral": {"api_key": KEY, "base_url": unreachable},
                "fireworks": {"api_key": KEY, "base_url": portal.openai_base_url()},
                "together": {"api_key": KEY, "base_url": silent_url},
                "openrouter": {"api_key": KEY, "base_url": silent_too_url},
            }
        }),
    )
    .await?;
    let asked_at = std::time::Instant::now();
    let listed = catalogue(gw).await?;
    assert!(
        asked_at.elapsed() < Duration::from_secs(19),
        "the catalogue took {:?}",
        asked_at.elapsed()
    );
    let ids: Vec<&str> = listed
        .providers
        .iter()
        .map(|p| p.provider.as_str())
        .collect();
    assert_eq!(
        ids,
        [
            "openai",
            "openrouter",
            "deepseek",
            "groq",
            "mistral",
            "together",
            "fireworks",
            "ollama",
            "anthropic",
            "gemini"
        ],
        "the providers in use, in the table's order"
    );
    let provider = |id: &str| listed.provider(id).cloned().expect("listed provider");
    for id in ["openai", "anthropic", "gemini", "ollama"] {
        let entry = provider(id);
        assert!(entry.ok && entry.error.is_none(), "{entry:?}");
        let models: Vec<&str> = entry.models.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(models, ["alpha-1", "beta-2"], "{id}");
        assert_eq!(entry.models[0].route, format!("{id}:alpha-1"));
    }
    assert_eq!(
        provider("openai").models[0].owned_by.as_deref(),
        Some("pulse-sim")
    );
    assert_eq!(
        provider("anthropic").models[1].display_name.as_deref(),
        Some("Simulated beta-2")
    );
    assert_eq!(provider("gemini").models[0].context_window, Some(131_072));
    assert!(
        provider("ollama").models[0]
            .details
            .as_deref()
            .is_some_and(|d| d.contains("Q4_K_M")),
        "{:?}",
        provider("ollama")
    );

    let failed = |id: &str| provider(id).error.map(|e| e.code);
    assert_eq!(
        failed("deepseek"),
        Some(CatalogueErrorCode::ProviderNotConfigured)
    );
    assert_eq!(failed("groq"), Some(CatalogueErrorCode::ProviderAuthFailed));
    assert_eq!(
        failed("mistral"),
        Some(CatalogueErrorCode::ProviderUnreachable)
    );
    assert_eq!(
        failed("fireworks"),
        Some(CatalogueErrorCode::ProviderBadResponse)
    );
    for id in ["together", "openrouter"] {
        assert_eq!(failed(id), Some(CatalogueErrorCode::ProviderTimeout));
        assert!(provider(id).elapsed_ms >= 9_000, "{:?}", provider(id));
    }
    for id in [
        "deepseek",
        "groq",
        "mistral",
        "together",
        "openrouter",
        "fireworks",
    ] {
        let entry = provider(id);
        let error = entry.error.clone().expect("an error");
        assert!(!entry.ok && entry.models.is_empty(), "{entry:?}");
        assert!(!error.message.is_empty() && !error.remedy.is_empty());
    }
    let raw = serde_json::to_string(&listed)?;
    assert!(!raw.contains(KEY), "a key leaked: {raw}");
    assert!(
        !raw.contains("Incorrect API key"),
        "a raw provider error: {raw}"
    );

    // Each list was asked at its own endpoint with its own credential.
    let requests = sim.requests();
    let asked = |protocol: SimProtocol| {
        requests
            .iter()
            .find(|r| r.protocol == protocol && r.method == "GET")
            .cloned()
            .unwrap_or_else(|| panic!("no {protocol:?} list request: {requests:?}"))
    };
    let openai = asked(SimProtocol::OpenAi);
    assert_eq!(openai.path, "/v1/models");
    assert_eq!(
        openai.headers.get("authorization"),
        Some(&format!("Bearer {KEY}"))
    );
    let anthropic = asked(SimProtocol::Anthropic);
    assert!(
        anthropic.path.starts_with("/v1/models?"),
        "{}",
        anthropic.path
    );
    assert_eq!(anthropic.headers.get("x-api-key"), Some(&KEY.to_owned()));
    assert!(anthropic.headers.contains_key("anthropic-version"));
    let gemini = asked(SimProtocol::Gemini);
    assert!(
        gemini.path.starts_with("/v1beta/models?"),
        "{}",
        gemini.path
    );
    assert_eq!(gemini.headers.get("x-goog-api-key"), Some(&KEY.to_owned()));
    let ollama = asked(SimProtocol::Ollama);
    assert_eq!(ollama.path, "/api/tags");
    assert!(!ollama.headers.contains_key("authorization"));
    assert!(
        requests.iter().all(|r| r.method == "GET"),
        "listing called no model"
    );

    // The same catalogue from the CLI: routes of the listing providers, codes of the others.
    let cli = Pulsectl::new(gw, Duration::from_secs(60));
    let text = cli.ok(&gw.admin_token, &["models", "list"]).await?;
    assert!(text.contains("anthropic:beta-2"), "{text}");
    assert!(
        text.contains("mistral (Mistral): provider_unreachable"),
        "{text}"
    );
    assert!(text.contains("groq (Groq): provider_auth_failed"), "{text}");
    let output = cli
        .run(&gw.admin_token, &["models", "list", "--json"])
        .await?;
    assert!(output.status.success(), "{}", describe(&output));
    let json: ModelCatalogue = serde_json::from_str(&stdout(&output))?;
    assert_eq!(json.providers.len(), listed.providers.len());

    stack.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[tokio::test]
async fn a_provider_test_answers_the_preflight_and_saves_nothing() -> anyhow::Result<()> {
    // A scripted model calls the probe tool; `sim:lazy` answers in prose.
    let sim = ProviderSim::start(Script::always(Turn::tool(
        PREFLIGHT_TOOL,
        json!({"ok": true}),
    )))
    .await?;
    let dir = scratch_dir("models-test")?;
    let stack = stack(&dir).await?;
    let gw = &stack.gateway;
    save(
        gw,
        json!({
            "patrol_model": "openai:gpt-patrol",
            "providers": {"openai": {"api_key": KEY, "base_url": sim.openai_base_url()}}
        }),
    )
    .await?;
    let client = gw.client()?;
    let before = wait::until(DEADLINE, "the stored Patrol preflight", || async {
        let settings = client.ai_settings().await.ok()?;
        (settings.patrol_preflight.is_some()
            && settings.preflight_state == pulse_api::settings::SettingsPreflightState::Passed)
            .then_some(settings)
    })
    .await?;
    let requests_before = sim.requests().len();

    let passed = client.test_provider("openai", "gpt-candidate").await?;
    assert_eq!(passed.state, PreflightState::Passed, "{passed:?}");
    assert_eq!(passed.outcome.route, "openai:gpt-candidate");
    assert!(passed.outcome.ok && passed.outcome.tool_call_observed);
    assert!(passed.outcome.transport.is_some(), "{passed:?}");
    let sent = sim.requests();
    assert_eq!(sent.len(), requests_before + 1, "one model turn");
    assert_eq!(sent[requests_before].model, "gpt-candidate");

    let lazy = client.test_provider("openai", "sim:lazy").await?;
    assert_eq!(lazy.state, PreflightState::Failed, "{lazy:?}");
    assert_eq!(lazy.outcome.cause.as_deref(), Some("no_tool_support"));
    assert!(lazy.outcome.recommendation.is_some());

    // The CLI runs the same test and says what came of it; a provider not set up exits 2.
    let cli = Pulsectl::new(gw, Duration::from_secs(90));
    let text = cli
        .ok(
            &gw.admin_token,
            &["models", "test", "openai", "gpt-candidate"],
        )
        .await?;
    assert!(text.starts_with("openai:gpt-candidate: passed"), "{text}");
    let refused = cli
        .fails(
            &gw.admin_token,
            &["models", "test", "anthropic", "claude-x"],
            2,
        )
        .await?;
    assert!(
        pulse_test_support::cli::stderr(&refused).contains("provider_not_configured"),
        "{}",
        describe(&refused)
    );

    // Nothing was saved: the settings version, the routes and the stored preflight are as they
    // were.
    let after = client.ai_settings().await?;
    assert_eq!(after.version, before.version);
    assert_eq!(after.patrol_model.as_deref(), Some("openai:gpt-patrol"));
    assert_eq!(after.patrol_preflight, before.patrol_preflight);
    assert_eq!(after.preflight_state, before.preflight_state);

    // Bad input: stable codes, and no provider is called.
    let requests_after = sim.requests().len();
    for (path, body, status, code) in [
        (
            "/api/ai/test/nosuch",
            r#"{"model":"x"}"#,
            404,
            "provider_not_found",
        ),
        (
            "/api/ai/test/anthropic",
            r#"{"model":"claude-x"}"#,
            409,
            "provider_not_configured",
        ),
        ("/api/ai/test/openai", r#"{}"#, 422, "invalid_request"),
        (
            "/api/ai/test/openai",
            r#"{"model":""}"#,
            422,
            "invalid_request",
        ),
        (
            "/api/ai/test/openai",
            r#"{"model":" gpt"}"#,
            422,
            "invalid_request",
        ),
        (
            "/api/ai/test/openai",
            r#"{"model":"x","save":true}"#,
            422,
            "invalid_request",
        ),
        ("/api/ai/test/openai", r#"{"model":"#, 400, "invalid_json"),
    ] {
        let (got, answer) = call(gw, Method::POST, path, Some(body)).await?;
        assert_eq!(got, status, "{path} {body}: {answer}");
        assert_eq!(answer["error"], code, "{path} {body}: {answer}");
        assert!(answer["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    assert_eq!(
        sim.requests().len(),
        requests_after,
        "refused input called a provider"
    );

    stack.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
