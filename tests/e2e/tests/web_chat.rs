//! The Chat page in a real browser, against the real gateway, agent-relay, model-runner,
//! action-broker and a `pulse-agent` supervising `web`, with the provider simulator as the
//! model. `tests/browser/chat_flow.mjs` drives the system's Chromium through playwright-core:
//! sign in, open Chat, choose `controlled`, send "restart web"; the answer streams, the
//! inventory lookup's tool row closes as done, and the restart's approval card shows the plan
//! hash with an Approve form (the admin may approve). A reload restores the same transcript from
//! the messages route; a second admin approves from the card, and the action is approved
//! through the Approvals page's form.
//!
//! Needs the workspace's binaries, Node.js, Chromium (`/usr/bin/chromium`, or `CHROMIUM`) and
//! `npm ci --prefix tests/browser`. The screenshot goes to the test's scratch dir
//! (`PULSE_SCREENSHOTS` overrides).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use pulse_domain::ai_settings::AutonomyLevel;
use pulse_test_support::action_api::{get, set_autonomy_level};
use pulse_test_support::action_broker::TestActionBroker;
use pulse_test_support::agent::{AgentStack, host_id, sleeper_service};
use pulse_test_support::patrol::{openai_chat_route, save_settings};
use pulse_test_support::provider_sim::{Delivery, ProviderSim, Script, Step, Turn};
use pulse_test_support::runner::TestModelRunner;
use pulse_test_support::service::{TestGateway, binary, scratch_dir};
use pulse_test_support::web::{WebClient, post_forms};
use reqwest::StatusCode;
use serde_json::{Value, json};

const KEY: &str = "sk-web-chat-e2e-71b2c9d4";
const MODEL: &str = "gpt-4o-mini";
const INTERVAL: Duration = Duration::from_millis(500);
const STARTUP: Duration = Duration::from_secs(45);
/// The browser's whole path, with its own waits of up to a minute a step.
const BROWSER_WITHIN: Duration = Duration::from_secs(300);
const FINAL_ANSWER: &str = "I planned a restart of web; it waits for a human's approval.";

fn browser_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../browser")
}

fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

fn require_browser() -> anyhow::Result<()> {
    anyhow::ensure!(
        chromium().is_file(),
        "no Chromium at {} (install Debian's chromium, or set CHROMIUM)",
        chromium().display()
    );
    anyhow::ensure!(
        browser_dir()
            .join("node_modules/playwright-core/package.json")
            .is_file(),
        "playwright-core is not installed: run `npm ci --prefix tests/browser`"
    );
    Ok(())
}

