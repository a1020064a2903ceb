//! `patrol-qualify` live against the real stack (`pulsectl up`): the process lab and the Docker
//! lab (the machine's real engine), with the provider simulator's behaviours as the harness's
//! self-test routes.
//!
//! - The watch track with `sim:diligent`, development profile: every scenario passes, on both
//!   labs. With `sim:lazy` the reconfirmation scenario fails; with `sim:injectable` the
//!   injection scenario is a hard failure on its forbidden marker.
//! - The remediation track with `--authorize-remediation`: the approved restart is verified and
//!   the oracle sees the service healthy; the rejected one leaves the fault in place until
//!   revert; without the flag no decision is recorded.
//! - After every run the second cleanup did nothing and the inventory equals the one taken
//!   before the run.
//! - `replay` reproduces a live report's score; `verify-replay` catches an edited transcript.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pulse_test_support::qualify::{QualifyStack, describe, run_offline};
use serde_json::Value;

const SUITE_WITHIN: Duration = Duration::from_secs(900);
const RUN_WITHIN: Duration = Duration::from_secs(300);
const DOCKER_HOST: &str = "unix:///var/run/docker.sock";

const PROXMOX_WATCH: [&str; 4] = [
    "watch.backup-missing",
    "watch.guest-stopped",
    "watch.quorum-lost",
    "watch.storage-near-full",
];

const WATCH: [&str; 7] = [
    "watch.correlated-dependency",
    "watch.existing-finding-reconfirmation",
    "watch.healthy-mixed",
    "watch.prompt-injection-label",
    "watch.restart-loop",
    "watch.service-unhealthy",
    "watch.two-independent-faults",
];

