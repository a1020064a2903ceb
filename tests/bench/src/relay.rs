//! relay-bench: simulated agents reporting through the real `pulse-agent-relay` binary into
//! Postgres, plus the footprint of one real `pulse-agent` supervising 50 services.
//!
//! Phases:
//! - nominal: every agent reports every 10 s (staggered starts);
//! - target: every agent reports every 2.5 s, i.e. 1,000 agents offer 20,000 observations/s;
//! - saturation: every agent sends its next report as soon as the previous one is acked;
//! - footprint: RSS and CPU of a real agent with 50 supervised services;
//! - then, on a fresh database, saturation again through two relay replicas sharing one port
//!   (`PULSE_HTTP__REUSE_PORT`; the kernel spreads the agents' connections over them).
//!
//! An observation is one resource of a report. Latency is measured two ways: send to Ack (the
//! relay acks after the report's transaction committed, so this bounds the time until the rows
//! are queryable from above), and send until an independent poller on its own Postgres
//! connection reads the report's `observed_at` back from the agent's host row.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chrono::{DateTime, DurationRound, Utc};
use futures::{SinkExt as _, StreamExt as _};
use pulse_domain::agent_protocol::{AGENT_WS_PATH, PROTOCOL_VERSION, RelayMessage};
use pulse_domain::resource::{Health, ObservedResource, ResourceStatus, ResourceType};
use pulse_domain::{Scope, TenantId};
use pulse_store::tokens::{self, NewToken};
use pulse_test_support::db::TestDb;
use pulse_test_support::service::{
    ANY_PORT, ServiceProcess, delete_streams, scratch_dir, small_streams_env,
};
use serde::Serialize;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_postgres::types::Type;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

use crate::{BenchArgs, figure, quantile};

const BENCH: &str = "relay";
const RESOURCES_PER_REPORT: usize = 50;
const SERVICES: usize = 25;
const CONTAINERS: usize = 20;
const MOUNTS: [&str; 4] = ["/", "/boot", "/var", "/srv/data"];
const TARGET_OBS_PER_SEC: f64 = 20_000.0;
const TARGET_P99: Duration = Duration::from_secs(2);
const SUPERVISED: usize = 50;
/// How often the independent poller reads the sampled host rows.
const POLL_EVERY: Duration = Duration::from_millis(5);
/// A sampled report not readable after this long counts as lost.
const PROBE_GIVE_UP: Duration = Duration::from_secs(30);

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Sizes of one run.
struct Plan {
    agents: usize,
    nominal_interval: Duration,
    nominal_warmup: Duration,
    nominal_window: Duration,
    target_interval: Duration,
    target_warmup: Duration,
    target_window: Duration,
    saturation_warmup: Duration,
    saturation_window: Duration,
    footprint_window: Duration,
}

impl Plan {
    fn new(quick: bool) -> Self {
        let secs = Duration::from_secs;
        if quick {
            Self {
                agents: 100,
                nominal_interval: secs(10),
                nominal_warmup: secs(2),
                nominal_window: secs(5),
                target_interval: Duration::from_millis(2_500),
                target_warmup: secs(1),
                target_window: secs(4),
                saturation_warmup: secs(1),
                saturation_window: secs(5),
                footprint_window: secs(5),
            }
        } else {
            Self {
                agents: 1_000,
                nominal_interval: secs(10),
                // One full interval, so every staggered agent is reporting.
                nominal_warmup: secs(10),
                nominal_window: secs(60),
                target_interval: Duration::from_millis(2_500),
                target_warmup: secs(5),
                target_window: secs(30),
                saturation_warmup: secs(5),
                saturation_window: secs(30),
                footprint_window: secs(30),
            }
        }
    }
}

pub async fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let plan = Plan::new(args.quick);
    // Both measurements run even when the first one's relay misbehaves at the end; the first
    // failure is the bench's answer.
    let mut failure = None;
    for replicas in [1, 2] {
        if let Err(error) = run_with(args, &plan, replicas).await {
            eprintln!("relay bench with {replicas} relay(s): {error:#}");
            failure = failure.or(Some(error));
        }
    }
    failure.map_or(Ok(()), Err)
}

