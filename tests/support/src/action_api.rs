//! The governed-action API as e2e tests drive it: raw JSON calls with a bearer token (for tests
//! about statuses, error bodies and malformed input), user tokens issued through the store, and,
//! through the typed client, restart plans, decisions, waiting for an action's state, its audit
//! rows and the Patrol mode; and a supervised service that counts its starts (the evidence that
//! an action ran, and ran once) on an agent with commands enabled.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pulse_api::actions::{ActionView, AuditRecord, DecisionBody, DecisionOutcome, PlanBody};
use pulse_domain::action::{ActionState, Severity};
use pulse_domain::ai_settings::{AutonomyLevel, PatchBody};
use pulse_domain::{Scope, TenantId};
use pulse_store::Store;
use pulse_store::tokens::{self, NewToken};
use pulse_store::users::{self, UserRole};
use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::agent::AgentStack;
use crate::service::{ServiceProcess, TestGateway};
use crate::wait;

/// One API call; the body as JSON (or as a JSON string when it is not JSON).
pub async fn call(
    gw: &TestGateway,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> anyhow::Result<(StatusCode, Value)> {
    let request = gw
        .http
        .request(method, gw.url(path))
        .timeout(Duration::from_secs(100))
        .bearer_auth(token);
    send(request, body).await
}

/// Sends `request` (with `body` as JSON when given); the status and the body as JSON (or as a
/// JSON string when it is not JSON).
pub async fn send(
    mut request: reqwest::RequestBuilder,
    body: Option<Value>,
) -> anyhow::Result<(StatusCode, Value)> {
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
        "name = \"counter\"\n{}[restart]\npolicy = \"always\"\n",
        crate::agent::counting_command(starts)
    )
}

/// How often the counter service has started.
pub fn starts(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// Waits until the counter service has started `count` times.
pub async fn wait_starts(
    path: &Path,
    count: usize,
    deadline: Duration,
    what: &str,
) -> anyhow::Result<()> {
    wait::until(deadline, what, || async {
        (starts(path) == count).then_some(())
    })
    .await
}

/// Sets the tenant's Patrol mode (`autonomy_level`) as the admin; fails unless it is saved.
pub async fn set_autonomy_level(gw: &TestGateway, level: AutonomyLevel) -> anyhow::Result<()> {
    let body = PatchBody {
        autonomy_level: Some(Some(level)),
        ..PatchBody::default()
    };
    crate::patrol::save_settings(gw, &body).await
}

/// The plan of a `service.restart` of `target` on `resource_id` (no approval floor, no finding:
/// set them where a test needs them).
pub fn restart_plan(resource_id: &str, target: &str, severity: Severity) -> PlanBody {
    PlanBody {
        resource_id: resource_id.to_owned(),
        capability: "service.restart".to_owned(),
        params: json!({"target": target}),
        reason: format!("{target} stopped answering health checks"),
        severity,
        approval_floor: None,
        finding_id: None,
    }
}

/// Submits `plan` as `requester`; fails unless it is created and waits for a human. The action
/// id.
pub async fn plan_pending(
    gw: &TestGateway,
    requester: &str,
    plan: &PlanBody,
) -> anyhow::Result<String> {
    let planned = gw
        .client_as(requester)?
        .plan_action(plan)
        .await
        .map_err(|e| anyhow::anyhow!("plan refused: {e}"))?;
    anyhow::ensure!(planned.state == ActionState::PendingApproval, "{planned:?}");
    Ok(planned.plan.action_id.to_string())
}

/// A decision body.
pub fn decision(outcome: DecisionOutcome, reason: &str) -> DecisionBody {
    DecisionBody {
        outcome,
        reason: reason.to_owned(),
    }
}

/// The action's view, when the gateway answers it.
pub async fn action_view(gw: &TestGateway, id: &str, token: &str) -> Option<ActionView> {
    gw.client_as(token).ok()?.action(id).await.ok()
}

/// Waits until action `id` is in `state` (and, for `completed`, verified); its view.
pub async fn action_in_state(
    gw: &TestGateway,
    id: &str,
    token: &str,
    state: ActionState,
    deadline: Duration,
) -> anyhow::Result<ActionView> {
    let client = gw.client_as(token)?;
    wait::until(
        deadline,
        &format!("action {id} to be {state:?}"),
        || async {
            let action = client.action(id).await.ok()?;
            let verified = state != ActionState::Completed || action.verification.is_some();
            (action.state == state && verified).then_some(action)
        },
    )
    .await
}

/// The action's audit rows through the API.
pub async fn audit_rows(
    gw: &TestGateway,
    id: &str,
    token: &str,
) -> anyhow::Result<Vec<AuditRecord>> {
    gw.client_as(token)?
        .action_audit(id)
        .await
        .map_err(|e| anyhow::anyhow!("audit of {id}: {e}"))
}

/// The kinds of an action's audit rows, in order.
pub fn audit_kinds(rows: &[AuditRecord]) -> Vec<&str> {
    rows.iter().map(|r| r.kind.as_str()).collect()
}

/// The audit trail of an action approved by a human, executed once and verified.
pub const APPROVED_EXECUTED_VERIFIED: [&str; 6] = [
    "action.planned",
    "action.pending_approval",
    "action.approved",
    "action.executing",
    "action.completed",
    "action.verification",
];

/// Starts an agent `host` of `stack` with commands enabled, supervising the counter service
/// (counting its starts in a file of the stack's directory), and waits up to `startup` for the
/// service's first start. The starts file and the agent.
pub async fn spawn_counter_agent(
    stack: &AgentStack,
    host: &str,
    interval: Duration,
    startup: Duration,
) -> anyhow::Result<(PathBuf, ServiceProcess)> {
    let starts_file = stack.dir.join(format!("{host}.starts"));
    let (_, agent) = stack
        .spawn_command_agent(
            host,
            interval,
            &[("counter.toml", counter_service(&starts_file))],
        )
        .await?;
    wait_starts(&starts_file, 1, startup, "the service to start once")
        .await
        .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent.log_tail(30)))?;
    Ok((starts_file, agent))
}
