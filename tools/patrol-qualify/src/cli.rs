//! The operator CLI: one subcommand per mode. Exit status 0 when the mode succeeded (a live
//! run: every run passed), 1 when a qualification failed (a run scored as failed, a gate did
//! not pass, a replay did not reproduce), 2 when the command was refused or could not run (bad
//! arguments, a missing safety flag, an invalid manifest, an unreachable lab or Pulse).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::manifest::{LabDriver, RepeatProfile, Track};

#[derive(Debug, Parser)]
#[command(
    name = "patrol-qualify",
    about = "Live fault-injection qualification of Pulse Patrol",
    version
)]
pub struct Cli {
    #[command(subcommand)]
    pub mode: Mode,
}

#[derive(Debug, Subcommand)]
pub enum Mode {
    /// Check every manifest (or the given files) against the schema and the semantic rules.
    Validate(ValidateArgs),
    /// List the catalogue's scenarios.
    List(ListArgs),
    /// Run one scenario live against a disposable lab.
    Live(LiveArgs),
    /// Run every scenario of one track live, one after another.
    LiveSuite(SuiteArgs),
    /// Score a captured report.json again and compare with its recorded score.
    Replay(ReplayArgs),
    /// Check a replay.json tool transcript against its recorded digests.
    VerifyReplay(VerifyReplayArgs),
    /// Compare reports of several models and name a recommendation only when every gate holds.
    Compare(CompareArgs),
    /// Write an allowlist-only aggregate of reports for sharing (no network call).
    ExportContribution(ExportArgs),
}