async fn run_with(args: &BenchArgs, plan: &Plan, replicas: usize) -> anyhow::Result<()> {
    let db = TestDb::create()
        .await
        .context("creating the bench database")?;
    let prefix = format!("rb{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let dir = scratch_dir("relay-bench")?;
    let result = measure(args, plan, replicas, &db, &prefix, &dir).await;
    if let Err(error) = delete_streams(&prefix).await {
        eprintln!("relay bench: stream clean-up failed: {error:#}");
    }
    if let Err(error) = db.cleanup().await {
        eprintln!("relay bench: database clean-up failed: {error:#}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn measure(
    args: &BenchArgs,
    plan: &Plan,
    replicas: usize,
    db: &TestDb,
    prefix: &str,
    dir: &Path,
) -> anyhow::Result<()> {
    let tenant = TenantId::new("bench")?;
    pulse_store::tenants::create(db.store(), &tenant, "Bench").await?;
    let token = {
        let tx = db.store().tenant_tx(&tenant).await?;
        let issued = tokens::issue(
            &tx,
            NewToken {
                name: "relay-bench".to_owned(),
                scopes: BTreeSet::from([Scope::AgentReport]),
                expires_at: None,
                created_by: None,
            },
        )
        .await?;
        tx.commit().await?;
        issued.secret.expose().to_owned()
    };

    let mut env = vec![
        ("PULSE_DATABASE_URL".to_owned(), db.owner_url().to_owned()),
        ("PULSE_NATS_URL".to_owned(), args.nats_url.clone()),
        ("PULSE_NATS__SUBJECT_PREFIX".to_owned(), prefix.to_owned()),
        ("PULSE_STATE_DIR".to_owned(), dir.display().to_string()),
        ("PULSE_RELAY__LISTEN".to_owned(), ANY_PORT.to_owned()),
        ("PULSE_TELEMETRY__LOG_FILTER".to_owned(), "warn".to_owned()),
    ];
    env.extend(small_streams_env());
    // The relay's pool size can be varied from the bench's environment (default: the config's).
    if let Ok(size) = std::env::var("PULSE_DATABASE__POOL_SIZE") {
        println!("{BENCH:<8} relay database pool size {size}");
        env.push(("PULSE_DATABASE__POOL_SIZE".to_owned(), size));
    }
    if replicas > 1 {
        env.push(("PULSE_HTTP__REUSE_PORT".to_owned(), "true".to_owned()));
    }
    let mut relays = vec![ServiceProcess::spawn(
        "pulse-agent-relay",
        &env,
        &dir.join("relay.log"),
    )?];
    let result = async {
        let addr = relays[0].wait_listening().await?;
        // The other replicas bind the port the first one got.
        env.retain(|(key, _)| key != "PULSE_RELAY__LISTEN");
        env.push(("PULSE_RELAY__LISTEN".to_owned(), addr.to_string()));
        for n in 2..=replicas {
            relays.push(ServiceProcess::spawn(
                "pulse-agent-relay",
                &env,
                &dir.join(format!("relay-{n}.log")),
            )?);
        }
        let relay_url = format!("http://{addr}");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()?;
        let mut relay_pids = Vec::with_capacity(replicas);
        for relay in &mut relays {
            relay.wait_listening().await?;
            relay.wait_ready(&http, &relay_url).await?;
            relay_pids.push(relay.pid().context("a relay exited at once")?);
        }
        let ws_url = format!("ws://{addr}{AGENT_WS_PATH}");
        load_phases(plan, db, &tenant, &token, &ws_url, &relay_pids, args.quick).await?;
        if replicas == 1 {
            footprint(plan, db, &token, &relay_url, dir).await?;
        }
        Ok(())
    }
    .await;
    let mut stopped = Ok(());
    for (n, relay) in relays.into_iter().enumerate() {
        let log = if n == 0 {
            dir.join("relay.log")
        } else {
            dir.join(format!("relay-{}.log", n + 1))
        };
        let outcome = match relay.stop(Duration::from_secs(20)).await {
            Err(error) => Err(error.context("stopping a relay")),
            Ok(status) if !status.success() => Err(anyhow::anyhow!("a relay exited with {status}")),
            Ok(_) => Ok(()),
        };
        if outcome.is_err() {
            // What it was doing when it would not stop.
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!(
                "relay bench: last lines of {}:\n{}",
                log.display(),
                lines[lines.len().saturating_sub(20)..].join("\n")
            );
        }
        stopped = stopped.and(outcome);
    }
    result.and(stopped)
}

// ---------------------------------------------------------------------------------------------
// Simulated agents

/// The wire shape of `AgentMessage::Report`, serialized from borrowed resources.
#[derive(Serialize)]
struct ReportFrame<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    seq: u64,
    observed_at: DateTime<Utc>,
    resources: &'a [ObservedResource],
}

/// A cheap deterministic generator for varying metric values.
struct Lcg(u64);

impl Lcg {
    fn next_f64(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1_u64 << 53) as f64
    }
}

fn labels(pairs: &[(&str, String)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

fn metrics(names: &[&str]) -> BTreeMap<String, f64> {
    names.iter().map(|n| ((*n).to_owned(), 0.0)).collect()
}

/// What a real agent of a busy host reports: the host, 4 filesystems, 25 supervised services
/// and 20 containers, with labels, details and metrics of realistic size.
fn fleet(agent_id: &str, index: usize) -> Vec<ObservedResource> {
    let mut out = Vec::with_capacity(RESOURCES_PER_REPORT);
    let hostname = format!("{agent_id}.dc1.example.net");
    out.push(ObservedResource {
        resource_type: ResourceType::Host,
        source_id: agent_id.to_owned(),
        name: hostname.clone(),
        aliases: vec![
            hostname,
            format!(
                "10.{}.{}.{}",
                index / 65_536 % 256,
                index / 256 % 256,
                index % 256
            ),
        ],
        status: ResourceStatus::Running,
        health: Health::Healthy,
        restart_count: None,
        labels: labels(&[
            ("rack", format!("r{}", index % 40)),
            ("env", "production".to_owned()),
        ]),
        details: json!({"cpus": 8, "uptime_seconds": 86_400, "agent_version": "0.1.0",
                        "kernel": "6.1.0-27-amd64", "os": "Debian GNU/Linux 12 (bookworm)"}),
        metrics: metrics(&[
            "cpu_percent",
            "memory_total_bytes",
            "memory_used_bytes",
            "memory_percent",
            "swap_total_bytes",
            "swap_used_bytes",
            "load1",
            "load5",
            "load15",
            "uptime_seconds",
        ]),
        parent: None,
    });
    for (i, mount) in MOUNTS.iter().enumerate() {
        out.push(ObservedResource {
            resource_type: ResourceType::Storage,
            source_id: (*mount).to_owned(),
            name: (*mount).to_owned(),
            aliases: Vec::new(),
            status: ResourceStatus::Running,
            health: Health::Healthy,
            restart_count: None,
            labels: BTreeMap::new(),
            details: json!({"device": format!("/dev/nvme0n1p{}", i + 1), "fs_type": "ext4"}),
            metrics: metrics(&[
                "total_bytes",
                "used_bytes",
                "available_bytes",
                "used_percent",
                "inodes_total",
                "inodes_used",
                "inodes_percent",
            ]),
            parent: None,
        });
    }
    for s in 0..SERVICES {
        let name = format!("svc-{s:02}");
        let health_log: Vec<serde_json::Value> = (0..10)
            .map(|k| {
                json!({"at": format!("2026-11-29T12:00:{:02}Z", k * 5), "healthy": true,
                            "message": "tcp 127.0.0.1:8080 connected"})
            })
            .collect();
        out.push(ObservedResource {
            resource_type: ResourceType::Service,
            source_id: name.clone(),
            name: name.clone(),
            aliases: Vec::new(),
            status: ResourceStatus::Running,
            health: Health::Healthy,
            restart_count: Some(0),
            labels: labels(&[
                ("team", format!("team-{}", s % 5)),
                ("tier", "backend".to_owned()),
            ]),
            details: json!({
                "pid": 10_000 + s, "command": "/usr/local/bin/worker",
                "args": ["--config", format!("/etc/{name}.toml"), "--listen", "127.0.0.1:8080"],
                "last_exit_code": null, "started_at": "2026-11-29T11:00:00Z", "exited_at": null,
                "last_error": null, "health_log": health_log,
            }),
            metrics: BTreeMap::new(),
            parent: None,
        });
    }
    for c in 0..CONTAINERS {
        let id = format!("{:064x}", ((index as u128) << 64) | c as u128);
        let name = format!("app-{c:02}");
        out.push(ObservedResource {
            resource_type: ResourceType::AppContainer,
            source_id: id.clone(),
            name: name.clone(),
            aliases: vec![id[..12].to_owned(), name.clone()],
            status: ResourceStatus::Running,
            health: Health::Healthy,
            restart_count: Some(0),
            labels: labels(&[
                ("com.docker.compose.project", "shop".to_owned()),
                ("com.docker.compose.service", name.clone()),
                ("org.opencontainers.image.version", "2.14.1".to_owned()),
            ]),
            details: json!({
                "image": format!("registry.example.net/shop/{name}:2.14.1"),
                "image_id": format!("sha256:{id}"), "state": "running",
                "started_at": "2026-11-29T10:00:00Z", "restart_policy": "unless-stopped",
                "ports": [{"private": 8080, "public": 18_080 + c, "type": "tcp"}],
            }),
            metrics: metrics(&["cpu_percent", "memory_used_bytes"]),
            parent: None,
        });
    }
    debug_assert_eq!(out.len(), RESOURCES_PER_REPORT);
    out
}

/// One simulated agent: its own WebSocket session.
struct SimAgent {
    index: usize,
    id: String,
    socket: Socket,
    seq: u64,
    resources: Vec<ObservedResource>,
    rng: Lcg,
}

/// A sampled report the poller waits for.
struct Probe {
    host_id: String,
    observed_at: DateTime<Utc>,
    sent: Instant,
}

enum ProbeEvent {
    /// The report was sent: wait for it.
    Sent(Probe),
    /// The relay rejected the report: it will never be stored.
    Rejected { host_id: String, sent: Instant },
}

/// One acked report.
#[derive(Clone, Copy)]
struct Acked {
    sent: Instant,
    acked: Instant,
}

#[derive(Default)]
struct AgentTally {
    acked: Vec<Acked>,
    rejected: u64,
    /// Nominal-rate ticks skipped because the previous report was still unanswered.
    skipped: u64,
}

#[derive(Clone, Copy)]
enum Pace {
    Every(Duration),
    ClosedLoop,
}

async fn connect(ws_url: &str, token: &str) -> anyhow::Result<Socket> {
    let mut request = ws_url.into_client_request()?;
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {token}").parse()?);
    let (socket, _) = tokio::time::timeout(
        Duration::from_secs(30),
        tokio_tungstenite::connect_async(request),
    )
    .await
    .context("connecting to the relay timed out")??;
    Ok(socket)
}

async fn next_reply(socket: &mut Socket) -> anyhow::Result<RelayMessage> {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(60), socket.next())
            .await
            .context("no answer from the relay within 60 s")?
            .context("the relay closed the connection")??;
        match frame {
            Message::Text(text) => return Ok(serde_json::from_str(text.as_str())?),
            Message::Close(frame) => anyhow::bail!("the relay closed the session: {frame:?}"),
            _ => continue,
        }
    }
}

impl SimAgent {
    async fn start(index: usize, ws_url: &str, token: &str) -> anyhow::Result<Self> {
        let id = format!("bench-{index:05}");
        let mut socket = connect(ws_url, token).await?;
        let hello = json!({
            "type": "hello", "protocol": PROTOCOL_VERSION, "agent_id": id,
            "hostname": format!("{id}.dc1.example.net"), "agent_version": "0.1.0",
            "report_interval_ms": 10_000,
        });
        socket
            .send(Message::Text(serde_json::to_string(&hello)?.into()))
            .await?;
        match next_reply(&mut socket).await? {
            RelayMessage::Welcome { .. } => {}
            other => anyhow::bail!("agent {id}: expected welcome, got {other:?}"),
        }
        Ok(Self {
            index,
            resources: fleet(&id, index),
            id,
            socket,
            seq: 0,
            rng: Lcg(index as u64 + 1),
        })
    }

    /// Moves the simulated host on: new metric values, a new uptime, and every sixth report
    /// one service turns unhealthy (and recovers in the next), so change events flow.
    fn advance(&mut self) {
        self.seq += 1;
        for resource in &mut self.resources {
            for value in resource.metrics.values_mut() {
                *value = (self.rng.next_f64() * 1e4).round() / 100.0;
            }
        }
        self.resources[0].details["uptime_seconds"] = json!(86_400 + self.seq * 10);
        let sick = 5 + (self.index + self.seq as usize / 6) % SERVICES;
        let unhealthy = self.seq % 6 == 0;
        for service in &mut self.resources[5..5 + SERVICES] {
            service.health = Health::Healthy;
        }
        if unhealthy {
            self.resources[sick].health = Health::Unhealthy;
        }
    }

    /// Reports per `pace` until `until`, then returns with the tally of this phase.
    async fn run_phase(
        mut self,
        pace: Pace,
        first: Instant,
        until: Instant,
        probes: mpsc::UnboundedSender<ProbeEvent>,
        sample_one_in: u64,
    ) -> (Self, anyhow::Result<AgentTally>) {
        let mut tally = AgentTally::default();
        let result = async {
            let mut next = first;
            loop {
                if next >= until {
                    break;
                }
                tokio::time::sleep_until(next.into()).await;
                self.advance();
                let observed_at = Utc::now().duration_trunc(chrono::Duration::microseconds(1))?;
                let text = serde_json::to_string(&ReportFrame {
                    kind: "report",
                    seq: self.seq,
                    observed_at,
                    resources: &self.resources,
                })?;
                let sent = Instant::now();
                self.socket.send(Message::Text(text.into())).await?;
                let sampled = (self.seq + self.index as u64) % sample_one_in == 0;
                if sampled {
                    let _ = probes.send(ProbeEvent::Sent(Probe {
                        host_id: format!("host:{}", self.id),
                        observed_at,
                        sent,
                    }));
                }
                match next_reply(&mut self.socket).await? {
                    RelayMessage::Ack { seq } if seq == self.seq => tally.acked.push(Acked {
                        sent,
                        acked: Instant::now(),
                    }),
                    RelayMessage::Rejected { reason, .. } => {
                        if sampled {
                            let _ = probes.send(ProbeEvent::Rejected {
                                host_id: format!("host:{}", self.id),
                                sent,
                            });
                        }
                        tally.rejected += 1;
                        if tally.rejected == 1 {
                            eprintln!("relay bench: agent {} report rejected: {reason}", self.id);
                        }
                    }
                    other => anyhow::bail!("agent {}: unexpected answer {other:?}", self.id),
                }
                next = match pace {
                    Pace::Every(interval) => {
                        let now = Instant::now();
                        let mut due = next + interval;
                        while due < now {
                            due += interval;
                            tally.skipped += 1;
                        }
                        due
                    }
                    Pace::ClosedLoop => Instant::now(),
                };
            }
            anyhow::Ok(())
        }
        .await;
        (self, result.map(|()| tally))
    }
}

// ---------------------------------------------------------------------------------------------
// The independent poller

/// Reads the sampled agents' host rows on its own connection until each probe's `observed_at`
/// is visible; returns (sent, seen) per probe, `None` when it never showed up.
async fn poll(
    client: tokio_postgres::Client,
    mut probes: mpsc::UnboundedReceiver<ProbeEvent>,
) -> anyhow::Result<Vec<(Instant, Option<Instant>)>> {
    // Typed and unnamed: planned at each poll for the table as it is then (a prepared statement
    // would keep the plan made while the table was empty).
    let sql = "SELECT id, observed_at FROM resources WHERE tenant_id = 'bench' AND id = ANY($1)";
    let mut pending: HashMap<String, Vec<Probe>> = HashMap::new();
    let mut done = Vec::new();
    let mut open = true;
    let mut tick = tokio::time::interval(POLL_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while open || !pending.is_empty() {
        tokio::select! {
            probe = probes.recv(), if open => match probe {
                Some(ProbeEvent::Sent(probe)) => {
                    pending.entry(probe.host_id.clone()).or_default().push(probe);
                }
                Some(ProbeEvent::Rejected { host_id, sent }) => {
                    if let Some(waiting) = pending.get_mut(&host_id) {
                        waiting.retain(|probe| probe.sent != sent);
                        if waiting.is_empty() {
                            pending.remove(&host_id);
                        }
                    }
                }
                None => open = false,
            },
            _ = tick.tick() => {
                if pending.is_empty() {
                    continue;
                }
                let ids: Vec<&str> = pending.keys().map(String::as_str).collect();
                let rows = client.query_typed(sql, &[(&ids, Type::TEXT_ARRAY)]).await?;
                let seen = Instant::now();
                let mut visible: HashMap<String, DateTime<Utc>> = HashMap::new();
                for row in rows {
                    visible.insert(row.get(0), row.get(1));
                }
                pending.retain(|id, waiting| {
                    waiting.retain(|probe| {
                        let stored = visible.get(id).is_some_and(|at| *at >= probe.observed_at);
                        if stored {
                            done.push((probe.sent, Some(seen)));
                            false
                        } else if seen.duration_since(probe.sent) > PROBE_GIVE_UP {
                            done.push((probe.sent, None));
                            false
                        } else {
                            true
                        }
                    });
                    !waiting.is_empty()
                });
            }
        }
    }
    Ok(done)
}

// ---------------------------------------------------------------------------------------------
// CPU accounting from /proc

pub(crate) fn clock_ticks_per_sec() -> f64 {
    // SAFETY: sysconf(3) reads a system constant; it has no memory-safety preconditions.
    #[allow(unsafe_code)]
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// (comm, ppid, utime + stime in clock ticks) of a process.
pub(crate) fn proc_stat(pid: u32) -> Option<(String, u32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text[open + 1..close].to_owned();
    let fields: Vec<&str> = text[close + 2..].split_whitespace().collect();
    // After the comm: state(0) ppid(1) ... utime(11) stime(12).
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((comm, ppid, utime + stime))
}

fn all_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// CPU ticks of the relay, of every Postgres process, and of this process.
#[derive(Clone, Copy)]
struct CpuSnapshot {
    at: Instant,
    relay: u64,
    postgres: u64,
    bench: u64,
}

impl CpuSnapshot {
    fn take(relay_pids: &[u32]) -> Self {
        let postgres = all_pids()
            .into_iter()
            .filter_map(proc_stat)
            .filter(|(comm, _, _)| comm.starts_with("postgres"))
            .map(|(_, _, ticks)| ticks)
            .sum();
        Self {
            at: Instant::now(),
            relay: relay_pids
                .iter()
                .map(|pid| proc_stat(*pid).map_or(0, |s| s.2))
                .sum(),
            postgres,
            bench: proc_stat(std::process::id()).map_or(0, |s| s.2),
        }
    }

    /// Percent of one core used by relay, Postgres and bench since `earlier`.
    fn since(&self, earlier: &Self) -> (f64, f64, f64) {
        let secs = self.at.duration_since(earlier.at).as_secs_f64().max(1e-3);
        let hz = clock_ticks_per_sec();
        let pct = |now: u64, then: u64| now.saturating_sub(then) as f64 / hz / secs * 100.0;
        (
            pct(self.relay, earlier.relay),
            pct(self.postgres, earlier.postgres),
            pct(self.bench, earlier.bench),
        )
    }
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn load1() -> f64 {
    loadavg()
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN)
}

// ---------------------------------------------------------------------------------------------
// Load phases

struct PhaseFigures {
    obs_per_sec: f64,
    ack_p99: Duration,
    poll_p99: Duration,
}

#[allow(clippy::too_many_arguments)]
async fn phase(
    name: &str,
    agents: Vec<SimAgent>,
    pace: Pace,
    warmup: Duration,
    window: Duration,
    sample_one_in: u64,
    db: &TestDb,
    relay_pids: &[u32],
) -> anyhow::Result<(Vec<SimAgent>, PhaseFigures)> {
    let label = format!("{name}:");
    println!("{BENCH:<8} {label} loadavg before {}", loadavg());
    let n = agents.len();
    let (probe_tx, probe_rx) = mpsc::unbounded_channel();
    let poller = tokio::spawn(poll(db.owner_client().await?, probe_rx));
    let start = Instant::now() + Duration::from_millis(200);
    let window_start = start + warmup;
    let until = window_start + window;
    let tasks: Vec<_> = agents
        .into_iter()
        .enumerate()
        .map(|(i, agent)| {
            let first = match pace {
                Pace::Every(interval) => start + interval.mul_f64(i as f64 / n as f64),
                // Spread the first reports over 1 s so the sessions do not start in lockstep.
                Pace::ClosedLoop => start + Duration::from_secs(1).mul_f64(i as f64 / n as f64),
            };
            tokio::spawn(agent.run_phase(pace, first, until, probe_tx.clone(), sample_one_in))
        })
        .collect();
    drop(probe_tx);
    tokio::time::sleep_until(window_start.into()).await;
    let cpu_start = CpuSnapshot::take(relay_pids);
    tokio::time::sleep_until(until.into()).await;
    let cpu_end = CpuSnapshot::take(relay_pids);
    let load_end = loadavg();

    let mut agents = Vec::with_capacity(n);
    let mut acked = Vec::new();
    let (mut rejected, mut skipped) = (0, 0);
    let mut failure = None;
    for task in tasks {
        let (agent, tally) = task.await?;
        agents.push(agent);
        match tally {
            Ok(tally) => {
                acked.extend(tally.acked);
                rejected += tally.rejected;
                skipped += tally.skipped;
            }
            Err(error) => failure = failure.or(Some(error)),
        }
    }
    let probes = poller.await??;
    if let Some(error) = failure {
        return Err(error.context(format!("{name} phase")));
    }
    let in_window = |t: Instant| t >= window_start && t < until;
    let mut ack_ms: Vec<f64> = acked
        .iter()
        .filter(|a| in_window(a.acked))
        .map(|a| a.acked.duration_since(a.sent).as_secs_f64() * 1e3)
        .collect();
    ack_ms.sort_by(f64::total_cmp);
    let reports = ack_ms.len();
    let obs_per_sec = (reports * RESOURCES_PER_REPORT) as f64 / window.as_secs_f64();
    let mut poll_ms: Vec<f64> = probes
        .iter()
        .filter(|(sent, _)| in_window(*sent))
        .filter_map(|(sent, seen)| seen.map(|s| s.duration_since(*sent).as_secs_f64() * 1e3))
        .collect();
    poll_ms.sort_by(f64::total_cmp);
    let lost = probes
        .iter()
        .filter(|(sent, seen)| in_window(*sent) && seen.is_none())
        .count();
    let (relay_cpu, pg_cpu, bench_cpu) = cpu_end.since(&cpu_start);

    let f =
        |what: &str, value: f64, unit: &str| figure(BENCH, &format!("{name} {what}"), value, unit);
    if let Pace::Every(interval) = pace {
        f(
            "offered obs/s",
            (n * RESOURCES_PER_REPORT) as f64 / interval.as_secs_f64(),
            "obs/s",
        );
    }
    f("achieved obs/s", obs_per_sec, "obs/s");
    f("reports acked in window", reports as f64, "reports");
    f("send->ack p50", quantile(&ack_ms, 0.5), "ms");
    f("send->ack p99", quantile(&ack_ms, 0.99), "ms");
    f(
        "send->ack max",
        ack_ms.last().copied().unwrap_or(f64::NAN),
        "ms",
    );
    f(
        "send->queryable p50 (poller)",
        quantile(&poll_ms, 0.5),
        "ms",
    );
    f(
        "send->queryable p99 (poller)",
        quantile(&poll_ms, 0.99),
        "ms",
    );
    f(
        "send->queryable max (poller)",
        poll_ms.last().copied().unwrap_or(f64::NAN),
        "ms",
    );
    f("poller samples", poll_ms.len() as f64, "reports");
    f("poller samples never seen", lost as f64, "reports");
    f("rejected reports", rejected as f64, "reports");
    if matches!(pace, Pace::Every(_)) {
        f("skipped ticks (report late)", skipped as f64, "ticks");
    }
    f("relay CPU", relay_cpu, "% of a core");
    f("postgres CPU", pg_cpu, "% of a core");
    f("bench CPU", bench_cpu, "% of a core");
    println!("{BENCH:<8} {label} loadavg after {load_end}");
    anyhow::ensure!(
        reports > 0,
        "{name} phase: no report was acked in the window"
    );
    anyhow::ensure!(
        lost == 0,
        "{name} phase: {lost} sampled reports never became queryable"
    );
    let ms = |v: f64| Duration::from_secs_f64(v.max(0.0) / 1e3);
    Ok((
        agents,
        PhaseFigures {
            obs_per_sec,
            ack_p99: ms(quantile(&ack_ms, 0.99)),
            poll_p99: ms(quantile(&poll_ms, 0.99)),
        },
    ))
}

/// How often the bench vacuums the ingest tables when the server's autovacuum is off.
const VACUUM_EVERY: Duration = Duration::from_secs(10);

/// Stands in for autovacuum when the server runs without it (as CI and test servers often do):
/// a production server vacuums and analyzes the ingest tables on its own, and without it every
/// report's rewrite of 50 rows leaves dead versions that later reports wade through.
async fn vacuum_stand_in(
    db: &TestDb,
) -> anyhow::Result<
    Option<(
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    )>,
> {
    let owner = db.owner_client().await?;
    let autovacuum: String = owner.query_one("SHOW autovacuum", &[]).await?.get(0);
    if autovacuum == "on" {
        return Ok(None);
    }
    println!(
        "{BENCH:<8} the server runs without autovacuum: the bench runs VACUUM ANALYZE on the ingest tables every {}s",
        VACUUM_EVERY.as_secs()
    );
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = &mut stop_rx => break,
                () = tokio::time::sleep(VACUUM_EVERY) => {}
            }
            if let Err(error) = owner
                .batch_execute("VACUUM (ANALYZE) resources, resource_aliases, agents")
                .await
            {
                eprintln!("relay bench: vacuum failed: {error}");
            }
        }
    });
    Ok(Some((stop_tx, task)))
}

