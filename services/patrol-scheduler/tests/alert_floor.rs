//! The alert floor against real Postgres: reports stored as the relay stores them, ticks of the
//! floor, and what lands in `alerts`, the saved state and the outbox.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use pulse_bus::Subjects;
use pulse_domain::TenantId;
use pulse_domain::alert_rules::{AlertLevel, AlertRule};
use pulse_domain::resource::{Health, ObservedResource, ResourceId, ResourceStatus, ResourceType};
use pulse_patrol_scheduler::floor_metrics::{FloorMetrics, TransitionLabels};
use pulse_patrol_scheduler::{AlertFloor, FloorSettings};
use pulse_store::agents::{self, AgentSession};
use pulse_store::alerts::{self, AlertFilter, AlertStatus, StateFilter, StoredAlert};
use pulse_store::metrics::{self, MetricSample};
use pulse_store::{Store, resources, tenants};
use pulse_test_support::db::TestDb;
use serde_json::json;

fn settings() -> FloorSettings {
    FloorSettings {
        tick: Duration::from_millis(50),
        batch_size: 2,
        ..FloorSettings::default()
    }
}

fn service(health: Health, status: ResourceStatus, restarts: u32) -> ObservedResource {
    ObservedResource {
        resource_type: ResourceType::Service,
        source_id: "web".to_owned(),
        name: "web".to_owned(),
        aliases: Vec::new(),
        status,
        health,
        restart_count: Some(restarts),
        labels: BTreeMap::new(),
        details: json!({"last_exit_code": null, "health_log": []}),
        metrics: BTreeMap::new(),
        parent: None,
    }
}

fn with_metric(kind: ResourceType, source: &str, metric: &str, value: f64) -> ObservedResource {
    ObservedResource {
        resource_type: kind,
        source_id: source.to_owned(),
        name: source.to_owned(),
        aliases: Vec::new(),
        status: ResourceStatus::Running,
        health: Health::Healthy,
        restart_count: None,
        labels: BTreeMap::new(),
        details: json!({}),
        metrics: BTreeMap::from([(metric.to_owned(), value)]),
        parent: None,
    }
}

/// Stores one report as the relay does (one transaction; the agent is online).
async fn report(
    store: &Store,
    tenant: &TenantId,
    agent: &str,
    observed: &[ObservedResource],
) -> anyhow::Result<DateTime<Utc>> {
    let at = Utc::now();
    let tx = store.tenant_tx(tenant).await?;
    agents::connect(
        &tx,
        &AgentSession {
            id: agent.to_owned(),
            hostname: agent.to_owned(),
            agent_version: "test".to_owned(),
            report_interval_ms: 500,
            token_id: None,
        },
    )
    .await?;
    resources::apply_report(&tx, agent, at, observed).await?;
    let samples: Vec<MetricSample> = observed
        .iter()
        .flat_map(|r| {
            let id = ResourceId::of(r.resource_type, agent, &r.source_id);
            r.metrics.iter().map(move |(m, v)| MetricSample {
                resource_id: id.clone(),
                metric: m.clone(),
                at,
                value: *v,
            })
        })
        .collect();
    metrics::insert(&tx, &samples).await?;
    tx.commit().await?;
    Ok(at)
}

async fn list(
    store: &Store,
    tenant: &TenantId,
    state: StateFilter,
) -> anyhow::Result<Vec<StoredAlert>> {
    let tx = store.tenant_tx(tenant).await?;
    let listed = alerts::list(
        &tx,
        &AlertFilter {
            state,
            ..AlertFilter::default()
        },
    )
    .await?;
    tx.commit().await?;
    Ok(listed)
}

