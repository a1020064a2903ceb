//! Assistant session routes over HTTP with the real gateway and model-runner (the provider
//! simulator as the model): list, rename, undo and redo with their guard, steering applied at a
//! turn boundary, compaction with its ledger surface, fork, delete, who may see a session, and
//! the stable errors of bad input.

use std::time::Duration;

use pulse_domain::{Scope, TenantId};
use pulse_store::cost_ledger;
use pulse_test_support::action_api::{call, user_token};
use pulse_test_support::patrol::{openai_chat_route, save_settings};
use pulse_test_support::provider_sim::{Delivery, ProviderSim, Script, Step, Turn};
use pulse_test_support::runner::TestModelRunner;
use pulse_test_support::service::TestGateway;
use pulse_test_support::sse::{Frame, SseReader};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const KEY: &str = "sk-assistant-sessions-81c2";
const MODEL: &str = "gpt-4o-mini";
const TURN_DEADLINE: Duration = Duration::from_secs(60);

async fn open(gw: &TestGateway, token: &str, body: Value) -> anyhow::Result<SseReader> {
    let response = gw
        .http
        .post(gw.url("/api/ai/chat"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await?;
    anyhow::ensure!(response.status() == 200, "chat: {}", response.status());
    Ok(SseReader::new(response))
}

async fn finish(reader: &mut SseReader) -> anyhow::Result<Vec<Frame>> {
    reader.frames_until(&["done", "error"], TURN_DEADLINE).await
}

async fn turn(gw: &TestGateway, token: &str, body: Value) -> anyhow::Result<(String, Vec<Frame>)> {
    let mut reader = open(gw, token, body).await?;
    let frames = finish(&mut reader).await?;
    let session = frames[0].json()["session_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    anyhow::ensure!(
        frames.last().is_some_and(|f| f.event == "done"),
        "{frames:?}"
    );
    Ok((session, frames))
}

async fn api(
    gw: &TestGateway,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> anyhow::Result<(StatusCode, Value)> {
    call(gw, method, path, token, body).await
}

fn texts(transcript: &Value) -> Vec<String> {
    transcript["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            format!(
                "{}:{}",
                m["role"].as_str().unwrap_or_default(),
                m["text"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

#[tokio::test]
async fn sessions_can_be_listed_renamed_undone_steered_compacted_forked_and_deleted()
-> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gw = TestGateway::start().await?;
    let sim = ProviderSim::start(Script::steps([
        Step::reply(Turn::text("one")),
        Step::reply(Turn::text("two")),
        Step::reply(Turn::text("three")),
        // Slow to answer, so steering arrives while the turn runs; it calls a tool, so the
        // turn has a boundary where the steer is applied.
        Step::delivered(
            Turn::tool("pulse_query", json!({"action": "list"})),
            Delivery {
                cold_start: Duration::from_millis(1_500),
                ..Delivery::default()
            },
        ),
        Step::reply(Turn::text("four, with disks in mind")),
        Step::reply(Turn::text("- the operator asked three questions")),
        Step::reply(Turn::text("The finding says /var is almost full.")),
    ]))
    .await?;
    save_settings(&gw, &openai_chat_route(MODEL, KEY, &sim.openai_base_url())).await?;
    let runner = TestModelRunner::start(&gw, &gw.state_dir.join("runner"), &[]).await?;
    let store = gw.db.store();
    let tenant = TenantId::default_tenant();
    let alice = user_token(store, &tenant, Some("alice"), &[Scope::AiChat]).await?;
    let bob = user_token(store, &tenant, Some("bob"), &[Scope::AiChat]).await?;

    let (session, _) = turn(&gw, &alice, json!({"prompt": "first?"})).await?;
    let path = |rest: &str| format!("/api/ai/sessions/{session}{rest}");
    turn(
        &gw,
        &alice,
        json!({"prompt": "second?", "session_id": session}),
    )
    .await?;

    // Listed for its creator only; renamed.
    let (_, listed) = api(&gw, Method::GET, "/api/ai/sessions", &alice, None).await?;
    assert_eq!(listed["sessions"][0]["id"], session, "{listed}");
    assert_eq!(listed["sessions"][0]["title"], "first?", "{listed}");
    let (_, theirs) = api(&gw, Method::GET, "/api/ai/sessions", &bob, None).await?;
    assert_eq!(theirs["sessions"], json!([]), "{theirs}");
    let (status, hidden) = api(&gw, Method::GET, &path("/messages"), &bob, None).await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{hidden}");
    assert_eq!(hidden["error"], "assistant_session_not_found");
    let (status, renamed) = api(
        &gw,
        Method::PATCH,
        &path(""),
        &alice,
        Some(json!({"title": "disk questions"})),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{renamed}");
    assert_eq!(renamed["title"], "disk questions");

    // Undo with the guard, redo, then a new turn replaces what was undone.
    let (status, conflict) = api(
        &gw,
        Method::POST,
        &path("/undo"),
        &alice,
        Some(json!({"expected_prompt": "first?"})),
    )
    .await?;
    assert_eq!(status, StatusCode::CONFLICT, "{conflict}");
    assert_eq!(conflict["error"], "assistant_undo_conflict");
    let (status, undone) = api(
        &gw,
        Method::POST,
        &path("/undo"),
        &alice,
        Some(json!({"expected_prompt": "second?"})),
    )
    .await?;
    assert_eq!(
        (status, undone["result"].clone()),
        (StatusCode::OK, json!("undone"))
    );
    let (_, after_undo) = api(&gw, Method::GET, &path("/messages"), &alice, None).await?;
    assert_eq!(texts(&after_undo), ["user:first?", "assistant:one"]);
    let (status, _) = api(
        &gw,
        Method::POST,
        &path("/redo"),
        &alice,
        Some(json!({"expected_prompt": "second?"})),
    )
    .await?;
    assert_eq!(status, StatusCode::OK);
    api(
        &gw,
        Method::POST,
        &path("/undo"),
        &alice,
        Some(json!({"expected_prompt": "second?"})),
    )
    .await?;
    let (_, frames) = turn(
        &gw,
        &alice,
        json!({"prompt": "third?", "session_id": session}),
    )
    .await?;
    assert!(
        frames
            .iter()
            .any(|f| f.event == "content" && f.data.contains("three"))
    );
    // The model saw the live history only.
    let history = sim
        .requests()
        .last()
        .map(|r| r.body.to_string())
        .unwrap_or_default();
    assert!(!history.contains("second?"), "{history}");
    assert!(history.contains("first?"), "{history}");

    // Steering while a turn runs is applied at its next boundary.
    let (status, idle_steer) = api(
        &gw,
        Method::POST,
        &path("/steer"),
        &alice,
        Some(json!({"text": "mind the disks"})),
    )
    .await?;
    assert_eq!(status, StatusCode::CONFLICT, "{idle_steer}");
    let mut reader = open(
        &gw,
        &alice,
        json!({"prompt": "fourth?", "session_id": session}),
    )
    .await?;
    assert_eq!(reader.next_frame(TURN_DEADLINE).await?.event, "session");
    let (status, steered) = api(
        &gw,
        Method::POST,
        &path("/steer"),
        &alice,
        Some(json!({"text": "mind the disks"})),
    )
    .await?;
    assert_eq!(status, StatusCode::ACCEPTED, "{steered}");
    let (status, busy) = api(&gw, Method::DELETE, &path(""), &alice, None).await?;
    assert_eq!(status, StatusCode::CONFLICT, "{busy}");
    assert_eq!(busy["error"], "assistant_session_busy");
    let frames = finish(&mut reader).await?;
    let names: Vec<&str> = frames.iter().map(|f| f.event.as_str()).collect();
    assert_eq!(names.last(), Some(&"done"), "{frames:?}");
    assert!(names.contains(&"steer_applied"), "{names:?}");
    let steered_request = sim
        .requests()
        .last()
        .map(|r| r.body.to_string())
        .unwrap_or_default();
    assert!(
        steered_request.contains("mind the disks"),
        "{steered_request}"
    );

    // Compaction: a bounded summary replaces the older rows; its usage has its own surface.
    let (status, summary) = api(&gw, Method::POST, &path("/summarize"), &alice, None).await?;
    assert_eq!(status, StatusCode::OK, "{summary}");
    assert!(
        summary["compacted_rows"].as_u64().is_some_and(|n| n > 0),
        "{summary}"
    );
    let (_, compacted) = api(&gw, Method::GET, &path("/messages"), &alice, None).await?;
    let rows = compacted["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(rows.iter().any(|m| m["role"] == "summary"), "{compacted}");
    assert!(rows.iter().any(|m| m["compacted"] == true), "{compacted}");
    let tx = store.tenant_tx(&tenant).await?;
    let now = chrono::Utc::now();
    let surfaces: Vec<String> = cost_ledger::lines(
        &tx,
        now - chrono::Duration::hours(1),
        now + chrono::Duration::hours(1),
    )
    .await?
    .into_iter()
    .filter(|l| l.run_id.as_deref() == Some(session.as_str()))
    .map(|l| l.surface)
    .collect();
    drop(tx);
    assert!(surfaces.contains(&"assistant".to_owned()), "{surfaces:?}");
    assert!(
        surfaces.contains(&"assistant_session_compaction".to_owned()),
        "{surfaces:?}"
    );

    // Fork, then delete the original.
    let (status, fork) = api(&gw, Method::POST, &path("/fork"), &alice, Some(json!({}))).await?;
    assert_eq!(status, StatusCode::CREATED, "{fork}");
    assert_eq!(fork["forked_from"], session, "{fork}");
    let (status, _) = api(&gw, Method::DELETE, &path(""), &alice, None).await?;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, gone) = api(&gw, Method::GET, &path("/messages"), &alice, None).await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{gone}");
    let fork_id = fork["id"].as_str().unwrap_or_default();
    let (status, copy) = api(
        &gw,
        Method::GET,
        &format!("/api/ai/sessions/{fork_id}/messages"),
        &alice,
        None,
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{copy}");
    assert!(texts(&copy).contains(&"user:fourth?".to_owned()), "{copy}");

    // A chat from a finding is approval-required and starts from the finding's facts.
    let finding = {
        let tx = store.tenant_tx(&tenant).await?;
        let reported = pulse_domain::finding::ReportedFinding {
            key: "disk-high".to_owned(),
            severity: pulse_domain::finding::Severity::Warning,
            category: pulse_domain::finding::Category::Capacity,
            resource_id: "host:handoff-1".to_owned(),
            resource_name: "handoff-1".to_owned(),
            resource_type: "host".to_owned(),
            title: "Disk /var at 93% on handoff-1".to_owned(),
            description: "/var fills at 2% a day".to_owned(),
            recommendation: "rotate logs".to_owned(),
            evidence: "used_percent=93".to_owned(),
            impact: String::new(),
        };
        let outcome =
            pulse_store::findings::report(&tx, &reported, None, chrono::Utc::now()).await?;
        tx.commit().await?;
        outcome.finding.finding.id.as_hex()
    };
    sim.clear_requests();
    let (_, frames) = turn(
        &gw,
        &alice,
        json!({"prompt": "What should I do about this?", "finding_id": finding}),
    )
    .await?;
    let opened = frames[0].json();
    assert_eq!(opened["approval_required"], true, "{opened}");
    assert_eq!(opened["finding_id"], finding, "{opened}");
    let told = sim
        .requests()
        .first()
        .map(|r| r.body.to_string())
        .unwrap_or_default();
    assert!(told.contains("Disk /var at 93% on handoff-1"), "{told}");
    assert!(told.contains("<<untrusted-"), "{told}");

    // Bad input gets stable codes.
    for (method, route, body, code) in [
        (
            Method::POST,
            "/api/ai/chat".to_owned(),
            json!({"prompt": "  "}),
            "invalid_chat_request",
        ),
        (
            Method::POST,
            "/api/ai/chat".to_owned(),
            json!({"prompt": "x", "control_level": "god_mode"}),
            "invalid_request",
        ),
        (
            Method::POST,
            "/api/ai/chat".to_owned(),
            json!({"prompt": "x", "finding_id": "00000000000000aa"}),
            "finding_not_found",
        ),
        (
            Method::POST,
            "/api/ai/chat".to_owned(),
            json!({"prompt": "x", "session_id": uuid::Uuid::new_v4()}),
            "assistant_session_not_found",
        ),
        (
            Method::GET,
            "/api/ai/sessions/not-a-uuid/messages".to_owned(),
            Value::Null,
            "invalid_parameter",
        ),
    ] {
        let body = (!body.is_null()).then_some(body);
        let (status, answer) = api(&gw, method.clone(), &route, &alice, body).await?;
        assert!(
            status.is_client_error(),
            "{method} {route}: {status} {answer}"
        );
        assert_eq!(answer["error"], code, "{method} {route}: {answer}");
    }

    runner.stop().await?;
    drop(sim);
    gw.stop().await
}
