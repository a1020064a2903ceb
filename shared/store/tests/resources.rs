//! Applying agent reports, the resolver, marking an agent's resources unknown, metric history,
//! and tenant isolation of all of it.

use std::collections::BTreeMap;

use chrono::{Duration, Utc};
use pulse_domain::TenantId;
use pulse_domain::resource::{
    Health, ObservedResource, ResourceChange, ResourceId, ResourceStatus, ResourceType,
};
use pulse_store::agents::{self, AgentSession};
use pulse_store::metrics::{self, MetricSample};
use pulse_store::resources::{self, ResolveError};
use pulse_store::{Store, tenants};
use pulse_test_support::db::TestDb;

fn observed(kind: ResourceType, source: &str, name: &str, aliases: &[&str]) -> ObservedResource {
    ObservedResource {
        resource_type: kind,
        source_id: source.to_owned(),
        name: name.to_owned(),
        aliases: aliases.iter().map(|a| (*a).to_owned()).collect(),
        status: ResourceStatus::Running,
        health: Health::Healthy,
        restart_count: None,
        labels: BTreeMap::new(),
        details: serde_json::Value::Null,
        metrics: BTreeMap::new(),
        parent: None,
    }
}

async fn report(
    store: &Store,
    tenant: &TenantId,
    agent: &str,
    observed: &[ObservedResource],
) -> anyhow::Result<Vec<pulse_domain::resource::ResourceChanged>> {
    let tx = store.tenant_tx(tenant).await?;
    agents::connect(
        &tx,
        &AgentSession {
            id: agent.to_owned(),
            hostname: format!("{agent}.lan"),
            agent_version: "test".to_owned(),
            report_interval_ms: 1000,
            token_id: None,
        },
    )
    .await?;
    let changes = resources::apply_report(&tx, agent, Utc::now(), observed).await?;
    tx.commit().await?;
    Ok(changes)
}

async fn setup() -> anyhow::Result<(TestDb, TenantId)> {
    let db = TestDb::create().await?;
    let tenant = TenantId::new("acme")?;
    tenants::create(db.store(), &tenant, "Acme").await?;
    Ok((db, tenant))
}

#[tokio::test]
async fn resolver_finds_exactly_one_or_says_why_not() -> anyhow::Result<()> {
    let (db, tenant) = setup().await?;
    let store = db.store();
    report(
        store,
        &tenant,
        "m1",
        &[
            observed(ResourceType::Host, "m1", "box-one", &["box-one.lan"]),
            observed(ResourceType::Service, "web", "web", &["frontend"]),
            observed(ResourceType::Storage, "/var", "/var", &[]),
        ],
    )
    .await?;
    report(
        store,
        &tenant,
        "m2",
        &[
            observed(ResourceType::Host, "m2", "box-two", &[]),
            observed(ResourceType::Service, "web", "web", &[]),
        ],
    )
    .await?;

    let tx = store.tenant_tx(&tenant).await?;
    // Canonical id.
    let web1 = resources::resolve(&tx, "service:m1:web").await?;
    assert_eq!(web1.id, ResourceId::service("m1", "web"));
    assert_eq!(web1.parent, Some(ResourceId::host("m1")));
    assert_eq!(web1.aliases, vec!["frontend".to_owned()]);
    // Unique alias.
    assert_eq!(resources::resolve(&tx, "frontend").await?.id, web1.id);
    assert_eq!(
        resources::resolve(&tx, "box-one.lan").await?.id,
        ResourceId::host("m1")
    );
    // Unique name and unique source id.
    assert_eq!(
        resources::resolve(&tx, "box-two").await?.id,
        ResourceId::host("m2")
    );
    assert_eq!(
        resources::resolve(&tx, "/var").await?.id,
        ResourceId::storage("m1", "/var")
    );
    // Unknown.
    match resources::resolve(&tx, "nothing-here").await {
        Err(ResolveError::NotFound { query }) => assert_eq!(query, "nothing-here"),
        other => panic!("expected not found, got {other:?}"),
    }
    // A name shared by two resources names both.
    match resources::resolve(&tx, "web").await {
        Err(ResolveError::Ambiguous { candidates, .. }) => assert_eq!(
            candidates,
            vec![
                ResourceId::service("m1", "web"),
                ResourceId::service("m2", "web")
            ]
        ),
        other => panic!("expected ambiguous, got {other:?}"),
    }
    let listed = resources::list(&tx, Some(ResourceType::Service)).await?;
    assert_eq!(listed.len(), 2);
    assert_eq!(resources::list(&tx, None).await?.len(), 5);
    tx.commit().await?;
    db.cleanup().await
}

