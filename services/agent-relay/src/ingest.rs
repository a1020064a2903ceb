//! Storing reports: resources, aliases, metric samples and change events.
//!
//! Group commit: sessions hand their reports to a few ingest workers. A worker takes every report
//! waiting in the queue (up to [`MAX_BATCH`]) and stores those of one tenant in one transaction,
//! with the same set-based statements over all of them; each session gets its answer after that
//! shared commit. Under light load a report is stored alone as soon as it arrives (no waiting
//! for company); under heavy load the queue fills while the workers are busy and the batches
//! grow, so the per-transaction costs (commit and its WAL flush, planning, the round trips) are
//! paid once for many reports.
//!
//! One bad report never fails others: a report the database would refuse (see [`storable`]) is
//! stored alone, and when a shared transaction fails anyway every report of it is retried in a
//! transaction of its own, with all of its details.

use std::sync::Arc;

use pulse_bus::events::RESOURCE_CHANGED;
use pulse_bus::{OutboxRow, Subjects};
use pulse_domain::TenantId;
use pulse_domain::agent_protocol::Report;
use pulse_domain::resource::ResourceId;
use pulse_store::metrics::{self, MetricSample};
use pulse_store::resources::{self, ReportRows};
use pulse_store::{Store, agents};
use tokio::sync::{Mutex, Notify, mpsc, oneshot};

/// Transactions storing reports at the same time. Each holds a pooled connection while it runs;
/// more of them only make the server switch between them.
pub const WORKERS: usize = 4;
/// Reports stored in one transaction at most.
pub const MAX_BATCH: usize = 64;
/// Reports waiting for a worker before sessions wait to hand theirs over.
const QUEUE: usize = 4096;
/// Longest metric name the database accepts.
const MAX_METRIC_CHARS: usize = 128;

/// What a stored report changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ingested {
    pub resources: usize,
    pub changes: usize,
    pub samples: usize,
}

/// One report on its way to the database.
pub struct Submission {
    pub tenant: TenantId,
    pub agent_id: String,
    pub report: Report,
    /// Aligned with `report.resources` (or empty): the resource's details are stored exactly as
    /// reported, by this session's previous report, so they need not be sent again.
    pub details_stored: Vec<bool>,
}

struct Job {
    submission: Submission,
    reply: oneshot::Sender<anyhow::Result<Ingested>>,
}

/// What the ingest workers need of the relay.
#[derive(Clone)]
pub struct IngestContext {
    pub store: Store,
    pub subjects: Subjects,
    /// Wakes the outbox relay after a commit that enqueued events.
    pub outbox_notify: Arc<Notify>,
}

/// The sessions' side of the ingest queue.
#[derive(Clone)]
pub struct Ingest {
    queue: mpsc::Sender<Job>,
}

impl Ingest {
    /// Starts the workers; they stop when every [`Ingest`] handle is gone.
    pub fn start(context: IngestContext) -> Self {
        let (queue, jobs) = mpsc::channel(QUEUE);
        let jobs = Arc::new(Mutex::new(jobs));
        for _ in 0..WORKERS {
            tokio::spawn(worker(context.clone(), jobs.clone()));
        }
        Self { queue }
    }

    /// Stores one report; returns after the transaction that stored it committed.
    pub async fn store(&self, submission: Submission) -> anyhow::Result<Ingested> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Job { submission, reply })
            .await
            .map_err(|_| anyhow::anyhow!("the ingest workers stopped"))?;
        answer
            .await
            .map_err(|_| anyhow::anyhow!("the ingest worker went away"))?
    }
}

async fn worker(context: IngestContext, queue: Arc<Mutex<mpsc::Receiver<Job>>>) {
    loop {
        let jobs = {
            let mut queue = queue.lock().await;
            let Some(first) = queue.recv().await else {
                return;
            };
            let mut jobs = vec![first];
            while jobs.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
            jobs
        };
        for batch in batches(jobs) {
            store_batch(&context, batch).await;
        }
    }
}

/// Splits the jobs into batches of one tenant each, where an agent appears at most once (a
/// second report of the same agent goes into a later batch, so reports keep their order) and a
/// report the database might refuse is alone.
fn batches(jobs: Vec<Job>) -> Vec<Vec<Job>> {
    // Each batch with whether it takes more reports (a report stored alone does not).
    let mut out: Vec<(Vec<Job>, bool)> = Vec::new();
    for job in jobs {
        let submission = &job.submission;
        let same_agent = |j: &Job| {
            j.submission.tenant == submission.tenant && j.submission.agent_id == submission.agent_id
        };
        // After the last batch holding this agent, so the agent's reports keep their order.
        let after = out
            .iter()
            .rposition(|(batch, _)| batch.iter().any(same_agent))
            .map_or(0, |i| i + 1);
        if !storable(&submission.report) {
            out.push((vec![job], false));
            continue;
        }
        let fits = |(batch, open): &(Vec<Job>, bool)| {
            *open && batch[0].submission.tenant == submission.tenant
        };
        match (after..out.len()).find(|&i| fits(&out[i])) {
            Some(i) => out[i].0.push(job),
            None => out.push((vec![job], true)),
        }
    }
    out.into_iter().map(|(batch, _)| batch).collect()
}

