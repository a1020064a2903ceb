//! The deterministic alert floor end to end: a real `pulse-agent` supervising services, the
//! relay, the patrol-scheduler and the gateway. A fault marker makes a service unhealthy and
//! fires an alert (API and `events.alert.fired`), removing it clears the alert; a crash-looping
//! service raises `restart_loop`; a silent agent raises `agent_offline` until it reports again;
//! the forecast route on seeded metric history.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures::StreamExt;
use pulse_domain::TenantId;
use pulse_domain::resource::{
    Health, ObservedResource, Resource, ResourceId, ResourceStatus, ResourceType,
};
use pulse_store::agents::{self, AgentSession};
use pulse_store::metrics::{self, MetricSample};
use pulse_store::resources;
use pulse_test_support::agent::host_id;
use pulse_test_support::agent::{AgentStack, marker_service, of_host, write_service};
use pulse_test_support::scheduler::TestScheduler;
use pulse_test_support::service::{TestGateway, signal};
use pulse_test_support::wait;
use serde_json::Value;

const INTERVAL: Duration = Duration::from_millis(500);
const TICK_MS: &str = "200";
/// Time for a freshly spawned binary to start and connect, on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(10);
/// A supervised service that exits at once and is restarted quickly: a restart loop.
const CRASHER: &str = "name = \"crasher\"\ncommand = \"sh\"\nargs = [\"-c\", \"exit 3\"]\n\
    [restart]\npolicy = \"on-failure\"\ninitial_backoff_ms = 100\nmax_backoff_ms = 300\n";
/// Polling the API and a loaded machine add latency on top of the report interval.
const SLACK: Duration = Duration::from_millis(1500);

/// An agent stack with a fast-ticking alert floor, an agent token and a reader token.
async fn floor_stack(
    relay_env: &[(&str, &str)],
) -> anyhow::Result<(AgentStack, TestScheduler, String, String)> {
    let stack = AgentStack::start(relay_env).await?;
    let scheduler = TestScheduler::start(
        &stack.gateway,
        &stack.dir.join("scheduler"),
        &[("PULSE_ALERTS__TICK_MS", TICK_MS)],
    )
    .await?;
    let agent_token = stack.create_token("agent", &["agent:report"]).await?;
    let reader = stack.create_token("reader", &["monitoring:read"]).await?;
    Ok((stack, scheduler, agent_token, reader))
}

async fn get(gateway: &TestGateway, token: &str, path: &str) -> anyhow::Result<(u16, Value)> {
    gateway.get_json(token, path).await
}

/// The alerts of `GET /api/alerts?<query>`.
async fn alerts(gateway: &TestGateway, token: &str, query: &str) -> Option<Vec<Value>> {
    let (status, body) = get(gateway, token, &format!("/api/alerts?{query}"))
        .await
        .ok()?;
    (status == 200).then(|| body["alerts"].as_array().cloned().unwrap_or_default())
}

/// The scheduler's count of observations fed to the alert rules.
async fn evaluated(gateway: &TestGateway, health_url: &str) -> anyhow::Result<f64> {
    let text = gateway
        .http
        .get(format!("{health_url}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    let line = text
        .lines()
        .find(|l| l.starts_with("pulse_alert_observations_evaluated_total"))
        .ok_or_else(|| anyhow::anyhow!("no evaluation counter in:\n{text}"))?;
    line.rsplit(' ')
        .next()
        .and_then(|n| n.parse::<f64>().ok())
        .ok_or_else(|| anyhow::anyhow!("unreadable counter line {line:?}"))
}

fn find_key<'a>(list: &'a [Value], key: &str) -> Option<&'a Value> {
    list.iter().find(|a| a["key"] == key)
}

