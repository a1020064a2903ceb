//! Read-only diagnostics through Pulse Assistant, end to end: the real gateway, model-runner,
//! agent-relay and two real agents (one started with `--allow-read-exec`, one without), with
//! the provider simulator as the model asking for commands:
//!
//! - `df -h` on the allowing host is answered (its tool row shows `$ df -h` and the output);
//! - `rm -rf <file>` and `sh -c 'touch <file>'` are refused by the classifier with its code, and
//!   nothing ran on the host (the file is still there, nothing was created);
//! - `df -h` on the host whose agent lacks the flag is refused with the flag's reason;
//! - the agent's exec audit holds the attempts that reached the relay.

use std::time::Duration;

use pulse_domain::resource::ResourceType;
use pulse_domain::{Scope, TenantId};
use pulse_store::read_exec_audit;
use pulse_test_support::action_api::user_token;
use pulse_test_support::agent::{AgentStack, host_id};
use pulse_test_support::patrol::{openai_chat_route, save_settings};
use pulse_test_support::provider_sim::{ProviderSim, Script, Turn};
use pulse_test_support::runner::TestModelRunner;
use pulse_test_support::sse::{Frame, SseReader};
use pulse_test_support::wait::until;
use serde_json::{Value, json};

const INTERVAL: Duration = Duration::from_millis(500);
const STARTUP: Duration = Duration::from_secs(45);
const TURN_DEADLINE: Duration = Duration::from_secs(90);

#[tokio::test]
async fn the_assistant_runs_read_only_commands_and_nothing_else() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let stack = AgentStack::start(&[]).await?;
    let gw = &stack.gateway;
    let token = stack.create_token("agent", &["agent:report"]).await?;
    let allowed = host_id("chat-exec-on");
    let mut spec = stack.agent_spec(&allowed, &token, INTERVAL)?;
    spec.allow_read_exec = true;
    let allowed_agent = stack.spawn_agent(&spec)?;
    let disabled = host_id("chat-exec-off");
    let disabled_agent = stack.spawn_agent(&stack.agent_spec(&disabled, &token, INTERVAL)?)?;

    let scratch = std::env::temp_dir().join(format!("pulse-chat-exec-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&scratch)?;
    let victim = scratch.join("x");
    std::fs::write(&victim, "keep me")?;
    let created = scratch.join("created");
    let commands = [
        (allowed.as_str(), "df -h".to_owned()),
        (allowed.as_str(), format!("rm -rf {}", victim.display())),
        (
            allowed.as_str(),
            format!("sh -c 'touch {}'", created.display()),
        ),
        (disabled.as_str(), "df -h".to_owned()),
    ];
    let mut asking = Turn::text("Let me look at the disks.");
    for (host, command) in &commands {
        asking = asking.with_tool(
            "pulse_read",
            json!({"action": "exec", "target_host": host, "command": command}),
        );
    }
    let sim = ProviderSim::start(Script::turns([
        asking,
        Turn::text("The root filesystem has room; I did not change anything."),
    ]))
    .await?;
    save_settings(
        gw,
        &openai_chat_route("gpt-4o-mini", "sk-chat-exec-2b7d", &sim.openai_base_url()),
    )
    .await?;
    let runner = TestModelRunner::start(gw, &stack.dir.join("runner"), &[]).await?;
    // Both hosts are in the inventory the Assistant reads.
    for host in [&allowed, &disabled] {
        until(STARTUP, "the host to be reported", || async {
            stack.resources(&gw.admin_token).await.ok().filter(|list| {
                list.iter().any(|r| {
                    r.resource_type == ResourceType::Host && r.id.as_str().contains(host.as_str())
                })
            })
        })
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "{e}; agent logs:\n{}\n{}",
                allowed_agent.log_tail(20),
                disabled_agent.log_tail(20)
            )
        })?;
    }

    let chat = user_token(
        gw.db.store(),
        &TenantId::default_tenant(),
        Some("operator"),
        &[Scope::AiChat],
    )
    .await?;
    let response = reqwest::Client::new()
        .post(gw.url("/api/ai/chat"))
        .bearer_auth(&chat)
        .json(&json!({"prompt": "How full are the disks?"}))
        .send()
        .await?;
    anyhow::ensure!(response.status() == 200, "chat: {}", response.status());
    let frames = SseReader::new(response)
        .frames_until(&["done", "error"], TURN_DEADLINE)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(60)))?;
    assert_eq!(
        frames.last().map(|f| f.event.as_str()),
        Some("done"),
        "{frames:?}"
    );
    let ends: Vec<Value> = frames
        .iter()
        .filter(|f| f.event == "tool_end")
        .map(Frame::json)
        .collect();
    assert_eq!(ends.len(), 4, "{frames:?}");
    let output = |i: usize| ends[i]["output"].as_str().unwrap_or_default().to_owned();

    // df -h answered, with what ran.
    assert_eq!(ends[0]["success"], true, "{}", ends[0]);
    assert!(
        output(0).contains("$ df -h") && output(0).contains("Filesystem"),
        "{}",
        output(0)
    );
    // A write and a shell: refused with the classifier's code; nothing ran.
    assert_eq!(ends[1]["success"], false, "{}", ends[1]);
    assert!(output(1).contains("exec_write_command"), "{}", output(1));
    assert_eq!(ends[2]["success"], false, "{}", ends[2]);
    assert!(output(2).contains("exec_interpreter"), "{}", output(2));
    assert_eq!(std::fs::read_to_string(&victim)?, "keep me");
    assert!(!created.exists(), "the shell ran");
    // The agent without the flag refuses every exec, saying why.
    assert_eq!(ends[3]["success"], false, "{}", ends[3]);
    assert!(
        output(3).contains("read_exec_disabled") && output(3).contains("--allow-read-exec"),
        "{}",
        output(3)
    );

    // The attempts that reached the relay are audited; the refused writes never reached it.
    let tx = gw.db.store().tenant_tx(&TenantId::default_tenant()).await?;
    let audit = read_exec_audit::list(&tx, None, 100).await?;
    drop(tx);
    let shown = format!("{audit:?}");
    assert_eq!(audit.len(), 2, "{shown}");
    assert!(
        !shown.contains("rm -rf") && !shown.contains("touch"),
        "{shown}"
    );

    runner.stop().await?;
    let _ = allowed_agent.stop(Duration::from_secs(10)).await;
    let _ = disabled_agent.stop(Duration::from_secs(10)).await;
    drop(sim);
    stack.stop().await
}
