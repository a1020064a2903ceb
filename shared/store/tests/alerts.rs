//! Alerts against real Postgres: the lifecycle rows, the saved rule state, the scan the alert
//! floor runs, and tenant isolation of all of it.

use std::collections::BTreeMap;

use chrono::{Duration, Utc};
use pulse_domain::TenantId;
use pulse_domain::alert_rules::{
    Alert, AlertKey, AlertLevel, AlertRule, AlertTransition, ResourceAlertState,
};
use pulse_domain::resource::{Health, ObservedResource, ResourceId, ResourceStatus, ResourceType};
use pulse_store::agents::{self, AgentSession};
use pulse_store::alerts::{
    self, AlertFilter, AlertStatus, MAX_LIST_LIMIT, SavedAlertState, StateFilter,
};
use pulse_store::metrics::{self, MetricSample};
use pulse_store::{Store, resources, tenants};
use pulse_test_support::db::TestDb;

fn alert(resource_id: &str, rule: AlertRule, level: AlertLevel, value: f64) -> Alert {
    let now = Utc::now();
    Alert {
        key: AlertKey::new(resource_id, rule),
        rule,
        level,
        value,
        threshold: 90.0,
        resource_id: resource_id.to_owned(),
        message: format!("{rule} on {resource_id}"),
        fired_at: now,
        updated_at: now,
    }
}

async fn setup() -> anyhow::Result<(TestDb, TenantId, TenantId)> {
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    let globex = TenantId::new("globex")?;
    tenants::create(db.store(), &acme, "Acme").await?;
    tenants::create(db.store(), &globex, "Globex").await?;
    Ok((db, acme, globex))
}

fn observed(kind: ResourceType, source: &str, metrics: &[(&str, f64)]) -> ObservedResource {
    ObservedResource {
        resource_type: kind,
        source_id: source.to_owned(),
        name: source.to_owned(),
        aliases: Vec::new(),
        status: ResourceStatus::Running,
        health: Health::Healthy,
        restart_count: None,
        labels: BTreeMap::new(),
        details: serde_json::Value::Null,
        metrics: metrics.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        parent: None,
    }
}

