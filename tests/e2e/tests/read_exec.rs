//! `pulse_read` exec end to end: the real relay and real agents (one started with
//! `--allow-read-exec`, one without), reached over NATS as the model-runner reaches them, and
//! through the model-runner's own `pulse_read` handler. A read-only command is answered; a
//! write or a shell is refused before anything runs (asserted on the filesystem); an agent
//! without the flag refuses every exec with the flag's reason; secret files are refused; and
//! every exec attempt the relay saw has its audit row.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use pulse_agent_loop::provider::ToolCall;
use pulse_agent_relay::api::{ObserveRequest, ReadRequest};
use pulse_bus::{Bus, BusError};
use pulse_domain::TenantId;
use pulse_domain::agent_protocol::{ReadOutput, ReadRequest as ReadSpec, ResourceTarget};
use pulse_domain::patrol::run::RunId;
use pulse_domain::resource::{Health, Resource, ResourceId, ResourceStatus, ResourceType};
use pulse_model_runner::tools::{RunLedger, ToolContext, read};
use pulse_store::read_exec_audit::{self, ExecOutcome};
use pulse_test_support::agent::{AgentStack, host_id};
use pulse_test_support::nats::bus_on;
use pulse_test_support::wait;
use serde_json::{Value, json};

const INTERVAL: Duration = Duration::from_secs(1);
/// Time for a freshly spawned binary to start and connect, on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(20);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(40);

struct Api {
    bus: Bus,
    tenant: TenantId,
}

impl Api {
    async fn read(&self, agent: &str, read: ReadSpec) -> Result<ReadOutput, BusError> {
        let subject = self.bus.subjects().relay(&self.tenant, "read");
        let request = ReadRequest {
            agent_id: agent.to_owned(),
            read,
            requester: Some("e2e".to_owned()),
        };
        self.bus
            .request(&self.tenant, &subject, &request, REQUEST_TIMEOUT)
            .await
            .map(|reply| reply.0.output)
    }

    async fn wait_connected(&self, agent: &str) -> anyhow::Result<()> {
        let subject = self.bus.subjects().relay(&self.tenant, "observe");
        let observe = ObserveRequest {
            agent_id: agent.to_owned(),
            target: ResourceTarget::Host,
        };
        wait::until(
            STARTUP,
            "the agent to be reachable through the relay",
            || async {
                self.bus
                    .request(&self.tenant, &subject, &observe, REQUEST_TIMEOUT)
                    .await
                    .ok()
            },
        )
        .await
        .map(drop)
    }
}

fn exec(words: &[&str]) -> ReadSpec {
    ReadSpec::Exec {
        stages: vec![words.iter().map(|w| (*w).to_owned()).collect()],
        timeout_ms: 10_000,
        max_bytes: 16 * 1024,
    }
}

fn remote(error: &BusError) -> (&str, &str) {
    match error {
        BusError::Remote { code, message } => (code.code(), message.as_str()),
        other => panic!("not a remote error: {other}"),
    }
}

fn host(agent: &str) -> Resource {
    let at = Utc::now();
    Resource {
        id: ResourceId::of(ResourceType::Host, agent, agent),
        resource_type: ResourceType::Host,
        source_id: agent.to_owned(),
        name: agent.to_owned(),
        aliases: Vec::new(),
        parent: None,
        agent_id: agent.to_owned(),
        status: ResourceStatus::Running,
        health: Health::Healthy,
        restart_count: None,
        labels: Default::default(),
        details: Value::Null,
        observed_at: at,
        received_at: at,
    }
}

fn pulse_read(arguments: Value) -> ToolCall {
    ToolCall {
        id: "call-1".to_owned(),
        name: "pulse_read".to_owned(),
        arguments,
        thought_signature: None,
    }
}

