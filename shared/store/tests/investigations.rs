//! The investigation store against real Postgres (migration 0017): one attempt per finding per
//! Watch run, the gate state the dispatcher decides from, stale attempts timed out, the record
//! written once over a running attempt only, and tenant isolation.

use chrono::{Duration, Utc};
use pulse_domain::TenantId;
use pulse_domain::finding::{Category, FindingId, InvestigationOutcome, ReportedFinding};
use pulse_store::investigations::{
    self, ActionReference, InvestigationRecord, InvestigationStatus, InvestigationSubject,
    InvestigationTrigger, ProposalSummary,
};
use pulse_store::{Store, findings, tenants};
use pulse_test_support::db::TestDb;
use uuid::Uuid;

async fn setup() -> anyhow::Result<(TestDb, TenantId, TenantId)> {
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    let globex = TenantId::new("globex")?;
    tenants::create(db.store(), &acme, "Acme").await?;
    tenants::create(db.store(), &globex, "Globex").await?;
    Ok((db, acme, globex))
}

async fn finding(store: &Store, tenant: &TenantId) -> anyhow::Result<FindingId> {
    let tx = store.tenant_tx(tenant).await?;
    let reported = ReportedFinding {
        key: "service-unhealthy".to_owned(),
        severity: pulse_domain::finding::Severity::Warning,
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
    Ok(outcome.finding.finding.id)
}

fn record(id: Uuid, finding: FindingId) -> InvestigationRecord {
    let now = Utc::now();
    InvestigationRecord {
        id,
        finding_id: finding.as_hex(),
        session_id: "run".to_owned(),
        subject: InvestigationSubject {
            resource_id: "service:h1:web".to_owned(),
            resource_name: "web".to_owned(),
            resource_type: "service".to_owned(),
            node: String::new(),
        },
        trigger: InvestigationTrigger {
            finding_key: "service-unhealthy".to_owned(),
            source: "ai-analysis".to_owned(),
            severity: "warning".to_owned(),
            category: "reliability".to_owned(),
            title: "web health check failing".to_owned(),
            detected_at: now,
            description: "fails".to_owned(),
            cause: "watch_run:run".to_owned(),
        },
        status: InvestigationStatus::Completed,
        outcome: Some(InvestigationOutcome::FixQueued),
        confidence: "medium".to_owned(),
        evidence: Vec::new(),
        conclusion: "restart it".to_owned(),
        impact: String::new(),
        recommended_action: "service.restart on service:h1:web".to_owned(),
        verification: Vec::new(),
        rollback: Vec::new(),
        tools_used: vec!["pulse_query".to_owned()],
        proposal: Some(ProposalSummary {
            resource_id: "service:h1:web".to_owned(),
            causal_resource_id: "service:h1:web".to_owned(),
            capability_name: "service.restart".to_owned(),
            reason: "fails".to_owned(),
        }),
        started_at: now,
        completed_at: Some(now),
        action: Some(ActionReference {
            action_id: Uuid::now_v7(),
            state: "pending_approval".to_owned(),
        }),
        error: String::new(),
    }
}

#[tokio::test]
async fn attempts_are_once_per_run_and_feed_the_gate_state() -> anyhow::Result<()> {
    let (db, acme, globex) = setup().await?;
    let store = db.store();
    let finding = finding(store, &acme).await?;
    let now = Utc::now();
    let (run_a, run_b) = (Uuid::now_v7(), Uuid::now_v7());
    let first = Uuid::now_v7();

    let tx = store.tenant_tx(&acme).await?;
    investigations::lock_tenant(&tx).await?;
    assert_eq!(
        investigations::gate_state(&tx, finding).await?,
        Default::default()
    );
    assert!(
        investigations::begin(&tx, first, finding, run_a, 1, now - Duration::minutes(30)).await?
    );
    // The same run's event delivered again dispatches nothing.
    assert!(!investigations::begin(&tx, Uuid::now_v7(), finding, run_a, 1, now).await?);
    tx.commit().await?;

    let tx = store.tenant_tx(&acme).await?;
    let state = investigations::gate_state(&tx, finding).await?;
    assert_eq!(state.attempts, 1);
    assert_eq!(state.running_in_tenant, 1);
    assert_eq!(state.last_status, Some(InvestigationStatus::Running));
    // Not yet past the timeout: nothing expires.
    assert_eq!(
        investigations::expire_stale(&tx, now - Duration::minutes(40), now).await?,
        0
    );
    // Past it: the attempt is timed out.
    assert_eq!(
        investigations::expire_stale(&tx, now - Duration::minutes(10), now).await?,
        1
    );
    let state = investigations::gate_state(&tx, finding).await?;
    assert_eq!(state.running_in_tenant, 0);
    assert_eq!(state.last_status, Some(InvestigationStatus::TimedOut));
    assert_eq!(state.last_outcome, Some(InvestigationOutcome::TimedOut));
    // A record arriving after the expiry is not written over it.
    assert!(!investigations::finish(&tx, &record(first, finding)).await?);

    let second = Uuid::now_v7();
    assert!(investigations::begin(&tx, second, finding, run_b, 2, now).await?);
    let written = record(second, finding);
    assert!(investigations::finish(&tx, &written).await?);
    tx.commit().await?;

    let tx = store.tenant_tx(&acme).await?;
    let state = investigations::gate_state(&tx, finding).await?;
    assert_eq!(state.attempts, 2);
    assert_eq!(state.last_status, Some(InvestigationStatus::Completed));
    assert_eq!(state.last_outcome, Some(InvestigationOutcome::FixQueued));
    let latest = investigations::latest_record(&tx, finding)
        .await?
        .expect("a record");
    assert_eq!(latest, written);
    let stored = investigations::get(&tx, second)
        .await?
        .expect("the attempt");
    assert_eq!(
        stored.action_id,
        latest.action.as_ref().map(|a| a.action_id)
    );
    assert_eq!(stored.attempt, 2);
    drop(tx);

    // Another tenant sees none of it.
    let tx = store.tenant_tx(&globex).await?;
    assert!(investigations::get(&tx, second).await?.is_none());
    assert!(investigations::latest_record(&tx, finding).await?.is_none());
    assert_eq!(investigations::gate_state(&tx, finding).await?.attempts, 0);
    Ok(())
}