/// Stores a report the way the relay does: agent seen, resources, metric samples.
async fn report(
    store: &Store,
    tenant: &TenantId,
    agent: &str,
    at: chrono::DateTime<Utc>,
    observed: &[ObservedResource],
) -> anyhow::Result<()> {
    let tx = store.tenant_tx(tenant).await?;
    agents::connect(
        &tx,
        &AgentSession {
            id: agent.to_owned(),
            hostname: agent.to_owned(),
            agent_version: "test".to_owned(),
            report_interval_ms: 1000,
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
    Ok(())
}

#[tokio::test]
async fn alert_lifecycle_fired_level_changed_cleared() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let store = db.store();
    let fs = alert(
        "storage:m1:/var",
        AlertRule::FilesystemUsage,
        AlertLevel::Warning,
        91.0,
    );
    let mem = alert("host:m1", AlertRule::MemoryUsage, AlertLevel::Warning, 92.0);

    let tx = store.tenant_tx(&acme).await?;
    let fs_id = alerts::apply_transition(&tx, &AlertTransition::Fired { alert: fs.clone() })
        .await?
        .expect("a new alert id");
    alerts::apply_transition(&tx, &AlertTransition::Fired { alert: mem.clone() }).await?;
    tx.commit().await?;

    // A second firing row for the same key is refused by the partial unique index.
    let tx = store.tenant_tx(&acme).await?;
    let err = alerts::insert_fired(&tx, uuid::Uuid::now_v7(), &fs)
        .await
        .expect_err("two firing alerts for one key");
    assert!(err.is_unique_violation(), "{err}");
    tx.rollback().await?;

    // Level change keeps the same alert row.
    let critical = Alert {
        level: AlertLevel::Critical,
        value: 96.0,
        threshold: 95.0,
        updated_at: Utc::now(),
        ..fs.clone()
    };
    let tx = store.tenant_tx(&acme).await?;
    let changed = alerts::apply_transition(
        &tx,
        &AlertTransition::LevelChanged {
            from: AlertLevel::Warning,
            alert: critical.clone(),
        },
    )
    .await?;
    assert_eq!(changed, Some(fs_id));
    tx.commit().await?;

    let tx = store.tenant_tx(&acme).await?;
    let firing = alerts::list(&tx, &AlertFilter::default()).await?;
    assert_eq!(firing.len(), 2);
    let stored = firing.iter().find(|a| a.id == fs_id).expect("fs alert");
    assert_eq!(
        (stored.level, stored.value, stored.threshold, stored.state),
        (AlertLevel::Critical, 96.0, 95.0, AlertStatus::Firing)
    );
    assert_eq!(stored.key, fs.key);
    assert_eq!(stored.cleared_at, None);

    // Refreshing readings touches only what moved.
    let moved = Alert {
        value: 97.5,
        ..critical.clone()
    };
    assert_eq!(alerts::refresh_readings(&tx, &[&moved, &mem]).await?, 1);

    let cleared_at = Utc::now();
    let cleared = alerts::apply_transition(
        &tx,
        &AlertTransition::Cleared {
            alert: moved.clone(),
            cleared_at,
        },
    )
    .await?;
    assert_eq!(cleared, Some(fs_id));
    // Clearing again finds nothing firing.
    assert!(!alerts::clear(&tx, &moved, cleared_at).await?);
    tx.commit().await?;

    let tx = store.tenant_tx(&acme).await?;
    let firing = alerts::list(&tx, &AlertFilter::default()).await?;
    assert_eq!(
        firing.iter().map(|a| a.rule).collect::<Vec<_>>(),
        [AlertRule::MemoryUsage]
    );
    let cleared = alerts::list(
        &tx,
        &AlertFilter {
            state: StateFilter::Cleared,
            ..AlertFilter::default()
        },
    )
    .await?;
    assert_eq!(cleared.len(), 1);
    assert_eq!(cleared[0].state, AlertStatus::Cleared);
    assert_eq!(cleared[0].value, 97.5);
    assert!(cleared[0].cleared_at.is_some());
    let by_resource = alerts::list(
        &tx,
        &AlertFilter {
            state: StateFilter::All,
            resource_id: Some("storage:m1:/var".to_owned()),
            limit: 10,
        },
    )
    .await?;
    assert_eq!(by_resource.len(), 1);
    let all = alerts::list(
        &tx,
        &AlertFilter {
            state: StateFilter::All,
            resource_id: None,
            limit: 1,
        },
    )
    .await?;
    assert_eq!(all.len(), 1, "the limit applies");

    // The same key can fire again once cleared: a new alert.
    let again = alerts::apply_transition(&tx, &AlertTransition::Fired { alert: fs.clone() })
        .await?
        .expect("id");
    assert_ne!(again, fs_id);
    tx.commit().await?;
    db.cleanup().await
}

#[tokio::test]
async fn list_limit_is_clamped() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let tx = db.store().tenant_tx(&acme).await?;
    for i in 0..3 {
        let a = alert(
            &format!("host:m{i}"),
            AlertRule::AgentOffline,
            AlertLevel::Critical,
            1.0,
        );
        alerts::insert_fired(&tx, uuid::Uuid::now_v7(), &a).await?;
    }
    for limit in [0, -5] {
        let listed = alerts::list(
            &tx,
            &AlertFilter {
                limit,
                ..AlertFilter::default()
            },
        )
        .await?;
        assert_eq!(listed.len(), 1, "limit {limit} is raised to 1");
    }
    let listed = alerts::list(
        &tx,
        &AlertFilter {
            limit: MAX_LIST_LIMIT * 10,
            ..AlertFilter::default()
        },
    )
    .await?;
    assert_eq!(listed.len(), 3);
    tx.commit().await?;
    db.cleanup().await
}

