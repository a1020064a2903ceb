//! The action lifecycle after a decision, end to end: the real gateway, action-broker, verifier,
//! agent-relay and an agent with `--enable-commands` supervising services.
//!
//! - An approval executes the fix without being asked again: the service restarts once, the
//!   verifier confirms it on a fresh observation, and the finding the action names is resolved
//!   with `fix_verified`; resubmitting the execution never re-executes.
//! - A rejection writes `fix_rejected` to the finding and touches nothing.
//! - Patrol modes: `monitor` refuses, `assisted` runs a warning fix on its own and holds a
//!   critical one, `full` without a current acknowledgement holds.
//! - A command that succeeds on a service that stays unhealthy is `still_failing`
//!   (`fix_verification_failed`, the finding stays active); an agent gone right after the
//!   command is `inconclusive` (`fix_verification_unknown`), never verified.
//! - A broker killed between approval and receipt (approved not started; executing, command not
//!   sent; executing, command run and receipt lost) leaves nothing behind: the next broker ends
//!   each action once, and each restarts the service exactly once. An executing action whose
//!   agent is unreachable stays executing, the same command is sent again, and once the lease
//!   has expired the agent refuses the command it never accepted: `failed`, nothing ran.
//!
//! Every scenario ends on an intact hash-chained audit log.

use std::time::Duration;

use chrono::Utc;
use pulse_api::actions::{ActionView, DecisionOutcome, PlanBody};
use pulse_bus::relay_api::RelayCommandRequest;
use pulse_domain::action::{self, ActionEvent, ActionState, PolicyOutcome, Verification};
use pulse_domain::agent_protocol::ReceiptStatus;
use pulse_domain::ai_settings::AutonomyLevel;
use pulse_domain::finding::{
    Category, FindingId, FindingStatus, InvestigationOutcome, LifecycleEventType, ReportedFinding,
    Severity,
};
use pulse_domain::resource::ResourceStatus;
use pulse_domain::{Scope, TenantId};
use pulse_store::actions::{StoredAction, TransitionDetail};
use pulse_store::{Store, TenantTx, audit, findings, settings};
use pulse_test_support::action_api::{
    APPROVED_EXECUTED_VERIFIED, audit_kinds, audit_rows, counter_service, decision, post,
    restart_plan, set_autonomy_level, starts, user_token, wait_starts,
};
use pulse_test_support::action_broker::{TestActionBroker, action_until};
use pulse_test_support::agent::{AgentSpec, AgentStack, host_id, marker_service};
use pulse_test_support::nats::bus_on;
use pulse_test_support::service::{TestGateway, scratch_dir};
use pulse_test_support::verifier::TestVerifier;
use pulse_test_support::wait;
use reqwest::StatusCode;
use serde_json::json;
use uuid::Uuid;

const INTERVAL: Duration = Duration::from_millis(500);
/// Time for a freshly spawned binary to start and connect, on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(30);
/// How long the verifier polls a postcondition.
const VERIFY_WAIT: Duration = Duration::from_secs(8);
/// From a decision to a recorded verification: the command, the verifier's wait, slack.
const LIFECYCLE: Duration = Duration::from_secs(60);

/// Everything one scenario runs against.
struct Lifecycle {
    stack: AgentStack,
    /// `None` once the test stopped it.
    agent: Option<pulse_test_support::service::ServiceProcess>,
    /// How the agent was started (to start it again).
    spec: AgentSpec,
    /// `None` while the test has it stopped.
    broker: Option<TestActionBroker>,
    verifier: TestVerifier,
    host: String,
    tenant: TenantId,
    /// Plans, approves and reads.
    alice: String,
}

