//! Patrol through the gateway's API, as the admin: saving AI settings and running a full Watch
//! run to its terminal record.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::service::TestGateway;

/// `PUT /api/settings/ai` with `body` as the admin; fails unless it is saved.
pub async fn save_settings(gateway: &TestGateway, body: Value) -> anyhow::Result<()> {
    save_settings_as(gateway, &gateway.admin_token, body).await
}

/// `PUT /api/settings/ai` with `body` and `token` (of the tenant to change); fails unless it is
/// saved.
pub async fn save_settings_as(
    gateway: &TestGateway,
    token: &str,
    body: Value,
) -> anyhow::Result<()> {
    let (status, saved) = gateway
        .request_json(Method::PUT, token, "/api/settings/ai", Some(body))
        .await?;
    anyhow::ensure!(status == 200, "settings answered {status} {saved}");
    Ok(())
}

/// Selects a keyless Patrol model for the tenant of `token`, so the readiness gate lets runs
/// in without a provider call.
pub async fn select_keyless_model(gateway: &TestGateway, token: &str) -> anyhow::Result<()> {
    save_settings_as(gateway, token, json!({"patrol_model": "ollama:llama3.2"})).await
}

/// Settings that route Patrol to `openai:<model>` at `base_url` with `key`.
pub fn openai_route(model: &str, key: &str, base_url: &str) -> Value {
    json!({
        "patrol_model": format!("openai:{model}"),
        "providers": {"openai": {"api_key": key, "base_url": base_url}}
    })
}

/// Settings that route the Assistant (`chat_model`) to `openai:<model>` at `base_url` with
/// `key`.
pub fn openai_chat_route(model: &str, key: &str, base_url: &str) -> Value {
    json!({
        "chat_model": format!("openai:{model}"),
        "providers": {"openai": {"api_key": key, "base_url": base_url}}
    })
}

/// Requests a full run as the admin and waits up to `deadline` for its terminal record.
pub async fn full_run(gateway: &TestGateway, deadline: Duration) -> anyhow::Result<Value> {
    let id = request_run(gateway, None).await?;
    terminal_run(gateway, &id, deadline).await
}

/// Requests a run (`body`: its scope; `None`: a full run) as the admin; fails unless it is
/// accepted. The run id.
pub async fn request_run(gateway: &TestGateway, body: Option<Value>) -> anyhow::Result<String> {
    let (status, accepted) = gateway
        .admin_json(Method::POST, "/api/ai/patrol/run", body)
        .await?;
    anyhow::ensure!(status == 202, "run request answered {status} {accepted}");
    accepted["run_id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("no run_id in {accepted}"))
}

/// Waits up to `deadline` for the terminal record of run `id` (`healthy`, `issues_found` or
/// `error`), read as the admin.
pub async fn terminal_run(
    gateway: &TestGateway,
    id: &str,
    deadline: Duration,
) -> anyhow::Result<Value> {
    crate::wait::until(deadline, "a terminal run record", || async {
        let (status, run) = gateway
            .admin_json(Method::GET, &format!("/api/ai/patrol/runs/{id}"), None)
            .await
            .ok()?;
        (status == 200
            && matches!(
                run["status"].as_str(),
                Some("healthy" | "issues_found" | "error")
            ))
        .then_some(run)
    })
    .await
}
