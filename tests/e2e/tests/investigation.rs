//! Patrol investigation end to end: a real `pulse-agent` (commands enabled) supervises a
//! failing `web` beside a healthy `db`; the real gateway, scheduler, model-runner,
//! action-broker, relay and verifier run with the provider simulator (`sim:diligent`) as the
//! model.
//!
//! - Patrol mode `monitor`: the Watch run finds the fault, the dispatcher sees the committed
//!   run and skips the finding (`monitor_mode`); no investigation and no action exist.
//! - Patrol mode `approval`: the next Watch run reconfirms the finding, one investigation runs
//!   (reads, `patrol_action_capabilities`, one `patrol_propose_action`), and exactly one
//!   `service.restart` on `web`, linked to the finding, waits in `pending_approval`, requested by
//!   `patrol:investigation`. The `InvestigationRecord` is stored with the proposal (no params),
//!   the tools used, the evidence and the action reference, and `GET /findings/{id}` shows it.
//!   The healthy neighbour gets no investigation and the service was never restarted.
//! - A runner lost mid-investigation (an attempt held under a lapsed lease): the running
//!   model-runner takes it over. One whose proposal was already submitted ends with that action
//!   (no second plan); one taken over too often ends `runner_lost` without asking the model;
//!   any other runs again to its record.

use std::time::Duration;

use pulse_bus::actions_api::{ActionCapabilitiesReply, ActionCapabilitiesRequest};
use pulse_bus::{ActionBrokerClient, ClientError, ErrorCode};
use pulse_domain::TenantId;
use pulse_domain::action::ActionState;
use pulse_domain::agent_protocol::Capability;
use pulse_domain::ai_settings::AutonomyLevel;
use pulse_domain::patrol::run::{PatrolRun, RunStatus};
use pulse_store::findings::{self, ListFilter};
use pulse_store::investigations::{self, InvestigationStatus};
use pulse_store::{Store, actions};
use pulse_test_support::action_broker::TestActionBroker;
use pulse_test_support::agent::{
    AgentStack, SLEEP_COMMAND, counting_command, marker_service_running, write_service,
};
use pulse_test_support::nats::bus_on;
use pulse_test_support::patrol::{full_run, openai_route, save_settings};
use pulse_test_support::provider_sim::{ProviderSim, Script, preflight_reply};
use pulse_test_support::runner::TestModelRunner;
use pulse_test_support::scheduler::TestScheduler;
use pulse_test_support::verifier::TestVerifier;
use pulse_test_support::wait;
use serde_json::json;

const KEY: &str = "sk-investigation-7d2f0c1a";
const INTERVAL: Duration = Duration::from_millis(500);
/// Time for binaries to start, connect and report on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(45);
const RUN_DEADLINE: Duration = Duration::from_secs(60);
const INVESTIGATION_DEADLINE: Duration = Duration::from_secs(90);

async fn set_mode(
    stack: &AgentStack,
    sim: &ProviderSim,
    mode: AutonomyLevel,
) -> anyhow::Result<()> {
    let mut settings = openai_route("sim:diligent", KEY, &sim.openai_base_url());
    settings.autonomy_level = Some(Some(mode));
    save_settings(&stack.gateway, &settings).await
}

/// Requests a full run and waits for its terminal record.
async fn run(stack: &AgentStack, runner: &TestModelRunner) -> anyhow::Result<PatrolRun> {
    full_run(&stack.gateway, RUN_DEADLINE)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(60)))
}

/// How many rows `table` (`investigations` or `actions`) holds for the default tenant.
async fn count(store: &Store, table: &str) -> anyhow::Result<i64> {
    let tx = store.tenant_tx(&TenantId::default_tenant()).await?;
    let row = tx
        .client()
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await?;
    Ok(row.get(0))
}

async fn investigation_count(store: &Store) -> anyhow::Result<i64> {
    count(store, "investigations").await
}

async fn action_count(store: &Store) -> anyhow::Result<i64> {
    count(store, "actions").await
}

/// The runner id of the lost runner in the takeover steps.
const LOST_RUNNER: &str = "model-runner-lost";

