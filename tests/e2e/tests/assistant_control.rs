//! "Restart the unhealthy service" through Pulse Assistant, end to end: the real gateway,
//! model-runner, action-broker, verifier, agent-relay and a `pulse-agent` with commands
//! enabled, supervising `web` (unhealthy until it is restarted), with the provider simulator as
//! the model.
//!
//! - In a `controlled` session the model reads the fleet and calls `pulse_control`: the client
//!   gets an approval card (action id, plan hash, policy); nothing has run.
//! - The `ai:chat` token cannot approve it (403 `missing_scope`); a human with
//!   `actions:approve` approves it through the action route; the agent restarts `web` once and
//!   the verifier records the outcome.
//! - On the next prompt the Assistant reports the verifier's outcome from the action record
//!   (an `action_outcome` event and an outcome row), and the model is told it as a Pulse note.
//! - In a `read_only` session the planner is not offered at all.

use std::time::Duration;

use pulse_domain::action::{ActionState, Verification};
use pulse_domain::ai_settings::AutonomyLevel;
use pulse_domain::{Scope, TenantId};
use pulse_test_support::action_api::{post, starts, user_token, wait_starts};
use pulse_test_support::action_broker::{TestActionBroker, action_until};
use pulse_test_support::agent::{AgentStack, marker_service_running, write_service};
use pulse_test_support::patrol::{openai_chat_route, save_settings};
use pulse_test_support::provider_sim::{ProviderSim, Script, Turn};
use pulse_test_support::runner::TestModelRunner;
use pulse_test_support::service::TestGateway;
use pulse_test_support::sse::{Frame, SseReader};
use pulse_test_support::verifier::TestVerifier;
use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

const KEY: &str = "sk-assistant-control-5e1a";
const MODEL: &str = "gpt-4o-mini";
const INTERVAL: Duration = Duration::from_millis(500);
const STARTUP: Duration = Duration::from_secs(45);
const TURN_DEADLINE: Duration = Duration::from_secs(60);
/// From the approval to a recorded verification.
const LIFECYCLE: Duration = Duration::from_secs(90);

