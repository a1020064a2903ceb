//! The investigation runtime against the provider simulator and a real database: the evidence
//! budget is structural (at most 15 evidence calls; then the checkpoint turn offers only the
//! proposal tools and an evidence call is denied before dispatch), and a fabricated lifecycle
//! tool is denied before it reaches a handler.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::Utc;
use pulse_agent_loop::agent_loop::BoxFuture;
use pulse_agent_loop::provider::pool::ProviderPool;
use pulse_agent_loop::route::Route;
use pulse_bus::actions_api::ActionCapabilitiesReply;
use pulse_domain::TenantId;
use pulse_domain::finding::{Category, Finding, ReportedFinding, Severity};
use pulse_domain::patrol::run::RunId;
use pulse_domain::resource::{Health, Resource, ResourceId, ResourceStatus, ResourceType};
use pulse_model_runner::investigation::runtime::{CHECKPOINT, Investigator, RunEnd, RunInput};
use pulse_model_runner::investigation::tools::{CapabilityCatalogue, EVIDENCE_BUDGET};
use pulse_model_runner::preflight::RouteConnection;
use pulse_store::{findings, tenants};
use pulse_test_support::db::TestDb;
use pulse_test_support::provider_sim::{ProviderSim, Script, Step, Turn};
use serde_json::{Value, json};

/// A catalogue that knows no resource: these tests never get as far as a proposal.
struct NoCatalogue;

impl CapabilityCatalogue for NoCatalogue {
    fn capabilities<'a>(
        &'a self,
        _tenant: &'a TenantId,
        _resource_id: &'a str,
    ) -> BoxFuture<'a, Result<ActionCapabilitiesReply, String>> {
        Box::pin(async { Err("no resource in this tenant has that id".to_owned()) })
    }
}

fn web() -> Resource {
    let now = Utc::now();
    Resource {
        id: ResourceId::service("h1", "web"),
        resource_type: ResourceType::Service,
        source_id: "web".to_owned(),
        name: "web".to_owned(),
        aliases: Vec::new(),
        parent: None,
        agent_id: "h1".to_owned(),
        status: ResourceStatus::Running,
        health: Health::Unhealthy,
        restart_count: Some(0),
        labels: BTreeMap::new(),
        details: Value::Null,
        observed_at: now,
        received_at: now,
    }
}

async fn setup() -> anyhow::Result<(TestDb, TenantId, Finding)> {
    let db = TestDb::create().await?;
    let tenant = TenantId::new("acme")?;
    tenants::create(db.store(), &tenant, "Acme").await?;
    let tx = db.store().tenant_tx(&tenant).await?;
    let reported = ReportedFinding {
        key: "service-unhealthy".to_owned(),
        severity: Severity::Warning,
        category: Category::Reliability,
        resource_id: "service:h1:web".to_owned(),
        resource_name: "web".to_owned(),
        resource_type: "service".to_owned(),
        title: "web health check failing".to_owned(),
        description: "fails".to_owned(),
        recommendation: "look".to_owned(),
        evidence: "health=unhealthy".to_owned(),
        impact: String::new(),
    };
    let outcome = findings::report(&tx, &reported, None, Utc::now()).await?;
    tx.commit().await?;
    Ok((db, tenant, outcome.finding.finding))
}

fn connection(sim: &ProviderSim) -> anyhow::Result<RouteConnection> {
    Ok(
        RouteConnection::new(Route::parse("openai:gpt-4o-mini").map_err(anyhow::Error::msg)?)
            .with_base_url(sim.openai_base_url())
            .with_api_key("sk-test-key"),
    )
}

fn offered(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn evidence_stops_at_the_budget_and_the_checkpoint_removes_the_evidence_tools()
-> anyhow::Result<()> {
    let (db, tenant, finding) = setup().await?;
    // A model that only ever reads.
    let sim =
        ProviderSim::start(Script::looping("pulse_query", json!({"action": "health"}))).await?;
    let investigator = Investigator::new(
        db.store().clone(),
        None,
        Arc::new(NoCatalogue),
        Arc::new(ProviderPool::new()),
    );
    let result = investigator
        .run(RunInput {
            tenant: &tenant,
            investigation_id: uuid::Uuid::now_v7(),
            watch_run_id: RunId::from_uuid(uuid::Uuid::now_v7()),
            finding: &finding,
            inventory: vec![web()],
            connection: &connection(&sim)?,
        })
        .await;
    assert!(result.checkpointed, "{result:?}");
    assert_eq!(result.evidence.len(), EVIDENCE_BUDGET as usize);
    // After the checkpoint the read is not offered; repeating it is denied until the run ends,
    // and a failed run keeps no proposal.
    assert!(
        matches!(&result.end, RunEnd::Failed(detail) if detail.contains("terminal_denial")),
        "{result:?}"
    );
    assert_eq!(result.proposal, Ok(None));

    let requests = sim.requests();
    let evidence_phase: Vec<_> = requests
        .iter()
        .filter(|r| offered(&r.body).contains(&"pulse_query".to_owned()))
        .collect();
    assert_eq!(evidence_phase.len(), EVIDENCE_BUDGET as usize);
    assert_eq!(
        offered(&evidence_phase[0].body),
        [
            "pulse_query",
            "pulse_metrics",
            "pulse_storage",
            "pulse_read",
            "patrol_action_capabilities",
            "patrol_propose_action"
        ]
    );
    let last = requests.last().expect("requests");
    assert_eq!(
        offered(&last.body),
        ["patrol_action_capabilities", "patrol_propose_action"]
    );
    assert!(last.body.to_string().contains(&CHECKPOINT[..40]));
    Ok(())
}

#[tokio::test]
async fn a_fabricated_lifecycle_tool_is_denied_before_dispatch() -> anyhow::Result<()> {
    let (db, tenant, finding) = setup().await?;
    let report = json!({
        "key": "other", "severity": "critical", "category": "reliability",
        "resource_id": "service:h1:web", "resource_name": "web", "resource_type": "service",
        "title": "t", "description": "d", "recommendation": "r", "evidence": "e"
    });
    let sim = ProviderSim::start(Script::steps([
        Step::reply(Turn::tool("patrol_report_finding", report)),
        Step::reply(Turn::text("Nothing to propose. Confidence: low")),
    ]))
    .await?;
    let investigator = Investigator::new(
        db.store().clone(),
        None,
        Arc::new(NoCatalogue),
        Arc::new(ProviderPool::new()),
    );
    let result = investigator
        .run(RunInput {
            tenant: &tenant,
            investigation_id: uuid::Uuid::now_v7(),
            watch_run_id: RunId::from_uuid(uuid::Uuid::now_v7()),
            finding: &finding,
            inventory: vec![web()],
            connection: &connection(&sim)?,
        })
        .await;
    assert_eq!(result.end, RunEnd::Concluded, "{result:?}");
    assert_eq!(result.proposal, Ok(None));
    assert!(result.evidence.is_empty());
    // The denial reached the model as the call's result; the store holds the one finding only.
    let second = &sim.requests()[1].body;
    assert!(second.to_string().contains("not offered"), "{second}");
    let tx = db.store().tenant_tx(&tenant).await?;
    let listed =
        findings::list(&tx, findings::ListFilter::IncludeResolved, None, Utc::now()).await?;
    assert_eq!(listed.len(), 1);
    Ok(())
}
