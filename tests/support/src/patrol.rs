//! Patrol through the gateway's typed client, as the admin: saving AI settings and running a
//! full Watch run to its terminal record.

use std::collections::BTreeMap;
use std::time::Duration;

use pulse_domain::ai_settings::{PatchBody, ProviderPatch};
use pulse_domain::patrol::run::{PatrolRun, RunId};
use pulse_domain::patrol::scope::RawRunRequest;

use crate::service::TestGateway;

/// `PUT /api/settings/ai` with `body` as the admin; fails unless it is saved.
pub async fn save_settings(gateway: &TestGateway, body: &PatchBody) -> anyhow::Result<()> {
    save_settings_as(gateway, &gateway.admin_token, body).await
}

/// `PUT /api/settings/ai` with `body` and `token` (of the tenant to change); fails unless it is
/// saved.
pub async fn save_settings_as(
    gateway: &TestGateway,
    token: &str,
    body: &PatchBody,
) -> anyhow::Result<()> {
    gateway
        .client_as(token)?
        .patch_ai_settings(body)
        .await
        .map_err(|e| anyhow::anyhow!("settings not saved: {e}"))?;
    Ok(())
}

/// Selects a keyless Patrol model for the tenant of `token`, so the readiness gate lets runs
/// in without a provider call.
pub async fn select_keyless_model(gateway: &TestGateway, token: &str) -> anyhow::Result<()> {
    let body = PatchBody {
        patrol_model: Some(Some("ollama:llama3.2".to_owned())),
        ..PatchBody::default()
    };
    save_settings_as(gateway, token, &body).await
}

/// Settings that route Patrol to `openai:<model>` at `base_url` with `key`.
pub fn openai_route(model: &str, key: &str, base_url: &str) -> PatchBody {
    PatchBody {
        patrol_model: Some(Some(format!("openai:{model}"))),
        providers: openai_provider(key, base_url),
        ..PatchBody::default()
    }
}

/// Settings that route the Assistant (`chat_model`) to `openai:<model>` at `base_url` with
/// `key`.
pub fn openai_chat_route(model: &str, key: &str, base_url: &str) -> PatchBody {
    PatchBody {
        chat_model: Some(Some(format!("openai:{model}"))),
        providers: openai_provider(key, base_url),
        ..PatchBody::default()
    }
}

fn openai_provider(key: &str, base_url: &str) -> BTreeMap<String, ProviderPatch> {
    let provider = ProviderPatch {
        api_key: Some(Some(key.to_owned())),
        base_url: Some(Some(base_url.to_owned())),
        ..ProviderPatch::default()
    };
    BTreeMap::from([("openai".to_owned(), provider)])
}

/// Requests a full run as the admin and waits up to `deadline` for its terminal record.
pub async fn full_run(gateway: &TestGateway, deadline: Duration) -> anyhow::Result<PatrolRun> {
    let id = request_run(gateway, &RawRunRequest::default()).await?;
    terminal_run(gateway, id, deadline).await
}

/// Requests a run (`request`: its scope; the default: a full run) as the admin; fails unless it
/// is accepted. The run id.
pub async fn request_run(gateway: &TestGateway, request: &RawRunRequest) -> anyhow::Result<RunId> {
    let accepted = gateway
        .client()?
        .run_patrol(request)
        .await
        .map_err(|e| anyhow::anyhow!("run request refused: {e}"))?;
    Ok(accepted.accepted.run_id)
}

/// Waits up to `deadline` for the terminal record of run `id` (`healthy`, `issues_found` or
/// `error`), read as the admin.
pub async fn terminal_run(
    gateway: &TestGateway,
    id: RunId,
    deadline: Duration,
) -> anyhow::Result<PatrolRun> {
    let client = gateway.client()?;
    crate::wait::until(deadline, "a terminal run record", || async {
        let run = client.patrol_run_by_id(id).await.ok()?;
        run.status.is_terminal().then_some(run)
    })
    .await
}
