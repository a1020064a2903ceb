//! Pulse Assistant end to end: the real gateway, agent-relay, model-runner and a real
//! `pulse-agent` supervising `web`, with the provider simulator as the model.
//!
//! - A read-only question is answered with a tool row: `session` comes first and once, the tool
//!   row opens (`tool_start`), fills (`tool_progress`) and closes (`tool_end`) before the answer
//!   ends with exactly one `done`. Reasoning the simulator plants (provider reasoning and an
//!   inline `<think>` block) reaches neither the client nor the stored transcript; a canary
//!   secret in the tool result (web's log) reaches neither the provider nor the transcript; the
//!   transcript is sealed at rest.
//! - A silent provider is reported as `stream_idle` with its route. A client that disconnects
//!   mid-stream leaves the session idle with no open tool row, and
//!   the provider call is stopped (the simulator sees its stream abandoned); Stop
//!   (`/abort`) does the same with one `error` event.

use std::time::Duration;

use pulse_domain::TenantId;
use pulse_test_support::agent::{AgentStack, marker_service_running, write_service};
use pulse_test_support::json_text::decoded_strings;
use pulse_test_support::patrol::{openai_chat_route, save_settings};
use pulse_test_support::provider_sim::{Delivery, ProviderSim, Script, Step, Turn};
use pulse_test_support::runner::TestModelRunner;
use pulse_test_support::service::TestGateway;
use pulse_test_support::sse::{Frame, SseReader};
use pulse_test_support::wait::until;
use serde_json::{Value, json};

const KEY: &str = "sk-assistant-e2e-3c9d1f0b";
const MODEL: &str = "gpt-4o-mini";
const INTERVAL: Duration = Duration::from_millis(500);
const STARTUP: Duration = Duration::from_secs(45);
const TURN_DEADLINE: Duration = Duration::from_secs(60);

const PLANTED_REASONING: &str = "PLANTED-REASONING-4412 the operator must not see this";
const INLINE_REASONING: &str = "INLINE-PLAN-7731";
const CANARY: &str = "CanaryTok93c1e7aa55Zq";

/// Reads frames until the turn's terminal one (`done` or `error`).
async fn read_turn(reader: &mut SseReader) -> anyhow::Result<Vec<Frame>> {
    reader.frames_until(&["done", "error"], TURN_DEADLINE).await
}

