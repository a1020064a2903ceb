//! The take deadline of dispatched Patrol runs, with the real gateway, patrol-scheduler and
//! model-runner binaries and a short deadline injected through the scheduler's config
//! (`PULSE_PATROL__TAKE_DEADLINE_MS`, `PULSE_PATROL__MAX_REDISPATCHES`).
//!
//! - With no model-runner at all, an accepted run is dispatched, written again once, and then
//!   ends `error` with cause `runner_unavailable` and a summary that says what to do: it never
//!   stays `queued`.
//! - A runner that only appears after the first deadline takes the run (one of its job copies;
//!   the others are acked untouched) and the run completes normally, started once.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use pulse_domain::TenantId;
use pulse_domain::patrol::run::{ErrorCause, RunStatus};
use pulse_domain::patrol::scope::RawRunRequest;
use pulse_domain::resource::ObservedResource;
use pulse_test_support::patrol::{self, openai_route, save_settings};
use pulse_test_support::provider_sim::{ProviderSim, Script, Turn, preflight_reply};
use pulse_test_support::runner::TestModelRunner;
use pulse_test_support::scheduler::TestScheduler;
use pulse_test_support::seed::{self, service_resource};
use pulse_test_support::service::{TestGateway, scratch_dir};
use pulse_test_support::wait;

const KEY: &str = "sk-take-deadline-e2e-5c2e81";
const SWEEP_MS: &str = "250";
/// Time for a run to be picked up and answered on a loaded 2-core machine.
const RUN_DEADLINE: Duration = Duration::from_secs(45);

struct Stack {
    gateway: TestGateway,
    scheduler: Option<TestScheduler>,
    sim: ProviderSim,
    dir: PathBuf,
}

impl Stack {
    /// Gateway, a scheduler with the given take deadline, the simulator behind the Patrol route
    /// and one reported service.
    async fn start(take_deadline_ms: u64, max_redispatches: u32) -> anyhow::Result<Self> {
        pulse_test_support::install_crypto_provider();
        let gateway = TestGateway::start().await?;
        let dir = scratch_dir("take-deadline")?;
        let deadline = take_deadline_ms.to_string();
        let redispatches = max_redispatches.to_string();
        let scheduler = TestScheduler::start(
            &gateway,
            &dir.join("scheduler"),
            &[
                ("PULSE_RUNNER__LEASE_SWEEP_MS", SWEEP_MS),
                ("PULSE_PATROL__TAKE_DEADLINE_MS", deadline.as_str()),
                ("PULSE_PATROL__MAX_REDISPATCHES", redispatches.as_str()),
            ],
        )
        .await?;
        let sim = ProviderSim::start(
            Script::turns([
                Turn::watch_read(),
                Turn::text("Summary: web is running and healthy; nothing looks wrong."),
            ])
            .with_tool_offer_reply(preflight_reply()),
        )
        .await?;
        save_settings(
            &gateway,
            &openai_route("gpt-4o-mini", KEY, &sim.openai_base_url()),
        )
        .await?;
        let host = pulse_test_support::agent::host_id("take-deadline");
        let store = gateway.db.store();
        let tx = store.tenant_tx(&TenantId::default_tenant()).await?;
        let observed: Vec<ObservedResource> = vec![service_resource("web")];
        seed::report(&tx, &host, "e2e", 10_000, &observed).await?;
        tx.commit().await?;
        Ok(Self {
            gateway,
            scheduler: Some(scheduler),
            sim,
            dir,
        })
    }

    /// `(status, redispatch_count, dispatched)` of run `id`, read as the database owner.
    async fn dispatch_state(&self, id: &str) -> anyhow::Result<(String, i32, bool)> {
        let owner = self.gateway.db.owner_client().await?;
        let row = owner
            .query_one(
                "SELECT status, redispatch_count, dispatched_at IS NOT NULL
                 FROM patrol_runs WHERE id = $1::text::uuid",
                &[&id],
            )
            .await?;
        Ok((row.get(0), row.get(1), row.get(2)))
    }

