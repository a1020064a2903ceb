//! Reports that the resource's own deterministic state contradicts.
//!
//! A weak model guesses: a 1.5B model reported "health check is unknown" on a service whose
//! health check reported healthy, with no triage flag and no firing alert. Such a report must
//! never become an active finding, so `patrol_report_finding` refuses it and names the
//! contradiction, and the model can read why.
//!
//! The check is narrow on purpose. It reads the report's key and title (never its prose
//! description) for the claims Pulse can judge from the resource's typed fields, as the run read
//! them at its start (the same reading the run's [`SignalBook`](super::signals::SignalBook) was
//! computed from):
//!
//! | claim | worded as | contradicted when |
//! |---|---|---|
//! | health unknown | key/title with `health` and `unknown`, `missing`, `unavailable`, `absent` | health is known |
//! | health check failing | `unhealthy`, `health` with `fail*`, keys `service-unhealthy`, `container-unhealthy` | health is healthy |
//! | not running | `exited`, `stopped`, `crashed`, `not running`, keys `service-exited`, `container-exited` | status is running |
//! | restart loop | `restarts`, `restarting`, `restart loop`, `crash loop`, `crashloop`, key `restart-loop` | restart count below [`RESTARTS_FLAGGED`] |
//!
//! A resource that carries any signal in the run (a problem triage flag or a firing alert) is
//! never judged: something is wrong with it, and a badly worded report about it is still a
//! report to weigh, not a guess. Claims Pulse cannot judge from typed fields (a metric, a
//! dependency, a log line) pass; the verifier judges resolution later.

use pulse_domain::finding::{ReportedFinding, VerifierKey};
use pulse_domain::resource::{Health, Resource, ResourceStatus};

use super::signals::RESTARTS_FLAGGED;

/// A claim about a resource's state that its typed fields settle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateClaim {
    HealthUnknown,
    HealthFailing,
    NotRunning,
    RestartLoop,
}

impl StateClaim {
    /// The claim as the refusal quotes it.
    fn said(self) -> &'static str {
        match self {
            StateClaim::HealthUnknown => "its health is unknown",
            StateClaim::HealthFailing => "its health check fails",
            StateClaim::NotRunning => "it is not running",
            StateClaim::RestartLoop => "it restarts repeatedly",
        }
    }

    /// What `resource`'s typed state shows against this claim; `None` when it does not
    /// contradict it (or cannot tell).
    fn contradicted_by(self, resource: &Resource) -> Option<String> {
        match self {
            StateClaim::HealthUnknown => (resource.health != Health::Unknown).then(|| {
                format!(
                    "its health check reports {}",
                    resource.health.as_str()
                )
            }),
            StateClaim::HealthFailing => (resource.health == Health::Healthy)
                .then(|| "its health check reports healthy".to_owned()),
            StateClaim::NotRunning => (resource.status == ResourceStatus::Running)
                .then(|| "its status is running".to_owned()),
            StateClaim::RestartLoop => resource
                .restart_count
                .filter(|n| *n < RESTARTS_FLAGGED)
                .map(|n| {
                    format!(
                        "it has restarted {n} time(s), below the {RESTARTS_FLAGGED} that Pulse flags"
                    )
                }),
        }
    }
}

/// The lowercase words of a key or title (`health-check_unknown` -> `health check unknown`).
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The state claims a report's key and title make.
pub fn claims(reported: &ReportedFinding) -> Vec<StateClaim> {
    let key = pulse_domain::finding::FindingKey::normalize(&reported.key).ok();
    let verifier = key.as_ref().and_then(VerifierKey::for_key);
    let mut said = words(&reported.key);
    said.extend(words(&reported.title));
    let has = |w: &str| said.iter().any(|s| s == w);
    let starts = |p: &str| said.iter().any(|s| s.starts_with(p));
    let phrase = |a: &str, b: &str| said.windows(2).any(|pair| pair[0] == a && pair[1] == b);

    let mut out = Vec::new();
    if has("health")
        && ["unknown", "missing", "unavailable", "absent"]
            .iter()
            .any(|w| has(w))
    {
        out.push(StateClaim::HealthUnknown);
    }
    if matches!(
        verifier,
        Some(VerifierKey::ServiceUnhealthy | VerifierKey::ContainerUnhealthy)
    ) || has("unhealthy")
        || (has("health") && starts("fail"))
    {
        out.push(StateClaim::HealthFailing);
    }
    if matches!(
        verifier,
        Some(VerifierKey::ServiceExited | VerifierKey::ContainerExited)
    ) || ["exited", "stopped", "crashed"].iter().any(|w| has(w))
        || phrase("not", "running")
    {
        out.push(StateClaim::NotRunning);
    }
    // Not a bare "restart": "restart recommended" names a remedy, not a loop.
    if matches!(verifier, Some(VerifierKey::RestartLoop))
        || ["restarts", "restarting", "crashloop"]
            .iter()
            .any(|w| has(w))
        || phrase("restart", "loop")
        || phrase("crash", "loop")
    {
        out.push(StateClaim::RestartLoop);
    }
    out
}