#[tokio::test]
async fn reports_upsert_announce_changes_and_remove_what_disappeared() -> anyhow::Result<()> {
    let (db, tenant) = setup().await?;
    let store = db.store();
    let host = observed(ResourceType::Host, "m1", "box", &[]);
    let web = observed(ResourceType::Service, "web", "web", &[]);
    let first = report(store, &tenant, "m1", &[host.clone(), web.clone()]).await?;
    assert_eq!(first.len(), 2);
    assert!(first.iter().all(|c| c.change == ResourceChange::Created));

    // Same state again: nothing to announce, nothing duplicated.
    assert!(
        report(store, &tenant, "m1", &[host.clone(), web.clone()])
            .await?
            .is_empty()
    );

    let mut sick = web.clone();
    sick.health = Health::Unhealthy;
    let changed = report(store, &tenant, "m1", &[host.clone(), sick]).await?;
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].previous_health, Some(Health::Healthy));
    assert_eq!(changed[0].health, Health::Unhealthy);

    // The service's definition was removed.
    let removed = report(store, &tenant, "m1", std::slice::from_ref(&host)).await?;
    assert_eq!(removed.len(), 1);
    assert_eq!(removed[0].change, ResourceChange::Removed);

    // The agent goes silent: its resources become unknown, never stopped.
    let tx = store.tenant_tx(&tenant).await?;
    // Seen now, reporting every second: silent for three intervals five seconds from now.
    let at = Utc::now() + Duration::seconds(5);
    assert!(agents::mark_offline(&tx, "m1", at, std::time::Duration::ZERO).await?);
    let unknown = resources::mark_agent_unknown(&tx, "m1").await?;
    assert_eq!(unknown.len(), 1);
    assert_eq!(unknown[0].status, ResourceStatus::Unknown);
    let all = resources::list(&tx, None).await?;
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].status, ResourceStatus::Unknown);
    assert_eq!(agents::get(&tx, "m1").await?.unwrap().status, "offline");
    tx.commit().await?;
    db.cleanup().await
}

#[tokio::test]
async fn stale_agents_and_metric_history() -> anyhow::Result<()> {
    let (db, tenant) = setup().await?;
    let store = db.store();
    report(
        store,
        &tenant,
        "m1",
        &[observed(ResourceType::Host, "m1", "box", &[])],
    )
    .await?;
    assert!(
        agents::stale(
            store,
            Utc::now() - Duration::hours(1),
            std::time::Duration::ZERO
        )
        .await?
        .is_empty()
    );
    let stale = agents::stale(
        store,
        Utc::now() + Duration::seconds(5),
        std::time::Duration::ZERO,
    )
    .await?;
    assert_eq!(stale, vec![(tenant.clone(), "m1".to_owned())]);

    let id = ResourceId::host("m1");
    let start = Utc::now() - Duration::minutes(10);
    let samples: Vec<MetricSample> = (0..2500)
        .map(|i| MetricSample {
            resource_id: id.clone(),
            metric: "cpu_percent".to_owned(),
            at: start + Duration::milliseconds(i * 100),
            value: if i == 3 { f64::NAN } else { i as f64 },
        })
        .collect();
    let tx = store.tenant_tx(&tenant).await?;
    assert_eq!(metrics::insert(&tx, &samples).await?, 2499);
    let newest = metrics::history(&tx, &id, "cpu_percent", start, 10).await?;
    assert_eq!(newest.len(), 10);
    assert_eq!(newest.last().map(|s| s.1), Some(2499.0));
    assert!(newest.windows(2).all(|w| w[0].0 < w[1].0));
    tx.commit().await?;
    db.cleanup().await
}