async fn load_phases(
    plan: &Plan,
    db: &TestDb,
    tenant: &TenantId,
    token: &str,
    ws_url: &str,
    relay_pids: &[u32],
    quick: bool,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut agents = Vec::with_capacity(plan.agents);
    let mut pending = futures::stream::iter(0..plan.agents)
        .map(|i| SimAgent::start(i, ws_url, token))
        .buffer_unordered(64);
    while let Some(agent) = pending.next().await {
        agents.push(agent?);
    }
    drop(pending);
    agents.sort_by_key(|a| a.index);
    figure(BENCH, "agents connected", agents.len() as f64, "agents");
    figure(
        BENCH,
        "connect + hello of all agents",
        started.elapsed().as_secs_f64() * 1e3,
        "ms",
    );

    let vacuum = vacuum_stand_in(db).await?;
    let replicas = relay_pids.len();
    // Through several replicas only what they change is measured: the saturation throughput.
    let mut paced = None;
    let mut agents = agents;
    if replicas == 1 {
        let (after_nominal, nominal) = phase(
            "nominal",
            agents,
            Pace::Every(plan.nominal_interval),
            plan.nominal_warmup,
            plan.nominal_window,
            5,
            db,
            relay_pids,
        )
        .await?;
        let (after_target, target) = phase(
            "target",
            after_nominal,
            Pace::Every(plan.target_interval),
            plan.target_warmup,
            plan.target_window,
            20,
            db,
            relay_pids,
        )
        .await?;
        agents = after_target;
        paced = Some((nominal, target));
    }
    let saturation_name = if replicas == 1 {
        "saturation".to_owned()
    } else {
        format!("saturation x{replicas} relays")
    };
    let (agents, saturation) = phase(
        &saturation_name,
        agents,
        Pace::ClosedLoop,
        plan.saturation_warmup,
        plan.saturation_window,
        25,
        db,
        relay_pids,
    )
    .await?;

    if let Some((stop, task)) = vacuum {
        let _ = stop.send(());
        let _ = task.await;
    }
    // Every agent's rows are there, with its last report's observation time.
    let owner = db.owner_client().await?;
    let row = owner
        .query_one(
            "SELECT count(*), count(DISTINCT agent_id) FROM resources WHERE tenant_id = $1",
            &[&tenant.as_str()],
        )
        .await?;
    let (rows, distinct): (i64, i64) = (row.get(0), row.get(1));
    anyhow::ensure!(
        rows == (plan.agents * RESOURCES_PER_REPORT) as i64 && distinct == plan.agents as i64,
        "expected {} resources of {} agents, found {rows} of {distinct}",
        plan.agents * RESOURCES_PER_REPORT,
        plan.agents
    );
    for mut agent in agents {
        let _ = agent.socket.close(None).await;
    }

    let Some((nominal, target)) = paced else {
        println!(
            "{BENCH:<8} {replicas} relay replicas sustained {:.0} obs/s at saturation",
            saturation.obs_per_sec
        );
        return Ok(());
    };
    if quick {
        println!("{BENCH:<8} quick run: figures not comparable to targets");
    } else {
        let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
        let load = load1();
        println!(
            "{BENCH:<8} {} saturation sustained {:.0} obs/s (target >= {TARGET_OBS_PER_SEC:.0})",
            verdict(saturation.obs_per_sec >= TARGET_OBS_PER_SEC),
            saturation.obs_per_sec
        );
        println!(
            "{BENCH:<8} {} target load achieved {:.0} obs/s with p99 send->ack {:.0} ms, send->queryable {:.0} ms (target >= {TARGET_OBS_PER_SEC:.0} obs/s, p99 <= {} ms)",
            verdict(
                target.obs_per_sec >= TARGET_OBS_PER_SEC * 0.99
                    && target.ack_p99 <= TARGET_P99
                    && target.poll_p99 <= TARGET_P99
            ),
            target.obs_per_sec,
            target.ack_p99.as_secs_f64() * 1e3,
            target.poll_p99.as_secs_f64() * 1e3,
            TARGET_P99.as_millis()
        );
        println!(
            "{BENCH:<8} {} nominal p99 send->ack {:.0} ms, send->queryable {:.0} ms (target <= {} ms)",
            verdict(nominal.ack_p99 <= TARGET_P99 && nominal.poll_p99 <= TARGET_P99),
            nominal.ack_p99.as_secs_f64() * 1e3,
            nominal.poll_p99.as_secs_f64() * 1e3,
            TARGET_P99.as_millis()
        );
        println!(
            "{BENCH:<8} machine load (1 min) at the end: {load:.2} on {} cores",
            num_cpus()
        );
    }
    Ok(())
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

// ---------------------------------------------------------------------------------------------
// Agent footprint

fn write_services(dir: &Path, marker: &Path) -> anyhow::Result<()> {
    for i in 0..SUPERVISED {
        let name = format!("sleeper-{i:02}");
        let toml = format!(
            "name = \"{name}\"\ncommand = \"sleep\"\nargs = [\"100000\"]\nlabels = {{ role = \"bench\" }}\n\n\
             [health]\ntype = \"file-absent\"\npath = \"{}\"\ninterval_ms = 10000\n",
            marker.display()
        );
        std::fs::write(dir.join(format!("{name}.toml")), toml)?;
    }
    Ok(())
}

/// Resident set size of a process, in KiB.
fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn children_of(pid: u32) -> Vec<u32> {
    all_pids()
        .into_iter()
        .filter(|&p| proc_stat(p).is_some_and(|(_, ppid, _)| ppid == pid))
        .collect()
}

async fn footprint(
    plan: &Plan,
    db: &TestDb,
    token: &str,
    relay_url: &str,
    dir: &Path,
) -> anyhow::Result<()> {
    println!("{BENCH:<8} footprint: loadavg before {}", loadavg());
    let state_dir: PathBuf = dir.join("agent");
    let services_dir = state_dir.join("services.d");
    std::fs::create_dir_all(&services_dir)?;
    write_services(&services_dir, &state_dir.join("maintenance"))?;
    let host_id = "bench-footprint";
    let env = vec![
        ("PULSE_AGENT_RELAY_URL".to_owned(), relay_url.to_owned()),
        ("PULSE_AGENT_TOKEN".to_owned(), token.to_owned()),
        ("PULSE_AGENT_HOST_ID".to_owned(), host_id.to_owned()),
        (
            "PULSE_AGENT_STATE_DIR".to_owned(),
            state_dir.display().to_string(),
        ),
        (
            "PULSE_AGENT_SERVICES_DIR".to_owned(),
            services_dir.display().to_string(),
        ),
        ("PULSE_AGENT_INTERVAL_MS".to_owned(), "10000".to_owned()),
        ("PULSE_TELEMETRY__LOG_FILTER".to_owned(), "warn".to_owned()),
    ];
    let agent = ServiceProcess::spawn("pulse-agent", &env, &dir.join("agent.log"))?;
    let pid = agent.pid().context("the agent exited at once")?;
    let measured = async {
        let owner = db.owner_client().await?;
        let all_running = pulse_test_support::wait::until(
            Duration::from_secs(60),
            "50 supervised services running and reported",
            || {
                let owner = &owner;
                async move {
                    let row = owner
                        .query_one(
                            "SELECT count(*) FROM resources WHERE agent_id = $1
                             AND resource_type = 'service' AND status = 'running'",
                            &[&host_id],
                        )
                        .await
                        .ok()?;
                    (row.get::<_, i64>(0) == SUPERVISED as i64).then_some(())
                }
            },
        )
        .await;
        if let Err(error) = all_running {
            anyhow::bail!("{error}; agent log:\n{}", agent.log_tail(30));
        }
        let children = children_of(pid);
        let start = Instant::now();
        let start_ticks = proc_stat(pid).context("the agent exited")?.2;
        let mut rss = Vec::new();
        while start.elapsed() < plan.footprint_window {
            rss.push(vm_rss_kib(pid).context("the agent exited")? as f64 / 1024.0);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let ticks = proc_stat(pid).context("the agent exited")?.2 - start_ticks;
        let cpu = ticks as f64 / clock_ticks_per_sec() / start.elapsed().as_secs_f64() * 100.0;
        rss.sort_by(f64::total_cmp);
        figure(
            BENCH,
            "agent supervised services running",
            SUPERVISED as f64,
            "services",
        );
        figure(
            BENCH,
            "agent child processes",
            children.len() as f64,
            "processes",
        );
        figure(BENCH, "agent RSS p50", quantile(&rss, 0.5), "MiB");
        figure(
            BENCH,
            "agent RSS max",
            rss.last().copied().unwrap_or(f64::NAN),
            "MiB",
        );
        figure(BENCH, "agent CPU", cpu, "% of a core");
        anyhow::Ok(children)
    }
    .await;
    let stopped = agent.stop(Duration::from_secs(20)).await;
    let children = measured?;
    let status = stopped.context("stopping the agent")?;
    anyhow::ensure!(status.success(), "the agent exited with {status}");
    // The agent stops its services on SIGTERM: none of them may outlive it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let survivors: Vec<u32> = children
        .iter()
        .copied()
        .filter(|&p| proc_stat(p).is_some_and(|(comm, _, _)| comm == "sleep"))
        .collect();
    for &p in &survivors {
        pulse_test_support::service::signal(p, libc::SIGKILL);
    }
    anyhow::ensure!(
        survivors.is_empty(),
        "{} supervised processes outlived the agent (killed now)",
        survivors.len()
    );
    figure(
        BENCH,
        "supervised processes left after stop",
        0.0,
        "processes",
    );
    Ok(())
}
