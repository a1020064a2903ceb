//! The operator surfaces under a large tenant: with 10,000 findings in the tenant (1,000 with
//! `--quick`), the server time (`Server-Timing: app;dur=`) of `GET /api/ai/patrol/findings`
//! (target p95 <= 25 ms) and of the Findings page (target p95 <= 60 ms), through the real
//! gateway binary, signed in as the web UI is. The client's round trip is printed beside it.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use chrono::Utc;
use pulse_domain::TenantId;
use pulse_domain::finding::{Category, ReportedFinding, Severity};
use pulse_store::findings;
use pulse_test_support::service::TestGateway;
use pulse_test_support::web::WebClient;

use crate::{BenchArgs, figure, quantile};

const BENCH: &str = "ui";

fn reported(i: usize) -> ReportedFinding {
    // Only warning and critical can be reported.
    let severity = if i % 4 == 0 {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let category = match i % 3 {
        0 => Category::Reliability,
        1 => Category::Capacity,
        _ => Category::Performance,
    };
    ReportedFinding {
        key: format!("bench-issue-{}", i % 7),
        severity,
        category,
        resource_id: format!("host:bench-{i:05}"),
        resource_name: format!("bench-{i:05}"),
        resource_type: "host".to_owned(),
        title: format!("Bench finding {i} on bench-{i:05}"),
        description: "A finding seeded for the operator-surface benchmark.".to_owned(),
        recommendation: "Nothing: it is seeded.".to_owned(),
        evidence: format!("bench_metric={i}"),
        impact: String::new(),
    }
}

async fn seed(gw: &TestGateway, count: usize) -> anyhow::Result<()> {
    let tenant = TenantId::default_tenant();
    let now = Utc::now();
    for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
        let tx = gw.db.store().tenant_tx(&tenant).await?;
        for i in chunk {
            findings::report(
                &tx,
                &reported(*i),
                None,
                now - chrono::Duration::seconds(*i as i64),
            )
            .await
            .with_context(|| format!("seeding finding {i}"))?;
        }
        tx.commit().await?;
    }
    Ok(())
}

/// Server and round-trip milliseconds of `samples` sequential requests.
async fn measure<F, Fut>(samples: usize, mut send: F) -> anyhow::Result<(Vec<f64>, Vec<f64>)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<(reqwest::StatusCode, Option<f64>)>>,
{
    let mut server = Vec::with_capacity(samples);
    let mut round_trip = Vec::with_capacity(samples);
    for _ in 0..samples {
        let started = Instant::now();
        let (status, timing) = send().await?;
        round_trip.push(started.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(status.is_success(), "request answered {status}");
        server.push(timing.context("no Server-Timing header")?);
    }
    server.sort_by(f64::total_cmp);
    round_trip.sort_by(f64::total_cmp);
    Ok((server, round_trip))
}

fn server_timing(headers: &reqwest::header::HeaderMap) -> Option<f64> {
    headers
        .get("server-timing")?
        .to_str()
        .ok()?
        .split(';')
        .find_map(|part| part.trim().strip_prefix("dur="))?
        .parse()
        .ok()
}

fn report(name: &str, target_ms: f64, server: &[f64], round_trip: &[f64]) {
    figure(
        BENCH,
        &format!("{name} server p50"),
        quantile(server, 0.5),
        "ms",
    );
    figure(
        BENCH,
        &format!("{name} server p95"),
        quantile(server, 0.95),
        "ms",
    );
    figure(
        BENCH,
        &format!("{name} server p99"),
        quantile(server, 0.99),
        "ms",
    );
    figure(
        BENCH,
        &format!("{name} round trip p95"),
        quantile(round_trip, 0.95),
        "ms",
    );
    let p95 = quantile(server, 0.95);
    println!(
        "{BENCH:<8} {name}: server p95 {p95:.2} ms, target <= {target_ms} ms: {}",
        if p95 <= target_ms { "met" } else { "NOT MET" }
    );
}

pub async fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let count = if args.quick { 1_000 } else { 10_000 };
    let samples = if args.quick { 40 } else { 300 };
    let gw = TestGateway::start().await?;
    let result = async {
        let started = Instant::now();
        seed(&gw, count).await?;
        figure(BENCH, "findings seeded", count as f64, "findings");
        figure(BENCH, "seeding time", started.elapsed().as_secs_f64(), "s");
        let password = std::fs::read_to_string(gw.state_dir.join("admin-password"))?
            .trim()
            .to_owned();
        let mut web = WebClient::new(&gw.url)?;
        web.sign_in("default", "admin", &password).await?;
        let cookie = format!("pulse_session={}", web.session().context("session")?);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()?;

        let api = || {
            let request = http
                .get(gw.url("/api/ai/patrol/findings"))
                .bearer_auth(&gw.admin_token);
            async move {
                let response = request.send().await?;
                let status = response.status();
                let timing = server_timing(response.headers());
                let body: serde_json::Value = response.json().await?;
                anyhow::ensure!(
                    body["count"] == 200,
                    "expected a full page: {}",
                    body["count"]
                );
                Ok((status, timing))
            }
        };
        // Warm the pool and the plan cache.
        measure(10, api).await?;
        let (server, round_trip) = measure(samples, api).await?;
        report("GET /api/ai/patrol/findings", 25.0, &server, &round_trip);

        let page = || {
            let request = http
                .get(gw.url("/findings"))
                .header(reqwest::header::COOKIE, &cookie);
            async move {
                let response = request.send().await?;
                let status = response.status();
                let timing = server_timing(response.headers());
                let body = response.text().await?;
                anyhow::ensure!(
                    body.contains("200 finding(s)"),
                    "the page did not list 200 findings"
                );
                Ok((status, timing))
            }
        };
        measure(10, page).await?;
        let (server, round_trip) = measure(samples, page).await?;
        report("Findings page", 60.0, &server, &round_trip);

        let filtered = || {
            let request = http
                .get(gw.url("/findings?severity=critical&category=reliability"))
                .header(reqwest::header::COOKIE, &cookie);
            async move {
                let response = request.send().await?;
                let status = response.status();
                let timing = server_timing(response.headers());
                let _ = response.text().await?;
                Ok((status, timing))
            }
        };
        let (server, round_trip) = measure(samples, filtered).await?;
        report("Findings page, filtered", 60.0, &server, &round_trip);
        Ok(())
    }
    .await;
    gw.stop().await?;
    result
}
