//! Manual runs: serves `pulse.<tenant>.patrol.run.request` (queue group, so replicas share the
//! requests) and accepts each valid request as a `queued` run record.
//!
//! Every requested id goes through the store's one resolver; all that do not resolve to exactly
//! one resource are collected into one `unprocessable_scope` refusal naming them. A request that
//! names only resource types covers every resource of those types now. The record, the
//! `events.run.accepted` event and the `jobs.watch` job are written in one transaction through
//! the outbox, so the job exists if and only if the record does.
//!
//! Readiness is not assessed here yet: a request is accepted whether or not Patrol is enabled
//! and ready; the runner records `not_ready` when it takes the job.

use std::sync::Arc;

use chrono::Utc;
use pulse_bus::events::{
    PATROL_RUN_QUEUE_GROUP, PATROL_RUN_REQUEST, PatrolRunAccepted, PatrolRunRequest, RUN_ACCEPTED,
    WATCH_JOB, WatchJob,
};
use pulse_bus::{Bus, BusError, ErrorReply, OutboxRow, Responder, Subjects};
use pulse_domain::patrol::run::{PatrolRun, RunType, TriggerReason};
use pulse_domain::patrol::scope::{EffectiveScope, ScopedRequest};
use pulse_domain::resource::ResourceId;
use pulse_store::resources::{self, ResolveError};
use pulse_store::{Store, StoreError, TenantTx, patrol_runs};
use tokio::sync::Notify;

/// The stable code of a scope that does not resolve.
pub const UNPROCESSABLE_SCOPE: &str = "unprocessable_scope";

/// Accepts manual run requests.
#[derive(Clone)]
pub struct ManualRuns {
    store: Store,
    subjects: Subjects,
    outbox_notify: Option<Arc<Notify>>,
}

