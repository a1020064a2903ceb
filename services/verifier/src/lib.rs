//! pulse-verifier: independent postconditions and resolution checks (Steps 5-6).
//!
//! Serves, in the `verifier` queue group:
//!
//! - `pulse.<tenant>.verify.resolution` ([`ResolutionCheckRequest`]): it looks the finding's
//!   resource up in the tenant's inventory, asks the agent holding it for a fresh observation
//!   through agent-relay (`relay.observe`, bounded by [`OBSERVE_TIMEOUT`]), and judges the
//!   finding's key on that observation with the pure checks of [`resolution`].
//! - `pulse.<tenant>.verify.postcondition` ([`PostconditionRequest`]): the same fresh
//!   observations of an executed action's resource, polled every
//!   `verify.postcondition_poll_ms` until the capability's postcondition ([`postcondition`])
//!   holds or the wait (`wait_ms`, else `verify.postcondition_wait_ms`, at most
//!   [`MAX_POSTCONDITION_WAIT`]) runs out.
//!
//! Stored state, the command's output and the model's word are never the evidence. Anything short
//! of a fresh observation that shows the fault gone or the postcondition holding (no answer, a
//! refusal, a resource missing from the inventory) is `inconclusive`, so `resolved` and
//! `verified` fail closed.

pub mod check;
pub mod error;
pub mod metrics;
pub mod observe;
pub mod postcondition;
pub mod resolution;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use pulse_bus::verify_api::{
    PostconditionReply, PostconditionRequest, ResolutionCheckReply, ResolutionCheckRequest,
    ResolutionEvidence,
};
use pulse_bus::{Bus, BusError, Endpoint, Request, Responder};

pub use crate::error::VerifierError;
use pulse_config::VerifyConfig;
use pulse_domain::TenantId;
use pulse_domain::action::Verification;
use pulse_domain::finding::VerifierKey;
use pulse_domain::resource::Resource;
use pulse_runtime::{ServiceContext, ServiceSpec};
use pulse_store::Store;
use tokio::time::Instant;

use crate::observe::FreshObserver;
use crate::postcondition::{Judgement, PostconditionCheck};
use crate::resolution::{FreshObservation, ResolutionCheck};

pub const SPEC: ServiceSpec = ServiceSpec {
    name: "verifier",
    health_port: Some(7664),
};

/// How long the verifier waits for the agent's fresh observation.
pub const OBSERVE_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a postcondition check polls, whatever the request or the configuration says.
pub const MAX_POSTCONDITION_WAIT: Duration = Duration::from_secs(120);
/// The shortest pause between two observations of one postcondition check.
pub const MIN_POSTCONDITION_POLL: Duration = Duration::from_millis(100);

/// Why a check of a resource missing from the tenant's inventory is inconclusive.
const NOT_IN_INVENTORY: &str =
    "the resource is not in the inventory, so no fresh observation can be had";

/// A check the verifier answers on its endpoint's subject.
trait Verify: Send + Sync + 'static {
    type Request: Endpoint;

    fn bus(&self) -> &Bus;

    /// One check for `tenant`.
    fn answer(
        &self,
        tenant: TenantId,
        request: Self::Request,
    ) -> impl Future<Output = Result<<Self::Request as Request>::Reply, VerifierError>> + Send;
}

/// Serves `verifier`'s subject of every tenant in the verifier queue group.
async fn serve<V: Verify>(verifier: V) -> Result<Responder, BusError> {
    let bus = verifier.bus().clone();
    let this = Arc::new(verifier);
    bus.serve_endpoint::<V::Request, VerifierError, _, _>(move |ctx, request| {
        let this = this.clone();
        async move { this.answer(ctx.tenant, request).await }
    })
    .await
}

/// Refuses a request whose `field` is empty.
fn require(field: &str, value: &str) -> Result<(), VerifierError> {
    if value.trim().is_empty() {
        return Err(VerifierError::Invalid(format!("{field} must not be empty")));
    }
    Ok(())
}

/// Runs until shutdown is requested.
pub async fn run(ctx: ServiceContext) -> anyhow::Result<()> {
    metrics::VerifierMetrics::register(&ctx.metrics);
    let resolution = ResolutionVerifier::new(ctx.bus.clone(), ctx.store.clone())
        .serve()
        .await?;
    let postconditions = PostconditionVerifier::new(
        ctx.bus.clone(),
        ctx.store.clone(),
        PostconditionSettings::from_config(&ctx.config.verify),
    )
    .serve()
    .await?;
    ctx.shutdown.cancelled().await;
    resolution.stop().await;
    postconditions.stop().await;
    Ok(())
}

