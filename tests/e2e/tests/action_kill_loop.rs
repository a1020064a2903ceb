//! Exactly once under faults: approved actions survive the action-broker or the agent-relay
//! being killed (SIGKILL, no drain) at a random point between the approval and the agent's
//! receipt. Every action must end in exactly one terminal state, and every approved restart must
//! start the supervised service exactly once: the service appends a line per start, so a lost
//! action shows as a missing line and a repeated one as an extra line.
//!
//! The normal suite runs [`DEFAULT_REPS`] repetitions. The full loop of the acceptance (50) is
//! `PULSE_KILL_LOOP_REPS=50 cargo nextest run -p pulse-e2e --test action_kill_loop`; a failing
//! run prints its seed, and `PULSE_KILL_LOOP_SEED=<seed>` replays the same kill points.

use std::time::Duration;

use pulse_api::actions::DecisionOutcome;
use pulse_domain::action::{ActionState, Severity, Verification};
use pulse_domain::ai_settings::AutonomyLevel;
use pulse_domain::{Scope, TenantId};
use pulse_store::audit;
use pulse_test_support::action_api::{
    action_view as action, audit_rows, decision, error_code, plan_pending, post, restart_plan,
    set_autonomy_level, spawn_counter_agent, starts, user_token,
};
use pulse_test_support::action_broker::TestActionBroker;
use pulse_test_support::agent::{AgentStack, host_id};
use pulse_test_support::service::{TestGateway, signal};
use pulse_test_support::verifier::TestVerifier;
use pulse_test_support::wait;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Repetitions in the normal suite.
const DEFAULT_REPS: usize = 6;
/// The latest kill point after the approval was sent.
const MAX_KILL_DELAY_MS: u64 = 400;
const INTERVAL: Duration = Duration::from_secs(1);
/// Time for a freshly spawned binary to start and connect, on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(30);
/// Time for one action to reach its end after a kill: restart, reconnect, a re-sent command.
const SETTLE: Duration = Duration::from_secs(120);

