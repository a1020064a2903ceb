//! The one path by which a Patrol run is accepted, whatever triggered it (an operator, the
//! cadence, an alert): resolve the scope, record the run `queued` and enqueue its
//! `events.run.accepted` event through the outbox, in one transaction. The run's `jobs.watch` job
//! is not written here: the dispatcher ([`crate::dispatcher`]) writes it when admission lets the
//! run start, in the transaction that marks the run dispatched.
//!
//! A tenant that switched Patrol off (`patrol_enabled: false`) has every run refused here
//! (`patrol_disabled`), before anything else is checked or written.
//!
//! Under a per-tenant lock held to the end of the transaction (so racing requests cannot both
//! pass), a full run is refused while another full run of the tenant is queued or running
//! (`patrol_run_in_progress`, naming it), and a scoped run is refused while the tenant already
//! has `scoped_queue_limit` scoped runs waiting for dispatch (`patrol_queue_full`).
//!
//! Every requested id goes through the store's one resolver; all that do not resolve to exactly
//! one resource are collected into one `unprocessable_scope` refusal naming them. A request that
//! names only resource types covers every resource of those types now.

use std::sync::Arc;

use chrono::Utc;
use pulse_bus::events::RUN_ACCEPTED;
use pulse_bus::patrol_api::PatrolRunAccepted;
use pulse_bus::{ErrorCode, ErrorReply, OutboxRow, Subjects};
use pulse_domain::patrol::run::{PatrolRun, RunId, RunType, TriggerReason};
use pulse_domain::patrol::scope::{EffectiveScope, ScopedRequest};
use pulse_domain::patrol::status::{Blocked, PATROL_DISABLED_REASON};
use pulse_domain::resource::ResourceId;
use pulse_store::resources::{self, ResolveError};
use pulse_store::settings::{self, ConfigLayer};
use pulse_store::{Store, StoreError, TenantTx, patrol_dispatch, patrol_readiness, patrol_runs};
use tokio::sync::Notify;

/// Scoped runs of one tenant waiting for dispatch before new ones are refused (unless
/// configured).
pub const DEFAULT_SCOPED_QUEUE_LIMIT: usize = 20;

/// Why a request was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    /// The tenant switched Patrol off: no run starts, whatever triggered it.
    #[error("{PATROL_DISABLED_REASON}")]
    Disabled,
    /// The platform operator suspended the tenant: no run starts (cause `tenant_suspended`).
    #[error("tenant is suspended: {reason}")]
    Suspended { reason: String },
    /// The tenant's `patrol_runs_per_hour` quota is reached.
    #[error(transparent)]
    Quota(pulse_domain::tenant::QuotaExceeded),
    /// The readiness gate blocks Patrol: the provider or model is known not to work.
    #[error(transparent)]
    NotReady(Blocked),
    #[error("{0}")]
    Unprocessable(String),
    #[error("full Patrol run {0} is already queued or running")]
    RunInProgress(RunId),
    #[error("{limit} scoped Patrol runs already wait to start")]
    QueueFull { limit: usize },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Outbox(#[from] pulse_bus::OutboxError),
}

impl AcceptError {
    /// The stable code the refusal is answered with.
    pub fn code(&self) -> ErrorCode {
        match self {
            AcceptError::Disabled => ErrorCode::PatrolDisabled,
            AcceptError::Suspended { .. } => ErrorCode::TenantSuspended,
            AcceptError::Quota(_) => ErrorCode::QuotaExceeded,
            AcceptError::NotReady(_) => ErrorCode::PatrolNotReady,
            AcceptError::Unprocessable(_) => ErrorCode::UnprocessableScope,
            AcceptError::RunInProgress(_) => ErrorCode::PatrolRunInProgress,
            AcceptError::QueueFull { .. } => ErrorCode::PatrolQueueFull,
            AcceptError::Store(StoreError::Unavailable(_)) => ErrorCode::ServiceUnavailable,
            AcceptError::Store(_) | AcceptError::Outbox(_) => ErrorCode::InternalError,
        }
    }
}

