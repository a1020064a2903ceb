//! `pulsectl patrol run | status | runs` against the real gateway, relay and patrol-scheduler,
//! with a `pulse-agent` supervising one service: the built `pulsectl` binary requests runs,
//! shows the current run in the status and lists the runs; refused requests print
//! `error: <code>: <message>` and exit 2.

use std::process::Output;
use std::time::Duration;

use pulse_test_support::agent::{AgentStack, write_service};
use pulse_test_support::scheduler::TestScheduler;
use pulse_test_support::service::{TestGateway, binary};
use pulse_test_support::wait;
use serde_json::{Value, json};

const INTERVAL: Duration = Duration::from_millis(500);
/// Time for a freshly spawned binary to start and connect, on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(10);

/// Runs `pulsectl <args>` against `gateway` with `token` given on the command line; the
/// environment's Pulse variables are removed so only the flags count.
async fn pulsectl(
    gateway: &TestGateway,
    token: &str,
    state_dir: &std::path::Path,
    args: &[&str],
) -> anyhow::Result<Output> {
    let mut command = tokio::process::Command::new(binary("pulsectl")?);
    command
        .args(["--gateway", &gateway.url, "--token", token, "--state-dir"])
        .arg(state_dir)
        .args(args)
        .env_remove("PULSE_GATEWAY_URL")
        .env_remove("PULSE_TOKEN")
        .env_remove("PULSE_STATE_DIR")
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(30), command.output()).await??;
    Ok(output)
}

/// Selects a keyless Patrol model, so the readiness gate lets runs through without a provider
/// call (no preflight runs here: there is no model-runner).
async fn select_patrol_model(gateway: &TestGateway, token: &str) -> anyhow::Result<()> {
    let response = gateway
        .http
        .put(gateway.url("/api/settings/ai"))
        .bearer_auth(token)
        .json(&json!({"patrol_model": "ollama:llama3.2"}))
        .send()
        .await?;
    anyhow::ensure!(
        response.status().is_success(),
        "settings save answered {}",
        response.status()
    );
    Ok(())
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

/// The value of a `label  value` line of pulsectl's text output.
fn field<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        line.strip_prefix(label)
            .filter(|rest| rest.starts_with("  "))
            .map(str::trim)
    })
}