#[tokio::test]
async fn saved_state_round_trips_and_replaces() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let store = db.store();
    let mut state = ResourceAlertState::default();
    let a = alert(
        "service:m1:web",
        AlertRule::Unhealthy,
        AlertLevel::Warning,
        1.0,
    );
    state.firing.insert(AlertRule::Unhealthy, a);
    state.restart_history.last_count = Some(4);
    state.restart_history.restarts.push(Utc::now());
    let t0 = Utc::now() - Duration::seconds(5);
    let saved = SavedAlertState {
        resource_id: "service:m1:web".to_owned(),
        state: state.clone(),
        observed_at: t0,
        agent_online: None,
        received_at: t0,
    };
    let tx = store.tenant_tx(&acme).await?;
    assert_eq!(
        alerts::save_states(&tx, std::slice::from_ref(&saved)).await?,
        1
    );
    tx.commit().await?;

    let tx = store.tenant_tx(&acme).await?;
    let loaded = alerts::load_states(&tx, &["service:m1:web", "service:m1:none"]).await?;
    assert_eq!(loaded.len(), 1);
    let got = &loaded["service:m1:web"];
    assert_eq!(got.state, state);
    assert_eq!(got.agent_online, None);
    // Postgres keeps microseconds.
    assert!(
        (got.observed_at - t0)
            .num_microseconds()
            .unwrap_or(i64::MAX)
            .abs()
            < 1
    );

    let replaced = SavedAlertState {
        state: ResourceAlertState::default(),
        agent_online: Some(true),
        received_at: Utc::now(),
        ..saved
    };
    alerts::save_states(&tx, &[replaced]).await?;
    let loaded = alerts::load_states(&tx, &["service:m1:web"]).await?;
    assert_eq!(
        loaded["service:m1:web"].state,
        ResourceAlertState::default()
    );
    assert_eq!(loaded["service:m1:web"].agent_online, Some(true));
    tx.commit().await?;
    db.cleanup().await
}

#[tokio::test]
async fn scan_finds_agents_with_news_and_their_resources_with_latest_metrics() -> anyhow::Result<()>
{
    let (db, acme, globex) = setup().await?;
    let store = db.store();
    let t1 = Utc::now() - Duration::seconds(30);
    report(
        store,
        &acme,
        "m1",
        t1,
        &[
            observed(ResourceType::Host, "m1", &[("memory_percent", 50.0)]),
            observed(ResourceType::Storage, "/var", &[("used_percent", 70.0)]),
        ],
    )
    .await?;
    let t2 = Utc::now();
    report(
        store,
        &acme,
        "m1",
        t2,
        &[
            observed(
                ResourceType::Host,
                "m1",
                &[("memory_percent", 93.0), ("cpu_percent", 99.0)],
            ),
            observed(
                ResourceType::Storage,
                "/var",
                &[("used_percent", 71.0), ("inodes_percent", 12.0)],
            ),
        ],
    )
    .await?;
    report(
        store,
        &globex,
        "g1",
        t2,
        &[observed(ResourceType::Host, "g1", &[])],
    )
    .await?;

    // Every tenant's agents without a mark, identities only.
    let pending = |max| async move {
        let mut seen: Vec<(String, String)> = alerts::pending(store, max)
            .await?
            .into_iter()
            .map(|p| (p.tenant.as_str().to_owned(), p.agent_id))
            .collect();
        seen.sort();
        anyhow::Ok(seen)
    };
    assert_eq!(
        pending(100).await?,
        [
            ("acme".to_owned(), "m1".to_owned()),
            ("globex".to_owned(), "g1".to_owned()),
        ]
    );
    assert_eq!(pending(1).await?.len(), 1);

    let tx = store.tenant_tx(&acme).await?;
    // Another tenant's agent finds nothing.
    assert!(alerts::agent_marks(&tx, &["g1"]).await?.is_empty());
    let marks = alerts::agent_marks(&tx, &["m1", "g1"]).await?;
    assert_eq!(marks.len(), 1);
    assert!(marks[0].online);
    let scanned = alerts::scan_agents(&tx, &["m1", "g1"]).await?;
    assert_eq!(scanned.len(), 2);
    let host = &scanned[0];
    assert_eq!(host.id, "host:m1");
    assert_eq!(host.agent_online, Some(true));
    assert_eq!(
        host.metrics,
        BTreeMap::from([("memory_percent".to_owned(), 93.0)])
    );
    let fs = &scanned[1];
    assert_eq!(fs.metrics["used_percent"], 71.0);
    assert_eq!(fs.metrics["inodes_percent"], 12.0);
    assert_eq!(alerts::observation(fs).fs_used_pct, Some(71.0));
    assert_eq!(alerts::observation(host).mem_used_pct, Some(93.0));

    // Marking the agent as evaluated takes it out of the scan; a new report brings it back.
    alerts::save_agent_marks(&tx, &marks).await?;
    tx.commit().await?;
    assert_eq!(
        pending(100).await?,
        [("globex".to_owned(), "g1".to_owned())]
    );
    report(
        store,
        &acme,
        "m1",
        Utc::now(),
        &[observed(ResourceType::Host, "m1", &[])],
    )
    .await?;
    assert_eq!(pending(100).await?.len(), 2);
    let tx = store.tenant_tx(&acme).await?;
    let marks = alerts::agent_marks(&tx, &["m1"]).await?;
    alerts::save_agent_marks(&tx, &marks).await?;
    tx.commit().await?;
    assert_eq!(pending(100).await?.len(), 1);

    // The agent goes offline: a status change is news too, and the host reads offline.
    let tx = store.tenant_tx(&acme).await?;
    assert!(
        agents::mark_offline(
            &tx,
            "m1",
            Utc::now() + Duration::seconds(5),
            std::time::Duration::ZERO
        )
        .await?
    );
    resources::mark_agent_unknown(&tx, "m1").await?;
    tx.commit().await?;
    assert_eq!(pending(100).await?.len(), 2);
    let tx = store.tenant_tx(&acme).await?;
    let marks = alerts::agent_marks(&tx, &["m1"]).await?;
    assert!(!marks[0].online);
    let scanned = alerts::scan_agents(&tx, &["m1"]).await?;
    let obs = alerts::observation(&scanned[0]);
    assert_eq!(obs.agent_online, Some(false));
    assert_eq!(obs.run_state, None);
    tx.commit().await?;
    db.cleanup().await
}