impl From<AcceptError> for ErrorReply {
    fn from(err: AcceptError) -> Self {
        let code = err.code();
        match err {
            AcceptError::Unprocessable(message) => ErrorReply::new(code, message),
            AcceptError::Disabled => ErrorReply::new(code, PATROL_DISABLED_REASON),
            AcceptError::Suspended { reason } => {
                ErrorReply::new(code, pulse_domain::tenant::suspended_message(&reason))
            }
            AcceptError::Quota(exceeded) => ErrorReply::new(code, exceeded.to_string()),
            AcceptError::NotReady(blocked) => ErrorReply::new(
                code,
                format!(
                    "Patrol is not ready ({check} check, cause {cause}): {reason}",
                    check = serde_json::to_value(blocked.check)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                    cause = serde_json::to_value(blocked.cause)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                    reason = blocked.reason,
                ),
            ),
            AcceptError::RunInProgress(id) => ErrorReply::new(
                code,
                format!(
                    "full Patrol run {id} is already queued or running; a new full run is \
                     accepted once it has ended"
                ),
            ),
            AcceptError::QueueFull { limit } => ErrorReply::new(
                code,
                format!(
                    "{limit} scoped Patrol runs of this tenant already wait to start; retry once \
                     one has started"
                ),
            ),
            AcceptError::Store(StoreError::Unavailable(reason)) => {
                tracing::warn!(%reason, "database unavailable");
                ErrorReply::new(code, "the database is unavailable; retry shortly")
            }
            other => {
                tracing::error!(error = %other, "accepting a patrol run failed");
                ErrorReply::new(code, "the run could not be accepted")
            }
        }
    }
}

/// Collected resolution failures of the requested ids.
#[derive(Debug, Default, PartialEq, Eq)]
struct Unresolved {
    unmatched: Vec<String>,
    ambiguous: Vec<(String, Vec<String>)>,
}

impl Unresolved {
    fn is_empty(&self) -> bool {
        self.unmatched.is_empty() && self.ambiguous.is_empty()
    }

    fn message(&self) -> String {
        let mut parts = Vec::new();
        if !self.unmatched.is_empty() {
            parts.push(format!(
                "unmatched resource_ids: {}",
                self.unmatched.join(", ")
            ));
        }
        if !self.ambiguous.is_empty() {
            let listed: Vec<String> = self
                .ambiguous
                .iter()
                .map(|(id, candidates)| format!("{id} (matches {})", candidates.join(", ")))
                .collect();
            parts.push(format!("ambiguous resource_ids: {}", listed.join("; ")));
        }
        parts.join("; ")
    }
}

/// Records accepted runs.
#[derive(Clone)]
pub struct RunAcceptor {
    store: Store,
    subjects: Subjects,
    outbox_notify: Option<Arc<Notify>>,
    dispatch_notify: Option<Arc<Notify>>,
    scoped_queue_limit: usize,
    /// The `[ai]` config layer for the readiness gate; `None`: the gate is not checked here.
    readiness: Option<Arc<ConfigLayer>>,
}

/// What to accept: why, and for which resources (`None`: a full run).
#[derive(Debug, Clone, Copy)]
pub struct Submission<'a> {
    pub trigger: TriggerReason,
    pub scope: Option<&'a ScopedRequest>,
    /// The requesting actor recorded on the run (an operator's token name); `None` for runs the
    /// system starts.
    pub requested_by: Option<&'a str>,
}

impl RunAcceptor {
    pub fn new(store: Store, subjects: Subjects) -> Self {
        Self {
            store,
            subjects,
            outbox_notify: None,
            dispatch_notify: None,
            scoped_queue_limit: DEFAULT_SCOPED_QUEUE_LIMIT,
            readiness: None,
        }
    }

    /// Checks the readiness gate ([`patrol_readiness::gate`]) before anything is written: a
    /// run on a provider or model known not to work is refused with [`AcceptError::NotReady`].
    pub fn with_readiness_gate(mut self, config: ConfigLayer) -> Self {
        self.readiness = Some(Arc::new(config));
        self
    }

    /// Wakes the dispatcher of this process after each accepted run (dispatchers of other
    /// replicas find it by polling).
    pub fn with_dispatch_notify(mut self, notify: Arc<Notify>) -> Self {
        self.dispatch_notify = Some(notify);
        self
    }

    /// Scoped runs of one tenant waiting for dispatch before new ones are refused (at least 1).
    pub fn with_scoped_queue_limit(mut self, limit: usize) -> Self {
        self.scoped_queue_limit = limit.max(1);
        self
    }

    pub fn scoped_queue_limit(&self) -> usize {
        self.scoped_queue_limit
    }

