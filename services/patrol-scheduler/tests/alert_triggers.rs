//! Alert-triggered scoped runs against real Postgres and NATS: alerts stored as the floor stores
//! them, the tenant's policy saved as the gateway saves it, and what lands in `patrol_runs` and
//! the outbox; then the durable JetStream consumer end to end (duplicate delivery, restart).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use pulse_bus::Subjects;
use pulse_bus::events::ALERT_FIRED;
use pulse_domain::TenantId;
use pulse_domain::alert_rules::{Alert, AlertKey, AlertLevel, AlertRule, AlertTransition};
use pulse_domain::patrol::run::{PatrolRun, RunType, TriggerReason};
use pulse_domain::patrol::status::BlockedCause;
use pulse_domain::patrol::trigger::RejectReason;
use pulse_domain::resource::{Health, ObservedResource, ResourceStatus, ResourceType};
use pulse_patrol_scheduler::accept::RunAcceptor;
use pulse_patrol_scheduler::alert_trigger::{
    AlertTrigger, AlertTriggerMetrics, AlertTriggerSettings, OutcomeLabels, ReceivedAlert,
    TriggerOutcome,
};
use pulse_store::agents::{self, AgentSession};
use pulse_store::settings::{self, ConfigLayer};
use pulse_store::{Store, alerts, patrol_runs, resources, tenants};
use pulse_test_support::db::TestDb;
use pulse_test_support::nats::TestNats;
use pulse_test_support::wait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const SERVICE: &str = "service:h1:web";
const ROUTE: &str = "openai:gpt-4.1-mini";

/// `web` reported by agent `h1` of `tenant`.
async fn report(store: &Store, tenant: &TenantId) -> anyhow::Result<()> {
    let tx = store.tenant_tx(tenant).await?;
    agents::connect(
        &tx,
        &AgentSession {
            id: "h1".to_owned(),
            hostname: "h1".to_owned(),
            agent_version: "test".to_owned(),
            report_interval_ms: 1000,
            token_id: None,
        },
    )
    .await?;
    let web = ObservedResource {
        resource_type: ResourceType::Service,
        source_id: "web".to_owned(),
        name: "web".to_owned(),
        aliases: Vec::new(),
        status: ResourceStatus::Running,
        health: Health::Healthy,
        restart_count: Some(4),
        labels: BTreeMap::new(),
        details: Value::Null,
        metrics: BTreeMap::new(),
        parent: None,
    };
    resources::apply_report(&tx, "h1", Utc::now(), &[web]).await?;
    tx.commit().await?;
    Ok(())
}

/// Saves the tenant's AI settings document as the gateway does.
async fn save_settings(store: &Store, tenant: &TenantId, document: Value) -> anyhow::Result<()> {
    let tx = store.tenant_tx(tenant).await?;
    let version = settings::get(&tx, true).await?.version;
    settings::put(&tx, version, &document, "test").await?;
    tx.commit().await?;
    Ok(())
}

/// The `[ai]` config layer: no settings, an OpenAI key from the environment.
fn config() -> ConfigLayer {
    ConfigLayer {
        layer: json!({}),
        environment_keys: BTreeSet::from(["openai".to_owned()]),
    }
}

fn alert(rule: AlertRule, level: AlertLevel, fired_at: DateTime<Utc>) -> Alert {
    Alert {
        key: AlertKey::new(SERVICE, rule),
        rule,
        level,
        value: 4.0,
        threshold: 3.0,
        resource_id: SERVICE.to_owned(),
        message: format!("service {SERVICE} restarted 4 times within 10 minutes"),
        fired_at,
        updated_at: fired_at,
    }
}

/// Stores `transition` as the floor does and returns it as received.
async fn store_transition(
    store: &Store,
    tenant: &TenantId,
    transition: AlertTransition,
) -> anyhow::Result<ReceivedAlert> {
    let tx = store.tenant_tx(tenant).await?;
    alerts::apply_transition(&tx, &transition).await?;
    tx.commit().await?;
    Ok(ReceivedAlert::from_transition(transition))
}