/// Whether the database accepts every value of the report as it is (the rest of the limits are
/// enforced by `ObservedResource::sanitize` before): text without NUL characters, metric names
/// of 1 to 128 characters. A report that fails this is still tried, alone, and fails with the
/// database's reason.
fn storable(report: &Report) -> bool {
    fn text(s: &str) -> bool {
        !s.contains('\0')
    }
    fn json(value: &serde_json::Value) -> bool {
        match value {
            serde_json::Value::String(s) => text(s),
            serde_json::Value::Array(items) => items.iter().all(json),
            serde_json::Value::Object(map) => map.iter().all(|(k, v)| text(k) && json(v)),
            _ => true,
        }
    }
    report.resources.iter().all(|r| {
        text(&r.source_id)
            && text(&r.name)
            && r.aliases.iter().all(|a| text(a))
            && r.labels.iter().all(|(k, v)| text(k) && text(v))
            && r.metrics
                .keys()
                .all(|m| text(m) && !m.is_empty() && m.chars().count() <= MAX_METRIC_CHARS)
            && json(&r.details)
    })
}

/// Stores the jobs of one batch in one transaction; when that fails, each in its own.
async fn store_batch(context: &IngestContext, jobs: Vec<Job>) {
    let submissions: Vec<&Submission> = jobs.iter().map(|j| &j.submission).collect();
    let stored = store(context, &submissions, true).await;
    match stored {
        Ok(ingested) => {
            for (job, ingested) in jobs.into_iter().zip(ingested) {
                let _ = job.reply.send(Ok(ingested));
            }
        }
        Err(error) if jobs.len() == 1 => {
            // Alone already: retry only when details were left out (the session's idea of the
            // stored details may be what failed).
            if let Some(job) = jobs.into_iter().next() {
                let result = if job.submission.details_stored.iter().any(|&s| s) {
                    store_one(context, &job.submission).await
                } else {
                    Err(error)
                };
                let _ = job.reply.send(result);
            }
        }
        Err(error) => {
            tracing::warn!(reports = jobs.len(), error = %format!("{error:#}"), "shared report transaction failed; storing each report alone");
            for job in jobs {
                let result = store_one(context, &job.submission).await;
                let _ = job.reply.send(result);
            }
        }
    }
}

/// Stores one report alone, with all of its details.
async fn store_one(context: &IngestContext, submission: &Submission) -> anyhow::Result<Ingested> {
    store(context, &[submission], false)
        .await?
        .pop()
        .ok_or_else(|| anyhow::anyhow!("the report was not stored"))
}

