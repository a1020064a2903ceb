//! Alert-triggered scoped Patrol runs end to end: the real gateway, relay, patrol-scheduler and
//! a `pulse-agent`. The policy is set with `PUT /api/settings/ai`; alerts come from the real
//! alert floor (a fault marker makes a service unhealthy: a warning; a killed agent raises
//! `agent_offline`: critical). An alert below `min_severity` starts no run; one the policy
//! admits starts exactly one scoped run on its resource with trigger `alert_fired`; with a Patrol
//! route known not to work, nothing is recorded and the status says why.

use std::time::Duration;

use pulse_domain::resource::Health;
use pulse_test_support::agent::host_id;
use pulse_test_support::agent::{AgentStack, marker_service, write_service};
use pulse_test_support::scheduler::TestScheduler;
use pulse_test_support::service::{TestGateway, signal};
use pulse_test_support::wait;
use serde_json::{Value, json};

const INTERVAL: Duration = Duration::from_millis(500);
const TICK_MS: &str = "200";
/// Time for a freshly spawned binary to start and connect, on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(10);
/// Report interval, floor tick, outbox and consumer on a loaded machine.
const ALERT_WAIT: Duration = Duration::from_secs(15);
const ROUTE: &str = "openai:gpt-4.1-mini";

async fn get(gateway: &TestGateway, token: &str, path: &str) -> anyhow::Result<(u16, Value)> {
    gateway.get_json(token, path).await
}

/// `PUT /api/settings/ai` as the admin; the document is merged over what is stored.
async fn put_settings(gateway: &TestGateway, body: Value) -> anyhow::Result<()> {
    let response = gateway
        .http
        .put(gateway.url("/api/settings/ai"))
        .bearer_auth(&gateway.admin_token)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await?;
    let status = response.status().as_u16();
    let answer: Value = response.json().await.unwrap_or(Value::Null);
    anyhow::ensure!(status == 200, "settings save answered {status} {answer}");
    Ok(())
}

/// A ready Patrol route: a tool-capable model and its key (no preflight has run, so nothing is
/// known to fail).
fn ready_route() -> Value {
    json!({
        "patrol_model": ROUTE,
        "providers": {"openai": {"api_key": "sk-e2e-alert-trigger", "base_url": "http://127.0.0.1:9/v1"}}
    })
}