/// The broker's and relay's bus timeouts, short so a lost request is retried soon.
const BROKER_ENV: [(&str, &str); 1] = [("PULSE_RELAY__REQUEST_TIMEOUT_MS", "3000")];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Victim {
    Broker,
    Relay,
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Plans a critical restart of `resource_id` as `requester`; the policy (mode `approval`) holds
/// it for a human.
async fn plan(gw: &TestGateway, resource_id: &str, requester: &str) -> anyhow::Result<String> {
    plan_pending(
        gw,
        requester,
        &restart_plan(resource_id, "counter", Severity::Critical),
    )
    .await
}

/// Sends the approval; the broker may be dead, so any answer is accepted here.
async fn send_approval(gw: &TestGateway, id: &str, approver: &str) -> Option<(StatusCode, Value)> {
    post(
        gw,
        &format!("/api/actions/{id}/decision"),
        approver,
        Some(json!(decision(DecisionOutcome::Approved, "restart it"))),
    )
    .await
    .ok()
}

#[tokio::test]
async fn killing_the_broker_or_the_relay_never_loses_or_repeats_an_action() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let reps = env_number("PULSE_KILL_LOOP_REPS").map_or(DEFAULT_REPS, |n| n as usize);
    let seed = env_number("PULSE_KILL_LOOP_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(7)
    });
    println!("kill loop: {reps} repetitions, seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);

    let mut stack = AgentStack::start(&[("PULSE_RELAY__REQUEST_TIMEOUT_MS", "3000")]).await?;
    let host = host_id("kill");
    let (starts_file, agent) = spawn_counter_agent(&stack, &host, INTERVAL, STARTUP).await?;

    let gw = &stack.gateway;
    let store = gw.db.store().clone();
    let tenant = TenantId::default_tenant();
    set_autonomy_level(gw, AutonomyLevel::Approval).await?;
    let alice = user_token(
        &store,
        &tenant,
        Some("alice"),
        &[Scope::ActionsPlan, Scope::MonitoringRead],
    )
    .await?;
    let bob = user_token(&store, &tenant, Some("bob"), &[Scope::ActionsApprove]).await?;
    let verifier = TestVerifier::start_with_postcondition_timing(
        gw,
        &stack.dir.join("verifier"),
        Duration::from_secs(45),
        Duration::from_millis(250),
        &[],
    )
    .await?;
    let mut broker_starts = 0;
    let mut broker = TestActionBroker::start(gw, &stack.dir.join("broker-0"), &BROKER_ENV).await?;
    let resource_id = stack
        .service_resource_id(&alice, &host, "counter", STARTUP)
        .await?;

    let mut kills = [0usize; 2];
    // verified, inconclusive
    let mut outcomes = [0usize; 2];
    for rep in 0..reps {
        let before = starts(&starts_file);
        assert_eq!(
            before,
            1 + rep,
            "rep {rep} (seed {seed}): an earlier action ran again or was lost"
        );
        let gw = &stack.gateway;
        let id = plan(gw, &resource_id, &alice).await?;
        let victim = if rng.random_bool(0.5) {
            Victim::Broker
        } else {
            Victim::Relay
        };
        let delay = Duration::from_millis(rng.random_range(0..=MAX_KILL_DELAY_MS));
        let victim_pid = match victim {
            Victim::Broker => broker.process.pid(),
            Victim::Relay => stack.relay.pid(),
        };
        // The approval and the kill race; the kill lands anywhere from before the decision
        // commits to after the receipt.
        let kill = async {
            tokio::time::sleep(delay).await;
            if let Some(pid) = victim_pid {
                signal(pid, libc::SIGKILL);
            }
        };
        let (_, first_answer) = tokio::join!(kill, send_approval(gw, &id, &bob));
        match victim {
            Victim::Broker => {
                broker_starts += 1;
                let dir = stack.dir.join(format!("broker-{broker_starts}"));
                let next = TestActionBroker::start(&stack.gateway, &dir, &BROKER_ENV).await?;
                drop(std::mem::replace(&mut broker, next));
                kills[0] += 1;
            }
            Victim::Relay => {
                stack.kill_and_restart_relay().await?;
                kills[1] += 1;
            }
        }
        let gw = &stack.gateway;

        // If the decision was lost with the broker, the human approves again: a decision on an
        // action that already left pending_approval is refused, never applied twice.
        wait::until(SETTLE, "the approval to be recorded", || async {
            let view = action(gw, &id, &alice).await?;
            if view.state != ActionState::PendingApproval {
                return Some(());
            }
            let (status, body) = send_approval(gw, &id, &bob).await?;
            if status != StatusCode::OK {
                let code = error_code(&body);
                assert!(
                    matches!(code, "action_decision_not_allowed" | "service_unavailable" | "action_executor_unavailable" | "conflict"),
                    "rep {rep}: unexpected refusal of a repeated approval: {status} {body}"
                );
            }
            None
        })
        .await
        .map_err(|e| anyhow::anyhow!("rep {rep} (seed {seed}, {victim:?} after {delay:?}, first answer {first_answer:?}): {e}"))?;

        let ended = wait::until(SETTLE, "the action to end and be verified", || async {
            let view = action(gw, &id, &alice).await?;
            let done = match view.state {
                ActionState::Completed => view.verification.is_some(),
                ActionState::Failed | ActionState::Rejected | ActionState::Expired => true,
                _ => false,
            };
            done.then_some(view)
        })
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "rep {rep} (seed {seed}, {victim:?} killed after {delay:?}): {e}; broker log:\n{}",
                broker.process.log_tail(40)
            )
        })?;
        assert_eq!(
            ended.state,
            ActionState::Completed,
            "rep {rep} (seed {seed}, {victim:?} after {delay:?}): an approved restart did not complete: {ended:?}"
        );
        // The restart ran, so the verifier never sees it failing. It may find no fresh
        // observation within its wait: after several relay kills in a row the agent's reconnect
        // pause grows to its maximum, and `inconclusive` is then the honest answer.
        match ended.verification {
            Some(Verification::Verified) => outcomes[0] += 1,
            Some(Verification::Inconclusive) => outcomes[1] += 1,
            other => panic!("rep {rep} (seed {seed}): verification {other:?}: {ended:?}"),
        }
        wait::until(SETTLE, "the service to have started once more", || async {
            (starts(&starts_file) > before).then_some(())
        })
        .await?;
        assert_eq!(
            starts(&starts_file),
            before + 1,
            "rep {rep} (seed {seed}, {victim:?} after {delay:?}): the restart ran more than once"
        );

        // Exactly one terminal transition in the action's audit.
        let rows = audit_rows(gw, &id, &alice).await?;
        let terminal = rows
            .iter()
            .filter(|r| {
                matches!(
                    r.payload["to"].as_str(),
                    Some("completed" | "failed" | "expired" | "rejected")
                )
            })
            .count();
        assert_eq!(
            terminal, 1,
            "rep {rep} (seed {seed}): terminal transitions in the audit: {rows:?}"
        );
    }
    assert_eq!(starts(&starts_file), 1 + reps, "seed {seed}");
    println!(
        "kill loop: {reps} actions, each completed once and run once ({} verified, {} inconclusive); broker killed {} times, relay {} times",
        outcomes[0], outcomes[1], kills[0], kills[1]
    );

    let tx = store.tenant_tx(&tenant).await?;
    let report = audit::verify(&tx).await?;
    tx.rollback().await?;
    assert!(report.is_intact(), "{report:?}");

    drop(agent);
    broker.stop().await.ok();
    verifier.stop().await?;
    stack.stop().await
}