#[tokio::test]
async fn pulsectl_requests_runs_and_shows_status_and_history() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let stack = AgentStack::start(&[]).await?;
    let scheduler = TestScheduler::start(&stack.gateway, &stack.dir.join("scheduler"), &[]).await?;
    let gateway = &stack.gateway;
    let admin = gateway.admin_token.clone();
    let state_dir = stack.dir.join("pulsectl-state");
    std::fs::create_dir_all(&state_dir)?;
    let agent_token = stack.create_token("agent", &["agent:report"]).await?;
    let reader = stack.create_token("reader", &["monitoring:read"]).await?;
    let admin_only = stack.create_token("admin-only", &["admin"]).await?;
    let host = pulse_test_support::agent::host_id("pulsectl");
    let spec = stack.agent_spec(&host, &agent_token, INTERVAL)?;
    write_service(
        &spec.services_dir,
        "sleeper.toml",
        "name = \"sleeper\"\ncommand = \"sleep\"\nargs = [\"3600\"]\n[restart]\npolicy = \"always\"\n",
    )?;
    let agent = stack.spawn_agent(&spec)?;
    let service_id = format!("service:{host}:sleeper");
    wait::until(STARTUP, "the supervised service", || async {
        let (status, _) = stack.resource(&reader, &service_id).await.ok()?;
        (status == 200).then_some(())
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent.log_tail(30)))?;

    // A full run: the id is printed, and the status names it as current.
    select_patrol_model(gateway, &admin).await?;
    let output = pulsectl(gateway, &admin, &state_dir, &["patrol", "run"]).await?;
    assert!(output.status.success(), "{}", describe(&output));
    let text = stdout(&output);
    let full_id = field(&text, "run")
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("no run id in {text}"))?;
    assert!(uuid::Uuid::parse_str(&full_id).is_ok(), "{text}");
    assert_eq!(field(&text, "type"), Some("full"), "{text}");
    assert_eq!(field(&text, "scope"), Some("all resources"), "{text}");

    let output = pulsectl(gateway, &reader, &state_dir, &["patrol", "status"]).await?;
    assert!(output.status.success(), "{}", describe(&output));
    let text = stdout(&output);
    assert_eq!(
        field(&text, "running"),
        Some(format!("yes: run {full_id} (full)").as_str()),
        "{text}"
    );
    assert!(field(&text, "state").is_some(), "{text}");
    assert!(field(&text, "interval").is_some(), "{text}");

    // --json prints the API's answer as it came.
    let output = pulsectl(
        gateway,
        &reader,
        &state_dir,
        &["patrol", "status", "--json"],
    )
    .await?;
    assert!(output.status.success(), "{}", describe(&output));
    let status: Value = serde_json::from_slice(&output.stdout)?;
    assert_eq!(status["current_run_id"], full_id.as_str());

    // A scoped run by resource id, with what it resolved to.
    let output = pulsectl(
        gateway,
        &admin,
        &state_dir,
        &["patrol", "run", "--resource", &service_id, "--json"],
    )
    .await?;
    assert!(output.status.success(), "{}", describe(&output));
    let accepted: Value = serde_json::from_slice(&output.stdout)?;
    let scoped_id = accepted["run_id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(accepted["type"], "scoped", "{accepted}");
    assert_eq!(
        accepted["effective_scope_resource_ids"],
        serde_json::json!([service_id])
    );

    // The list names both runs, newest first; --limit 1 keeps the newest.
    let output = pulsectl(gateway, &reader, &state_dir, &["patrol", "runs"]).await?;
    assert!(output.status.success(), "{}", describe(&output));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("ID "), "{text}");
    let listed: Vec<&str> = lines[1..]
        .iter()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert_eq!(listed, vec![scoped_id.as_str(), full_id.as_str()], "{text}");
    assert!(
        lines[2].contains(" manual ") && lines[2].contains(" full "),
        "{text}"
    );

    let output = pulsectl(
        gateway,
        &reader,
        &state_dir,
        &["patrol", "runs", "--limit", "1"],
    )
    .await?;
    assert!(output.status.success(), "{}", describe(&output));
    let text = stdout(&output);
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.lines().nth(1).unwrap_or("").starts_with(&scoped_id),
        "{text}"
    );

    // One run by id.
    let output = pulsectl(
        gateway,
        &reader,
        &state_dir,
        &["patrol", "runs", &scoped_id],
    )
    .await?;
    assert!(output.status.success(), "{}", describe(&output));
    let text = stdout(&output);
    assert_eq!(field(&text, "run"), Some(scoped_id.as_str()), "{text}");
    assert_eq!(
        field(&text, "effective"),
        Some(service_id.as_str()),
        "{text}"
    );

    // An unknown resource: refused with the code and the id, exit 2, nothing recorded.
    let output = pulsectl(
        gateway,
        &admin,
        &state_dir,
        &["patrol", "run", "--resource", "no-such-thing"],
    )
    .await?;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    let err = stderr(&output);
    assert!(err.starts_with("error: unprocessable_scope: "), "{err}");
    assert!(err.contains("no-such-thing"), "{err}");
    assert!(stdout(&output).is_empty(), "{}", describe(&output));

    // A token without ai:execute: refused with missing_scope, exit 2.
    let output = pulsectl(gateway, &admin_only, &state_dir, &["patrol", "run"]).await?;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    let err = stderr(&output);
    assert!(err.starts_with("error: missing_scope: "), "{err}");
    assert!(err.contains("ai:execute"), "{err}");

    // An unknown run id: not_found, exit 2.
    let unknown = uuid::Uuid::new_v4().to_string();
    let output = pulsectl(gateway, &reader, &state_dir, &["patrol", "runs", &unknown]).await?;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(
        stderr(&output).starts_with("error: not_found: "),
        "{}",
        describe(&output)
    );

    let output = pulsectl(gateway, &reader, &state_dir, &["patrol", "runs"]).await?;
    assert_eq!(stdout(&output).lines().count(), 3, "{}", describe(&output));

    let status = agent.stop(Duration::from_secs(10)).await?;
    assert!(status.success(), "agent exited with {status}");
    scheduler.stop().await?;
    stack.stop().await
}

/// Without a patrol-scheduler the run is not accepted: exit 1 (unavailable, not refused input)
/// with the stable code.
#[tokio::test]
async fn without_a_scheduler_pulsectl_exits_1_with_the_code() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gateway = TestGateway::start().await?;
    let state_dir = gateway.state_dir.join("pulsectl-state");
    std::fs::create_dir_all(&state_dir)?;
    let output = pulsectl(
        &gateway,
        &gateway.admin_token,
        &state_dir,
        &["patrol", "run"],
    )
    .await?;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let err = stderr(&output);
    assert!(
        err.starts_with("error: patrol_scheduler_unavailable: "),
        "{err}"
    );
    let output = pulsectl(
        &gateway,
        &gateway.admin_token,
        &state_dir,
        &["patrol", "runs"],
    )
    .await?;
    assert!(output.status.success(), "{}", describe(&output));
    assert_eq!(stdout(&output), "no patrol runs\n");
    gateway.stop().await
}
