//! `pulsectl approvals list | approve | reject` and `pulsectl audit verify` against the real
//! gateway and action-broker: the built `pulsectl` binary lists pending plans, records a human's
//! decisions, and verifies the tenant's audit chain, reporting a break (exit 1) after a row was
//! altered directly in the database. Refused requests print `error: <code>: <hint>` and exit 2.

use std::collections::BTreeMap;
use std::process::Output;
use std::time::Duration;

use chrono::Utc;
use pulse_domain::resource::{Health, ObservedResource, ResourceId, ResourceStatus, ResourceType};
use pulse_domain::{Scope, TenantId};
use pulse_store::agents::{self, AgentSession};
use pulse_store::tokens::{self, NewToken};
use pulse_store::users::{self, UserRole};
use pulse_store::{audit, resources};
use pulse_test_support::action_broker::TestActionBroker;
use pulse_test_support::service::{TestGateway, binary};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// Runs `pulsectl <args>` against `gateway` with `token` on the command line; the environment's
/// Pulse variables are removed so only the flags count.
async fn pulsectl(gateway: &TestGateway, token: &str, args: &[&str]) -> anyhow::Result<Output> {
    let mut command = tokio::process::Command::new(binary("pulsectl")?);
    command
        .args(["--gateway", &gateway.url, "--token", token, "--state-dir"])
        .arg(gateway.state_dir.join("pulsectl-state"))
        .args(args)
        .env_remove("PULSE_GATEWAY_URL")
        .env_remove("PULSE_TOKEN")
        .env_remove("PULSE_STATE_DIR")
        .kill_on_drop(true);
    Ok(tokio::time::timeout(Duration::from_secs(100), command.output()).await??)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn describe(output: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        stdout(output),
        stderr(output)
    )
}

/// Runs a command that must succeed; returns its stdout.
async fn ok(gateway: &TestGateway, token: &str, args: &[&str]) -> anyhow::Result<String> {
    let output = pulsectl(gateway, token, args).await?;
    anyhow::ensure!(output.status.success(), "{args:?}: {}", describe(&output));
    Ok(stdout(&output))
}

/// Runs a command that must fail with `code`; returns its output.
async fn fails(
    gateway: &TestGateway,
    token: &str,
    args: &[&str],
    code: i32,
) -> anyhow::Result<Output> {
    let output = pulsectl(gateway, token, args).await?;
    anyhow::ensure!(
        output.status.code() == Some(code),
        "{args:?}: expected exit {code}: {}",
        describe(&output)
    );
    Ok(output)
}

