//! The operator's path through the web UI in a real browser: `pulsectl up --demo` starts the
//! whole stack with the provider simulator and an injected fault; then
//! `tests/browser/operator_flow.mjs` drives the system's Chromium through playwright-core: sign
//! in, see the fault's finding, open its investigation, approve the proposed action, see it
//! verified without reloading, see the providers' models offered in Settings and test them
//! without saving anything, switch Patrol off and on, and set a maintenance window that
//! auto-dismisses a second fault's finding. Screenshots are saved under
//! `tests/browser/screenshots/` (`PULSE_SCREENSHOTS` overrides).
//!
//! Needs `cargo build --workspace --bins`, Node.js, Chromium (`/usr/bin/chromium`, or
//! `CHROMIUM`) and `npm ci --prefix tests/browser`; `scripts/test` provides all of them.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use pulse_test_support::stack::{self, PulsectlUp, StackOptions};

const SET_UP_WITHIN: Duration = Duration::from_secs(240);
/// The browser's whole path, with its own waits of up to two minutes a stage.
const BROWSER_WITHIN: Duration = Duration::from_secs(600);

fn browser_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../browser")
}

fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

fn require_browser() -> anyhow::Result<()> {
    anyhow::ensure!(
        chromium().is_file(),
        "no Chromium at {} (install Debian's chromium, or set CHROMIUM)",
        chromium().display()
    );
    anyhow::ensure!(
        browser_dir()
            .join("node_modules/playwright-core/package.json")
            .is_file(),
        "playwright-core is not installed: run `npm ci --prefix tests/browser`"
    );
    Ok(())
}

#[tokio::test]
async fn an_operator_runs_the_loop_from_the_browser() -> anyhow::Result<()> {
    stack::require_stack_binaries()?;
    require_browser()?;
    pulse_test_support::install_crypto_provider();
    let mut options = StackOptions::isolated("web-ui")?;
    let result = async {
        let mut up = PulsectlUp::spawn(
            &options,
            &[
                "--demo",
                "--demo-agent-health-listen",
                "127.0.0.1:0",
                "--provider-sim-listen",
                "127.0.0.1:0",
            ],
        )?;
        stack::wait_for_demo_setup(&mut up, SET_UP_WITHIN).await?;
        options.learn_gateway(&up).await?;
        let password = std::fs::read_to_string(options.state_dir.join("admin-password"))
            .context("the bootstrap admin's password")?
            .trim()
            .to_owned();
        let screenshots = std::env::var_os("PULSE_SCREENSHOTS")
            .map(PathBuf::from)
            .unwrap_or_else(|| browser_dir().join("screenshots"));
        let second_fault = options
            .state_dir
            .join("demo")
            .join("faults")
            .join("demo-worker.fault");
        let mut node = tokio::process::Command::new("node");
        node.arg(browser_dir().join("operator_flow.mjs"))
            .current_dir(browser_dir())
            .env("PULSE_URL", options.gateway_url())
            .env("PULSE_PASSWORD", &password)
            .env("PULSE_SCREENSHOTS", &screenshots)
            .env("PULSE_FAULT_MARKER_2", &second_fault)
            .env(
                "PULSE_ADMIN_TOKEN",
                std::fs::read_to_string(options.admin_token_path())?.trim(),
            )
            .env("CHROMIUM", chromium())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let run = tokio::time::timeout(BROWSER_WITHIN, node.output())
            .await
            .context("the browser run did not finish in time")??;
        let stdout = String::from_utf8_lossy(&run.stdout);
        let stderr = String::from_utf8_lossy(&run.stderr);
        println!("{stdout}");
        if !run.status.success() {
            let logs = options.state_dir.join("logs");
            let mut tails = String::new();
            for name in [
                "gateway",
                "action-broker",
                "verifier",
                "model-runner",
                "demo-agent",
            ] {
                let log =
                    std::fs::read_to_string(logs.join(format!("{name}.log"))).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                tails.push_str(&format!(
                    "\n--- last lines of {name}.log ---\n{}",
                    lines[lines.len().saturating_sub(20)..].join("\n")
                ));
            }
            anyhow::bail!(
                "the browser path failed ({}):\n{stderr}\n{stdout}{tails}",
                run.status
            );
        }
        anyhow::ensure!(
            stdout.contains("all steps passed"),
            "the browser run ended without passing every step:\n{stdout}"
        );
        for shot in [
            "01-signin",
            "05-verified",
            "06b-model-test",
            "06-patrol",
            "07-maintenance",
        ] {
            let path = screenshots.join(format!("{shot}.png"));
            anyhow::ensure!(path.is_file(), "no screenshot {}", path.display());
        }
        Ok(())
    }
    .await;
    let cleanup = options.cleanup().await;
    result?;
    cleanup
}