/// Stores reports of one tenant and distinct agents in one transaction. With `skip_stored`
/// false every resource's details are sent.
async fn store(
    context: &IngestContext,
    submissions: &[&Submission],
    skip_stored: bool,
) -> anyhow::Result<Vec<Ingested>> {
    let Some(tenant) = submissions.first().map(|s| &s.tenant) else {
        return Ok(Vec::new());
    };
    let samples: Vec<MetricSample> = submissions
        .iter()
        .flat_map(|s| {
            let report = &s.report;
            report.resources.iter().flat_map(move |r| {
                let id = ResourceId::of(r.resource_type, &s.agent_id, &r.source_id);
                r.metrics.iter().map(move |(metric, value)| MetricSample {
                    resource_id: id.clone(),
                    metric: metric.clone(),
                    at: report.observed_at,
                    value: *value,
                })
            })
        })
        .collect();
    let rows: Vec<ReportRows<'_>> = submissions
        .iter()
        .map(|s| ReportRows {
            agent_id: &s.agent_id,
            observed_at: s.report.observed_at,
            resources: &s.report.resources,
            details_stored: if skip_stored { &s.details_stored } else { &[] },
        })
        .collect();
    let agent_ids: Vec<&str> = submissions.iter().map(|s| s.agent_id.as_str()).collect();
    let tx = context.store.tenant_tx(tenant).await?;
    // Independent statements of one transaction, polled together so the client pipelines them
    // (sent in this order without waiting for each answer).
    let (_, changes, _) = tokio::try_join!(
        agents::seen_all(&tx, &agent_ids),
        resources::apply_reports(&tx, &rows),
        metrics::insert(&tx, &samples),
    )?;
    // New resources count against the tenant's `resources` quota: a batch that would pass it
    // is not stored (alone, the report is refused with the quota's message).
    let created = changes
        .iter()
        .flatten()
        .any(|c| c.change == pulse_domain::resource::ResourceChange::Created);
    if created {
        let limits = pulse_store::quotas::get(&tx).await?;
        if let Some(limit) = limits.limit(pulse_domain::tenant::Quota::Resources) {
            let used = pulse_store::quotas::usage(&tx, pulse_domain::tenant::Quota::Resources)
                .await?
                .unwrap_or(0);
            if used > limit {
                tx.rollback().await?;
                return Err(pulse_domain::tenant::QuotaExceeded {
                    quota: pulse_domain::tenant::Quota::Resources,
                    limit,
                }
                .into());
            }
        }
    }
    let (domain, event) = RESOURCE_CHANGED;
    let outbox = changes
        .iter()
        .flatten()
        .map(|change| OutboxRow::event(&context.subjects, tenant, domain, event, change))
        .collect::<Result<Vec<_>, _>>()?;
    futures::future::try_join_all(
        outbox
            .into_iter()
            .map(|row| pulse_bus::enqueue(&**tx.client(), row)),
    )
    .await?;
    tx.commit().await?;
    if changes.iter().any(|c| !c.is_empty()) {
        context.outbox_notify.notify_one();
    }
    Ok(submissions
        .iter()
        .zip(&changes)
        .map(|(s, changes)| Ingested {
            resources: s.report.resources.len(),
            changes: changes.len(),
            samples: s.report.resources.iter().map(|r| r.metrics.len()).sum(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use pulse_domain::resource::{Health, ObservedResource, ResourceStatus, ResourceType};
    use pulse_test_support::db::TestDb;

    use super::*;

    fn job_with_answer(
        tenant: &str,
        agent: &str,
        metric: &str,
    ) -> (Job, oneshot::Receiver<anyhow::Result<Ingested>>) {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            submission: Submission {
                tenant: TenantId::new(tenant).expect("tenant id"),
                agent_id: agent.to_owned(),
                report: Report {
                    seq: 1,
                    observed_at: Utc::now(),
                    resources: vec![ObservedResource {
                        resource_type: ResourceType::Host,
                        source_id: agent.to_owned(),
                        name: agent.to_owned(),
                        aliases: Vec::new(),
                        status: ResourceStatus::Running,
                        health: Health::Healthy,
                        restart_count: None,
                        labels: Default::default(),
                        details: serde_json::json!({"note": "ok"}),
                        metrics: [(metric.to_owned(), 1.0)].into(),
                        parent: None,
                    }],
                },
                details_stored: vec![true],
            },
            reply,
        };
        (job, answer)
    }

    fn job(tenant: &str, agent: &str, metric: &str) -> Job {
        job_with_answer(tenant, agent, metric).0
    }

    fn shape(batches: &[Vec<Job>]) -> Vec<Vec<String>> {
        batches
            .iter()
            .map(|b| {
                b.iter()
                    .map(|j| format!("{}/{}", j.submission.tenant, j.submission.agent_id))
                    .collect()
            })
            .collect()
    }

    /// One tenant per batch, an agent at most once per batch and in its order, and a report the
    /// database would refuse alone.
    #[test]
    fn batches_keep_tenants_apart_agents_in_order_and_bad_reports_alone() {
        let jobs = vec![
            job("t1", "a", "cpu"),
            job("t2", "a", "cpu"),
            job("t1", "b", "cpu"),
            job("t1", "a", "cpu"),
            job("t1", "c", ""),
            job("t1", "d", &"m".repeat(129)),
            job("t1", "e", "cpu"),
            job("t1", "a", "cpu"),
        ];
        let out = batches(jobs);
        assert_eq!(
            shape(&out),
            vec![
                vec!["t1/a", "t1/b", "t1/e"],
                vec!["t2/a"],
                vec!["t1/a"],
                vec!["t1/c"],
                vec!["t1/d"],
                vec!["t1/a"],
            ]
        );
    }

    /// A report the database refuses inside a shared transaction fails alone: the others of its
    /// batch are stored, each in its own transaction, with their details.
    #[tokio::test]
    async fn a_refused_report_does_not_fail_the_others_of_its_batch() -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let store = Store::connect_app(&db.database_config()).await?;
        let tenant = TenantId::new("acme")?;
        pulse_store::tenants::create(&store, &tenant, "Acme").await?;
        let tx = store.tenant_tx(&tenant).await?;
        for id in ["good", "bad"] {
            agents::connect(
                &tx,
                &agents::AgentSession {
                    id: id.to_owned(),
                    hostname: id.to_owned(),
                    agent_version: "test".to_owned(),
                    report_interval_ms: 1000,
                    token_id: None,
                },
            )
            .await?;
        }
        tx.commit().await?;
        let context = IngestContext {
            store: store.clone(),
            subjects: Subjects::new(Some("ingest-test")),
            outbox_notify: Arc::new(Notify::new()),
        };
        // Built by hand: `batches` would have put the bad report alone.
        let (good, good_answer) = job_with_answer("acme", "good", "cpu_percent");
        let (bad, bad_answer) = job_with_answer("acme", "bad", &"m".repeat(200));
        store_batch(&context, vec![good, bad]).await;

        let stored = good_answer.await??;
        assert_eq!(stored.resources, 1);
        assert_eq!(stored.samples, 1);
        assert!(bad_answer.await?.is_err());
        let tx = store.tenant_tx(&tenant).await?;
        let host = resources::get(&tx, "host:good").await?.expect("stored");
        // Stored alone with all of its details, although the session believed them stored.
        assert_eq!(host.details, serde_json::json!({"note": "ok"}));
        assert!(resources::get(&tx, "host:bad").await?.is_none());
        drop(tx);
        store.pool().close();
        db.cleanup().await
    }
}