impl Lifecycle {
    /// The stack with one agent supervising `services` (file name, definition), a broker and a
    /// verifier; waits until every service is a resource.
    async fn start(services: &[(&str, String)]) -> anyhow::Result<Self> {
        let stack = AgentStack::start(&[("PULSE_RELAY__REQUEST_TIMEOUT_MS", "10000")]).await?;
        let host = host_id("life");
        let (spec, agent) = stack.spawn_command_agent(&host, INTERVAL, services).await?;
        let broker = start_broker(&stack, "broker").await?;
        let verifier = TestVerifier::start_with_postcondition_timing(
            &stack.gateway,
            &stack.dir.join("verifier"),
            VERIFY_WAIT,
            Duration::from_millis(500),
            &[],
        )
        .await?;
        let tenant = TenantId::default_tenant();
        let alice = user_token(
            stack.gateway.db.store(),
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
        Ok(Self {
            stack,
            agent: Some(agent),
            spec,
            broker: Some(broker),
            verifier,
            host,
            tenant,
            alice,
        })
    }

    /// The stack with the counter service (counting its starts in the returned file) started
    /// once, its resource id, and Patrol mode `approval`.
    async fn with_counter() -> anyhow::Result<(Self, std::path::PathBuf, String)> {
        let starts_file = scratch_dir("lifecycle")?.join("starts.txt");
        let life = Self::start(&[("counter.toml", counter_service(&starts_file))]).await?;
        wait_starts(&starts_file, 1, STARTUP, "the service to start once").await?;
        let resource = life.service("counter").await?;
        life.mode(AutonomyLevel::Approval).await?;
        Ok((life, starts_file, resource))
    }

    fn gw(&self) -> &TestGateway {
        &self.stack.gateway
    }

    fn store(&self) -> &Store {
        self.stack.gateway.db.store()
    }

    /// The resource id of service `name` of the agent.
    async fn service(&self, name: &str) -> anyhow::Result<String> {
        self.stack
            .service_resource_id(&self.alice, &self.host, name, STARTUP)
            .await
    }

    /// Sets the Patrol mode.
    async fn mode(&self, level: AutonomyLevel) -> anyhow::Result<()> {
        set_autonomy_level(self.gw(), level).await
    }

    /// A finding on `resource_id` as an investigation would report it.
    async fn finding(&self, resource_id: &str, key: &str) -> anyhow::Result<FindingId> {
        let tx = self.store().tenant_tx(&self.tenant).await?;
        let reported = ReportedFinding {
            key: key.to_owned(),
            severity: Severity::Critical,
            category: Category::Reliability,
            resource_id: resource_id.to_owned(),
            resource_name: key.to_owned(),
            resource_type: "service".to_owned(),
            title: format!("{key} on {resource_id}"),
            description: "the service stopped answering".to_owned(),
            recommendation: "restart the service".to_owned(),
            evidence: "health=unhealthy".to_owned(),
            impact: String::new(),
        };
        let outcome = findings::report(&tx, &reported, None, Utc::now()).await?;
        tx.commit().await?;
        Ok(outcome.finding.finding.id)
    }

    async fn stored_finding(&self, id: FindingId) -> anyhow::Result<findings::StoredFinding> {
        let tx = self.store().tenant_tx(&self.tenant).await?;
        let stored = findings::get(&tx, id).await?;
        drop(tx);
        stored.ok_or_else(|| anyhow::anyhow!("finding {id} is gone"))
    }

    /// Plans a restart of `target` on `resource_id`; the planned action.
    async fn plan(
        &self,
        resource_id: &str,
        target: &str,
        severity: action::Severity,
        finding: Option<FindingId>,
    ) -> anyhow::Result<ActionView> {
        let body = PlanBody {
            finding_id: finding,
            ..restart_plan(resource_id, target, severity)
        };
        Ok(self.gw().client_as(&self.alice)?.plan_action(&body).await?)
    }

    async fn decide(&self, id: &str, outcome: DecisionOutcome) -> anyhow::Result<ActionView> {
        let body = decision(outcome, "looked at the evidence");
        Ok(self
            .gw()
            .client_as(&self.alice)?
            .decide_action(id, &body)
            .await?)
    }

    /// A finding `key` on `resource_id`, a critical restart of `target` planned for it, and
    /// the human's approval; the finding and the action id.
    async fn approved_fix(
        &self,
        resource_id: &str,
        target: &str,
        key: &str,
    ) -> anyhow::Result<(FindingId, String)> {
        let finding = self.finding(resource_id, key).await?;
        let planned = self
            .plan(
                resource_id,
                target,
                action::Severity::Critical,
                Some(finding),
            )
            .await?;
        let id = id_of(&planned);
        self.decide(&id, DecisionOutcome::Approved).await?;
        Ok((finding, id))
    }

    /// Waits for the action's verification.
    async fn verified(&self, id: &str) -> anyhow::Result<StoredAction> {
        action_until(
            self.store(),
            &self.tenant,
            Uuid::parse_str(id)?,
            LIFECYCLE,
            &format!("action {id} to be verified"),
            |a| a.verification.is_some() || a.state == ActionState::Failed,
        )
        .await
    }

    async fn audit_intact(&self) -> anyhow::Result<()> {
        let tx = self.store().tenant_tx(&self.tenant).await?;
        let report = audit::verify(&tx).await?;
        drop(tx);
        anyhow::ensure!(report.is_intact(), "audit chain broken: {report:?}");
        Ok(())
    }

    async fn stop(self) -> anyhow::Result<()> {
        if let Some(broker) = self.broker {
            broker.stop().await?;
        }
        self.verifier.stop().await?;
        drop(self.agent);
        self.stack.stop().await
    }
}

/// The action-broker, logging under `<stack dir>/<name>`.
async fn start_broker(stack: &AgentStack, name: &str) -> anyhow::Result<TestActionBroker> {
    let wait_ms = VERIFY_WAIT.as_millis().to_string();
    TestActionBroker::start(
        &stack.gateway,
        &stack.dir.join(name),
        &[
            ("PULSE_VERIFY__POSTCONDITION_WAIT_MS", wait_ms.as_str()),
            ("PULSE_RELAY__REQUEST_TIMEOUT_MS", "10000"),
        ],
    )
    .await
}

/// Approves pending action `id` as `user:bob` directly in the store (no broker sees it).
async fn approve_in_store(tx: &TenantTx, id: Uuid) -> anyhow::Result<StoredAction> {
    let pending = pulse_store::actions::get(tx, id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("action {id} missing"))?;
    Ok(pulse_store::actions::transition(
        tx,
        &pending,
        ActionEvent::Approve,
        "user:bob",
        TransitionDetail {
            reason: Some("go".to_owned()),
            decided_by: Some("user:bob".to_owned()),
            ..Default::default()
        },
    )
    .await?)
}

/// Starts the execution of approved `action` with `lease` directly in the store, as a broker
/// does before it sends the command.
async fn start_in_store(
    tx: &TenantTx,
    action: &StoredAction,
    lease: (String, chrono::DateTime<Utc>),
) -> anyhow::Result<StoredAction> {
    Ok(pulse_store::actions::transition(
        tx,
        action,
        ActionEvent::StartExecution,
        "user:bob",
        TransitionDetail {
            lease: Some(lease),
            ..Default::default()
        },
    )
    .await?)
}

fn id_of(action: &ActionView) -> String {
    action.plan.action_id.to_string()
}

fn last_event(finding: &findings::StoredFinding) -> Option<LifecycleEventType> {
    finding.finding.lifecycle.last().map(|e| e.event_type)
}

#[tokio::test]
async fn decisions_execute_verify_and_write_the_fix_outcome() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let (life, starts_file, resource) = Lifecycle::with_counter().await?;

