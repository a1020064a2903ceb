//! Secrets in a supervised service's log never reach the model. A real `pulse-agent` supervises
//! `web`, whose log holds credentials of several shapes (env assignments, an AWS secret key, a
//! database URL, a bearer header, GitHub and Stripe tokens, a structured JSON line, a
//! command-line flag). Patrol runs on a scripted simulator turn that reads `web`'s logs with
//! `pulse_read` through the real agent-relay; then:
//!
//! - no request the provider simulator recorded carries any of the secret values, verbatim or
//!   in any decoded JSON string, while the log lines themselves did reach it, redacted;
//! - the `model.export` audit rows count what was removed, for every kind injected, and hold no
//!   secret value;
//! - the run's stored tool-call record holds none either.

use std::collections::BTreeMap;
use std::time::Duration;

use pulse_domain::TenantId;
use pulse_domain::patrol::run::RunStatus;
use pulse_store::audit;
use pulse_test_support::agent::{AgentStack, marker_service_running, write_service};
use pulse_test_support::json_text::decoded_strings;
use pulse_test_support::patrol::{full_run, openai_route, save_settings};
use pulse_test_support::provider_sim::{ProviderSim, Script, Turn, preflight_reply};
use pulse_test_support::runner::TestModelRunner;
use pulse_test_support::scheduler::TestScheduler;
use pulse_test_support::wait::until;
use serde_json::{Value, json};

const KEY: &str = "sk-redaction-e2e-5b2d9f1c";
const INTERVAL: Duration = Duration::from_millis(500);
/// Time for binaries to start, connect and report on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(45);
const RUN_DEADLINE: Duration = Duration::from_secs(60);

const DB_PASSWORD: &str = "Pg-E2e-S3cret-71";
const AWS_SECRET: &str = "Jq7vR2xL9mK4pT8wZ1bN6cF3dH5gY0sA2eU4iO7q";
const URL_PASSWORD: &str = "Url-E2e-Pa55-42";
const BEARER: &str = "Tk9xQ2mL7pR4vW8yZ1cB5nD3fG6hJ0kS";
const GITHUB_TOKEN: &str = "ghp_E2eCanary0123456789abcdefghijklmnopq";
const STRIPE_KEY: &str = "sk_live_51E2eCanary0123456789abcdef";
const JSON_PASSWORD: &str = "Json-E2e-Pw-88";
const FLAG_PASSWORD: &str = "Flag-E2e-Pw-19";

const SECRETS: &[&str] = &[
    DB_PASSWORD,
    AWS_SECRET,
    URL_PASSWORD,
    BEARER,
    GITHUB_TOKEN,
    STRIPE_KEY,
    JSON_PASSWORD,
    FLAG_PASSWORD,
];

/// The redaction kinds the log lines inject.
const KINDS: &[&str] = &[
    "secret_assignment",
    "aws_secret_key",
    "url_credentials",
    "bearer_token",
    "github_token",
    "stripe_key",
    "command_line_secret",
];

/// What `web` prints at start, then it sleeps. The last line tells the log is complete.
fn log_lines() -> Vec<String> {
    vec![
        "starting shop-api 1.4.2".to_owned(),
        format!("env: DB_PASSWORD={DB_PASSWORD} DB_HOST=10.0.3.7"),
        format!("aws_secret_access_key={AWS_SECRET}"),
        format!("connecting to postgres://shop:{URL_PASSWORD}@10.0.3.7:5432/shop"),
        format!("outbound request headers: Authorization: Bearer {BEARER}"),
        format!("git remote token {GITHUB_TOKEN} stripe key {STRIPE_KEY}"),
        json!({"level": "error", "msg": "config rejected", "config": {"password": JSON_PASSWORD}})
            .to_string(),
        format!("exec: migrate --db-host 10.0.3.7 --password {FLAG_PASSWORD} up"),
        "shop-api ready on :8080".to_owned(),
    ]
}

fn leaked(value: &Value) -> Vec<&'static str> {
    let mut all = vec![value.to_string()];
    all.extend(decoded_strings(value));
    SECRETS
        .iter()
        .copied()
        .filter(|secret| all.iter().any(|s| s.contains(secret)))
        .collect()
}