#[tokio::test]
async fn another_tenant_sees_none_of_it() -> anyhow::Result<()> {
    let (db, a) = setup().await?;
    let store = db.store();
    let b = TenantId::new("globex")?;
    tenants::create(store, &b, "Globex").await?;
    report(
        store,
        &b,
        "m9",
        &[observed(
            ResourceType::Host,
            "m9",
            "secret-box",
            &["hidden"],
        )],
    )
    .await?;
    let tx = store.tenant_tx(&a).await?;
    assert!(resources::list(&tx, None).await?.is_empty());
    for query in ["host:m9", "secret-box", "hidden", "m9"] {
        assert!(
            matches!(
                resources::resolve(&tx, query).await,
                Err(ResolveError::NotFound { .. })
            ),
            "{query} leaked across tenants"
        );
    }
    for table in ["agents", "resources", "resource_aliases", "metric_samples"] {
        let n: i64 = tx
            .client()
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await?
            .get(0);
        assert_eq!(n, 0, "{table} leaked");
    }
    tx.commit().await?;
    db.cleanup().await
}

/// A forgotten agent (`DELETE /api/agents/{id}`): its resources go through the one removal
/// path, it leaves the `agents` quota, the liveness sweep and the alert floor's scan, and a
/// report brings it back. An unknown agent is nothing to forget.
#[tokio::test]
async fn a_forgotten_agent_is_out_of_the_quota_the_sweep_and_the_scan_until_it_reports()
-> anyhow::Result<()> {
    use pulse_domain::tenant::Quota;
    use pulse_store::{alerts, quotas};

    let (db, tenant) = setup().await?;
    let store = db.store();
    let web = observed(ResourceType::Service, "web", "web", &[]);
    report(store, &tenant, "m1", std::slice::from_ref(&web)).await?;
    report(store, &tenant, "m2", std::slice::from_ref(&web)).await?;
    let usage = |tenant: TenantId| async move {
        let tx = store.tenant_tx(&tenant).await?;
        let used = quotas::usage(&tx, Quota::Agents).await?;
        tx.commit().await?;
        anyhow::Ok(used)
    };
    assert_eq!(usage(tenant.clone()).await?, Some(2));

    let tx = store.tenant_tx(&tenant).await?;
    assert_eq!(agents::forget(&tx, "m1").await?.as_deref(), Some("online"));
    let removed = resources::apply_report(&tx, "m1", Utc::now(), &[]).await?;
    assert!(agents::forget(&tx, "nobody").await?.is_none());
    tx.commit().await?;
    assert_eq!(removed.len(), 1);
    assert_eq!(removed[0].change, ResourceChange::Removed);
    assert_eq!(usage(tenant.clone()).await?, Some(1));
    // Silent forever, it is never swept offline nor evaluated again.
    let far = Utc::now() + Duration::days(1);
    let stale: Vec<String> = agents::stale(store, far, std::time::Duration::ZERO)
        .await?
        .into_iter()
        .map(|(_, a)| a)
        .collect();
    assert_eq!(stale, ["m2"]);
    let scanned: Vec<String> = alerts::pending(store, 100)
        .await?
        .into_iter()
        .map(|p| p.agent_id)
        .collect();
    assert!(!scanned.contains(&"m1".to_owned()), "{scanned:?}");

    // Its next report brings it back, online, with its resources.
    report(store, &tenant, "m1", std::slice::from_ref(&web)).await?;
    assert_eq!(usage(tenant.clone()).await?, Some(2));
    let tx = store.tenant_tx(&tenant).await?;
    assert_eq!(
        agents::get(&tx, "m1").await?.map(|a| a.status).as_deref(),
        Some("online")
    );
    tx.commit().await?;
    Ok(())
}

