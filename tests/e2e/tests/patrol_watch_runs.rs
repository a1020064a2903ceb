//! Watch runs end to end: the real gateway, patrol-scheduler and model-runner binaries with the
//! provider simulator behind an OpenAI-compatible Patrol route (`openai:gpt-4o-mini`, base URL =
//! the simulator, key set through `PUT /api/settings/ai`).
//!
//! - A manual run ends in exactly one terminal record (`healthy` when the model answers in
//!   text), with its tokens, visible at `GET /api/ai/patrol/runs/{id}`.
//! - A runner killed (SIGKILL) while the provider holds its response loses its lease: the run
//!   ends `error` (`runner_lost`) within the lease timeout; a restarted runner acks the
//!   redelivered job without a new model request, and the record stays as it was.
//! - A scoped run whose resource disappears between acceptance and start ends `error`
//!   (`scope_empty`) with its requested ids and an empty effective scope, before any model call.
//!
//! The simulator answers every request offering the preflight probe tool (the runner's provider
//! preflight) with a call of it, outside the scripted order, so the scripted turns go to the
//! runs.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use pulse_api::settings::SettingsPreflightState;
use pulse_domain::TenantId;
use pulse_domain::patrol::readiness::TurnTransport;
use pulse_domain::patrol::run::{ErrorCause, PatrolRun, RunId, RunStatus, RunType};
use pulse_domain::patrol::scope::RawRunRequest;
use pulse_domain::resource::ObservedResource;
use pulse_test_support::patrol::{self, openai_route, save_settings};
use pulse_test_support::provider_sim::{
    Delivery, PREFLIGHT_TOOL, Persona, ProviderSim, RecordedRequest, Script, Step, Turn,
    preflight_reply,
};
use pulse_test_support::runner::TestModelRunner;
use pulse_test_support::scheduler::TestScheduler;
use pulse_test_support::seed::{self, service_resource};
use pulse_test_support::service::{TestGateway, scratch_dir};
use pulse_test_support::wait;

const ROUTE: &str = "openai:gpt-4o-mini";
const KEY: &str = "sk-watch-e2e-7f3a9c1d2b";
const LEASE_MS: u64 = 3_000;
const SWEEP_MS: u64 = 500;
/// Time for a run to be picked up and answered on a loaded 2-core machine.
const RUN_DEADLINE: Duration = Duration::from_secs(30);

/// The gateway and scheduler of one test, its simulator and its resources.
struct Stack {
    gateway: TestGateway,
    scheduler: Option<TestScheduler>,
    sim: ProviderSim,
    dir: PathBuf,
    host: String,
}

impl Stack {
    /// Gateway + scheduler, the simulator with `script`, the Patrol route and key saved, and two
    /// services (`web`, `db`) on one host.
    async fn start(script: Script) -> anyhow::Result<Self> {
        Self::start_as(script, Persona::Standard).await
    }

    /// [`Stack::start`] with a simulator imitating `persona`.
    async fn start_as(script: Script, persona: Persona) -> anyhow::Result<Self> {
        pulse_test_support::install_crypto_provider();
        let gateway = TestGateway::start().await?;
        let dir = scratch_dir("watch-runs")?;
        let sweep = SWEEP_MS.to_string();
        let scheduler = TestScheduler::start(
            &gateway,
            &dir.join("scheduler"),
            &[("PULSE_RUNNER__LEASE_SWEEP_MS", sweep.as_str())],
        )
        .await?;
        let sim =
            ProviderSim::start_as(script.with_tool_offer_reply(preflight_reply()), persona).await?;
        let host = pulse_test_support::agent::host_id("watch");
        let stack = Self {
            gateway,
            scheduler: Some(scheduler),
            sim,
            dir,
            host,
        };
        let model = ROUTE.trim_start_matches("openai:");
        save_settings(
            &stack.gateway,
            &openai_route(model, KEY, &stack.sim.openai_base_url()),
        )
        .await?;
        stack.report(&["web", "db"]).await?;
        Ok(stack)
    }

    /// The agent of `host` reports these services (through the store, as the relay writes them).
    async fn report(&self, services: &[&str]) -> anyhow::Result<()> {
        let store = self.gateway.db.store();
        let tx = store.tenant_tx(&TenantId::default_tenant()).await?;
        let observed: Vec<ObservedResource> =
            services.iter().map(|s| service_resource(s)).collect();
        seed::report(&tx, &self.host, "e2e", 10_000, &observed).await?;
        tx.commit().await?;
        Ok(())
    }

