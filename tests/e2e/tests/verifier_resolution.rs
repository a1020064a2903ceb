//! The verifier's deterministic resolution check end to end: NATS request
//! `verify.resolution` -> the real `pulse-verifier` -> the inventory in Postgres -> a fresh
//! observation through the real `pulse-agent-relay` from the real `pulse-agent` supervising a
//! service. While the service's fault marker exists the fault is still present; once it is
//! removed the check confirms the fault gone; with the agent frozen or killed the check is
//! inconclusive (fail closed), within the verifier's bounded wait.

use std::time::{Duration, Instant};

use chrono::Utc;
use pulse_bus::verify_api::{ResolutionCheckReply, ResolutionCheckRequest, VERIFY_RESOLUTION};
use pulse_bus::{Bus, BusError};
use pulse_domain::TenantId;
use pulse_domain::finding::{Category, FindingId, FindingKey, VerifierOutcome};
use pulse_domain::resource::{Health, ResourceStatus, ResourceType};
use pulse_test_support::agent::host_id;
use pulse_test_support::agent::{AgentStack, marker_service, write_service};
use pulse_test_support::nats::bus_on;
use pulse_test_support::service::signal;
use pulse_test_support::verifier::TestVerifier;
use pulse_test_support::wait;

const INTERVAL: Duration = Duration::from_millis(500);
/// Time for a freshly spawned binary to start, connect and report, on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(30);
/// Longer than the verifier's own 5 s wait for the agent, so its answer always arrives.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// The verifier waits 5 s for the agent; the bus and a loaded machine add to that.
const BOUNDED: Duration = Duration::from_secs(9);

struct Verify {
    bus: Bus,
    tenant: TenantId,
}

impl Verify {
    async fn new(prefix: &str) -> anyhow::Result<Self> {
        Ok(Self {
            bus: bus_on(prefix).await?,
            tenant: TenantId::default_tenant(),
        })
    }

    async fn check(&self, key: &str, resource_id: &str) -> Result<ResolutionCheckReply, BusError> {
        let key = FindingKey::normalize(key).expect("valid key");
        let request = ResolutionCheckRequest {
            finding_id: FindingId::derive(resource_id, Category::Reliability, &key),
            key,
            resource_id: resource_id.to_owned(),
        };
        let subject = self.bus.subjects().tenant(&self.tenant, VERIFY_RESOLUTION);
        self.bus
            .request(&self.tenant, &subject, &request, REQUEST_TIMEOUT)
            .await
    }

    /// Asks until the outcome is `want`; the last reply.
    async fn until(
        &self,
        deadline: Duration,
        key: &str,
        resource_id: &str,
        want: VerifierOutcome,
    ) -> anyhow::Result<ResolutionCheckReply> {
        wait::until(
            deadline,
            &format!("{key} to be {}", want.as_str()),
            || async {
                let reply = self.check(key, resource_id).await.ok()?;
                (reply.outcome == want).then_some(reply)
            },
        )
        .await
    }
}

