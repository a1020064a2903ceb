//! The real stack (`pulsectl up`) as `patrol-qualify` qualifies it, for end-to-end tests and the
//! qualification benchmark: an isolated stack, its gateway, relay and admin token, and the
//! harness binary run against it as a child process.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use anyhow::Context as _;
use tokio::process::Command;

use crate::service::bin_dir;
use crate::stack::{self, PulsectlUp, StackOptions};

/// How long the stack gets to come up.
const READY_WITHIN: Duration = Duration::from_secs(180);

/// The harness's scenario catalogue in this repository.
pub fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios")
}

/// A running stack the harness can qualify.
pub struct QualifyStack {
    pub options: StackOptions,
    pub up: PulsectlUp,
    pub gateway_url: String,
    pub relay_url: String,
    pub admin_token: String,
}

impl QualifyStack {
    /// `pulsectl up` on an isolated database and subject prefix, every service ready.
    pub async fn start(label: &str) -> anyhow::Result<Self> {
        stack::require_stack_binaries()?;
        crate::install_crypto_provider();
        let mut options = StackOptions::isolated(label)?;
        let mut up = PulsectlUp::spawn(&options, &[])?;
        options.learn_gateway(&up).await?;
        let gateway_url = options.gateway_url();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()?;
        let deadline = tokio::time::Instant::now() + READY_WITHIN;
        loop {
            if let Some(status) = up.exited() {
                anyhow::bail!(
                    "pulsectl exited ({status}) before the stack was ready\n{}",
                    up.output()
                );
            }
            let ready = stack::health(&http, &gateway_url)
                .await
                .is_some_and(|report| stack::not_ready(&report).is_empty());
            if ready && options.admin_token_path().is_file() {
                break;
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "the stack was not ready within {READY_WITHIN:?}\n{}",
                up.output()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let relay_url = up
            .stdout()
            .lines()
            .find_map(|l| l.strip_prefix("agent-relay listening on ").map(str::trim))
            .map(str::to_owned)
            .with_context(|| {
                format!(
                    "pulsectl did not print the relay's address\n{}",
                    up.output()
                )
            })?;
        let admin_token = std::fs::read_to_string(options.admin_token_path())?
            .trim()
            .to_owned();
        Ok(Self {
            options,
            up,
            gateway_url,
            relay_url,
            admin_token,
        })
    }

    /// `patrol-qualify <args> --pulse-url .. --relay-url .. --token ..` (for the live modes).
    pub fn live_command(&self, args: &[&str]) -> anyhow::Result<Command> {
        let mut command = Command::new(bin_dir()?.join("patrol-qualify"));
        command
            .args(args)
            .arg("--scenarios")
            .arg(scenarios_dir())
            .arg("--pulse-url")
            .arg(&self.gateway_url)
            .arg("--relay-url")
            .arg(&self.relay_url)
            .env("PULSE_QUALIFY_TOKEN", &self.admin_token)
            .env_remove("PULSE_QUALIFY_URL")
            .kill_on_drop(true);
        Ok(command)
    }

    /// Runs the harness with `args` (a live mode), bounded by `within`.
    pub async fn run(&self, args: &[&str], within: Duration) -> anyhow::Result<Output> {
        let mut command = self.live_command(args)?;
        tokio::time::timeout(within, command.output())
            .await
            .with_context(|| format!("patrol-qualify {args:?} still running after {within:?}"))?
            .context("running patrol-qualify")
    }

    /// Stops the stack and removes its database and state.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.up.interrupt();
        let _ = self.up.wait_exit(Duration::from_secs(60)).await;
        self.options.cleanup().await
    }
}

/// Runs the harness with `args` alone (the offline modes: validate, replay, verify-replay,
/// compare, export-contribution), bounded by `within`.
pub async fn run_offline(args: &[&str], within: Duration) -> anyhow::Result<Output> {
    let mut command = Command::new(bin_dir()?.join("patrol-qualify"));
    command.args(args).kill_on_drop(true);
    tokio::time::timeout(within, command.output())
        .await
        .with_context(|| format!("patrol-qualify {args:?} still running after {within:?}"))?
        .context("running patrol-qualify")
}

/// stdout and stderr of a finished harness run, for failure messages.
pub fn describe(output: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