/// The alert-triggered runs of `GET /api/ai/patrol/runs` (a scheduled run the cadence may
/// start once the route is ready is not this test's business).
async fn runs(gateway: &TestGateway, token: &str) -> anyhow::Result<Vec<Value>> {
    let (status, body) = get(gateway, token, "/api/ai/patrol/runs").await?;
    anyhow::ensure!(status == 200, "runs listing answered {status} {body}");
    Ok(body["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|run| run["trigger_reason"] == "alert_fired")
        .cloned()
        .collect())
}

/// The firing (or, with `state=cleared`, cleared) alert of `key`.
async fn alert(gateway: &TestGateway, token: &str, key: &str, query: &str) -> Option<Value> {
    let (status, body) = get(gateway, token, &format!("/api/alerts?{query}"))
        .await
        .ok()?;
    if status != 200 {
        return None;
    }
    body["alerts"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .cloned()
}

/// `pulse_patrol_alert_triggers_total{outcome="<outcome>"}` of the scheduler (0 before the
/// first such outcome).
async fn triggers(gateway: &TestGateway, health_url: &str, outcome: &str) -> anyhow::Result<f64> {
    let text = gateway
        .http
        .get(format!("{health_url}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    let label = format!("outcome=\"{outcome}\"");
    Ok(text
        .lines()
        .find(|l| l.starts_with("pulse_patrol_alert_triggers_total{") && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or(0.0))
}

async fn wait_for_outcome(
    gateway: &TestGateway,
    scheduler: &TestScheduler,
    outcome: &str,
    at_least: f64,
) -> anyhow::Result<()> {
    wait::until(
        ALERT_WAIT,
        &format!("alert trigger outcome {outcome}"),
        || async {
            let n = triggers(gateway, &scheduler.health_url, outcome)
                .await
                .ok()?;
            (n >= at_least).then_some(())
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; scheduler log:\n{}", scheduler.process.log_tail(30)))
}

/// Checks the one run is a scoped `alert_fired` run on `resource` framed on the alert.
fn assert_alert_run(run: &Value, resource: &str, alert: &Value) {
    assert_eq!(run["trigger_reason"], "alert_fired", "{run}");
    assert_eq!(run["type"], "scoped", "{run}");
    assert_eq!(run["status"], "queued", "{run}");
    assert_eq!(run["scope_resource_ids"], json!([resource]), "{run}");
    assert_eq!(
        run["effective_scope_resource_ids"],
        json!([resource]),
        "{run}"
    );
    assert_eq!(run["alert_identifier"], alert["key"], "{run}");
    assert_eq!(run["alert_type"], alert["type"], "{run}");
    let context = run["scope_context"].as_str().unwrap_or_default();
    for fact in [
        alert["type"].as_str().unwrap_or_default(),
        alert["level"].as_str().unwrap_or_default(),
        resource,
    ] {
        assert!(context.contains(fact), "{fact:?} missing from {context:?}");
    }
}

#[tokio::test]
async fn a_warning_starts_no_run_until_the_policy_admits_warnings() -> anyhow::Result<()> {
    let stack = AgentStack::start(&[]).await?;
    let scheduler = TestScheduler::start(
        &stack.gateway,
        &stack.dir.join("scheduler"),
        &[("PULSE_ALERTS__TICK_MS", TICK_MS)],
    )
    .await?;
    let gateway = &stack.gateway;
    // The default policy: critical alerts only.
    put_settings(gateway, ready_route()).await?;
    let agent_token = stack.create_token("agent", &["agent:report"]).await?;
    let reader = stack.create_token("reader", &["monitoring:read"]).await?;
    let host = host_id("trigger");
    let spec = stack.agent_spec(&host, &agent_token, INTERVAL)?;
    let marker = spec.state_dir.join("fault-marker");
    write_service(
        &spec.services_dir,
        "sleeper.toml",
        &marker_service("sleeper", &marker),
    )?;
    let service_id = format!("service:{host}:sleeper");
    let key = format!("{service_id}:unhealthy");
    let agent = stack.spawn_agent(&spec)?;
    wait::until(STARTUP, "the healthy service", || async {
        let service = stack.resource(&reader, &service_id).await.ok()?;
        (service.health == Health::Healthy).then_some(())
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent.log_tail(30)))?;

    // A warning under a critical floor: visible as an alert, handled, and no run.
    std::fs::write(&marker, "fault")?;
    let first = wait::until(ALERT_WAIT, "the unhealthy warning", || async {
        alert(gateway, &reader, &key, "").await
    })
    .await?;
    assert_eq!(first["level"], "warning");
    wait_for_outcome(gateway, &scheduler, "below_min_severity", 1.0).await?;
    assert!(runs(gateway, &reader).await?.is_empty());

    // The floor lowered to warning: the next firing of the alert starts one run.
    put_settings(
        gateway,
        json!({"alert_triggers": {"min_severity": "warning"}}),
    )
    .await?;
    std::fs::remove_file(&marker)?;
    wait::until(ALERT_WAIT, "the warning to clear", || async {
        alert(gateway, &reader, &key, "state=cleared").await
    })
    .await?;
    assert!(runs(gateway, &reader).await?.is_empty());
    std::fs::write(&marker, "fault")?;
    let second = wait::until(ALERT_WAIT, "the warning to fire again", || async {
        alert(gateway, &reader, &key, "")
            .await
            .filter(|a| a["id"] != first["id"])
    })
    .await?;
    let listed = wait::until(ALERT_WAIT, "the alert-triggered run", || async {
        let listed = runs(gateway, &reader).await.ok()?;
        (!listed.is_empty()).then_some(listed)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; scheduler log:\n{}", scheduler.process.log_tail(30)))?;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_alert_run(&listed[0], &service_id, &second);
    wait_for_outcome(gateway, &scheduler, "started", 1.0).await?;
    assert_eq!(runs(gateway, &reader).await?.len(), 1);

    let status = agent.stop(Duration::from_secs(10)).await?;
    assert!(status.success(), "agent exited with {status}");
    scheduler.stop().await?;
    stack.stop().await
}

#[tokio::test]
async fn a_critical_alert_starts_one_scoped_run_once_the_route_is_ready() -> anyhow::Result<()> {
    let stack = AgentStack::start(&[("PULSE_RELAY__AGENT_OFFLINE_AFTER_MS", "1500")]).await?;
    let scheduler = TestScheduler::start(
        &stack.gateway,
        &stack.dir.join("scheduler"),
        &[("PULSE_ALERTS__TICK_MS", TICK_MS)],
    )
    .await?;
    let gateway = &stack.gateway;
    let agent_token = stack.create_token("agent", &["agent:report"]).await?;
    let reader = stack.create_token("reader", &["monitoring:read"]).await?;
    let host = host_id("offline");
    let host_resource = format!("host:{host}");
    let key = format!("{host_resource}:agent_offline");
    let spec = stack.agent_spec(&host, &agent_token, INTERVAL)?;
    let agent = stack.spawn_agent(&spec)?;
    wait::until(STARTUP, "the agent's first report", || async {
        stack.resource(&reader, &host_resource).await.ok().map(drop)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent.log_tail(30)))?;

    // No Patrol route: a critical alert is refused before anything is written.
    signal(agent.pid().expect("agent pid"), libc::SIGKILL);
    let _ = agent.stop(Duration::from_secs(5)).await;
    let first = wait::until(ALERT_WAIT, "agent_offline", || async {
        alert(gateway, &reader, &key, "").await
    })
    .await?;
    assert_eq!(first["level"], "critical");
    wait_for_outcome(gateway, &scheduler, "not_ready", 1.0).await?;
    assert!(runs(gateway, &reader).await?.is_empty());
    let (status, patrol) = get(gateway, &reader, "/api/ai/patrol/status").await?;
    assert_eq!(status, 200, "{patrol}");
    // No provider at all reads `unavailable` (a broken one `blocked`); either way the cause.
    assert_eq!(
        patrol["blocked_cause"], "provider_not_configured",
        "{patrol}"
    );
    assert!(
        patrol["blocked_reason"]
            .as_str()
            .is_some_and(|r| r.contains("patrol_model")),
        "{patrol}"
    );

    // A ready route; the agent comes back (the alert clears) and goes silent again: a new
    // firing, one scoped run on the host.
    put_settings(gateway, ready_route()).await?;
    let (_, patrol) = get(gateway, &reader, "/api/ai/patrol/status").await?;
    assert!(patrol["blocked_cause"].is_null(), "{patrol}");
    let agent = stack.spawn_agent(&spec)?;
    wait::until(STARTUP + ALERT_WAIT, "agent_offline to clear", || async {
        alert(gateway, &reader, &key, "state=cleared").await
    })
    .await?;
    assert!(runs(gateway, &reader).await?.is_empty());
    signal(agent.pid().expect("agent pid"), libc::SIGKILL);
    let _ = agent.stop(Duration::from_secs(5)).await;
    let second = wait::until(ALERT_WAIT, "agent_offline again", || async {
        alert(gateway, &reader, &key, "")
            .await
            .filter(|a| a["id"] != first["id"])
    })
    .await?;
    let listed = wait::until(ALERT_WAIT, "the alert-triggered run", || async {
        let listed = runs(gateway, &reader).await.ok()?;
        (!listed.is_empty()).then_some(listed)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; scheduler log:\n{}", scheduler.process.log_tail(30)))?;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_alert_run(&listed[0], &host_resource, &second);
    wait_for_outcome(gateway, &scheduler, "started", 1.0).await?;
    assert_eq!(runs(gateway, &reader).await?.len(), 1);

    scheduler.stop().await?;
    stack.stop().await
}
