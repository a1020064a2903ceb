//! Postconditions of executed actions (ACT-07): does one fresh observation of the acted-on
//! resource show that the command had its effect? Never the command's output, never the model.
//!
//! [`judge`] is pure and fails closed: [`Judgement::Verified`] only when the observation
//! affirmatively shows the postcondition; [`Judgement::Failing`] when it shows it does not hold;
//! [`Judgement::Pending`] when this observation cannot tell yet (a reading missing, a health check
//! that has not reported since the start). The service side polls until `Verified` or its wait
//! runs out, then concludes `still_failing` on a last observation that was `Failing` and
//! `inconclusive` otherwise.
//!
//! | capability | resource | postcondition |
//! |---|---|---|
//! | `service.restart`, `service.start` | service | running, (re)started after the command, healthy |
//! | `docker.container.restart`, `docker.container.start` | app-container | the same |
//! | `service.stop`, `docker.container.stop` | service / app-container | not running (stopped or exited) |
//! | `guest.start`, `guest.reboot` | vm / system-container | running, (re)started after the command |
//! | `guest.shutdown`, `guest.stop` | vm / system-container | not running |
//! | anything else | | no postcondition: never verified |
//!
//! **Started after the command.** The start time is `details.started_at`, which supervised
//! services and containers carry, and which the connector derives for a guest from the uptime
//! Proxmox reports in the guest's own `status/current` (so on the connector's clock, like the
//! receipt). `executed_at` is when the agent accepted the command (the
//! receipt's `accepted_at`, or its time for an agent that does not send it), on the same clock as
//! the start; so a start up to [`START_SKEW_MARGIN`] before `executed_at` still counts as the
//! command's (that covers small clock adjustments and, for older agents, the spawn-to-receipt
//! gap). An earlier start means the old process is
//! still running: no restart was observed, so the postcondition does not hold. A `start` of
//! something that was already running does not verify either (nothing was started).
//!
//! **Healthy.** `healthy` counts only as a result since the start: the supervisor and Docker reset
//! health on every start, so a `healthy` of a running resource is one. `unhealthy` is failing. A
//! container whose health is `starting`, or a service with health-check results from before the
//! start and none since, is pending. A resource with no health signal at all (a container without a
//! health check, a service with no health-check result ever) is verified by running alone, once it
//! has stayed up [`NO_HEALTH_SETTLE`] since the start, so a process that dies right after
//! spawning is not verified on its first breath.

use chrono::{DateTime, Duration, Utc};
use pulse_domain::agent_protocol::Capability;
use pulse_domain::resource::{Health, ResourceStatus, ResourceType};

use crate::check::Check;
use crate::resolution::{FreshObservation, is_restarting, started_at};

/// How much earlier than the command's receipt a start may be and still be the command's.
pub const START_SKEW_MARGIN: Duration = Duration::seconds(2);
/// How long a resource without any health signal must have run since the start to verify.
pub const NO_HEALTH_SETTLE: Duration = Duration::seconds(2);

/// Seconds since the resource's current start, at the observation.
pub const UPTIME_SECONDS: &str = "uptime_seconds";
/// Seconds from the command's execution to the resource's current start (negative: before).
pub const STARTED_AFTER_EXECUTION_SECONDS: &str = "started_after_execution_seconds";

/// What a capability's command should leave behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Running, healthy, and started by the command.
    Started,
    /// Not running.
    NotRunning,
}

/// The postcondition of `capability` (a wire name) and the resource types it acts on; `None` for
/// a capability with no postcondition (unknown to this build).
pub fn postcondition(capability: &str) -> Option<(Expect, &'static [ResourceType])> {
    const SERVICE: &[ResourceType] = &[ResourceType::Service];
    const CONTAINER: &[ResourceType] = &[ResourceType::AppContainer];
    const GUEST: &[ResourceType] = &[ResourceType::Vm, ResourceType::SystemContainer];
    Some(match Capability::parse(capability)? {
        Capability::ServiceStart | Capability::ServiceRestart => (Expect::Started, SERVICE),
        Capability::ServiceStop => (Expect::NotRunning, SERVICE),
        Capability::ContainerStart | Capability::ContainerRestart => (Expect::Started, CONTAINER),
        Capability::ContainerStop => (Expect::NotRunning, CONTAINER),
        Capability::GuestStart | Capability::GuestReboot => (Expect::Started, GUEST),
        Capability::GuestShutdown | Capability::GuestStop => (Expect::NotRunning, GUEST),
    })
}

