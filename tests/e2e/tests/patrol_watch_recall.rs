//! Watch recall, dedupe and the run's finding follow-ups end to end, with the real gateway,
//! patrol-scheduler and model-runner binaries and the provider simulator as the model.
//!
//! - Recall and dedupe (a real `pulse-agent` supervising `web` and `db` through the real
//!   agent-relay): with both services failing their health checks, a `sim:diligent` run reports
//!   two findings, one on each service. A later run that reports an equivalent key on `web`
//!   (`unhealthy-service-detected` beside the stored `service-unhealthy`) writes no new row: the
//!   report merges into the existing finding with one `duplicate_merged` event.
//! - Runtime failure and stale reconcile (resources written to the store as the relay writes
//!   them): a run the provider refuses (401) ends `error` (`provider_auth`) and raises the
//!   synthetic `ai-service` finding, which operators cannot dismiss or resolve, and resolves
//!   nothing from absence. The next successful full run clears it and resolves the stale
//!   performance finding of a resource no longer in the inventory, keeping the reliability one.
//!   A new failure raises it again; a preflight that observes a tool call (after a route change)
//!   clears it.

use std::time::Duration;

use chrono::Utc;
use pulse_domain::TenantId;
use pulse_domain::finding::{
    AI_SERVICE_RESOURCE_ID, Category, DismissedReason, FindingId, FindingKey, FindingStatus,
    LifecycleEventType, OperatorAction, OperatorRefusal, ReportedFinding, Severity,
};
use pulse_domain::patrol::run::{ErrorCause, PatrolRun, RunId, RunStatus};
use pulse_store::Store;
use pulse_store::findings::{self, FindingsError, ListFilter, StoredFinding};
use pulse_test_support::fleet::{AgentFleet, FleetSpec, Route};
use pulse_test_support::patrol::{self, openai_route, save_settings};
use pulse_test_support::provider_sim::{
    ProviderSim, Script, SimError, Step, Turn, preflight_reply,
};
use pulse_test_support::runner::TestModelRunner;
use pulse_test_support::scheduler::TestScheduler;
use pulse_test_support::seed::{self, service_resource};
use pulse_test_support::service::{TestGateway, scratch_dir};
use pulse_test_support::wait;
use serde_json::{Value, json};

const KEY: &str = "sk-watch-recall-9d2e4f6a";
const RUN_DEADLINE: Duration = Duration::from_secs(60);

async fn set_model(gateway: &TestGateway, sim: &ProviderSim, model: &str) -> anyhow::Result<()> {
    save_settings(gateway, &openai_route(model, KEY, &sim.openai_base_url())).await
}

/// Requests a full run and waits for its terminal record.
async fn full_run(gateway: &TestGateway, runner: &TestModelRunner) -> anyhow::Result<PatrolRun> {
    patrol::full_run(gateway, RUN_DEADLINE)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(60)))
}

async fn all_findings(store: &Store) -> anyhow::Result<Vec<StoredFinding>> {
    let tx = store.tenant_tx(&TenantId::default_tenant()).await?;
    let all = findings::list(&tx, ListFilter::IncludeResolved, None, Utc::now()).await?;
    tx.commit().await?;
    Ok(all)
}

type Fleet = AgentFleet;

/// The stack, an agent supervising `web` and `db` (each healthy while its fault marker is
/// absent), the simulator and the model-runner, with Patrol on `openai:<model>`.
async fn start(model: &str) -> anyhow::Result<Fleet> {
    let route = Route::OpenAi {
        key: KEY.to_owned(),
    };
    AgentFleet::start(
        FleetSpec::web_and_db("recall", route, model),
        Script::turns([]).with_tool_offer_reply(preflight_reply()),
    )
    .await
}

fn equivalent_report(web: &str) -> Value {
    json!({
        "key": "unhealthy-service-detected",
        "severity": "warning",
        "category": "reliability",
        "resource_id": web,
        "resource_name": "web",
        "resource_type": "service",
        "title": "web health check failing again",
        "description": "The health check of web keeps failing.",
        "recommendation": "Check the logs of web.",
        "evidence": "inventory: health=unhealthy"
    })
}

fn present(finding: &str) -> Value {
    json!({
        "finding_id": finding,
        "verdict": "present",
        "evidence": "health=unhealthy in the inventory",
        "reason": "the health check still fails"
    })
}