#[tokio::test]
async fn resolution_follows_the_fault_marker_and_fails_closed_without_the_agent()
-> anyhow::Result<()> {
    let stack = AgentStack::start(&[]).await?;
    let verifier = TestVerifier::start(&stack.gateway, &stack.dir.join("verifier"), &[]).await?;
    let agent_token = stack.create_token("agent", &["agent:report"]).await?;
    let reader = stack.create_token("reader", &["monitoring:read"]).await?;
    let host = host_id("verify");
    let spec = stack.agent_spec(&host, &agent_token, INTERVAL)?;
    let marker = spec.state_dir.join("fault-marker");
    write_service(
        &spec.services_dir,
        "sleeper.toml",
        &marker_service("sleeper", &marker),
    )?;
    // The fault is there from the start.
    std::fs::write(&marker, "fault")?;
    let service_id = format!("service:{host}:sleeper");
    let verify = Verify::new(&stack.gateway.prefix).await?;

    // Before the agent ever reported, the resource is unknown: inconclusive, not an error.
    let unknown = verify.check("service-unhealthy", &service_id).await?;
    assert_eq!(unknown.outcome, VerifierOutcome::Inconclusive);
    assert!(unknown.reason.contains("inventory"), "{}", unknown.reason);
    assert!(unknown.evidence.is_none());

    let mut agent = Some(stack.spawn_agent(&spec)?);

    // While the marker exists: still present, judged on a fresh observation.
    let asked_at = Utc::now();
    let present = verify
        .until(
            STARTUP,
            "service-unhealthy",
            &service_id,
            VerifierOutcome::StillPresent,
        )
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "{e}; verifier log:\n{}\nagent log:\n{}",
                verifier.process.log_tail(20),
                agent.as_ref().map(|a| a.log_tail(20)).unwrap_or_default()
            )
        })?;
    assert_eq!(present.resource_id, service_id);
    assert_eq!(present.key.as_str(), "service-unhealthy");
    assert!(present.reason.contains("unhealthy"), "{}", present.reason);
    let evidence = present
        .evidence
        .as_ref()
        .expect("evidence of a fresh observation");
    assert_eq!(evidence.resource_type, ResourceType::Service);
    assert_eq!(evidence.status, ResourceStatus::Running);
    assert_eq!(evidence.health, Health::Unhealthy);
    assert!(evidence.observed_at >= asked_at - chrono::Duration::seconds(1));
    assert!(evidence.observed_at <= present.checked_at + chrono::Duration::seconds(1));

    // Aliases and other keys on the same live resource.
    let loop_check = verify.check("Restart_Loop", &service_id).await?;
    assert_eq!(loop_check.key.as_str(), "restart-loop");
    assert_eq!(
        loop_check.outcome,
        VerifierOutcome::StillPresent,
        "just started, within the window: {}",
        loop_check.reason
    );
    let uptime = loop_check.evidence.as_ref().expect("evidence").readings["uptime_seconds"];
    assert!((0.0..600.0).contains(&uptime), "{uptime}");
    let backup = verify.check("backup-failed", &service_id).await?;
    assert_eq!(backup.outcome, VerifierOutcome::Inconclusive);
    assert!(backup.reason.contains("backup"), "{}", backup.reason);
    let wrong_type = verify.check("container-unhealthy", &service_id).await?;
    assert_eq!(wrong_type.outcome, VerifierOutcome::Inconclusive);
    assert!(
        wrong_type.reason.contains("app-container"),
        "{}",
        wrong_type.reason
    );
    let memory = verify.check("high-memory", &format!("host:{host}")).await?;
    assert_ne!(memory.outcome, VerifierOutcome::NotRun);
    assert!(
        memory
            .evidence
            .as_ref()
            .is_some_and(|e| e.readings.contains_key("memory_percent")),
        "{memory:?}"
    );

    // Bad input: a key without a deterministic verifier, an empty resource id.
    for (key, resource) in [("pbs-job-failed", service_id.as_str()), ("cpu-high", " ")] {
        match verify.check(key, resource).await {
            Err(BusError::Remote { code, .. }) => {
                assert_eq!(code, pulse_bus::ErrorCode::InvalidRequest, "{key}")
            }
            other => panic!("{key} {resource:?}: expected invalid_request, got {other:?}"),
        }
    }

    // Marker removed: the fresh observation shows the fault gone.
    std::fs::remove_file(&marker)?;
    let gone = verify
        .until(
            Duration::from_secs(15),
            "service-unhealthy",
            &service_id,
            VerifierOutcome::Confirmed,
        )
        .await?;
    let evidence = gone.evidence.as_ref().expect("evidence");
    assert_eq!(evidence.health, Health::Healthy);
    assert_eq!(evidence.status, ResourceStatus::Running);

    // The agent frozen (SIGSTOP): its session is up but nothing answers; the verifier stops
    // waiting after its bound and says inconclusive, and confirms again once it answers.
    let agent_pid = agent.as_ref().and_then(|a| a.pid()).expect("agent pid");
    signal(agent_pid, libc::SIGSTOP);
    let started = Instant::now();
    let frozen = verify.check("service-unhealthy", &service_id).await;
    let took = started.elapsed();
    signal(agent_pid, libc::SIGCONT);
    let frozen = frozen?;
    assert_eq!(
        frozen.outcome,
        VerifierOutcome::Inconclusive,
        "{}",
        frozen.reason
    );
    assert!(
        frozen.reason.contains("did not answer within 5 s"),
        "{}",
        frozen.reason
    );
    assert!(frozen.evidence.is_none());
    assert!(
        took >= Duration::from_secs(5) && took <= BOUNDED,
        "the frozen check took {took:?}"
    );
    verify
        .until(
            Duration::from_secs(15),
            "service-unhealthy",
            &service_id,
            VerifierOutcome::Confirmed,
        )
        .await?;

    // The agent killed: no fresh observation, so inconclusive within the bounded wait, although
    // the stored resource was healthy when it died.
    let stored = wait::until(STARTUP, "the stored service to be healthy", || async {
        let service = stack.resource(&reader, &service_id).await.ok()?;
        (service.health == Health::Healthy).then_some(service)
    })
    .await?;
    let sleep_pid = stored.details["pid"].as_u64();
    let agent_process = agent.take().expect("agent running");
    signal(agent_process.pid().expect("agent pid"), libc::SIGKILL);
    let _ = agent_process.stop(Duration::from_secs(5)).await;
    // The orphaned supervised `sleep` would otherwise outlive the test.
    if let Some(pid) = sleep_pid.and_then(|p| u32::try_from(p).ok()) {
        signal(pid, libc::SIGKILL);
    }
    let started = Instant::now();
    let blind = verify.check("service-unhealthy", &service_id).await?;
    let took = started.elapsed();
    assert_eq!(
        blind.outcome,
        VerifierOutcome::Inconclusive,
        "{}",
        blind.reason
    );
    assert!(blind.reason.contains("agent"), "{}", blind.reason);
    assert!(blind.evidence.is_none());
    assert!(took <= BOUNDED, "the check took {took:?}");

    println!(
        "still_present -> confirmed; agent killed: inconclusive in {took:?} ({})",
        blind.reason
    );
    verifier.stop().await?;
    stack.stop().await
}
