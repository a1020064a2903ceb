//! Manual Patrol runs end to end: the real gateway, relay, patrol-scheduler and a `pulse-agent`
//! supervising one service. A run request is accepted with a `run_id` that the status shows at
//! once, recorded `queued`, and its `jobs.watch` job is on JetStream; a canonical id and a
//! source id of one resource give the same effective scope; unknown ids, missing scopes and
//! malformed bodies are refused with stable codes.

use std::time::Duration;

use pulse_domain::TenantId;
use pulse_test_support::agent::{AgentStack, sleeper_service, write_service};
use pulse_test_support::patrol::select_keyless_model;
use pulse_test_support::scheduler::TestScheduler;
use pulse_test_support::service::TestGateway;
use pulse_test_support::wait;
use serde_json::{Value, json};

const INTERVAL: Duration = Duration::from_millis(500);
/// Time for a freshly spawned binary to start and connect, on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(10);

async fn get(gateway: &TestGateway, token: &str, path: &str) -> anyhow::Result<(u16, Value)> {
    gateway.get_json(token, path).await
}

/// `POST /api/ai/patrol/run` with `body` sent as is (`None`: no body).
async fn post_run(
    gateway: &TestGateway,
    token: &str,
    body: Option<String>,
) -> anyhow::Result<(u16, Value)> {
    let mut request = gateway
        .http
        .post(gateway.url("/api/ai/patrol/run"))
        .bearer_auth(token);
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    Ok((status, response.json().await.unwrap_or(Value::Null)))
}

