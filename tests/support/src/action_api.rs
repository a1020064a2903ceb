//! The governed-action API as e2e tests drive it: JSON calls with a bearer token, user tokens
//! issued through the store, and a supervised service that counts its starts (the evidence that
//! an action ran, and ran once).

use std::path::Path;
use std::time::Duration;

use pulse_domain::{Scope, TenantId};
use pulse_store::Store;
use pulse_store::tokens::{self, NewToken};
use pulse_store::users::{self, UserRole};
use reqwest::StatusCode;
use serde_json::Value;
use uuid::Uuid;

use crate::service::TestGateway;

/// One API call; the body as JSON (or as a JSON string when it is not JSON).
pub async fn call(
    gw: &TestGateway,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> anyhow::Result<(StatusCode, Value)> {
    let mut request = gw
        .http
        .request(method, gw.url(path))
        .timeout(Duration::from_secs(100))
        .bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await?;
    let status = response.status();
    let text = response.text().await?;
    Ok((
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

pub async fn post(
    gw: &TestGateway,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> anyhow::Result<(StatusCode, Value)> {
    call(gw, reqwest::Method::POST, path, token, body).await
}

pub async fn get(gw: &TestGateway, path: &str, token: &str) -> anyhow::Result<(StatusCode, Value)> {
    call(gw, reqwest::Method::GET, path, token, None).await
}

/// The stable error code of an error body.
pub fn error_code(body: &Value) -> &str {
    body["error"].as_str().unwrap_or_default()
}

/// A token of a new user `user` of `tenant` (or of no user), issued through the store.
pub async fn user_token(
    store: &Store,
    tenant: &TenantId,
    user: Option<&str>,
    scopes: &[Scope],
) -> anyhow::Result<String> {
    let tx = store.tenant_tx(tenant).await?;
    let created_by = match user {
        Some(name) => Some(users::create(&tx, name, UserRole::Operator).await?.id),
        None => None,
    };
    let issued = tokens::issue(
        &tx,
        NewToken {
            name: format!("{}-{}", user.unwrap_or("service"), Uuid::now_v7().simple()),
            scopes: scopes.iter().copied().collect(),
            expires_at: None,
            created_by,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(issued.secret.expose().to_owned())
}

/// A supervised service `counter` that appends a line to `starts` each time it starts, then
/// sleeps; restarted by the agent whenever it exits.
pub fn counter_service(starts: &Path) -> String {
    format!(
        "name = \"counter\"\ncommand = \"sh\"\n\
         args = [\"-c\", \"echo started >> '{}'; exec sleep 3600\"]\n\
         [restart]\npolicy = \"always\"\n",
        starts.display()
    )
}

/// How often the counter service has started.
pub fn starts(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}
