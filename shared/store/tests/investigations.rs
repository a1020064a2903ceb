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
    assert!(!investigations::finish(&tx, &record(first, finding), None).await?);

    let second = Uuid::now_v7();
    assert!(investigations::begin(&tx, second, finding, run_b, 2, now).await?);
    let written = record(second, finding);
    assert!(investigations::finish(&tx, &written, None).await?);
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

/// Leases (migration 0038): the holder renews, nobody else can; a lapsed lease is listed across
/// tenants and taken over once (a compare-and-swap), counting takeovers; the lost holder can
/// neither renew nor write its record; a live lease keeps the attempt from the timeout expiry.
#[tokio::test]
async fn a_lapsed_lease_is_taken_over_once_and_the_lost_holder_writes_nothing() -> anyhow::Result<()>
{
    let (db, acme, globex) = setup().await?;
    let store = db.store();
    let finding = finding(store, &acme).await?;
    let long_ago = Utc::now() - Duration::hours(2);
    let id = Uuid::now_v7();
    let lease = std::time::Duration::from_secs(30);

    let tx = store.tenant_tx(&acme).await?;
    assert!(investigations::begin(&tx, id, finding, Uuid::now_v7(), 1, long_ago).await?);
    assert!(investigations::hold(&tx, id, "runner-a", lease).await?);
    assert!(
        !investigations::hold(&tx, id, "runner-b", lease).await?,
        "a held attempt cannot be held again"
    );
    assert!(investigations::renew_lease(&tx, id, "runner-a", lease).await?);
    assert!(!investigations::renew_lease(&tx, id, "runner-b", lease).await?);
    // Started two hours ago, but its lease is live: the timeout expiry leaves it running.
    assert_eq!(
        investigations::expire_stale(&tx, Utc::now() - Duration::minutes(10), Utc::now()).await?,
        0
    );
    assert!(
        investigations::take_over(&tx, id, "runner-b", lease)
            .await?
            .is_none(),
        "a live lease is not taken over"
    );
    tx.commit().await?;
    assert!(investigations::expired_leases(store, 10).await?.is_empty());

    // runner-a dies: its lease lapses (moved into the past here, as time would).
    db.owner_client()
        .await?
        .execute(
            "UPDATE investigations SET lease_expires_at = now() - interval '1 second' WHERE id = $1",
            &[&id],
        )
        .await?;
    assert_eq!(
        investigations::expired_leases(store, 10).await?,
        vec![(acme.clone(), id)]
    );
    // Another tenant's transaction cannot see, let alone take, it.
    let tx = store.tenant_tx(&globex).await?;
    assert!(
        investigations::take_over(&tx, id, "runner-g", lease)
            .await?
            .is_none()
    );
    tx.commit().await?;

    let tx = store.tenant_tx(&acme).await?;
    let taken = investigations::take_over(&tx, id, "runner-b", lease)
        .await?
        .expect("the lapsed attempt is taken over");
    assert_eq!(taken.takeovers, 1);
    assert_eq!(taken.attempt.status, InvestigationStatus::Running);
    assert_eq!(taken.attempt.finding_id, finding.as_hex());
    assert!(
        investigations::take_over(&tx, id, "runner-c", lease)
            .await?
            .is_none(),
        "taken once: the new lease is live"
    );
    // The lost holder neither renews nor writes its record over the taker's run.
    assert!(!investigations::renew_lease(&tx, id, "runner-a", lease).await?);
    assert!(!investigations::finish(&tx, &record(id, finding), Some("runner-a")).await?);
    assert!(investigations::finish(&tx, &record(id, finding), Some("runner-b")).await?);
    let stored = investigations::get(&tx, id).await?.expect("stored");
    assert_eq!(stored.status, InvestigationStatus::Completed);
    tx.commit().await?;
    assert!(
        investigations::expired_leases(store, 10).await?.is_empty(),
        "an ended attempt drops its lease"
    );
    Ok(())
}