/// The reason for a capability without a postcondition.
pub fn no_postcondition(capability: &str) -> String {
    // The wire name is caller text: quoted with escapes, and only when it is short.
    if capability.len() <= 64 {
        format!("no postcondition for this class ({capability:?}), so nothing can verify it")
    } else {
        "no postcondition for this class, so nothing can verify it".to_owned()
    }
}

/// What one observation says about a postcondition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judgement {
    /// The observation shows the postcondition.
    Verified,
    /// The observation shows the postcondition does not hold.
    Failing,
    /// The observation cannot tell (yet).
    Pending,
}

/// A judgement, why, and the readings it used.
pub type PostconditionCheck = Check<Judgement>;

impl PostconditionCheck {
    fn verified(reason: impl Into<String>) -> Self {
        Self::new(Judgement::Verified, reason)
    }

    fn failing(reason: impl Into<String>) -> Self {
        Self::new(Judgement::Failing, reason)
    }

    fn pending(reason: impl Into<String>) -> Self {
        Self::new(Judgement::Pending, reason)
    }
}

/// Judges the postcondition of `capability`, executed at `executed_at`, on `fresh`.
pub fn judge(
    capability: &str,
    executed_at: DateTime<Utc>,
    fresh: &FreshObservation,
) -> PostconditionCheck {
    let Some((expect, acts_on)) = postcondition(capability) else {
        return PostconditionCheck::pending(no_postcondition(capability));
    };
    let r = &fresh.resource;
    let kind = r.resource_type;
    if !acts_on.contains(&kind) {
        let names: Vec<&str> = acts_on.iter().map(|t| t.as_str()).collect();
        return PostconditionCheck::pending(format!(
            "{capability} acts on {} resources, and this resource is a {kind}",
            names.join(" or ")
        ));
    }
    match expect {
        Expect::NotRunning => match r.status {
            ResourceStatus::Stopped | ResourceStatus::Exited => PostconditionCheck::verified(
                format!("the {kind} is {}, not running", r.status.as_str()),
            ),
            ResourceStatus::Running => {
                PostconditionCheck::failing(format!("the {kind} is still running"))
            }
            ResourceStatus::Unknown => {
                PostconditionCheck::pending(format!("the {kind}'s run state is unknown"))
            }
        },
        Expect::Started => started_check(executed_at, fresh),
    }
}

/// When the start was, relative to the command: the receipt is stamped just after the start the
/// command caused, so a start within the skew margin before it is the command's own.
fn started_phrase(after_execution: f64) -> String {
    if after_execution < 0.0 {
        format!(
            "started by the command ({:.1} s before its receipt was stamped)",
            -after_execution
        )
    } else {
        format!("started {after_execution:.1} s after the command ran")
    }
}