    /// Wakes the outbox relay (after a commit that enqueued rows outside [`Self::accept`]).
    pub fn notify_outbox(&self) {
        if let Some(notify) = &self.outbox_notify {
            notify.notify_one();
        }
    }

    /// Wakes the outbox relay after each accepted run.
    pub fn with_outbox_notify(mut self, notify: Arc<Notify>) -> Self {
        self.outbox_notify = Some(notify);
        self
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn subjects(&self) -> &Subjects {
        &self.subjects
    }

    /// Checks, resolves and records one run in `tx`, committing it.
    pub async fn accept(
        &self,
        tx: TenantTx,
        submission: Submission<'_>,
    ) -> Result<PatrolRunAccepted, AcceptError> {
        let accepted = self.record(&tx, submission).await?;
        let tenant = tx.tenant().clone();
        tx.commit().await?;
        if let Some(notify) = &self.outbox_notify {
            notify.notify_one();
        }
        if let Some(notify) = &self.dispatch_notify {
            notify.notify_one();
        }
        tracing::info!(
            run_id = %accepted.run_id,
            run_type = accepted.run_type.as_str(),
            trigger = accepted.trigger_reason.as_str(),
            tenant = %tenant,
            "patrol run accepted"
        );
        Ok(accepted)
    }

    /// Checks, resolves and records one run in `tx` with its `events.run.accepted` event,
    /// leaving the transaction open (the dispatcher records and dispatches a scheduled run in
    /// one transaction).
    pub async fn record(
        &self,
        tx: &TenantTx,
        submission: Submission<'_>,
    ) -> Result<PatrolRunAccepted, AcceptError> {
        if let Some(reason) = pulse_store::tenants::current_standing(tx)
            .await?
            .as_ref()
            .and_then(|standing| standing.suspension_reason())
        {
            return Err(AcceptError::Suspended {
                reason: reason.to_owned(),
            });
        }
        if !settings::patrol_enabled(tx).await? {
            return Err(AcceptError::Disabled);
        }
        if let Some(config) = &self.readiness
            && let Err(blocked) = patrol_readiness::gate(tx, config, Utc::now()).await?
        {
            return Err(AcceptError::NotReady(blocked));
        }
        patrol_dispatch::lock_accept(tx).await?;
        // Under the accept lock, so racing requests cannot both take the last run of the hour.
        match pulse_store::quotas::admit(tx, pulse_domain::tenant::Quota::PatrolRunsPerHour).await {
            Ok(()) => {}
            Err(pulse_store::quotas::QuotaError::Exceeded(exceeded)) => {
                return Err(AcceptError::Quota(exceeded));
            }
            Err(pulse_store::quotas::QuotaError::Store(error)) => return Err(error.into()),
        }
        match submission.scope {
            None => {
                if let Some(active) = patrol_dispatch::active_full_run(tx).await? {
                    return Err(AcceptError::RunInProgress(active));
                }
            }
            Some(_) => {
                let waiting = patrol_dispatch::undispatched_scoped(tx).await?;
                if waiting as usize >= self.scoped_queue_limit {
                    return Err(AcceptError::QueueFull {
                        limit: self.scoped_queue_limit,
                    });
                }
            }
        }
        let id = patrol_runs::new_run_id();
        let now = Utc::now();
        let run = match submission.scope {
            None => PatrolRun::queued(id, submission.trigger, RunType::Full, now),
            Some(scoped) => {
                let effective = effective_scope(tx, scoped).await?;
                let mut run = PatrolRun::scoped(id, submission.trigger, scoped, now);
                run.set_effective_scope(&effective);
                run
            }
        };
        let requested_by = submission
            .requested_by
            .map(|actor| pulse_domain::resource::truncate_chars(actor, 256));
        if !patrol_runs::insert_queued(tx, &run, requested_by.as_deref()).await? {
            return Err(AcceptError::Store(StoreError::Invalid(format!(
                "run id {id} already exists"
            ))));
        }
        let accepted = PatrolRunAccepted {
            run_id: run.id,
            trigger_reason: run.trigger_reason,
            run_type: run.run_type,
            queued_at: run.queued_at,
            scope_resource_ids: run.scope_resource_ids.clone(),
            effective_scope_resource_ids: run.effective_scope_resource_ids.clone(),
        };
        let tenant = tx.tenant().clone();
        let (domain, event) = RUN_ACCEPTED;
        let event_row = OutboxRow::event(&self.subjects, &tenant, domain, event, &accepted)?;
        pulse_bus::enqueue(&**tx.client(), event_row).await?;
        Ok(accepted)
    }
}

/// The canonical resources a scoped request covers: its ids through the resolver, or, with no
/// ids, every resource of its types.
async fn effective_scope(
    tx: &TenantTx,
    scoped: &ScopedRequest,
) -> Result<EffectiveScope, AcceptError> {
    let mut resolved: Vec<ResourceId> = Vec::new();
    if scoped.scope.resource_ids.is_empty() {
        for kind in &scoped.scope.resource_types {
            resolved.extend(
                resources::list(tx, Some(*kind))
                    .await?
                    .into_iter()
                    .map(|r| r.id),
            );
        }
    } else {
        let mut unresolved = Unresolved::default();
        for query in &scoped.scope.resource_ids {
            match resources::resolve(tx, query).await {
                Ok(resource) => resolved.push(resource.id),
                Err(ResolveError::NotFound { query }) => unresolved.unmatched.push(query),
                Err(ResolveError::Ambiguous { query, candidates }) => unresolved.ambiguous.push((
                    query,
                    candidates.iter().map(|c| c.as_str().to_owned()).collect(),
                )),
                Err(ResolveError::Store(e)) => return Err(e.into()),
            }
        }
        if !unresolved.is_empty() {
            return Err(AcceptError::Unprocessable(unresolved.message()));
        }
    }
    EffectiveScope::new(resolved).map_err(|_| {
        let types: Vec<&str> = scoped
            .scope
            .resource_types
            .iter()
            .map(|t| t.as_str())
            .collect();
        AcceptError::Unprocessable(format!(
            "no resource of type(s) {} exists",
            types.join(", ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulse_bus::Endpoint;
    use pulse_bus::patrol_api::PatrolRunRequest;

    /// The run endpoint declares every code a refusal answers with (the gateway documents its
    /// run route from that list). The quota and readiness refusals are checked where they are
    /// produced, below.
    #[test]
    fn every_refusal_code_is_declared_by_the_run_endpoint() {
        let refusals = [
            AcceptError::Disabled,
            AcceptError::Suspended {
                reason: "unpaid".to_owned(),
            },
            AcceptError::Unprocessable("no such resource".to_owned()),
            AcceptError::RunInProgress(RunId::from_uuid(uuid::Uuid::nil())),
            AcceptError::QueueFull { limit: 20 },
            AcceptError::Store(StoreError::Unavailable("down".to_owned())),
            AcceptError::Store(StoreError::InvalidUrl("x".to_owned())),
        ];
        for refusal in refusals {
            let code = refusal.code();
            assert!(
                PatrolRunRequest::ERRORS.contains(&code),
                "{code} undeclared"
            );
            assert_eq!(ErrorReply::from(refusal).code, code);
        }
    }

    #[test]
    fn unresolved_message_names_every_failed_id() {
        let unresolved = Unresolved {
            unmatched: vec!["nope".to_owned(), "gone".to_owned()],
            ambiguous: vec![(
                "web".to_owned(),
                vec!["service:h1:web".to_owned(), "service:h2:web".to_owned()],
            )],
        };
        assert_eq!(
            unresolved.message(),
            "unmatched resource_ids: nope, gone; ambiguous resource_ids: web (matches \
             service:h1:web, service:h2:web)"
        );
        assert!(Unresolved::default().is_empty());
    }

    #[tokio::test]
    async fn a_suspended_or_over_quota_tenant_gets_no_run_and_the_other_tenant_does() {
        use pulse_domain::TenantId;
        use pulse_domain::tenant::{Quota, TenantQuotas};
        use pulse_store::{quotas, tenants};
        let db = pulse_test_support::db::TestDb::create().await.unwrap();
        let acme = TenantId::new("acme").unwrap();
        let globex = TenantId::new("globex").unwrap();
        tenants::create(db.store(), &acme, "Acme").await.unwrap();
        tenants::create(db.store(), &globex, "Globex")
            .await
            .unwrap();
        let acceptor = RunAcceptor::new(db.store().clone(), Subjects::new(None));
        let full = Submission {
            trigger: TriggerReason::Manual,
            scope: None,
            requested_by: Some("token:ops"),
        };
        let tx = db.store().tenant_tx(&acme).await.unwrap();
        tenants::set_suspension(&tx, Some("invoice overdue"))
            .await
            .unwrap();
        tx.commit().await.unwrap();

        let tx = db.store().tenant_tx(&acme).await.unwrap();
        let err = acceptor.accept(tx, full).await.unwrap_err();
        assert!(matches!(err, AcceptError::Suspended { .. }), "{err:?}");
        let reply = serde_json::to_value(ErrorReply::from(err)).unwrap();
        assert_eq!(reply["code"], ErrorCode::TenantSuspended.code());
        assert!(
            reply["message"]
                .as_str()
                .unwrap_or_default()
                .contains("invoice overdue"),
            "{reply}"
        );
        let tx = db.store().tenant_tx(&acme).await.unwrap();
        assert!(patrol_runs::list(&tx, 10).await.unwrap().is_empty());
        tx.rollback().await.unwrap();
        // The other tenant runs.
        let tx = db.store().tenant_tx(&globex).await.unwrap();
        acceptor.accept(tx, full).await.unwrap();

        // Globex's run quota is used up by that run; acme, resumed, has no quota.
        let tx = db.store().tenant_tx(&globex).await.unwrap();
        quotas::set(
            &tx,
            &TenantQuotas {
                patrol_runs_per_hour: Some(1),
                ..TenantQuotas::default()
            },
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        // Refused by the quota before anything else (the queued full run would refuse too).
        let tx = db.store().tenant_tx(&globex).await.unwrap();
        let err = acceptor.accept(tx, full).await.unwrap_err();
        let AcceptError::Quota(exceeded) = &err else {
            panic!("expected the run quota, got {err:?}");
        };
        assert_eq!(
            (exceeded.quota, exceeded.limit),
            (Quota::PatrolRunsPerHour, 1)
        );
        assert_eq!(err.code(), ErrorCode::QuotaExceeded);
        assert!(PatrolRunRequest::ERRORS.contains(&err.code()));
        let tx = db.store().tenant_tx(&acme).await.unwrap();
        tenants::set_suspension(&tx, None).await.unwrap();
        tx.commit().await.unwrap();
        let tx = db.store().tenant_tx(&acme).await.unwrap();
        acceptor.accept(tx, full).await.unwrap();
        db.cleanup().await.unwrap();
    }

    #[tokio::test]
    async fn the_readiness_gate_refuses_before_anything_is_written() {
        use pulse_domain::TenantId;
        use pulse_store::{settings, tenants};
        let db = pulse_test_support::db::TestDb::create().await.unwrap();
        let tenant = TenantId::new("acme").unwrap();
        tenants::create(db.store(), &tenant, "Acme").await.unwrap();
        let acceptor = RunAcceptor::new(db.store().clone(), Subjects::new(None))
            .with_readiness_gate(ConfigLayer::default());
        let full = Submission {
            trigger: TriggerReason::Manual,
            scope: None,
            requested_by: Some("token:ops"),
        };

        // No Patrol route: refused, nothing recorded.
        let tx = db.store().tenant_tx(&tenant).await.unwrap();
        let err = acceptor.accept(tx, full).await.unwrap_err();
        let AcceptError::NotReady(blocked) = &err else {
            panic!("expected NotReady, got {err:?}");
        };
        assert_eq!(
            blocked.cause,
            pulse_domain::patrol::status::BlockedCause::ProviderNotConfigured
        );
        assert!(PatrolRunRequest::ERRORS.contains(&err.code()));
        let reply = ErrorReply::from(err);
        let reply = serde_json::to_value(&reply).unwrap();
        assert_eq!(reply["code"], ErrorCode::PatrolNotReady.code());
        let message = reply["message"].as_str().unwrap_or_default();
        assert!(message.contains("provider_not_configured"), "{message}");
        assert!(
            message.contains("POST /api/ai/patrol/preflight"),
            "{message}"
        );
        let tx = db.store().tenant_tx(&tenant).await.unwrap();
        assert!(patrol_runs::list(&tx, 10).await.unwrap().is_empty());

        // A keyless route with no preflight yet is not known to be broken: accepted.
        settings::put(
            &tx,
            0,
            &serde_json::json!({"patrol_model": "ollama:llama3.2"}),
            "t",
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        let tx = db.store().tenant_tx(&tenant).await.unwrap();
        acceptor.accept(tx, full).await.unwrap();
        db.cleanup().await.unwrap();
    }
}