async fn chat(gateway: &TestGateway, token: &str, body: Value) -> anyhow::Result<Vec<Frame>> {
    let response = gateway
        .http
        .post(gateway.url("/api/ai/chat"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await?;
    anyhow::ensure!(
        response.status() == 200,
        "chat answered {}",
        response.status()
    );
    SseReader::new(response)
        .frames_until(&["done", "error"], TURN_DEADLINE)
        .await
}

fn events(frames: &[Frame]) -> Vec<&str> {
    frames.iter().map(|f| f.event.as_str()).collect()
}

#[tokio::test]
async fn restarting_the_unhealthy_service_takes_an_approval_and_reports_the_verifier()
-> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let stack = AgentStack::start(&[]).await?;
    let gw = &stack.gateway;
    let verifier = TestVerifier::start(gw, &stack.dir.join("verifier"), &[]).await?;
    let broker = TestActionBroker::start(gw, &stack.dir.join("broker"), &[]).await?;
    let agent_token = stack
        .create_token("agent-exec", &["agent:report", "agent:exec"])
        .await?;
    let host = pulse_test_support::agent::host_id("assist");
    let mut spec = stack.agent_spec(&host, &agent_token, INTERVAL)?;
    spec.enable_commands = true;
    // `web` counts its starts; from its second start on it clears its fault marker, so only a
    // restart makes it healthy again.
    let starts_file = spec.state_dir.join("web.starts");
    let fault = spec.state_dir.join("web.fault");
    let command = format!(
        "command = \"sh\"\nargs = [\"-c\", \"echo started >> '{s}'; \
         if [ $(wc -l < '{s}') -gt 1 ]; then rm -f '{f}'; fi; exec sleep 3600\"]\n",
        s = starts_file.display(),
        f = fault.display()
    );
    write_service(
        &spec.services_dir,
        "web.toml",
        &marker_service_running("web", &command, &fault),
    )?;
    let web = format!("service:{host}:web");
    let sim = ProviderSim::start(Script::turns([
        Turn::text("Let me look at the fleet.")
            .with_tool("pulse_query", json!({"action": "health"})),
        Turn::tool(
            "pulse_control",
            json!({"type": "resource", "resource_id": web, "action": "restart"}),
        ),
        Turn::text("I planned a restart of web. It needs a human's approval before it runs."),
        Turn::text("The restart of web was verified by Pulse's verifier."),
        // The read-only session: the planner is not offered, so the model answers in text.
        Turn::text("I can only read in this session."),
    ]))
    .await?;
    let mut settings = openai_chat_route(MODEL, KEY, &sim.openai_base_url());
    settings.autonomy_level = Some(Some(AutonomyLevel::Approval));
    save_settings(gw, &settings).await?;
    let agent = stack.spawn_agent(&spec)?;
    let runner = TestModelRunner::start(gw, &stack.dir.join("runner"), &[]).await?;
    wait_starts(&starts_file, 1, STARTUP, "web to start once").await?;
    stack
        .wait_health(&gw.admin_token, &web, "healthy", STARTUP)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent.log_tail(30)))?;
    std::fs::write(&fault, "fault")?;
    stack
        .wait_health(&gw.admin_token, &web, "unhealthy", STARTUP)
        .await?;

    // A chat token of no person, and a human who may approve.
    let store = gw.db.store();
    let tenant = TenantId::default_tenant();
    let chat_token = user_token(store, &tenant, None, &[Scope::AiChat]).await?;
    let alice = user_token(
        store,
        &tenant,
        Some("alice"),
        &[Scope::ActionsApprove, Scope::MonitoringRead],
    )
    .await?;

    // 1. The request becomes an approval card; nothing runs.
    let frames = chat(
        gw,
        &chat_token,
        json!({"prompt": "Restart the unhealthy service", "control_level": "controlled"}),
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(60)))?;
    let names = events(&frames);
    assert_eq!(names.last(), Some(&"done"), "{frames:?}");
    let session = frames[0].json()["session_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let card = frames
        .iter()
        .find(|f| f.event == "approval_needed")
        .map(Frame::json)
        .ok_or_else(|| anyhow::anyhow!("no approval card: {names:?}"))?;
    assert_eq!(card["resource_id"], web, "{card}");
    assert_eq!(card["capability"], "service.restart", "{card}");
    assert_eq!(card["state"], "pending_approval", "{card}");
    assert!(
        card["plan_hash"].as_str().is_some_and(|h| h.len() >= 32),
        "{card}"
    );
    assert!(card["policy"].is_object(), "{card}");
    let action_id = card["action_id"].as_str().unwrap_or_default().to_owned();
    let control_end = frames
        .iter()
        .find(|f| f.event == "tool_end" && f.json()["name"] == "pulse_control")
        .map(Frame::json)
        .ok_or_else(|| anyhow::anyhow!("no pulse_control row: {names:?}"))?;
    assert_eq!(control_end["success"], true, "{control_end}");
    assert_eq!(starts(&starts_file), 1, "nothing ran before the approval");

    // 2. The chat token cannot approve; the human can.
    let (status, refused) = post(
        gw,
        &format!("/api/actions/{action_id}/decision"),
        &chat_token,
        Some(json!({"outcome": "approved", "reason": "the assistant asked"})),
    )
    .await?;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert_eq!(refused["error"], "missing_scope", "{refused}");
    let (status, decided) = post(
        gw,
        &format!("/api/actions/{action_id}/decision"),
        &alice,
        Some(json!({"outcome": "approved", "reason": "web is down"})),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{decided}");
    let action = action_until(
        store,
        &tenant,
        Uuid::parse_str(&action_id)?,
        LIFECYCLE,
        "the restart to be verified",
        |a| a.verification.is_some() || a.state == ActionState::Failed,
    )
    .await?;
    assert_eq!(action.state, ActionState::Completed, "{action:?}");
    assert_eq!(
        action.verification,
        Some(Verification::Verified),
        "{action:?}"
    );
    assert_eq!(starts(&starts_file), 2, "the approved restart ran once");

    // 3. The next turn reports the verifier's outcome, from the action record.
    sim.clear_requests();
    let frames = chat(
        gw,
        &chat_token,
        json!({"prompt": "Did it work?", "session_id": session}),
    )
    .await?;
    let names = events(&frames);
    assert_eq!(names.last(), Some(&"done"), "{frames:?}");
    let outcome = frames
        .iter()
        .find(|f| f.event == "action_outcome")
        .map(Frame::json)
        .ok_or_else(|| anyhow::anyhow!("no action_outcome: {names:?}"))?;
    assert_eq!(outcome["action_id"], action_id, "{outcome}");
    assert_eq!(outcome["verification"], "verified", "{outcome}");
    let told = sim
        .requests()
        .first()
        .map(|r| r.body.to_string())
        .unwrap_or_default();
    assert!(
        told.contains("the verifier recorded: verified"),
        "the model was not told the outcome: {told}"
    );
    let (status, transcript) = pulse_test_support::action_api::get(
        gw,
        &format!("/api/ai/sessions/{session}/messages"),
        &chat_token,
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{transcript}");
    let rows = transcript["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let roles: Vec<&str> = rows.iter().filter_map(|m| m["role"].as_str()).collect();
    assert!(
        roles.contains(&"approval") && roles.contains(&"outcome"),
        "{roles:?}"
    );
    // The outcome is reported once: a later turn does not repeat it.
    assert_eq!(roles.iter().filter(|r| **r == "outcome").count(), 1);

    // 4. A read-only session is not offered the planner.
    sim.clear_requests();
    let frames = chat(gw, &chat_token, json!({"prompt": "Restart web please"})).await?;
    assert_eq!(events(&frames).last(), Some(&"done"), "{frames:?}");
    assert!(!events(&frames).contains(&"approval_needed"));
    let offered = sim
        .requests()
        .first()
        .map(|r| r.body["tools"].to_string())
        .unwrap_or_default();
    assert!(offered.contains("pulse_query"), "{offered}");
    assert!(!offered.contains("pulse_control"), "{offered}");

    runner.stop().await?;
    broker.stop().await?;
    verifier.stop().await?;
    let _ = agent.stop(Duration::from_secs(10)).await;
    drop(sim);
    stack.stop().await
}
