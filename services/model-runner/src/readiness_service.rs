//! The Patrol preflight service: keeps each tenant's stored preflight outcome (the input of the
//! readiness gate, [`pulse_store::patrol_readiness`]) current.
//!
//! A preflight of the tenant's Patrol route runs
//! - on boot, for every tenant with a Patrol route, so the first status read is informed;
//! - on `events.settings.changed` with `patrol_route_changed: true` (a durable consumer on the
//!   EVENTS stream, shared by the model-runner replicas; routine saves cost no tokens);
//! - on request: `pulse.<tenant>.patrol.preflight.request` (queue group) runs a fresh one and
//!   answers the stored outcome.
//!
//! Preflights of one tenant run one at a time in a process, and each remembers the settings
//! version it read: a settings event whose version an earlier preflight already read (the boot
//! pass raced the save) and a boot preflight after one already ran are skipped, so one change
//! costs one provider request.
//!
//! Each run goes through the existing [`Preflight`]: one real model turn with one tool, through
//! the same transport a Patrol run uses, with the key opened under the master key and the base
//! URL from the settings.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::StreamExt as _;
use pulse_bus::async_nats::jetstream::AckKind;
use pulse_bus::async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use pulse_bus::events::SETTINGS_CHANGED;
use pulse_bus::patrol_api::PatrolPreflightRequest;
use pulse_bus::{Bus, ErrorCode, ErrorReply, Responder};
use pulse_domain::TenantId;
use pulse_domain::ai_settings::SettingsChanged;
use pulse_domain::backoff::{Backoff, Jitter};
use pulse_domain::finding::RuntimeRecovery;
use pulse_domain::patrol::readiness::PreflightRecord;
use pulse_runtime::{CancellationToken, ServiceContext};
use pulse_store::findings::{self, FindingsError};
use pulse_store::patrol_readiness::{self, MAX_PREFLIGHT_TENANTS};
use pulse_store::settings::{self, ConfigLayer, MasterKey};
use pulse_store::{Store, StoreError};
use tokio::task::JoinHandle;

use crate::patrol_connection::{ConnectionError, patrol_connection};
use crate::preflight::{
    Preflight, PreflightCache, PreflightOutcome, PreflightSettings, RouteConnection, SystemClock,
};
use pulse_agent_loop::cost::CallMetrics as _;
use pulse_agent_loop::provider::pool::ProviderPool;

/// The durable consumer of settings changes on the EVENTS stream.
pub const SETTINGS_CONSUMER: &str = "model-runner-preflight";
/// Deliveries of one settings event before it is dropped: unlike a job it needs no dead letter,
/// since the next route change or the next boot preflight checks the route again.
const MAX_DELIVER: i64 = 5;
/// The surface the preflight's recovered tool calls are counted under.
pub const PREFLIGHT_SURFACE: &str = "patrol_preflight";
/// How long a preflight may take before the event is redelivered.
const ACK_WAIT: Duration = Duration::from_secs(180);
/// First wait before a settings event whose preflight could not be stored is redelivered.
const RETRY_DELAY: Duration = Duration::from_secs(2);
/// The Nak delays of a settings event: not jittered, each delivery is the server's own.
const REDELIVERY: Backoff = Backoff::new(RETRY_DELAY, Duration::from_secs(60)).jitter(Jitter::None);

/// Bounds of one preflight: a request answers an operator waiting on HTTP, so it is held well
/// under the gateway's wait.
pub fn preflight_settings() -> PreflightSettings {
    PreflightSettings {
        request_timeout: Duration::from_secs(60),
        // Two attempts of a provider's own longer timeout still end within the gateway's wait.
        request_timeout_cap: Duration::from_secs(70),
        response_header_timeout: Duration::from_secs(30),
        retry_backoff: Duration::from_secs(1),
    }
}

