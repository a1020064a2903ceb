//! Resources: applying agent reports, listing, and the one resolver every caller uses to turn
//! a canonical id, source id, name or alias into exactly one resource.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use pulse_domain::resource::{
    Health, ObservedResource, Resource, ResourceChange, ResourceChanged, ResourceId,
    ResourceStatus, ResourceType,
};

use tokio_postgres::types::{Json, ToSql, Type};

use crate::{StoreError, TenantTx};

/// Why a reference did not resolve to exactly one resource.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("no resource matches {query:?}")]
    NotFound { query: String },
    #[error("{query:?} matches several resources: {}", candidates.iter().map(ResourceId::as_str).collect::<Vec<_>>().join(", "))]
    Ambiguous {
        query: String,
        candidates: Vec<ResourceId>,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<tokio_postgres::Error> for ResolveError {
    fn from(e: tokio_postgres::Error) -> Self {
        ResolveError::Store(StoreError::Database(e))
    }
}

const COLUMNS: &str = "r.id, r.resource_type, r.source_id, r.name, r.parent_id, r.agent_id, \
    r.status, r.health, r.restart_count, r.labels, r.details, r.observed_at, r.received_at, \
    COALESCE((SELECT array_agg(a.alias ORDER BY a.alias) FROM resource_aliases a \
              WHERE a.tenant_id = r.tenant_id AND a.resource_id = r.id), '{}')";

fn invalid(e: impl std::fmt::Display) -> StoreError {
    StoreError::Invalid(e.to_string())
}

fn from_row(row: &tokio_postgres::Row) -> Result<Resource, StoreError> {
    let labels: serde_json::Value = row.get(9);
    Ok(Resource {
        id: ResourceId::from_stored(row.get(0)),
        resource_type: row.get::<_, String>(1).parse().map_err(invalid)?,
        source_id: row.get(2),
        name: row.get(3),
        parent: row.get::<_, Option<String>>(4).map(ResourceId::from_stored),
        agent_id: row.get(5),
        status: row.get::<_, String>(6).parse().map_err(invalid)?,
        health: row.get::<_, String>(7).parse().map_err(invalid)?,
        restart_count: row
            .get::<_, Option<i32>>(8)
            .and_then(|n| u32::try_from(n).ok()),
        labels: serde_json::from_value(labels).map_err(invalid)?,
        details: row.get(10),
        observed_at: row.get(11),
        received_at: row.get(12),
        aliases: row.get(13),
    })
}

/// Every resource of the tenant, optionally of one type, ordered by id.
pub async fn list(
    tx: &TenantTx,
    resource_type: Option<ResourceType>,
) -> Result<Vec<Resource>, StoreError> {
    let rows = tx
        .client()
        .query(
            &format!(
                "SELECT {COLUMNS} FROM resources r
                 WHERE ($1::text IS NULL OR r.resource_type = $1) ORDER BY r.id"
            ),
            &[&resource_type.map(ResourceType::as_str)],
        )
        .await?;
    rows.iter().map(from_row).collect()
}

/// The resource with this canonical id.
pub async fn get(tx: &TenantTx, id: &str) -> Result<Option<Resource>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            &format!("SELECT {COLUMNS} FROM resources r WHERE r.id = $1"),
            &[&id],
        )
        .await?;
    row.as_ref().map(from_row).transpose()
}

/// Resolves a canonical id, source id, name or alias to exactly one resource. A canonical id
/// always wins; otherwise every resource whose source id, name or alias equals `query` is a
/// candidate, and more than one is [`ResolveError::Ambiguous`].
pub async fn resolve(tx: &TenantTx, query: &str) -> Result<Resource, ResolveError> {
    if let Some(resource) = get(tx, query).await? {
        return Ok(resource);
    }
    let rows = tx
        .client()
        .query(
            "SELECT id FROM resources WHERE source_id = $1 OR name = $1
             UNION
             SELECT resource_id FROM resource_aliases WHERE alias = $1
             ORDER BY 1 LIMIT 20",
            &[&query],
        )
        .await?;
    let mut ids: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
    match ids.len() {
        0 => Err(ResolveError::NotFound {
            query: query.to_owned(),
        }),
        1 => {
            let id = ids.remove(0);
            get(tx, &id).await?.ok_or(ResolveError::NotFound {
                query: query.to_owned(),
            })
        }
        _ => Err(ResolveError::Ambiguous {
            query: query.to_owned(),
            candidates: ids.into_iter().map(ResourceId::from_stored).collect(),
        }),
    }
}