#[derive(Debug, Clone, Args)]
pub struct CatalogueArgs {
    /// The scenario catalogue (the folder holding `process/` and `docker/`).
    #[arg(long, env = "PULSE_QUALIFY_SCENARIOS", default_value = "scenarios")]
    pub scenarios: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub catalogue: CatalogueArgs,
    /// Manifest files to check instead of the whole catalogue.
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub catalogue: CatalogueArgs,
    #[arg(long, value_enum)]
    pub lab: Option<LabDriverArg>,
    #[arg(long, value_enum)]
    pub track: Option<TrackArg>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LabDriverArg {
    Process,
    Docker,
    Proxmox,
}

impl From<LabDriverArg> for LabDriver {
    fn from(value: LabDriverArg) -> Self {
        match value {
            LabDriverArg::Process => LabDriver::Process,
            LabDriverArg::Docker => LabDriver::Docker,
            LabDriverArg::Proxmox => LabDriver::Proxmox,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TrackArg {
    Watch,
    Investigation,
    Remediation,
}

impl From<TrackArg> for Track {
    fn from(value: TrackArg) -> Self {
        match value {
            TrackArg::Watch => Track::Watch,
            TrackArg::Investigation => Track::Investigation,
            TrackArg::Remediation => Track::Remediation,
        }
    }
}

/// Everything a live run needs.
#[derive(Debug, Clone, Args)]
pub struct LiveCommon {
    #[command(flatten)]
    pub catalogue: CatalogueArgs,
    /// The lab target; there is no implicit one.
    #[arg(long, value_enum)]
    pub lab: LabDriverArg,
    /// The Docker endpoint of the Docker lab (`unix:///var/run/docker.sock`, `tcp://...`);
    /// required with `--lab docker`.
    #[arg(long)]
    pub docker_host: Option<String>,
    /// The Proxmox lab: a Python with fakepve installed (`pip install 'fakepve[crypto]'`).
    #[arg(long, default_value = "python3")]
    pub fakepve_python: PathBuf,
    /// The Proxmox lab: the fake's launcher (default: `proxmox/fakepve/serve.py` in the
    /// scenarios folder).
    #[arg(long)]
    pub fakepve_serve: Option<PathBuf>,
    /// Permit a Docker endpoint that is not on this machine (the manifest must allow it too).
    #[arg(long)]
    pub allow_shared_host: bool,
    /// Required: permits injecting the scenario's faults into the lab.
    #[arg(long)]
    pub authorize_live_faults: bool,
    /// A separate gate: permits recording approve or reject decisions on actions.
    #[arg(long)]
    pub authorize_remediation: bool,
    /// The Pulse gateway.
    #[arg(
        long,
        env = "PULSE_QUALIFY_URL",
        default_value = "http://127.0.0.1:7655"
    )]
    pub pulse_url: String,
    /// An admin API token of the tenant to qualify (or `--token-file`).
    #[arg(long, env = "PULSE_QUALIFY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    #[arg(long, env = "PULSE_QUALIFY_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// The Patrol route for the runs (`provider:model`), or `sim:<behaviour>` to self-test the
    /// harness against the provider simulator; absent keeps the tenant's configured route.
    #[arg(long)]
    pub model: Option<String>,
    #[arg(long, value_enum, default_value = "development")]
    pub repeat_profile: RepeatProfile,
    /// Overrides the profile's repeat count (at most the profile's count is not enforced; a
    /// qualification profile refuses a smaller count).
    #[arg(long)]
    pub repeat: Option<u32>,
    /// Where reports go (created, mode 0700).
    #[arg(long, default_value = "qualification-artifacts")]
    pub artifacts: PathBuf,
    /// Refuse to run unless Pulse reports exactly this version.
    #[arg(long)]
    pub expected_pulse_version: Option<String>,
    /// A registry-issued nonce bound into every report.
    #[arg(long)]
    pub community_challenge: Option<String>,
    /// The `pulse-agent` binary the lab's collecting agent runs (default: next to this one).
    #[arg(long, env = "PULSE_QUALIFY_AGENT_BINARY")]
    pub agent_binary: Option<PathBuf>,
    /// The `pulse-provider-sim` binary for `sim:` routes (default: next to this one).
    #[arg(long, env = "PULSE_QUALIFY_SIM_BINARY")]
    pub provider_sim_binary: Option<PathBuf>,
    /// The agent relay the lab's agent reports to (default: the gateway host, port 7656).
    #[arg(long, env = "PULSE_QUALIFY_RELAY_URL")]
    pub relay_url: Option<String>,
    /// Where the process lab lives (default: a fresh directory under the system temp dir).
    #[arg(long)]
    pub lab_root: Option<PathBuf>,
    /// Print one line per phase instead of the progress display.
    #[arg(long)]
    pub quiet: bool,
}

#[derive(Debug, Clone, Args)]
pub struct LiveArgs {
    #[command(flatten)]
    pub common: LiveCommon,
    #[arg(long)]
    pub scenario: String,
}

#[derive(Debug, Clone, Args)]
pub struct SuiteArgs {
    #[command(flatten)]
    pub common: LiveCommon,
    #[arg(long = "qualification-track", alias = "track", value_enum)]
    pub track: TrackArg,
    /// Only these scenarios of the track (repeatable); default: all of them.
    #[arg(long = "scenario", id = "only")]
    pub only: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    #[arg(long = "replay-report", alias = "report")]
    pub report: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct VerifyReplayArgs {
    #[arg(long = "replay-bundle", alias = "bundle")]
    pub bundle: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub catalogue: CatalogueArgs,
    /// A folder searched recursively for report.json files.
    #[arg(long)]
    pub reports: PathBuf,
    #[arg(long = "qualification-track", alias = "track", value_enum)]
    pub track: TrackArg,
    #[arg(long, value_enum)]
    pub lab: LabDriverArg,
    #[arg(long)]
    pub publication_dir: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub catalogue: CatalogueArgs,
    #[arg(long)]
    pub reports: PathBuf,
    #[arg(long = "qualification-track", alias = "track", value_enum)]
    pub track: TrackArg,
    #[arg(long, value_enum)]
    pub lab: LabDriverArg,
    #[arg(long)]
    pub contribution_dir: PathBuf,
}

/// How a mode ended.
#[derive(Debug)]
pub enum Outcome {
    /// The mode did what was asked and everything passed.
    Passed,
    /// It ran, and a qualification, replay or gate failed (the message says which).
    Failed(String),
}

/// Why a mode could not run: the message says what to do.
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Refusal {
    /// A stable code (`missing_safety_flag`, `invalid_manifest`, `lab_unavailable`, ...).
    pub code: &'static str,
    pub message: String,
}

impl Refusal {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

pub fn main() -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("patrol-qualify: cannot start: {error}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(dispatch(cli.mode)) {
        Ok(Outcome::Passed) => ExitCode::SUCCESS,
        Ok(Outcome::Failed(why)) => {
            eprintln!("patrol-qualify: FAILED: {why}");
            ExitCode::from(1)
        }
        Err(refusal) => {
            eprintln!("patrol-qualify: refused: {refusal}");
            ExitCode::from(2)
        }
    }
}

pub async fn dispatch(mode: Mode) -> Result<Outcome, Refusal> {
    match mode {
        Mode::Validate(args) => crate::catalogue::cli_validate(&args),
        Mode::List(args) => crate::catalogue::cli_list(&args),
        Mode::Live(args) => crate::runner::cli_live(args).await,
        Mode::LiveSuite(args) => crate::runner::cli_suite(args).await,
        Mode::Replay(args) => crate::replay::cli_replay(&args),
        Mode::VerifyReplay(args) => crate::replay::cli_verify(&args),
        Mode::Compare(args) => crate::compare::cli_compare(&args),
        Mode::ExportContribution(args) => crate::contribution::cli_export(&args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
