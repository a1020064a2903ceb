//! The verifier's postcondition check of executed actions end to end: a real `service.restart`
//! through `relay.command` -> the real `pulse-agent-relay` -> the real `pulse-agent` supervising
//! services; then NATS request `verify.postcondition` -> the real `pulse-verifier`, which polls
//! fresh observations through the relay (never the command's output). A restarted service that
//! comes back healthy is `verified`; one that stays unhealthy although the command succeeded is
//! `still_failing` once the configured wait runs out; with the agent gone it is `inconclusive`.
//! None of the failure cases is ever `verified`.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use pulse_bus::relay_api::{RelayCommandRequest, RelayObserveRequest};
use pulse_bus::verify_api::{PostconditionReply, PostconditionRequest, VERIFY_POSTCONDITION};
use pulse_bus::{Bus, BusError};
use pulse_domain::TenantId;
use pulse_domain::action::Verification;
use pulse_domain::agent_protocol::{Receipt, ReceiptStatus, ResourceTarget};
use pulse_domain::resource::{Health, ResourceStatus, ResourceType};
use pulse_test_support::agent::{AgentStack, host_id, marker_service, sleeper_service};
use pulse_test_support::nats::bus_on;
use pulse_test_support::verifier::TestVerifier;
use pulse_test_support::wait;

const INTERVAL: Duration = Duration::from_millis(500);
/// Time for a freshly spawned binary to start, connect and report, on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(30);
/// The verifier's configured default wait in this test.
const WAIT: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(250);
/// One observation may take the verifier's 5 s bound for the agent after the wait ran out; a
/// loaded machine adds to that.
const SLACK: Duration = Duration::from_secs(8);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(40);

struct Api {
    bus: Bus,
    tenant: TenantId,
    agent: String,
}

impl Api {
    async fn new(prefix: &str, agent: &str) -> anyhow::Result<Self> {
        Ok(Self {
            bus: bus_on(prefix).await?,
            tenant: TenantId::default_tenant(),
            agent: agent.to_owned(),
        })
    }

    fn service_id(&self, name: &str) -> String {
        format!("service:{}:{name}", self.agent)
    }

    /// Runs `capability` on service `target` through the relay; the agent's receipt.
    async fn command(&self, capability: &str, target: &str) -> anyhow::Result<Receipt> {
        let action = format!("act-{}", uuid::Uuid::now_v7().simple());
        let request = RelayCommandRequest {
            agent_id: self.agent.clone(),
            action_id: action.clone(),
            lease_id: format!("lease-{action}"),
            lease_expires_at: Utc::now() + chrono::Duration::seconds(120),
            capability: capability.to_owned(),
            target: target.to_owned(),
        };
        let subject = self.bus.subjects().relay(&self.tenant, "command");
        let receipt = self
            .bus
            .request(&self.tenant, &subject, &request, REQUEST_TIMEOUT)
            .await?
            .0;
        anyhow::ensure!(
            receipt.status == ReceiptStatus::Completed,
            "{capability} {target}: {receipt:?}"
        );
        Ok(receipt)
    }

    /// Waits until the relay reaches the agent (its session is up).
    async fn wait_connected(&self) -> anyhow::Result<()> {
        let subject = self.bus.subjects().relay(&self.tenant, "observe");
        let request = RelayObserveRequest {
            agent_id: self.agent.clone(),
            target: ResourceTarget::Host,
        };
        wait::until(
            STARTUP,
            "the agent to be reachable through the relay",
            || async {
                self.bus
                    .request(&self.tenant, &subject, &request, Duration::from_secs(5))
                    .await
                    .ok()
            },
        )
        .await
        .map(drop)
    }

    async fn postcondition(
        &self,
        capability: &str,
        resource_id: &str,
        target: &str,
        executed_at: DateTime<Utc>,
        wait_ms: Option<u64>,
    ) -> Result<PostconditionReply, BusError> {
        let request = PostconditionRequest {
            action_id: uuid::Uuid::now_v7(),
            resource_id: resource_id.to_owned(),
            agent_id: self.agent.clone(),
            capability: capability.to_owned(),
            target: target.to_owned(),
            executed_at,
            wait_ms,
        };
        let subject = self
            .bus
            .subjects()
            .tenant(&self.tenant, VERIFY_POSTCONDITION);
        let reply: PostconditionReply = self
            .bus
            .request(&self.tenant, &subject, &request, REQUEST_TIMEOUT)
            .await?;
        assert_eq!(reply.action_id, request.action_id);
        Ok(reply)
    }
}