const PREVIOUS_SQL: &str = "SELECT id, status, health FROM resources
    WHERE agent_id = ANY($1::text[]) ORDER BY id FOR UPDATE";

/// Every observed resource of every report in one statement: parallel arrays, one element per
/// resource. A NULL `details` element means "unchanged since the reporter last stored it": the
/// stored value is kept. (Stored details are never JSON `null`, see [`apply_reports`], so the
/// JSON `null` that stands in for a missing value on insert cannot be mistaken for one.)
const UPSERT_SQL: &str =
    "INSERT INTO resources (tenant_id, id, resource_type, source_id, name, parent_id, agent_id,
                           status, health, restart_count, labels, details, observed_at, received_at)
    SELECT $1, t.id, t.resource_type, t.source_id, t.name, t.parent_id, t.agent_id,
           t.status, t.health, t.restart_count, t.labels, COALESCE(t.details, 'null'::jsonb),
           t.observed_at, now()
    FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
                $9::text[], $10::int4[], $11::jsonb[], $12::jsonb[], $13::timestamptz[])
         AS t(id, agent_id, resource_type, source_id, name, parent_id, status, health,
              restart_count, labels, details, observed_at)
    ON CONFLICT (tenant_id, id) DO UPDATE SET
       resource_type = EXCLUDED.resource_type, source_id = EXCLUDED.source_id,
       name = EXCLUDED.name, parent_id = EXCLUDED.parent_id, agent_id = EXCLUDED.agent_id,
       status = EXCLUDED.status, health = EXCLUDED.health,
       restart_count = EXCLUDED.restart_count, labels = EXCLUDED.labels,
       details = CASE WHEN EXCLUDED.details = 'null'::jsonb THEN resources.details
                      ELSE EXCLUDED.details END,
       observed_at = EXCLUDED.observed_at, received_at = now()";

/// Sets the details of rows that were inserted although their details were left out (the
/// reporter believed them stored, but the row was gone).
const DETAILS_SQL: &str = "UPDATE resources r SET details = t.details
    FROM unnest($1::text[], $2::jsonb[]) AS t(id, details) WHERE r.id = t.id";

/// Makes the aliases of the reported resources exactly the reported ones: deletes only the
/// aliases no longer reported and inserts only the new ones, so an unchanged set writes nothing.
/// (`NOT IN` over the wanted pairs is a hashed subplan; none of the values is NULL.)
const ALIASES_SQL: &str = "WITH wanted AS (
        SELECT w.resource_id, w.alias FROM unnest($2::text[], $3::text[]) AS w(resource_id, alias)
    ), dropped AS (
        DELETE FROM resource_aliases x
        WHERE x.resource_id = ANY($4::text[])
          AND (x.resource_id, x.alias) NOT IN (SELECT w.resource_id, w.alias FROM wanted w)
    )
    INSERT INTO resource_aliases (tenant_id, resource_id, alias)
    SELECT $1, w.resource_id, w.alias FROM wanted w
    ON CONFLICT DO NOTHING";

/// `NOT IN (subquery)` is a hashed subplan: one probe per row of the agents, where
/// `NOT (id = ANY($2))` would compare each row with every reported id.
const REMOVE_SQL: &str = "DELETE FROM resources
    WHERE agent_id = ANY($1::text[]) AND id NOT IN (SELECT unnest($2::text[]))
    RETURNING id, agent_id, resource_type, status, health";

/// One full report of one agent, as [`apply_reports`] takes it.
#[derive(Debug, Clone, Copy)]
pub struct ReportRows<'a> {
    pub agent_id: &'a str,
    pub observed_at: DateTime<Utc>,
    pub resources: &'a [ObservedResource],
    /// Aligned with `resources` (or empty: nothing known): `true` where the resource's details
    /// are already stored exactly as reported, so they are not sent again. Decoding JSON into
    /// `jsonb` is a large part of what a report costs the server, and most details do not change
    /// between reports.
    pub details_stored: &'a [bool],
}

