//! One fault, one active finding, however the model words it: the real gateway,
//! patrol-scheduler and model-runner binaries, with the provider simulator's `sim:double-report`
//! as the model. It reports the one unhealthy service under two keys, `service-unhealthy` and
//! `health-check-failing`, in the same run and again in the next run (the stored key's sibling
//! first).
//!
//! - Same run: the second report merges into the finding the first one created; no second row,
//!   one `duplicate_merged` event, and the report's answer tells the model it already reported
//!   that finding in this run.
//! - Next run: the report under the other key merges into the stored finding across runs; the
//!   answer names that finding (id and key) and asks for a `patrol_assess_finding` verdict on it,
//!   which the model gives. Still one active finding, a second merge recorded, no new finding.
//!
//! The inventory is written to the store as the agent-relay writes it: `web` fails its health
//! check (triage `health_check_failing`), `db` is healthy.

use std::time::Duration;

use chrono::Utc;
use pulse_domain::TenantId;
use pulse_domain::finding::{
    Category, FindingId, FindingKey, FindingStatus, LifecycleEvent, LifecycleEventType, Severity,
};
use pulse_domain::patrol::run::RunStatus;
use pulse_domain::resource::Health;
use pulse_store::Store;
use pulse_store::findings::{self, ListFilter, StoredFinding};
use pulse_test_support::patrol::{self, openai_route, save_settings};
use pulse_test_support::provider_sim::{ProviderSim, Script, preflight_reply};
use pulse_test_support::runner::TestModelRunner;
use pulse_test_support::scheduler::TestScheduler;
use pulse_test_support::seed::{self, service_resource};
use pulse_test_support::service::{TestGateway, scratch_dir};
use serde_json::Value;

const KEY: &str = "sk-watch-merge-5e8a1c3d";
const RUN_DEADLINE: Duration = Duration::from_secs(60);

async fn all_findings(store: &Store) -> anyhow::Result<Vec<StoredFinding>> {
    let tx = store.tenant_tx(&TenantId::default_tenant()).await?;
    let all = findings::list(&tx, ListFilter::IncludeResolved, None, Utc::now()).await?;
    tx.commit().await?;
    Ok(all)
}

fn merges(finding: &StoredFinding) -> Vec<&LifecycleEvent> {
    finding
        .finding
        .lifecycle
        .iter()
        .filter(|e| e.event_type == LifecycleEventType::DuplicateMerged)
        .collect()
}

/// The `patrol_report_finding` answers the simulator received (tool messages), in order.
fn merged_answers(sim: &ProviderSim) -> Vec<Value> {
    let mut seen: Vec<Value> = Vec::new();
    for request in sim.requests() {
        let messages = request.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for message in messages.iter().filter(|m| m["role"] == "tool") {
            let Some(answer) = message["content"]
                .as_str()
                .and_then(|c| serde_json::from_str::<Value>(c).ok())
            else {
                continue;
            };
            if answer.get("merged_into").is_some() && !seen.contains(&answer) {
                seen.push(answer);
            }
        }
    }
    seen
}