/// A `running` attempt of `finding` as a runner that died leaves it: held by [`LOST_RUNNER`]
/// with a lapsed lease, `takeovers` times taken over already.
async fn lost_attempt(
    gw: &pulse_test_support::service::TestGateway,
    finding: pulse_domain::finding::FindingId,
    started_at: chrono::DateTime<chrono::Utc>,
    takeovers: i32,
) -> anyhow::Result<uuid::Uuid> {
    let id = uuid::Uuid::now_v7();
    let tx = gw.db.store().tenant_tx(&TenantId::default_tenant()).await?;
    let attempt = investigations::gate_state(&tx, finding).await?.attempts + 1;
    assert!(
        investigations::begin(&tx, id, finding, uuid::Uuid::now_v7(), attempt, started_at).await?
    );
    assert!(investigations::hold(&tx, id, LOST_RUNNER, Duration::from_secs(30)).await?);
    tx.commit().await?;
    gw.db
        .owner_client()
        .await?
        .execute(
            "UPDATE investigations SET lease_expires_at = now() - interval '1 second',
                    takeovers = $2
             WHERE id = $1",
            &[&id, &takeovers],
        )
        .await?;
    Ok(id)
}

/// How often attempt `id` was taken over.
async fn takeovers(
    gw: &pulse_test_support::service::TestGateway,
    id: uuid::Uuid,
) -> anyhow::Result<i32> {
    let row = gw
        .db
        .owner_client()
        .await?
        .query_one("SELECT takeovers FROM investigations WHERE id = $1", &[&id])
        .await?;
    Ok(row.get(0))
}

/// Waits for attempt `id` to end.
async fn ended_attempt(
    store: &Store,
    runner: &TestModelRunner,
    id: uuid::Uuid,
) -> anyhow::Result<investigations::StoredInvestigation> {
    wait::until(
        INVESTIGATION_DEADLINE,
        "the lost runner's attempt to end",
        || async {
            let tx = store.tenant_tx(&TenantId::default_tenant()).await.ok()?;
            investigations::get(&tx, id)
                .await
                .ok()
                .flatten()
                .filter(|i| i.status != InvestigationStatus::Running)
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(80)))
}