    fn service_id(&self, name: &str) -> String {
        format!("service:{}:{name}", self.host)
    }

    async fn runner(&self, label: &str) -> anyhow::Result<TestModelRunner> {
        TestModelRunner::start(
            &self.gateway,
            &self.dir.join(label),
            &[("PULSE_RUNNER__LEASE_MS", LEASE_MS.to_string())],
        )
        .await
    }

    async fn accept_run(&self, request: &RawRunRequest) -> anyhow::Result<RunId> {
        patrol::request_run(&self.gateway, request).await
    }

    async fn run(&self, id: RunId) -> anyhow::Result<PatrolRun> {
        Ok(self.gateway.client()?.patrol_run_by_id(id).await?)
    }

    /// Waits until the run is terminal and returns it.
    async fn terminal_run(&self, id: RunId, deadline: Duration) -> anyhow::Result<PatrolRun> {
        patrol::terminal_run(&self.gateway, id, deadline).await
    }

    /// Requests of the runs, as opposed to the runner's preflights (which offer the probe tool).
    fn run_requests(&self) -> Vec<RecordedRequest> {
        self.sim
            .requests()
            .into_iter()
            .filter(|r| {
                !r.body
                    .to_string()
                    .contains(&format!("\"{PREFLIGHT_TOOL}\""))
            })
            .collect()
    }

    /// `(subject suffix, count)` of the outbox rows about `run_id`.
    async fn run_events(&self, run_id: RunId) -> anyhow::Result<Vec<(String, i64)>> {
        let run_id = run_id.to_string();
        let owner = self.gateway.db.owner_client().await?;
        let rows = owner
            .query(
                "SELECT substring(subject from '\\.events\\.(run\\.[a-z_]+)$'), count(*)
                 FROM outbox WHERE payload->>'run_id' = $1 AND subject LIKE '%.events.run.%'
                 GROUP BY 1 ORDER BY 1",
                &[&run_id],
            )
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    async fn watch_jobs_left(&self) -> anyhow::Result<u64> {
        let nats = async_nats::connect(pulse_test_support::nats::nats_url()).await?;
        let js = async_nats::jetstream::new(nats);
        let subjects = pulse_bus::Subjects::try_new(Some(&self.gateway.prefix))?;
        let mut stream = js.get_stream(subjects.jobs_stream()).await?;
        Ok(stream.info().await?.state.messages)
    }

    async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(scheduler) = self.scheduler.take() {
            scheduler.stop().await?;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        self.gateway.stop().await
    }
}

fn events(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
    pairs.iter().map(|(s, n)| ((*s).to_owned(), *n)).collect()
}

#[tokio::test]
async fn a_manual_run_ends_in_one_healthy_record_with_its_tokens() -> anyhow::Result<()> {
    let stack = Stack::start(Script::turns([
        Turn::watch_read(),
        Turn::text("Summary: web and db are running and healthy; nothing looks wrong."),
    ]))
    .await?;
    let runner = stack.runner("runner").await?;

    let run_id = stack.accept_run(&RawRunRequest::default()).await?;
    let run = stack
        .terminal_run(run_id, RUN_DEADLINE)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(40)))?;
    assert_eq!(run.status, RunStatus::Healthy, "{run:?}");
    assert_eq!(run.run_type, RunType::Full);
    assert!(run.started_at.is_some(), "{run:?}");
    assert!(run.input_tokens > 0, "{run:?}");
    assert!(run.output_tokens > 0, "{run:?}");
    assert!(run.cost_usd.is_some_and(|c| c > 0.0), "{run:?}");
    assert_eq!(run.counts.resources_checked, 2);
    assert_eq!(run.counts.services_checked, 2);
    assert_eq!(run.error_cause, None);
    assert_eq!(run.turns, 2, "{run:?}");
    // The analysis is written from accepted outcomes, not the model's prose.
    assert!(
        run.ai_analysis
            .as_deref()
            .is_some_and(|a| a.contains("No warning or critical problem was recorded")),
        "{run:?}"
    );

    // The model got two requests (its read, then its answer): the seeded inventory as
    // untrusted data, the Watch tools, no key.
    let requests = stack.run_requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let body = requests[0].body.to_string();
    assert!(body.contains("untrusted-inventory"), "{body}");
    // Routine resources are counted per type and host, not listed: `db` is one of the two
    // routine services, and its id is one `pulse_query` call away.
    for part in [
        r#"\"type\":\"service\""#,
        r#"\"routine\":2"#,
        r#"\"hosts\":1"#,
    ] {
        assert!(body.contains(part), "{part} in {body}");
    }
    assert!(!body.contains(&stack.service_id("db")), "{body}");
    assert!(!body.contains(KEY));
    let answered = |r: &RecordedRequest| r.usage.expect("answered");
    assert_eq!(
        run.input_tokens,
        requests
            .iter()
            .map(|r| answered(r).input_tokens)
            .sum::<u64>()
    );
    assert_eq!(
        run.output_tokens,
        requests
            .iter()
            .map(|r| answered(r).output_tokens)
            .sum::<u64>()
    );

    // Exactly one start and one terminal write, each announced once; one progress event per
    // model request and one per tool call between them.
    assert_eq!(
        stack.run_events(run_id).await?,
        events(&[
            ("run.accepted", 1),
            ("run.completed", 1),
            ("run.progress", 2),
            ("run.started", 1),
            ("run.tool", 1),
        ])
    );
    // The job was acked after the commit; the record does not move again.
    wait::until(Duration::from_secs(10), "the watch job acked", || async {
        (stack.watch_jobs_left().await.ok()? == 0).then_some(())
    })
    .await?;
    assert_eq!(stack.run(run_id).await?, run);

    runner.stop().await?;
    stack.stop().await
}

