//! `pulsectl patrol run | status | runs` against the real gateway, relay and patrol-scheduler,
//! with a `pulse-agent` supervising one service: the built `pulsectl` binary requests runs,
//! shows the current run in the status and lists the runs; refused requests print
//! `error: <code>: <message>` and exit 2.

use std::time::Duration;

use pulse_test_support::agent::{AgentStack, sleeper_service, write_service};
use pulse_test_support::cli::{Pulsectl, describe, field, stderr, stdout};
use pulse_test_support::patrol::select_keyless_model;
use pulse_test_support::scheduler::TestScheduler;
use pulse_test_support::service::TestGateway;
use pulse_test_support::wait;
use serde_json::Value;

const INTERVAL: Duration = Duration::from_millis(500);
/// Time for a freshly spawned binary to start and connect, on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(10);

#[tokio::test]
async fn pulsectl_requests_runs_and_shows_status_and_history() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let stack = AgentStack::start(&[]).await?;
    let scheduler = TestScheduler::start(&stack.gateway, &stack.dir.join("scheduler"), &[]).await?;
    let gateway = &stack.gateway;
    let admin = gateway.admin_token.clone();
    let state_dir = stack.dir.join("pulsectl-state");
    std::fs::create_dir_all(&state_dir)?;
    let cli = Pulsectl {
        gateway,
        state_dir,
        timeout: Duration::from_secs(30),
    };
    let agent_token = stack.create_token("agent", &["agent:report"]).await?;
    let reader = stack.create_token("reader", &["monitoring:read"]).await?;
    let admin_only = stack.create_token("admin-only", &["admin"]).await?;
    let host = pulse_test_support::agent::host_id("pulsectl");
    let spec = stack.agent_spec(&host, &agent_token, INTERVAL)?;
    write_service(
        &spec.services_dir,
        "sleeper.toml",
        &sleeper_service("sleeper"),
    )?;
    let agent = stack.spawn_agent(&spec)?;
    let service_id = format!("service:{host}:sleeper");
    wait::until(STARTUP, "the supervised service", || async {
        stack.resource(&reader, &service_id).await.ok().map(drop)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent.log_tail(30)))?;

    // A full run: the id is printed, and the status names it as current.
    select_keyless_model(gateway, &admin).await?;
    let output = cli.run(&admin, &["patrol", "run"]).await?;
    assert!(output.status.success(), "{}", describe(&output));
    let text = stdout(&output);
    let full_id = field(&text, "run")
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("no run id in {text}"))?;
    assert!(uuid::Uuid::parse_str(&full_id).is_ok(), "{text}");
    assert_eq!(field(&text, "type"), Some("full"), "{text}");
    assert_eq!(field(&text, "scope"), Some("all resources"), "{text}");

    let output = cli.run(&reader, &["patrol", "status"]).await?;
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
    let output = cli.run(&reader, &["patrol", "status", "--json"]).await?;
    assert!(output.status.success(), "{}", describe(&output));
    let status: Value = serde_json::from_slice(&output.stdout)?;
    assert_eq!(status["current_run_id"], full_id.as_str());

    // A scoped run by resource id, with what it resolved to.
    let output = cli
        .run(
            &admin,
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
    let output = cli.run(&reader, &["patrol", "runs"]).await?;
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

    let output = cli
        .run(&reader, &["patrol", "runs", "--limit", "1"])
        .await?;
    assert!(output.status.success(), "{}", describe(&output));
    let text = stdout(&output);
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.lines().nth(1).unwrap_or("").starts_with(&scoped_id),
        "{text}"
    );

    // One run by id.
    let output = cli.run(&reader, &["patrol", "runs", &scoped_id]).await?;
    assert!(output.status.success(), "{}", describe(&output));
    let text = stdout(&output);
    assert_eq!(field(&text, "run"), Some(scoped_id.as_str()), "{text}");
    assert_eq!(
        field(&text, "effective"),
        Some(service_id.as_str()),
        "{text}"
    );

    // An unknown resource: refused with the code and the id, exit 2, nothing recorded.
    let output = cli
        .run(&admin, &["patrol", "run", "--resource", "no-such-thing"])
        .await?;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    let err = stderr(&output);
    assert!(err.starts_with("error: unprocessable_scope: "), "{err}");
    assert!(err.contains("no-such-thing"), "{err}");
    assert!(stdout(&output).is_empty(), "{}", describe(&output));

    // A token without ai:execute: refused with missing_scope, exit 2.
    let output = cli.run(&admin_only, &["patrol", "run"]).await?;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    let err = stderr(&output);
    assert!(err.starts_with("error: missing_scope: "), "{err}");
    assert!(err.contains("ai:execute"), "{err}");

    // An unknown run id: not_found, exit 2.
    let unknown = uuid::Uuid::new_v4().to_string();
    let output = cli.run(&reader, &["patrol", "runs", &unknown]).await?;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(
        stderr(&output).starts_with("error: not_found: "),
        "{}",
        describe(&output)
    );

    let output = cli.run(&reader, &["patrol", "runs"]).await?;
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
    let cli = Pulsectl {
        gateway: &gateway,
        state_dir,
        timeout: Duration::from_secs(30),
    };
    let output = cli.run(&gateway.admin_token, &["patrol", "run"]).await?;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let err = stderr(&output);
    assert!(
        err.starts_with("error: patrol_scheduler_unavailable: "),
        "{err}"
    );
    let output = cli.run(&gateway.admin_token, &["patrol", "runs"]).await?;
    assert!(output.status.success(), "{}", describe(&output));
    assert_eq!(stdout(&output), "no patrol runs\n");
    gateway.stop().await
}