async fn chat(gateway: &TestGateway, token: &str, body: Value) -> anyhow::Result<SseReader> {
    // A stream may stay open longer than the shared client's request timeout.
    let response = reqwest::Client::new()
        .post(gateway.url("/api/ai/chat"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await?;
    anyhow::ensure!(
        response.status() == 200,
        "chat answered {}: {}",
        response.status(),
        response.text().await.unwrap_or_default()
    );
    Ok(SseReader::new(response))
}

async fn messages(gateway: &TestGateway, token: &str, session: &str) -> anyhow::Result<Value> {
    let response = gateway
        .http
        .get(gateway.url(&format!("/api/ai/sessions/{session}/messages")))
        .bearer_auth(token)
        .send()
        .await?;
    anyhow::ensure!(response.status() == 200, "messages: {}", response.status());
    Ok(response.json().await?)
}

fn contains_anywhere(value: &Value, needle: &str) -> bool {
    value.to_string().contains(needle) || decoded_strings(value).iter().any(|s| s.contains(needle))
}

fn position(frames: &[Frame], event: &str, id: &str) -> Option<usize> {
    frames
        .iter()
        .position(|f| f.event == event && f.json()["id"] == id)
}

#[tokio::test]
async fn a_read_only_question_streams_a_tool_row_and_a_clean_answer() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let stack = AgentStack::start(&[]).await?;
    let gw = &stack.gateway;
    let agent_token = stack.create_token("agent", &["agent:report"]).await?;
    let host = pulse_test_support::agent::host_id("chat");
    let spec = stack.agent_spec(&host, &agent_token, INTERVAL)?;
    let web = format!("service:{host}:web");
    let printed = spec.state_dir.join("web-output.txt");
    std::fs::write(
        &printed,
        format!("starting shop-api\nenv: API_TOKEN={CANARY} MODE=prod\nshop-api ready\n"),
    )?;
    write_service(
        &spec.services_dir,
        "web.toml",
        &marker_service_running(
            "web",
            &format!(
                "command = \"sh\"\nargs = [\"-c\", \"cat '{}'; exec sleep 3600\"]\n",
                printed.display()
            ),
            &spec.state_dir.join("web.fault"),
        ),
    )?;
    let sim = ProviderSim::start(Script::turns([
        Turn::text(format!(
            "<think>{INLINE_REASONING}</think>Checking web's log."
        ))
        .with_reasoning(PLANTED_REASONING)
        .with_tool(
            "pulse_read",
            json!({"action": "logs", "resource_id": web, "lines": 20}),
        ),
        Turn::text("web is running; its log shows a clean start."),
    ]))
    .await?;
    save_settings(gw, &openai_chat_route(MODEL, KEY, &sim.openai_base_url())).await?;
    let agent = stack.spawn_agent(&spec)?;
    let runner = TestModelRunner::start(gw, &stack.dir.join("runner"), &[]).await?;
    stack
        .wait_health(&gw.admin_token, &web, "healthy", STARTUP)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent.log_tail(30)))?;
    let log_file = spec.state_dir.join("logs").join("web.log");
    until(STARTUP, "web's log to be complete", || {
        let log_file = log_file.clone();
        async move {
            std::fs::read_to_string(&log_file)
                .ok()
                .filter(|l| l.contains("shop-api ready"))
        }
    })
    .await?;

    let token = stack.create_token("chat", &["ai:chat"]).await?;
    let mut reader = chat(gw, &token, json!({"prompt": "Is web healthy?"})).await?;
    let frames = read_turn(&mut reader)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(60)))?;
    let names: Vec<&str> = frames.iter().map(|f| f.event.as_str()).collect();

    // Order: session first and once; one terminal done, last; the tool row opens, fills and
    // closes before the answer ends.
    assert_eq!(names.first(), Some(&"session"), "{names:?} {frames:?}");
    assert_eq!(
        names.iter().filter(|n| **n == "session").count(),
        1,
        "{names:?}"
    );
    assert_eq!(names.last(), Some(&"done"), "{frames:?}");
    assert_eq!(
        names.iter().filter(|n| **n == "done").count(),
        1,
        "{names:?}"
    );
    assert!(!names.contains(&"error"), "{names:?}");
    let session = frames[0].json()["session_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let start = frames
        .iter()
        .find(|f| f.event == "tool_start")
        .map(Frame::json)
        .ok_or_else(|| anyhow::anyhow!("no tool_start in {names:?}"))?;
    assert_eq!(start["name"], "pulse_read", "{start}");
    let id = start["id"].as_str().unwrap_or_default().to_owned();
    let opened = position(&frames, "tool_start", &id).unwrap_or(usize::MAX);
    let progressed = position(&frames, "tool_progress", &id).unwrap_or(usize::MAX);
    let closed = position(&frames, "tool_end", &id).unwrap_or(usize::MAX);
    assert!(opened < progressed && progressed < closed, "{names:?}");
    let end = frames[closed].json();
    assert_eq!(end["success"], true, "{end}");
    assert!(
        end["output"]
            .as_str()
            .unwrap_or_default()
            .contains("shop-api ready"),
        "{end}"
    );
    let first_content = names
        .iter()
        .position(|n| *n == "content")
        .unwrap_or(usize::MAX);
    assert!(
        names[..first_content].contains(&"workflow_state"),
        "{names:?}"
    );
    assert!(names.contains(&"workflow_state"));
    let text: String = frames
        .iter()
        .filter(|f| f.event == "content")
        .map(|f| f.json()["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(text.contains("Checking web's log."), "{text}");
    assert!(text.contains("clean start"), "{text}");
    let done = frames.last().map(Frame::json).unwrap_or_default();
    for field in ["input_tokens", "output_tokens", "context_limit_tokens"] {
        assert!(
            done[field].as_u64().is_some_and(|n| n > 0),
            "{field}: {done}"
        );
    }
    assert!(done.get("session_cost_usd").is_some(), "{done}");

    // Nothing the client received carries reasoning or the canary.
    for frame in &frames {
        for needle in ["PLANTED-REASONING", INLINE_REASONING, CANARY] {
            assert!(
                !frame.data.contains(needle),
                "{needle} reached the client: {frame:?}"
            );
        }
    }
    // The provider never received the canary; it did receive the log, redacted.
    let bodies: Vec<Value> = sim.requests().into_iter().map(|r| r.body).collect();
    assert!(bodies.len() >= 2, "{} requests", bodies.len());
    for body in &bodies {
        assert!(
            !contains_anywhere(body, CANARY),
            "canary reached the provider: {body}"
        );
    }
    assert!(
        bodies
            .last()
            .is_some_and(|b| b.to_string().contains("shop-api ready")),
        "the log did not reach the model"
    );
    // The first request carries the inventory Pulse read at the start of the turn, just before
    // the prompt, which stays last; web is healthy, so it is counted, not listed.
    let first = bodies[0]["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let users: Vec<&str> = first
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(users.last(), Some(&"Is web healthy?"), "{first:?}");
    let brief = users.iter().rev().nth(1).copied().unwrap_or_default();
    assert!(
        brief.starts_with("Pulse's inventory, read at the start of this turn")
            && brief.contains("\"routine\":")
            && !brief.contains(&format!("\"id\":\"{web}\"")),
        "{brief}"
    );

    // The stored transcript: user, the tool row (closed), the answer; no reasoning, no canary.
    let stored = messages(gw, &token, &session).await?;
    for needle in ["PLANTED-REASONING", INLINE_REASONING, CANARY] {
        assert!(
            !contains_anywhere(&stored, needle),
            "{needle} stored: {stored}"
        );
    }
    let rows = stored["messages"].as_array().cloned().unwrap_or_default();
    let roles: Vec<&str> = rows.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["user", "tool", "assistant"], "{stored}");
    assert_eq!(rows[1]["state"], "done", "{stored}");
    assert_eq!(rows[1]["tool"]["name"], "pulse_read", "{stored}");
    assert!(
        rows[2]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("clean start"),
        "{stored}"
    );
    assert_eq!(stored["session"]["status"], "idle", "{stored}");

    // Sealed at rest: the database holds no plaintext of the answer or the prompt.
    let store = gw.db.store();
    let tx = store.tenant_tx(&TenantId::default_tenant()).await?;
    let sealed = tx
        .client()
        .query("SELECT body_sealed FROM chat_messages", &[])
        .await?;
    assert_eq!(sealed.len(), 3);
    for row in sealed {
        let bytes: Vec<u8> = row.get(0);
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("clean start") && !text.contains("Is web healthy"));
    }
    drop(tx);

    runner.stop().await?;
    let _ = agent.stop(Duration::from_secs(10)).await;
    drop(sim);
    stack.stop().await
}

/// A turn whose provider stream stalls in the middle of a tool call (its text, the call's
/// start and half its arguments are sent): the turn runs, with an open tool row, until stopped.
fn stalled_turn() -> Step {
    Step::delivered(
        Turn::text("Checking.").with_tool("pulse_query", json!({"action": "list"})),
        Delivery {
            stall_after_frames: Some(3),
            ..Delivery::default()
        },
    )
}

/// Reads frames until a `tool_start`.
async fn until_tool_start(reader: &mut SseReader) -> anyhow::Result<()> {
    loop {
        if reader.next_frame(TURN_DEADLINE).await?.event == "tool_start" {
            return Ok(());
        }
    }
}

#[tokio::test]
async fn a_lost_client_or_stop_ends_the_turn_cleanly_and_closes_the_provider_call()
-> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gw = TestGateway::start().await?;
    let sim = ProviderSim::start(Script::steps([stalled_turn(), stalled_turn()])).await?;
    save_settings(&gw, &openai_chat_route(MODEL, KEY, &sim.openai_base_url())).await?;
    let runner = TestModelRunner::start(&gw, &gw.state_dir.join("runner"), &[]).await?;
    let token = gw.create_token("chat", &["ai:chat"]).await?;

    // 1. The client goes away mid-stream.
    let mut reader = chat(&gw, &token, json!({"prompt": "What is slow?"})).await?;
    let first = reader.next_frame(TURN_DEADLINE).await?;
    assert_eq!(first.event, "session");
    let session = first.json()["session_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // Wait until a tool row is open and the silent provider is reported as idle (with its
    // route), then drop the connection.
    until_tool_start(&mut reader)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(40)))?;
    let idle = loop {
        let frame = reader.next_frame(TURN_DEADLINE).await?;
        if frame.event == "stream_idle" {
            break frame.json();
        }
    };
    assert_eq!(idle["model_route"], format!("openai:{MODEL}"), "{idle}");
    drop(reader);
    until(TURN_DEADLINE, "the provider stream to be abandoned", || {
        let n = sim.abandoned_streams();
        async move { (n >= 1).then_some(()) }
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(40)))?;
    let idle = until(TURN_DEADLINE, "the session to be idle", || {
        let (gw, token, session) = (&gw, &token, &session);
        async move {
            messages(gw, token, session)
                .await
                .ok()
                .filter(|m| m["session"]["status"] == "idle")
        }
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(40)))?;
    let rows = idle["messages"].as_array().cloned().unwrap_or_default();
    assert!(
        rows.iter().all(|m| m["state"] != "running"),
        "an orphan row: {idle}"
    );
    assert_eq!(rows.first().map(|m| m["role"].clone()), Some(json!("user")));
    let tool = rows
        .iter()
        .find(|m| m["role"] == "tool")
        .ok_or_else(|| anyhow::anyhow!("no tool row: {idle}"))?;
    assert_eq!(tool["state"], "cancelled", "{idle}");
    assert!(rows.iter().any(|m| m["role"] == "error"), "{idle}");

    // 2. Stop: the same session continues; abort ends it with one error event.
    let mut reader = chat(
        &gw,
        &token,
        json!({"prompt": "And now?", "session_id": session}),
    )
    .await?;
    assert_eq!(reader.next_frame(TURN_DEADLINE).await?.event, "session");
    until_tool_start(&mut reader).await?;
    let response = gw
        .http
        .post(gw.url(&format!("/api/ai/sessions/{session}/abort")))
        .bearer_auth(&token)
        .send()
        .await?;
    assert_eq!(response.status(), 202);
    let frames = read_turn(&mut reader).await?;
    let last = frames
        .last()
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no frames"))?;
    assert_eq!(last.event, "error", "{frames:?}");
    assert_eq!(last.json()["code"], "assistant_turn_aborted", "{last:?}");
    assert_eq!(frames.iter().filter(|f| f.event == "error").count(), 1);
    assert!(
        frames.iter().any(|f| f.event == "tool_cancel"),
        "the open tool row was not cancelled live: {frames:?}"
    );
    until(TURN_DEADLINE, "the second stream to be abandoned", || {
        let n = sim.abandoned_streams();
        async move { (n >= 2).then_some(()) }
    })
    .await?;
    let after = messages(&gw, &token, &session).await?;
    assert_eq!(after["session"]["status"], "idle", "{after}");
    assert!(
        after["messages"]
            .as_array()
            .is_some_and(|rows| rows.iter().all(|m| m["state"] != "running")),
        "{after}"
    );
    // An aborted session takes the next prompt.
    let busy = gw
        .http
        .post(gw.url(&format!("/api/ai/sessions/{session}/abort")))
        .bearer_auth(&token)
        .send()
        .await?;
    assert_eq!(busy.status(), 200, "an idle session has nothing to stop");

    runner.stop().await?;
    drop(sim);
    gw.stop().await
}