    // Approve: the reply does not wait; the restart runs once and is verified; the finding is
    // resolved with fix_verified.
    let finding = life.finding(&resource, "counter-down").await?;
    let planned = life
        .plan(
            &resource,
            "counter",
            action::Severity::Critical,
            Some(finding),
        )
        .await?;
    assert_eq!(planned.state, ActionState::PendingApproval, "{planned:?}");
    assert_eq!(planned.finding_id, Some(finding));
    let id = id_of(&planned);
    let decided = life.decide(&id, DecisionOutcome::Approved).await?;
    assert_eq!(decided.state, ActionState::Approved, "{decided:?}");
    let action = life.verified(&id).await?;
    assert_eq!(action.state, ActionState::Completed, "{action:?}");
    assert_eq!(
        action.verification,
        Some(Verification::Verified),
        "{action:?}"
    );
    assert_eq!(starts(&starts_file), 2, "the approved restart ran once");
    let stored = life.stored_finding(finding).await?;
    assert_eq!(stored.finding.status, FindingStatus::Resolved);
    assert!(stored.finding.auto_resolved);
    assert!(stored.finding.resolve_reason.contains(&id), "{stored:?}");
    assert_eq!(
        stored.finding.investigation_outcome,
        Some(InvestigationOutcome::FixVerified)
    );
    assert_eq!(last_event(&stored), Some(LifecycleEventType::FixVerified));
    let view = life.gw().client_as(&life.alice)?.action(&id).await?;
    assert_eq!(view.verification, Some(Verification::Verified), "{view:?}");
    assert!(view.verification_reason.is_some(), "{view:?}");
    assert!(view.verified_at.is_some(), "{view:?}");
    // Resubmission never re-executes.
    let (status, body) = post(
        life.gw(),
        &format!("/api/actions/{id}/execute"),
        &life.alice,
        None,
    )
    .await?;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "action_execution_final");
    let trail = audit_rows(life.gw(), &id, &life.alice).await?;
    assert_eq!(audit_kinds(&trail), APPROVED_EXECUTED_VERIFIED);

    // Reject: fix_rejected on the finding, which stays active; nothing runs.
    let second = life.finding(&resource, "counter-slow").await?;
    let planned = life
        .plan(
            &resource,
            "counter",
            action::Severity::Critical,
            Some(second),
        )
        .await?;
    let rejected = life
        .decide(&id_of(&planned), DecisionOutcome::Rejected)
        .await?;
    assert_eq!(rejected.state, ActionState::Rejected, "{rejected:?}");
    let stored = life.stored_finding(second).await?;
    assert_eq!(stored.finding.status, FindingStatus::Active);
    assert_eq!(
        stored.finding.investigation_outcome,
        Some(InvestigationOutcome::FixRejected)
    );
    assert_eq!(last_event(&stored), Some(LifecycleEventType::FixRejected));

    // Monitor executes nothing: the plan is refused.
    life.mode(AutonomyLevel::Monitor).await?;
    let planned = life
        .plan(&resource, "counter", action::Severity::Warning, None)
        .await?;
    assert_eq!(planned.state, ActionState::Rejected, "{planned:?}");
    assert_eq!(planned.plan.policy_decision.outcome, PolicyOutcome::Refused);

    // Assisted: a warning fix runs on its own; a critical one waits for a human.
    life.mode(AutonomyLevel::Assisted).await?;
    let warning = life
        .plan(&resource, "counter", action::Severity::Warning, None)
        .await?;
    assert_eq!(warning.state, ActionState::Approved, "{warning:?}");
    let critical = life
        .plan(&resource, "counter", action::Severity::Critical, None)
        .await?;
    assert_eq!(critical.state, ActionState::PendingApproval, "{critical:?}");
    let auto = life.verified(&id_of(&warning)).await?;
    assert_eq!(auto.state, ActionState::Completed, "{auto:?}");
    assert!(!auto.human_approved);
    assert_eq!(
        starts(&starts_file),
        3,
        "the auto-authorized restart ran once"
    );

    // Full without a current acknowledgement (stored, as after an acknowledgement text
    // change): like approval, everything waits.
    let tx = life.store().tenant_tx(&life.tenant).await?;
    let current = settings::get(&tx, true).await?;
    settings::put(
        &tx,
        current.version,
        &json!({"autonomy_level": "full"}),
        "user:ops",
    )
    .await?;
    tx.commit().await?;
    let held = life
        .plan(&resource, "counter", action::Severity::Warning, None)
        .await?;
    assert_eq!(held.state, ActionState::PendingApproval, "{held:?}");
    assert_eq!(
        json!(held.plan.policy_decision.reason_codes),
        json!(["autopilot_not_acknowledged"])
    );

    // Nothing else ran: the critical and the held plans still wait.
    let tx = life.store().tenant_tx(&life.tenant).await?;
    for id in [id_of(&critical), id_of(&held)] {
        let stored = pulse_store::actions::get(&tx, Uuid::parse_str(&id)?).await?;
        assert_eq!(
            stored.map(|a| a.state),
            Some(ActionState::PendingApproval),
            "{id}"
        );
    }
    drop(tx);
    assert_eq!(starts(&starts_file), 3);
    life.audit_intact().await?;
    life.stop().await
}

