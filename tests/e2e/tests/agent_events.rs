//! `GET /api/agent/events` end to end: the real gateway binary (and, for actions, the
//! action-broker, agent-relay and an agent), a real HTTP client reading the SSE body as it
//! arrives.
//!
//! - The first frame is `stream.connected`, its `resume_point` the id to reconnect with.
//! - A finding the store's one owner records arrives as `finding.created`; acknowledging it
//!   through the API as `finding.updated`; resolving it as `finding.resolved`; a plan waiting for
//!   approval as `approval.pending`; the executed action as `action.completed`.
//! - A client that reconnects with `Last-Event-ID` (or `?last_event_id=`) gets exactly the
//!   events it missed, in order, then the live ones with none repeated; a resume point from
//!   before the gateway's feed started is read from JetStream; an id beyond the stream starts
//!   with a `gap` frame.
//! - Another tenant's events never arrive; an idle stream gets `heartbeat` frames; no token is
//!   401, a token without `monitoring:read` 403 `missing_scope`, a malformed id 400
//!   `invalid_last_event_id`; shutdown ends every stream.

use std::time::Duration;

use chrono::Utc;
use pulse_api::actions::DecisionOutcome;
use pulse_domain::action::{self, ActionState};
use pulse_domain::ai_settings::AutonomyLevel;
use pulse_domain::finding::{Category, ReportedFinding, Severity};
use pulse_domain::{Scope, TenantId};
use pulse_store::{Store, findings, tenants};
use pulse_test_support::action_api::{
    action_in_state, decision, plan_pending, restart_plan, set_autonomy_level, spawn_counter_agent,
    user_token,
};
use pulse_test_support::action_broker::TestActionBroker;
use pulse_test_support::agent::{AgentStack, host_id};
use pulse_test_support::service::TestGateway;
use pulse_test_support::sse::{self, Frame, SseReader};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Time for a change to go through the outbox and JetStream on a loaded machine.
const EVENT_DEADLINE: Duration = Duration::from_secs(20);
/// How long a stream must stay silent to show nothing more is coming.
const QUIET: Duration = Duration::from_secs(3);
const PATH: &str = "/api/agent/events";
/// Time for a freshly spawned binary to start and connect, on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(30);

fn reported(resource: &str, key: &str) -> ReportedFinding {
    ReportedFinding {
        key: key.to_owned(),
        severity: Severity::Warning,
        category: Category::Reliability,
        resource_id: resource.to_owned(),
        resource_name: resource.to_owned(),
        resource_type: "service".to_owned(),
        title: format!("{key} on {resource}"),
        description: format!("{key} observed on {resource}"),
        recommendation: "look at the service".to_owned(),
        evidence: "health=unhealthy".to_owned(),
        impact: String::new(),
    }
}

/// Records a finding as Patrol would, through the store's finding owner; returns its id.
async fn seed(
    store: &Store,
    tenant: &TenantId,
    resource: &str,
    key: &str,
) -> anyhow::Result<String> {
    let tx = store.tenant_tx(tenant).await?;
    let outcome = findings::report(&tx, &reported(resource, key), None, Utc::now()).await?;
    tx.commit().await?;
    Ok(outcome.finding.finding.id.as_hex())
}

/// `GET /api/agent/events` with an optional `Last-Event-ID` header and query string.
async fn open(
    http: &reqwest::Client,
    gw: &TestGateway,
    token: Option<&str>,
    last_event_id: Option<&str>,
    query: &str,
) -> anyhow::Result<reqwest::Response> {
    let mut request = http
        .get(gw.url(&format!("{PATH}{query}")))
        .header("accept", "text/event-stream");
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    Ok(tokio::time::timeout(Duration::from_secs(20), request.send()).await??)
}

/// An open stream, past its `stream.connected` frame (returned).
async fn connect(
    http: &reqwest::Client,
    gw: &TestGateway,
    token: &str,
    last_event_id: Option<&str>,
    query: &str,
) -> anyhow::Result<(SseReader, Frame)> {
    let response = open(http, gw, Some(token), last_event_id, query).await?;
    anyhow::ensure!(
        response.status() == StatusCode::OK,
        "stream answered {}: {}",
        response.status(),
        response.text().await.unwrap_or_default()
    );
    let mut reader = SseReader::new(response);
    let first = reader.next_frame(EVENT_DEADLINE).await?;
    anyhow::ensure!(first.event == "stream.connected", "first frame {first:?}");
    anyhow::ensure!(
        first.json()["resume_point"].as_str() == first.id.as_deref(),
        "{first:?}"
    );
    Ok((reader, first))
}

/// The next event (heartbeats skipped), which must be `kind` about `field == value`.
async fn expect(
    reader: &mut SseReader,
    kind: &str,
    field: &str,
    value: &str,
) -> anyhow::Result<Frame> {
    let frame = reader.next_event(EVENT_DEADLINE).await?;
    anyhow::ensure!(
        frame.event == kind && frame.json()[field] == value,
        "expected {kind} with {field}={value}, got {frame:?}"
    );
    frame.sequence()?;
    Ok(frame)
}