/// `(subject suffix after the tenant, transition, key)` of every outbox row, in order.
async fn outbox(db: &TestDb) -> anyhow::Result<Vec<(String, String, String)>> {
    let client = db.app_pool().get().await?;
    let rows = client
        .query(
            "SELECT subject, payload FROM outbox WHERE message_type = 'pulse.alert.transition' ORDER BY id",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| {
            let subject: String = row.get(0);
            let payload: serde_json::Value = row.get(1);
            (
                subject.rsplit('.').next().unwrap_or_default().to_owned(),
                payload["transition"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                payload["alert"]["key"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect())
}

async fn setup() -> anyhow::Result<(TestDb, TenantId)> {
    let db = TestDb::create().await?;
    let tenant = TenantId::new("acme")?;
    tenants::create(db.store(), &tenant, "Acme").await?;
    Ok((db, tenant))
}

#[tokio::test]
async fn unhealthy_service_fires_then_clears_with_one_event_each() -> anyhow::Result<()> {
    let (db, tenant) = setup().await?;
    let store = db.store();
    let counters = FloorMetrics::default();
    let mut floor = AlertFloor::new(store.clone(), Subjects::new(Some("t1")), settings())
        .with_metrics(counters.clone());

    report(
        store,
        &tenant,
        "m1",
        &[service(Health::Healthy, ResourceStatus::Running, 0)],
    )
    .await?;
    let first = floor.tick().await?;
    assert_eq!((first.evaluated, first.transitions), (1, 0), "{first:?}");
    assert!(list(store, &tenant, StateFilter::All).await?.is_empty());

    // Nothing new: nothing pending, nothing evaluated.
    let idle = floor.tick().await?;
    assert_eq!((idle.pending, idle.evaluated), (0, 0), "{idle:?}");

    report(
        store,
        &tenant,
        "m1",
        &[service(Health::Unhealthy, ResourceStatus::Running, 0)],
    )
    .await?;
    let fired = floor.tick().await?;
    assert_eq!(fired.transitions, 1, "{fired:?}");
    let firing = list(store, &tenant, StateFilter::Firing).await?;
    assert_eq!(firing.len(), 1);
    assert_eq!(firing[0].rule, AlertRule::Unhealthy);
    assert_eq!(firing[0].resource_id, "service:m1:web");
    assert_eq!(firing[0].level, AlertLevel::Warning);

    // Still unhealthy: the same alert, no new event.
    report(
        store,
        &tenant,
        "m1",
        &[service(Health::Unhealthy, ResourceStatus::Running, 0)],
    )
    .await?;
    assert_eq!(floor.tick().await?.transitions, 0);

    report(
        store,
        &tenant,
        "m1",
        &[service(Health::Healthy, ResourceStatus::Running, 0)],
    )
    .await?;
    assert_eq!(floor.tick().await?.transitions, 1);
    assert!(list(store, &tenant, StateFilter::Firing).await?.is_empty());
    let cleared = list(store, &tenant, StateFilter::Cleared).await?;
    assert_eq!(cleared.len(), 1);
    assert_eq!(cleared[0].id, firing[0].id);
    assert_eq!(cleared[0].state, AlertStatus::Cleared);

    let events = outbox(&db).await?;
    assert_eq!(
        events,
        [
            (
                "fired".to_owned(),
                "fired".to_owned(),
                "service:m1:web:unhealthy".to_owned()
            ),
            (
                "cleared".to_owned(),
                "cleared".to_owned(),
                "service:m1:web:unhealthy".to_owned()
            ),
        ]
    );
    let client = db.app_pool().get().await?;
    let subject: String = client
        .query_one("SELECT subject FROM outbox WHERE message_type = 'pulse.alert.transition' ORDER BY id LIMIT 1", &[])
        .await?
        .get(0);
    assert_eq!(subject, "t1.pulse.acme.events.alert.fired");
    let count = |event: &str| {
        counters
            .transitions
            .get_or_create(&TransitionLabels {
                event: event.to_owned(),
            })
            .get()
    };
    assert_eq!((count("fired"), count("cleared")), (1, 1));
    assert_eq!(counters.evaluated.get(), 4);
    assert_eq!(counters.failures.get(), 0);
    db.cleanup().await
}

#[tokio::test]
async fn restart_loop_filesystem_levels_memory_and_agent_offline() -> anyhow::Result<()> {
    let (db, tenant) = setup().await?;
    let store = db.store();
    let mut floor = AlertFloor::new(store.clone(), Subjects::new(None), settings());

    // Restart counter: the first sight is the baseline, three more restarts are a loop.
    for restarts in [1, 2, 3, 4] {
        report(
            store,
            &tenant,
            "m1",
            &[service(Health::Unknown, ResourceStatus::Exited, restarts)],
        )
        .await?;
        floor.tick().await?;
    }
    let firing = list(store, &tenant, StateFilter::Firing).await?;
    let restart = firing
        .iter()
        .find(|a| a.rule == AlertRule::RestartLoop)
        .expect("restart_loop firing");
    assert_eq!((restart.value, restart.threshold), (3.0, 3.0));
    assert_eq!(restart.level, AlertLevel::Critical);

    // Filesystem: warning at 90, critical at 95, held critical above 90, back to warning at 90.
    let fs = |pct| with_metric(ResourceType::Storage, "/var", "used_percent", pct);
    let fs_alert = |list: &[StoredAlert]| {
        list.iter()
            .find(|a| a.rule == AlertRule::FilesystemUsage)
            .map(|a| (a.level, a.value))
    };
    report(store, &tenant, "m2", &[fs(91.0)]).await?;
    floor.tick().await?;
    assert_eq!(
        fs_alert(&list(store, &tenant, StateFilter::Firing).await?),
        Some((AlertLevel::Warning, 91.0))
    );
    report(store, &tenant, "m2", &[fs(96.0)]).await?;
    floor.tick().await?;
    let critical = list(store, &tenant, StateFilter::Firing).await?;
    assert_eq!(fs_alert(&critical), Some((AlertLevel::Critical, 96.0)));
    report(store, &tenant, "m2", &[fs(93.0)]).await?;
    floor.tick().await?;
    // The reading is refreshed on the same alert without an event.
    assert_eq!(
        fs_alert(&list(store, &tenant, StateFilter::Firing).await?),
        Some((AlertLevel::Critical, 93.0))
    );
    report(store, &tenant, "m2", &[fs(89.0)]).await?;
    floor.tick().await?;
    let warning = list(store, &tenant, StateFilter::Firing).await?;
    assert_eq!(fs_alert(&warning), Some((AlertLevel::Warning, 89.0)));
    let fs_ids: Vec<_> = [&critical, &warning]
        .iter()
        .filter_map(|l| {
            l.iter()
                .find(|a| a.rule == AlertRule::FilesystemUsage)
                .map(|a| a.id)
        })
        .collect();
    assert_eq!(fs_ids[0], fs_ids[1], "a level change keeps the alert");

    // Memory on the host.
    let host = |pct| with_metric(ResourceType::Host, "m3", "memory_percent", pct);
    report(store, &tenant, "m3", &[host(92.0)]).await?;
    floor.tick().await?;
    assert!(
        list(store, &tenant, StateFilter::Firing)
            .await?
            .iter()
            .any(|a| a.rule == AlertRule::MemoryUsage && a.resource_id == "host:m3")
    );

    // The agent goes silent: the relay marks it offline and its resources unknown.
    let tx = store.tenant_tx(&tenant).await?;
    assert!(
        agents::mark_offline(
            &tx,
            "m3",
            Utc::now() + chrono::Duration::seconds(5),
            std::time::Duration::ZERO
        )
        .await?
    );
    resources::mark_agent_unknown(&tx, "m3").await?;
    tx.commit().await?;
    floor.tick().await?;
    let firing = list(store, &tenant, StateFilter::Firing).await?;
    let offline = firing
        .iter()
        .find(|a| a.rule == AlertRule::AgentOffline)
        .expect("agent_offline firing");
    assert_eq!(offline.resource_id, "host:m3");
    // No data is not good news: the memory alert stays.
    assert!(firing.iter().any(|a| a.rule == AlertRule::MemoryUsage));

    // Back online with normal memory: both clear.
    report(store, &tenant, "m3", &[host(40.0)]).await?;
    floor.tick().await?;
    let firing = list(store, &tenant, StateFilter::Firing).await?;
    assert!(
        !firing.iter().any(|a| a.resource_id == "host:m3"),
        "{firing:?}"
    );

    let events = outbox(&db).await?;
    let kinds: Vec<&str> = events.iter().map(|(s, _, _)| s.as_str()).collect();
    assert!(kinds.contains(&"level_changed"), "{kinds:?}");
    assert_eq!(
        events
            .iter()
            .filter(|(s, _, k)| s == "fired" && k == "storage:m2:/var:filesystem_usage")
            .count(),
        1
    );
    db.cleanup().await
}

#[tokio::test]
async fn a_restarted_floor_neither_refires_nor_misses_what_happened_meanwhile() -> anyhow::Result<()>
{
    let (db, tenant) = setup().await?;
    let store = db.store();
    let mut floor = AlertFloor::new(store.clone(), Subjects::new(None), settings());
    report(
        store,
        &tenant,
        "m1",
        &[service(Health::Unhealthy, ResourceStatus::Running, 0)],
    )
    .await?;
    assert_eq!(floor.tick().await?.transitions, 1);
    drop(floor);

    // A new instance starts from scratch but finds the saved state: nothing to re-fire.
    let mut restarted = AlertFloor::new(store.clone(), Subjects::new(None), settings());
    let report_after = restarted.tick().await?;
    assert_eq!((report_after.evaluated, report_after.transitions), (0, 0));
    drop(restarted);

    // Written while no floor ran: found by the next one.
    report(
        store,
        &tenant,
        "m1",
        &[service(Health::Healthy, ResourceStatus::Running, 0)],
    )
    .await?;
    let mut again = AlertFloor::new(store.clone(), Subjects::new(None), settings());
    assert_eq!(again.tick().await?.transitions, 1);
    assert!(list(store, &tenant, StateFilter::Firing).await?.is_empty());
    assert_eq!(outbox(&db).await?.len(), 2);
    db.cleanup().await
}

#[tokio::test]
async fn batches_cover_many_resources_and_tenants_in_one_tick() -> anyhow::Result<()> {
    let (db, acme) = setup().await?;
    let store = db.store();
    let globex = TenantId::new("globex")?;
    tenants::create(store, &globex, "Globex").await?;
    let many: Vec<ObservedResource> = (0..7)
        .map(|i| {
            with_metric(
                ResourceType::Storage,
                &format!("/d{i}"),
                "used_percent",
                97.0,
            )
        })
        .collect();
    for agent in ["a1", "a2", "a3"] {
        report(store, &acme, agent, &many).await?;
    }
    for agent in ["g1", "g2"] {
        report(store, &globex, agent, &many[..3]).await?;
    }
    // Batch size 2 (agents): three batches in one tick.
    let mut floor = AlertFloor::new(store.clone(), Subjects::new(None), settings());
    let tick = floor.tick().await?;
    assert_eq!(tick.pending, 5, "{tick:?}");
    assert_eq!(tick.evaluated, 3 * 7 + 2 * 3, "{tick:?}");
    assert_eq!(tick.transitions, 27, "{tick:?}");
    assert_eq!(list(store, &acme, StateFilter::Firing).await?.len(), 21);
    assert_eq!(list(store, &globex, StateFilter::Firing).await?.len(), 6);
    // Caught up: the next tick finds no agent with news.
    let idle = floor.tick().await?;
    assert_eq!((idle.pending, idle.evaluated), (0, 0), "{idle:?}");
    // One agent reports again: only its resources are read.
    report(store, &globex, "g2", &many[..3]).await?;
    let again = floor.tick().await?;
    assert_eq!((again.pending, again.evaluated), (1, 3), "{again:?}");
    db.cleanup().await
}

#[tokio::test]
async fn alerts_of_a_removed_resource_clear_and_its_state_is_forgotten() -> anyhow::Result<()> {
    let (db, tenant) = setup().await?;
    let store = db.store();
    let mut floor = AlertFloor::new(store.clone(), Subjects::new(None), settings());
    let fs = with_metric(ResourceType::Storage, "/mnt", "used_percent", 97.0);
    let host = with_metric(ResourceType::Host, "m1", "memory_percent", 10.0);
    report(store, &tenant, "m1", &[host.clone(), fs]).await?;
    assert_eq!(floor.tick().await?.transitions, 1);
    assert_eq!(list(store, &tenant, StateFilter::Firing).await?.len(), 1);
    // Nothing removed yet: the sweep finds nothing.
    assert_eq!(floor.sweep_removed().await?, 0);

    // The mount disappears from the next report; the relay deletes the resource.
    report(store, &tenant, "m1", &[host]).await?;
    assert_eq!(floor.sweep_removed().await?, 1);
    assert!(list(store, &tenant, StateFilter::Firing).await?.is_empty());
    let cleared = list(store, &tenant, StateFilter::Cleared).await?;
    assert_eq!(cleared[0].resource_id, "storage:m1:/mnt");
    let tx = store.tenant_tx(&tenant).await?;
    assert!(
        alerts::load_states(&tx, &["storage:m1:/mnt"])
            .await?
            .is_empty()
    );
    tx.commit().await?;
    assert_eq!(
        outbox(&db).await?.last().map(|(s, _, _)| s.clone()),
        Some("cleared".to_owned())
    );

    // It comes back still full: a new alert fires.
    let fs = with_metric(ResourceType::Storage, "/mnt", "used_percent", 97.0);
    let host = with_metric(ResourceType::Host, "m1", "memory_percent", 10.0);
    report(store, &tenant, "m1", &[host, fs]).await?;
    floor.tick().await?;
    let firing = list(store, &tenant, StateFilter::Firing).await?;
    assert_eq!(firing.len(), 1);
    assert_ne!(firing[0].id, cleared[0].id);
    db.cleanup().await
}
