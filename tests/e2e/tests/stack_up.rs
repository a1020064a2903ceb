//! `pulsectl up` runs the real stack and takes all of it down again.
//!
//! Needs the binaries built first (`cargo build --bins`); builds nothing itself. Each test gets
//! its own state directory, database (created by pulsectl, dropped at the end), subject prefix
//! and ports, so it runs beside other tests and beside a developer's stack.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use pulse_test_support::stack::{
    self, PulsectlUp, STACK_BINARIES, StackOptions, descendants, file_mode, not_ready,
    process_alive, require_stack_binaries, wait_until,
};

const READY_WITHIN: Duration = Duration::from_secs(150);
const STOP_WITHIN: Duration = Duration::from_secs(20);

fn http() -> anyhow::Result<reqwest::Client> {
    pulse_test_support::install_crypto_provider();
    Ok(reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?)
}

/// Runs `body`, then cleans up whatever it left (database, state dir) even when it failed.
async fn with_stack<F, Fut>(label: &str, body: F) -> anyhow::Result<()>
where
    F: FnOnce(StackOptions) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    require_stack_binaries()?;
    let options = StackOptions::isolated(label)?;
    let result = body(options.clone()).await;
    let cleanup = options.cleanup().await;
    result?;
    cleanup
}

/// Waits until the gateway reports the seven services ready, failing early if pulsectl exits.
async fn wait_for_green(
    up: &mut PulsectlUp,
    http: &reqwest::Client,
    options: &StackOptions,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + READY_WITHIN;
    loop {
        if let Some(status) = up.exited() {
            anyhow::bail!(
                "pulsectl exited ({status}) before the stack was ready\n{}",
                up.output()
            );
        }
        let report = stack::health(http, &options.gateway_url()).await;
        if report.is_some_and(|report| not_ready(&report).is_empty()) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            let report = stack::health(http, &options.gateway_url()).await;
            anyhow::bail!(
                "not all seven services ready within {READY_WITHIN:?}; last report: {report:?}\n{}",
                up.output()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Names of the stack binaries among `processes`.
fn binary_names(processes: &[stack::ProcessInfo]) -> BTreeSet<String> {
    processes
        .iter()
        .map(|p| p.name.clone())
        .filter(|name| STACK_BINARIES.contains(&name.as_str()))
        .collect()
}

fn service_binaries() -> BTreeSet<String> {
    STACK_BINARIES
        .iter()
        .filter(|name| **name != "pulsectl")
        .map(|name| (*name).to_owned())
        .collect()
}

#[tokio::test]
async fn up_runs_every_service_until_interrupted_and_leaves_nothing_behind() -> anyhow::Result<()> {
    with_stack("stack-up", |mut options| async move {
        let http = http()?;
        let mut up = PulsectlUp::spawn(&options, &[])?;
        options.learn_gateway(&up).await?;
        wait_for_green(&mut up, &http, &options).await?;

        // The summary names the gateway URL once the stack is green.
        let url_line = format!("Pulse is up: {}", options.gateway_url());
        wait_until(Duration::from_secs(10), "the ready summary", || {
            let printed = up.stdout().contains(&url_line);
            async move { printed }
        })
        .await
        .with_context(|| up.output())?;
        ensure!(
            stack::database_exists(&options.database_name).await?,
            "pulsectl did not create database {}",
            options.database_name
        );

        // The admin token: written once, private to its owner, and accepted by the API.
        let token_path = options.admin_token_path();
        ensure!(
            file_mode(&token_path)? == 0o600,
            "admin token mode is {:o}",
            file_mode(&token_path)?
        );
        let admin_token = std::fs::read_to_string(&token_path)?.trim().to_owned();
        let response = http
            .get(format!("{}/api/tokens", options.gateway_url()))
            .bearer_auth(&admin_token)
            .send()
            .await?;
        ensure!(
            response.status() == reqwest::StatusCode::OK,
            "GET /api/tokens with the admin token: {}",
            response.status()
        );
        let listed: serde_json::Value = response.json().await?;
        ensure!(
            listed["tokens"].is_array(),
            "unexpected token list {listed}"
        );

        // A second stack on the same state directory is refused while this one runs.
        let second = options
            .run_pulsectl(&["up"], Duration::from_secs(15))
            .await?;
        let second_err = String::from_utf8_lossy(&second.stderr);
        ensure!(
            !second.status.success() && second_err.contains("already running"),
            "second pulsectl up: {} {second_err}",
            second.status
        );

        // Every process pulsectl started, found through the process tree.
        let tree = descendants(up.pid());
        ensure!(
            binary_names(&tree) == service_binaries(),
            "descendants of pulsectl: {tree:?}"
        );

        up.interrupt();
        let status = up
            .wait_exit(STOP_WITHIN)
            .await
            .with_context(|| up.output())?;
        ensure!(
            status.success(),
            "pulsectl exited with {status} after SIGINT\n{}",
            up.output()
        );
        let survivors: Vec<_> = tree.iter().filter(|p| p.is_alive()).collect();
        ensure!(
            survivors.is_empty(),
            "still running after pulsectl exited: {survivors:?}"
        );
        ensure!(
            !options.state_dir.join("pulsectl.pid").exists(),
            "pid file left behind"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn up_fails_fast_when_postgres_is_unreachable() -> anyhow::Result<()> {
    require_stack_binaries()?;
    let options = StackOptions::isolated("stack-nopg")?;
    // Nothing can listen on port 0: connecting to it is refused.
    let closed = 0;
    let mut broken = options.clone();
    broken.database_url = format!("postgres://root@127.0.0.1:{closed}/pulse_unreachable");

    let started = tokio::time::Instant::now();
    let output = broken
        .run_pulsectl(&["up"], Duration::from_secs(20))
        .await?;
    let elapsed = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let result = (|| {
        ensure!(!output.status.success(), "exited {}", output.status);
        ensure!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
        ensure!(
            stderr.contains(&format!("Postgres is unreachable at 127.0.0.1:{closed}")),
            "{stderr}"
        );
        ensure!(stderr.contains("pg_ctlcluster"), "{stderr}");
        ensure!(stderr.contains("--spawn-deps"), "{stderr}");
        // Nothing was started.
        let logs = options.state_dir.join("logs");
        let started_any = std::fs::read_dir(&logs)
            .map(|entries| entries.flatten().count() > 0)
            .unwrap_or(false);
        ensure!(
            !started_any,
            "service logs were written in {}",
            logs.display()
        );
        ensure!(
            !options.state_dir.join("pulsectl.pid").exists(),
            "pid file left behind"
        );
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&options.state_dir);
    result
}

#[tokio::test]
async fn detached_stack_serves_token_commands_and_stops_with_down() -> anyhow::Result<()> {
    with_stack("stack-detach", |mut options| async move {
        let http = http()?;
        let up = options
            .run_pulsectl(&["up", "--detach"], READY_WITHIN + Duration::from_secs(30))
            .await?;
        let up_stdout = String::from_utf8_lossy(&up.stdout).into_owned();
        let up_stderr = String::from_utf8_lossy(&up.stderr).into_owned();
        ensure!(
            up.status.success(),
            "up --detach: {}\n{up_stdout}\n{up_stderr}",
            up.status
        );
        options.gateway = stack::ready_gateway(&up_stdout);
        ensure!(options.gateway.is_some(), "{up_stdout}");
        let report = stack::health(&http, &options.gateway_url())
            .await
            .context("gateway not answering after up --detach returned")?;
        ensure!(not_ready(&report).is_empty(), "{report:?}");

        let daemon: u32 = std::fs::read_to_string(options.state_dir.join("pulsectl.pid"))?
            .trim()
            .parse()?;
        let tree = descendants(daemon);
        ensure!(
            binary_names(&tree) == service_binaries(),
            "descendants of the background pulsectl: {tree:?}"
        );

        // Token commands against the running stack, with the admin token from the state dir.
        let created = options
            .run_pulsectl(
                &[
                    "token",
                    "create",
                    "--name",
                    "e2e reader",
                    "--scope",
                    "monitoring:read",
                    "--expires-in",
                    "1d",
                ],
                Duration::from_secs(20),
            )
            .await?;
        let created_err = String::from_utf8_lossy(&created.stderr).into_owned();
        ensure!(created.status.success(), "token create: {created_err}");
        ensure!(created_err.contains("shown only once"), "{created_err}");
        let secret = String::from_utf8_lossy(&created.stdout).trim().to_owned();
        ensure!(
            !secret.is_empty() && !secret.contains('\n'),
            "stdout should be the secret alone: {secret:?}"
        );
        let id = created_err
            .split("(id ")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .context("token id in the creation message")?
            .to_owned();

        let listed = options
            .run_pulsectl(&["token", "list"], Duration::from_secs(20))
            .await?;
        let table = String::from_utf8_lossy(&listed.stdout).into_owned();
        ensure!(listed.status.success(), "token list failed: {listed:?}");
        ensure!(
            table.starts_with("ID") && table.contains(&id) && table.contains("e2e reader"),
            "{table}"
        );

        // The new token lacks `admin`: the API's refusal is printed as `error: <code>: ...`
        // with exit code 2.
        let refused = options
            .run_pulsectl(
                &["--token", secret.as_str(), "token", "list"],
                Duration::from_secs(20),
            )
            .await?;
        let refused_err = String::from_utf8_lossy(&refused.stderr).into_owned();
        ensure!(
            refused.status.code() == Some(2) && refused_err.starts_with("error: "),
            "{:?} {refused_err}",
            refused.status
        );

        let revoked = options
            .run_pulsectl(&["token", "revoke", id.as_str()], Duration::from_secs(20))
            .await?;
        ensure!(revoked.status.success(), "token revoke: {revoked:?}");
        let after_revoke = options
            .run_pulsectl(
                &["--token", secret.as_str(), "token", "list"],
                Duration::from_secs(20),
            )
            .await?;
        let after_revoke_err = String::from_utf8_lossy(&after_revoke.stderr).into_owned();
        ensure!(
            after_revoke.status.code() == Some(2)
                && after_revoke_err.starts_with("error: unauthorized: "),
            "a revoked token must be refused: {:?} {after_revoke_err}",
            after_revoke.status
        );

        let down = options
            .run_pulsectl(&["down"], Duration::from_secs(60))
            .await?;
        ensure!(
            down.status.success(),
            "down: {}",
            String::from_utf8_lossy(&down.stderr)
        );
        ensure!(!process_alive(daemon), "background pulsectl still running");
        let survivors: Vec<_> = tree.iter().filter(|p| p.is_alive()).collect();
        ensure!(
            survivors.is_empty(),
            "still running after down: {survivors:?}"
        );

        // With the stack gone the CLI says so instead of printing a transport error.
        let offline = options
            .run_pulsectl(&["token", "list"], Duration::from_secs(20))
            .await?;
        let offline_err = String::from_utf8_lossy(&offline.stderr);
        ensure!(
            !offline.status.success()
                && offline_err.contains("isn't running")
                && offline_err.contains("pulsectl up"),
            "{offline_err}"
        );
        Ok(())
    })
    .await
}
