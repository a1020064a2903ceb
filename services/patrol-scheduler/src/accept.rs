//! The one path by which a Patrol run is accepted, whatever triggered it (an operator, the
//! cadence, an alert): resolve the scope, record the run `queued`, and enqueue its
//! `events.run.accepted` event and `jobs.watch` job through the outbox, all in one transaction, so
//! the job exists if and only if the record does.
//!
//! Every requested id goes through the store's one resolver; all that do not resolve to exactly
//! one resource are collected into one `unprocessable_scope` refusal naming them. A request that
//! names only resource types covers every resource of those types now.

use std::sync::Arc;

use chrono::Utc;
use pulse_bus::events::{PatrolRunAccepted, RUN_ACCEPTED, WATCH_JOB, WatchJob};
use pulse_bus::{ErrorReply, OutboxRow, Subjects};
use pulse_domain::patrol::run::{PatrolRun, RunType, TriggerReason};
use pulse_domain::patrol::scope::{EffectiveScope, ScopedRequest};
use pulse_domain::resource::ResourceId;
use pulse_store::resources::{self, ResolveError};
use pulse_store::{Store, StoreError, TenantTx, patrol_runs};
use tokio::sync::Notify;

/// The stable code of a scope that does not resolve.
pub const UNPROCESSABLE_SCOPE: &str = "unprocessable_scope";

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

/// Records and enqueues accepted runs.
#[derive(Clone)]
pub struct RunAcceptor {
    store: Store,
    subjects: Subjects,
    outbox_notify: Option<Arc<Notify>>,
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

    /// Resolves, records and enqueues one run in `tx`, committing it.
    pub async fn accept(
        &self,
        tx: TenantTx,
        submission: Submission<'_>,
    ) -> Result<PatrolRunAccepted, AcceptError> {
        let id = patrol_runs::new_run_id();
        let now = Utc::now();
        let run = match submission.scope {
            None => PatrolRun::queued(id, submission.trigger, RunType::Full, now),
            Some(scoped) => {
                let effective = effective_scope(&tx, scoped).await?;
                let mut run = PatrolRun::scoped(id, submission.trigger, scoped, now);
                run.set_effective_scope(&effective);
                run
            }
        };
        let requested_by = submission
            .requested_by
            .map(|actor| pulse_domain::resource::truncate_chars(actor, 256));
        if !patrol_runs::insert_queued(&tx, &run, requested_by.as_deref()).await? {
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
        tracing::info!(
            run_id = %accepted.run_id,
            run_type = accepted.run_type.as_str(),
            trigger = accepted.trigger_reason.as_str(),
            tenant = %tenant,
            "patrol run accepted"
        );
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
