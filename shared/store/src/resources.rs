//! Resources: applying agent reports, listing, and the one resolver every caller uses to turn
//! a canonical id, source id, name or alias into exactly one resource.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use pulse_domain::resource::{
    Health, ObservedResource, Resource, ResourceChange, ResourceChanged, ResourceId,
    ResourceStatus, ResourceType,
};

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

/// Applies a full report of agent `agent_id`: upserts every observed resource under its
/// canonical id, replaces its aliases, and deletes the agent's resources missing from the report.
/// Returns the changes worth announcing (created, removed, status or health changed).
pub async fn apply_report(
    tx: &TenantTx,
    agent_id: &str,
    observed_at: DateTime<Utc>,
    observed: &[ObservedResource],
) -> Result<Vec<ResourceChanged>, StoreError> {
    let now = Utc::now();
    let previous: HashMap<String, (ResourceStatus, Health)> = tx
        .client()
        .query(
            "SELECT id, status, health FROM resources WHERE agent_id = $1 FOR UPDATE",
            &[&agent_id],
        )
        .await?
        .iter()
        .map(|row| {
            let status = row.get::<_, String>(1).parse().map_err(invalid)?;
            let health = row.get::<_, String>(2).parse().map_err(invalid)?;
            Ok((row.get::<_, String>(0), (status, health)))
        })
        .collect::<Result<_, StoreError>>()?;
    // The last observation of an id wins when a report repeats one.
    let mut current: BTreeMap<ResourceId, &ObservedResource> = BTreeMap::new();
    for resource in observed {
        let id = ResourceId::of(resource.resource_type, agent_id, &resource.source_id);
        current.insert(id, resource);
    }
    let host = ResourceId::host(agent_id);
    let upsert = tx
        .client()
        .prepare_cached(
            "INSERT INTO resources (tenant_id, id, resource_type, source_id, name, parent_id, agent_id,
                                    status, health, restart_count, labels, details, observed_at, received_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, now())
             ON CONFLICT (tenant_id, id) DO UPDATE SET
                resource_type = EXCLUDED.resource_type, source_id = EXCLUDED.source_id,
                name = EXCLUDED.name, parent_id = EXCLUDED.parent_id, agent_id = EXCLUDED.agent_id,
                status = EXCLUDED.status, health = EXCLUDED.health,
                restart_count = EXCLUDED.restart_count, labels = EXCLUDED.labels,
                details = EXCLUDED.details, observed_at = EXCLUDED.observed_at,
                received_at = now()",
        )
        .await?;
    let mut changes = Vec::new();
    let mut alias_ids = Vec::new();
    let mut alias_values = Vec::new();
    for (id, resource) in &current {
        let parent = (resource.resource_type != ResourceType::Host).then(|| host.as_str());
        let labels = serde_json::to_value(&resource.labels).map_err(invalid)?;
        let details = if resource.details.is_null() {
            serde_json::json!({})
        } else {
            resource.details.clone()
        };
        let restart_count = resource
            .restart_count
            .map(|n| i32::try_from(n).unwrap_or(i32::MAX));
        tx.client()
            .execute(
                &upsert,
                &[
                    &tx.tenant().as_str(),
                    &id.as_str(),
                    &resource.resource_type.as_str(),
                    &resource.source_id,
                    &resource.name,
                    &parent,
                    &agent_id,
                    &resource.status.as_str(),
                    &resource.health.as_str(),
                    &restart_count,
                    &labels,
                    &details,
                    &observed_at,
                ],
            )
            .await?;
        let mut seen = std::collections::BTreeSet::new();
        for alias in resource.aliases.iter().filter(|a| !a.is_empty()) {
            if seen.insert(alias) {
                alias_ids.push(id.as_str().to_owned());
                alias_values.push(alias.clone());
            }
        }
        let change = match previous.get(id.as_str()) {
            None => Some((ResourceChange::Created, None)),
            Some(&(status, health)) if status != resource.status || health != resource.health => {
                Some((ResourceChange::Updated, Some((status, health))))
            }
            Some(_) => None,
        };
        if let Some((change, before)) = change {
            changes.push(ResourceChanged {
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
    let ids: Vec<&str> = current.keys().map(ResourceId::as_str).collect();
    tx.client()
        .execute(
            "DELETE FROM resource_aliases WHERE resource_id = ANY($1)",
            &[&ids],
        )
        .await?;
    if !alias_ids.is_empty() {
        tx.client()
            .execute(
                "INSERT INTO resource_aliases (tenant_id, resource_id, alias)
                 SELECT $1, r, a FROM unnest($2::text[], $3::text[]) AS t(r, a)
                 ON CONFLICT DO NOTHING",
                &[&tx.tenant().as_str(), &alias_ids, &alias_values],
            )
            .await?;
    }
    let removed = tx
        .client()
        .query(
            "DELETE FROM resources WHERE agent_id = $1 AND NOT (id = ANY($2))
             RETURNING id, resource_type, status, health",
            &[&agent_id, &ids],
        )
        .await?;
    for row in removed {
        let status: ResourceStatus = row.get::<_, String>(2).parse().map_err(invalid)?;
        let health: Health = row.get::<_, String>(3).parse().map_err(invalid)?;
        changes.push(ResourceChanged {
            resource_id: ResourceId::from_stored(row.get(0)),
            resource_type: row.get::<_, String>(1).parse().map_err(invalid)?,
            change: ResourceChange::Removed,
            status,
            health,
            previous_status: Some(status),
            previous_health: Some(health),
            at: now,
        });
    }
    Ok(changes)
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