#[tokio::test]
async fn two_faults_give_two_findings_and_an_equivalent_report_merges() -> anyhow::Result<()> {
    let fleet = start("sim:diligent").await?;
    let (web, db) = (fleet.service_id("web"), fleet.service_id("db"));
    let store = fleet.stack.gateway.db.store().clone();

    // Recall: both services fail their health checks; one finding on each.
    std::fs::write(fleet.marker("web"), "fault")?;
    std::fs::write(fleet.marker("db"), "fault")?;
    fleet.wait_health("web", "unhealthy").await?;
    fleet.wait_health("db", "unhealthy").await?;
    let first = fleet.run().await?;
    assert_eq!(
        first.status,
        RunStatus::IssuesFound,
        "{first:?}\n{}",
        fleet.runner_log()
    );
    assert_eq!(first.new_findings, 2, "{first:?}");
    let stored = all_findings(&store).await?;
    assert_eq!(stored.len(), 2, "{stored:?}");
    let on = |resource: &str| {
        stored
            .iter()
            .find(|s| s.finding.resource_id == resource)
            .map(|s| s.finding.clone())
    };
    let web_finding = on(&web).expect("a finding on web");
    let db_finding = on(&db).expect("a finding on db");
    for finding in [&web_finding, &db_finding] {
        assert_eq!(finding.status, FindingStatus::Active);
        assert_eq!(finding.category, Category::Reliability);
        assert_eq!(finding.severity, Severity::Warning);
    }
    let mut ids = first.finding_ids.clone();
    ids.sort();
    let mut expected = vec![web_finding.id.as_hex(), db_finding.id.as_hex()];
    expected.sort();
    assert_eq!(ids, expected);

    // Dedupe: a model reports an equivalent key on web; it merges into the stored row.
    let web_id = web_finding.id.as_hex();
    let db_id = db_finding.id.as_hex();
    let sim = ProviderSim::start(
        Script::turns([
            Turn::watch_read(),
            Turn::tool("patrol_get_findings", json!({})),
            Turn::tool("patrol_report_finding", equivalent_report(&web))
                .with_tool("patrol_assess_finding", present(&web_id))
                .with_tool("patrol_assess_finding", present(&db_id)),
            Turn::text("Both services still fail their health checks."),
        ])
        .with_tool_offer_reply(preflight_reply()),
    )
    .await?;
    let fleet = fleet.with_sim(sim);
    set_model(&fleet.stack.gateway, &fleet.sim, "gpt-4o-mini").await?;
    let second = fleet.run().await?;
    assert_eq!(
        second.status,
        RunStatus::IssuesFound,
        "{second:?}\n{}",
        fleet.runner_log()
    );
    assert_eq!(second.new_findings, 0, "{second:?}");
    let report_call = second
        .tool_calls
        .iter()
        .find(|c| c.tool_name == "patrol_report_finding")
        .expect("the report is recorded");
    assert!(report_call.success, "{report_call:?}");

    let after = all_findings(&store).await?;
    assert_eq!(after.len(), 2, "one row per problem: {after:?}");
    let equivalent_id = FindingId::derive(
        &web,
        Category::Reliability,
        &FindingKey::normalize("unhealthy-service-detected")?,
    );
    assert!(after.iter().all(|s| s.finding.id != equivalent_id));
    let merged = after
        .iter()
        .find(|s| s.finding.id == web_finding.id)
        .expect("web's finding kept");
    assert_eq!(merged.finding.status, FindingStatus::Active);
    let merges: Vec<_> = merged
        .finding
        .lifecycle
        .iter()
        .filter(|e| e.event_type == LifecycleEventType::DuplicateMerged)
        .collect();
    assert_eq!(merges.len(), 1, "{:?}", merged.finding.lifecycle);
    assert_eq!(
        merges[0].metadata["merged_key"], "unhealthy-service-detected",
        "{:?}",
        merges[0]
    );
    let db_after = after
        .iter()
        .find(|s| s.finding.id == db_finding.id)
        .expect("db's finding kept");
    assert!(
        db_after
            .finding
            .lifecycle
            .iter()
            .all(|e| e.event_type != LifecycleEventType::DuplicateMerged)
    );

    fleet.stop().await
}

fn gone_finding(resource: &str, key: &str, category: Category) -> ReportedFinding {
    ReportedFinding {
        key: key.to_owned(),
        severity: Severity::Warning,
        category,
        resource_id: resource.to_owned(),
        resource_name: "gone".to_owned(),
        resource_type: "service".to_owned(),
        title: format!("gone: {key}"),
        description: "seen by an earlier run".to_owned(),
        recommendation: "look at gone".to_owned(),
        evidence: "an earlier inventory".to_owned(),
        impact: String::new(),
    }
}

fn runtime_finding(all: &[StoredFinding]) -> Option<StoredFinding> {
    all.iter()
        .find(|s| s.finding.resource_id == AI_SERVICE_RESOURCE_ID)
        .cloned()
}