/// Asserts the stream sends no event for [`QUIET`].
async fn quiet(reader: &mut SseReader) -> anyhow::Result<()> {
    match reader.next_event(QUIET).await {
        Ok(frame) => anyhow::bail!("unexpected event {frame:?}"),
        Err(error) if error.to_string().starts_with("no event within") => Ok(()),
        Err(error) => Err(error),
    }
}

async fn act(gw: &TestGateway, token: &str, route: &str, body: Value) -> anyhow::Result<()> {
    let (status, answer) = gw
        .request_json(
            reqwest::Method::POST,
            token,
            &format!("/api/ai/patrol/{route}"),
            Some(body),
        )
        .await?;
    anyhow::ensure!(status == 200, "{route}: {status} {answer}");
    Ok(())
}

/// Waits until every finding event in the outbox was published to JetStream.
async fn published(gw: &TestGateway) -> anyhow::Result<()> {
    let client = gw.db.owner_client().await?;
    pulse_test_support::wait::until(EVENT_DEADLINE, "finding events published", || {
        let client = &client;
        async move {
            let row = client
                .query_one(
                    "SELECT count(*) FILTER (WHERE published_at IS NULL), count(*) FROM outbox
                     WHERE message_type = 'pulse.finding.changed'",
                    &[],
                )
                .await
                .ok()?;
            let (unpublished, all): (i64, i64) = (row.get(0), row.get(1));
            (unpublished == 0 && all > 0).then_some(())
        }
    })
    .await
}

fn error_code(body: &str) -> String {
    serde_json::from_str::<Value>(body).unwrap_or_default()["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn finding_events_arrive_live_and_resume_exactly_once_per_tenant() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let http = sse::client()?;
    let store = gw.db.store();
    let acme = TenantId::default_tenant();
    let reader_token = gw.create_token("watcher", &["monitoring:read"]).await?;
    let ops = gw.create_token("ops", &["ai:execute"]).await?;
    let chat = gw.create_token("chatter", &["ai:chat"]).await?;
    let globex = TenantId::new("globex")?;
    tenants::create(store, &globex, "Globex").await?;
    let globex_token = user_token(store, &globex, None, &[Scope::MonitoringRead]).await?;

    // Refusals, each with its stable code.
    let response = open(&http, &gw, None, None, "").await?;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let response = open(&http, &gw, Some(&chat), None, "").await?;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(error_code(&response.text().await?), "missing_scope");
    let response = open(&http, &gw, Some(&reader_token), Some("abc"), "").await?;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&response.text().await?), "invalid_last_event_id");

    // A finding recorded and published before any stream was open: a resume from before it is
    // read from JetStream, since the gateway's feed only starts with the first stream.
    let early = seed(store, &acme, "service:h1:early", "service-unhealthy").await?;
    published(&gw).await?;
    let (mut watch, connected) = connect(&http, &gw, &reader_token, Some("0"), "").await?;
    assert_eq!(connected.id.as_deref(), Some("0"));
    expect(&mut watch, "finding.created", "finding_id", &early).await?;
    drop(watch);

    // Live: both tenants connected; each sees its own.
    let (mut mine, _) = connect(&http, &gw, &reader_token, None, "").await?;
    let (mut theirs, _) = connect(&http, &gw, &globex_token, None, "").await?;
    let web = seed(store, &acme, "service:h1:web", "service-unhealthy").await?;
    let other = seed(store, &globex, "service:g1:db", "service-unhealthy").await?;
    let created = expect(&mut mine, "finding.created", "finding_id", &web).await?;
    let data = created.json();
    assert_eq!(data["change"], "created");
    assert_eq!(data["key"], "service-unhealthy");
    assert_eq!(data["resource_id"], "service:h1:web");
    assert_eq!(data["severity"], "warning");
    assert_eq!(data["category"], "reliability");
    assert_eq!(data["status"], "active");
    assert_eq!(data["title"], "service-unhealthy on service:h1:web");
    assert_eq!(data["lifecycle_event"], "detected");
    assert!(data["at"].is_string(), "{data}");
    expect(&mut theirs, "finding.created", "finding_id", &other).await?;

    act(&gw, &ops, "acknowledge", json!({"finding_id": web})).await?;
    let acked = expect(&mut mine, "finding.updated", "finding_id", &web).await?;
    assert_eq!(acked.json()["lifecycle_event"], "acknowledged");
    let last_seen = acked.id.clone().unwrap_or_default();

    // Disconnected: three more changes happen.
    drop(mine);
    act(
        &gw,
        &ops,
        "findings/note",
        json!({"finding_id": web, "note": "checking the pool"}),
    )
    .await?;
    act(
        &gw,
        &ops,
        "resolve",
        json!({"finding_id": web, "note": "restarted"}),
    )
    .await?;
    let db = seed(store, &acme, "service:h1:db", "service-unhealthy").await?;

    // Resume by header, then by query: exactly the three missed, in order, then live only.
    for (header, query) in [
        (Some(last_seen.as_str()), String::new()),
        (None, format!("?last_event_id={last_seen}")),
    ] {
        let (mut resumed, connected) = connect(&http, &gw, &reader_token, header, &query).await?;
        assert_eq!(connected.id.as_deref(), Some(last_seen.as_str()));
        let noted = expect(&mut resumed, "finding.updated", "finding_id", &web).await?;
        assert_eq!(noted.json()["lifecycle_event"], "user_note_updated");
        let resolved = expect(&mut resumed, "finding.resolved", "finding_id", &web).await?;
        assert_eq!(resolved.json()["status"], "resolved");
        expect(&mut resumed, "finding.created", "finding_id", &db).await?;
        quiet(&mut resumed).await?;
    }
    let (mut resumed, _) = connect(&http, &gw, &reader_token, Some(&last_seen), "").await?;
    for _ in 0..3 {
        resumed.next_event(EVENT_DEADLINE).await?;
    }
    let later = seed(store, &acme, "service:h1:cache", "service-unhealthy").await?;
    expect(&mut resumed, "finding.created", "finding_id", &later).await?;
    quiet(&mut resumed).await?;

    // An id beyond the stream (it was reset): a gap frame, then what the stream retains.
    let (mut reset, _) = connect(&http, &gw, &reader_token, Some("99999999"), "").await?;
    let gap = reset.next_frame(EVENT_DEADLINE).await?;
    assert_eq!(gap.event, "gap", "{gap:?}");
    assert_eq!(gap.json()["last_event_id"], "99999999");
    expect(&mut reset, "finding.created", "finding_id", &early).await?;

    // The other tenant saw only its own finding; an idle stream still shows it is alive.
    quiet(&mut theirs).await?;
    let beat = theirs.next_frame(Duration::from_secs(20)).await?;
    assert_eq!(beat.event, "heartbeat", "{beat:?}");
    assert!(beat.json()["at"].is_string(), "{beat:?}");
    drop((resumed, reset));

    // Shutdown ends every stream: the gateway exits cleanly with one open, and the client sees
    // its stream end (to reconnect elsewhere with its last id).
    gw.stop().await?;
    let ended = theirs.next_frame(Duration::from_secs(10)).await;
    assert!(
        ended
            .as_ref()
            .is_err_and(|e| e.to_string() == "the event stream ended"),
        "{ended:?}"
    );
    Ok(())
}

