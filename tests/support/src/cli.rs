//! The built `pulsectl` binary against a [`TestGateway`], with the gateway and token given as
//! flags and the environment's Pulse variables removed so only the flags count; and readers of
//! its output.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use crate::service::{TestGateway, binary};

/// How one test runs pulsectl: against which gateway, with which state directory, for how long
/// at most.
pub struct Pulsectl<'a> {
    pub gateway: &'a TestGateway,
    pub state_dir: PathBuf,
    pub timeout: Duration,
}

impl<'a> Pulsectl<'a> {
    /// Runs with `<gateway state dir>/pulsectl-state` as its state directory.
    pub fn new(gateway: &'a TestGateway, timeout: Duration) -> Self {
        Self {
            gateway,
            state_dir: gateway.state_dir.join("pulsectl-state"),
            timeout,
        }
    }

    /// Runs `pulsectl <args>` with `token`.
    pub async fn run(&self, token: &str, args: &[&str]) -> anyhow::Result<Output> {
        let mut command = tokio::process::Command::new(binary("pulsectl")?);
        command
            .args([
                "--gateway",
                &self.gateway.url,
                "--token",
                token,
                "--state-dir",
            ])
            .arg(&self.state_dir)
            .args(args)
            .env_remove("PULSE_GATEWAY_URL")
            .env_remove("PULSE_TOKEN")
            .env_remove("PULSE_STATE_DIR")
            .kill_on_drop(true);
        Ok(tokio::time::timeout(self.timeout, command.output()).await??)
    }

    /// Runs a command that must succeed; its stdout.
    pub async fn ok(&self, token: &str, args: &[&str]) -> anyhow::Result<String> {
        let output = self.run(token, args).await?;
        anyhow::ensure!(output.status.success(), "{args:?}: {}", describe(&output));
        Ok(stdout(&output))
    }

    /// Runs a command that must exit with `code`; its output.
    pub async fn fails(&self, token: &str, args: &[&str], code: i32) -> anyhow::Result<Output> {
        let output = self.run(token, args).await?;
        anyhow::ensure!(
            output.status.code() == Some(code),
            "{args:?}: expected exit {code}: {}",
            describe(&output)
        );
        Ok(output)
    }
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The exit status and both streams, for failure messages.
pub fn describe(output: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        stdout(output),
        stderr(output)
    )
}

/// The value of a `label  value` line of the text output.
pub fn field<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        line.strip_prefix(label)
            .filter(|rest| rest.starts_with("  "))
            .map(str::trim)
    })
}

/// The list line of the item `id` (lines start with the id).
pub fn row<'a>(text: &'a str, id: &str) -> Option<&'a str> {
    text.lines().find(|line| line.starts_with(id))
}