/// Why `reported` is refused: the claim it makes and the state of `resource` that contradicts
/// it; `None` when the report stands. `signals` are the resource's signals in this run.
pub fn contradiction(
    reported: &ReportedFinding,
    resource: &Resource,
    signals: &[&str],
) -> Option<String> {
    if !signals.is_empty() {
        return None;
    }
    let (claim, fact) = claims(reported)
        .into_iter()
        .find_map(|claim| claim.contradicted_by(resource).map(|fact| (claim, fact)))?;
    Some(format!(
        "it contradicts the current state of {id}: the report says {said}, but {fact}, and \
         {id} has no triage flag and no firing alert in this run. Report only a problem a tool \
         result shows; nothing was recorded",
        id = resource.id,
        said = claim.said(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::test_support::resource;
    use pulse_domain::finding::{Category, Severity};

    fn report(key: &str, title: &str) -> ReportedFinding {
        ReportedFinding {
            key: key.to_owned(),
            severity: Severity::Warning,
            category: Category::Reliability,
            resource_id: "service:h:web".to_owned(),
            resource_name: "web".to_owned(),
            resource_type: "service".to_owned(),
            title: title.to_owned(),
            description: "The cause is unknown and the service may have stopped.".to_owned(),
            recommendation: "Look.".to_owned(),
            evidence: "seen".to_owned(),
            impact: String::new(),
        }
    }

    #[test]
    fn the_seen_false_positive_is_refused_with_the_contradiction_named() {
        let web = resource("h", "web", Health::Healthy);
        let refused = contradiction(
            &report("health-check-unknown", "Health check is unknown"),
            &web,
            &[],
        )
        .expect("refused");
        assert!(
            refused.contains("the report says its health is unknown"),
            "{refused}"
        );
        assert!(
            refused.contains("its health check reports healthy"),
            "{refused}"
        );
        assert!(refused.contains(web.id.as_str()), "{refused}");
    }

    #[test]
    fn each_claim_is_read_from_the_key_or_the_title_not_the_description() {
        let cases = [
            (
                ("service-unhealthy", "web"),
                vec![StateClaim::HealthFailing],
            ),
            (
                ("web-check", "web health check failing"),
                vec![StateClaim::HealthFailing],
            ),
            (
                ("missing-healthcheck", "no health check"),
                vec![StateClaim::HealthUnknown],
            ),
            (("tls-expiry", "certificate expires in 3 days"), vec![]),
            (("health-missing", "web"), vec![StateClaim::HealthUnknown]),
            (("service-exited", "web"), vec![StateClaim::NotRunning]),
            (
                ("web-down", "web is not running"),
                vec![StateClaim::NotRunning],
            ),
            (("restart-loop", "web"), vec![StateClaim::RestartLoop]),
            (
                ("web-flapping", "web restarts every minute"),
                vec![StateClaim::RestartLoop],
            ),
            (("memory-high", "web uses 95% memory"), vec![]),
            (
                ("memory-leak", "web leaks memory, restart recommended"),
                vec![],
            ),
            (
                ("web-crashloop", "web keeps restarting"),
                vec![StateClaim::RestartLoop],
            ),
            (("dependency-unreachable", "web cannot reach db"), vec![]),
        ];
        for ((key, title), expected) in cases {
            assert_eq!(claims(&report(key, title)), expected, "{key} / {title}");
        }
    }

    #[test]
    fn a_resource_with_any_signal_is_never_judged() {
        let web = resource("h", "web", Health::Healthy);
        let said = report("health-check-unknown", "Health check is unknown");
        assert!(contradiction(&said, &web, &["alert_memory_usage"]).is_none());
        assert!(contradiction(&said, &web, &["repeated_restarts"]).is_none());
    }

    #[test]
    fn claims_the_state_bears_out_stand() {
        let unknown = resource("h", "web", Health::Unknown);
        let said = report("health-check-unknown", "Health check is unknown");
        assert!(contradiction(&said, &unknown, &[]).is_none());

        let mut stopped = resource("h", "web", Health::Healthy);
        stopped.status = ResourceStatus::Exited;
        assert!(contradiction(&report("service-exited", "web exited"), &stopped, &[]).is_none());

        // Restarts Pulse did not count (no restart count) cannot be contradicted.
        let mut uncounted = resource("h", "web", Health::Healthy);
        uncounted.restart_count = None;
        assert!(contradiction(&report("restart-loop", "web"), &uncounted, &[]).is_none());
    }

    #[test]
    fn contradicted_state_claims_on_a_healthy_running_resource_are_refused() {
        let mut web = resource("h", "web", Health::Healthy);
        web.restart_count = Some(1);
        for (key, title, fact) in [
            (
                "service-unhealthy",
                "web unhealthy",
                "its health check reports healthy",
            ),
            ("service-exited", "web exited", "its status is running"),
            ("restart-loop", "web restarts", "it has restarted 1 time(s)"),
        ] {
            let refused = contradiction(&report(key, title), &web, &[]).expect(key);
            assert!(refused.contains(fact), "{key}: {refused}");
        }
        // A claim Pulse cannot judge from typed fields stands.
        assert!(contradiction(&report("memory-high", "web memory"), &web, &[]).is_none());
    }
}