#[tokio::test]
async fn approvals_and_completed_actions_arrive() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let stack = AgentStack::start(&[("PULSE_RELAY__REQUEST_TIMEOUT_MS", "30000")]).await?;
    let gw = &stack.gateway;
    let store = gw.db.store();
    let tenant = TenantId::default_tenant();
    let host = host_id("events");
    let (_starts, agent) =
        spawn_counter_agent(&stack, &host, Duration::from_secs(1), STARTUP).await?;
    let broker = TestActionBroker::start(gw, &stack.dir.join("broker"), &[]).await?;
    set_autonomy_level(gw, AutonomyLevel::Approval).await?;
    let alice = user_token(
        store,
        &tenant,
        Some("alice"),
        &[
            Scope::ActionsPlan,
            Scope::ActionsApprove,
            Scope::ActionsExecute,
            Scope::MonitoringRead,
        ],
    )
    .await?;
    let globex = TenantId::new("globex")?;
    tenants::create(store, &globex, "Globex").await?;
    let outsider = user_token(store, &globex, None, &[Scope::MonitoringRead]).await?;
    let resource_id = stack
        .service_resource_id(&alice, &host, "counter", STARTUP)
        .await?;

    let http = sse::client()?;
    let (mut events, _) = connect(&http, gw, &alice, None, "").await?;
    let (mut theirs, _) = connect(&http, gw, &outsider, None, "").await?;

    let id = plan_pending(
        gw,
        &alice,
        &restart_plan(&resource_id, "counter", action::Severity::Critical),
    )
    .await?;
    let pending = expect(&mut events, "approval.pending", "action_id", &id).await?;
    assert_eq!(pending.json()["resource_id"], resource_id.as_str());
    assert_eq!(pending.json()["plan_hash"].as_str().map(str::len), Some(64));

    gw.client_as(&alice)?
        .decide_action(
            &id,
            &decision(DecisionOutcome::Approved, "checked the logs"),
        )
        .await?;
    action_in_state(
        gw,
        &id,
        &alice,
        ActionState::Completed,
        Duration::from_secs(60),
    )
    .await?;
    let completed = expect(&mut events, "action.completed", "action_id", &id).await?;
    assert_eq!(completed.json()["state"], "completed");

    // Nothing of this tenant reached the other one.
    quiet(&mut theirs).await?;
    drop((events, theirs));
    broker.stop().await?;
    drop(agent);
    stack.stop().await
}