#[tokio::test]
async fn a_fix_that_does_not_hold_is_never_verified() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let dir = scratch_dir("lifecycle")?;
    // The marker makes the service's health check fail, before and after any restart.
    let marker = dir.join("fault");
    std::fs::write(&marker, "fault")?;
    let starts_file = dir.join("starts.txt");
    let life = Lifecycle::start(&[
        ("faulty.toml", marker_service("faulty", &marker)),
        ("counter.toml", counter_service(&starts_file)),
    ])
    .await?;
    life.mode(AutonomyLevel::Approval).await?;

    // The command succeeds; the service stays unhealthy: still_failing, the finding stays
    // active with fix_verification_failed.
    let faulty = life.service("faulty").await?;
    let (finding, id) = life
        .approved_fix(&faulty, "faulty", "faulty-unhealthy")
        .await?;
    let action = life.verified(&id).await?;
    assert_eq!(action.state, ActionState::Completed, "{action:?}");
    assert_eq!(
        action.verification,
        Some(Verification::StillFailing),
        "{action:?}"
    );
    let stored = life.stored_finding(finding).await?;
    assert_eq!(stored.finding.status, FindingStatus::Active);
    assert_eq!(
        stored.finding.investigation_outcome,
        Some(InvestigationOutcome::FixVerificationFailed)
    );
    assert_eq!(
        last_event(&stored),
        Some(LifecycleEventType::FixVerificationFailed)
    );

    // The agent goes away right after the command completed: no fresh observation can
    // confirm the restart, so the fix is inconclusive and the finding stays active.
    let counter_id = life.service("counter").await?;
    wait::until(STARTUP, "the counter to start", || async {
        (starts(&starts_file) >= 1).then_some(())
    })
    .await?;
    let (finding, id) = life
        .approved_fix(&counter_id, "counter", "counter-down")
        .await?;
    action_until(
        life.store(),
        &life.tenant,
        Uuid::parse_str(&id)?,
        LIFECYCLE,
        "the restart to complete",
        |a| a.state != ActionState::Approved && a.state != ActionState::Executing,
    )
    .await?;
    let mut life = life;
    drop(life.agent.take());
    let action = life.verified(&id).await?;
    assert_eq!(action.state, ActionState::Completed, "{action:?}");
    assert_eq!(
        action.verification,
        Some(Verification::Inconclusive),
        "{action:?}"
    );
    let stored = life.stored_finding(finding).await?;
    assert_eq!(stored.finding.status, FindingStatus::Active);
    assert_eq!(
        stored.finding.investigation_outcome,
        Some(InvestigationOutcome::FixVerificationUnknown)
    );
    life.audit_intact().await?;
    life.stop().await
}

