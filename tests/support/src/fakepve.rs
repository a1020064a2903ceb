//! `fakepve` (PyPI), a fake of the Proxmox VE API built from Proxmox's official API schema that
//! this project did not write, served over TLS with a fresh self-signed certificate for one
//! test. `scenarios/proxmox/fakepve/serve.py` sets it up from a JSON spec and takes commands on stdin that
//! inject what real clusters do (lost quorum, offline nodes, locked guests, failing calls).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::python::venv_python;

const REQUIREMENTS: &str = include_str!("../../../scenarios/proxmox/fakepve/requirements.txt");
const REQUIREMENTS_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../scenarios/proxmox/fakepve/requirements.txt"
);
const SERVE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../scenarios/proxmox/fakepve/serve.py"
);
const PBS_PAYLOADS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/python/pbs_payloads.py");
const START_TIMEOUT: Duration = Duration::from_secs(60);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// A Python with fakepve installed, in a venv under `venv_root` built once and reused (what
/// `patrol-qualify --fakepve-python` takes for the Proxmox lab).
pub async fn python(venv_root: &Path) -> anyhow::Result<PathBuf> {
    venv_python(
        &venv_root.join("fakepve"),
        REQUIREMENTS,
        Path::new(REQUIREMENTS_PATH),
    )
    .await
    .context("fakepve could not be installed")
}

/// A running fake Proxmox VE API. Stopped when dropped.
pub struct FakePve {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    dir: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// The SHA-256 fingerprint of its certificate, as Proxmox writes it (`AB:CD:...`).
    pub fingerprint: String,
    /// Its certificate (PEM), self-signed for 127.0.0.1 and localhost.
    pub cert_file: PathBuf,
}

impl FakePve {
    /// Starts the fake described by `spec` (see `scenarios/proxmox/fakepve/serve.py`). `venv_root` is where
    /// the venv with fakepve is built once and reused: a test passes its
    /// `env!("CARGO_TARGET_TMPDIR")`.
    pub async fn start(venv_root: &Path, spec: &Value) -> anyhow::Result<Self> {
        Self::serve(Path::new(SERVE), venv_root, spec).await
    }

    /// Serves Proxmox Backup Server payloads the test writes itself, shaped as the PBS API
    /// documents them (`tests/support/python/pbs_payloads.py`: no fake of the PBS API exists),
    /// over TLS with token authentication. The handle is the same: its commands are that
    /// script's (`answer`, `forget`, `fail`, `requests`).
    pub async fn pbs_payloads(venv_root: &Path, spec: &Value) -> anyhow::Result<Self> {
        Self::serve(Path::new(PBS_PAYLOADS), venv_root, spec).await
    }

    async fn serve(script: &Path, venv_root: &Path, spec: &Value) -> anyhow::Result<Self> {
        let python = python(venv_root).await?;
        let dir = venv_root.join(format!(
            "fakepve-run-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        tokio::fs::create_dir_all(&dir).await?;
        let spec_file = dir.join("spec.json");
        tokio::fs::write(&spec_file, serde_json::to_vec(spec)?).await?;
        let mut child = tokio::process::Command::new(&python)
            .arg(script)
            .arg(&spec_file)
            .arg(&dir)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {}", script.display()))?;
        let stdin = child.stdin.take().context("fakepve stdin")?;
        let mut stdout = BufReader::new(child.stdout.take().context("fakepve stdout")?).lines();
        let line = tokio::time::timeout(START_TIMEOUT, stdout.next_line())
            .await
            .context("fakepve did not start listening in time")??
            .context("fakepve exited before listening")?;
        let ready: Value = serde_json::from_str(&line)
            .with_context(|| format!("fakepve's first line is not its address: {line}"))?;
        let field = |name: &str| -> anyhow::Result<String> {
            Ok(ready[name]
                .as_str()
                .with_context(|| format!("fakepve's ready line lacks {name}: {line}"))?
                .to_owned())
        };
        Ok(Self {
            url: field("url")?,
            fingerprint: field("fingerprint")?,
            cert_file: PathBuf::from(field("cert_file")?),
            child,
            stdin,
            stdout,
            dir,
        })
    }

    /// Sends one command (`{"op": "lose_quorum"}`, ...) and returns its `data`.
    pub async fn command(&mut self, command: Value) -> anyhow::Result<Value> {
        ensure!(
            self.child.try_wait()?.is_none(),
            "fakepve is no longer running"
        );
        let mut line = serde_json::to_vec(&command)?;
        line.push(b'\n');
        self.stdin.write_all(&line).await?;
        self.stdin.flush().await?;
        let answer = tokio::time::timeout(COMMAND_TIMEOUT, self.stdout.next_line())
            .await
            .with_context(|| format!("fakepve did not answer {command}"))??
            .context("fakepve exited")?;
        let answer: Value = serde_json::from_str(&answer)?;
        if answer["ok"] != Value::Bool(true) {
            bail!("fakepve refused {command}: {}", answer["error"]);
        }
        Ok(answer["data"].clone())
    }
}

impl Drop for FakePve {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