async fn runs(store: &Store, tenant: &TenantId) -> anyhow::Result<Vec<PatrolRun>> {
    let tx = store.tenant_tx(tenant).await?;
    let listed = patrol_runs::list(&tx, 100).await?;
    tx.commit().await?;
    Ok(listed)
}

/// Outbox rows about runs (`events.run.*` and jobs).
async fn run_outbox_rows(db: &TestDb) -> anyhow::Result<i64> {
    let client = db.owner_client().await?;
    let row = client
        .query_one("SELECT count(*) FROM outbox WHERE payload ? 'run_id'", &[])
        .await?;
    Ok(row.get(0))
}

struct Fixture {
    db: TestDb,
    tenant: TenantId,
    trigger: AlertTrigger,
}

/// A tenant with `web` on `h1`, the Patrol route set (key from config) and `document` merged
/// over it.
async fn fixture(triggers: Value) -> anyhow::Result<Fixture> {
    let db = TestDb::create().await?;
    let tenant = TenantId::new("acme")?;
    tenants::create(db.store(), &tenant, "Acme").await?;
    report(db.store(), &tenant).await?;
    save_settings(
        db.store(),
        &tenant,
        json!({"patrol_model": ROUTE, "alert_triggers": triggers}),
    )
    .await?;
    let trigger = AlertTrigger::new(
        RunAcceptor::new(db.store().clone(), Subjects::new(None)).with_readiness_gate(config()),
        config(),
    );
    Ok(Fixture {
        db,
        tenant,
        trigger,
    })
}

#[tokio::test]
async fn an_alert_below_the_minimum_severity_starts_nothing() -> anyhow::Result<()> {
    let f = fixture(json!({})).await?;
    let warning = store_transition(
        f.db.store(),
        &f.tenant,
        AlertTransition::Fired {
            alert: alert(AlertRule::Unhealthy, AlertLevel::Warning, Utc::now()),
        },
    )
    .await?;
    let outcome = f.trigger.handle(&f.tenant, &warning).await?;
    assert_eq!(
        outcome,
        TriggerOutcome::Rejected(RejectReason::BelowMinSeverity)
    );
    assert!(runs(f.db.store(), &f.tenant).await?.is_empty());
    assert_eq!(run_outbox_rows(&f.db).await?, 0);
    f.db.cleanup().await
}

#[tokio::test]
async fn a_critical_alert_starts_one_scoped_run_on_its_resource() -> anyhow::Result<()> {
    let f = fixture(json!({})).await?;
    let fired = store_transition(
        f.db.store(),
        &f.tenant,
        AlertTransition::Fired {
            alert: alert(AlertRule::RestartLoop, AlertLevel::Critical, Utc::now()),
        },
    )
    .await?;
    let TriggerOutcome::Started { run_id, alert_id } = f.trigger.handle(&f.tenant, &fired).await?
    else {
        panic!("expected a started run");
    };
    let listed = runs(f.db.store(), &f.tenant).await?;
    assert_eq!(listed.len(), 1);
    let run = &listed[0];
    assert_eq!(run.id, run_id);
    assert_eq!(run.trigger_reason, TriggerReason::AlertFired);
    assert_eq!(run.run_type, RunType::Scoped);
    assert_eq!(run.scope_resource_ids, vec![SERVICE]);
    assert_eq!(run.effective_scope_resource_ids, vec![SERVICE]);
    assert_eq!(
        run.alert_identifier.as_deref(),
        Some("service:h1:web:restart_loop")
    );
    assert_eq!(run.alert_type.as_deref(), Some("restart_loop"));
    let context = run.scope_context.as_deref().unwrap_or_default();
    for fact in [
        "restart_loop",
        "critical",
        SERVICE,
        "value 4",
        "threshold 3",
        "restarted 4 times",
    ] {
        assert!(context.contains(fact), "{fact:?} missing from {context:?}");
    }
    // The run and its accepted event (and job, until dispatch takes it over) are in the outbox.
    assert!(run_outbox_rows(&f.db).await? >= 1);

    // The same event again: the firing already has its run.
    assert_eq!(
        f.trigger.handle(&f.tenant, &fired).await?,
        TriggerOutcome::Duplicate { run_id, alert_id }
    );
    assert_eq!(runs(f.db.store(), &f.tenant).await?.len(), 1);
    f.db.cleanup().await
}