/// Why a preflight could not be run or stored.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// The tenant has no Patrol route (or its settings do not resolve): nothing to check.
    #[error("{0}")]
    NoRoute(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<PreflightError> for ErrorReply {
    fn from(error: PreflightError) -> Self {
        match error {
            PreflightError::NoRoute(reason) => ErrorReply::new(
                ErrorCode::PatrolNotReady,
                format!(
                    "{reason}; select a Patrol model (PUT /api/settings/ai patrol_model), then \
                     run the preflight again"
                ),
            ),
            PreflightError::Store(StoreError::Unavailable(reason)) => {
                tracing::warn!(%reason, "database unavailable");
                ErrorReply::new(
                    ErrorCode::ServiceUnavailable,
                    "the database is unavailable; retry shortly",
                )
            }
            PreflightError::Store(other) => {
                tracing::error!(error = %other, "patrol preflight failed");
                ErrorReply::new(ErrorCode::InternalError, "the preflight could not be run")
            }
        }
    }
}

/// Where the route to check comes from, and how to open its key.
enum Target {
    /// Call the route.
    Call {
        connection: RouteConnection,
        base_url: Option<String>,
        /// The settings version the route was read from.
        version: i64,
    },
    /// Record this outcome without calling anything (the key cannot be opened).
    Record(PreflightRecord),
}

/// Runs and stores preflights.
pub struct PreflightRunner {
    store: Store,
    config: ConfigLayer,
    /// Provider keys given in config or the environment, by provider id.
    environment_keys: BTreeMap<String, String>,
    master_key: MasterKey,
    preflight: Preflight,
    /// Per tenant: held while a preflight runs, holding the settings version the last one read.
    tested: std::sync::Mutex<HashMap<TenantId, Arc<tokio::sync::Mutex<Option<i64>>>>>,
}

/// When a preflight is worth running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Always (an operator asked).
    Always,
    /// Unless a preflight of this process already read settings of at least this version.
    NewerThan(i64),
    /// Unless a preflight of this process already ran (the boot pass).
    FirstOnly,
}

impl std::fmt::Debug for PreflightRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreflightRunner")
            .field("master_key", &self.master_key)
            .finish_non_exhaustive()
    }
}

impl PreflightRunner {
    pub fn new(
        store: Store,
        ai: &pulse_config::AiConfig,
        master_key: MasterKey,
        providers: Arc<ProviderPool>,
    ) -> anyhow::Result<Self> {
        let config = ConfigLayer::from_config(ai)
            .map_err(|e| anyhow::anyhow!("invalid ai configuration: {e}"))?;
        let environment_keys = crate::patrol_connection::environment_keys(ai);
        let settings = preflight_settings();
        let cache = PreflightCache::new(Duration::from_secs(3600), Arc::new(SystemClock));
        Ok(Self {
            store,
            config,
            environment_keys,
            master_key,
            preflight: Preflight::new(settings, cache, providers),
            tested: std::sync::Mutex::new(HashMap::new()),
        })
    }

    /// The tenant's Patrol route with its base URL and key.
    async fn target(&self, tenant: &TenantId) -> Result<Target, PreflightError> {
        let tx = self.store.tenant_tx(tenant).await?;
        let patrol =
            patrol_connection(&tx, &self.config, &self.environment_keys, &self.master_key).await;
        tx.commit().await?;
        match patrol {
            Ok(patrol) => Ok(Target::Call {
                connection: patrol.connection,
                base_url: patrol.base_url,
                version: patrol.settings_version,
            }),
            Err(ConnectionError::NoRoute(reason)) => Err(PreflightError::NoRoute(reason)),
            Err(ConnectionError::Store(error)) => Err(PreflightError::Store(error)),
            Err(ConnectionError::KeyUnreadable {
                route,
                base_url,
                provider,
                ..
            }) => Ok(Target::Record(PreflightRecord {
                route: route.to_string(),
                model: route.model.clone(),
                base_url,
                ok: false,
                tool_call_observed: false,
                tool_calls_recovered: 0,
                cause: Some("not_configured".to_owned()),
                summary: format!(
                    "the stored API key of provider {provider} cannot be opened with this \
                     service's master key"
                ),
                recommendation: Some(
                    "enter the API key again, or give every service the same \
                     secrets.master_key_file"
                        .to_owned(),
                ),
                action: Some(crate::preflight::PROVIDER_SETTINGS_ACTION.to_owned()),
                checked_at: Utc::now(),
                transport: None,
            })),
        }
    }

    /// Runs a fresh preflight of the tenant's Patrol route and stores its outcome.
    pub async fn run(&self, tenant: &TenantId) -> Result<PreflightRecord, PreflightError> {
        match self.run_when(tenant, Freshness::Always).await? {
            Some(record) => Ok(record),
            // `Always` never skips; were it to, the caller still gets a fresh outcome.
            None => self.run_now(tenant).await.map(|(record, _)| record),
        }
    }

