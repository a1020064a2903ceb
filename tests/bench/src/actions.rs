//! actions-bench: approve -> verified latency of a governed restart through the real services:
//! the gateway (decision route), the action-broker (execution under a lease), the agent-relay,
//! an agent with `--enable-commands` restarting a supervised service, and the verifier judging
//! the restart on fresh observations (`verify.postcondition`).
//!
//! "Instant agent, zero verification delay": the service is a `sleep` that restarts at once,
//! its health check runs at the agent's shortest interval, and the verifier polls every
//! [`VERIFY_POLL`]. The figure is what an operator waits between pressing approve and seeing
//! `verified`: from sending `POST /api/actions/{id}/decision` until `GET /api/actions/{id}`
//! shows the verification (polled every [`OBSERVE_EVERY`]).

use std::time::{Duration, Instant};

use pulse_domain::resource::Health;
use pulse_domain::{Scope, TenantId};
use pulse_test_support::action_api::{call, get, post, user_token};
use pulse_test_support::action_broker::TestActionBroker;
use pulse_test_support::agent::{AgentStack, marker_service, write_service};
use pulse_test_support::verifier::TestVerifier;
use pulse_test_support::wait;
use reqwest::StatusCode;
use serde_json::json;

use crate::{BenchArgs, figure, quantile};

const BENCH: &str = "actions";
/// The verifier's pause between fresh observations.
const VERIFY_POLL: Duration = Duration::from_millis(10);
/// How often the bench reads the action while it waits for the verification.
const OBSERVE_EVERY: Duration = Duration::from_millis(5);
const STARTUP: Duration = Duration::from_secs(60);
/// The target p95.
const TARGET_P95_MS: f64 = 300.0;

pub async fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let samples = if args.quick { 5 } else { 60 };
    // The verifier observes the agent every 10 ms, 100 requests a second: above the relay's
    // default per-agent budget of 10 (which would answer `rate_limited` and delay the command).
    let stack = AgentStack::start(&[("PULSE_RELAY__MAX_REQUESTS_PER_SEC", "200")]).await?;
    let result = measure(&stack, samples).await;
    stack.stop().await?;
    result
}