/// `pulsectl user create <name> --role <role>` against the gateway's database: the password.
async fn create_user(gw: &TestGateway, name: &str, role: &str) -> anyhow::Result<String> {
    let output = tokio::process::Command::new(binary("pulsectl")?)
        .arg("--state-dir")
        .arg(&gw.state_dir)
        .args(["user", "create", name, "--role", role])
        .env("PULSE_DATABASE_URL", gw.db.owner_url())
        .output()
        .await?;
    anyhow::ensure!(
        output.status.success(),
        "pulsectl user create: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout)?.trim().to_owned())
}

/// The `RESULT {...}` line the browser script prints when every step passed.
fn browser_result(stdout: &str) -> anyhow::Result<Value> {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .context("the browser script printed no RESULT line")?;
    Ok(serde_json::from_str(line)?)
}

#[tokio::test]
async fn an_operator_chats_with_the_assistant_and_approves_from_its_card() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    require_browser()?;
    let stack = AgentStack::start(&[("PULSE_RELAY__REQUEST_TIMEOUT_MS", "30000")]).await?;
    let gw = &stack.gateway;
    let host = host_id("chatweb");
    let (_spec, agent) = stack
        .spawn_command_agent(&host, INTERVAL, &[("web.toml", sleeper_service("web"))])
        .await?;
    let broker = TestActionBroker::start(gw, &stack.dir.join("broker"), &[]).await?;
    set_autonomy_level(gw, AutonomyLevel::Approval).await?;
    let web = stack
        .service_resource_id(&gw.admin_token, &host, "web", STARTUP)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent.log_tail(30)))?;
    let sim = ProviderSim::start(Script::steps([
        Step::reply(
            Turn::text("Let me look at what is running.")
                .with_tool("pulse_query", json!({"action": "list"})),
        ),
        Step::reply(
            Turn::text("web is running; planning its restart.").with_tool(
                "pulse_control",
                json!({"type": "resource", "resource_id": web, "action": "restart"}),
            ),
        ),
        Step::reply(Turn::text(FINAL_ANSWER)),
        // The next prompt's answer stalls mid tool call, until Stop.
        Step::delivered(
            Turn::text("Checking.").with_tool("pulse_query", json!({"action": "list"})),
            Delivery {
                stall_after_frames: Some(3),
                ..Delivery::default()
            },
        ),
    ]))
    .await?;
    save_settings(gw, &openai_chat_route(MODEL, KEY, &sim.openai_base_url())).await?;
    let runner = TestModelRunner::start(gw, &stack.dir.join("runner"), &[]).await?;
    let approver_password = create_user(gw, "approver", "admin").await?;
    let password = std::fs::read_to_string(gw.state_dir.join("admin-password"))
        .context("the bootstrap admin's password")?
        .trim()
        .to_owned();
    let shots = std::env::var_os("PULSE_SCREENSHOTS")
        .map(PathBuf::from)
        .map_or_else(|| scratch_dir("web-chat"), Ok)?;

    let mut node = tokio::process::Command::new("node");
    node.arg(browser_dir().join("chat_flow.mjs"))
        .current_dir(browser_dir())
        .env("PULSE_URL", &gw.url)
        .env("PULSE_PASSWORD", &password)
        .env("PULSE_APPROVER_PASSWORD", &approver_password)
        .env("PULSE_RESOURCE_ID", &web)
        .env("PULSE_FINAL_ANSWER", FINAL_ANSWER)
        .env("PULSE_SCREENSHOTS", &shots)
        .env("CHROMIUM", chromium())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let run = tokio::time::timeout(BROWSER_WITHIN, node.output())
        .await
        .context("the browser run did not finish in time")??;
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    println!("{stdout}");
    anyhow::ensure!(
        run.status.success() && stdout.contains("all steps passed"),
        "the browser path failed ({}):\n{stderr}\n{stdout}\n--- model-runner ---\n{}\n--- broker ---\n{}",
        run.status,
        runner.process.log_tail(40),
        broker.process.log_tail(20),
    );
    let shot = shots.join("chat-approval.png");
    anyhow::ensure!(shot.is_file(), "no screenshot {}", shot.display());
    println!("screenshot: {}", shot.display());

    // What the browser showed is what the gateway holds: the card's plan is the stored action,
    // planned for the admin and approved by the second admin through the card's form.
    let result = browser_result(&stdout)?;
    let action_id = result["action_id"].as_str().context("action_id")?;
    let (status, action) = get(gw, &format!("/api/actions/{action_id}"), &gw.admin_token).await?;
    assert_eq!(status, StatusCode::OK, "{action}");
    assert_eq!(
        action["plan_hash"], result["plan_hash"],
        "{action} {result}"
    );
    assert_eq!(action["resource_id"], web.as_str(), "{action}");
    assert!(
        matches!(
            action["state"].as_str(),
            Some("approved" | "executing" | "completed")
        ),
        "the card's Approve did not approve: {action}"
    );
    assert_eq!(action["decided_by_name"], "approver", "{action}");
    assert_ne!(action["requested_by"], action["decided_by"], "{action}");

    // Stop ended the stalled turn: the provider call was closed and the session is idle, with
    // no row left running.
    assert!(
        sim.abandoned_streams() >= 1,
        "Stop left the provider call open"
    );
    let session = result["session_id"].as_str().context("session_id")?;
    let (status, restored) = get(
        gw,
        &format!("/api/ai/sessions/{session}/messages"),
        &gw.admin_token,
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{restored}");
    assert_eq!(restored["session"]["control_level"], "controlled");
    assert_eq!(restored["session"]["status"], "idle", "{restored}");
    let messages = restored["messages"].as_array().cloned().unwrap_or_default();
    let of_role =
        |role: &str| -> Vec<&Value> { messages.iter().filter(|m| m["role"] == role).collect() };
    assert_eq!(of_role("user")[0]["text"], "restart web", "{restored}");
    assert!(
        messages.iter().all(|m| m["state"] != "running"),
        "{restored}"
    );
    assert!(
        of_role("error")
            .iter()
            .any(|m| m["turn_id"] == of_role("user")[1]["turn_id"]),
        "the stopped turn has no error row: {restored}"
    );
    assert!(
        of_role("tool")
            .iter()
            .any(|m| m["tool"]["name"] == "pulse_query" && m["state"] == "done"),
        "{restored}"
    );
    assert!(
        of_role("approval")
            .iter()
            .any(|m| m["card"]["plan_hash"] == result["plan_hash"]),
        "{restored}"
    );
    assert!(
        of_role("assistant").iter().any(|m| m["text"]
            .as_str()
            .unwrap_or_default()
            .contains(FINAL_ANSWER)),
        "{restored}"
    );

    runner.stop().await?;
    broker.stop().await?;
    drop(agent);
    drop(sim);
    stack.stop().await
}