/// The next message on `sub` whose payload's alert key is `key`.
async fn next_event(
    sub: &mut async_nats::Subscriber,
    key: &str,
    deadline: Duration,
) -> anyhow::Result<(String, Value)> {
    let found = tokio::time::timeout(deadline, async {
        while let Some(message) = sub.next().await {
            let event: Value = serde_json::from_slice(&message.payload).unwrap_or_default();
            if event["alert"]["key"] == key {
                return Some((message.subject.to_string(), event));
            }
        }
        None
    })
    .await
    .map_err(|_| anyhow::anyhow!("no event for {key} within {deadline:?}"))?;
    found.ok_or_else(|| anyhow::anyhow!("event subscription ended"))
}

#[tokio::test]
async fn a_fault_marker_fires_an_unhealthy_alert_and_removing_it_clears_it() -> anyhow::Result<()> {
    let (stack, scheduler, agent_token, reader) = floor_stack(&[]).await?;
    let host = host_id("alerts");
    let spec = stack.agent_spec(&host, &agent_token, INTERVAL)?;
    let marker = spec.state_dir.join("fault-marker");
    write_service(
        &spec.services_dir,
        "sleeper.toml",
        &marker_service("sleeper", &marker),
    )?;
    let service_id = format!("service:{host}:sleeper");
    let key = format!("{service_id}:unhealthy");

    let nats = async_nats::connect(pulse_test_support::nats::nats_url()).await?;
    let subjects = pulse_bus::Subjects::try_new(Some(&stack.gateway.prefix))?;
    let tenant = TenantId::default_tenant();
    let mut fired_events = nats
        .subscribe(subjects.event(&tenant, "alert", "fired"))
        .await?;
    let mut cleared_events = nats
        .subscribe(subjects.event(&tenant, "alert", "cleared"))
        .await?;

    let agent = stack.spawn_agent(&spec)?;
    let gateway = &stack.gateway;
    // The agent's first report: its host appears.
    wait::until(STARTUP, "the agent's first report", || async {
        stack
            .resource(&reader, &format!("host:{host}"))
            .await
            .ok()
            .map(drop)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent.log_tail(30)))?;
    let first_report = Instant::now();
    // Within two report intervals the service is visible, running and healthy.
    wait::until(INTERVAL * 2 + SLACK, "the healthy service", || async {
        let service = stack.resource(&reader, &service_id).await.ok()?;
        (service.status == ResourceStatus::Running && service.health == Health::Healthy)
            .then_some(())
    })
    .await?;
    assert!(first_report.elapsed() <= INTERVAL * 2 + SLACK);
    // Healthy: once the scheduler has evaluated observations made after that, nothing fired.
    let seen = evaluated(gateway, &scheduler.health_url).await?;
    wait::until(
        INTERVAL * 4 + SLACK,
        "the floor to evaluate newer reports",
        || async {
            let now = evaluated(gateway, &scheduler.health_url).await.ok()?;
            (now >= seen + 2.0).then_some(())
        },
    )
    .await?;
    let by_name = alerts(gateway, &reader, "resource_id=sleeper&state=all")
        .await
        .expect("alerts listed");
    assert!(by_name.is_empty(), "{by_name:?}");

    // The fault marker: unhealthy, and an `unhealthy` alert fires.
    std::fs::write(&marker, "fault")?;
    let fired_at = Instant::now();
    let alert = wait::until(
        INTERVAL * 2 + SLACK * 2,
        "the unhealthy alert to fire",
        || async {
            let list = alerts(gateway, &reader, "").await?;
            find_key(&list, &key).cloned()
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; scheduler log:\n{}", scheduler.process.log_tail(30)))?;
    let latency = fired_at.elapsed();
    assert_eq!(alert["type"], "unhealthy");
    assert_eq!(alert["state"], "firing");
    assert_eq!(alert["level"], "warning");
    assert_eq!(alert["resource_id"], service_id.as_str());
    assert!(alert["cleared_at"].is_null());
    let resource = stack.resource(&reader, &service_id).await?;
    assert_eq!(resource.health, Health::Unhealthy);
    let (subject, event) = next_event(&mut fired_events, &key, Duration::from_secs(10)).await?;
    assert!(subject.ends_with(".events.alert.fired"), "{subject}");
    assert_eq!(event["transition"], "fired");
    assert_eq!(event["alert"]["type"], "unhealthy");
    // Filtering by the service's name finds it; by another resource, not.
    let by_name = alerts(gateway, &reader, "resource_id=sleeper")
        .await
        .expect("alerts listed");
    assert_eq!(by_name.len(), 1);
    let other = alerts(gateway, &reader, &format!("resource_id=host:{host}"))
        .await
        .expect("alerts listed");
    assert!(find_key(&other, &key).is_none());

    // Marker removed: healthy again, the alert clears (same alert id).
    std::fs::remove_file(&marker)?;
    let cleared = wait::until(
        INTERVAL * 2 + SLACK * 2,
        "the unhealthy alert to clear",
        || async {
            let firing = alerts(gateway, &reader, "state=firing").await?;
            if find_key(&firing, &key).is_some() {
                return None;
            }
            let cleared = alerts(gateway, &reader, "state=cleared").await?;
            find_key(&cleared, &key).cloned()
        },
    )
    .await?;
    assert_eq!(cleared["id"], alert["id"]);
    assert_eq!(cleared["state"], "cleared");
    assert!(cleared["cleared_at"].is_string());
    let (subject, event) = next_event(&mut cleared_events, &key, Duration::from_secs(10)).await?;
    assert!(subject.ends_with(".events.alert.cleared"), "{subject}");
    assert_eq!(event["transition"], "cleared");
    let all = alerts(gateway, &reader, "state=all&resource_id=sleeper")
        .await
        .expect("alerts listed");
    assert_eq!(all.len(), 1, "one alert, fired then cleared: {all:?}");

    // Bad input and missing scope.
    let (status, body) = get(gateway, &reader, "/api/alerts?state=open").await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_parameter"))
    );
    let (status, body) = get(gateway, &reader, "/api/alerts?limit=0").await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_parameter"))
    );
    let (status, body) = get(gateway, &reader, "/api/alerts?colour=red").await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_parameter"))
    );
    let (status, body) = get(gateway, &reader, "/api/alerts?resource_id=no-such-thing").await?;
    assert_eq!((status, body["error"].as_str()), (404, Some("not_found")));
    let (status, body) = get(gateway, &agent_token, "/api/alerts").await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (403, Some("missing_scope"))
    );
    let (status, _) = get(gateway, "pulse_nonsense", "/api/alerts").await?;
    assert_eq!(status, 401);

    // The scheduler counts what it did.
    let metrics = gateway
        .http
        .get(format!("{}/metrics", scheduler.health_url))
        .send()
        .await?
        .text()
        .await?;
    let fired_line = metrics
        .lines()
        .find(|l| l.starts_with("pulse_alert_transitions_total") && l.contains("event=\"fired\""))
        .unwrap_or_default();
    assert!(
        fired_line
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse::<f64>().ok())
            .is_some_and(|n| n >= 1.0),
        "no fired transition counted in:\n{metrics}"
    );

    println!("unhealthy alert fired {latency:?} after the marker was written");
    let status = agent.stop(Duration::from_secs(10)).await?;
    assert!(status.success(), "agent exited with {status}");
    scheduler.stop().await?;
    stack.stop().await
}