/// Applies a full report of agent `agent_id`: upserts every observed resource under its
/// canonical id, replaces its aliases, and deletes the agent's resources missing from the report.
/// Returns the changes worth announcing (created, removed, status or health changed).
pub async fn apply_report(
    tx: &TenantTx,
    agent_id: &str,
    observed_at: DateTime<Utc>,
    observed: &[ObservedResource],
) -> Result<Vec<ResourceChanged>, StoreError> {
    let report = ReportRows {
        agent_id,
        observed_at,
        resources: observed,
        details_stored: &[],
    };
    Ok(apply_reports(tx, &[report])
        .await?
        .pop()
        .unwrap_or_default())
}

/// Applies the full reports of several agents (each agent at most once; a repeated agent is an
/// [`StoreError::Invalid`]) as [`apply_report`] would apply each, with the same statements
/// over all of them: the work is four statements whatever the number and size of the reports
/// (previous state with row locks, upsert, alias sync, removal), sent pipelined: they run in
/// this order on the server without a round trip between them. Returns the changes per report,
/// in the order of `reports`.
pub async fn apply_reports(
    tx: &TenantTx,
    reports: &[ReportRows<'_>],
) -> Result<Vec<Vec<ResourceChanged>>, StoreError> {
    let now = Utc::now();
    let mut agents: Vec<&str> = Vec::with_capacity(reports.len());
    // Per report: the last observation of an id wins when a report repeats one.
    let mut currents: Vec<BTreeMap<ResourceId, (&ObservedResource, bool)>> =
        Vec::with_capacity(reports.len());
    for report in reports {
        if agents.contains(&report.agent_id) {
            return Err(invalid(format!(
                "agent {} appears twice in one batch of reports",
                report.agent_id
            )));
        }
        agents.push(report.agent_id);
        let mut current = BTreeMap::new();
        for (i, resource) in report.resources.iter().enumerate() {
            let id = ResourceId::of(resource.resource_type, report.agent_id, &resource.source_id);
            let stored = report.details_stored.get(i).copied().unwrap_or(false);
            current.insert(id, (resource, stored));
        }
        currents.push(current);
    }
    let hosts: Vec<ResourceId> = agents.iter().map(|a| ResourceId::host(a)).collect();
    // Stored details are never JSON `null`: the upsert uses it to mean "keep the stored value".
    let empty_details = serde_json::json!({});
    let n: usize = currents.iter().map(BTreeMap::len).sum();
    let mut ids: Vec<&str> = Vec::with_capacity(n);
    let mut owners: Vec<&str> = Vec::with_capacity(n);
    let mut types: Vec<&str> = Vec::with_capacity(n);
    let mut source_ids: Vec<&str> = Vec::with_capacity(n);
    let mut names: Vec<&str> = Vec::with_capacity(n);
    // A resource names its parent within its own report; without one, the agent's host.
    let named_parents: Vec<Option<String>> = currents
        .iter()
        .zip(reports)
        .flat_map(|(current, report)| {
            current.values().map(move |(resource, _)| {
                // A parent the report does not hold is no parent: the host stands in.
                resource
                    .parent
                    .as_ref()
                    .map(|p| ResourceId::of(p.resource_type, report.agent_id, &p.source_id))
                    .filter(|id| current.contains_key(id))
                    .map(|id| id.as_str().to_owned())
            })
        })
        .collect();
    let mut parents: Vec<Option<&str>> = Vec::with_capacity(n);
    let mut statuses: Vec<&str> = Vec::with_capacity(n);
    let mut healths: Vec<&str> = Vec::with_capacity(n);
    let mut restart_counts: Vec<Option<i32>> = Vec::with_capacity(n);
    let mut labels: Vec<Json<&BTreeMap<String, String>>> = Vec::with_capacity(n);
    let mut details: Vec<Option<Json<&serde_json::Value>>> = Vec::with_capacity(n);
    let mut observed_ats: Vec<DateTime<Utc>> = Vec::with_capacity(n);
    let mut alias_ids: Vec<&str> = Vec::new();
    let mut alias_values: Vec<&str> = Vec::new();
    for (k, current) in currents.iter().enumerate() {
        let report = &reports[k];
        for (id, (resource, stored)) in current {
            ids.push(id.as_str());
            owners.push(report.agent_id);
            types.push(resource.resource_type.as_str());
            source_ids.push(&resource.source_id);
            names.push(&resource.name);
            let named = named_parents[ids.len() - 1].as_deref();
            parents.push(named.or_else(|| {
                (resource.resource_type != ResourceType::Host).then(|| hosts[k].as_str())
            }));
            statuses.push(resource.status.as_str());
            healths.push(resource.health.as_str());
            restart_counts.push(
                resource
                    .restart_count
                    .map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
            );
            labels.push(Json(&resource.labels));
            details.push((!stored).then(|| Json(details_value(resource, &empty_details))));
            observed_ats.push(report.observed_at);
            let mut seen = std::collections::BTreeSet::new();
            for alias in resource.aliases.iter().filter(|a| !a.is_empty()) {
                if seen.insert(alias) {
                    alias_ids.push(id.as_str());
                    alias_values.push(alias);
                }
            }
        }
    }

    let client = tx.client();
    let tenant = tx.tenant().as_str();
    let upsert_sql = client.prepare_cached(UPSERT_SQL).await?;
    let upsert_params: [&(dyn ToSql + Sync); 13] = [
        &tenant,
        &ids,
        &owners,
        &types,
        &source_ids,
        &names,
        &parents,
        &statuses,
        &healths,
        &restart_counts,
        &labels,
        &details,
        &observed_ats,
    ];
    // The statements that scan `resources` or `resource_aliases` are sent typed and unnamed, so
    // each is planned for the table as it is now: a prepared statement keeps its generic plan,
    // and one chosen while the tables were nearly empty would scan them whole forever after.
    type Typed<'a> = (&'a (dyn ToSql + Sync), Type);
    let previous_params: [Typed<'_>; 1] = [(&agents, Type::TEXT_ARRAY)];
    let aliases_params: [Typed<'_>; 4] = [
        (&tenant, Type::TEXT),
        (&alias_ids, Type::TEXT_ARRAY),
        (&alias_values, Type::TEXT_ARRAY),
        (&ids, Type::TEXT_ARRAY),
    ];
    let remove_params: [Typed<'_>; 2] = [(&agents, Type::TEXT_ARRAY), (&ids, Type::TEXT_ARRAY)];
    // Polled in this order, so sent and executed in this order.
    let (previous, _, _, removed) = tokio::try_join!(
        client.query_typed(PREVIOUS_SQL, &previous_params),
        client.execute(&upsert_sql, &upsert_params),
        client.query_typed(ALIASES_SQL, &aliases_params),
        client.query_typed(REMOVE_SQL, &remove_params),
    )?;
    let previous: HashMap<String, (ResourceStatus, Health)> = previous
        .iter()
        .map(|row| {
            let status = row.get::<_, String>(1).parse().map_err(invalid)?;
            let health = row.get::<_, String>(2).parse().map_err(invalid)?;
            Ok((row.get::<_, String>(0), (status, health)))
        })
        .collect::<Result<_, StoreError>>()?;

    // A row whose details were left out but that did not exist (locked by the first statement)
    // was just inserted without them.
    let (mut missing_ids, mut missing_details) = (Vec::new(), Vec::new());
    let mut changes: Vec<Vec<ResourceChanged>> = Vec::with_capacity(reports.len());
    for current in &currents {
        let mut report_changes = Vec::new();
        for (id, (resource, stored)) in current {
            let change = match previous.get(id.as_str()) {
                None => Some((ResourceChange::Created, None)),
                Some(&(status, health))
                    if status != resource.status || health != resource.health =>
                {
                    Some((ResourceChange::Updated, Some((status, health))))
                }
                Some(_) => None,
            };
            if *stored && change.is_some_and(|(c, _)| c == ResourceChange::Created) {
                missing_ids.push(id.as_str());
                missing_details.push(Json(details_value(resource, &empty_details)));
            }
            if let Some((change, before)) = change {
                report_changes.push(ResourceChanged {
                    resource_id: id.clone(),
                    resource_type: resource.resource_type,
                    change,
                    status: resource.status,
                    health: resource.health,
                    previous_status: before.map(|(s, _)| s),
                    previous_health: before.map(|(_, h)| h),
                    at: now,
                });
            }
        }
        changes.push(report_changes);
    }
    if !missing_ids.is_empty() {
        let params: [Typed<'_>; 2] = [
            (&missing_ids, Type::TEXT_ARRAY),
            (&missing_details, Type::JSONB_ARRAY),
        ];
        client.query_typed(DETAILS_SQL, &params).await?;
    }
    for row in removed {
        let agent_id: String = row.get(1);
        let status: ResourceStatus = row.get::<_, String>(3).parse().map_err(invalid)?;
        let health: Health = row.get::<_, String>(4).parse().map_err(invalid)?;
        let change = ResourceChanged {
            resource_id: ResourceId::from_stored(row.get(0)),
            resource_type: row.get::<_, String>(2).parse().map_err(invalid)?,
            change: ResourceChange::Removed,
            status,
            health,
            previous_status: Some(status),
            previous_health: Some(health),
            at: now,
        };
        let k = agents
            .iter()
            .position(|a| *a == agent_id)
            .ok_or_else(|| invalid(format!("removed a resource of unexpected agent {agent_id}")))?;
        changes[k].push(change);
    }
    Ok(changes)
}

fn details_value<'a>(
    resource: &'a ObservedResource,
    empty: &'a serde_json::Value,
) -> &'a serde_json::Value {
    if resource.details.is_null() {
        empty
    } else {
        &resource.details
    }
}

