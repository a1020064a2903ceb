//! Bus figures: request/reply latency, JetStream publish-with-ack and core publish throughput.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use pulse_bus::{Bus, ErrorReply, Message, Request, StreamSettings, Subjects};
use pulse_domain::TenantId;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use crate::{figure, quantile};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Ping {
    seq: u64,
    pad: String,
}

impl Message for Ping {
    const TYPE: &'static str = "bench.ping";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pong {
    seq: u64,
}

impl Message for Pong {
    const TYPE: &'static str = "bench.pong";
}

impl Request for Ping {
    type Reply = Pong;
}

struct Sizes {
    round_trips: usize,
    js_publishes: usize,
    core_publishes: usize,
}

impl Sizes {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                round_trips: 300,
                js_publishes: 300,
                core_publishes: 10_000,
            }
        } else {
            Self {
                round_trips: 10_000,
                js_publishes: 10_000,
                core_publishes: 300_000,
            }
        }
    }
}

fn ping(seq: u64) -> Ping {
    // About the size of a small job or event.
    Ping {
        seq,
        pad: "x".repeat(200),
    }
}

pub async fn run(args: &crate::BenchArgs) -> anyhow::Result<()> {
    let sizes = Sizes::new(args.quick);
    let prefix = format!("bench{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let subjects = Subjects::try_new(Some(&prefix))?;
    let tenant = TenantId::new("bench")?;
    let responder_client = pulse_bus::async_nats::connect(args.nats_url.as_str())
        .await
        .with_context(|| format!("connecting to {}", args.nats_url))?;
    let client = pulse_bus::async_nats::connect(args.nats_url.as_str()).await?;
    let serving = Bus::new(responder_client, subjects.clone());
    let bus = Bus::new(client, subjects.clone());

    let result = measure(&bus, &serving, &tenant, &sizes).await;
    if let Err(err) = pulse_bus::streams::delete_streams(bus.jetstream(), &subjects).await {
        eprintln!("bus bench: stream clean-up failed: {err}");
    }
    result
}

async fn measure(bus: &Bus, serving: &Bus, tenant: &TenantId, sizes: &Sizes) -> anyhow::Result<()> {
    // Request/reply over two connections, sequential round trips.
    let responder = serving
        .serve::<Ping, pulse_bus::ErrorReply, _, _>(
            &serving.subjects().any_tenant("bench.ping"),
            Some("bench"),
            |_ctx, ping: Ping| async move { Ok::<_, ErrorReply>(Pong { seq: ping.seq }) },
        )
        .await?;
    let subject = bus.subjects().tenant(tenant, "bench.ping");
    let timeout = Duration::from_secs(2);
    for seq in 0..50 {
        bus.request(tenant, &subject, &ping(seq), timeout).await?;
    }
    let mut latencies = Vec::with_capacity(sizes.round_trips);
    for seq in 0..sizes.round_trips as u64 {
        let started = Instant::now();
        let pong = bus.request(tenant, &subject, &ping(seq), timeout).await?;
        latencies.push(started.elapsed());
        anyhow::ensure!(pong.seq == seq, "reply out of order");
    }
    // Throughput: the same round trips with 64 requests in flight.
    let concurrent = Arc::new(Semaphore::new(64));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for seq in 0..sizes.round_trips as u64 {
        let permit = concurrent.clone().acquire_owned().await?;
        let bus = bus.clone();
        let tenant = tenant.clone();
        let subject = subject.clone();
        tasks.spawn(async move {
            let _permit = permit;
            bus.request(&tenant, &subject, &ping(seq), timeout).await
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let rps = sizes.round_trips as f64 / started.elapsed().as_secs_f64();
    responder.stop().await;
    let mut ms: Vec<f64> = latencies.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    figure("bus", "request/reply round trips", ms.len() as f64, "n");
    figure("bus", "request/reply p50", quantile(&ms, 0.50), "ms");
    figure("bus", "request/reply p99", quantile(&ms, 0.99), "ms");
    figure("bus", "request/reply msg/s (64 in flight)", rps, "req/s");
    figure(
        "bus",
        "request/reply max",
        ms.last().copied().unwrap_or(f64::NAN),
        "ms",
    );

    // JetStream publish with ack: one at a time, then 64 in flight.
    bus.ensure_streams_with(&StreamSettings::small()).await?;
    let started = Instant::now();
    for seq in 0..sizes.js_publishes as u64 {
        bus.publish_job(tenant, "bench", &ping(seq), None).await?;
    }
    let elapsed = started.elapsed();
    figure(
        "bus",
        "jetstream publish+ack msg/s (sequential)",
        sizes.js_publishes as f64 / elapsed.as_secs_f64(),
        "msg/s",
    );

    let window = Arc::new(Semaphore::new(64));
    let mut tasks = tokio::task::JoinSet::new();
    let started = Instant::now();
    for seq in 0..sizes.js_publishes as u64 {
        let permit = window.clone().acquire_owned().await?;
        let bus = bus.clone();
        let tenant = tenant.clone();
        tasks.spawn(async move {
            let result = bus.publish_job(&tenant, "bench", &ping(seq), None).await;
            drop(permit);
            result
        });
        while let Some(done) = tasks.try_join_next() {
            done??;
        }
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let elapsed = started.elapsed();
    figure(
        "bus",
        "jetstream publish+ack msg/s (64 in flight)",
        sizes.js_publishes as f64 / elapsed.as_secs_f64(),
        "msg/s",
    );

    // Core publish, fire and forget, until the server has them all (flush).
    let subject = bus.subjects().tenant(tenant, "bench.fanout");
    let started = Instant::now();
    for seq in 0..sizes.core_publishes as u64 {
        bus.publish(tenant, &subject, &ping(seq)).await?;
    }
    bus.client().flush().await?;
    let elapsed = started.elapsed();
    figure(
        "bus",
        "core publish msg/s",
        sizes.core_publishes as f64 / elapsed.as_secs_f64(),
        "msg/s",
    );
    Ok(())
}