    /// `(kind, count)` of the outbox rows about run `id`: its Watch jobs and run events.
    async fn outbox_rows(&self, id: &str) -> anyhow::Result<Vec<(String, i64)>> {
        let owner = self.gateway.db.owner_client().await?;
        let rows = owner
            .query(
                "SELECT substring(subject from '\\.((jobs|events)\\.[a-z_.]+)$'), count(*)
                 FROM outbox WHERE payload->>'run_id' = $1
                 GROUP BY 1 ORDER BY 1",
                &[&id],
            )
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(scheduler) = self.scheduler.take() {
            scheduler.stop().await?;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        drop(self.sim);
        self.gateway.stop().await
    }
}

fn rows(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
    pairs.iter().map(|(s, n)| ((*s).to_owned(), *n)).collect()
}

#[tokio::test]
async fn without_a_runner_a_dispatched_run_ends_runner_unavailable() -> anyhow::Result<()> {
    let stack = Stack::start(1_500, 1).await?;
    let accepted_at = Instant::now();
    let run_id = patrol::request_run(&stack.gateway, &RawRunRequest::default()).await?;
    let id = run_id.to_string();

    let run = patrol::terminal_run(&stack.gateway, run_id, RUN_DEADLINE)
        .await
        .map_err(|e| {
            let log = stack
                .scheduler
                .as_ref()
                .map(|s| s.process.log_tail(40))
                .unwrap_or_default();
            anyhow::anyhow!("{e}; scheduler log:\n{log}")
        })?;
    let waited = accepted_at.elapsed();
    assert_eq!(run.status, RunStatus::Error, "{run:?}");
    assert_eq!(
        run.error_cause,
        Some(ErrorCause::RunnerUnavailable),
        "{run:?}"
    );
    assert_eq!(
        run.error_summary.as_deref(),
        Some(ErrorCause::RunnerUnavailable.summary()),
        "{run:?}"
    );
    assert!(
        run.error_detail
            .as_deref()
            .is_some_and(|d| d.contains("check that the model-runner service is running")),
        "{run:?}"
    );
    assert_eq!(run.started_at, None, "no runner ever started it: {run:?}");
    // One deadline for the first job and one for the job written again, no sooner.
    assert!(
        waited >= Duration::from_millis(3_000),
        "ended after {waited:?}"
    );
    assert_eq!(
        stack.dispatch_state(&id).await?,
        ("error".to_owned(), 1, true)
    );
    assert_eq!(
        stack.outbox_rows(&id).await?,
        rows(&[
            ("events.run.accepted", 1),
            ("events.run.completed", 1),
            ("jobs.watch", 2),
        ])
    );
    stack.stop().await
}

#[tokio::test]
async fn a_runner_that_appears_after_the_first_deadline_completes_the_run() -> anyhow::Result<()> {
    let stack = Stack::start(2_500, 6).await?;
    let run_id = patrol::request_run(&stack.gateway, &RawRunRequest::default()).await?;
    let id = run_id.to_string();

    // The first deadline passes with no runner: the job is written again.
    wait::until(
        RUN_DEADLINE,
        "the run's job to be written again",
        || async {
            let (status, redispatches, _) = stack.dispatch_state(&id).await.ok()?;
            (status == "queued" && redispatches >= 1).then_some(())
        },
    )
    .await?;

    let runner = TestModelRunner::start(&stack.gateway, &stack.dir.join("runner"), &[]).await?;
    let run = patrol::terminal_run(&stack.gateway, run_id, RUN_DEADLINE)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(40)))?;
    assert!(
        matches!(run.status, RunStatus::Healthy | RunStatus::IssuesFound),
        "{run:?}"
    );
    assert_eq!(run.error_cause, None, "{run:?}");
    assert!(run.started_at.is_some(), "{run:?}");

    // Started and completed once, whichever copy of the job the runner took first; the other
    // copies were acked untouched and nothing is written again once it started.
    let outbox = stack.outbox_rows(&id).await?;
    let count = |kind: &str| {
        outbox
            .iter()
            .find(|(k, _)| k == kind)
            .map_or(0, |(_, n)| *n)
    };
    assert_eq!(count("events.run.started"), 1, "{outbox:?}");
    assert_eq!(count("events.run.completed"), 1, "{outbox:?}");
    let (_, redispatches, _) = stack.dispatch_state(&id).await?;
    assert!(redispatches >= 1, "{redispatches}");
    assert_eq!(
        count("jobs.watch"),
        i64::from(redispatches) + 1,
        "{outbox:?}"
    );
    runner.stop().await?;
    stack.stop().await
}