#[tokio::test]
async fn runtime_failures_raise_an_ai_service_finding_until_patrol_recovers() -> anyhow::Result<()>
{
    pulse_test_support::install_crypto_provider();
    let gateway = TestGateway::start().await?;
    let dir = scratch_dir("watch-recall")?;
    let scheduler = TestScheduler::start(&gateway, &dir.join("scheduler"), &[]).await?;
    // Run 1: the provider refuses the key. Run 2: a plain answer. Run 3: refused again.
    let sim = ProviderSim::start(
        Script::steps([
            Step::Error(SimError::unauthorized()),
            Step::reply(Turn::watch_read()),
            Step::reply(Turn::text("Nothing is wrong.")),
            Step::Error(SimError::unauthorized()),
        ])
        .with_tool_offer_reply(preflight_reply()),
    )
    .await?;
    set_model(&gateway, &sim, "gpt-4o-mini").await?;

    // Two services in the inventory; two earlier findings on a resource that no longer exists.
    let host = pulse_test_support::agent::host_id("rt");
    let store = gateway.db.store().clone();
    let tenant = TenantId::default_tenant();
    let gone = format!("service:{host}:gone");
    let earlier = RunId::from_uuid(uuid::Uuid::now_v7());
    let tx = store.tenant_tx(&tenant).await?;
    seed::report(
        &tx,
        &host,
        "e2e",
        10_000,
        &[service_resource("web"), service_resource("db")],
    )
    .await?;
    let stale = findings::report(
        &tx,
        &gone_finding(&gone, "cpu-high", Category::Performance),
        Some(earlier),
        Utc::now(),
    )
    .await?;
    let kept = findings::report(
        &tx,
        &gone_finding(&gone, "service-unhealthy", Category::Reliability),
        Some(earlier),
        Utc::now(),
    )
    .await?;
    tx.commit().await?;
    let (stale, kept) = (stale.finding.finding.id, kept.finding.finding.id);
    let runner = TestModelRunner::start(&gateway, &dir.join("runner"), &[]).await?;

    // 1. A provider failure: error/provider_auth, the runtime finding raised, nothing resolved.
    let failed = full_run(&gateway, &runner).await?;
    assert_eq!(failed.status, RunStatus::Error, "{failed:?}");
    assert_eq!(
        failed.error_cause,
        Some(ErrorCause::ProviderAuth),
        "{failed:?}"
    );
    let all = all_findings(&store).await?;
    let runtime = runtime_finding(&all).expect("the ai-service finding is raised");
    assert_eq!(runtime.finding.status, FindingStatus::Active);
    assert_eq!(runtime.finding.severity, Severity::Critical);
    assert!(
        runtime.finding.evidence.contains("provider_auth"),
        "{}",
        runtime.finding.evidence
    );
    for id in [stale, kept] {
        let f = all.iter().find(|s| s.finding.id == id).expect("stored");
        assert_eq!(
            f.finding.status,
            FindingStatus::Active,
            "after an error run"
        );
    }

    // Operators cannot dismiss or resolve it.
    let tx = store.tenant_tx(&tenant).await?;
    for action in [
        OperatorAction::Dismiss {
            reason: DismissedReason::NotAnIssue,
            note: String::new(),
        },
        OperatorAction::Resolve {
            note: "it is fine".to_owned(),
        },
    ] {
        let refused =
            findings::operator_action(&tx, runtime.finding.id, &action, "admin", None, Utc::now())
                .await;
        assert!(
            matches!(
                refused,
                Err(FindingsError::Operator(OperatorRefusal::RuntimeFinding))
            ),
            "{action:?}: {refused:?}"
        );
    }
    tx.commit().await?;

    // 2. A successful full run: the runtime finding clears, the stale performance finding
    //    resolves from absence, the reliability one stays.
    let healthy = full_run(&gateway, &runner).await?;
    assert_eq!(
        healthy.status,
        RunStatus::Healthy,
        "{healthy:?}\n{}",
        runner.process.log_tail(40)
    );
    let all = all_findings(&store).await?;
    let status_of = |id: FindingId| {
        all.iter()
            .find(|s| s.finding.id == id)
            .map(|s| s.finding.status)
    };
    assert_eq!(status_of(runtime.finding.id), Some(FindingStatus::Resolved));
    assert_eq!(status_of(stale), Some(FindingStatus::Resolved));
    assert_eq!(status_of(kept), Some(FindingStatus::Active));
    let cleared = runtime_finding(&all).expect("kept as resolved");
    let last = cleared.finding.lifecycle.last().expect("an event");
    assert_eq!(last.event_type, LifecycleEventType::AutoResolved);
    assert_eq!(last.metadata["reason"], "successful_run");

    // 3. Failing again raises it again; a preflight observing a tool call clears it.
    let again = full_run(&gateway, &runner).await?;
    assert_eq!(
        again.error_cause,
        Some(ErrorCause::ProviderAuth),
        "{again:?}"
    );
    let raised = runtime_finding(&all_findings(&store).await?).expect("raised");
    assert_eq!(raised.finding.status, FindingStatus::Active);
    set_model(&gateway, &sim, "gpt-4o").await?;
    let by_preflight = wait::until(
        RUN_DEADLINE,
        "the preflight to clear the runtime finding",
        || async {
            let found = runtime_finding(&all_findings(&store).await.ok()?)?;
            (found.finding.status == FindingStatus::Resolved).then_some(found)
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(40)))?;
    let last = by_preflight.finding.lifecycle.last().expect("an event");
    assert_eq!(last.metadata["reason"], "preflight_tool_call");

    runner.stop().await?;
    scheduler.stop().await?;
    drop(sim);
    gateway.stop().await
}