#[tokio::test]
async fn an_escalation_past_the_floor_starts_one_run_for_the_firing() -> anyhow::Result<()> {
    let f = fixture(json!({"min_severity": "critical"})).await?;
    let at = Utc::now();
    let warning = store_transition(
        f.db.store(),
        &f.tenant,
        AlertTransition::Fired {
            alert: alert(AlertRule::MemoryUsage, AlertLevel::Warning, at),
        },
    )
    .await?;
    assert_eq!(
        f.trigger.handle(&f.tenant, &warning).await?,
        TriggerOutcome::Rejected(RejectReason::BelowMinSeverity)
    );
    let escalated = store_transition(
        f.db.store(),
        &f.tenant,
        AlertTransition::LevelChanged {
            from: AlertLevel::Warning,
            alert: alert(AlertRule::MemoryUsage, AlertLevel::Critical, at),
        },
    )
    .await?;
    let TriggerOutcome::Started { run_id, .. } = f.trigger.handle(&f.tenant, &escalated).await?
    else {
        panic!("expected a started run");
    };
    assert!(matches!(
        f.trigger.handle(&f.tenant, &escalated).await?,
        TriggerOutcome::Duplicate { run_id: again, .. } if again == run_id
    ));
    // Clearing never starts a run.
    let cleared = store_transition(
        f.db.store(),
        &f.tenant,
        AlertTransition::Cleared {
            alert: alert(AlertRule::MemoryUsage, AlertLevel::Critical, at),
            cleared_at: Utc::now(),
        },
    )
    .await?;
    assert_eq!(
        f.trigger.handle(&f.tenant, &cleared).await?,
        TriggerOutcome::Rejected(RejectReason::NotFiring)
    );
    // The alert fires again later: a new firing, a new run.
    let refired = store_transition(
        f.db.store(),
        &f.tenant,
        AlertTransition::Fired {
            alert: alert(AlertRule::MemoryUsage, AlertLevel::Critical, Utc::now()),
        },
    )
    .await?;
    let TriggerOutcome::Started { run_id: second, .. } =
        f.trigger.handle(&f.tenant, &refired).await?
    else {
        panic!("expected a second run for the new firing");
    };
    assert_ne!(second, run_id);
    assert_eq!(runs(f.db.store(), &f.tenant).await?.len(), 2);
    f.db.cleanup().await
}

#[tokio::test]
async fn an_alert_type_off_the_allowlist_or_disabled_triggers_start_nothing() -> anyhow::Result<()>
{
    let f = fixture(json!({"min_severity": "warning", "alert_types": ["memory_usage"]})).await?;
    let critical = store_transition(
        f.db.store(),
        &f.tenant,
        AlertTransition::Fired {
            alert: alert(AlertRule::RestartLoop, AlertLevel::Critical, Utc::now()),
        },
    )
    .await?;
    assert_eq!(
        f.trigger.handle(&f.tenant, &critical).await?,
        TriggerOutcome::Rejected(RejectReason::TypeNotAllowed)
    );
    save_settings(
        f.db.store(),
        &f.tenant,
        json!({"patrol_model": ROUTE, "alert_triggers": {"enabled": false}}),
    )
    .await?;
    assert_eq!(
        f.trigger.handle(&f.tenant, &critical).await?,
        TriggerOutcome::Rejected(RejectReason::Disabled)
    );
    assert!(runs(f.db.store(), &f.tenant).await?.is_empty());
    assert_eq!(run_outbox_rows(&f.db).await?, 0);
    f.db.cleanup().await
}