/// What a platform connector reports: a guest names its node as parent, a node the agent's
/// host; the new types are stored and read back.
#[tokio::test]
async fn a_resource_may_name_its_parent_in_its_own_report() -> anyhow::Result<()> {
    let (db, tenant) = setup().await?;
    let mut vm = observed(ResourceType::Vm, "100", "web", &["web"]);
    vm.parent = Some(pulse_domain::resource::ParentRef {
        resource_type: ResourceType::Node,
        source_id: "pve1".to_owned(),
    });
    let reported = [
        observed(ResourceType::Host, "pve.home", "home", &[]),
        observed(ResourceType::Node, "pve1", "pve1", &[]),
        vm,
        observed(
            ResourceType::PhysicalDisk,
            "pve1/dev/sda",
            "pve1:/dev/sda",
            &[],
        ),
        observed(ResourceType::SystemContainer, "200", "dns", &[]),
        {
            // A parent the report does not hold: the host stands in.
            let mut orphan = observed(ResourceType::Vm, "300", "lost", &[]);
            orphan.parent = Some(pulse_domain::resource::ParentRef {
                resource_type: ResourceType::Node,
                source_id: "pve9".to_owned(),
            });
            orphan
        },
    ];
    report(db.store(), &tenant, "pve.home", &reported).await?;
    let tx = db.store().tenant_tx(&tenant).await?;
    let listed = resources::list(&tx, None).await?;
    tx.rollback().await?;
    let parent_of = |id: &str| {
        listed
            .iter()
            .find(|r| r.id.as_str() == id)
            .map(|r| r.parent.as_ref().map(|p| p.as_str().to_owned()))
    };
    assert_eq!(
        parent_of("vm:pve.home:100"),
        Some(Some("node:pve.home:pve1".to_owned()))
    );
    assert_eq!(
        parent_of("node:pve.home:pve1"),
        Some(Some("host:pve.home".to_owned()))
    );
    assert_eq!(
        parent_of("physical-disk:pve.home:pve1/dev/sda"),
        Some(Some("host:pve.home".to_owned()))
    );
    assert_eq!(
        parent_of("system-container:pve.home:200"),
        Some(Some("host:pve.home".to_owned()))
    );
    assert_eq!(
        parent_of("vm:pve.home:300"),
        Some(Some("host:pve.home".to_owned()))
    );
    assert_eq!(parent_of("host:pve.home"), Some(None));
    db.cleanup().await
}

/// An agent that reports every 30 s (a cluster's connector) is offline only after three of its
/// intervals, even when the relay's own timeout is shorter; a fast agent after the timeout.
#[tokio::test]
async fn an_agent_is_offline_after_the_timeout_or_three_of_its_intervals_whichever_is_longer()
-> anyhow::Result<()> {
    let (db, tenant) = setup().await?;
    let store = db.store();
    report(store, &tenant, "fast", &[]).await?;
    let tx = store.tenant_tx(&tenant).await?;
    agents::connect(
        &tx,
        &AgentSession {
            id: "pve.lab".to_owned(),
            hostname: "lab".to_owned(),
            agent_version: "test".to_owned(),
            report_interval_ms: 30_000,
            token_id: None,
        },
    )
    .await?;
    tx.commit().await?;
    let timeout = std::time::Duration::from_secs(10);
    let stale_at = |seconds: i64| {
        let at = Utc::now() + Duration::seconds(seconds);
        async move {
            let mut ids: Vec<String> = agents::stale(store, at, timeout)
                .await?
                .into_iter()
                .map(|(_, id)| id)
                .collect();
            ids.sort();
            anyhow::Ok(ids)
        }
    };
    assert!(stale_at(5).await?.is_empty());
    assert_eq!(stale_at(20).await?, ["fast"]);
    assert_eq!(stale_at(80).await?, ["fast"]);
    assert_eq!(stale_at(100).await?, ["fast", "pve.lab"]);
    let tx = store.tenant_tx(&tenant).await?;
    let later = Utc::now() + Duration::seconds(80);
    assert!(!agents::mark_offline(&tx, "pve.lab", later, timeout).await?);
    assert!(agents::mark_offline(&tx, "fast", later, timeout).await?);
    tx.commit().await?;
    db.cleanup().await
}