#[tokio::test]
async fn a_crash_looping_service_raises_restart_loop() -> anyhow::Result<()> {
    let (stack, scheduler, agent_token, reader) = floor_stack(&[]).await?;
    let host = host_id("crash");
    let spec = stack.agent_spec(&host, &agent_token, INTERVAL)?;
    write_service(&spec.services_dir, "crasher.toml", CRASHER)?;
    let service_id = format!("service:{host}:crasher");
    let key = format!("{service_id}:restart_loop");
    let agent = stack.spawn_agent(&spec)?;
    let alert = wait::until(
        STARTUP + Duration::from_secs(10),
        "restart_loop",
        || async {
            let list = alerts(&stack.gateway, &reader, "").await?;
            find_key(&list, &key).cloned()
        },
    )
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "{e}; agent log:\n{}\nscheduler log:\n{}",
            agent.log_tail(20),
            scheduler.process.log_tail(20)
        )
    })?;
    assert_eq!(alert["type"], "restart_loop");
    assert_eq!(alert["level"], "critical");
    assert!(alert["value"].as_f64().unwrap_or(0.0) >= 3.0, "{alert}");
    assert_eq!(alert["threshold"], 3.0);
    let resource = stack.resource(&reader, &service_id).await?;
    assert!(resource.restart_count.unwrap_or(0) >= 3, "{resource:?}");
    assert_eq!(resource.details["last_exit_code"], 3);

    let status = agent.stop(Duration::from_secs(10)).await?;
    assert!(status.success(), "agent exited with {status}");
    scheduler.stop().await?;
    stack.stop().await
}