/// Why a request was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    #[error("{0}")]
    Unprocessable(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Outbox(#[from] pulse_bus::OutboxError),
}

impl From<AcceptError> for ErrorReply {
    fn from(err: AcceptError) -> Self {
        match err {
            AcceptError::Unprocessable(message) => ErrorReply::new(UNPROCESSABLE_SCOPE, message),
            AcceptError::Store(StoreError::Unavailable(reason)) => {
                tracing::warn!(%reason, "database unavailable");
                ErrorReply::new(
                    "service_unavailable",
                    "the database is unavailable; retry shortly",
                )
            }
            other => {
                tracing::error!(error = %other, "accepting a patrol run failed");
                ErrorReply::new("internal_error", "the run could not be accepted")
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

impl ManualRuns {
    pub fn new(store: Store, subjects: Subjects) -> Self {
        Self {
            store,
            subjects,
            outbox_notify: None,
        }
    }

    /// Wakes the outbox relay after each accepted run.
    pub fn with_outbox_notify(mut self, notify: Arc<Notify>) -> Self {
        self.outbox_notify = Some(notify);
        self
    }

    /// Serves run requests of every tenant until the returned responder is stopped.
    pub async fn serve(self, bus: &Bus) -> Result<Responder, BusError> {
        let subject = bus.subjects().any_tenant(PATROL_RUN_REQUEST);
        let this = Arc::new(self);
        bus.serve::<PatrolRunRequest, _, _>(
            &subject,
            Some(PATROL_RUN_QUEUE_GROUP),
            move |ctx, req| {
                let this = this.clone();
                async move {
                    let tx = this
                        .store
                        .tenant_tx(&ctx.tenant)
                        .await
                        .map_err(|e| ErrorReply::from(AcceptError::Store(e)))?;
                    let accepted = this.accept(tx, req).await?;
                    Ok(accepted)
                }
            },
        )
        .await
    }

    /// Resolves, records and enqueues one run in `tx`, committing it.
    pub async fn accept(
        &self,
        tx: TenantTx,
        req: PatrolRunRequest,
    ) -> Result<PatrolRunAccepted, AcceptError> {
        let id = patrol_runs::new_run_id();
        let now = Utc::now();
        let run = match &req.scope {
            None => PatrolRun::queued(id, TriggerReason::Manual, RunType::Full, now),
            Some(scoped) => {
                let effective = effective_scope(&tx, scoped).await?;
                let mut run = PatrolRun::scoped(id, TriggerReason::Manual, scoped, now);
                run.set_effective_scope(&effective);
                run
            }
        };
        let requested_by = pulse_domain::resource::truncate_chars(&req.requested_by, 256);
        if !patrol_runs::insert_queued(&tx, &run, Some(&requested_by)).await? {
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
        let job = WatchJob {
            run_id: run.id,
            run_type: run.run_type,
            trigger_reason: run.trigger_reason,
        };
        let job_row = OutboxRow::job(&self.subjects, &tenant, WATCH_JOB, &job)?;
        pulse_bus::enqueue(&**tx.client(), job_row).await?;
        tx.commit().await?;
        if let Some(notify) = &self.outbox_notify {
            notify.notify_one();
        }
        tracing::info!(run_id = %accepted.run_id, run_type = accepted.run_type.as_str(), tenant = %tenant, "patrol run accepted");
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
    use std::collections::BTreeMap;

    use pulse_domain::TenantId;
    use pulse_domain::patrol::run::RunStatus;
    use pulse_domain::patrol::scope::RequestedScope;
    use pulse_domain::resource::{Health, ObservedResource, ResourceStatus, ResourceType};
    use pulse_store::agents::{self, AgentSession};
    use pulse_store::tenants;
    use pulse_test_support::db::TestDb;

    fn service(source: &str) -> ObservedResource {
        ObservedResource {
            resource_type: ResourceType::Service,
            source_id: source.to_owned(),
            name: source.to_owned(),
            aliases: Vec::new(),
            status: ResourceStatus::Running,
            health: Health::Healthy,
            restart_count: None,
            labels: BTreeMap::new(),
            details: serde_json::Value::Null,
            metrics: BTreeMap::new(),
        }
    }

    async fn report(store: &Store, tenant: &TenantId, agent: &str, sources: &[&str]) {
        let tx = store.tenant_tx(tenant).await.unwrap();
        agents::connect(
            &tx,
            &AgentSession {
                id: agent.to_owned(),
                hostname: agent.to_owned(),
                agent_version: "test".to_owned(),
                report_interval_ms: 1000,
                token_id: None,
            },
        )
        .await
        .unwrap();
        let observed: Vec<ObservedResource> = sources.iter().map(|s| service(s)).collect();
        resources::apply_report(&tx, agent, Utc::now(), &observed)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }

    /// A tenant with `web` on two hosts (ambiguous by name) and `db` on one.
    async fn setup() -> (TestDb, TenantId, ManualRuns) {
        let db = TestDb::create().await.unwrap();
        let tenant = TenantId::new("acme").unwrap();
        tenants::create(db.store(), &tenant, "Acme").await.unwrap();
        report(db.store(), &tenant, "h1", &["web", "db"]).await;
        report(db.store(), &tenant, "h2", &["web"]).await;
        let manual = ManualRuns::new(db.store().clone(), Subjects::new(None));
        (db, tenant, manual)
    }

    fn scoped(ids: &[&str], types: &[ResourceType]) -> PatrolRunRequest {
        PatrolRunRequest {
            scope: Some(ScopedRequest {
                scope: RequestedScope {
                    resource_ids: ids.iter().map(|s| (*s).to_owned()).collect(),
                    resource_types: types.to_vec(),
                },
                alert_identifier: None,
                alert_type: None,
                context: None,
            }),
            requested_by: "token:ops".to_owned(),
        }
    }

    async fn accept(
        manual: &ManualRuns,
        db: &TestDb,
        tenant: &TenantId,
        req: PatrolRunRequest,
    ) -> Result<PatrolRunAccepted, AcceptError> {
        let tx = db.store().tenant_tx(tenant).await.unwrap();
        manual.accept(tx, req).await
    }

    /// `(subject, payload run_id)` of every outbox row.
    async fn outbox(db: &TestDb) -> Vec<(String, String)> {
        let client = db.owner_client().await.unwrap();
        client
            .query(
                "SELECT subject, payload->>'run_id' FROM outbox ORDER BY id",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect()
    }

    #[tokio::test]
    async fn a_full_run_is_recorded_with_its_event_and_job_in_one_transaction() {
        let (db, tenant, manual) = setup().await;
        let accepted = accept(
            &manual,
            &db,
            &tenant,
            PatrolRunRequest {
                scope: None,
                requested_by: "token:ops".to_owned(),
            },
        )
        .await
        .unwrap();
        assert_eq!(accepted.run_type, RunType::Full);
        assert_eq!(accepted.trigger_reason, TriggerReason::Manual);
        let tx = db.store().tenant_tx(&tenant).await.unwrap();
        let run = patrol_runs::get(&tx, accepted.run_id)
            .await
            .unwrap()
            .expect("recorded");
        tx.commit().await.unwrap();
        assert_eq!(run.status, RunStatus::Queued);
        assert!(run.effective_scope_resource_ids.is_empty());
        let id = accepted.run_id.to_string();
        assert_eq!(
            outbox(&db).await,
            vec![
                ("pulse.acme.events.run.accepted".to_owned(), id.clone()),
                ("pulse.acme.jobs.watch".to_owned(), id),
            ]
        );
        db.cleanup().await.unwrap();
    }

    #[tokio::test]
    async fn canonical_and_source_ids_resolve_to_the_same_effective_scope() {
        let (db, tenant, manual) = setup().await;
        let by_canonical = accept(&manual, &db, &tenant, scoped(&["service:h1:db"], &[]))
            .await
            .unwrap();
        let by_source = accept(&manual, &db, &tenant, scoped(&["db"], &[]))
            .await
            .unwrap();
        assert_eq!(by_canonical.run_type, RunType::Scoped);
        assert_eq!(
            by_canonical.effective_scope_resource_ids,
            vec!["service:h1:db"]
        );
        assert_eq!(
            by_source.effective_scope_resource_ids,
            by_canonical.effective_scope_resource_ids
        );
        assert_eq!(by_source.scope_resource_ids, vec!["db"]);
        // Two references to one resource are one effective resource.
        let both = accept(&manual, &db, &tenant, scoped(&["db", "service:h1:db"], &[]))
            .await
            .unwrap();
        assert_eq!(both.effective_scope_resource_ids, vec!["service:h1:db"]);
        db.cleanup().await.unwrap();
    }

    #[tokio::test]
    async fn unmatched_and_ambiguous_ids_are_all_named_and_nothing_is_recorded() {
        let (db, tenant, manual) = setup().await;
        let err = accept(
            &manual,
            &db,
            &tenant,
            scoped(&["web", "nope", "service:h1:db", "gone"], &[]),
        )
        .await
        .expect_err("refused");
        let AcceptError::Unprocessable(message) = &err else {
            panic!("expected unprocessable, got {err:?}");
        };
        assert_eq!(
            message,
            "unmatched resource_ids: nope, gone; ambiguous resource_ids: web (matches \
             service:h1:web, service:h2:web)"
        );
        let reply = ErrorReply::from(err);
        assert_eq!(reply.code, UNPROCESSABLE_SCOPE);
        let tx = db.store().tenant_tx(&tenant).await.unwrap();
        assert!(patrol_runs::list(&tx, 30).await.unwrap().is_empty());
        tx.commit().await.unwrap();
        assert!(outbox(&db).await.is_empty());
        db.cleanup().await.unwrap();
    }

    #[tokio::test]
    async fn types_alone_cover_every_resource_of_those_types() {
        let (db, tenant, manual) = setup().await;
        let accepted = accept(&manual, &db, &tenant, scoped(&[], &[ResourceType::Service]))
            .await
            .unwrap();
        assert_eq!(
            accepted.effective_scope_resource_ids,
            vec!["service:h1:db", "service:h1:web", "service:h2:web"]
        );
        let err = accept(&manual, &db, &tenant, scoped(&[], &[ResourceType::Storage]))
            .await
            .expect_err("no storage exists");
        assert!(
            matches!(&err, AcceptError::Unprocessable(m) if m.contains("storage")),
            "{err:?}"
        );
        db.cleanup().await.unwrap();
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
}