async fn accepted_run_id(
    gateway: &TestGateway,
    token: &str,
    body: Option<String>,
) -> anyhow::Result<String> {
    let (status, answer) = post_run(gateway, token, body).await?;
    anyhow::ensure!(status == 202, "run request answered {status} {answer}");
    answer["run_id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("no run_id in {answer}"))
}

#[tokio::test]
async fn manual_runs_are_accepted_recorded_and_queued_as_jobs() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let stack = AgentStack::start(&[]).await?;
    let scheduler = TestScheduler::start(&stack.gateway, &stack.dir.join("scheduler"), &[]).await?;
    let gateway = &stack.gateway;
    let admin = gateway.admin_token.clone();
    let agent_token = stack.create_token("agent", &["agent:report"]).await?;
    let reader = stack.create_token("reader", &["monitoring:read"]).await?;
    let admin_only = stack.create_token("admin-only", &["admin"]).await?;
    let host = pulse_test_support::agent::host_id("patrol");
    let spec = stack.agent_spec(&host, &agent_token, INTERVAL)?;
    write_service(
        &spec.services_dir,
        "sleeper.toml",
        &sleeper_service("sleeper"),
    )?;
    let agent = stack.spawn_agent(&spec)?;
    let service_id = format!("service:{host}:sleeper");
    let service = wait::until(STARTUP, "the supervised service", || async {
        stack.resource(&reader, &service_id).await.ok()
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent.log_tail(30)))?;
    let source_id = service.source_id.clone();
    assert_ne!(source_id, service_id, "the two references differ");

    // A full run: accepted with a run id that the status names at once.
    select_keyless_model(gateway, &admin).await?;
    let full_id = accepted_run_id(gateway, &admin, None).await?;
    let (status, patrol) = get(gateway, &reader, "/api/ai/patrol/status").await?;
    assert_eq!(status, 200, "{patrol}");
    assert_eq!(patrol["current_run_id"], full_id.as_str());
    assert_eq!(patrol["current_run_type"], "full");
    assert_eq!(patrol["running"], true);
    // The next scheduled run is on the tenant's cadence grid, within one interval from now.
    let interval_ms = patrol["interval_ms"].as_i64().expect("interval_ms");
    let next = chrono::DateTime::parse_from_rfc3339(
        patrol["next_patrol_at"].as_str().expect("next_patrol_at"),
    )?;
    let ahead = (next.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_milliseconds();
    assert!(
        ahead > -5_000 && ahead <= interval_ms * 14 / 10,
        "next_patrol_at {ahead} ms ahead with interval {interval_ms}: {patrol}"
    );
    // Readiness is assessed: the route is set and needs no key; no preflight ran yet.
    assert_eq!(patrol["blocked_cause"], Value::Null, "{patrol}");
    assert!(
        patrol["readiness_checks"].as_array().is_some_and(|checks| {
            checks.len() == 7
                && checks.iter().all(|c| {
                    let expected = if c["id"] == "tool_calling" {
                        "not_assessed"
                    } else {
                        "pass"
                    };
                    c["status"] == expected
                })
        }),
        "{patrol}"
    );

    let (status, run) = get(gateway, &reader, &format!("/api/ai/patrol/runs/{full_id}")).await?;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["status"], "queued");
    assert_eq!(run["type"], "full");
    assert_eq!(run["trigger_reason"], "manual");

    // Its job is on the JOBS stream.
    let nats = async_nats::connect(pulse_test_support::nats::nats_url()).await?;
    let js = async_nats::jetstream::new(nats);
    let subjects = pulse_bus::Subjects::try_new(Some(&gateway.prefix))?;
    let tenant = TenantId::default_tenant();
    let job_subject = subjects.job(&tenant, "watch");
    let stream = js.get_stream(subjects.jobs_stream()).await?;
    let job: Value = wait::until(Duration::from_secs(5), "the watch job", || async {
        let message = stream
            .get_last_raw_message_by_subject(&job_subject)
            .await
            .ok()?;
        let job: Value = serde_json::from_slice(&message.payload).ok()?;
        (job["run_id"] == full_id.as_str()).then_some(job)
    })
    .await?;
    assert_eq!(job["type"], "full");

    // The canonical id and the source id of one resource give the same effective scope.
    let by_canonical = accepted_run_id(
        gateway,
        &admin,
        Some(json!({"resource_ids": [service_id]}).to_string()),
    )
    .await?;
    let by_source = accepted_run_id(
        gateway,
        &admin,
        Some(
            json!({"resource_ids": [source_id], "context": "checking after a restart"}).to_string(),
        ),
    )
    .await?;
    let (_, canonical_run) = get(
        gateway,
        &reader,
        &format!("/api/ai/patrol/runs/{by_canonical}"),
    )
    .await?;
    let (_, source_run) = get(
        gateway,
        &reader,
        &format!("/api/ai/patrol/runs/{by_source}"),
    )
    .await?;
    assert_eq!(canonical_run["type"], "scoped");
    assert_eq!(
        canonical_run["effective_scope_resource_ids"],
        json!([service_id])
    );
    assert_eq!(
        source_run["effective_scope_resource_ids"],
        canonical_run["effective_scope_resource_ids"]
    );
    assert_eq!(source_run["scope_resource_ids"], json!([source_id]));
    assert_eq!(source_run["scope_context"], "checking after a restart");

    // The newest run is current; the listing is newest first and limited.
    let (_, patrol) = get(gateway, &reader, "/api/ai/patrol/status").await?;
    assert_eq!(patrol["current_run_id"], by_source.as_str());
    assert_eq!(patrol["queued_scoped_runs"], 2);
    let (status, listed) = get(gateway, &reader, "/api/ai/patrol/runs").await?;
    assert_eq!(status, 200);
    let ids: Vec<&str> = listed["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        vec![by_source.as_str(), by_canonical.as_str(), full_id.as_str()]
    );
    let (_, limited) = get(gateway, &reader, "/api/ai/patrol/runs?limit=1").await?;
    assert_eq!(limited["runs"].as_array().map(Vec::len), Some(1));
    let (status, bad) = get(gateway, &reader, "/api/ai/patrol/runs?limit=0").await?;
    assert_eq!(
        (status, bad["error"].as_str()),
        (400, Some("invalid_parameter"))
    );

    // Unknown ids: a synchronous 422 naming them, and no run recorded.
    let (status, refused) = post_run(
        gateway,
        &admin,
        Some(json!({"resource_ids": [service_id, "no-such-thing", "gone-too"]}).to_string()),
    )
    .await?;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"], "unprocessable_scope");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("no-such-thing") && message.contains("gone-too"),
        "{message}"
    );
    assert!(!message.contains(&service_id), "{message}");
    let (_, listed) = get(gateway, &reader, "/api/ai/patrol/runs").await?;
    assert_eq!(listed["runs"].as_array().map(Vec::len), Some(3));

    // Scopes and bodies.
    let (status, body) = post_run(gateway, &admin_only, None).await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (403, Some("missing_scope"))
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("ai:execute")
    );
    let (status, body) = post_run(gateway, &reader, None).await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (403, Some("missing_scope"))
    );
    let (status, body) = post_run(gateway, &admin, Some("{\"resource_ids\": [".to_owned())).await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_json"))
    );
    let (status, body) = post_run(
        gateway,
        &admin,
        Some(json!({"resource_ids": ["x"], "command": "reboot"}).to_string()),
    )
    .await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (422, Some("invalid_request"))
    );

    let response = gateway
        .http
        .post(gateway.url("/api/ai/patrol/run"))
        .bearer_auth(&admin)
        .header("content-type", "text/plain")
        .body(json!({"resource_ids": [service_id]}).to_string())
        .send()
        .await?;
    assert_eq!(response.status().as_u16(), 415);
    let body: Value = response.json().await?;
    assert_eq!(body["error"], "unsupported_media_type");

    // Run ids: malformed is 400, unknown is 404.
    let (status, body) = get(gateway, &reader, "/api/ai/patrol/runs/not-a-uuid").await?;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_parameter"))
    );
    let unknown = uuid::Uuid::new_v4();
    let (status, body) = get(gateway, &reader, &format!("/api/ai/patrol/runs/{unknown}")).await?;
    assert_eq!((status, body["error"].as_str()), (404, Some("not_found")));

    let status = agent.stop(Duration::from_secs(10)).await?;
    assert!(status.success(), "agent exited with {status}");
    scheduler.stop().await?;
    stack.stop().await
}

/// Without a patrol-scheduler no run can be accepted: a 503 with a stable code that says what
/// to start, and nothing recorded.
#[tokio::test]
async fn without_a_scheduler_a_run_request_is_refused_with_what_to_do() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gateway = TestGateway::start().await?;
    let (status, body) = post_run(&gateway, &gateway.admin_token, None).await?;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "patrol_scheduler_unavailable");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("pulse-patrol-scheduler")
    );
    let (status, listed) = get(&gateway, &gateway.admin_token, "/api/ai/patrol/runs").await?;
    assert_eq!(status, 200);
    assert_eq!(listed["runs"], json!([]));
    let (_, patrol) = get(&gateway, &gateway.admin_token, "/api/ai/patrol/status").await?;
    assert_eq!(patrol["current_run_id"], Value::Null);
    assert_eq!(patrol["running"], false);
    gateway.stop().await
}