#[tokio::test]
async fn one_fault_reported_under_two_keys_is_one_active_finding() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gateway = TestGateway::start().await?;
    let dir = scratch_dir("watch-merge")?;
    let scheduler = TestScheduler::start(&gateway, &dir.join("scheduler"), &[]).await?;
    let sim =
        ProviderSim::start(Script::turns([]).with_tool_offer_reply(preflight_reply())).await?;
    save_settings(
        &gateway,
        &openai_route("sim:double-report", KEY, &sim.openai_base_url()),
    )
    .await?;

    let host = pulse_test_support::agent::host_id("merge");
    let store = gateway.db.store().clone();
    let mut web = service_resource("web");
    web.health = Health::Unhealthy;
    let tx = store.tenant_tx(&TenantId::default_tenant()).await?;
    seed::report(&tx, &host, "e2e", 10_000, &[web, service_resource("db")]).await?;
    tx.commit().await?;
    let web_id = format!("service:{host}:web");
    let runner = TestModelRunner::start(&gateway, &dir.join("runner"), &[]).await?;
    let run = || async {
        patrol::full_run(&gateway, RUN_DEADLINE)
            .await
            .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(60)))
    };
    let sibling_id = FindingId::derive(
        &web_id,
        Category::Reliability,
        &FindingKey::normalize("health-check-failing")?,
    );

    // Same run: two reports, one finding, one merge.
    let first = run().await?;
    assert_eq!(
        first.status,
        RunStatus::IssuesFound,
        "{first:?}\n{}",
        runner.process.log_tail(60)
    );
    assert_eq!(first.new_findings, 1, "{first:?}");
    let reports: Vec<_> = first
        .tool_calls
        .iter()
        .filter(|c| c.tool_name == "patrol_report_finding")
        .collect();
    assert_eq!(reports.len(), 2, "{first:?}");
    assert!(reports.iter().all(|c| c.success), "{first:?}");
    let stored = all_findings(&store).await?;
    assert_eq!(stored.len(), 1, "one row for one fault: {stored:?}");
    let finding = &stored[0];
    assert_eq!(finding.finding.resource_id, web_id);
    assert_eq!(finding.finding.key.as_str(), "service-unhealthy");
    assert_eq!(finding.finding.status, FindingStatus::Active);
    assert_eq!(finding.finding.severity, Severity::Warning);
    assert_eq!(finding.finding.times_raised, 2);
    assert!(stored.iter().all(|s| s.finding.id != sibling_id));
    let merged = merges(finding);
    assert_eq!(merged.len(), 1, "{:?}", finding.finding.lifecycle);
    assert_eq!(merged[0].metadata["merged_key"], "health-check-failing");
    assert_eq!(merged[0].metadata["merged_id"], sibling_id.as_hex());
    assert_eq!(merged[0].metadata["merged_by"], "key");
    let id = finding.finding.id.as_hex();
    let answers = merged_answers(&sim);
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0]["outcome"], "merged");
    assert_eq!(answers[0]["merged_into"]["finding_id"], id.as_str());
    assert_eq!(answers[0]["merged_into"]["key"], "service-unhealthy");
    let told = answers[0]["instruction"].as_str().unwrap_or_default();
    assert!(
        told.contains("already reported in this run") && told.contains(&id),
        "{told}"
    );

    // Next run: the other key first, merged across runs; the model is told to assess the
    // stored finding instead, and does.
    sim.clear_requests();
    let second = run().await?;
    assert_eq!(
        second.status,
        RunStatus::IssuesFound,
        "{second:?}\n{}",
        runner.process.log_tail(60)
    );
    assert_eq!(second.new_findings, 0, "{second:?}");
    let answers = merged_answers(&sim);
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0]["merged_into"]["finding_id"], id.as_str());
    assert_eq!(answers[0]["merged_into"]["key"], "service-unhealthy");
    let told = answers[0]["instruction"].as_str().unwrap_or_default();
    assert!(
        told.contains(&format!(
            "give finding {id} a patrol_assess_finding verdict"
        )),
        "{told}"
    );
    let assessments = &second.finding_assessments;
    assert_eq!(assessments.len(), 1, "{second:?}");
    assert_eq!(assessments[0].finding_id, id);
    assert_eq!(assessments[0].verdict, "present");

    let after = all_findings(&store).await?;
    assert_eq!(after.len(), 1, "still one row: {after:?}");
    let active: Vec<&StoredFinding> = after
        .iter()
        .filter(|s| s.finding.status == FindingStatus::Active)
        .collect();
    assert_eq!(active.len(), 1);
    let finding = active[0];
    assert_eq!(finding.finding.id.as_hex(), id);
    let merged = merges(finding);
    assert_eq!(merged.len(), 2, "{:?}", finding.finding.lifecycle);
    assert_eq!(merged[1].metadata["merged_key"], "health-check-failing");
    assert_eq!(
        finding.finding.last_run_id.map(|r| r.to_string()),
        Some(second.id.to_string()),
        "the merge refreshed run ownership"
    );

    runner.stop().await?;
    scheduler.stop().await?;
    drop(sim);
    gateway.stop().await
}