#[tokio::test]
async fn a_silent_agent_raises_agent_offline_until_it_reports_again() -> anyhow::Result<()> {
    let (stack, scheduler, agent_token, reader) =
        floor_stack(&[("PULSE_RELAY__AGENT_OFFLINE_AFTER_MS", "1500")]).await?;
    let host = host_id("silent");
    let spec = stack.agent_spec(&host, &agent_token, INTERVAL)?;
    let key = format!("host:{host}:agent_offline");
    let agent = stack.spawn_agent(&spec)?;
    wait::until(STARTUP, "the agent's first report", || async {
        stack
            .resource(&reader, &format!("host:{host}"))
            .await
            .ok()
            .map(drop)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent.log_tail(30)))?;

    signal(agent.pid().expect("agent pid"), libc::SIGKILL);
    let _ = agent.stop(Duration::from_secs(5)).await;
    let alert = wait::until(Duration::from_secs(10), "agent_offline", || async {
        let list = alerts(&stack.gateway, &reader, "").await?;
        find_key(&list, &key).cloned()
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; scheduler log:\n{}", scheduler.process.log_tail(30)))?;
    assert_eq!(alert["type"], "agent_offline");
    assert_eq!(alert["level"], "critical");
    assert_eq!(alert["resource_id"], format!("host:{host}"));

    let agent = stack.spawn_agent(&spec)?;
    let cleared = wait::until(STARTUP, "agent_offline to clear", || async {
        let list = alerts(&stack.gateway, &reader, "state=cleared").await?;
        find_key(&list, &key).cloned()
    })
    .await?;
    assert_eq!(cleared["id"], alert["id"]);
    let firing = alerts(&stack.gateway, &reader, "")
        .await
        .expect("alerts listed");
    assert!(find_key(&firing, &key).is_none(), "{firing:?}");

    let status = agent.stop(Duration::from_secs(10)).await?;
    assert!(status.success(), "agent exited with {status}");
    scheduler.stop().await?;
    stack.stop().await
}

/// Forgetting a decommissioned host's agent (`DELETE /api/agents/{id}`): its resources leave
/// the inventory, their firing alert clears, and the agent never goes offline, shown by a
/// second agent killed after it that does. Refusals: a bad id, an unknown agent, a token
/// without `admin`; forgetting twice removes nothing.
#[tokio::test]
async fn a_forgotten_agent_leaves_the_inventory_its_alerts_clear_and_it_never_goes_offline()
-> anyhow::Result<()> {
    let (stack, scheduler, agent_token, reader) =
        floor_stack(&[("PULSE_RELAY__AGENT_OFFLINE_AFTER_MS", "1500")]).await?;
    let gone = host_id("gone");
    let spec = stack.agent_spec(&gone, &agent_token, INTERVAL)?;
    write_service(&spec.services_dir, "crasher.toml", CRASHER)?;
    let loop_key = format!("service:{gone}:crasher:restart_loop");
    let agent = stack.spawn_agent(&spec)?;
    let fired = wait::until(
        STARTUP + Duration::from_secs(10),
        "restart_loop",
        || async {
            let list = alerts(&stack.gateway, &reader, "").await?;
            find_key(&list, &loop_key).cloned()
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent.log_tail(20)))?;
    // The host is decommissioned: its agent stops, then Pulse forgets it.
    let status = agent.stop(Duration::from_secs(10)).await?;
    assert!(status.success(), "agent exited with {status}");

    let path = format!("/api/agents/{gone}");
    let (status, body) = stack
        .gateway
        .request_json(reqwest::Method::DELETE, &reader, &path, None)
        .await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (403, Some("missing_scope")),
        "{body}"
    );
    let (status, body) = stack
        .gateway
        .admin_json(reqwest::Method::DELETE, &path, None)
        .await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["agent_id"], gone.as_str());
    assert_eq!(body["previous_status"], "online");
    assert!(
        body["resources_removed"].as_u64().unwrap_or(0) >= 2,
        "host and crasher: {body}"
    );
    let left: Vec<Resource> = stack.resources(&reader).await?;
    assert!(of_host(&left, &gone).is_empty(), "{left:?}");
    let cleared = wait::until(Duration::from_secs(10), "restart_loop to clear", || async {
        let list = alerts(&stack.gateway, &reader, "state=cleared").await?;
        find_key(&list, &loop_key).cloned()
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; scheduler log:\n{}", scheduler.process.log_tail(30)))?;
    assert_eq!(cleared["id"], fired["id"]);

    let (status, body) = stack
        .gateway
        .admin_json(reqwest::Method::DELETE, &path, None)
        .await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["previous_status"], "forgotten");
    assert_eq!(body["resources_removed"], 0);
    for (bad, code, status) in [
        ("/api/agents/no-such-agent", "not_found", 404),
        ("/api/agents/a%20b", "invalid_parameter", 400),
    ] {
        let (got, body) = stack
            .gateway
            .admin_json(reqwest::Method::DELETE, bad, None)
            .await?;
        assert_eq!(
            (got, body["error"].as_str()),
            (status, Some(code)),
            "{bad}: {body}"
        );
    }

    // A second agent, killed after the first was forgotten, goes offline; the forgotten one,
    // silent for longer, does not.
    let witness = host_id("witness");
    let witness_spec = stack.agent_spec(&witness, &agent_token, INTERVAL)?;
    let agent = stack.spawn_agent(&witness_spec)?;
    wait::until(STARTUP, "the witness's first report", || async {
        stack
            .resource(&reader, &format!("host:{witness}"))
            .await
            .ok()
            .map(drop)
    })
    .await?;
    signal(agent.pid().expect("agent pid"), libc::SIGKILL);
    let _ = agent.stop(Duration::from_secs(5)).await;
    let witness_key = format!("host:{witness}:agent_offline");
    wait::until(
        Duration::from_secs(10),
        "the witness's agent_offline",
        || async {
            let list = alerts(&stack.gateway, &reader, "").await?;
            find_key(&list, &witness_key).cloned()
        },
    )
    .await?;
    let all = alerts(&stack.gateway, &reader, "state=all")
        .await
        .expect("alerts listed");
    let gone_offline = format!("host:{gone}:agent_offline");
    assert!(find_key(&all, &gone_offline).is_none(), "{all:?}");

    scheduler.stop().await?;
    stack.stop().await
}

fn observed(kind: ResourceType, source: &str) -> ObservedResource {
    ObservedResource {
        resource_type: kind,
        source_id: source.to_owned(),
        name: source.to_owned(),
        aliases: Vec::new(),
        status: ResourceStatus::Running,
        health: Health::Healthy,
        restart_count: None,
        labels: BTreeMap::new(),
        details: Value::Null,
        metrics: BTreeMap::new(),
        parent: None,
    }
}

#[tokio::test]
async fn the_forecast_route_projects_seeded_history_or_says_there_is_none() -> anyhow::Result<()> {
    let gateway = TestGateway::start().await?;
    let reader = gateway.create_token("reader", &["monitoring:read"]).await?;

    // A storage volume filling by 1.5 points a day for three days, sampled every 6 hours, and
    // a host with no memory history.
    let store = gateway.db.store();
    let tenant = TenantId::default_tenant();
    let tx = store.tenant_tx(&tenant).await?;
    agents::connect(
        &tx,
        &AgentSession {
            id: "seeded".to_owned(),
            hostname: "seeded".to_owned(),
            agent_version: "test".to_owned(),
            report_interval_ms: 1000,
            token_id: None,
        },
    )
    .await?;
    let now = Utc::now();
    resources::apply_report(
        &tx,
        "seeded",
        now,
        &[
            observed(ResourceType::Host, "seeded"),
            observed(ResourceType::Storage, "/data"),
            observed(ResourceType::Service, "web"),
        ],
    )
    .await?;
    let storage = ResourceId::storage("seeded", "/data");
    let last = now - chrono::Duration::minutes(1);
    let samples: Vec<MetricSample> = (0..=12_i32)
        .map(|i| MetricSample {
            resource_id: storage.clone(),
            metric: "used_percent".to_owned(),
            at: last - chrono::Duration::hours(i64::from(6 * (12 - i))),
            value: 60.0 + 1.5 * (f64::from(i) * 6.0 / 24.0),
        })
        .collect();
    metrics::insert(&tx, &samples).await?;
    tx.commit().await?;

    let (status, body) = get(
        &gateway,
        &reader,
        "/api/resources/storage:seeded:%2Fdata/forecast",
    )
    .await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["outcome"], "forecast");
    assert_eq!(body["resource_id"], "storage:seeded:/data");
    assert_eq!(body["metric"], "used_percent");
    assert_eq!(body["sample_count"], 13);
    let current = 60.0 + 1.5 * 3.0;
    let expected_days = (100.0 - current) / 1.5;
    let days = body["days_to_full"].as_f64().expect("days_to_full");
    assert!(
        (days - expected_days).abs() <= expected_days * 0.01,
        "days_to_full {days}, expected {expected_days}"
    );
    assert!((body["daily_change"].as_f64().unwrap_or(0.0) - 1.5).abs() < 0.015);
    assert!((body["current_pct"].as_f64().unwrap_or(0.0) - current).abs() < 1e-6);

    // By name, with an explicit metric and a window too short to hold the history's span.
    let (status, body) = get(
        &gateway,
        &reader,
        "/api/resources/%2Fdata/forecast?metric=used_percent&window_hours=1",
    )
    .await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["outcome"], "no_history");
    assert_eq!(body["window_hours"], 1);

    let (status, body) = get(&gateway, &reader, "/api/resources/host:seeded/forecast").await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["outcome"], "no_history");
    assert_eq!(body["metric"], "memory_percent");
    assert_eq!(body["sample_count"], 0);
    assert_eq!(body["reason"], "too_few_samples");

    // Unknown resource: the same typed 404 as GET /api/resources/{id}; bad values: 400.
    let (status, body) = get(&gateway, &reader, "/api/resources/no-such-thing/forecast").await?;
    assert_eq!((status, body["error"].as_str()), (404, Some("not_found")));
    let (status, plain) = get(&gateway, &reader, "/api/resources/no-such-thing").await?;
    assert_eq!((status, plain["error"].as_str()), (404, Some("not_found")));
    for query in [
        "host:seeded/forecast?window_hours=0",
        "host:seeded/forecast?window_hours=soon",
        "host:seeded/forecast?metric=a%20b",
        "host:seeded/forecast?bogus=1",
        "service:seeded:web/forecast",
    ] {
        let (status, body) = get(&gateway, &reader, &format!("/api/resources/{query}")).await?;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("invalid_parameter")),
            "{query}: {body}"
        );
    }
    let (status, body) = get(
        &gateway,
        "pulse_nonsense",
        "/api/resources/host:seeded/forecast",
    )
    .await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("unauthorized"))
    );
    gateway.stop().await
}