#[tokio::test]
async fn postconditions_are_judged_on_fresh_observations_and_fail_closed() -> anyhow::Result<()> {
    let stack = AgentStack::start(&[("PULSE_RELAY__MAX_REQUESTS_PER_SEC", "20")]).await?;
    let verifier = TestVerifier::start_with_postcondition_timing(
        &stack.gateway,
        &stack.dir.join("verifier"),
        WAIT,
        POLL,
        &[],
    )
    .await?;
    let reader = stack.create_token("reader", &["monitoring:read"]).await?;
    let host = host_id("postcond");
    // `web` is healthy (its marker never exists); `faulty` is unhealthy (its marker does).
    let web_marker = stack.dir.join("web-fault");
    let faulty_marker = stack.dir.join("faulty-fault");
    std::fs::write(&faulty_marker, "fault")?;
    let api = Api::new(&stack.gateway.prefix, &host).await?;
    let web = api.service_id("web");
    let faulty = api.service_id("faulty");
    let plain = api.service_id("plain");

    let (_, agent) = stack
        .spawn_command_agent(
            &host,
            INTERVAL,
            &[
                ("web.toml", marker_service("web", &web_marker)),
                ("faulty.toml", marker_service("faulty", &faulty_marker)),
                // `plain` has no health check at all.
                ("plain.toml", sleeper_service("plain")),
            ],
        )
        .await?;
    let with_logs = |e: anyhow::Error, agent_log: String| {
        anyhow::anyhow!(
            "{e}; verifier log:\n{}\nagent log:\n{agent_log}",
            verifier.process.log_tail(30),
        )
    };
    // Both services are in the inventory (the verifier reads it) in their steady health.
    let stored_web = wait::until(STARTUP, "both services stored", || async {
        let web_body = stack.resource(&reader, &web).await.ok()?;
        let faulty_body = stack.resource(&reader, &faulty).await.ok()?;
        stack.resource(&reader, &plain).await.ok()?;
        (web_body.health == Health::Healthy && faulty_body.health == Health::Unhealthy)
            .then_some(web_body)
    })
    .await
    .map_err(|e| with_logs(e, agent.log_tail(30)))?;
    api.wait_connected()
        .await
        .map_err(|e| with_logs(e, agent.log_tail(30)))?;

    // No restart happened after the claimed execution: the running process predates it, so
    // however healthy, not verified.
    let web_started: DateTime<Utc> = stored_web.details["started_at"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("a stored start time of web");
    let claimed = web_started + chrono::Duration::seconds(10);
    let no_restart = api
        .postcondition("service.restart", &web, "web", claimed, Some(1_000))
        .await?;
    assert_eq!(
        no_restart.outcome,
        Verification::StillFailing,
        "{}",
        no_restart.reason
    );
    assert!(
        no_restart.reason.contains("before the command"),
        "{}",
        no_restart.reason
    );
    assert!(no_restart.observations >= 1);
    let evidence = no_restart.evidence.as_ref().expect("evidence");
    assert_eq!(evidence.health, Health::Healthy);

    // (1) A real restart through the relay; the service comes back healthy: verified, judged on
    // a fresh observation of the new process.
    let receipt = api.command("service.restart", "web").await?;
    let asked = Instant::now();
    let verified = api
        .postcondition("service.restart", &web, "web", receipt.at, None)
        .await?;
    assert_eq!(
        verified.outcome,
        Verification::Verified,
        "{}; verifier log:\n{}",
        verified.reason,
        verifier.process.log_tail(30)
    );
    assert!(asked.elapsed() < WAIT + SLACK, "took {:?}", asked.elapsed());
    assert!(verified.reason.contains("healthy"), "{}", verified.reason);
    assert!(verified.observations >= 1);
    let evidence = verified.evidence.as_ref().expect("evidence");
    assert_eq!(evidence.resource_type, ResourceType::Service);
    assert_eq!(evidence.status, ResourceStatus::Running);
    assert_eq!(evidence.health, Health::Healthy);
    assert!(evidence.observed_at >= receipt.at);
    let started_after = evidence.readings["started_after_execution_seconds"];
    assert!(
        (-2.0..=0.0).contains(&started_after),
        "the restart's start is stamped just before its receipt: {started_after}"
    );

    // Without a health check, running for the settle time since the restart is the evidence.
    let receipt = api.command("service.restart", "plain").await?;
    let settled = api
        .postcondition("service.restart", &plain, "plain", receipt.at, None)
        .await?;
    assert_eq!(
        settled.outcome,
        Verification::Verified,
        "{}",
        settled.reason
    );
    assert!(
        settled.reason.contains("no health check"),
        "{}",
        settled.reason
    );
    let evidence = settled.evidence.as_ref().expect("evidence");
    assert_eq!(evidence.health, Health::Unknown);
    assert!(evidence.readings["uptime_seconds"] >= 2.0, "{evidence:?}");

    // (2) The command succeeds but the service stays unhealthy: still failing once the
    // configured default wait ran out, after polling.
    let receipt = api.command("service.restart", "faulty").await?;
    let asked = Instant::now();
    let failing = api
        .postcondition("service.restart", &faulty, "faulty", receipt.at, None)
        .await?;
    let took = asked.elapsed();
    assert_eq!(
        failing.outcome,
        Verification::StillFailing,
        "{}",
        failing.reason
    );
    assert!(failing.reason.contains("unhealthy"), "{}", failing.reason);
    assert!(
        took >= WAIT && took <= WAIT + SLACK,
        "the check took {took:?}"
    );
    assert!(
        failing.observations >= 3,
        "polled {} times",
        failing.observations
    );
    let evidence = failing.evidence.as_ref().expect("evidence");
    assert_eq!(evidence.status, ResourceStatus::Running);
    assert_eq!(evidence.health, Health::Unhealthy);
    // A zero wait is one fresh observation.
    let once = api
        .postcondition("service.restart", &faulty, "faulty", receipt.at, Some(0))
        .await?;
    assert_eq!(once.outcome, Verification::StillFailing, "{}", once.reason);
    assert_eq!(once.observations, 1);

    // A stop is verified by the service not running.
    let receipt = api.command("service.stop", "faulty").await?;
    let stopped = api
        .postcondition("service.stop", &faulty, "faulty", receipt.at, None)
        .await?;
    assert_eq!(
        stopped.outcome,
        Verification::Verified,
        "{}",
        stopped.reason
    );
    assert_eq!(
        stopped.evidence.as_ref().expect("evidence").status,
        ResourceStatus::Stopped
    );

    // A class without a postcondition: inconclusive at once, nothing observed.
    let unknown = api
        .postcondition("service.reload", &web, "web", Utc::now(), None)
        .await?;
    assert_eq!(unknown.outcome, Verification::Inconclusive);
    assert!(
        unknown.reason.contains("no postcondition"),
        "{}",
        unknown.reason
    );
    assert_eq!(unknown.observations, 0);
    // A resource the inventory does not hold: inconclusive.
    let missing = api
        .postcondition(
            "service.restart",
            &api.service_id("nope"),
            "nope",
            Utc::now(),
            Some(0),
        )
        .await?;
    assert_eq!(missing.outcome, Verification::Inconclusive);
    assert!(missing.reason.contains("inventory"), "{}", missing.reason);
    // Bad input is an error, not an outcome.
    match api
        .postcondition("service.restart", " ", "web", Utc::now(), None)
        .await
    {
        Err(BusError::Remote { code, .. }) => {
            assert_eq!(code, pulse_bus::ErrorCode::InvalidRequest)
        }
        other => panic!("expected invalid_request, got {other:?}"),
    }

    // (3) The agent stopped: no fresh observation can be had, so inconclusive within the wait
    // plus one observation's bound, never verified although web was healthy when it stopped.
    let receipt = api.command("service.restart", "web").await?;
    let status = agent.stop(Duration::from_secs(15)).await?;
    assert!(status.success(), "agent exited with {status}");
    let asked = Instant::now();
    let blind = api
        .postcondition("service.restart", &web, "web", receipt.at, Some(2_000))
        .await?;
    let took = asked.elapsed();
    assert_eq!(
        blind.outcome,
        Verification::Inconclusive,
        "{}",
        blind.reason
    );
    assert!(blind.reason.contains("agent"), "{}", blind.reason);
    assert_eq!(blind.observations, 0);
    assert!(blind.evidence.is_none());
    assert!(
        took <= Duration::from_secs(2) + SLACK,
        "the check took {took:?}"
    );

    println!(
        "verified in {} observation(s); still_failing after {} observations; agent stopped: inconclusive in {took:?} ({})",
        verified.observations, failing.observations, blind.reason
    );
    verifier.stop().await?;
    stack.stop().await
}