async fn measure(stack: &AgentStack, samples: usize) -> anyhow::Result<()> {
    let gw = &stack.gateway;
    let exec_token = stack
        .create_token("bench-agent", &["agent:report", "agent:exec"])
        .await?;
    let host = pulse_test_support::agent::host_id("bench-act");
    let mut spec = stack.agent_spec(&host, &exec_token, Duration::from_secs(1))?;
    spec.enable_commands = true;
    let marker = spec.state_dir.join("fault");
    // The marker service's definition with the shortest health interval the agent accepts.
    let web = marker_service("web", &marker).replace("interval_ms = 200", "interval_ms = 100");
    anyhow::ensure!(
        web.contains("interval_ms = 100"),
        "unexpected service definition: {web}"
    );
    write_service(&spec.services_dir, "web.toml", &web)?;
    let agent = stack.spawn_agent(&spec)?;
    let verifier = TestVerifier::start_with_postcondition_timing(
        gw,
        &stack.dir.join("verifier"),
        Duration::from_secs(10),
        VERIFY_POLL,
        &[],
    )
    .await?;
    let broker = TestActionBroker::start(gw, &stack.dir.join("broker"), &[]).await?;
    let (status, body) = call(
        gw,
        reqwest::Method::PUT,
        "/api/settings/ai",
        &gw.admin_token,
        Some(json!({"autonomy_level": "approval"})),
    )
    .await?;
    anyhow::ensure!(status == StatusCode::OK, "settings: {status} {body}");
    let tenant = TenantId::default_tenant();
    let store = gw.db.store();
    let planner = user_token(
        store,
        &tenant,
        Some("bench-planner"),
        &[Scope::ActionsPlan, Scope::MonitoringRead],
    )
    .await?;
    let approver = user_token(
        store,
        &tenant,
        Some("bench-approver"),
        &[Scope::ActionsApprove],
    )
    .await?;
    let resource_id = wait::until(STARTUP, "the web service resource", || async {
        let list = stack.resources(&planner).await.ok()?;
        list.iter()
            .find(|r| r.agent_id == host && r.name == "web" && r.health == Health::Healthy)
            .map(|r| r.id.to_string())
    })
    .await?;

    let mut latencies = Vec::with_capacity(samples);
    // approved -> executing, executing -> the receipt's time (the agent's restart, on the
    // agent's clock), receipt -> completed recorded, completed -> verification recorded (the
    // verifier's fresh observations), from the audit.
    let mut phases: [Vec<f64>; 4] = Default::default();
    for i in 0..samples {
        let (status, planned) = post(
            gw,
            "/api/actions/plan",
            &planner,
            Some(json!({
                "resource_id": resource_id,
                "capability": "service.restart",
                "params": {"target": "web"},
                "reason": "bench: restart web",
                "severity": "critical",
            })),
        )
        .await?;
        anyhow::ensure!(
            status == StatusCode::CREATED && planned["state"] == "pending_approval",
            "plan {i}: {status} {planned}"
        );
        let id = planned["action_id"].as_str().unwrap_or_default().to_owned();
        let path = format!("/api/actions/{id}");
        let start = Instant::now();
        let (status, decided) = post(
            gw,
            &format!("{path}/decision"),
            &approver,
            Some(json!({"outcome": "approved", "reason": "bench"})),
        )
        .await?;
        anyhow::ensure!(status == StatusCode::OK, "approve {i}: {status} {decided}");
        let view = loop {
            let (_, view) = get(gw, &path, &planner).await?;
            if !view["verification"].is_null()
                || matches!(view["state"].as_str(), Some("failed" | "expired"))
            {
                break view;
            }
            anyhow::ensure!(
                start.elapsed() < Duration::from_secs(60),
                "action {i} not verified within 60 s: {view}"
            );
            tokio::time::sleep(OBSERVE_EVERY).await;
        };
        let elapsed = start.elapsed();
        anyhow::ensure!(
            view["verification"] == "verified",
            "action {i} ended {} / {}: {view}",
            view["state"],
            view["verification"]
        );
        latencies.push(elapsed.as_secs_f64() * 1000.0);
        let (_, rows) = get(gw, &format!("{path}/audit"), &planner).await?;
        let at = |pick: &dyn Fn(&serde_json::Value) -> bool| {
            rows.as_array()
                .and_then(|rows| rows.iter().find(|r| pick(r)))
                .and_then(|r| r["occurred_at"].as_str())
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        };
        let receipt = view["result"]["at"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
        let marks = [
            at(&|r| r["payload"]["to"] == "approved"),
            at(&|r| r["payload"]["to"] == "executing"),
            receipt,
            at(&|r| r["payload"]["to"] == "completed"),
            at(&|r| r["kind"] == "action.verification"),
        ];
        for (phase, pair) in phases.iter_mut().zip(marks.windows(2)) {
            if let [Some(from), Some(to)] = pair {
                phase.push((*to - *from).num_microseconds().unwrap_or(0) as f64 / 1000.0);
            }
        }
    }
    latencies.sort_by(f64::total_cmp);
    let p50 = quantile(&latencies, 0.50);
    let p95 = quantile(&latencies, 0.95);
    figure(
        BENCH,
        "approve -> verified samples",
        samples as f64,
        "actions",
    );
    figure(BENCH, "approve -> verified p50", p50, "ms");
    figure(BENCH, "approve -> verified p95", p95, "ms");
    figure(
        BENCH,
        "approve -> verified max",
        quantile(&latencies, 1.0),
        "ms",
    );
    let names = [
        "approved -> executing",
        "executing -> receipt (agent restart)",
        "receipt -> completed",
        "completed -> verified",
    ];
    for (name, phase) in names.iter().zip(phases.iter_mut()) {
        phase.sort_by(f64::total_cmp);
        figure(BENCH, &format!("  {name} p50"), quantile(phase, 0.50), "ms");
        figure(BENCH, &format!("  {name} p95"), quantile(phase, 0.95), "ms");
    }
    println!(
        "{BENCH:<8} verdict: p95 {p95:.1} ms against a target of {TARGET_P95_MS:.0} ms: {}",
        if p95 <= TARGET_P95_MS { "PASS" } else { "MISS" }
    );
    drop(agent);
    broker.stop().await?;
    verifier.stop().await?;
    Ok(())
}