fn artifacts(label: &str) -> anyhow::Result<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("qualify")
        .join(format!("{label}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Every `report.json` under `dir`, in path order.
fn reports(dir: &Path) -> anyhow::Result<Vec<(PathBuf, Value)>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "report.json") {
                let report: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
                out.push((path, report));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Item 5 for every run: the second cleanup was a no-op and the inventory is unchanged.
fn assert_clean_teardown(report: &Value) {
    let teardown = &report["observation"]["teardown"];
    assert_eq!(
        teardown["second_pass_actions"],
        serde_json::json!([]),
        "{}",
        report["manifest"]["id"]
    );
    assert_eq!(
        teardown["inventory_diff"],
        serde_json::json!([]),
        "{}",
        report["manifest"]["id"]
    );
    assert!(
        teardown["errors"].as_array().is_none_or(Vec::is_empty),
        "{teardown}"
    );
}

/// The resources Pulse lists under agents whose id starts with `agent_prefix`.
async fn resources_of(stack: &QualifyStack, agent_prefix: &str) -> anyhow::Result<Vec<Value>> {
    let resources: Value = reqwest::Client::new()
        .get(format!("{}/api/resources", stack.gateway_url))
        .bearer_auth(&stack.admin_token)
        .send()
        .await?
        .json()
        .await?;
    Ok(resources["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| {
            r["agent_id"]
                .as_str()
                .is_some_and(|a| a.starts_with(agent_prefix))
        })
        .cloned()
        .collect())
}

fn lab_args(lab: &str) -> Vec<&str> {
    if lab == "docker" {
        vec!["--lab", "docker", "--docker-host", DOCKER_HOST]
    } else {
        vec!["--lab", "process"]
    }
}

/// The watch-track checks of one lab.
async fn watch_track(stack: &QualifyStack, lab: &str) -> anyhow::Result<()> {
    // sim:diligent: every scenario of the track passes.
    let dir = artifacts(&format!("{lab}-diligent"))?;
    let dir_text = dir.display().to_string();
    let mut args = vec!["live-suite"];
    args.extend(lab_args(lab));
    args.extend([
        "--qualification-track",
        "watch",
        "--repeat-profile",
        "development",
        "--model",
        "sim:diligent",
        "--authorize-live-faults",
        "--artifacts",
        &dir_text,
    ]);
    let output = stack.run(&args, SUITE_WITHIN).await?;
    assert!(output.status.success(), "{}", describe(&output));
    let runs = reports(&dir)?;
    let mut ids: Vec<&str> = runs
        .iter()
        .filter_map(|(_, r)| r["manifest"]["id"].as_str())
        .collect();
    ids.dedup();
    assert_eq!(ids, WATCH.to_vec(), "{}", describe(&output));
    for (path, report) in &runs {
        assert_eq!(
            report["score"]["passed"],
            true,
            "{}: {}",
            path.display(),
            report["score"]
        );
        assert_clean_teardown(report);
    }
    // Each lab host was forgotten at its teardown: none is left in Pulse's inventory to go
    // offline or to lengthen later runs' seeds.
    let lab_hosts = resources_of(stack, "node-").await?;
    assert!(lab_hosts.is_empty(), "{lab_hosts:?}");
    // The suite summary and each run's checksums are written.
    assert!(dir.join("suite.json").is_file() && dir.join("suite.md").is_file());
    for (path, _) in &runs {
        let run_dir = path.parent().expect("run dir");
        for file in [
            "ground-truth.json",
            "report.md",
            "replay.json",
            "SHA256SUMS",
        ] {
            assert!(
                run_dir.join(file).is_file(),
                "{}",
                run_dir.join(file).display()
            );
        }
    }

    // Compare and export over the live reports: a simulator route is a self-test, never a
    // recommendation (and one development run per scenario is far below the qualification
    // count); the export carries no resource identity.
    let scenarios = pulse_test_support::qualify::scenarios_dir();
    let scenarios_text = scenarios.display().to_string();
    let publication = dir.join("publication");
    let output = run_offline(
        &[
            "compare",
            "--scenarios",
            &scenarios_text,
            "--reports",
            &dir_text,
            "--qualification-track",
            "watch",
            "--lab",
            lab,
            "--publication-dir",
            &publication.display().to_string(),
        ],
        RUN_WITHIN,
    )
    .await?;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let comparison = std::fs::read_to_string(publication.join("comparison.md"))?;
    assert!(!comparison.contains("Recommended:"), "{comparison}");
    assert!(publication.join("comparison.json").is_file());
    let export = dir.join("export");
    let output = run_offline(
        &[
            "export-contribution",
            "--scenarios",
            &scenarios_text,
            "--reports",
            &dir_text,
            "--qualification-track",
            "watch",
            "--lab",
            lab,
            "--contribution-dir",
            &export.display().to_string(),
        ],
        RUN_WITHIN,
    )
    .await?;
    assert!(
        export.join("contribution.json").is_file(),
        "{}",
        describe(&output)
    );
    let shared = std::fs::read_to_string(export.join("contribution.json"))?;
    for (_, report) in &runs {
        for binding in report["observation"]["resources"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let name = binding["name"].as_str().unwrap_or_default();
            assert!(
                !name.is_empty() && !shared.contains(name),
                "{name} leaked into the export"
            );
        }
    }
    assert!(
        !shared.contains("patrol_report_finding"),
        "tool names leaked"
    );

    // sim:lazy: the reconfirmation scenario fails (the harness catching it is the point).
    let dir = artifacts(&format!("{lab}-lazy"))?;
    let dir_text = dir.display().to_string();
    let mut args = vec!["live"];
    args.extend(lab_args(lab));
    args.extend([
        "--scenario",
        "watch.existing-finding-reconfirmation",
        "--model",
        "sim:lazy",
        "--authorize-live-faults",
        "--artifacts",
        &dir_text,
    ]);
    let output = stack.run(&args, RUN_WITHIN).await?;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let runs = reports(&dir)?;
    assert_eq!(runs.len(), 1);
    let score = &runs[0].1["score"];
    assert_eq!(score["passed"], false, "{score}");
    assert_eq!(score["detected_faults"], 0, "{score}");
    assert_clean_teardown(&runs[0].1);

    // sim:injectable: the injection scenario is a hard failure on the forbidden marker.
    let dir = artifacts(&format!("{lab}-injectable"))?;
    let dir_text = dir.display().to_string();
    let mut args = vec!["live"];
    args.extend(lab_args(lab));
    args.extend([
        "--scenario",
        "watch.prompt-injection-label",
        "--model",
        "sim:injectable",
        "--authorize-live-faults",
        "--artifacts",
        &dir_text,
    ]);
    let output = stack.run(&args, RUN_WITHIN).await?;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let runs = reports(&dir)?;
    let score = &runs[0].1["score"];
    assert_eq!(score["passed"], false, "{score}");
    let hard = score["hard_failures"].to_string();
    assert!(hard.contains("forbidden_output_marker"), "{score}");
    assert_clean_teardown(&runs[0].1);
    Ok(())
}

#[tokio::test]
async fn the_watch_track_on_the_process_lab_passes_a_diligent_model_and_catches_bad_ones()
-> anyhow::Result<()> {
    let stack = QualifyStack::start("qualify-process").await?;
    let result = watch_track(&stack, "process").await;
    let stopped = stack.stop().await;
    result?;
    stopped
}

#[tokio::test]
async fn the_watch_track_on_the_docker_lab_passes_a_diligent_model_and_catches_bad_ones()
-> anyhow::Result<()> {
    let stack = QualifyStack::start("qualify-docker").await?;
    let result = watch_track(&stack, "docker").await;
    let stopped = stack.stop().await;
    result?;
    stopped
}

async fn remediation(stack: &QualifyStack) -> anyhow::Result<()> {
    // Authorised: the approved restart is verified, the rejected one leaves the fault.
    let dir = artifacts("remediation")?;
    let dir_text = dir.display().to_string();
    let output = stack
        .run(
            &[
                "live-suite",
                "--lab",
                "process",
                "--qualification-track",
                "remediation",
                "--model",
                "sim:diligent",
                "--authorize-live-faults",
                "--authorize-remediation",
                "--artifacts",
                &dir_text,
            ],
            SUITE_WITHIN,
        )
        .await?;
    assert!(output.status.success(), "{}", describe(&output));
    let runs = reports(&dir)?;
    assert_eq!(runs.len(), 2, "{}", describe(&output));
    for (_, report) in &runs {
        let seen = &report["observation"]["remediation"];
        assert_eq!(seen["identity_bound"], true, "{seen}");
        assert_eq!(seen["postconditions_held"], true, "{seen}");
        match report["manifest"]["id"].as_str() {
            Some("remediation.restart-approved") => {
                assert_eq!(seen["decision_recorded"], "approve", "{seen}");
                assert_eq!(seen["terminal_state"], "completed", "{seen}");
                assert_eq!(seen["verification_status"], "verified", "{seen}");
            }
            Some("remediation.restart-rejected") => {
                assert_eq!(seen["decision_recorded"], "reject", "{seen}");
                assert_eq!(seen["terminal_state"], "rejected", "{seen}");
                // The fault was still there for the revert to remove.
                assert_eq!(report["observation"]["faults"][0]["reverted"], true);
            }
            other => panic!("unexpected scenario {other:?}"),
        }
        assert_clean_teardown(report);
    }

    // Without the flag: no decision is recorded, so the scenario cannot pass.
    let dir = artifacts("remediation-unauthorised")?;
    let dir_text = dir.display().to_string();
    let output = stack
        .run(
            &[
                "live",
                "--lab",
                "process",
                "--scenario",
                "remediation.restart-approved",
                "--model",
                "sim:diligent",
                "--authorize-live-faults",
                "--artifacts",
                &dir_text,
            ],
            RUN_WITHIN,
        )
        .await?;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let runs = reports(&dir)?;
    let seen = &runs[0].1["observation"]["remediation"];
    assert_eq!(seen["decision_recorded"], Value::Null, "{seen}");
    assert_eq!(seen["terminal_state"], Value::Null, "{seen}");
    assert!(
        seen["notes"]
            .to_string()
            .contains("--authorize-remediation"),
        "{seen}"
    );
    assert_clean_teardown(&runs[0].1);

    // A live report replays to the same score; an edited transcript is caught.
    let (report_path, _) = &runs[0];
    let run_dir = report_path.parent().expect("run dir");
    let replay = run_offline(
        &[
            "replay",
            "--replay-report",
            &report_path.display().to_string(),
        ],
        RUN_WITHIN,
    )
    .await?;
    assert!(replay.status.success(), "{}", describe(&replay));
    let bundle = run_dir.join("replay.json");
    let verified = run_offline(
        &[
            "verify-replay",
            "--replay-bundle",
            &bundle.display().to_string(),
        ],
        RUN_WITHIN,
    )
    .await?;
    assert!(verified.status.success(), "{}", describe(&verified));
    let mut edited: Value = serde_json::from_slice(&std::fs::read(&bundle)?)?;
    edited["tool_exchanges"][0]["output"] = Value::String("{\"all\": \"healthy\"}".into());
    std::fs::write(&bundle, serde_json::to_vec_pretty(&edited)?)?;
    let caught = run_offline(
        &[
            "verify-replay",
            "--replay-bundle",
            &bundle.display().to_string(),
        ],
        RUN_WITHIN,
    )
    .await?;
    assert_eq!(caught.status.code(), Some(1), "{}", describe(&caught));
    Ok(())
}

#[tokio::test]
async fn remediation_decisions_need_their_own_flag_and_an_independent_postcondition()
-> anyhow::Result<()> {
    let stack = QualifyStack::start("qualify-remediation").await?;
    let result = remediation(&stack).await;
    let stopped = stack.stop().await;
    result?;
    stopped
}

#[tokio::test]
async fn live_runs_refuse_without_their_safety_flags() -> anyhow::Result<()> {
    let stack = QualifyStack::start("qualify-refusals").await?;
    let result = async {
        // No --authorize-live-faults: nothing is touched.
        let output = stack
            .run(
                &[
                    "live",
                    "--lab",
                    "process",
                    "--scenario",
                    "watch.service-unhealthy",
                ],
                RUN_WITHIN,
            )
            .await?;
        assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("missing_safety_flag"),
            "{}",
            describe(&output)
        );
        // The Docker lab needs an explicit engine.
        let output = stack
            .run(
                &[
                    "live",
                    "--lab",
                    "docker",
                    "--scenario",
                    "watch.service-unhealthy",
                    "--authorize-live-faults",
                ],
                RUN_WITHIN,
            )
            .await?;
        assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("missing_lab_target"),
            "{}",
            describe(&output)
        );
        // A remote engine needs --allow-shared-host.
        let output = stack
            .run(
                &[
                    "live",
                    "--lab",
                    "docker",
                    "--docker-host",
                    "tcp://203.0.113.9:2375",
                    "--scenario",
                    "watch.service-unhealthy",
                    "--authorize-live-faults",
                ],
                RUN_WITHIN,
            )
            .await?;
        assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("shared_host_not_allowed"),
            "{}",
            describe(&output)
        );
        // Interrupted mid-run: the lab is still torn down and the run reported.
        let dir = artifacts("interrupted")?;
        let dir_text = dir.display().to_string();
        let mut command = stack.live_command(&[
            "live",
            "--lab",
            "process",
            "--scenario",
            "watch.two-independent-faults",
            "--model",
            "sim:diligent",
            "--authorize-live-faults",
            "--artifacts",
            &dir_text,
        ])?;
        command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let child = command.spawn()?;
        let pid = child.id().expect("the harness runs");
        // The lab agent's log appears once the lab is provisioned.
        pulse_test_support::wait::until(RUN_WITHIN, "the lab to be provisioned", || {
            let started = std::fs::read_dir(&dir).ok().is_some_and(|entries| {
                entries
                    .flatten()
                    .any(|e| e.file_name().to_string_lossy().starts_with("agent-"))
            });
            async move { started.then_some(()) }
        })
        .await?;
        pulse_test_support::service::signal(pid, libc::SIGINT);
        let output = tokio::time::timeout(RUN_WITHIN, child.wait_with_output()).await??;
        assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("interrupted"),
            "{}",
            describe(&output)
        );
        let runs = reports(&dir)?;
        assert_eq!(runs.len(), 1, "{}", describe(&output));
        let report = &runs[0].1;
        assert!(
            report["observation"]["run_error"]
                .as_str()
                .is_some_and(|e| e.contains("interrupted")),
            "{}",
            report["observation"]
        );
        assert_clean_teardown(report);
        anyhow::Ok(())
    }
    .await;
    let stopped = stack.stop().await;
    result?;
    stopped
}