    /// Runs a preflight unless `freshness` says one already covers it (`Ok(None)`).
    pub async fn run_when(
        &self,
        tenant: &TenantId,
        freshness: Freshness,
    ) -> Result<Option<PreflightRecord>, PreflightError> {
        let slot = {
            let mut tested = self.tested.lock().unwrap_or_else(|e| e.into_inner());
            tested.entry(tenant.clone()).or_default().clone()
        };
        let mut last = slot.lock().await;
        match (freshness, *last) {
            (Freshness::NewerThan(version), Some(read)) if read >= version => {
                tracing::info!(tenant = %tenant, version, read, "patrol preflight skipped: one already read these settings");
                return Ok(None);
            }
            (Freshness::FirstOnly, Some(_)) => return Ok(None),
            _ => {}
        }
        let version = {
            let tx = self.store.tenant_tx(tenant).await?;
            let version = settings::get(&tx, false)
                .await
                .map(|s| s.version)
                .map_err(|e| StoreError::Invalid(e.to_string()));
            tx.commit().await?;
            version?
        };
        let outcome = self.run_now(tenant).await;
        // What was read counts as checked whether or not a route was set (no route: nothing to
        // call); a failed store write leaves it unchecked, so the redelivery runs it again. A
        // save may land between the version read above and the route read: the route's own
        // version then counts, so that save's event does not call the provider a second time.
        match &outcome {
            Err(PreflightError::Store(_)) => {}
            Ok((_, Some(called))) => *last = Some(version.max(*called)),
            _ => *last = Some(version),
        }
        outcome.map(|(record, _)| Some(record))
    }

    /// Runs and stores one preflight; answers the record and, when the route was called, the
    /// settings version it was read from.
    async fn run_now(
        &self,
        tenant: &TenantId,
    ) -> Result<(PreflightRecord, Option<i64>), PreflightError> {
        let (record, called) = match self.target(tenant).await? {
            Target::Record(record) => (record, None),
            Target::Call {
                connection,
                base_url,
                version,
            } => {
                let outcome = self.preflight.run(&connection).await;
                if outcome.tool_calls_recovered > 0 {
                    crate::metrics::ModelMetrics::shared().tool_calls_recovered(
                        PREFLIGHT_SURFACE,
                        &connection.route,
                        connection.route_class(),
                        outcome.tool_calls_recovered,
                    );
                }
                (record_of(outcome, base_url), Some(version))
            }
        };
        let tx = self.store.tenant_tx(tenant).await?;
        patrol_readiness::record_preflight(&tx, &record).await?;
        // A preflight that observed a tool call proves the Patrol tool path works again: it
        // clears the synthetic `ai-service` runtime failure (a soft warning without a tool call
        // is not recovery evidence).
        if record.ok && record.tool_call_observed {
            let cleared = findings::clear_runtime_failure(
                &tx,
                RuntimeRecovery::PreflightToolCall,
                Utc::now(),
            )
            .await
            .map_err(|e| match e {
                FindingsError::Store(e) => e,
                other => StoreError::Invalid(other.to_string()),
            })?;
            if !cleared.is_empty() {
                tracing::info!(tenant = %tenant, "patrol runtime failure finding cleared by a preflight tool call");
            }
        }
        tx.commit().await?;
        crate::metrics::ModelMetrics::shared().preflight(tenant, &record);
        tracing::info!(
            tenant = %tenant,
            route = %record.route,
            ok = record.ok,
            tool_call_observed = record.tool_call_observed,
            cause = record.cause.as_deref().unwrap_or("-"),
            "patrol preflight recorded"
        );
        Ok((record, called))
    }

    /// The boot preflight: every tenant with a Patrol route, one after the other.
    pub async fn run_all(&self, shutdown: &CancellationToken) {
        let tenants = match patrol_readiness::tenants(&self.store, MAX_PREFLIGHT_TENANTS).await {
            Ok(tenants) => tenants,
            Err(error) => {
                tracing::warn!(%error, "boot preflight: tenants could not be listed");
                return;
            }
        };
        for tenant in tenants {
            if shutdown.is_cancelled() {
                return;
            }
            match self.run_when(&tenant, Freshness::FirstOnly).await {
                Ok(_) | Err(PreflightError::NoRoute(_)) => {}
                Err(PreflightError::Store(error)) => {
                    tracing::warn!(tenant = %tenant, %error, "boot preflight not stored");
                }
            }
        }
    }
}

