//! `pulse-bench qualify`: wall time of the watch track of `patrol-qualify` on the process lab
//! with `sim:diligent` (development profile) against the real stack, per scenario and in total,
//! with the lab, collection and Patrol phases separated (`--quick`: two scenarios).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use pulse_test_support::qualify::{QualifyStack, describe};
use serde_json::Value;

use crate::{BenchArgs, figure};

const SUITE_WITHIN: Duration = Duration::from_secs(1200);

pub async fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let stack = QualifyStack::start("bench-qualify").await?;
    let result = measure(&stack, args).await;
    let stopped = stack.stop().await;
    result?;
    stopped
}

async fn measure(stack: &QualifyStack, args: &BenchArgs) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!(
        "pulse-bench-qualify-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let dir_text = dir.display().to_string();
    let mut cli = vec![
        "live-suite",
        "--lab",
        "process",
        "--qualification-track",
        "watch",
        "--repeat-profile",
        "development",
        "--model",
        "sim:diligent",
        "--authorize-live-faults",
        "--quiet",
        "--artifacts",
        &dir_text,
    ];
    if args.quick {
        cli.extend([
            "--scenario",
            "watch.service-unhealthy",
            "--scenario",
            "watch.healthy-mixed",
        ]);
    }
    let start = Instant::now();
    let output = stack.run(&cli, SUITE_WITHIN).await?;
    let wall = start.elapsed();
    anyhow::ensure!(
        output.status.success(),
        "the watch track did not pass: {}",
        describe(&output)
    );
    let mut totals = [0u64; 4];
    let mut runs = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path().join("run-001").join("report.json");
        if path.is_file() {
            let report: Value = serde_json::from_slice(&std::fs::read(&path)?)
                .with_context(|| path.display().to_string())?;
            runs.push(report);
        }
    }
    runs.sort_by(|a, b| {
        a["manifest"]["id"]
            .as_str()
            .cmp(&b["manifest"]["id"].as_str())
    });
    for report in &runs {
        let id = report["manifest"]["id"].as_str().unwrap_or("?");
        let t = &report["observation"]["timings"];
        let phases = [
            ("lab", t["lab_ms"].as_u64().unwrap_or(0)),
            ("collection", t["collection_ms"].as_u64().unwrap_or(0)),
            ("patrol", t["patrol_ms"].as_u64().unwrap_or(0)),
            ("end to end", t["end_to_end_ms"].as_u64().unwrap_or(0)),
        ];
        for (i, (phase, ms)) in phases.iter().enumerate() {
            figure("qualify", &format!("{id} {phase}"), *ms as f64, "ms");
            totals[i] += ms;
        }
    }
    for (i, phase) in ["lab", "collection", "patrol", "end to end"]
        .iter()
        .enumerate()
    {
        figure(
            "qualify",
            &format!("track total {phase}"),
            totals[i] as f64,
            "ms",
        );
    }
    figure(
        "qualify",
        &format!("suite wall time ({} scenarios)", runs.len()),
        wall.as_millis() as f64,
        "ms",
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