/// Answers resolution checks.
#[derive(Clone)]
pub struct ResolutionVerifier {
    observer: FreshObserver,
}

impl ResolutionVerifier {
    pub fn new(bus: Bus, store: Store) -> Self {
        Self {
            observer: FreshObserver::new(bus, store, OBSERVE_TIMEOUT),
        }
    }

    /// Serves `pulse.*.verify.resolution` in the verifier queue group.
    pub async fn serve(self) -> Result<Responder, BusError> {
        serve(self).await
    }

    /// One resolution check for `tenant`. Errors are for bad requests and an unreachable
    /// store; every other failure to observe is an `inconclusive` reply.
    pub async fn verify(
        &self,
        tenant: &TenantId,
        request: ResolutionCheckRequest,
    ) -> Result<ResolutionCheckReply, VerifierError> {
        let Some(key) = VerifierKey::for_key(&request.key) else {
            return Err(VerifierError::Invalid(format!(
                "key {} has no deterministic verifier; such findings resolve on the model's evidence",
                request.key
            )));
        };
        require("resource_id", &request.resource_id)?;
        let (check, evidence) = match self.observer.lookup(tenant, &request.resource_id).await? {
            None => (ResolutionCheck::inconclusive(NOT_IN_INVENTORY), None),
            Some(resource) => self.observe_and_check(tenant, key, &resource).await,
        };
        tracing::info!(
            tenant = %tenant,
            finding_id = %request.finding_id,
            key = %key,
            resource_id = %request.resource_id,
            outcome = check.outcome.as_str(),
            "resolution check"
        );
        Ok(ResolutionCheckReply {
            finding_id: request.finding_id,
            key: request.key,
            resource_id: request.resource_id,
            outcome: check.outcome,
            reason: check.reason,
            evidence,
            checked_at: Utc::now(),
        })
    }

    async fn observe_and_check(
        &self,
        tenant: &TenantId,
        key: VerifierKey,
        resource: &Resource,
    ) -> (ResolutionCheck, Option<ResolutionEvidence>) {
        if let Some(reason) = resolution::unobservable(key) {
            return (ResolutionCheck::inconclusive(reason), None);
        }
        let fresh = match self.observer.observe(tenant, resource).await {
            Ok(fresh) => fresh,
            Err(reason) => return (ResolutionCheck::inconclusive(reason), None),
        };
        let check = resolution::check(key, &fresh);
        let evidence = evidence_of(&fresh, check.readings.clone());
        (check, Some(evidence))
    }
}

impl Verify for ResolutionVerifier {
    type Request = ResolutionCheckRequest;

    fn bus(&self) -> &Bus {
        self.observer.bus()
    }

    async fn answer(
        &self,
        tenant: TenantId,
        request: ResolutionCheckRequest,
    ) -> Result<ResolutionCheckReply, VerifierError> {
        let started = Instant::now();
        let answer = self.verify(&tenant, request).await;
        let outcome = match &answer {
            Ok(reply) => reply.outcome.as_str(),
            Err(_) => "refused",
        };
        metrics::VerifierMetrics::shared().checked("resolution", outcome, started.elapsed());
        answer
    }
}

/// The timing of postcondition checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostconditionSettings {
    /// The wait of a request that names none.
    pub default_wait: Duration,
    /// The pause between two fresh observations.
    pub poll_interval: Duration,
    /// How long one observation waits for the agent.
    pub observe_timeout: Duration,
}

impl PostconditionSettings {
    /// The configured settings, the wait capped at [`MAX_POSTCONDITION_WAIT`] and the pause
    /// raised to [`MIN_POSTCONDITION_POLL`].
    pub fn from_config(config: &VerifyConfig) -> Self {
        Self {
            default_wait: Duration::from_millis(config.postcondition_wait_ms)
                .min(MAX_POSTCONDITION_WAIT),
            poll_interval: Duration::from_millis(config.postcondition_poll_ms)
                .max(MIN_POSTCONDITION_POLL),
            observe_timeout: OBSERVE_TIMEOUT,
        }
    }

