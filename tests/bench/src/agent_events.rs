//! events-bench: `GET /api/agent/events` fan-out and resume on one real gateway binary.
//!
//! - Fan-out: [`SUBSCRIBERS`] streams of one tenant are open (the bench raises
//!   `gateway.max_streams_per_tenant` for it); a finding is recorded through the store's finding
//!   owner, [`ROUNDS`] times. The figure is the time from the commit to each subscriber reading
//!   the `finding.created` frame: it includes the outbox relay's pick-up (it polls every 500 ms
//!   when no writer in its process wakes it), JetStream and the gateway's one feed per tenant.
//!   Target: p99 under 1 s, and every subscriber gets every event.
//! - Resume: every subscriber disconnects, [`MISSED`] findings are recorded, every subscriber
//!   reconnects with the last id it read (`Last-Event-ID`) and must get exactly the missed
//!   events, in order, then one more live event and nothing else: none lost, none duplicated.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use pulse_domain::TenantId;
use pulse_domain::finding::{Category, ReportedFinding, Severity};
use pulse_store::{Store, findings};
use pulse_test_support::service::TestGateway;
use pulse_test_support::sse::{self, SseReader};
use tokio::sync::{Barrier, mpsc};

use crate::{BenchArgs, figure, quantile};

const BENCH: &str = "events";
/// Concurrent subscribers of the full run.
const SUBSCRIBERS: usize = 1_000;
/// Concurrent subscribers of the quick run.
const QUICK_SUBSCRIBERS: usize = 100;
/// Findings recorded while every subscriber listens.
const ROUNDS: usize = 5;
/// Findings recorded while every subscriber is away.
const MISSED: usize = 20;
/// How long any one frame may take before the bench calls it lost.
const FRAME_DEADLINE: Duration = Duration::from_secs(30);
/// How long a resumed stream must stay silent after the last expected event.
const QUIET: Duration = Duration::from_secs(2);
const TARGET_P99_MS: f64 = 1_000.0;

pub async fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let subscribers = if args.quick {
        QUICK_SUBSCRIBERS
    } else {
        SUBSCRIBERS
    };
    let limit = (subscribers + 16).to_string();
    let gw = TestGateway::start_with(&[("PULSE_GATEWAY__MAX_STREAMS_PER_TENANT", &limit)]).await?;
    let result = measure(&gw, subscribers).await;
    gw.stop().await?;
    result
}

async fn seed(store: &Store, tenant: &TenantId, n: usize) -> anyhow::Result<String> {
    let resource = format!("service:bench:{n}-{}", uuid::Uuid::now_v7().simple());
    let reported = ReportedFinding {
        key: "service-unhealthy".to_owned(),
        severity: Severity::Warning,
        category: Category::Reliability,
        resource_id: resource.clone(),
        resource_name: resource,
        resource_type: "service".to_owned(),
        title: format!("bench finding {n}"),
        description: "bench".to_owned(),
        recommendation: "none".to_owned(),
        evidence: "bench".to_owned(),
        impact: String::new(),
    };
    let tx = store.tenant_tx(tenant).await?;
    let outcome = findings::report(&tx, &reported, None, Utc::now()).await?;
    tx.commit().await?;
    Ok(outcome.finding.finding.id.as_hex())
}

/// What one subscriber reports: its receive time per finding id, and the last id it read.
struct Received {
    at: Vec<(String, Instant)>,
    last_id: String,
}

