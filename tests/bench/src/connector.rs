//! `connector`: one `pulse-connector` reading a large fake cluster through the real relay.
//!
//! The cluster is `fakepve` (PyPI) with 20 nodes, 1,000 guests and 50 storages (quick: 2 nodes,
//! 40 guests, 5 storages). The real gateway, relay and connector binaries run on this machine's
//! Postgres and NATS; the connection is read every 10 s (the shortest cadence a connection
//! takes). Figures, after the first read (which includes start-up):
//!
//! - the read cycle (lease renewal, every API read, the report handed to the relay and the state
//!   recorded), from the connector's `pulse_connector_read_seconds`;
//! - resources per report, and the relay's ingest rate of resource observations
//!   (`pulse_relay_resource_observations_ingested_total` over `pulse_relay_report_ingest_seconds`);
//! - the connector's CPU time per cycle (utime + stime from `/proc`) and its resident memory.
//!
//! Targets: a cycle well inside the default 30 s cadence (under 10 s), and under 1 s of CPU per
//! cycle, so one connector holds a 1,000-guest cluster at 30 s on 2 cores with most of a core
//! left for the rest of the stack.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use pulse_test_support::agent::AgentStack;
use pulse_test_support::fakepve::FakePve;
use pulse_test_support::service::{metric, scratch_dir, start_backend};
use reqwest::Method;
use serde_json::{Value, json};

use crate::relay::{clock_ticks_per_sec, proc_stat};
use crate::{BenchArgs, figure};

const TOKEN: &str = "bench@pve!reader";
const SECRET: &str = "0b5e1c2d-3f4a-4b6c-8d7e-9f0a1b2c3d4e";
const CYCLE_TARGET_SECS: f64 = 10.0;
const CPU_TARGET_SECS: f64 = 1.0;

struct Plan {
    nodes: usize,
    guests: usize,
    storages: usize,
    /// Reads measured after the first.
    cycles: u32,
}

impl Plan {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                nodes: 2,
                guests: 40,
                storages: 5,
                cycles: 1,
            }
        } else {
            Self {
                nodes: 20,
                guests: 1_000,
                storages: 50,
                cycles: 4,
            }
        }
    }

    /// The fake cluster: guests spread over the nodes, storages over the nodes (the first ones
    /// get one more when they do not divide evenly), every storage with real-looking usage.
    fn spec(&self) -> Value {
        let nodes: Vec<Value> = (1..=self.nodes)
            .map(|n| json!({"name": format!("pve{n}")}))
            .collect();
        let guests: Vec<Value> = (0..self.guests)
            .map(|g| {
                let node = format!("pve{}", g % self.nodes + 1);
                let kind = if g % 4 == 3 { "lxc" } else { "qemu" };
                json!({"vmid": 100 + g, "name": format!("guest-{g}"), "node": node,
                       "type": kind, "status": if g % 10 == 9 { "stopped" } else { "running" }})
            })
            .collect();
        let mut answers = serde_json::Map::new();
        for n in 0..self.nodes {
            let count = self.storages / self.nodes + usize::from(n < self.storages % self.nodes);
            let storages: Vec<Value> = (0..count)
                .map(|s| {
                    let total: u64 = 1 << 40;
                    let used = total / 100 * (20 + ((n * 7 + s * 13) % 70) as u64);
                    json!({"storage": format!("store{s}"), "type": "dir", "content": "images,rootdir",
                           "enabled": 1, "active": 1, "shared": 0, "total": total, "used": used,
                           "avail": total - used})
                })
                .collect();
            answers.insert(format!("/nodes/pve{}/storage", n + 1), json!(storages));
        }
        json!({
            "tokens": { TOKEN: SECRET },
            "nodes": nodes,
            "grants": [{"user": TOKEN, "path": "/",
                        "privs": ["Sys.Audit", "VM.Audit", "Datastore.Audit"]}],
            "guests": guests,
            "answers": answers,
        })
    }
}

fn venv_root() -> std::path::PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || {
            std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/pulse-target")
        },
        std::path::PathBuf::from,
    );
    target.join("tmp")
}