#[tokio::test]
async fn a_not_ready_route_records_nothing() -> anyhow::Result<()> {
    let f = fixture(json!({})).await?;
    let critical = store_transition(
        f.db.store(),
        &f.tenant,
        AlertTransition::Fired {
            alert: alert(AlertRule::RestartLoop, AlertLevel::Critical, Utc::now()),
        },
    )
    .await?;
    // No Patrol route at all.
    save_settings(f.db.store(), &f.tenant, json!({})).await?;
    let TriggerOutcome::NotReady(blocked) = f.trigger.handle(&f.tenant, &critical).await? else {
        panic!("expected the readiness gate to refuse");
    };
    assert_eq!(blocked.cause, BlockedCause::ProviderNotConfigured);
    // A route whose provider has no key.
    save_settings(
        f.db.store(),
        &f.tenant,
        json!({"patrol_model": "anthropic:claude-sonnet-4"}),
    )
    .await?;
    assert!(matches!(
        f.trigger.handle(&f.tenant, &critical).await?,
        TriggerOutcome::NotReady(_)
    ));
    assert!(runs(f.db.store(), &f.tenant).await?.is_empty());
    assert_eq!(run_outbox_rows(&f.db).await?, 0);
    // An event naming no stored alert starts nothing either.
    save_settings(f.db.store(), &f.tenant, json!({"patrol_model": ROUTE})).await?;
    let unknown = ReceivedAlert::from_transition(AlertTransition::Fired {
        alert: alert(AlertRule::Unhealthy, AlertLevel::Critical, Utc::now()),
    });
    assert_eq!(
        f.trigger.handle(&f.tenant, &unknown).await?,
        TriggerOutcome::UnknownAlert
    );
    assert!(runs(f.db.store(), &f.tenant).await?.is_empty());
    f.db.cleanup().await
}

fn count(metrics: &AlertTriggerMetrics, outcome: &str) -> u64 {
    metrics
        .outcomes
        .get_or_create(&OutcomeLabels {
            outcome: outcome.to_owned(),
        })
        .get()
}

#[tokio::test]
async fn the_durable_consumer_starts_one_run_per_firing_across_redelivery_and_restart()
-> anyhow::Result<()> {
    let f = fixture(json!({})).await?;
    let nats = TestNats::connect().await?;
    nats.ensure_streams().await?;
    let bus = nats.bus();
    let metrics = AlertTriggerMetrics::default();
    let settings = AlertTriggerSettings {
        pull_expires: Duration::from_millis(500),
        ..AlertTriggerSettings::default()
    };
    let trigger = AlertTrigger::new(
        RunAcceptor::new(f.db.store().clone(), nats.subjects()).with_readiness_gate(config()),
        config(),
    )
    .with_settings(settings.clone())
    .with_metrics(metrics.clone());
    let shutdown = CancellationToken::new();
    let task = trigger.clone().consume(&bus, shutdown.clone()).await?;

    let fired = AlertTransition::Fired {
        alert: alert(AlertRule::RestartLoop, AlertLevel::Critical, Utc::now()),
    };
    store_transition(f.db.store(), &f.tenant, fired.clone()).await?;
    let (domain, event) = ALERT_FIRED;
    // Two deliveries of one transition (distinct message ids, as after a replay).
    bus.publish_event(&f.tenant, domain, event, &fired, None)
        .await?;
    bus.publish_event(&f.tenant, domain, event, &fired, None)
        .await?;
    wait::until(
        Duration::from_secs(15),
        "both deliveries handled",
        || async {
            (count(&metrics, "started") == 1 && count(&metrics, "duplicate") == 1).then_some(())
        },
    )
    .await?;
    let listed = runs(f.db.store(), &f.tenant).await?;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].trigger_reason, TriggerReason::AlertFired);
    assert_eq!(listed[0].scope_resource_ids, vec![SERVICE]);

    // Stopped, an event arrives; a new consumer on the same durable picks it up.
    shutdown.cancel();
    task.await?;
    let other = AlertTransition::Fired {
        alert: alert(AlertRule::UnexpectedExit, AlertLevel::Critical, Utc::now()),
    };
    store_transition(f.db.store(), &f.tenant, other.clone()).await?;
    bus.publish_event(&f.tenant, domain, event, &other, None)
        .await?;
    let shutdown = CancellationToken::new();
    let task = trigger.consume(&bus, shutdown.clone()).await?;
    wait::until(
        Duration::from_secs(15),
        "the event sent while stopped",
        || async { (count(&metrics, "started") == 2).then_some(()) },
    )
    .await?;
    let listed = runs(f.db.store(), &f.tenant).await?;
    assert_eq!(listed.len(), 2);
    assert!(
        listed
            .iter()
            .any(|r| r.alert_type.as_deref() == Some("unexpected_exit"))
    );
    shutdown.cancel();
    task.await?;
    nats.cleanup().await?;
    f.db.cleanup().await
}