#[tokio::test]
async fn a_failing_service_is_investigated_into_one_pending_restart_only_outside_monitor_mode()
-> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let stack = AgentStack::start(&[]).await?;
    let gw = &stack.gateway;
    let store = gw.db.store();
    let scheduler = TestScheduler::start(gw, &stack.dir.join("scheduler"), &[]).await?;
    let verifier = TestVerifier::start(gw, &stack.dir.join("verifier"), &[]).await?;
    let broker = TestActionBroker::start(gw, &stack.dir.join("broker"), &[]).await?;
    let sim =
        ProviderSim::start(Script::turns([]).with_tool_offer_reply(preflight_reply())).await?;

    let token = stack
        .create_token("agent-exec", &["agent:report", "agent:exec"])
        .await?;
    let host = pulse_test_support::agent::host_id("invest");
    let mut spec = stack.agent_spec(&host, &token, INTERVAL)?;
    spec.enable_commands = true;
    let starts = spec.state_dir.join("web.starts");
    for (name, command) in [
        ("web", counting_command(&starts)),
        ("db", SLEEP_COMMAND.to_owned()),
    ] {
        write_service(
            &spec.services_dir,
            &format!("{name}.toml"),
            &marker_service_running(
                name,
                &command,
                &spec.state_dir.join(format!("{name}.fault")),
            ),
        )?;
    }
    let agent = stack.spawn_agent(&spec)?;
    set_mode(&stack, &sim, AutonomyLevel::Monitor).await?;
    let runner = TestModelRunner::start(gw, &stack.dir.join("runner"), &[]).await?;
    let web = format!("service:{host}:web");
    let db = format!("service:{host}:db");
    let health_of = |id: String, health: &'static str| {
        let stack = &stack;
        let agent = &agent;
        async move {
            stack
                .wait_health(&gw.admin_token, &id, health, STARTUP)
                .await
                .map_err(|e| anyhow::anyhow!("{e}; agent log:\n{}", agent.log_tail(30)))
        }
    };
    health_of(web.clone(), "healthy").await?;
    health_of(db.clone(), "healthy").await?;
    std::fs::write(spec.state_dir.join("web.fault"), "fault")?;
    health_of(web.clone(), "unhealthy").await?;
    let starts_before = std::fs::read_to_string(&starts)?.lines().count();

    // 1. Monitor: the run finds the fault; the dispatcher skips it.
    let first = run(&stack, &runner).await?;
    assert_eq!(first.status, RunStatus::IssuesFound, "{first:?}");
    let finding = {
        let tx = store.tenant_tx(&TenantId::default_tenant()).await?;
        let listed = findings::list(&tx, ListFilter::Active, None, chrono::Utc::now()).await?;
        assert_eq!(listed.len(), 1, "{listed:?}");
        listed[0].finding.clone()
    };
    assert_eq!(finding.resource_id, web);
    wait::until(
        INVESTIGATION_DEADLINE,
        "the dispatcher to skip in monitor mode",
        || async {
            runner
                .process
                .log_tail(400)
                .contains("monitor_mode")
                .then_some(())
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(60)))?;
    assert_eq!(investigation_count(store).await?, 0);
    assert_eq!(action_count(store).await?, 0);

    // 2. Approval: the next run reconfirms it and one investigation proposes a restart.
    set_mode(&stack, &sim, AutonomyLevel::Approval).await?;
    let second = run(&stack, &runner).await?;
    assert_eq!(second.status, RunStatus::IssuesFound, "{second:?}");
    assert_eq!(second.finding_ids, [finding.id.as_hex()], "{second:?}");
    let attempt = wait::until(
        INVESTIGATION_DEADLINE,
        "the investigation to end",
        || async {
            let tx = store.tenant_tx(&TenantId::default_tenant()).await.ok()?;
            let list = investigations::list_for_finding(&tx, finding.id, 10)
                .await
                .ok()?;
            list.into_iter()
                .find(|i| i.status != InvestigationStatus::Running)
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(80)))?;
    let record = attempt
        .record
        .clone()
        .expect("an ended attempt has its record");
    assert_eq!(
        record.status,
        InvestigationStatus::Completed,
        "{record:?}\n{}",
        runner.process.log_tail(80)
    );
    assert_eq!(record.finding_id, finding.id.as_hex());
    assert_eq!(record.subject.resource_id, web);
    let proposal = record.proposal.clone().ok_or_else(|| {
        let last = sim
            .requests()
            .last()
            .map(|r| r.body.to_string())
            .unwrap_or_default();
        anyhow::anyhow!(
            "no proposal: {record:?}\nlast request: {last}\n{}",
            broker.process.log_tail(40)
        )
    })?;
    assert_eq!(proposal.capability_name, "service.restart");
    assert_eq!(proposal.resource_id, web);
    for tool in [
        "pulse_query",
        "patrol_action_capabilities",
        "patrol_propose_action",
    ] {
        assert!(
            record.tools_used.iter().any(|t| t == tool),
            "{tool}: {record:?}"
        );
    }
    assert!(!record.evidence.is_empty(), "{record:?}");
    assert!(
        record.conclusion.contains("Confidence"),
        "{}",
        record.conclusion
    );
    assert_eq!(record.confidence, "medium");
    let reference = record.action.clone().expect("the action reference");
    assert_eq!(reference.state, "pending_approval");
    assert_eq!(attempt.action_id, Some(reference.action_id));
    // Proposal params live in the action audit, not in the investigation record.
    let stored_json = serde_json::to_value(&record)?;
    assert!(stored_json.get("params").is_none() && stored_json["proposal"].get("params").is_none());

    // Exactly one action: the restart of web, pending a human, from the investigation.
    assert_eq!(action_count(store).await?, 1);
    let action = {
        let tx = store.tenant_tx(&TenantId::default_tenant()).await?;
        actions::get(&tx, reference.action_id)
            .await?
            .expect("the action")
    };
    assert_eq!(action.state, ActionState::PendingApproval);
    assert_eq!(action.plan.resource_id, web);
    assert_eq!(action.plan.capability, Capability::ServiceRestart);
    assert_eq!(action.plan.params, json!({"target": "web"}));
    assert_eq!(action.plan.requested_by, "patrol:investigation");
    assert_eq!(action.finding_id, Some(finding.id));

    // The finding API shows the record.
    let (status, answer) = gw
        .admin_json(
            reqwest::Method::GET,
            &format!("/api/ai/patrol/findings/{}", finding.id.as_hex()),
            None,
        )
        .await?;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["investigation_record"]["action"]["action_id"],
        json!(reference.action_id.to_string())
    );
    assert_eq!(
        answer["investigation_record"]["proposal"]["capability_name"],
        "service.restart"
    );

    // The healthy neighbour: no finding, no investigation; web was never restarted.
    let tx = store.tenant_tx(&TenantId::default_tenant()).await?;
    let all = findings::list(&tx, ListFilter::IncludeResolved, None, chrono::Utc::now()).await?;
    assert!(all.iter().all(|f| f.finding.resource_id != db), "{all:?}");
    drop(tx);
    assert_eq!(investigation_count(store).await?, 1);
    assert_eq!(
        std::fs::read_to_string(&starts)?.lines().count(),
        starts_before
    );

    // The catalogue translates a provider coordinate (the service name) to the canonical id
    // and fails closed on an unknown reference; it wrote nothing.
    let bus = bus_on(&gw.prefix).await?;
    let tenant = TenantId::default_tenant();
    let catalogue = ActionBrokerClient::new(bus);
    let by_name: ActionCapabilitiesReply = catalogue
        .capabilities(
            &tenant,
            &ActionCapabilitiesRequest {
                resource_id: "web".to_owned(),
            },
            Duration::from_secs(10),
        )
        .await?;
    assert_eq!(by_name.resource_id, web);
    let names: Vec<&str> = by_name
        .capabilities
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["service.restart", "service.start", "service.stop"]);
    let unknown = catalogue
        .capabilities(
            &tenant,
            &ActionCapabilitiesRequest {
                resource_id: "no-such-service".to_owned(),
            },
            Duration::from_secs(10),
        )
        .await;
    assert!(
        matches!(
            &unknown,
            Err(ClientError::Remote {
                code: ErrorCode::NotFound,
                ..
            })
        ),
        "{unknown:?}"
    );
    assert_eq!(action_count(store).await?, 1);

    // 3. A runner lost mid-investigation: its attempt's lease lapses and the running
    // model-runner's sweeper takes it over.
    // 3a. The lost runner had already submitted its proposal: the attempt ends with that
    // action, and no second plan is made.
    let submitted = lost_attempt(gw, finding.id, action.plan.planned_at, 0).await?;
    let ended = ended_attempt(store, &runner, submitted).await?;
    let record = ended.record.clone().expect("record");
    assert_eq!(record.status, InvestigationStatus::Completed, "{record:?}");
    assert_eq!(
        record.action.as_ref().map(|a| a.action_id),
        Some(reference.action_id)
    );
    assert!(record.error.contains("the proposal stands"), "{record:?}");
    assert_eq!(takeovers(gw, submitted).await?, 1);
    assert_eq!(action_count(store).await?, 1);
    // 3b. An attempt whose runners keep being lost ends `runner_lost`, not run again.
    let requests_before = sim.requests().len();
    let exhausted = lost_attempt(gw, finding.id, chrono::Utc::now(), 2).await?;
    let ended = ended_attempt(store, &runner, exhausted).await?;
    let record = ended.record.clone().expect("record");
    assert_eq!(record.status, InvestigationStatus::Failed, "{record:?}");
    assert!(record.error.starts_with("runner_lost"), "{record:?}");
    assert_eq!(takeovers(gw, exhausted).await?, 3);
    assert_eq!(action_count(store).await?, 1);
    assert_eq!(
        sim.requests().len(),
        requests_before,
        "nothing was asked of the model"
    );
    // 3c. Otherwise the attempt runs again, from the committed finding, under the taker's lease.
    let rerun = lost_attempt(gw, finding.id, chrono::Utc::now(), 0).await?;
    let ended = ended_attempt(store, &runner, rerun).await?;
    let record = ended.record.clone().expect("record");
    assert_eq!(
        record.status,
        InvestigationStatus::Completed,
        "{record:?}\n{}",
        runner.process.log_tail(60)
    );
    assert!(
        record
            .tools_used
            .iter()
            .any(|t| t == "patrol_propose_action"),
        "the model ran again: {record:?}"
    );
    assert!(sim.requests().len() > requests_before);
    assert_eq!(takeovers(gw, rerun).await?, 1);
    assert!(
        runner
            .process
            .log_tail(400)
            .contains("lost runner's investigation taken over")
    );

    runner.stop().await?;
    broker.stop().await?;
    verifier.stop().await?;
    scheduler.stop().await?;
    let _ = agent.stop(Duration::from_secs(10)).await;
    stack.stop().await
}
