//! Manual runs: serves `pulse.<tenant>.patrol.run.request` (queue group, so replicas share the
//! requests) and accepts each valid request through the one accept path ([`crate::accept`]).

use std::sync::Arc;

use pulse_bus::patrol_api::{PatrolRunAccepted, PatrolRunRequest};
use pulse_bus::{Bus, BusError, ErrorReply, Responder, Subjects};
use pulse_domain::patrol::run::TriggerReason;
use pulse_store::{Store, TenantTx};
use tokio::sync::Notify;

pub use crate::accept::AcceptError;
use crate::accept::{RunAcceptor, Submission};

/// Accepts manual run requests.
#[derive(Clone)]
pub struct ManualRuns {
    acceptor: RunAcceptor,
}

impl ManualRuns {
    pub fn new(store: Store, subjects: Subjects) -> Self {
        Self {
            acceptor: RunAcceptor::new(store, subjects),
        }
    }

    /// Serves requests through `acceptor` (which carries the process's notifies and limits).
    pub fn with_acceptor(acceptor: RunAcceptor) -> Self {
        Self { acceptor }
    }

    /// Wakes the outbox relay after each accepted run.
    pub fn with_outbox_notify(mut self, notify: Arc<Notify>) -> Self {
        self.acceptor = self.acceptor.with_outbox_notify(notify);
        self
    }

    /// Serves run requests of every tenant until the returned responder is stopped.
    pub async fn serve(self, bus: &Bus) -> Result<Responder, BusError> {
        let this = Arc::new(self);
        bus.serve_endpoint::<PatrolRunRequest, ErrorReply, _, _>(move |ctx, req| {
            let this = this.clone();
            async move {
                let tx = this
                    .acceptor
                    .store()
                    .tenant_tx(&ctx.tenant)
                    .await
                    .map_err(|e| ErrorReply::from(AcceptError::Store(e)))?;
                let accepted = this.accept(tx, req).await?;
                Ok(accepted)
            }
        })
        .await
    }

    /// Accepts one operator request in `tx`, committing it.
    pub async fn accept(
        &self,
        tx: TenantTx,
        req: PatrolRunRequest,
    ) -> Result<PatrolRunAccepted, AcceptError> {
        self.acceptor
            .accept(
                tx,
                Submission {
                    trigger: TriggerReason::Manual,
                    scope: req.scope.as_ref(),
                    requested_by: Some(&req.requested_by),
                },
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use pulse_bus::ErrorCode;
    use pulse_domain::patrol::run::RunType;
    use pulse_domain::patrol::scope::ScopedRequest;
    use pulse_store::{patrol_runs, resources};
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
            parent: None,
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
    async fn a_full_run_is_recorded_with_its_event_and_waits_for_dispatch() {
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
        // The job is the dispatcher's to write, once admission lets the run start.
        assert_eq!(
            outbox(&db).await,
            vec![("pulse.acme.events.run.accepted".to_owned(), id)]
        );
        let waiting = pulse_store::patrol_dispatch::undispatched(db.store(), 10)
            .await
            .unwrap();
        assert_eq!(waiting.len(), 1);
        assert_eq!(waiting[0].run_id, accepted.run_id);
        db.cleanup().await.unwrap();
    }

    fn full() -> PatrolRunRequest {
        PatrolRunRequest {
            scope: None,
            requested_by: "token:ops".to_owned(),
        }
    }

    #[tokio::test]
    async fn a_second_full_run_is_refused_naming_the_one_in_progress() {
        let (db, tenant, manual) = setup().await;
        let first = accept(&manual, &db, &tenant, full()).await.unwrap();
        let err = accept(&manual, &db, &tenant, full())
            .await
            .expect_err("a full run is queued");
        assert!(
            matches!(err, AcceptError::RunInProgress(id) if id == first.run_id),
            "{err:?}"
        );
        let reply = ErrorReply::from(err);
        assert_eq!(reply.code, ErrorCode::PatrolRunInProgress);
        assert!(
            reply.message.contains(&first.run_id.to_string()),
            "{}",
            reply.message
        );
        // Scoped runs are still accepted while the full run waits.
        accept(&manual, &db, &tenant, scoped(&["db"], &[]))
            .await
            .unwrap();
        // Once the full run ended, a new one is accepted.
        let tx = db.store().tenant_tx(&tenant).await.unwrap();
        patrol_runs::finish(
            &tx,
            first.run_id,
            None,
            pulse_domain::patrol::run::RunEvent::Failed {
                cause: pulse_domain::patrol::run::ErrorCause::NotReady,
            },
            Utc::now(),
            Some("test"),
            |_| {},
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        accept(&manual, &db, &tenant, full()).await.unwrap();
        db.cleanup().await.unwrap();
    }

    #[tokio::test]
    async fn racing_full_run_requests_accept_exactly_one() {
        let (db, tenant, manual) = setup().await;
        let attempts = (0..8).map(|_| {
            let (manual, store, tenant) = (manual.clone(), db.store().clone(), tenant.clone());
            tokio::spawn(async move {
                let tx = store.tenant_tx(&tenant).await.unwrap();
                manual.accept(tx, full()).await
            })
        });
        let mut accepted = 0;
        for attempt in attempts.collect::<Vec<_>>() {
            match attempt.await.unwrap() {
                Ok(_) => accepted += 1,
                Err(AcceptError::RunInProgress(_)) => {}
                Err(other) => panic!("unexpected refusal {other:?}"),
            }
        }
        assert_eq!(accepted, 1);
        db.cleanup().await.unwrap();
    }

    #[tokio::test]
    async fn scoped_runs_beyond_the_queue_limit_are_refused() {
        let (db, tenant, _) = setup().await;
        let manual = ManualRuns::with_acceptor(
            RunAcceptor::new(db.store().clone(), Subjects::new(None)).with_scoped_queue_limit(2),
        );
        for _ in 0..2 {
            accept(&manual, &db, &tenant, scoped(&["db"], &[]))
                .await
                .unwrap();
        }
        let err = accept(&manual, &db, &tenant, scoped(&["db"], &[]))
            .await
            .expect_err("queue full");
        assert!(
            matches!(err, AcceptError::QueueFull { limit: 2 }),
            "{err:?}"
        );
        assert_eq!(ErrorReply::from(err).code, ErrorCode::PatrolQueueFull);
        // A dispatched run no longer counts as waiting.
        let waiting = pulse_store::patrol_dispatch::undispatched(db.store(), 10)
            .await
            .unwrap();
        let tx = db.store().tenant_tx(&tenant).await.unwrap();
        assert!(
            pulse_store::patrol_dispatch::mark_dispatched(&tx, waiting[0].run_id)
                .await
                .unwrap()
        );
        assert!(
            !pulse_store::patrol_dispatch::mark_dispatched(&tx, waiting[0].run_id)
                .await
                .unwrap()
        );
        tx.commit().await.unwrap();
        accept(&manual, &db, &tenant, scoped(&["db"], &[]))
            .await
            .unwrap();
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
        assert_eq!(reply.code, ErrorCode::UnprocessableScope);
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
}