#[tokio::test]
async fn a_full_scoped_queue_refuses_the_alert_run_without_retrying() -> anyhow::Result<()> {
    let f = fixture(json!({})).await?;
    let trigger = AlertTrigger::new(
        RunAcceptor::new(f.db.store().clone(), Subjects::new(None))
            .with_readiness_gate(config())
            .with_scoped_queue_limit(1),
        config(),
    );
    let first = store_transition(
        f.db.store(),
        &f.tenant,
        AlertTransition::Fired {
            alert: alert(AlertRule::RestartLoop, AlertLevel::Critical, Utc::now()),
        },
    )
    .await?;
    assert!(matches!(
        trigger.handle(&f.tenant, &first).await?,
        TriggerOutcome::Started { .. }
    ));
    let second = store_transition(
        f.db.store(),
        &f.tenant,
        AlertTransition::Fired {
            alert: alert(AlertRule::UnexpectedExit, AlertLevel::Critical, Utc::now()),
        },
    )
    .await?;
    let TriggerOutcome::Refused { code, .. } = trigger.handle(&f.tenant, &second).await? else {
        panic!("expected the queue limit to refuse");
    };
    assert_eq!(code, pulse_bus::ErrorCode::PatrolQueueFull);
    assert_eq!(runs(f.db.store(), &f.tenant).await?.len(), 1);
    f.db.cleanup().await
}

#[tokio::test]
async fn a_tenant_that_switched_patrol_off_starts_no_alert_run() -> anyhow::Result<()> {
    let f = fixture(json!({})).await?;
    save_settings(
        f.db.store(),
        &f.tenant,
        json!({"patrol_model": ROUTE, "patrol_enabled": false}),
    )
    .await?;
    let fired = store_transition(
        f.db.store(),
        &f.tenant,
        AlertTransition::Fired {
            alert: alert(AlertRule::RestartLoop, AlertLevel::Critical, Utc::now()),
        },
    )
    .await?;
    let outcome = f.trigger.handle(&f.tenant, &fired).await?;
    let TriggerOutcome::Refused { code, message } = &outcome else {
        panic!("expected a refusal, got {outcome:?}");
    };
    assert_eq!(*code, pulse_bus::ErrorCode::PatrolDisabled);
    assert!(message.contains("patrol_enabled"), "{message}");
    assert!(runs(f.db.store(), &f.tenant).await?.is_empty());
    assert_eq!(run_outbox_rows(&f.db).await?, 0);

    // Switched on, the same firing starts its run.
    save_settings(
        f.db.store(),
        &f.tenant,
        json!({"patrol_model": ROUTE, "patrol_enabled": true}),
    )
    .await?;
    let outcome = f.trigger.handle(&f.tenant, &fired).await?;
    assert!(
        matches!(outcome, TriggerOutcome::Started { .. }),
        "{outcome:?}"
    );
    assert_eq!(runs(f.db.store(), &f.tenant).await?.len(), 1);
    f.db.cleanup().await
}