#[tokio::test]
async fn another_tenant_sees_and_writes_none_of_it() -> anyhow::Result<()> {
    let (db, acme, globex) = setup().await?;
    let store = db.store();
    let a = alert(
        "host:m1",
        AlertRule::AgentOffline,
        AlertLevel::Critical,
        1.0,
    );
    let tx = store.tenant_tx(&acme).await?;
    alerts::insert_fired(&tx, uuid::Uuid::now_v7(), &a).await?;
    alerts::save_states(
        &tx,
        &[SavedAlertState {
            resource_id: "host:m1".to_owned(),
            state: ResourceAlertState::default(),
            observed_at: Utc::now(),
            agent_online: Some(false),
            received_at: Utc::now(),
        }],
    )
    .await?;
    tx.commit().await?;

    let tx = store.tenant_tx(&globex).await?;
    let all = AlertFilter {
        state: StateFilter::All,
        ..AlertFilter::default()
    };
    assert!(alerts::list(&tx, &all).await?.is_empty());
    assert!(alerts::firing(&tx, &a.key).await?.is_none());
    assert!(alerts::load_states(&tx, &["host:m1"]).await?.is_empty());
    // Clearing or changing acme's alert from globex touches nothing.
    assert!(!alerts::clear(&tx, &a, Utc::now()).await?);
    assert!(!alerts::update_level(&tx, &a).await?);
    // The same key may fire independently in globex.
    alerts::insert_fired(&tx, uuid::Uuid::now_v7(), &a).await?;
    tx.commit().await?;

    // Writing a row for another tenant is refused by the policy.
    let tx = store.tenant_tx(&globex).await?;
    let refused = tx
        .client()
        .execute(
            "INSERT INTO alerts (tenant_id, id, key, rule, level, value, threshold, resource_id,
                                 message, state, fired_at, updated_at)
             VALUES ('acme', $1, 'host:x:agent_offline', 'agent_offline', 'critical', 1, 1,
                     'host:x', 'm', 'firing', now(), now())",
            &[&uuid::Uuid::now_v7()],
        )
        .await;
    assert!(refused.is_err(), "row-level security let a foreign row in");
    tx.rollback().await?;

    let tx = store.tenant_tx(&acme).await?;
    let listed = alerts::list(&tx, &all).await?;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state, AlertStatus::Firing);
    tx.commit().await?;
    db.cleanup().await
}