async fn measure(gw: &TestGateway, subscribers: usize) -> anyhow::Result<()> {
    let token = gw
        .create_token("bench-events", &["monitoring:read"])
        .await?;
    let tenant = TenantId::default_tenant();
    let store = gw.db.store();
    let http = sse::client()?;

    // Fan-out.
    let connected = Arc::new(Barrier::new(subscribers + 1));
    // Frames of `finding.created` received so far, over every subscriber.
    let delivered = Arc::new(AtomicUsize::new(0));
    let (done_tx, mut done_rx) = mpsc::channel::<anyhow::Result<Received>>(subscribers);
    let opened = Instant::now();
    for _ in 0..subscribers {
        let (http, token, connected, done_tx, delivered) = (
            http.clone(),
            token.clone(),
            connected.clone(),
            done_tx.clone(),
            delivered.clone(),
        );
        let url_gw = gw.url("");
        tokio::spawn(async move {
            let outcome = async {
                let response = tokio::time::timeout(
                    FRAME_DEADLINE,
                    http.get(format!("{url_gw}/api/agent/events"))
                        .bearer_auth(&token)
                        .send(),
                )
                .await;
                let mut reader = match response {
                    Ok(Ok(r)) if r.status() == reqwest::StatusCode::OK => SseReader::new(r),
                    Ok(Ok(r)) => {
                        connected.wait().await;
                        anyhow::bail!("stream answered {}", r.status());
                    }
                    other => {
                        connected.wait().await;
                        anyhow::bail!("stream not opened: {:?}", other.err());
                    }
                };
                let first = reader.next_frame(FRAME_DEADLINE).await;
                connected.wait().await;
                anyhow::ensure!(
                    first.as_ref().is_ok_and(|f| f.event == "stream.connected"),
                    "first frame {first:?}"
                );
                let mut received = Received {
                    at: Vec::with_capacity(ROUNDS),
                    last_id: String::new(),
                };
                while received.at.len() < ROUNDS {
                    let frame = reader.next_event(FRAME_DEADLINE).await?;
                    if frame.event == "finding.created" {
                        let id = frame.json()["finding_id"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned();
                        received.at.push((id, Instant::now()));
                        received.last_id = frame.id.clone().unwrap_or_default();
                        delivered.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(received)
            }
            .await;
            let _ = done_tx.send(outcome).await;
        });
    }
    drop(done_tx);
    connected.wait().await;
    figure(
        BENCH,
        "subscribers connected",
        subscribers as f64,
        "streams",
    );
    figure(
        BENCH,
        "time to connect all",
        opened.elapsed().as_secs_f64() * 1e3,
        "ms",
    );
    let mut committed_at = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let id = seed(store, &tenant, round).await?;
        committed_at.push((id, Instant::now()));
        // Rounds apart, so each is measured on its own: the next commit waits until every
        // subscriber has this one (or the deadline, and the shortfall shows in the counts).
        let target = subscribers * (round + 1);
        let _ = pulse_test_support::wait::until(FRAME_DEADLINE, "every subscriber's frame", || {
            let reached = delivered.load(Ordering::Relaxed) >= target;
            async move { reached.then_some(()) }
        })
        .await;
    }
    let mut latencies = Vec::with_capacity(subscribers * ROUNDS);
    let mut resume_points = Vec::with_capacity(subscribers);
    let mut failures = Vec::new();
    while let Some(outcome) = done_rx.recv().await {
        match outcome {
            Ok(received) => {
                for (id, at) in &received.at {
                    if let Some((_, sent)) = committed_at.iter().find(|(c, _)| c == id) {
                        latencies.push(at.saturating_duration_since(*sent).as_secs_f64() * 1e3);
                    }
                }
                resume_points.push(received.last_id);
            }
            Err(error) => failures.push(error.to_string()),
        }
    }
    latencies.sort_by(f64::total_cmp);
    figure(
        BENCH,
        "finding.created received",
        latencies.len() as f64,
        &format!("of {}", subscribers * ROUNDS),
    );
    figure(
        BENCH,
        "commit -> frame p50",
        quantile(&latencies, 0.50),
        "ms",
    );
    figure(
        BENCH,
        "commit -> frame p95",
        quantile(&latencies, 0.95),
        "ms",
    );
    let p99 = quantile(&latencies, 0.99);
    figure(BENCH, "commit -> frame p99", p99, "ms");
    figure(
        BENCH,
        "commit -> frame max",
        latencies.last().copied().unwrap_or(f64::NAN),
        "ms",
    );
    anyhow::ensure!(
        failures.is_empty(),
        "{} subscribers failed, e.g. {:?}",
        failures.len(),
        failures.first()
    );
    anyhow::ensure!(
        latencies.len() == subscribers * ROUNDS,
        "events lost in the fan-out"
    );
    if p99 > TARGET_P99_MS {
        println!("{BENCH:<8} WARNING p99 {p99:.1} ms is above the {TARGET_P99_MS} ms target");
    }

    // Resume: everyone is away (their streams were dropped) while MISSED findings happen.
    let mut missed = Vec::with_capacity(MISSED);
    for n in 0..MISSED {
        missed.push(seed(store, &tenant, ROUNDS + n).await?);
    }
    let started = Instant::now();
    let missed = Arc::new(missed);
    let live_barrier = Arc::new(Barrier::new(subscribers + 1));
    let (report_tx, mut report_rx) =
        mpsc::channel::<anyhow::Result<(usize, usize, String)>>(subscribers);
    for last_id in resume_points {
        let (http, token, missed, live_barrier, report_tx) = (
            http.clone(),
            token.clone(),
            missed.clone(),
            live_barrier.clone(),
            report_tx.clone(),
        );
        let url_gw = gw.url("");
        tokio::spawn(async move {
            let outcome = resume(&http, &url_gw, &token, &last_id, &missed, &live_barrier).await;
            let _ = report_tx.send(outcome).await;
        });
    }
    drop(report_tx);
    // Every subscriber has its missed events: one more, live.
    live_barrier.wait().await;
    figure(
        BENCH,
        "resume: all caught up",
        started.elapsed().as_secs_f64() * 1e3,
        "ms",
    );
    let live = seed(store, &tenant, ROUNDS + MISSED).await?;
    let (mut received, mut duplicated, mut resumed, mut failed) = (0, 0, 0, Vec::new());
    while let Some(outcome) = report_rx.recv().await {
        match outcome {
            Ok((got, dup, live_seen)) if live_seen == live => {
                resumed += 1;
                received += got;
                duplicated += dup;
            }
            Ok((_, _, other)) => failed.push(format!("an event that was not missed: {other}")),
            Err(error) => failed.push(error.to_string()),
        }
    }
    let expected = subscribers * (MISSED + 1);
    figure(
        BENCH,
        "resume: subscribers resumed",
        resumed as f64,
        "streams",
    );
    figure(BENCH, "resume: events expected", expected as f64, "events");
    figure(BENCH, "resume: events received", received as f64, "events");
    figure(
        BENCH,
        "resume: events lost",
        expected.saturating_sub(received) as f64,
        "events",
    );
    figure(
        BENCH,
        "resume: events duplicated",
        duplicated as f64,
        "events",
    );
    anyhow::ensure!(
        failed.is_empty(),
        "{} resumed subscribers failed, e.g. {:?}",
        failed.len(),
        failed.first()
    );
    anyhow::ensure!(
        received == expected && duplicated == 0,
        "resume lost or repeated events"
    );
    Ok(())
}

/// Reconnects with `last_id`, reads the missed findings (in order), waits at the barrier, then
/// reads the next one (the live finding) and checks nothing else comes: (events received, events
/// duplicated, the live finding's id).
async fn resume(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    last_id: &str,
    missed: &[String],
    live_barrier: &Barrier,
) -> anyhow::Result<(usize, usize, String)> {
    let request = http
        .get(format!("{base}/api/agent/events"))
        .bearer_auth(token)
        .header("last-event-id", last_id);
    let outcome = async {
        let response = tokio::time::timeout(FRAME_DEADLINE, request.send()).await??;
        anyhow::ensure!(
            response.status() == reqwest::StatusCode::OK,
            "{}",
            response.status()
        );
        let mut reader = SseReader::new(response);
        let first = reader.next_frame(FRAME_DEADLINE).await?;
        anyhow::ensure!(first.event == "stream.connected", "{first:?}");
        let mut seen = Vec::with_capacity(missed.len());
        let mut ids = HashSet::new();
        let mut duplicated = 0;
        while seen.len() < missed.len() {
            let frame = reader.next_event(FRAME_DEADLINE).await?;
            if frame.event != "finding.created" {
                continue;
            }
            if !ids.insert(frame.sequence()?) {
                duplicated += 1;
                continue;
            }
            seen.push(
                frame.json()["finding_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
        anyhow::ensure!(
            seen == missed,
            "missed events out of order or wrong: {seen:?}"
        );
        Ok((reader, ids, duplicated))
    }
    .await;
    live_barrier.wait().await;
    let (mut reader, mut ids, mut duplicated) = outcome?;
    let mut received = missed.len();
    let deadline = Instant::now() + FRAME_DEADLINE;
    // The live event, then silence.
    let live = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let frame = reader.next_event(left).await?;
        if frame.event != "finding.created" {
            continue;
        }
        if !ids.insert(frame.sequence()?) {
            duplicated += 1;
            continue;
        }
        received += 1;
        break frame.json()["finding_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
    };
    match reader.next_event(QUIET).await {
        Ok(frame) if frame.event == "finding.created" => duplicated += 1,
        Ok(_) => {}
        Err(error) if error.to_string().starts_with("no event within") => {}
        Err(error) => return Err(error),
    }
    Ok((received, duplicated, live))
}