#[tokio::test]
async fn actions_interrupted_by_a_broker_crash_end_once_and_run_once() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let (mut life, starts_file, resource) = Lifecycle::with_counter().await?;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let planned = life
            .plan(&resource, "counter", action::Severity::Critical, None)
            .await?;
        ids.push(Uuid::parse_str(&id_of(&planned))?);
    }
    // The broker dies (SIGKILL) and leaves the three actions where a crash can: approved but
    // not started; executing with the command not sent; executing with the command run by the
    // agent and its receipt lost.
    drop(life.broker.take());
    let tx = life.store().tenant_tx(&life.tenant).await?;
    let mut leases = Vec::new();
    for (n, id) in ids.iter().enumerate() {
        let mut action = approve_in_store(&tx, *id).await?;
        if n > 0 {
            let lease = (
                format!("lease-{}", Uuid::now_v7()),
                Utc::now() + chrono::Duration::minutes(2),
            );
            leases.push(lease.clone());
            action = start_in_store(&tx, &action, lease).await?;
        }
        assert!(!action.state.is_terminal());
    }
    tx.commit().await?;
    let bus = bus_on(&life.gw().prefix).await?;
    let (lease_id, lease_expires_at) = leases[1].clone();
    let receipt = bus
        .request(
            &life.tenant,
            &bus.subjects().relay(&life.tenant, "command"),
            &RelayCommandRequest {
                agent_id: life.host.clone(),
                action_id: ids[2].to_string(),
                lease_id,
                lease_expires_at,
                capability: "service.restart".to_owned(),
                target: "counter".to_owned(),
            },
            Duration::from_secs(20),
        )
        .await?;
    assert_eq!(receipt.0.status, ReceiptStatus::Completed, "{receipt:?}");
    wait_starts(&starts_file, 2, STARTUP, "the lost-receipt restart").await?;

    // A new broker takes all three up from the store.
    life.broker = Some(start_broker(&life.stack, "broker-2").await?);
    for id in &ids {
        let action = life.verified(&id.to_string()).await?;
        assert_eq!(action.state, ActionState::Completed, "{action:?}");
        assert_eq!(
            action.verification,
            Some(Verification::Verified),
            "{action:?}"
        );
    }
    let replayed = pulse_test_support::action_broker::action_until(
        life.store(),
        &life.tenant,
        ids[2],
        STARTUP,
        "the lost receipt",
        |a| a.result.is_some(),
    )
    .await?;
    assert_eq!(
        replayed.result.as_ref().map(|r| &r["replayed"]),
        Some(&json!(true)),
        "{replayed:?}"
    );
    // Each approved action restarted the service exactly once.
    assert_eq!(starts(&starts_file), 4);
    let tx = life.store().tenant_tx(&life.tenant).await?;
    for id in &ids {
        let trail = pulse_store::actions::audit_trail(&tx, *id).await?;
        let count = |kind: &str| trail.iter().filter(|r| r.kind == kind).count();
        assert_eq!(count("action.executing"), 1, "{id}");
        assert_eq!(count("action.completed"), 1, "{id}");
        assert_eq!(count("action.verification"), 1, "{id}");
    }
    drop(tx);
    life.audit_intact().await?;
    life.stop().await
}