/// The stored form of an outcome: safe fields only.
pub fn record_of(outcome: PreflightOutcome, base_url: Option<String>) -> PreflightRecord {
    PreflightRecord {
        route: outcome.route,
        model: outcome.model,
        base_url,
        ok: outcome.ready,
        tool_call_observed: outcome.observed_tool_call,
        tool_calls_recovered: outcome.tool_calls_recovered,
        cause: outcome.cause.map(|c| c.as_str().to_owned()),
        summary: outcome.summary,
        recommendation: outcome.recommendation,
        action: outcome.action.map(str::to_owned),
        checked_at: outcome.checked_at,
        transport: outcome.transport,
    }
}

/// The running preflight service.
#[derive(Debug)]
pub struct ReadinessService {
    stop: CancellationToken,
    responder: Responder,
    tasks: Vec<JoinHandle<()>>,
}

impl ReadinessService {
    /// Loads the master key and starts the request responder, the settings consumer and the
    /// boot preflight.
    pub async fn start(ctx: &ServiceContext, providers: Arc<ProviderPool>) -> anyhow::Result<Self> {
        let path = ctx.config.master_key_path();
        let master_key =
            tokio::task::spawn_blocking(move || MasterKey::load_or_create(&path)).await??;
        let runner =
            PreflightRunner::new(ctx.store.clone(), &ctx.config.ai, master_key, providers)?;
        Self::start_with(&ctx.bus, Arc::new(runner)).await
    }

    pub async fn start_with(bus: &Bus, runner: Arc<PreflightRunner>) -> anyhow::Result<Self> {
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let serving = runner.clone();
        let responder = bus
            .serve_endpoint::<PatrolPreflightRequest, ErrorReply, _, _>(
                move |ctx, request| {
                    let runner = serving.clone();
                    async move {
                        tracing::info!(tenant = %ctx.tenant, requested_by = %request.requested_by, "patrol preflight requested");
                        Ok(runner.run(&ctx.tenant).await?)
                    }
                },
            )
            .await?;
        let consumer = settings_consumer(bus).await?;
        let consuming = runner.clone();
        let consume_stop = stopped.clone();
        let consumer_task =
            tokio::spawn(async move { consume(consumer, consuming, consume_stop).await });
        let boot_stop = stopped;
        let boot = tokio::spawn(async move { runner.run_all(&boot_stop).await });
        Ok(Self {
            stop,
            responder,
            tasks: vec![consumer_task, boot],
        })
    }