#[tokio::test]
async fn exec_runs_read_only_commands_only_on_agents_that_allow_it_and_every_attempt_is_audited()
-> anyhow::Result<()> {
    let stack = AgentStack::start(&[]).await?;
    let token = stack.create_token("agent", &["agent:report"]).await?;
    let allowed = host_id("exec-on");
    let mut spec = stack.agent_spec(&allowed, &token, INTERVAL)?;
    spec.allow_read_exec = true;
    let _allowed_agent = stack.spawn_agent(&spec)?;
    let disabled = host_id("exec-off");
    let _disabled_agent = stack.spawn_agent(&stack.agent_spec(&disabled, &token, INTERVAL)?)?;

    let api = Api {
        bus: bus_on(&stack.gateway.prefix).await?,
        tenant: TenantId::default_tenant(),
    };
    api.wait_connected(&allowed).await?;
    api.wait_connected(&disabled).await?;

    let scratch = std::env::temp_dir().join(format!("pulse-read-exec-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&scratch)?;
    let victim = scratch.join("x");
    std::fs::write(&victim, "keep me")?;
    let created = scratch.join("created");
    std::fs::write(scratch.join(".env"), "DB_PASSWORD=hunter2\n")?;
    let (victim_text, created_text) = (victim.display().to_string(), created.display().to_string());

    // Through the relay: a read-only command is answered.
    let ReadOutput::Exec {
        exit_status,
        stdout,
        ..
    } = api.read(&allowed, exec(&["df", "-h"])).await?
    else {
        panic!("not an exec answer");
    };
    assert_eq!(exit_status, Some(0));
    assert!(stdout.contains("Filesystem"), "{stdout}");

    // A write and a shell are refused by the relay's gate: nothing runs.
    let rm = api
        .read(&allowed, exec(&["rm", "-rf", &victim_text]))
        .await
        .expect_err("rm refused");
    let (code, message) = remote(&rm);
    assert_eq!(code, "invalid_request");
    assert!(message.starts_with("exec_write_command"), "{message}");
    let sh = api
        .read(
            &allowed,
            exec(&["sh", "-c", &format!("touch {created_text}")]),
        )
        .await
        .expect_err("sh refused");
    assert!(remote(&sh).1.starts_with("exec_interpreter"), "{sh}");
    assert_eq!(std::fs::read_to_string(&victim)?, "keep me");
    assert!(!created.exists());

    // Without the flag, every exec is refused with the flag's reason.
    let off = api
        .read(&disabled, exec(&["df", "-h"]))
        .await
        .expect_err("disabled");
    let (code, message) = remote(&off);
    assert_eq!(code, "agent_refused");
    assert!(
        message.contains("read_exec_disabled") && message.contains("--allow-read-exec"),
        "{message}"
    );
    // File reads need no flag, but a secret file is refused on both agents.
    for agent in [&allowed, &disabled] {
        let secret = api
            .read(
                agent,
                ReadSpec::File {
                    path: scratch.join(".env").display().to_string(),
                    max_bytes: 4096,
                },
            )
            .await
            .expect_err("secret refused");
        assert!(remote(&secret).1.contains("read_secret_path"), "{secret}");
    }

    // Through the model-runner's pulse_read, as a run calls it.
    let ctx = ToolContext {
        store: stack.gateway.db.store().clone(),
        bus: Some(api.bus.clone()),
        tenant: api.tenant.clone(),
        run_id: RunId::from_uuid(uuid::Uuid::now_v7()),
        scope: Arc::new(vec![host(&allowed), host(&disabled)]),
        backend_timeout: Duration::from_secs(20),
    };
    let ledger = RunLedger::new();
    let df = read::call(
        &ctx,
        &ledger,
        &pulse_read(json!({"action": "exec", "target_host": allowed, "command": "df -h"})),
    )
    .await;
    assert!(!df.is_error, "{}", df.content);
    let answer: Value = serde_json::from_str(&df.content)?;
    assert_eq!(answer["ran"], "$ df -h");
    assert_eq!(answer["exit_status"], 0);
    assert!(
        answer["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("Filesystem"),
        "{answer}"
    );
    // Refused by the classifier in the model-runner: nothing reaches the relay.
    let rm = read::call(
        &ctx,
        &ledger,
        &pulse_read(
            json!({"action": "exec", "target_host": allowed, "command": format!("rm -rf {victim_text}")}),
        ),
    )
    .await;
    assert!(
        rm.is_error && rm.content.starts_with("exec_write_command"),
        "{}",
        rm.content
    );
    let off = read::call(
        &ctx,
        &ledger,
        &pulse_read(json!({"action": "exec", "target_host": disabled, "command": "uptime"})),
    )
    .await;
    assert!(
        off.is_error
            && off.content.contains("$ uptime")
            && off.content.contains("--allow-read-exec"),
        "{}",
        off.content
    );
    let tail = read::call(
        &ctx,
        &ledger,
        &pulse_read(json!({"action": "find", "target_host": disabled, "path": scratch.display().to_string(), "pattern": "*"})),
    )
    .await;
    assert!(!tail.is_error, "{}", tail.content);
    assert!(tail.content.contains("/x\""), "{}", tail.content);
    assert!(ledger.unavailable().is_empty());
    assert_eq!(std::fs::read_to_string(&victim)?, "keep me");

    // One audit row per exec the relay saw, newest first; none for the model-runner's refusal.
    let tx = stack.gateway.db.store().tenant_tx(&api.tenant).await?;
    let rows = read_exec_audit::list(&tx, Some(&allowed), 50).await?;
    let seen: Vec<(&str, ExecOutcome, Option<&str>)> = rows
        .iter()
        .map(|r| (r.command.as_str(), r.outcome, r.code.as_deref()))
        .collect();
    let sh_text = format!("sh -c 'touch {created_text}'");
    let rm_text = format!("rm -rf {victim_text}");
    assert_eq!(
        seen,
        [
            ("df -h", ExecOutcome::Ran, None),
            (
                sh_text.as_str(),
                ExecOutcome::Refused,
                Some("exec_interpreter")
            ),
            (
                rm_text.as_str(),
                ExecOutcome::Refused,
                Some("exec_write_command")
            ),
            ("df -h", ExecOutcome::Ran, None),
        ]
    );
    assert_eq!(
        rows[0].requester.as_deref(),
        Some(format!("run:{}", ctx.run_id).as_str())
    );
    assert_eq!(rows[3].requester.as_deref(), Some("e2e"));
    assert_eq!(rows[0].exit_status, Some(0));
    assert!(rows[0].output_bytes > 0);
    let rows = read_exec_audit::list(&tx, Some(&disabled), 50).await?;
    let seen: Vec<(&str, ExecOutcome, Option<&str>)> = rows
        .iter()
        .map(|r| (r.command.as_str(), r.outcome, r.code.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("uptime", ExecOutcome::Refused, Some("read_exec_disabled")),
            ("df -h", ExecOutcome::Refused, Some("read_exec_disabled")),
        ]
    );
    drop(tx);

    let _ = std::fs::remove_dir_all(&scratch);
    stack.stop().await
}