async fn call(
    gw: &TestGateway,
    method: Method,
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

/// A token of a new user `username` of the default tenant, issued through the store (tokens
/// created over the API belong to the admin user, who then could not approve their plans).
async fn user_token(gw: &TestGateway, username: &str, scopes: &[Scope]) -> anyhow::Result<String> {
    let tx = gw.db.store().tenant_tx(&TenantId::default_tenant()).await?;
    let user = users::create(&tx, username, UserRole::Operator).await?;
    let issued = tokens::issue(
        &tx,
        NewToken {
            name: username.to_owned(),
            scopes: scopes.iter().copied().collect(),
            expires_at: None,
            created_by: Some(user.id),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(issued.secret.expose().to_owned())
}

async fn create_token(gw: &TestGateway, name: &str, scopes: &[&str]) -> anyhow::Result<String> {
    let (status, body) = call(
        gw,
        Method::POST,
        "/api/tokens",
        &gw.admin_token,
        Some(json!({"name": name, "scopes": scopes})),
    )
    .await?;
    anyhow::ensure!(status.is_success(), "token creation: {status} {body}");
    Ok(body["token"].as_str().unwrap_or_default().to_owned())
}

/// One agent reporting one service named `name`; returns the service's canonical id.
async fn seed_service(gw: &TestGateway, name: &str) -> anyhow::Result<String> {
    let host = pulse_test_support::agent::host_id("approvals");
    let tx = gw.db.store().tenant_tx(&TenantId::default_tenant()).await?;
    agents::connect(
        &tx,
        &AgentSession {
            id: host.clone(),
            hostname: host.clone(),
            agent_version: "test".to_owned(),
            report_interval_ms: 1000,
            token_id: None,
        },
    )
    .await?;
    let service = ObservedResource {
        resource_type: ResourceType::Service,
        source_id: name.to_owned(),
        name: name.to_owned(),
        aliases: Vec::new(),
        status: ResourceStatus::Running,
        health: Health::Healthy,
        restart_count: Some(0),
        labels: BTreeMap::new(),
        details: Value::Null,
        metrics: BTreeMap::new(),
    };
    resources::apply_report(&tx, &host, Utc::now(), &[service]).await?;
    tx.commit().await?;
    Ok(ResourceId::service(&host, name).to_string())
}

/// Plans a restart of `target` on `resource_id`; returns the action id of the pending plan.
async fn plan(gw: &TestGateway, token: &str, resource_id: &str) -> anyhow::Result<String> {
    let (status, planned) = call(
        gw,
        Method::POST,
        "/api/actions/plan",
        token,
        Some(json!({
            "resource_id": resource_id,
            "capability": "service.restart",
            "params": {"target": "web"},
            "reason": "web stopped answering health checks",
            "severity": "critical",
            "approval_floor": "admin",
        })),
    )
    .await?;
    anyhow::ensure!(status == StatusCode::CREATED, "{status} {planned}");
    anyhow::ensure!(planned["state"] == "pending_approval", "{planned}");
    Ok(planned["action_id"].as_str().unwrap_or_default().to_owned())
}

/// The list line of action `id`.
fn row<'a>(text: &'a str, id: &str) -> Option<&'a str> {
    text.lines().find(|line| line.starts_with(id))
}

/// The tenant's audit rows, read through the store.
async fn audit_rows(gw: &TestGateway) -> anyhow::Result<Vec<audit::AuditRecord>> {
    let tx = gw.db.store().tenant_tx(&TenantId::default_tenant()).await?;
    let rows = audit::list(&tx, 0, 10_000).await?;
    tx.rollback().await?;
    Ok(rows)
}

#[tokio::test]
async fn pulsectl_decides_pending_actions_and_verifies_the_audit_chain() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gw = TestGateway::start().await?;
    let broker = TestActionBroker::start(&gw, &gw.state_dir.join("broker"), &[]).await?;
    let (status, body) = call(
        &gw,
        Method::PUT,
        "/api/settings/ai",
        &gw.admin_token,
        Some(json!({"autonomy_level": "approval"})),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Alice plans; the admin user decides.
    let planner = user_token(&gw, "alice", &[Scope::ActionsPlan]).await?;
    let reader = create_token(&gw, "reader", &["monitoring:read"]).await?;
    let chat = create_token(&gw, "chat", &["ai:chat"]).await?;
    let admin = gw.admin_token.clone();
    let web = seed_service(&gw, "web").await?;
    let approved = plan(&gw, &planner, &web).await?;
    let rejected = plan(&gw, &planner, &web).await?;

    // list: a header and one line per pending plan with its resource, capability and floor.
    let text = ok(&gw, &reader, &["approvals", "list"]).await?;
    assert!(text.starts_with("ID "), "{text}");
    for id in [&approved, &rejected] {
        let line = row(&text, id).unwrap_or_else(|| panic!("{id} missing from\n{text}"));
        for cell in [web.as_str(), "service.restart web", "critical", "admin"] {
            assert!(line.contains(cell), "{cell} missing from {line}");
        }
    }
    let text = ok(&gw, &reader, &["approvals", "list", "--json"]).await?;
    let listed: Value = serde_json::from_str(&text)?;
    assert!(
        listed
            .as_array()
            .is_some_and(|l| l.iter().any(|a| a["action_id"] == approved.as_str())),
        "{listed}"
    );

    // approve: the human's decision is recorded; the action leaves pending_approval (task C
    // may start its execution right away, so only "no longer pending" is asserted).
    let text = ok(
        &gw,
        &admin,
        &[
            "approvals",
            "approve",
            &approved,
            "--reason",
            "checked the logs",
        ],
    )
    .await?;
    assert!(
        text.starts_with(&format!("action {approved} approved by user:")),
        "{text}"
    );
    let (status, action) = call(
        &gw,
        Method::GET,
        &format!("/api/actions/{approved}"),
        &admin,
        None,
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{action}");
    assert_ne!(action["state"], "pending_approval", "{action}");
    assert_eq!(action["human_approved"], true, "{action}");
    let decider = action["decided_by"].as_str().unwrap_or_default().to_owned();
    assert!(decider.starts_with("user:"), "{action}");
    let (status, trail) = call(
        &gw,
        Method::GET,
        &format!("/api/actions/{approved}/audit"),
        &admin,
        None,
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{trail}");
    assert!(
        trail.as_array().is_some_and(|rows| rows
            .iter()
            .any(|r| r["kind"] == "action.approved" && r["actor"] == decider.as_str())),
        "{trail}"
    );

    // reject: the action is rejected by the same human.
    let text = ok(
        &gw,
        &admin,
        &[
            "approvals",
            "reject",
            &rejected,
            "--reason",
            "not during business hours",
        ],
    )
    .await?;
    assert_eq!(
        text.trim(),
        format!("action {rejected} rejected by {decider}: now rejected")
    );
    let (_, action) = call(
        &gw,
        Method::GET,
        &format!("/api/actions/{rejected}"),
        &admin,
        None,
    )
    .await?;
    assert_eq!(action["state"], "rejected", "{action}");
    assert_eq!(action["decision_reason"], "not during business hours");
    let text = ok(&gw, &reader, &["approvals", "list"]).await?;
    assert!(
        row(&text, &approved).is_none() && row(&text, &rejected).is_none(),
        "{text}"
    );

    // Refusals: one line with the code and what to do, exit 2.
    let output = fails(
        &gw,
        &admin,
        &[
            "approvals",
            "approve",
            &rejected,
            "--reason",
            "changed my mind",
        ],
        2,
    )
    .await?;
    let err = stderr(&output);
    assert!(
        err.starts_with("error: action_decision_not_allowed: "),
        "{err}"
    );
    assert!(err.contains("pulsectl approvals list"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let unknown = "01900000-0000-7000-8000-000000000000";
    let output = fails(
        &gw,
        &admin,
        &["approvals", "reject", unknown, "--reason", "x"],
        2,
    )
    .await?;
    assert!(
        stderr(&output).starts_with(&format!("error: action_not_found: no action {unknown}")),
        "{}",
        describe(&output)
    );
    let third = plan(&gw, &planner, &web).await?;
    let output = fails(
        &gw,
        &chat,
        &["approvals", "approve", &third, "--reason", "x"],
        2,
    )
    .await?;
    assert!(
        stderr(&output).starts_with("error: missing_scope: this token lacks actions:approve"),
        "{}",
        describe(&output)
    );

    // audit verify: intact, counting every row of the tenant's chain.
    // (An execution the approval started may still append rows meanwhile: the count is read
    // before and after.)
    let before = audit_rows(&gw).await?.len();
    let text = ok(&gw, &admin, &["audit", "verify"]).await?;
    let after = audit_rows(&gw).await?.len();
    let entries: usize = text
        .trim()
        .strip_prefix("audit chain intact: ")
        .and_then(|rest| rest.strip_suffix(" entries"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected report: {text}"));
    assert!(
        before > 0 && (before..=after).contains(&entries),
        "{entries} entries reported, {before}..={after} stored"
    );
    let output = fails(&gw, &chat, &["audit", "verify"], 2).await?;
    assert!(
        stderr(&output).starts_with("error: missing_scope:"),
        "{}",
        describe(&output)
    );

    // Tampering with a row directly in the database (as the superuser, triggers off) is found
    // at that row.
    let target = audit_rows(&gw)
        .await?
        .into_iter()
        .find(|r| r.kind == "action.rejected")
        .ok_or_else(|| anyhow::anyhow!("no action.rejected audit row"))?;
    let owner = gw.db.owner_client().await?;
    owner
        .batch_execute(&format!(
            "BEGIN; SET LOCAL session_replication_role = replica;
             UPDATE audit_events SET actor = 'user:someone-else'
             WHERE tenant_id = '{}' AND seq = {};
             COMMIT;",
            TenantId::default_tenant().as_str(),
            target.seq
        ))
        .await?;
    let output = fails(&gw, &admin, &["audit", "verify"], 1).await?;
    let text = stdout(&output);
    assert!(
        text.starts_with(&format!(
            "audit chain BROKEN at entry {}: row_hash_mismatch",
            target.seq
        )),
        "{}",
        describe(&output)
    );
    assert!(
        text.contains(&format!("{} entries before it verify", target.seq - 1)),
        "{text}"
    );
    assert!(
        stderr(&output).contains("error: the audit chain failed verification"),
        "{}",
        describe(&output)
    );
    let output = fails(&gw, &admin, &["audit", "verify", "--json"], 1).await?;
    let report: Value = serde_json::from_str(&stdout(&output))?;
    assert_eq!(report["ok"], false, "{report}");
    assert_eq!(report["first_broken_seq"], target.seq, "{report}");
    assert_eq!(report["reason"], "row_hash_mismatch", "{report}");

    broker.stop().await?;
    gw.stop().await
}