/// Answers of the chat routes to a browser that may not chat, or sends what cannot be a turn:
/// each a stable code and a message, never a stream.
#[tokio::test]
async fn the_chat_routes_refuse_with_a_stable_code() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let result = async {
        let password = std::fs::read_to_string(gw.state_dir.join("admin-password"))?
            .trim()
            .to_owned();
        let mut admin = WebClient::new(&gw.url)?;
        admin.sign_in("default", "admin", &password).await?;
        let page = admin.get("/chat").await?;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(page.body.contains("Assistant chat only"), "{}", page.body);
        assert!(
            post_forms(&page.body).contains(&"/chat/send".to_owned()),
            "{}",
            page.body
        );
        let refused = [
            (
                vec![("prompt", "hi"), ("control_level", "everything")],
                StatusCode::BAD_REQUEST,
                "invalid_parameter",
            ),
            (
                vec![("prompt", "hi"), ("session_id", "not-a-session")],
                StatusCode::BAD_REQUEST,
                "invalid_parameter",
            ),
            (
                vec![("prompt", "   ")],
                StatusCode::BAD_REQUEST,
                "invalid_chat_request",
            ),
            (
                vec![
                    ("prompt", "hi"),
                    ("session_id", "0190f3c4-0000-7000-8000-000000000000"),
                ],
                StatusCode::NOT_FOUND,
                "assistant_session_not_found",
            ),
        ];
        for (fields, status, code) in refused {
            let answer = admin.submit("/chat", "/chat/send", &fields).await?;
            assert_eq!(answer.status, status, "{fields:?}: {}", answer.body);
            let body: Value = serde_json::from_str(&answer.body)?;
            assert_eq!(body["error"], code, "{fields:?}: {body}");
            assert!(
                body["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{body}"
            );
        }
        let answer = admin
            .submit(
                "/chat",
                "/chat/0190f3c4-0000-7000-8000-000000000000/stop",
                &[],
            )
            .await?;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{}", answer.body);
        assert!(
            answer.body.contains("assistant_session_not_found"),
            "{}",
            answer.body
        );
        let missing = admin.get("/chat/not-a-session").await?;
        assert_eq!(missing.status, StatusCode::BAD_REQUEST, "{}", missing.body);
        assert!(
            missing.body.contains("invalid_parameter"),
            "{}",
            missing.body
        );

        // A viewer's role lacks ai:chat: no page, no turn.
        let viewer_password = create_user(&gw, "watcher", "viewer").await?;
        let mut viewer = WebClient::new(&gw.url)?;
        viewer
            .sign_in("default", "watcher", &viewer_password)
            .await?;
        let page = viewer.get("/chat").await?;
        assert_eq!(page.status, StatusCode::FORBIDDEN, "{}", page.body);
        assert!(page.body.contains("missing_scope"), "{}", page.body);
        let answer = viewer
            .submit("/patrol", "/chat/send", &[("prompt", "restart web")])
            .await?;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{}", answer.body);
        let body: Value = serde_json::from_str(&answer.body)?;
        assert_eq!(body["error"], "missing_scope", "{body}");
        Ok(())
    }
    .await;
    gw.stop().await?;
    result
}
