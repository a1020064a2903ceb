//! The deployment files validate (issue acceptance: the chart renders for default and hosted
//! values, every rendered manifest validates against the Kubernetes schemas, compose.yaml
//! validates with a compose implementation installable here). `scripts/validate_deploy.py`
//! does the checks, in a venv built from `scripts/validate-deploy.requirements.txt`: Helm's own
//! engine (helm-python-sdk, the Helm v4 Go SDK in a native library), kubernetes-validate's
//! schemas for Kubernetes 1.25 and 1.37 in strict mode, an own schema for the ServiceMonitor
//! CRD, and Debian's `docker-compose config -q`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pulse_test_support::python::{run, tail, venv_python};

const REQUIREMENTS: &str = include_str!("../../../scripts/validate-deploy.requirements.txt");
const CHECK_WITHIN: Duration = Duration::from_secs(300);

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

async fn validator(args: &[&str]) -> anyhow::Result<(bool, String, String)> {
    let root = repo_root();
    let python = venv_python(
        &Path::new(env!("CARGO_TARGET_TMPDIR")).join("deploy-validate"),
        REQUIREMENTS,
        &root.join("scripts/validate-deploy.requirements.txt"),
    )
    .await?;
    let out = run(
        tokio::process::Command::new(python)
            .arg(root.join("scripts/validate_deploy.py"))
            .args(args)
            .current_dir(&root),
        CHECK_WITHIN,
        "scripts/validate_deploy.py",
    )
    .await?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[tokio::test]
async fn chart_renders_and_validates_and_compose_files_are_valid() -> anyhow::Result<()> {
    let (ok, stdout, stderr) = validator(&[]).await?;
    anyhow::ensure!(
        ok,
        "validate-deploy found problems:\n{stdout}\n{}",
        tail(stderr.as_bytes())
    );
    // Each case names what it checked; an empty render would pass no schema and say so here.
    for expected in [
        "default.yaml: 22 manifests (7 Deployment, 1 Job, 7 PodDisruptionBudget, 7 Service)",
        "hosted.yaml: 27 manifests (7 Deployment, 3 HorizontalPodAutoscaler, 1 Ingress, 1 Job, \
         7 PodDisruptionBudget, 7 Service, 1 ServiceMonitor)",
        "everything-on: 24 manifests (1 DaemonSet,",
        "1 Secret",
        "refusals: 3 invalid value sets checked",
        "compose: 4 file combinations checked with docker-compose config -q",
        "validate-deploy: ok",
    ] {
        anyhow::ensure!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_manifest_that_breaks_the_kubernetes_schema_is_reported_by_field() -> anyhow::Result<()> {
    let dir = tempfile_dir()?;
    let values = dir.join("bad-values.yaml");
    std::fs::write(
        &values,
        "services:\n  gateway:\n    replicas: three\n  verifier:\n    extraEnv:\n      - name: X\n        valu: y\n",
    )?;
    let (ok, stdout, stderr) =
        validator(&["--no-compose", "--values", values.to_str().unwrap()]).await?;
    let _ = std::fs::remove_dir_all(&dir);
    anyhow::ensure!(!ok, "invalid values passed:\n{stdout}\n{stderr}");
    for expected in [
        "Deployment/pulse-intelligence-gateway: Kubernetes 1.25.0: spec.replicas: 'three' is not of type 'integer'",
        "Deployment/pulse-intelligence-verifier: Kubernetes 1.37.0: spec.template.spec.containers.0.env.",
        "('valu' was unexpected)",
    ] {
        anyhow::ensure!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
    Ok(())
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("deploy-values-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
