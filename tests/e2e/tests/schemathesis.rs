//! The published API contract, checked by an independent tool: schemathesis (PyPI, pinned in
//! `tests/schemathesis/requirements.txt`, installed into a venv the test builds under the target
//! directory) against the `/api/openapi.json` of a whole `pulsectl up --demo` stack, with the
//! stack's admin token. Every check, the coverage, fuzzing and stateful phases, a fixed seed and
//! a bounded number of cases per operation (`tests/schemathesis/schemathesis.toml`; the few
//! rules JSON Schema cannot state are in `tests/schemathesis/hooks.py`). The run must report no
//! failure: every request the document calls valid is accepted, every one it calls invalid is
//! refused with a documented code, every answer matches its documented status and schema, no
//! answer is a 5xx.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use pulse_test_support::python::{ensure_success, run, tail, venv_python};
use pulse_test_support::stack::{self, PulsectlUp, StackOptions};

const REQUIREMENTS: &str = include_str!("../../schemathesis/requirements.txt");
const SET_UP_WITHIN: Duration = Duration::from_secs(240);
const RUN_WITHIN: Duration = Duration::from_secs(900);
/// The run is the same every time: this seed, this many cases per operation and phase.
const SEED: &str = "20261206";
const CASES_PER_OPERATION: &str = "20";

fn schemathesis_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schemathesis")
}

/// The figure after `label` on a line of the run's summary (`Tested: 70` -> `70`).
fn figure<'a>(output: &'a str, label: &str) -> Option<&'a str> {
    output
        .lines()
        .find_map(|line| line.trim().strip_prefix(label))
        .map(str::trim)
}

/// Python with the venv module, or a clear error naming the package to install.
async fn require_python_venv() -> anyhow::Result<()> {
    let probe = run(
        tokio::process::Command::new("python3").args(["-c", "import venv, ensurepip"]),
        Duration::from_secs(30),
        "python3 (this test needs Python 3 with the venv module)",
    )
    .await?;
    anyhow::ensure!(
        probe.status.success(),
        "python3 cannot create virtual environments: install python3-venv (Debian: apt-get \
         install python3-venv); scripts/test installs it when missing\n{}",
        tail(&probe.stderr)
    );
    Ok(())
}

#[tokio::test]
async fn schemathesis_finds_no_contract_failure_on_a_demo_stack() -> anyhow::Result<()> {
    stack::require_stack_binaries()?;
    pulse_test_support::install_crypto_provider();
    require_python_venv().await?;
    let python = venv_python(
        &Path::new(env!("CARGO_TARGET_TMPDIR")).join("schemathesis"),
        REQUIREMENTS,
        &schemathesis_dir().join("requirements.txt"),
    )
    .await?;
    let mut options = StackOptions::isolated("schemathesis")?;
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
        let base = options.gateway_url();
        let admin = std::fs::read_to_string(options.admin_token_path())?
            .trim()
            .to_owned();
        let document: serde_json::Value = reqwest::get(format!("{base}/api/openapi.json"))
            .await?
            .json()
            .await?;
        let documented: usize = document["paths"]
            .as_object()
            .context("paths")?
            .values()
            .filter_map(serde_json::Value::as_object)
            .map(serde_json::Map::len)
            .sum();
        // schemathesis does not test the URL it loads the document from.
        let documented = documented - 1;
        let reports = options.state_dir.join("schemathesis-report");
        // schemathesis keeps a cache of earlier failures in its working directory and replays
        // them first, so a run in the source tree would depend on what ran there before (and
        // leave files behind): it runs in a fresh directory holding a copy of the configuration
        // and the hooks, which the configuration names relative to its own directory.
        let work = options.state_dir.join("schemathesis");
        std::fs::create_dir_all(&work)?;
        for file in ["schemathesis.toml", "hooks.py"] {
            std::fs::copy(schemathesis_dir().join(file), work.join(file))
                .with_context(|| format!("copying {file}"))?;
        }
        let started = Instant::now();
        let out = run(
            // As a module: the venv was built aside and moved, so its scripts' interpreter
            // lines point where it was built.
            tokio::process::Command::new(&python)
                .args(["-m", "schemathesis.cli", "--config-file"])
                .arg(work.join("schemathesis.toml"))
                .arg("run")
                .arg(format!("{base}/api/openapi.json"))
                .args(["--header", &format!("Authorization: Bearer {admin}")])
                .args(["--seed", SEED, "--max-examples", CASES_PER_OPERATION])
                .args(["--report", "junit", "--report-dir"])
                .arg(&reports)
                .env("NO_COLOR", "1")
                .current_dir(&work),
            RUN_WITHIN,
            "schemathesis",
        )
        .await?;
        let wall = started.elapsed();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        println!("{stdout}");
        ensure_success(&out, "schemathesis (failures above)")?;
        let tested = figure(&stdout, "Tested:").context("no operation count in the summary")?;
        // The counts line ("4537 generated, 4537 passed, 153 skipped"), not a warning that
        // mentions generated data.
        let cases = stdout
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with(|c: char| c.is_ascii_digit()) && l.contains(" generated"))
            .context("no case count in the summary")?;
        println!("schemathesis: {tested} operations, {cases}, in {wall:.0?}");
        let operations: usize = tested.parse().context("operation count")?;
        // Every operation of the document was exercised, not a subset a filter left.
        anyhow::ensure!(
            operations == documented,
            "{operations} of the document's {documented} operations were tested"
        );
        // The closing line counts failures and errors when there are any ("2 failures, 1 warning
        // in 80s"); warnings (operations only 401 answers reach, such as the platform routes
        // with a tenant token) are not failures.
        let closing = stdout
            .lines()
            .rev()
            .find(|l| l.starts_with('=') && l.contains(" in "))
            .context("no closing line")?;
        anyhow::ensure!(
            !closing.contains("failure") && !closing.contains("error"),
            "schemathesis reports: {closing}"
        );
        anyhow::ensure!(
            cases.contains(" passed") && !cases.contains(" found "),
            "schemathesis reports: {cases}"
        );
        drop(up);
        Ok(())
    }
    .await;
    let cleanup = options.cleanup().await;
    result?;
    cleanup
}