/// The Proxmox lab: a fake cluster (fakepve) Pulse reads through a connection and its
/// connector. Every scenario passes a diligent model, each run's connection is removed and its
/// cluster forgotten, and the teardown leaves nothing behind.
#[tokio::test]
async fn the_watch_track_on_the_proxmox_lab_passes_a_diligent_model() -> anyhow::Result<()> {
    let python =
        pulse_test_support::fakepve::python(Path::new(env!("CARGO_TARGET_TMPDIR"))).await?;
    let python = python.display().to_string();
    let stack = QualifyStack::start("qualify-proxmox").await?;
    let dir = artifacts("proxmox-diligent")?;
    let dir_text = dir.display().to_string();
    let output = stack
        .run(
            &[
                "live-suite",
                "--lab",
                "proxmox",
                "--fakepve-python",
                &python,
                "--qualification-track",
                "watch",
                "--repeat-profile",
                "development",
                "--model",
                "sim:diligent",
                "--authorize-live-faults",
                "--artifacts",
                &dir_text,
            ],
            SUITE_WITHIN,
        )
        .await?;
    assert!(output.status.success(), "{}", describe(&output));
    let runs = reports(&dir)?;
    let ids: Vec<&str> = runs
        .iter()
        .filter_map(|(_, r)| r["manifest"]["id"].as_str())
        .collect();
    assert_eq!(ids, PROXMOX_WATCH.to_vec(), "{}", describe(&output));
    for (path, report) in &runs {
        assert_eq!(
            report["score"]["passed"],
            true,
            "{}: {}",
            path.display(),
            report["score"]
        );
        assert_clean_teardown(report);
    }
    // Every run's connection was removed and its cluster forgotten.
    let http = reqwest::Client::new();
    let connections: Value = http
        .get(format!("{}/api/connections", stack.gateway_url))
        .bearer_auth(&stack.admin_token)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(
        connections["connections"],
        serde_json::json!([]),
        "{connections}"
    );
    let left = resources_of(&stack, "pve.").await?;
    assert!(left.is_empty(), "{left:?}");
    stack.stop().await
}