#[tokio::test]
async fn a_server_that_cannot_stream_tool_requests_runs_patrol_unstreamed() -> anyhow::Result<()> {
    // llama-cpp-python's server breaks every streamed request that offers tools.
    let stack = Stack::start_as(
        Script::turns([
            Turn::watch_read(),
            Turn::text("Summary: web and db are running and healthy; nothing looks wrong."),
        ]),
        Persona::LlamaCppPython,
    )
    .await?;
    let runner = stack.runner("runner").await?;
    // The boot or save preflight passes unstreamed and says so.
    let client = stack.gateway.client()?;
    let settings = wait::until(RUN_DEADLINE, "a passed preflight", || async {
        let settings = client.ai_settings().await.ok()?;
        (settings.preflight_state == SettingsPreflightState::Passed).then_some(settings)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(40)))?;
    let preflight = settings
        .patrol_preflight
        .expect("a passed preflight is shown");
    assert_eq!(preflight.transport, Some(TurnTransport::Buffered));

    let run_id = stack.accept_run(&RawRunRequest::default()).await?;
    let run = stack
        .terminal_run(run_id, RUN_DEADLINE)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(40)))?;
    assert_eq!(run.status, RunStatus::Healthy, "{run:?}");
    assert_eq!(run.error_cause, None, "{run:?}");
    // The runner learned the route from its preflight: the run's turn went unstreamed at once.
    let turns: Vec<bool> = stack.run_requests().iter().map(|r| r.stream).collect();
    assert_eq!(turns, [false, false], "the run's requests, by stream flag");
    runner.kill().await?;
    stack.stop().await
}