fn started_check(executed_at: DateTime<Utc>, fresh: &FreshObservation) -> PostconditionCheck {
    let r = &fresh.resource;
    let kind = r.resource_type;
    match r.status {
        ResourceStatus::Running => {}
        ResourceStatus::Unknown => {
            return PostconditionCheck::pending(format!("the {kind}'s run state is unknown"));
        }
        ResourceStatus::Stopped | ResourceStatus::Exited => {
            return PostconditionCheck::failing(format!(
                "the {kind} is {}, not running",
                r.status.as_str()
            ));
        }
    }
    if is_restarting(r) {
        return PostconditionCheck::failing(format!("the {kind} is restarting, not running"));
    }
    let Some(started) = started_at(r) else {
        return PostconditionCheck::pending(format!(
            "the {kind} is running but its start time is unknown, so a restart cannot be seen"
        ));
    };
    let after_execution = (started - executed_at).num_milliseconds() as f64 / 1000.0;
    let uptime = fresh.observed_at - started;
    let readings = |check: PostconditionCheck| {
        check
            .reading(STARTED_AFTER_EXECUTION_SECONDS, Some(after_execution))
            .reading(
                UPTIME_SECONDS,
                Some(uptime.num_milliseconds() as f64 / 1000.0),
            )
    };
    if started < executed_at - START_SKEW_MARGIN {
        return readings(PostconditionCheck::failing(format!(
            "the {kind} last started {:.1} s before the command ran: no (re)start after it was observed",
            -after_execution
        )));
    }
    if uptime < -START_SKEW_MARGIN {
        return readings(PostconditionCheck::pending(format!(
            "the {kind}'s start time is {:.1} s after the observation itself, so the agent's clock cannot be trusted for it",
            -(uptime.num_milliseconds() as f64 / 1000.0)
        )));
    }
    let up = uptime.num_milliseconds().max(0) as f64 / 1000.0;
    let check = match r.health {
        Health::Healthy => PostconditionCheck::verified(format!(
            "the {kind} is running and healthy, {}",
            started_phrase(after_execution)
        )),
        Health::Unhealthy => PostconditionCheck::failing(format!(
            "the {kind} is running but unhealthy since its start {up:.1} s ago"
        )),
        Health::Unknown if health_pending(fresh) => PostconditionCheck::pending(format!(
            "the {kind} is running; its health check has not reported since the start {up:.1} s ago"
        )),
        Health::Unknown if uptime < NO_HEALTH_SETTLE => PostconditionCheck::pending(format!(
            "the {kind} has no health check and has run {up:.1} s since the start, less than the {} s it must stay up",
            NO_HEALTH_SETTLE.num_seconds()
        )),
        Health::Unknown => PostconditionCheck::verified(format!(
            "the {kind} has no health check and has stayed running {up:.1} s since it {}",
            started_phrase(after_execution)
        )),
    };
    readings(check)
}