/// Marks every resource of agent `agent_id` `unknown` (status and health): nobody can tell
/// their state while the agent is silent. Returns the changes.
pub async fn mark_agent_unknown(
    tx: &TenantTx,
    agent_id: &str,
) -> Result<Vec<ResourceChanged>, StoreError> {
    let now = Utc::now();
    let rows = tx
        .client()
        .query(
            "WITH before AS (
                SELECT id, status, health FROM resources
                WHERE agent_id = $1 AND (status <> 'unknown' OR health <> 'unknown')
                FOR UPDATE
             )
             UPDATE resources r SET status = 'unknown', health = 'unknown', received_at = now()
             FROM before b WHERE r.id = b.id AND r.agent_id = $1
             RETURNING r.id, r.resource_type, b.status, b.health",
            &[&agent_id],
        )
        .await?;
    rows.iter()
        .map(|row| {
            Ok(ResourceChanged {
                resource_id: ResourceId::from_stored(row.get(0)),
                resource_type: row.get::<_, String>(1).parse().map_err(invalid)?,
                change: ResourceChange::Updated,
                status: ResourceStatus::Unknown,
                health: Health::Unknown,
                previous_status: Some(row.get::<_, String>(2).parse().map_err(invalid)?),
                previous_health: Some(row.get::<_, String>(3).parse().map_err(invalid)?),
                at: now,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use pulse_domain::TenantId;
    use pulse_test_support::db::TestDb;

    use chrono::DurationRound as _;

    use super::*;
    use crate::agents::{self, AgentSession};
    use crate::{Store, tenants};

    fn observed(
        kind: ResourceType,
        source: &str,
        name: &str,
        aliases: &[&str],
    ) -> ObservedResource {
        ObservedResource {
            resource_type: kind,
            source_id: source.to_owned(),
            name: name.to_owned(),
            aliases: aliases.iter().map(|a| (*a).to_owned()).collect(),
            status: ResourceStatus::Running,
            health: Health::Healthy,
            restart_count: Some(1),
            labels: [("team".to_owned(), "ops".to_owned())].into(),
            details: serde_json::Value::Null,
            metrics: BTreeMap::new(),
            parent: None,
        }
    }

    async fn apply(
        store: &Store,
        tenant: &TenantId,
        at: DateTime<Utc>,
        observed: &[ObservedResource],
    ) -> anyhow::Result<Vec<ResourceChanged>> {
        let tx = store.tenant_tx(tenant).await?;
        agents::connect(
            &tx,
            &AgentSession {
                id: "m1".to_owned(),
                hostname: "m1.lan".to_owned(),
                agent_version: "test".to_owned(),
                report_interval_ms: 1000,
                token_id: None,
            },
        )
        .await?;
        let changes = apply_report(&tx, "m1", at, observed).await?;
        tx.commit().await?;
        Ok(changes)
    }

    async fn current(store: &Store, tenant: &TenantId) -> anyhow::Result<Vec<Resource>> {
        let tx = store.tenant_tx(tenant).await?;
        let all = list(&tx, None).await?;
        tx.commit().await?;
        Ok(all)
    }

    /// The set-based report: aliases end up exactly as reported (added, kept, dropped), a
    /// repeated id keeps its last observation, unchanged rows still get fresh timestamps, and
    /// an empty report removes everything of the agent.
    #[tokio::test]
    async fn report_is_applied_exactly_and_keeps_rows_fresh() -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let store = Store::connect_app(&db.database_config()).await?;
        let tenant = TenantId::new("acme")?;
        tenants::create(&store, &tenant, "Acme").await?;

        // Postgres keeps microseconds.
        let t1 = (Utc::now() - chrono::Duration::seconds(30))
            .duration_trunc(chrono::Duration::microseconds(1))?;
        let host = observed(
            ResourceType::Host,
            "m1",
            "box",
            &["box.lan", "10.0.0.1", "box.lan"],
        );
        let first = apply(
            &store,
            &tenant,
            t1,
            &[
                host.clone(),
                observed(ResourceType::Service, "web", "old-name", &["front"]),
                observed(ResourceType::Service, "web", "web", &["frontend", ""]),
                observed(ResourceType::Storage, "/var", "/var", &[]),
            ],
        )
        .await?;
        assert_eq!(first.len(), 3, "{first:?}");
        assert!(first.iter().all(|c| c.change == ResourceChange::Created));
        let rows = current(&store, &tenant).await?;
        let by_id =
            |rows: &[Resource], id: &str| rows.iter().find(|r| r.id.as_str() == id).cloned();
        let web = by_id(&rows, "service:m1:web").expect("web stored");
        assert_eq!(web.name, "web");
        assert_eq!(web.aliases, vec!["frontend".to_owned()]);
        assert_eq!(web.parent, Some(ResourceId::host("m1")));
        assert_eq!(web.restart_count, Some(1));
        assert_eq!(web.labels.get("team").map(String::as_str), Some("ops"));
        assert_eq!(web.details, serde_json::json!({}));
        let stored_host = by_id(&rows, "host:m1").expect("host stored");
        assert_eq!(
            stored_host.aliases,
            vec!["10.0.0.1".to_owned(), "box.lan".to_owned()]
        );
        assert_eq!(stored_host.parent, None);

        // Same state, aliases partly changed: nothing to announce, aliases exact, times fresh.
        let t2 = t1 + chrono::Duration::seconds(10);
        let mut host2 = host.clone();
        host2.aliases = vec!["box.lan".to_owned(), "box.example.net".to_owned()];
        let second = apply(
            &store,
            &tenant,
            t2,
            &[
                host2,
                observed(ResourceType::Service, "web", "web", &[]),
                observed(ResourceType::Storage, "/var", "/var", &[]),
            ],
        )
        .await?;
        assert!(second.is_empty(), "{second:?}");
        let rows2 = current(&store, &tenant).await?;
        let host_after = by_id(&rows2, "host:m1").expect("host kept");
        assert_eq!(
            host_after.aliases,
            vec!["box.example.net".to_owned(), "box.lan".to_owned()]
        );
        assert!(
            by_id(&rows2, "service:m1:web")
                .expect("web kept")
                .aliases
                .is_empty()
        );
        for row in &rows2 {
            assert_eq!(row.observed_at, t2, "{}", row.id.as_str());
            let before = by_id(&rows, row.id.as_str()).expect("row existed");
            assert!(row.received_at > before.received_at, "{}", row.id.as_str());
        }

        // An empty report removes everything of the agent, aliases included.
        let third = apply(&store, &tenant, t2 + chrono::Duration::seconds(10), &[]).await?;
        assert_eq!(third.len(), 3);
        assert!(third.iter().all(|c| c.change == ResourceChange::Removed
            && c.previous_status == Some(ResourceStatus::Running)));
        assert!(current(&store, &tenant).await?.is_empty());
        let owner = db.owner_client().await?;
        let aliases: i64 = owner
            .query_one("SELECT count(*) FROM resource_aliases", &[])
            .await?
            .get(0);
        assert_eq!(aliases, 0);
        store.pool().close();
        db.cleanup().await
    }

    /// Several agents' reports in one call: changes per report, details left out when the
    /// reporter says they are stored (and still written when the row turned out to be gone),
    /// and an agent at most once.
    #[tokio::test]
    async fn reports_of_several_agents_apply_together() -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let store = Store::connect_app(&db.database_config()).await?;
        let tenant = TenantId::new("acme")?;
        tenants::create(&store, &tenant, "Acme").await?;
        let t1 = (Utc::now() - chrono::Duration::seconds(30))
            .duration_trunc(chrono::Duration::microseconds(1))?;
        let with_details = |source: &str, details: serde_json::Value| ObservedResource {
            details,
            ..observed(ResourceType::Service, source, source, &[])
        };
        let m1 = vec![
            observed(ResourceType::Host, "m1", "m1", &["m1.lan"]),
            with_details("web", serde_json::json!({"pid": 1})),
        ];
        let m2 = vec![
            observed(ResourceType::Host, "m2", "m2", &["m2.lan"]),
            with_details("db", serde_json::json!({"pid": 2})),
        ];
        let tx = store.tenant_tx(&tenant).await?;
        for id in ["m1", "m2"] {
            agents::connect(
                &tx,
                &AgentSession {
                    id: id.to_owned(),
                    hostname: id.to_owned(),
                    agent_version: "test".to_owned(),
                    report_interval_ms: 1000,
                    token_id: None,
                },
            )
            .await?;
        }
        let rows = |agent_id, resources, details_stored| ReportRows {
            agent_id,
            observed_at: t1,
            resources,
            details_stored,
        };
        let first = apply_reports(&tx, &[rows("m1", &m1, &[]), rows("m2", &m2, &[])]).await?;
        tx.commit().await?;
        assert_eq!(first.len(), 2);
        assert!(
            first
                .iter()
                .all(|c| c.len() == 2 && c.iter().all(|c| c.change == ResourceChange::Created))
        );
        assert!(
            first[1]
                .iter()
                .all(|c| c.resource_id.as_str().contains("m2"))
        );

        // m1 says its details are stored: a changed value is not written. m2 drops its service
        // and turns its host unhealthy.
        let t2 = t1 + chrono::Duration::seconds(10);
        let mut m1_next = m1.clone();
        m1_next[1].details = serde_json::json!({"pid": 99});
        let mut m2_next = m2[..1].to_vec();
        m2_next[0].health = Health::Unhealthy;
        let tx = store.tenant_tx(&tenant).await?;
        let second = apply_reports(
            &tx,
            &[
                ReportRows {
                    observed_at: t2,
                    ..rows("m1", &m1_next, &[true, true])
                },
                ReportRows {
                    observed_at: t2,
                    ..rows("m2", &m2_next, &[])
                },
            ],
        )
        .await?;
        tx.commit().await?;
        assert!(second[0].is_empty(), "{:?}", second[0]);
        let mut m2_changes: Vec<_> = second[1]
            .iter()
            .map(|c| (c.resource_id.as_str().to_owned(), c.change))
            .collect();
        m2_changes.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            m2_changes,
            vec![
                ("host:m2".to_owned(), ResourceChange::Updated),
                ("service:m2:db".to_owned(), ResourceChange::Removed),
            ]
        );
        let all = current(&store, &tenant).await?;
        let web = all
            .iter()
            .find(|r| r.id.as_str() == "service:m1:web")
            .expect("web kept");
        assert_eq!(web.details, serde_json::json!({"pid": 1}));
        assert_eq!(web.observed_at, t2);
        let host = all
            .iter()
            .find(|r| r.id.as_str() == "host:m1")
            .expect("host kept");
        assert_eq!(host.details, serde_json::json!({}));

        // The row is gone although the reporter believes its details stored: they are written.
        let owner = db.owner_client().await?;
        owner
            .execute("DELETE FROM resources WHERE id = 'service:m1:web'", &[])
            .await?;
        let tx = store.tenant_tx(&tenant).await?;
        let third = apply_reports(&tx, &[rows("m1", &m1_next, &[true, true])]).await?;
        tx.commit().await?;
        assert_eq!(third[0].len(), 1);
        assert_eq!(third[0][0].change, ResourceChange::Created);
        let web = get(&store.tenant_tx(&tenant).await?, "service:m1:web")
            .await?
            .expect("web back");
        assert_eq!(web.details, serde_json::json!({"pid": 99}));

        let tx = store.tenant_tx(&tenant).await?;
        let twice = apply_reports(&tx, &[rows("m1", &m1, &[]), rows("m1", &m1, &[])]).await;
        assert!(matches!(twice, Err(StoreError::Invalid(_))), "{twice:?}");
        drop(tx);
        store.pool().close();
        db.cleanup().await
    }
}