    /// How long a request polls: its own `wait_ms`, else the default; never more than
    /// [`MAX_POSTCONDITION_WAIT`].
    pub fn wait_for(&self, wait_ms: Option<u64>) -> Duration {
        wait_ms
            .map_or(self.default_wait, Duration::from_millis)
            .min(MAX_POSTCONDITION_WAIT)
    }
}

impl Default for PostconditionSettings {
    fn default() -> Self {
        Self::from_config(&VerifyConfig::default())
    }
}

/// Answers postcondition checks of executed actions.
#[derive(Clone)]
pub struct PostconditionVerifier {
    observer: FreshObserver,
    settings: PostconditionSettings,
}

/// How a postcondition check ended.
struct Concluded {
    outcome: Verification,
    reason: String,
    evidence: Option<ResolutionEvidence>,
    observations: u32,
}

impl Concluded {
    fn without_observation(reason: impl Into<String>) -> Self {
        Self {
            outcome: Verification::Inconclusive,
            reason: reason.into(),
            evidence: None,
            observations: 0,
        }
    }
}

impl PostconditionVerifier {
    pub fn new(bus: Bus, store: Store, settings: PostconditionSettings) -> Self {
        Self {
            observer: FreshObserver::new(bus, store, settings.observe_timeout),
            settings,
        }
    }

    /// Serves `pulse.*.verify.postcondition` in the verifier queue group.
    pub async fn serve(self) -> Result<Responder, BusError> {
        serve(self).await
    }

    /// One postcondition check for `tenant`: polls fresh observations until the postcondition
    /// holds or the wait runs out (at least one observation is tried). Errors are for bad
    /// requests and an unreachable store; everything else is a reply, `verified` only on a
    /// fresh observation that shows the postcondition.
    pub async fn verify(
        &self,
        tenant: &TenantId,
        request: PostconditionRequest,
    ) -> Result<PostconditionReply, VerifierError> {
        require("resource_id", &request.resource_id)?;
        require("agent_id", &request.agent_id)?;
        let wait = self.settings.wait_for(request.wait_ms);
        let concluded = match postcondition::postcondition(&request.capability) {
            None => {
                Concluded::without_observation(postcondition::no_postcondition(&request.capability))
            }
            Some((_, acts_on)) => match self.observer.lookup(tenant, &request.resource_id).await? {
                None => Concluded::without_observation(NOT_IN_INVENTORY),
                Some(resource) if resource.agent_id != request.agent_id => {
                    Concluded::without_observation(
                        "the resource is held by another agent than the one that ran the command",
                    )
                }
                Some(resource) if !acts_on.contains(&resource.resource_type) => {
                    let names: Vec<&str> = acts_on.iter().map(|t| t.as_str()).collect();
                    Concluded::without_observation(format!(
                        "{} acts on {} resources, and this resource is a {}",
                        request.capability,
                        names.join(" or "),
                        resource.resource_type
                    ))
                }
                Some(resource) => self.poll(tenant, &request, &resource, wait).await,
            },
        };
        tracing::info!(
            tenant = %tenant,
            action_id = %request.action_id,
            resource_id = %request.resource_id,
            capability = %request.capability,
            outcome = concluded.outcome.as_str(),
            observations = concluded.observations,
            "postcondition check"
        );
        Ok(PostconditionReply {
            action_id: request.action_id,
            outcome: concluded.outcome,
            reason: concluded.reason,
            evidence: concluded.evidence,
            observations: concluded.observations,
            checked_at: Utc::now(),
        })
    }