    /// Stops taking requests and events; a preflight in flight finishes first.
    pub async fn stop(self) {
        self.stop.cancel();
        self.responder.stop().await;
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// The durable consumer of `events.settings.changed` of every tenant. New events only: the boot
/// preflight covers what changed while no runner ran.
async fn settings_consumer(bus: &Bus) -> anyhow::Result<PullConsumer> {
    let subjects = bus.subjects();
    let (domain, event) = SETTINGS_CHANGED;
    let config = pull::Config {
        durable_name: Some(SETTINGS_CONSUMER.to_owned()),
        description: Some("model-runner: preflight on Patrol route changes".to_owned()),
        filter_subject: subjects.event_any_tenant(domain, event),
        ack_policy: AckPolicy::Explicit,
        deliver_policy: DeliverPolicy::New,
        ack_wait: ACK_WAIT,
        max_deliver: MAX_DELIVER,
        ..Default::default()
    };
    let consumer = bus
        .jetstream()
        .create_consumer_on_stream(config, subjects.events_stream())
        .await
        .map_err(|e| anyhow::anyhow!("settings consumer: {e}"))?;
    Ok(consumer)
}

/// Doubles from [`RETRY_DELAY`] with each delivery, up to a minute.
fn redelivery_delay(delivered: i64) -> Duration {
    REDELIVERY.delay(u32::try_from(delivered.max(0)).unwrap_or(u32::MAX))
}

async fn consume(consumer: PullConsumer, runner: Arc<PreflightRunner>, stop: CancellationToken) {
    let mut pull_retry = Backoff::new(RETRY_DELAY, Duration::from_secs(30));
    while !stop.is_cancelled() {
        let mut messages = match consumer.messages().await {
            Ok(messages) => {
                pull_retry.reset();
                messages
            }
            Err(error) => {
                tracing::warn!(%error, "settings consumer: cannot pull; retrying");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    () = tokio::time::sleep(pull_retry.next_delay()) => continue,
                }
            }
        };
        loop {
            let next = tokio::select! {
                _ = stop.cancelled() => return,
                next = messages.next() => next,
            };
            let message = match next {
                Some(Ok(message)) => message,
                Some(Err(error)) => {
                    tracing::warn!(%error, "settings consumer: pull failed; reconnecting");
                    break;
                }
                None => break,
            };
            let decoded =
                pulse_bus::decode::<SettingsChanged>(message.headers.as_ref(), &message.payload);
            let ack = match decoded {
                Err(error) => {
                    tracing::warn!(%error, subject = %message.subject, "settings event not readable; dropped");
                    AckKind::Term
                }
                Ok(decoded) => match decoded.meta.tenant {
                    Some(tenant) if decoded.payload.patrol_route_changed => {
                        let version = decoded.payload.version;
                        match runner
                            .run_when(&tenant, Freshness::NewerThan(version))
                            .await
                        {
                            Ok(_) | Err(PreflightError::NoRoute(_)) => AckKind::Ack,
                            Err(PreflightError::Store(error)) => {
                                let delivered = message.info().map(|i| i.delivered).unwrap_or(1);
                                tracing::warn!(tenant = %tenant, %error, delivered, "preflight not stored; redelivering");
                                AckKind::Nak(Some(redelivery_delay(delivered)))
                            }
                        }
                    }
                    // A routine save: the route did not move, no tokens are spent.
                    _ => AckKind::Ack,
                },
            };
            if let Err(error) = message.ack_with(ack).await {
                tracing::warn!(%error, "settings event not acknowledged");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulse_agent_loop::route::Route;

    #[test]
    fn an_outcome_keeps_only_safe_fields() {
        let route = Route::parse("openai:gpt-4.1-mini").unwrap();
        let outcome = PreflightOutcome {
            route: route.to_string(),
            model: route.model().to_owned(),
            route_class: route.route_class(),
            ready: false,
            cause: Some(crate::preflight::PreflightCause::Provider(
                pulse_agent_loop::provider::FailureCause::Auth,
            )),
            summary: "the provider rejected the API key".to_owned(),
            recommendation: Some("check the API key".to_owned()),
            action: Some(crate::preflight::PROVIDER_SETTINGS_ACTION),
            observed_tool_call: false,
            tool_calls_recovered: 0,
            checked_at: Utc::now(),
            elapsed_ms: 12,
            transport: Some(pulse_domain::patrol::readiness::TurnTransport::Buffered),
            usage: None,
        };
        let record = record_of(outcome, Some("http://127.0.0.1:9/v1".to_owned()));
        assert_eq!(record.cause.as_deref(), Some("auth"));
        assert_eq!(record.route, "openai:gpt-4.1-mini");
        assert_eq!(
            record.transport,
            Some(pulse_domain::patrol::readiness::TurnTransport::Buffered)
        );
        assert!(!record.ok);
        assert_eq!(
            record.state(),
            pulse_domain::patrol::readiness::PreflightState::Failed
        );
    }

    #[test]
    fn redelivery_backs_off_and_is_bounded() {
        assert_eq!(redelivery_delay(1), RETRY_DELAY);
        assert_eq!(redelivery_delay(2), RETRY_DELAY * 2);
        assert!(redelivery_delay(3) > redelivery_delay(2));
        assert!(redelivery_delay(i64::MAX) <= Duration::from_secs(60));
        assert_eq!(redelivery_delay(0), RETRY_DELAY);
    }

    #[test]
    fn no_route_answers_patrol_not_ready() {
        let reply = ErrorReply::from(PreflightError::NoRoute(
            "no Patrol model is selected".to_owned(),
        ));
        assert_eq!(reply.code, ErrorCode::PatrolNotReady);
    }

    #[test]
    fn every_preflight_error_code_is_declared_by_the_endpoint() {
        use pulse_bus::Endpoint;
        use pulse_bus::patrol_api::PatrolPreflightRequest;
        for error in [
            PreflightError::NoRoute("none".to_owned()),
            PreflightError::Store(StoreError::Unavailable("down".to_owned())),
            PreflightError::Store(StoreError::InvalidUrl("x".to_owned())),
        ] {
            let code = ErrorReply::from(error).code;
            assert!(PatrolPreflightRequest::ERRORS.contains(&code), "{code}");
        }
    }
}
