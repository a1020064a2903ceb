//! Python virtual environments for tests that drive official Python clients (provider SDKs,
//! the MCP SDK): built once per requirements file and Python version, then reused.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, ensure};

const PYTHON_TIMEOUT: Duration = Duration::from_secs(30);
const VENV_TIMEOUT: Duration = Duration::from_secs(120);
const PIP_TIMEOUT: Duration = Duration::from_secs(600);

/// Runs `cmd` to completion within `timeout`, output captured.
pub async fn run(
    cmd: &mut tokio::process::Command,
    timeout: Duration,
    what: &str,
) -> anyhow::Result<std::process::Output> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .with_context(|| format!("{what}: could not start it"))?;
    tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .with_context(|| format!("{what}: no result within {timeout:?}"))?
        .with_context(|| format!("{what}: failed while running"))
}

/// The last lines of a process's output, for error messages.
pub fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

pub fn ensure_success(out: &std::process::Output, what: &str) -> anyhow::Result<()> {
    ensure!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        tail(&out.stdout),
        tail(&out.stderr)
    );
    Ok(())
}

/// FNV-1a: a hash that stays the same across Rust releases, so a cached venv keeps its key.
fn fnv1a(parts: &[&str]) -> u64 {
    parts
        .iter()
        .flat_map(|p| p.bytes().chain([0]))
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

async fn installed(marker: &Path, requirements: &str) -> bool {
    tokio::fs::read_to_string(marker).await.ok().as_deref() == Some(requirements)
}

/// The Python of a venv with `requirements` (the text of the file at `requirements_path`)
/// installed, built on first use under `root` and reused while the requirements and the Python
/// version stay the same. Failing to build it is an error, never a skip.
pub async fn venv_python(
    root: &Path,
    requirements: &str,
    requirements_path: &Path,
) -> anyhow::Result<PathBuf> {
    let version = run(
        tokio::process::Command::new("python3").arg("--version"),
        PYTHON_TIMEOUT,
        "python3 --version (this test needs Python 3 with the venv module)",
    )
    .await?;
    ensure_success(&version, "python3 --version")?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    tokio::fs::create_dir_all(root)
        .await
        .with_context(|| format!("create {}", root.display()))?;
    let key = format!("{:016x}", fnv1a(&[requirements, &version]));
    let dir = root.join(format!("venv-{key}"));
    // Written last: its presence means the install finished.
    let marker = Path::new("requirements.installed");
    if installed(&dir.join(marker), requirements).await {
        return Ok(dir.join("bin").join("python"));
    }
    // Built aside and renamed into place, so test processes sharing the target directory never
    // see a half-built venv (pip is run as `python -m pip`, which does not mind the move).
    let building = root.join(format!("venv-{key}.building-{}", std::process::id()));
    if tokio::fs::try_exists(&building).await.unwrap_or(false) {
        tokio::fs::remove_dir_all(&building).await?;
    }
    let created = run(
        tokio::process::Command::new("python3")
            .args(["-m", "venv"])
            .arg(&building),
        VENV_TIMEOUT,
        "python3 -m venv",
    )
    .await?;
    ensure_success(
        &created,
        &format!(
            "creating the venv {} ({version}; on Debian, install python3-venv)",
            building.display()
        ),
    )?;
    let pip = run(
        tokio::process::Command::new(building.join("bin").join("python"))
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                "--quiet",
                "-r",
            ])
            .arg(requirements_path),
        PIP_TIMEOUT,
        "pip install",
    )
    .await?;
    ensure_success(
        &pip,
        &format!(
            "pip install -r {} (PyPI must be reachable)",
            requirements_path.display()
        ),
    )?;
    tokio::fs::write(building.join(marker), requirements)
        .await
        .with_context(|| format!("write {}", building.join(marker).display()))?;
    // An unfinished venv left by a killed run is replaced; a finished one another process
    // renamed into place first wins, and ours is dropped.
    if tokio::fs::try_exists(&dir).await.unwrap_or(false)
        && !installed(&dir.join(marker), requirements).await
    {
        tokio::fs::remove_dir_all(&dir)
            .await
            .with_context(|| format!("remove the unfinished venv {}", dir.display()))?;
    }
    if let Err(e) = tokio::fs::rename(&building, &dir).await {
        let _ = tokio::fs::remove_dir_all(&building).await;
        ensure!(
            installed(&dir.join(marker), requirements).await,
            "move the venv into {}: {e}",
            dir.display()
        );
    }
    let python = dir.join("bin").join("python");
    Ok(python)
}