    /// Observes `resource` every poll interval until the postcondition holds or `wait` ran out;
    /// then `still_failing` when the last fresh observation showed it not holding, else
    /// `inconclusive`.
    async fn poll(
        &self,
        tenant: &TenantId,
        request: &PostconditionRequest,
        resource: &Resource,
        wait: Duration,
    ) -> Concluded {
        let deadline = Instant::now() + wait;
        let mut observations = 0_u32;
        let mut last: Option<(PostconditionCheck, FreshObservation)> = None;
        let mut last_miss = None;
        loop {
            match self.observer.observe(tenant, resource).await {
                Ok(fresh) => {
                    observations = observations.saturating_add(1);
                    let check =
                        postcondition::judge(&request.capability, request.executed_at, &fresh);
                    if check.outcome == Judgement::Verified {
                        return Concluded {
                            outcome: Verification::Verified,
                            evidence: Some(evidence_of(&fresh, check.readings)),
                            reason: check.reason,
                            observations,
                        };
                    }
                    last = Some((check, fresh));
                }
                Err(reason) => last_miss = Some(reason),
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            tokio::time::sleep_until((now + self.settings.poll_interval).min(deadline)).await;
        }
        let waited = format!("{} s", wait.as_secs_f64());
        match last {
            Some((check, fresh)) => {
                let outcome = match check.outcome {
                    Judgement::Failing => Verification::StillFailing,
                    Judgement::Pending | Judgement::Verified => Verification::Inconclusive,
                };
                Concluded {
                    outcome,
                    reason: format!(
                        "{}, on the last of {observations} fresh observations in the {waited} wait",
                        check.reason
                    ),
                    evidence: Some(evidence_of(&fresh, check.readings)),
                    observations,
                }
            }
            None => Concluded::without_observation(format!(
                "no fresh observation in the {waited} wait: {}",
                last_miss.unwrap_or_else(|| "the agent was not asked".to_owned())
            )),
        }
    }
}

impl Verify for PostconditionVerifier {
    type Request = PostconditionRequest;

    fn bus(&self) -> &Bus {
        self.observer.bus()
    }

    async fn answer(
        &self,
        tenant: TenantId,
        request: PostconditionRequest,
    ) -> Result<PostconditionReply, VerifierError> {
        let started = Instant::now();
        let answer = self.verify(&tenant, request).await;
        let outcome = match &answer {
            Ok(reply) => reply.outcome.as_str(),
            Err(_) => "refused",
        };
        metrics::VerifierMetrics::shared().checked("postcondition", outcome, started.elapsed());
        answer
    }
}

/// The typed values of a fresh observation a check judged.
fn evidence_of(fresh: &FreshObservation, readings: BTreeMap<String, f64>) -> ResolutionEvidence {
    ResolutionEvidence {
        observed_at: fresh.observed_at,
        resource_type: fresh.resource.resource_type,
        status: fresh.resource.status,
        health: fresh.resource.health,
        restart_count: fresh.resource.restart_count,
        readings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulse_config::PulseConfig;

    fn settings(vars: &[(&str, &str)]) -> PostconditionSettings {
        let vars = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
        let config = PulseConfig::from_figment(PulseConfig::figment(vars).unwrap()).unwrap();
        PostconditionSettings::from_config(&config.verify)
    }

    #[test]
    fn postcondition_timing_comes_from_the_verify_settings() {
        let defaults = settings(&[]);
        assert_eq!(defaults, PostconditionSettings::default());
        assert_eq!(defaults.default_wait, Duration::from_secs(30));
        assert_eq!(defaults.poll_interval, Duration::from_secs(1));
        assert_eq!(defaults.observe_timeout, OBSERVE_TIMEOUT);

        let set = settings(&[
            ("PULSE_VERIFY__POSTCONDITION_WAIT_MS", "4000"),
            ("PULSE_VERIFY__POSTCONDITION_POLL_MS", "250"),
        ]);
        assert_eq!(set.default_wait, Duration::from_secs(4));
        assert_eq!(set.poll_interval, Duration::from_millis(250));

        // Out of bounds: capped and floored, never unbounded or a busy loop.
        let extreme = settings(&[
            ("PULSE_VERIFY__POSTCONDITION_WAIT_MS", "86400000"),
            ("PULSE_VERIFY__POSTCONDITION_POLL_MS", "0"),
        ]);
        assert_eq!(extreme.default_wait, MAX_POSTCONDITION_WAIT);
        assert_eq!(extreme.poll_interval, MIN_POSTCONDITION_POLL);
    }

    #[test]
    fn a_requests_wait_overrides_the_default_within_the_cap() {
        let s = PostconditionSettings::default();
        assert_eq!(s.wait_for(None), Duration::from_secs(30));
        assert_eq!(s.wait_for(Some(0)), Duration::ZERO);
        assert_eq!(s.wait_for(Some(2_500)), Duration::from_millis(2_500));
        assert_eq!(s.wait_for(Some(u64::MAX)), MAX_POSTCONDITION_WAIT);
    }
}
