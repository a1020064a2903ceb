//! Metric history: samples per resource and metric, inserted in batches.

use chrono::{DateTime, Utc};
use pulse_domain::resource::ResourceId;

use crate::{StoreError, TenantTx};

/// Rows per insert statement (the samples of many reports when the relay stores them together).
const BATCH: usize = 10_000;

/// One statement per batch: parallel arrays, one element per sample.
const INSERT_SQL: &str = "INSERT INTO metric_samples (tenant_id, resource_id, metric, at, value)
    SELECT $1, r, m, t, v
    FROM unnest($2::text[], $3::text[], $4::timestamptz[], $5::float8[]) AS s(r, m, t, v)";

#[derive(Debug, Clone, PartialEq)]
pub struct MetricSample {
    pub resource_id: ResourceId,
    pub metric: String,
    pub at: DateTime<Utc>,
    pub value: f64,
}

/// Inserts `samples` (non-finite values are skipped). Returns how many were stored.
pub async fn insert(tx: &TenantTx, samples: &[MetricSample]) -> Result<usize, StoreError> {
    if samples.is_empty() {
        return Ok(0);
    }
    let statement = tx.client().prepare_cached(INSERT_SQL).await?;
    let mut stored = 0;
    for chunk in samples.chunks(BATCH) {
        let finite: Vec<&MetricSample> = chunk.iter().filter(|s| s.value.is_finite()).collect();
        if finite.is_empty() {
            continue;
        }
        let ids: Vec<&str> = finite.iter().map(|s| s.resource_id.as_str()).collect();
        let metrics: Vec<&str> = finite.iter().map(|s| s.metric.as_str()).collect();
        let ats: Vec<DateTime<Utc>> = finite.iter().map(|s| s.at).collect();
        let values: Vec<f64> = finite.iter().map(|s| s.value).collect();
        let n = tx
            .client()
            .execute(
                &statement,
                &[&tx.tenant().as_str(), &ids, &metrics, &ats, &values],
            )
            .await?;
        stored += usize::try_from(n).unwrap_or(usize::MAX);
    }
    Ok(stored)
}

/// The newest `limit` samples of one metric of one resource since `since`, oldest first.
pub async fn history(
    tx: &TenantTx,
    resource_id: &ResourceId,
    metric: &str,
    since: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<(DateTime<Utc>, f64)>, StoreError> {
    let rows = tx
        .client()
        .query(
            "SELECT at, value FROM (
                SELECT at, value FROM metric_samples
                WHERE resource_id = $1 AND metric = $2 AND at >= $3
                ORDER BY at DESC LIMIT $4
             ) newest ORDER BY at",
            &[&resource_id.as_str(), &metric, &since, &limit],
        )
        .await?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// The newest sample of each of `metrics` for each of `resource_ids`, as
/// `(resource id, metric) -> (at, value)`, in one statement (one index probe per pair).
pub async fn latest(
    tx: &TenantTx,
    resource_ids: &[&str],
    metrics: &[&str],
) -> Result<std::collections::HashMap<(String, String), (DateTime<Utc>, f64)>, StoreError> {
    if resource_ids.is_empty() || metrics.is_empty() {
        return Ok(std::collections::HashMap::new());
    }
    let rows = tx
        .client()
        .query(
            "SELECT r.id, m.metric, s.at, s.value
             FROM unnest($1::text[]) AS r(id)
             CROSS JOIN unnest($2::text[]) AS m(metric)
             CROSS JOIN LATERAL (
                SELECT at, value FROM metric_samples
                WHERE resource_id = r.id AND metric = m.metric
                ORDER BY at DESC LIMIT 1
             ) s",
            &[&resource_ids, &metrics],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| ((row.get(0), row.get(1)), (row.get(2), row.get(3))))
        .collect())
}