pub async fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let plan = Plan::new(args.quick);
    let root = venv_root();
    std::fs::create_dir_all(&root)?;
    let pve = FakePve::start(&root, &plan.spec())
        .await
        .context("starting fakepve")?;
    let stack = AgentStack::start(&[]).await?;
    let (status, added) = stack
        .gateway
        .admin_json(
            Method::POST,
            "/api/connections",
            Some(json!({
                "kind": "proxmox-ve", "name": "bench", "url": pve.url, "token_id": TOKEN,
                "token_secret": SECRET, "fingerprint": pve.fingerprint, "cadence_seconds": 10,
            })),
        )
        .await?;
    anyhow::ensure!(status == 201, "adding the connection: {status} {added}");
    let dir = scratch_dir("bench-connector")?;
    let (connector, health) = start_backend(
        &stack.gateway,
        "pulse-connector",
        &dir,
        [
            (
                "PULSE_CONNECTOR__RELAY_URL".to_owned(),
                stack.relay_url.clone(),
            ),
            (
                "PULSE_CONNECTOR__CLAIM_EVERY_MS".to_owned(),
                "200".to_owned(),
            ),
        ],
    )
    .await?;
    let pid = connector.pid().context("the connector's pid")?;
    let http = stack.gateway.http.clone();
    let reads = || async {
        metric(
            &http,
            &health,
            "pulse_connector_reads_total{state=\"connected\"}",
        )
        .await
        .unwrap_or(0.0)
    };
    let wait_reads = |n: f64, within: Duration| {
        let reads = &reads;
        async move {
            pulse_test_support::wait::until(
                within,
                &format!("{n} connected reads of the cluster"),
                || async move { (reads().await >= n).then_some(()) },
            )
            .await
        }
    };
    let started = Instant::now();
    wait_reads(1.0, Duration::from_secs(120)).await?;
    let first = started.elapsed();
    let sum = |name: &'static str| {
        let http = &http;
        let health = &health;
        async move { metric(http, health, name).await.unwrap_or(0.0) }
    };
    let (seconds_before, count_before) = (
        sum("pulse_connector_read_seconds_sum").await,
        sum("pulse_connector_read_seconds_count").await,
    );
    let cpu_before = proc_stat(pid).map_or(0, |(_, _, ticks)| ticks);
    let resources_before = sum("pulse_connector_resources_reported_total").await;
    wait_reads(
        1.0 + f64::from(plan.cycles),
        Duration::from_secs(20 * u64::from(plan.cycles) + 30),
    )
    .await?;
    let cycles = sum("pulse_connector_read_seconds_count").await - count_before;
    let cycle_secs = (sum("pulse_connector_read_seconds_sum").await - seconds_before) / cycles;
    let cpu_secs = (proc_stat(pid).map_or(0, |(_, _, ticks)| ticks) - cpu_before) as f64
        / clock_ticks_per_sec()
        / cycles;
    let resources =
        (sum("pulse_connector_resources_reported_total").await - resources_before) / cycles;
    let relay = &stack.relay_url;
    let ingested = metric(
        &http,
        relay,
        "pulse_relay_resource_observations_ingested_total",
    )
    .await
    .unwrap_or(0.0);
    let ingest_secs = metric(&http, relay, "pulse_relay_report_ingest_seconds_sum")
        .await
        .unwrap_or(0.0);
    let rss_mib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0;

    figure("connector", "nodes", plan.nodes as f64, "");
    figure("connector", "guests", plan.guests as f64, "");
    figure("connector", "storages", plan.storages as f64, "");
    figure(
        "connector",
        "first read after start",
        first.as_secs_f64(),
        "s",
    );
    figure("connector", "cycles measured", cycles, "");
    figure("connector", "read cycle (mean)", cycle_secs, "s");
    figure("connector", "resources per report", resources, "");
    figure(
        "connector",
        "relay observations ingested per second",
        if ingest_secs > 0.0 {
            ingested / ingest_secs
        } else {
            f64::NAN
        },
        "/s",
    );
    figure("connector", "connector CPU per cycle", cpu_secs, "s");
    figure(
        "connector",
        "connector CPU at a 30 s cadence",
        cpu_secs / 30.0 * 100.0,
        "% of a core",
    );
    figure("connector", "connector resident memory", rss_mib, "MiB");
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    println!(
        "connector target: read cycle < {CYCLE_TARGET_SECS} s: {}; CPU per cycle < {CPU_TARGET_SECS} s: {}",
        verdict(cycle_secs < CYCLE_TARGET_SECS),
        verdict(cpu_secs < CPU_TARGET_SECS)
    );
    connector.stop(Duration::from_secs(10)).await?;
    drop(pve);
    stack.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