#[tokio::test]
async fn secrets_in_a_service_log_never_reach_the_model_and_are_counted() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let stack = AgentStack::start(&[]).await?;
    let scheduler = TestScheduler::start(&stack.gateway, &stack.dir.join("scheduler"), &[]).await?;
    let token = stack.create_token("agent", &["agent:report"]).await?;
    let host = pulse_test_support::agent::host_id("redact");
    let spec = stack.agent_spec(&host, &token, INTERVAL)?;
    let web = format!("service:{host}:web");

    let lines = log_lines();
    let printed = spec.state_dir.join("web-output.txt");
    std::fs::write(&printed, lines.join("\n") + "\n")?;
    let command = format!(
        "command = \"sh\"\nargs = [\"-c\", \"cat '{}'; exec sleep 3600\"]\n",
        printed.display()
    );
    write_service(
        &spec.services_dir,
        "web.toml",
        &marker_service_running("web", &command, &spec.state_dir.join("web.fault")),
    )?;

    // The model reads web's logs, then ends the run.
    let sim = ProviderSim::start(
        Script::turns([
            Turn::tool(
                "pulse_read",
                json!({"action": "logs", "resource_id": web, "lines": 50}),
            ),
            Turn::text("Read the logs of web: it started and is ready. Nothing to report."),
        ])
        .with_tool_offer_reply(preflight_reply()),
    )
    .await?;
    save_settings(
        &stack.gateway,
        &openai_route("gpt-4o-mini", KEY, &sim.openai_base_url()),
    )
    .await?;
    let agent = stack.spawn_agent(&spec)?;
    let runner = TestModelRunner::start(&stack.gateway, &stack.dir.join("runner"), &[]).await?;
    let admin = stack.gateway.admin_token.clone();
    stack
        .wait_health(&admin, &web, "healthy", STARTUP)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent.log_tail(30)))?;
    let log_file = spec.state_dir.join("logs").join("web.log");
    let last = lines.last().cloned().unwrap_or_default();
    until(STARTUP, "web's log to hold every line", || {
        let log_file = log_file.clone();
        let last = last.clone();
        async move {
            std::fs::read_to_string(&log_file)
                .ok()
                .filter(|log| log.contains(&last))
        }
    })
    .await?;

    let run = full_run(&stack.gateway, RUN_DEADLINE)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(60)))?;
    assert_eq!(
        run.status,
        RunStatus::Healthy,
        "{run:?}\n{}",
        runner.process.log_tail(60)
    );
    let read = run
        .tool_calls
        .iter()
        .find(|c| c.tool_name == "pulse_read")
        .expect("the log read is recorded");
    assert!(read.success, "{read:?}");
    let record = serde_json::to_value(&run)?;
    assert_eq!(
        leaked(&record),
        Vec::<&str>::new(),
        "in the run record: {record}"
    );

    // Nothing the provider received carries a secret; the log did reach it, redacted.
    let requests = sim.requests();
    let bodies: Vec<&Value> = requests
        .iter()
        .filter(|r| r.model == "gpt-4o-mini")
        .map(|r| &r.body)
        .collect();
    assert!(bodies.len() >= 2, "{} run requests", bodies.len());
    for body in &bodies {
        assert_eq!(
            leaked(body),
            Vec::<&str>::new(),
            "reached the provider: {body}"
        );
    }
    let after_read = bodies.last().map(|b| b.to_string()).unwrap_or_default();
    for kept in ["shop-api ready on :8080", "DB_HOST=10.0.3.7", "[REDACTED:"] {
        assert!(after_read.contains(kept), "{kept:?} missing: {after_read}");
    }

    // The export audit counts what was removed, per kind, and holds no value.
    let store = stack.gateway.db.store();
    let tx = store.tenant_tx(&TenantId::default_tenant()).await?;
    let records = audit::list(&tx, 0, 1_000).await?;
    drop(tx);
    let exports: Vec<&Value> = records
        .iter()
        .filter(|r| r.kind == "model.export")
        .map(|r| &r.payload)
        .collect();
    assert!(exports.len() >= 2, "{} export rows", exports.len());
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for payload in &exports {
        for (kind, n) in payload["redactions"].as_object().into_iter().flatten() {
            *counts.entry(kind.clone()).or_default() += n.as_u64().unwrap_or(0);
        }
        assert_eq!(
            leaked(payload),
            Vec::<&str>::new(),
            "in the audit: {payload}"
        );
    }
    for kind in KINDS {
        assert!(
            counts.get(*kind).is_some_and(|n| *n > 0),
            "no {kind} counted: {counts:?}"
        );
    }

    runner.stop().await?;
    scheduler.stop().await?;
    let _ = agent.stop(Duration::from_secs(10)).await;
    drop(sim);
    stack.stop().await
}