#[tokio::test]
async fn an_unreachable_agent_keeps_the_action_executing_until_its_lease_answers()
-> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let (mut life, starts_file, resource) = Lifecycle::with_counter().await?;
    let planned = life
        .plan(&resource, "counter", action::Severity::Critical, None)
        .await?;
    let id = Uuid::parse_str(&id_of(&planned))?;

    // The broker dies right after `executing` committed with a short lease, and the agent is
    // gone too.
    drop(life.broker.take());
    drop(life.agent.take());
    let lease_expires_at = Utc::now() + chrono::Duration::seconds(3);
    let tx = life.store().tenant_tx(&life.tenant).await?;
    let approved = approve_in_store(&tx, id).await?;
    start_in_store(
        &tx,
        &approved,
        (format!("lease-{}", Uuid::now_v7()), lease_expires_at),
    )
    .await?;
    tx.commit().await?;

    // A new broker keeps sending the command; without the agent the action stays executing,
    // also past its lease.
    life.broker = Some(start_broker(&life.stack, "broker-2").await?);
    wait::until(
        Duration::from_secs(10),
        "the lease to have expired",
        || async { (Utc::now() > lease_expires_at + chrono::Duration::seconds(1)).then_some(()) },
    )
    .await?;
    let tx = life.store().tenant_tx(&life.tenant).await?;
    let waiting = pulse_store::actions::get(&tx, id).await?;
    drop(tx);
    assert_eq!(
        waiting.map(|a| a.state),
        Some(ActionState::Executing),
        "an action whose receipt is unknown ended while the agent was away"
    );

    // The agent is back: it refuses the expired lease of a command it never accepted.
    life.agent = Some(life.stack.spawn_agent(&life.spec)?);
    let ended = action_until(
        life.store(),
        &life.tenant,
        id,
        LIFECYCLE,
        "the action to end",
        |a| a.state.is_terminal(),
    )
    .await?;
    assert_eq!(ended.state, ActionState::Failed, "{ended:?}");
    assert!(
        ended
            .decision_reason
            .as_deref()
            .is_some_and(|r| r.contains("expired")),
        "{ended:?}"
    );
    assert_eq!(ended.verification, None, "a failed action is not verified");
    wait::until(STARTUP, "the agent to report again", || async {
        let list = life.stack.resources(&life.alice).await.ok()?;
        list.iter()
            .any(|r| {
                r.agent_id == life.host
                    && r.name == "counter"
                    && r.status == ResourceStatus::Running
            })
            .then_some(())
    })
    .await?;
    // The restarted agent started its service once on its own; the command never ran.
    assert_eq!(starts(&starts_file), 2);
    life.audit_intact().await?;
    life.stop().await
}