#[tokio::test]
async fn a_killed_runner_loses_its_run_and_a_restarted_one_never_reruns_it() -> anyhow::Result<()> {
    // The provider holds its answer far longer than the lease.
    let stack = Stack::start(Script::steps([Step::delivered(
        Turn::text("too late"),
        Delivery {
            cold_start: Duration::from_secs(60),
            ..Delivery::default()
        },
    )]))
    .await?;
    let runner = stack.runner("runner-1").await?;
    let run_id = stack.accept_run(&RawRunRequest::default()).await?;

    // Running, and the model request is in flight.
    wait::until(
        RUN_DEADLINE,
        "the run's model request in flight",
        || async {
            let run = stack.run(run_id).await.ok()?;
            (run.status == RunStatus::Running && stack.run_requests().len() == 1).then_some(())
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(40)))?;
    runner.kill().await?;
    let killed_at = Instant::now();

    let lease = Duration::from_millis(LEASE_MS);
    let lost = stack
        .terminal_run(run_id, lease + Duration::from_secs(10))
        .await?;
    let took = killed_at.elapsed();
    assert_eq!(lost.status, RunStatus::Error, "{lost:?}");
    assert_eq!(lost.error_cause, Some(ErrorCause::RunnerLost), "{lost:?}");
    // One lease (renewed at most a third of it before the kill) plus one sweep interval, with
    // slack for a loaded machine.
    assert!(
        took <= lease + Duration::from_millis(SWEEP_MS) + Duration::from_secs(3),
        "runner_lost after {took:?}"
    );

    // A new runner gets the redelivered job, finds the run ended and acks it without a call.
    let restarted = stack.runner("runner-2").await?;
    wait::until(
        lease + Duration::from_secs(20),
        "the redelivered job acked",
        || async { (stack.watch_jobs_left().await.ok()? == 0).then_some(()) },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", restarted.process.log_tail(40)))?;
    let log = std::fs::read_to_string(&restarted.process.log)?;
    assert!(
        log.contains("run already ended; job acked without a model call"),
        "the restarted runner saw the ended run:\n{}",
        restarted.process.log_tail(40)
    );
    assert_eq!(stack.run_requests().len(), 1, "no new model request");
    assert_eq!(stack.run(run_id).await?, lost, "the same terminal record");
    assert_eq!(
        stack.run_events(run_id).await?,
        events(&[
            ("run.accepted", 1),
            ("run.completed", 1),
            ("run.started", 1),
        ])
    );

    restarted.stop().await?;
    stack.stop().await
}

#[tokio::test]
async fn a_scoped_run_whose_resource_vanished_before_start_ends_scope_empty() -> anyhow::Result<()>
{
    let stack = Stack::start(Script::turns([Turn::text("never asked")])).await?;
    let db_id = stack.service_id("db");
    let run_id = stack
        .accept_run(&RawRunRequest {
            resource_ids: Some(vec!["db".to_owned()]),
            ..RawRunRequest::default()
        })
        .await?;
    let accepted = stack.run(run_id).await?;
    assert_eq!(accepted.status, RunStatus::Queued);
    assert_eq!(
        accepted.effective_scope_resource_ids,
        std::slice::from_ref(&db_id)
    );

    // The resource goes away before any runner takes the job.
    let owner = stack.gateway.db.owner_client().await?;
    let deleted = owner
        .execute("DELETE FROM resources WHERE id = $1", &[&db_id])
        .await?;
    assert_eq!(deleted, 1);

    let runner = stack.runner("runner").await?;
    let run = stack
        .terminal_run(run_id, RUN_DEADLINE)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(40)))?;
    assert_eq!(run.status, RunStatus::Error, "{run:?}");
    assert_eq!(run.error_cause, Some(ErrorCause::ScopeEmpty), "{run:?}");
    assert_eq!(run.scope_resource_ids, ["db"]);
    assert!(run.effective_scope_resource_ids.is_empty());
    assert_eq!(run.started_at, None);
    assert!(
        run.error_detail
            .as_deref()
            .is_some_and(|d| d.contains("db")),
        "{run:?}"
    );
    assert!(stack.run_requests().is_empty(), "no model call");
    assert_eq!(
        stack.run_events(run_id).await?,
        events(&[("run.accepted", 1), ("run.completed", 1)])
    );
    wait::until(Duration::from_secs(10), "the watch job acked", || async {
        (stack.watch_jobs_left().await.ok()? == 0).then_some(())
    })
    .await?;

    runner.stop().await?;
    stack.stop().await
}

#[tokio::test]
async fn a_live_runner_keeps_its_lease_through_a_slow_provider() -> anyhow::Result<()> {
    // The answer takes well over two leases; only renewals keep the sweeper away.
    let slow = Duration::from_millis(LEASE_MS * 5 / 2);
    let stack = Stack::start(Script::steps([
        Step::reply(Turn::watch_read()),
        Step::delivered(
            Turn::text("Summary: slow, but nothing looks wrong."),
            Delivery {
                cold_start: slow,
                ..Delivery::default()
            },
        ),
    ]))
    .await?;
    let runner = stack.runner("runner").await?;
    let run_id = stack.accept_run(&RawRunRequest::default()).await?;
    let run = stack
        .terminal_run(run_id, RUN_DEADLINE + slow)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(40)))?;
    assert_eq!(run.status, RunStatus::Healthy, "{run:?}");
    let took = run.duration_ms.unwrap_or_default();
    assert!(took >= slow.as_millis() as u64, "{run:?}");
    assert_eq!(stack.run_requests().len(), 2);
    runner.stop().await?;
    stack.stop().await
}