/// Health is unknown but a health check exists: a container's check is `starting`, or a service
/// has check results, none since its start (the supervisor resets health on every start).
fn health_pending(fresh: &FreshObservation) -> bool {
    let details = &fresh.resource.details;
    match fresh.resource.resource_type {
        ResourceType::AppContainer => details
            .get("health_status")
            .is_some_and(|status| !status.is_null() && status.as_str() != Some("none")),
        _ => details
            .get("health_log")
            .and_then(|log| log.as_array())
            .is_some_and(|log| !log.is_empty()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use pulse_domain::resource::{ObservedResource, ResourceId};
    use serde_json::json;
    use std::collections::BTreeMap;

    /// When the command's receipt was stamped.
    fn executed() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap()
    }

    /// An observation `observed_after` s after the command, of a resource started `started_after`
    /// s after it (`None`: no start time).
    fn obs(
        kind: ResourceType,
        status: ResourceStatus,
        health: Health,
        started_after: Option<f64>,
        observed_after: f64,
        mut details: serde_json::Value,
    ) -> FreshObservation {
        let ms = |s: f64| Duration::milliseconds((s * 1000.0) as i64);
        if let Some(s) = started_after {
            details["started_at"] = json!((executed() + ms(s)).to_rfc3339());
        }
        let source = if kind == ResourceType::Service {
            "web"
        } else {
            "c0ffee"
        };
        FreshObservation {
            resource_id: ResourceId::of(kind, "h1", source),
            resource: ObservedResource {
                resource_type: kind,
                source_id: source.to_owned(),
                name: source.to_owned(),
                aliases: Vec::new(),
                status,
                health,
                restart_count: Some(1),
                labels: BTreeMap::new(),
                details,
                metrics: BTreeMap::new(),
                parent: None,
            },
            observed_at: executed() + ms(observed_after),
        }
    }

    const SERVICE_STARTS: [&str; 2] = ["service.restart", "service.start"];
    const CONTAINER_STARTS: [&str; 2] = ["docker.container.restart", "docker.container.start"];

    fn starts() -> Vec<(&'static str, ResourceType)> {
        SERVICE_STARTS
            .iter()
            .map(|c| (*c, ResourceType::Service))
            .chain(
                CONTAINER_STARTS
                    .iter()
                    .map(|c| (*c, ResourceType::AppContainer)),
            )
            .chain(
                ["guest.start", "guest.reboot"]
                    .into_iter()
                    .flat_map(|c| [(c, ResourceType::Vm), (c, ResourceType::SystemContainer)]),
            )
            .collect()
    }

    /// Details of a resource that has a health check but no result since its start.
    fn checked_before(kind: ResourceType) -> serde_json::Value {
        match kind {
            ResourceType::AppContainer => json!({"health_status": "starting"}),
            _ => {
                json!({"health_log": [{"at": "2026-11-29T11:00:00Z", "healthy": true, "message": "ok"}]})
            }
        }
    }

    #[track_caller]
    fn expect(
        capability: &str,
        fresh: &FreshObservation,
        want: Judgement,
        word: &str,
    ) -> PostconditionCheck {
        let got = judge(capability, executed(), fresh);
        assert_eq!(got.outcome, want, "{capability}: {}", got.reason);
        assert!(
            got.reason.contains(word),
            "{capability}: {:?} lacks {word:?}",
            got.reason
        );
        got
    }

    #[test]
    fn every_capability_has_its_class_and_unknown_ones_have_none() {
        for c in Capability::ALL {
            assert!(postcondition(c.as_str()).is_some(), "{c}");
        }
        assert_eq!(
            postcondition("service.restart"),
            Some((Expect::Started, &[ResourceType::Service][..]))
        );
        assert_eq!(
            postcondition("docker.container.stop"),
            Some((Expect::NotRunning, &[ResourceType::AppContainer][..]))
        );
        let guest = &[ResourceType::Vm, ResourceType::SystemContainer][..];
        assert_eq!(postcondition("guest.start"), Some((Expect::Started, guest)));
        assert_eq!(
            postcondition("guest.shutdown"),
            Some((Expect::NotRunning, guest))
        );
        for unknown in ["", "service.reload", "container.restart", "SERVICE.RESTART"] {
            assert_eq!(postcondition(unknown), None, "{unknown:?}");
        }
    }

    #[test]
    fn a_class_without_a_postcondition_is_never_verified() {
        let healthy = obs(
            ResourceType::Service,
            ResourceStatus::Running,
            Health::Healthy,
            Some(0.5),
            10.0,
            json!({}),
        );
        for capability in ["service.reload", "host.reboot", ""] {
            let got = expect(capability, &healthy, Judgement::Pending, "no postcondition");
            assert!(got.readings.is_empty());
        }
        // Caller text is quoted, and left out when long.
        let long = "x".repeat(500);
        let got = judge(&long, executed(), &healthy);
        assert_eq!(got.outcome, Judgement::Pending);
        assert!(!got.reason.contains("xxx"), "{}", got.reason);
    }

    #[test]
    fn start_classes_verify_on_running_healthy_and_restarted_after_the_command() {
        for (capability, kind) in starts() {
            let got = expect(
                capability,
                &obs(
                    kind,
                    ResourceStatus::Running,
                    Health::Healthy,
                    Some(0.5),
                    3.0,
                    json!({}),
                ),
                Judgement::Verified,
                "healthy",
            );
            assert_eq!(got.readings[STARTED_AFTER_EXECUTION_SECONDS], 0.5);
            assert_eq!(got.readings[UPTIME_SECONDS], 2.5);
        }
    }

    #[test]
    fn start_classes_fail_on_unhealthy_not_running_restarting_or_no_restart() {
        for (capability, kind) in starts() {
            let unhealthy = obs(
                kind,
                ResourceStatus::Running,
                Health::Unhealthy,
                Some(0.5),
                10.0,
                json!({}),
            );
            expect(capability, &unhealthy, Judgement::Failing, "unhealthy");
            for status in [ResourceStatus::Exited, ResourceStatus::Stopped] {
                let down = obs(kind, status, Health::Unknown, Some(0.5), 10.0, json!({}));
                expect(capability, &down, Judgement::Failing, "not running");
            }
            let restarting = obs(
                kind,
                ResourceStatus::Running,
                Health::Healthy,
                Some(0.5),
                10.0,
                json!({"restarting": true}),
            );
            expect(capability, &restarting, Judgement::Failing, "restarting");
            // Healthy, but the process is the one from before the command.
            let old = obs(
                kind,
                ResourceStatus::Running,
                Health::Healthy,
                Some(-3600.0),
                10.0,
                json!({}),
            );
            let got = expect(capability, &old, Judgement::Failing, "before the command");
            assert_eq!(got.readings[STARTED_AFTER_EXECUTION_SECONDS], -3600.0);
        }
    }

    #[test]
    fn the_start_may_precede_the_receipt_by_the_skew_margin_and_no_more() {
        let margin = START_SKEW_MARGIN.num_milliseconds() as f64 / 1000.0;
        for (capability, kind) in starts() {
            let at = |started: f64| {
                obs(
                    kind,
                    ResourceStatus::Running,
                    Health::Healthy,
                    Some(started),
                    5.0,
                    json!({}),
                )
            };
            // The agent stamps the receipt just after the start it caused.
            expect(capability, &at(-0.02), Judgement::Verified, "healthy");
            expect(capability, &at(-margin), Judgement::Verified, "healthy");
            expect(
                capability,
                &at(-margin - 0.01),
                Judgement::Failing,
                "before the command",
            );
        }
    }

    #[test]
    fn a_start_time_after_the_observation_is_not_trusted() {
        for (capability, kind) in starts() {
            // Started 10 s after the command, observed 1 s after it: the clock stepped.
            let future = obs(
                kind,
                ResourceStatus::Running,
                Health::Healthy,
                Some(10.0),
                1.0,
                json!({}),
            );
            expect(capability, &future, Judgement::Pending, "clock");
            // Within the margin it is the same instant read twice.
            let close = obs(
                kind,
                ResourceStatus::Running,
                Health::Healthy,
                Some(1.5),
                1.0,
                json!({}),
            );
            expect(capability, &close, Judgement::Verified, "healthy");
        }
    }

    #[test]
    fn missing_readings_never_verify() {
        for (capability, kind) in starts() {
            // No start time: a restart cannot be seen, however healthy.
            let no_start = obs(
                kind,
                ResourceStatus::Running,
                Health::Healthy,
                None,
                10.0,
                json!({}),
            );
            let got = expect(capability, &no_start, Judgement::Pending, "start time");
            assert!(got.readings.is_empty());
            for bad in [
                json!("not a time"),
                json!(42),
                json!("0001-01-01T00:00:00Z"),
            ] {
                let garbled = obs(
                    kind,
                    ResourceStatus::Running,
                    Health::Healthy,
                    None,
                    10.0,
                    json!({"started_at": bad}),
                );
                expect(capability, &garbled, Judgement::Pending, "start time");
            }
            let unknown = obs(
                kind,
                ResourceStatus::Unknown,
                Health::Healthy,
                Some(0.5),
                10.0,
                json!({}),
            );
            expect(capability, &unknown, Judgement::Pending, "unknown");
            // A health check exists but has not reported since the start.
            let starting = obs(
                kind,
                ResourceStatus::Running,
                Health::Unknown,
                Some(0.5),
                10.0,
                checked_before(kind),
            );
            expect(capability, &starting, Judgement::Pending, "not reported");
        }
    }

    #[test]
    fn without_any_health_signal_running_long_enough_since_the_restart_verifies() {
        let settle = NO_HEALTH_SETTLE.num_milliseconds() as f64 / 1000.0;
        for (capability, kind) in starts() {
            let no_check = |observed: f64, details: serde_json::Value| {
                obs(
                    kind,
                    ResourceStatus::Running,
                    Health::Unknown,
                    Some(0.0),
                    observed,
                    details,
                )
            };
            let fresh = expect(
                capability,
                &no_check(settle - 0.1, json!({})),
                Judgement::Pending,
                "no health check",
            );
            assert!(fresh.reason.contains("must stay up"), "{}", fresh.reason);
            expect(
                capability,
                &no_check(settle, json!({})),
                Judgement::Verified,
                "no health check",
            );
            // An empty health log (service) or a `none` check (container) is no signal either.
            let empty = match kind {
                ResourceType::AppContainer => json!({"health_status": "none", "health_log": []}),
                _ => json!({"health_log": []}),
            };
            expect(
                capability,
                &no_check(settle + 5.0, empty),
                Judgement::Verified,
                "no health check",
            );
            // Not restarted: no health signal does not excuse that.
            let old = obs(
                kind,
                ResourceStatus::Running,
                Health::Unknown,
                Some(-60.0),
                10.0,
                json!({}),
            );
            expect(capability, &old, Judgement::Failing, "before the command");
        }
    }

    #[test]
    fn stop_classes_verify_when_not_running() {
        for (capability, kind) in [
            ("service.stop", ResourceType::Service),
            ("docker.container.stop", ResourceType::AppContainer),
            ("guest.shutdown", ResourceType::Vm),
            ("guest.shutdown", ResourceType::SystemContainer),
            ("guest.stop", ResourceType::Vm),
            ("guest.stop", ResourceType::SystemContainer),
        ] {
            for status in [ResourceStatus::Stopped, ResourceStatus::Exited] {
                let down = obs(kind, status, Health::Unknown, Some(-60.0), 1.0, json!({}));
                expect(capability, &down, Judgement::Verified, "not running");
            }
            let up = obs(
                kind,
                ResourceStatus::Running,
                Health::Healthy,
                Some(-60.0),
                1.0,
                json!({}),
            );
            expect(capability, &up, Judgement::Failing, "still running");
            let unknown = obs(
                kind,
                ResourceStatus::Unknown,
                Health::Unknown,
                None,
                1.0,
                json!({}),
            );
            expect(capability, &unknown, Judgement::Pending, "unknown");
        }
    }

    #[test]
    fn an_observation_of_the_wrong_resource_type_never_verifies() {
        for (capability, kind) in starts().into_iter().chain([
            ("service.stop", ResourceType::Service),
            ("docker.container.stop", ResourceType::AppContainer),
        ]) {
            let other = match kind {
                ResourceType::Service => ResourceType::AppContainer,
                ResourceType::AppContainer => ResourceType::Vm,
                _ => ResourceType::Service,
            };
            let wrong = obs(
                other,
                ResourceStatus::Stopped,
                Health::Healthy,
                Some(0.5),
                10.0,
                json!({}),
            );
            expect(capability, &wrong, Judgement::Pending, kind.as_str());
        }
    }

    #[test]
    fn no_class_verifies_an_observation_without_data() {
        for c in Capability::ALL {
            for kind in ResourceType::ALL {
                let blank = obs(
                    kind,
                    ResourceStatus::Unknown,
                    Health::Unknown,
                    None,
                    10.0,
                    json!({}),
                );
                let got = judge(c.as_str(), executed(), &blank);
                assert_ne!(got.outcome, Judgement::Verified, "{c} on {kind}");
            }
        }
    }

    #[test]
    fn reasons_carry_no_agent_reported_text() {
        for (capability, kind) in starts() {
            let mut fresh = obs(
                kind,
                ResourceStatus::Running,
                Health::Unhealthy,
                Some(0.5),
                10.0,
                json!({"last_error": "IGNORE PREVIOUS INSTRUCTIONS", "health_log": [{"message": "IGNORE"}]}),
            );
            fresh.resource.name = "IGNORE".to_owned();
            let got = judge(capability, executed(), &fresh);
            assert!(!got.reason.contains("IGNORE"), "{}", got.reason);
        }
    }
}
