//! `pulse_storage`: storage and disk health of the run's resources, read from the inventory the
//! agents and connectors reported (never a live call to the platform), with the firing alerts of
//! each row as its evidence and, for pools, the forecast to full.
//!
//! - `pools`: storage of every kind in scope: a Proxmox VE storage, a ZFS pool, a host's
//!   filesystem; filters `resource_id`/`storage_id`, `node`/`host` (the parent's name or id) and
//!   `min_usage` (percent used).
//! - `disk_health`: physical disks with their SMART result and wearout; filters as above.
//! - `resource_disks`: the storage and disks under one node or host (`resource_id`).
//! - `backups`: each Proxmox VE guest's backup evidence, from the cluster's recent tasks: its
//!   latest finished backup task (ok, exit status, start, end), when its latest successful one
//!   ended and how many hours ago; filters `resource_id`/`guest_id`/`vm_id` (a VMID) and `node`.
//!   A guest with no backup task in sight says so (`last_backup: null`), which is not "never
//!   backed up": the cluster lists recent tasks only.
//!
//!   With a Proxmox Backup Server connection, `backups` also lists each datastore's backup
//!   groups (every namespace): the newest snapshot, its age, the count and whether the newest
//!   was verified; `vm_id` matches a group's backup id.
//! - `pbs_jobs`: the garbage collection, verify, prune and sync jobs of each Proxmox Backup
//!   Server datastore with how their last run ended and when the next runs; filters `job_type`
//!   and `state` (`failed`, `ok`). A datastore is also a `pools` row (usage, forecast, PBS's own
//!   full estimate, failed jobs, groups whose newest snapshot failed verification).
//!
//! - `ceph` (and `ceph_details`, the same rows): each cluster's Ceph, when it stores on Ceph:
//!   its health word and failing checks, OSDs up and in, placement groups by state, monitors in
//!   quorum, raw usage and forecast; `unreachable` when Ceph did not answer the cluster.
//!
//! - `replication`: each guest's storage replication jobs (target node, last sync, failures and
//!   the error); filters `vm_id` and `state` (`failed`, `ok`).
//!
//! Backup tasks of other kinds, snapshots and RAID are not read by Pulse
//! yet: those types answer an error that says so, never an empty list that would read as
//! "none".

use std::collections::BTreeMap;

use chrono::{Duration, Utc};
use pulse_domain::forecast::{self, MetricSample};
use pulse_domain::resource::{Resource, ResourceType};
use pulse_store::{alerts, metrics};
use serde_json::{Value, json};

use super::{ToolContext, count_arg, json_result, text_arg};
use pulse_agent_loop::provider::{ToolCall, ToolResult};

/// The types this handler serves, in the order its errors name them.
pub const SERVED: &[&str] = &[
    "pools",
    "disk_health",
    "resource_disks",
    "backups",
    "pbs_jobs",
    "ceph",
    "ceph_details",
    "replication",
];
/// Rows answered at most, and by default.
const MAX_ROWS: usize = 100;
const DEFAULT_ROWS: usize = 50;
/// History behind a pool's forecast.
const FORECAST_PERIOD_DAYS: i64 = 7;
const FORECAST_SAMPLES: i64 = 500;
/// The newest reading of each of these is part of a row.
const ROW_METRICS: &[&str] = &[
    "used_percent",
    "inodes_percent",
    "total_bytes",
    "used_bytes",
    "available_bytes",
    "fragmentation_percent",
    "wearout_remaining_percent",
];

pub async fn call(ctx: &ToolContext, call: &ToolCall) -> ToolResult {
    let arguments = &call.arguments;
    let kind = match text_arg(arguments, "type") {
        Some(kind) if SERVED.contains(&kind) => kind,
        Some(other) => {
            return ToolResult::error(
                &call.id,
                format!(
                    "storage type {} is not read by Pulse yet; use one of: {}",
                    pulse_domain::resource::truncate_chars(other, 32),
                    SERVED.join(", ")
                ),
            );
        }
        None => {
            return ToolResult::error(
                &call.id,
                format!("type is required: one of {}", SERVED.join(", ")),
            );
        }
    };
    let named = text_arg(arguments, "resource_id")
        .or_else(|| text_arg(arguments, "storage_id"))
        .or_else(|| text_arg(arguments, "guest_id"));
    // A VMID names a guest by its source id (`100`), whatever its cluster.
    let vmid = text_arg(arguments, "vm_id");
    let under = match kind {
        "resource_disks" => {
            let Some(id) = named else {
                return ToolResult::error(
                    &call.id,
                    "resource_id is required: the node or host whose storage and disks to list",
                );
            };
            match ctx.in_scope(id) {
                Some(parent) => Some(parent.id.as_str().to_owned()),
                None => return ToolResult::error(&call.id, ctx.unknown_resource(id)),
            }
        }
        _ => None,
    };
    if let (Some(id), None) = (named, &under)
        && ctx.in_scope(id).is_none()
    {
        return ToolResult::error(&call.id, ctx.unknown_resource(id));
    }
    let node = text_arg(arguments, "node").or_else(|| text_arg(arguments, "host"));
    let min_usage = arguments.get("min_usage").and_then(Value::as_f64);
    let limit = count_arg(arguments, "limit", DEFAULT_ROWS, MAX_ROWS);

    let wanted = |r: &Resource| match kind {
        "pools" => r.resource_type == ResourceType::Storage,
        "disk_health" => r.resource_type == ResourceType::PhysicalDisk,
        "backups" => {
            is_datastore(r)
                || matches!(
                    r.resource_type,
                    ResourceType::Vm | ResourceType::SystemContainer
                ) && r.details["platform"] == "proxmox-ve"
                    && r.details["template"] != json!(true)
                    && vmid.is_none_or(|v| r.source_id == v)
        }
        "pbs_jobs" => is_datastore(r),
        "replication" => {
            r.details["replication"].is_array() && vmid.is_none_or(|v| r.source_id == v)
        }
        "ceph" | "ceph_details" => {
            r.resource_type == ResourceType::Storage && r.details["kind"] == "ceph"
        }
        _ => matches!(
            r.resource_type,
            ResourceType::Storage | ResourceType::PhysicalDisk
        ),
    };
    let parent_of = |r: &Resource| -> Option<&Resource> {
        r.parent.as_ref().and_then(|p| ctx.in_scope(p.as_str()))
    };
    let rows: Vec<&Resource> = ctx
        .scope
        .iter()
        .filter(|r| wanted(r))
        .filter(|r| under.is_some() || named.is_none_or(|id| r.id.as_str() == id))
        .filter(|r| {
            under
                .as_deref()
                .is_none_or(|parent| r.parent.as_ref().is_some_and(|p| p.as_str() == parent))
        })
        .filter(|r| {
            node.is_none_or(|node| {
                parent_of(r).is_some_and(|p| p.name == node || p.id.as_str() == node)
                    || r.details["node"].as_str() == Some(node)
            })
        })
        .collect();

    let tx = match ctx.store.tenant_tx(&ctx.tenant).await {
        Ok(tx) => tx,
        Err(error) => {
            tracing::warn!(%error, "storage read failed");
            return ToolResult::error(&call.id, "storage is unavailable right now");
        }
    };
    let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    let latest = match metrics::latest(&tx, &ids, ROW_METRICS).await {
        Ok(latest) => latest,
        Err(error) => {
            tracing::warn!(%error, "storage metrics read failed");
            return ToolResult::error(&call.id, "storage is unavailable right now");
        }
    };
    let reading = |r: &Resource, metric: &str| {
        latest
            .get(&(r.id.as_str().to_owned(), metric.to_owned()))
            .map(|(_, v)| *v)
    };
    let rows: Vec<&Resource> = rows
        .into_iter()
        .filter(|r| {
            min_usage.is_none_or(|min| reading(r, "used_percent").is_some_and(|used| used >= min))
        })
        .collect();
    let firing = match alerts::list(
        &tx,
        &alerts::AlertFilter {
            state: alerts::StateFilter::Firing,
            resource_id: None,
            limit: alerts::MAX_LIST_LIMIT,
        },
    )
    .await
    {
        Ok(list) => list,
        Err(error) => {
            tracing::warn!(%error, "alerts read failed");
            return ToolResult::error(&call.id, "storage is unavailable right now");
        }
    };
    let mut alerts_of: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for alert in &firing {
        alerts_of
            .entry(alert.resource_id.as_str())
            .or_default()
            .push(
                json!({"type": alert.rule.as_str(), "level": alert.level.as_str(),
                         "message": alert.message}),
            );
    }
    let since = Utc::now() - Duration::days(FORECAST_PERIOD_DAYS);
    let job_type = text_arg(arguments, "job_type");
    let state = text_arg(arguments, "state").or_else(|| text_arg(arguments, "status"));
    let mut answered = Vec::new();
    let mut total = 0;
    for r in rows {
        let alerts = json!(alerts_of.get(r.id.as_str()).cloned().unwrap_or_default());
        let expanded = match kind {
            "pbs_jobs" => Some(job_rows(r, job_type, state)),
            "replication" => Some(replication_rows(r, state)),
            "backups" if is_datastore(r) => Some(group_rows(r, vmid, Utc::now())),
            _ => None,
        };
        if let Some(expanded) = expanded {
            total += expanded.len();
            for mut row in expanded {
                if answered.len() < limit {
                    row["alerts"] = alerts.clone();
                    answered.push(row);
                }
            }
            continue;
        }
        total += 1;
        if answered.len() >= limit {
            continue;
        }
        if kind == "backups" {
            let mut row = backup_row(r, parent_of(r), Utc::now());
            row["alerts"] = alerts;
            answered.push(row);
            continue;
        }
        let mut row = row(r, parent_of(r));
        let readings: serde_json::Map<String, Value> = ROW_METRICS
            .iter()
            .filter_map(|m| reading(r, m).map(|v| ((*m).to_owned(), json!(v))))
            .collect();
        row["metrics"] = Value::Object(readings);
        row["alerts"] = alerts;
        if r.resource_type == ResourceType::Storage {
            match metrics::history(&tx, &r.id, "used_percent", since, FORECAST_SAMPLES).await {
                Ok(samples) if !samples.is_empty() => {
                    let points: Vec<MetricSample> = samples
                        .iter()
                        .map(|(at, v)| MetricSample::new(*at, *v))
                        .collect();
                    row["forecast"] = json!(forecast::forecast_capacity("used_percent", &points));
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, "storage history read failed");
                    return ToolResult::error(&call.id, "storage is unavailable right now");
                }
            }
        }
        answered.push(row);
    }
    let _ = tx.rollback().await;
    json_result(
        call,
        &json!({
            "type": kind,
            "total": total,
            "rows": answered,
            "note": if total == 0 {
                match kind {
                    "backups" => "no matching Proxmox VE guest or Proxmox Backup Server backup group in this run's scope",
                    "pbs_jobs" => "no matching job of a Proxmox Backup Server datastore in this run's scope",
                    "ceph" | "ceph_details" => "no Proxmox VE cluster in this run's scope stores on Ceph",
                    "replication" => "no matching storage replication job of a Proxmox VE guest in this run's scope",
                    _ => "no matching storage or disk in this run's scope",
                }
            } else {
                ""
            },
        }),
    )
}

/// A guest's storage replication jobs as the connector read them from its node, filtered by
/// `state` (`failed` or `ok`).
fn replication_rows(r: &Resource, state: Option<&str>) -> Vec<Value> {
    r.details["replication"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|j| match state {
            Some("failed" | "error") => j["ok"] == json!(false),
            Some("ok") => j["ok"] == json!(true),
            _ => true,
        })
        .map(|j| {
            let mut row = j.clone();
            row["guest"] = json!({"id": r.id.as_str(), "name": r.name, "vmid": r.source_id});
            row
        })
        .collect()
}

/// A Proxmox Backup Server datastore (`pulse_proxmox::pbs`).
fn is_datastore(r: &Resource) -> bool {
    r.resource_type == ResourceType::Storage && r.details["kind"] == "pbs-datastore"
}

fn datastore_ref(r: &Resource) -> Value {
    json!({"id": r.id.as_str(), "name": r.name})
}

/// A datastore's GC, verify, prune and sync jobs as the connector read them, filtered by
/// `job_type` (`garbage`, `verify`, `prune`, `sync`; `backup` jobs are Proxmox VE's and none are
/// here) and `state` (`failed` or `ok`).
fn job_rows(r: &Resource, job_type: Option<&str>, state: Option<&str>) -> Vec<Value> {
    let Some(jobs) = r.details["jobs"].as_array() else {
        return vec![json!({
            "datastore": datastore_ref(r),
            "error": r.details["jobs_error"].as_str().unwrap_or("the job lists were not read"),
        })];
    };
    jobs.iter()
        .filter(|j| job_type.is_none_or(|t| j["type"] == t))
        .filter(|j| match state {
            Some("failed" | "error") => j["last_run_ok"] == json!(false),
            Some("ok") => j["last_run_ok"] == json!(true),
            _ => true,
        })
        .map(|j| {
            let mut row = j.clone();
            row["datastore"] = datastore_ref(r);
            row
        })
        .collect()
}

/// A datastore's backup groups (every namespace): each group's newest snapshot, its age, how
/// many it holds and whether the newest was verified; `vm_id` matches a group's backup id.
fn group_rows(r: &Resource, vmid: Option<&str>, now: chrono::DateTime<Utc>) -> Vec<Value> {
    let Some(groups) = r.details["backup_groups"].as_array() else {
        return vec![json!({
            "source": "proxmox-backup",
            "datastore": datastore_ref(r),
            "error": r.details["backup_groups_error"].as_str().unwrap_or("the backup groups were not read"),
        })];
    };
    groups
        .iter()
        .filter(|g| vmid.is_none_or(|v| g["backup_id"] == v))
        .map(|g| {
            let last = g["last_backup_at"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.to_utc());
            json!({
                "source": "proxmox-backup",
                "datastore": datastore_ref(r),
                "group": g["group"],
                "namespace": g["namespace"],
                "backup_type": g["backup_type"],
                "backup_id": g["backup_id"],
                "last_backup_at": g["last_backup_at"],
                "hours_since_backup": last.map(|t| ((now - t).num_minutes() as f64 / 6.0).round() / 10.0),
                "backup_count": g["backup_count"],
                "verification": g["verification"],
                "observed_at": r.observed_at,
            })
        })
        .collect()
}

/// One guest's backup evidence as the connector read it (`details.last_backup`,
/// `details.last_backup_ok_at`).
fn backup_row(r: &Resource, parent: Option<&Resource>, now: chrono::DateTime<Utc>) -> Value {
    let d = &r.details;
    let last_ok = d["last_backup_ok_at"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.to_utc());
    let age_hours = last_ok.map(|t| ((now - t).num_minutes() as f64 / 6.0).round() / 10.0);
    json!({
        "resource_id": r.id.as_str(),
        "name": r.name,
        "type": r.resource_type.as_str(),
        "vmid": r.source_id,
        "parent": parent.map(|p| json!({"id": p.id.as_str(), "name": p.name})),
        "status": r.status,
        "last_backup": if d["last_backup"].is_object() { d["last_backup"].clone() } else { Value::Null },
        "last_successful_backup_at": last_ok,
        "hours_since_successful_backup": age_hours,
        "note": if d["last_backup"].is_object() {
            ""
        } else {
            "no backup task of this guest in the cluster's recent tasks (older tasks are not listed)"
        },
        "observed_at": r.observed_at,
    })
}

/// One row: identity, state, the platform's own words and the usage numbers the report carried.
fn row(r: &Resource, parent: Option<&Resource>) -> Value {
    let d = &r.details;
    let pick = |keys: &[&str]| -> Value {
        let mut out = serde_json::Map::new();
        for key in keys {
            if !d[*key].is_null() {
                out.insert((*key).to_owned(), d[*key].clone());
            }
        }
        Value::Object(out)
    };
    let detail = match r.resource_type {
        ResourceType::PhysicalDisk => pick(&[
            "smart_health",
            "disk_type",
            "model",
            "serial",
            "used_by",
            "devpath",
        ]),
        _ => pick(&[
            "kind",
            "storage_type",
            "content",
            "enabled",
            "active",
            "shared",
            "zfs_health",
            "mountpoint",
            "fstype",
            "maintenance",
            "error",
            "estimated_full_at",
            "failed_jobs",
            "backup_group_count",
            "verify_failed_groups",
            "ceph_health",
            "checks",
            "osds",
            "osds_up",
            "osds_in",
            "pgs",
            "pgs_by_state",
            "monitors_in_quorum",
        ]),
    };
    json!({
        "resource_id": r.id.as_str(),
        "name": r.name,
        "type": r.resource_type.as_str(),
        "parent": parent.map(|p| json!({"id": p.id.as_str(), "name": p.name})),
        "status": r.status,
        "health": r.health,
        "details": detail,
        "observed_at": r.observed_at,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::Duration as Span;
    use pulse_domain::TenantId;
    use pulse_domain::patrol::run::RunId;
    use pulse_domain::resource::{Health, ResourceId, ResourceStatus};
    use pulse_store::metrics::MetricSample as Sample;
    use pulse_test_support::db::TestDb;

    use super::*;
    use crate::tools::test_support::{call, resource};

    fn part(kind: ResourceType, source: &str, name: &str, parent: &ResourceId) -> Resource {
        let mut r = resource("pve.lab", name, Health::Healthy);
        r.id = ResourceId::of(kind, "pve.lab", source);
        r.resource_type = kind;
        r.source_id = source.to_owned();
        r.parent = Some(parent.clone());
        r
    }

    async fn context(db: &TestDb) -> anyhow::Result<ToolContext> {
        let tenant = TenantId::new("acme")?;
        pulse_store::tenants::create(db.store(), &tenant, "Acme").await?;
        let node = {
            let mut n = resource("pve.lab", "pve1", Health::Healthy);
            n.id = ResourceId::of(ResourceType::Node, "pve.lab", "pve1");
            n.resource_type = ResourceType::Node;
            n
        };
        let mut tank = part(ResourceType::Storage, "pve1/zfs/tank", "tank", &node.id);
        tank.health = Health::Unhealthy;
        tank.details = json!({"platform": "proxmox-ve", "kind": "zfs-pool", "node": "pve1",
                              "zfs_health": "DEGRADED"});
        let mut local = part(ResourceType::Storage, "pve1/local", "local", &node.id);
        local.details = json!({"platform": "proxmox-ve", "kind": "storage", "storage_type": "dir"});
        let mut sda = part(
            ResourceType::PhysicalDisk,
            "pve1/dev/sda",
            "pve1:/dev/sda",
            &node.id,
        );
        sda.health = Health::Unhealthy;
        sda.status = ResourceStatus::Running;
        sda.details = json!({"platform": "proxmox-ve", "smart_health": "FAILED",
                             "model": "ST4000VN008", "serial": "ZGY0ABCD"});
        // The pool filled from 60% to 90% over the last three days; local sits at 10%.
        let now = Utc::now();
        let mut samples = Vec::new();
        for hour in 0..72 {
            let at = now - Span::hours(72 - hour);
            samples.push(Sample {
                resource_id: tank.id.clone(),
                metric: "used_percent".into(),
                at,
                value: 60.0 + 30.0 * hour as f64 / 71.0,
            });
        }
        samples.push(Sample {
            resource_id: local.id.clone(),
            metric: "used_percent".into(),
            at: now,
            value: 10.0,
        });
        samples.push(Sample {
            resource_id: sda.id.clone(),
            metric: "wearout_remaining_percent".into(),
            at: now,
            value: 97.0,
        });
        let tx = db.store().tenant_tx(&tenant).await?;
        metrics::insert(&tx, &samples).await?;
        tx.commit().await?;
        let mut web = part(ResourceType::Vm, "100", "web", &node.id);
        web.details = json!({"platform": "proxmox-ve", "vmid": 100, "template": false,
            "last_backup": {"ok": false, "exit_status": "job errors", "start": "2026-12-01T01:00:00Z",
                            "end": "2026-12-01T01:05:00Z"},
            "last_backup_ok_at": (now - Span::hours(30)).to_rfc3339(),
            "replication": [{"id": "100-0", "source": "pve1", "target": "pve2", "ok": false,
                             "fail_count": 3, "error": "command 'zfs snapshot' failed"}]});
        let mut db_guest = part(ResourceType::SystemContainer, "200", "db", &node.id);
        db_guest.details = json!({"platform": "proxmox-ve", "vmid": 200, "template": false});
        let mut template = part(ResourceType::Vm, "9000", "golden", &node.id);
        template.details = json!({"platform": "proxmox-ve", "vmid": 9000, "template": true});
        Ok(ToolContext {
            store: db.store().clone(),
            bus: None,
            tenant,
            run_id: RunId::from_uuid(uuid::Uuid::now_v7()),
            scope: Arc::new(vec![node, tank, local, sda, web, db_guest, template]),
            backend_timeout: std::time::Duration::from_millis(200),
        })
    }

    async fn ask(ctx: &ToolContext, arguments: Value) -> (bool, Value) {
        let result = super::call(ctx, &call("pulse_storage", arguments)).await;
        let body = serde_json::from_str(&result.content).unwrap_or(json!(result.content));
        (result.is_error, body)
    }

    #[tokio::test]
    async fn pools_disks_and_a_nodes_parts_are_read_with_usage_health_and_forecast()
    -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let ctx = context(&db).await?;

        let (error, pools) = ask(&ctx, json!({"type": "pools"})).await;
        assert!(!error, "{pools}");
        assert_eq!(pools["total"], 2, "{pools}");
        let tank = &pools["rows"][0];
        assert_eq!(tank["name"], "tank");
        assert_eq!(tank["health"], "unhealthy");
        assert_eq!(tank["details"]["zfs_health"], "DEGRADED");
        assert_eq!(tank["parent"]["name"], "pve1");
        assert!((tank["metrics"]["used_percent"].as_f64().unwrap_or(0.0) - 90.0).abs() < 0.01);
        assert!(tank["forecast"].is_object(), "{tank}");

        let (_, full) = ask(&ctx, json!({"type": "pools", "min_usage": 50})).await;
        assert_eq!(full["total"], 1, "{full}");
        assert_eq!(full["rows"][0]["name"], "tank");

        let (error, disks) = ask(&ctx, json!({"type": "disk_health", "node": "pve1"})).await;
        assert!(!error, "{disks}");
        assert_eq!(disks["total"], 1);
        assert_eq!(disks["rows"][0]["details"]["smart_health"], "FAILED");
        assert_eq!(
            disks["rows"][0]["metrics"]["wearout_remaining_percent"],
            97.0
        );

        let (error, parts) = ask(
            &ctx,
            json!({"type": "resource_disks", "resource_id": "node:pve.lab:pve1"}),
        )
        .await;
        assert!(!error, "{parts}");
        assert_eq!(parts["total"], 3, "{parts}");

        // Each guest's backup evidence; a template has none to give, and a guest with no task
        // in sight says so rather than reading as never backed up.
        let (error, backups) = ask(&ctx, json!({"type": "backups"})).await;
        assert!(!error, "{backups}");
        assert_eq!(backups["total"], 2, "{backups}");
        let web = &backups["rows"][0];
        assert_eq!(web["name"], "web");
        assert_eq!(web["last_backup"]["ok"], false);
        assert_eq!(web["last_backup"]["exit_status"], "job errors");
        let age = web["hours_since_successful_backup"]
            .as_f64()
            .unwrap_or_default();
        assert!((age - 30.0).abs() < 0.2, "{web}");
        let quiet = &backups["rows"][1];
        assert_eq!(quiet["name"], "db");
        assert!(quiet["last_backup"].is_null(), "{quiet}");
        assert!(
            quiet["note"]
                .as_str()
                .unwrap_or_default()
                .contains("recent tasks")
        );
        let (_, one) = ask(&ctx, json!({"type": "backups", "vm_id": "200"})).await;
        assert_eq!(one["total"], 1, "{one}");
        assert_eq!(one["rows"][0]["vmid"], "200");

        // What Pulse does not read is said, never answered as an empty list.
        let (error, replication) =
            ask(&ctx, json!({"type": "replication", "state": "failed"})).await;
        assert!(!error, "{replication}");
        assert_eq!(replication["total"], 1, "{replication}");
        assert_eq!(replication["rows"][0]["guest"]["vmid"], "100");
        assert_eq!(replication["rows"][0]["fail_count"], 3);
        let (_, none) = ask(&ctx, json!({"type": "replication", "vm_id": "200"})).await;
        assert_eq!(none["total"], 0, "{none}");
        let (error, raid) = ask(&ctx, json!({"type": "raid"})).await;
        assert!(error);
        assert!(raid.to_string().contains("not read by Pulse yet"), "{raid}");
        let (error, ceph) = ask(&ctx, json!({"type": "ceph"})).await;
        assert!(!error, "{ceph}");
        assert_eq!(ceph["total"], 0);
        assert!(
            ceph["note"].as_str().unwrap_or_default().contains("Ceph"),
            "{ceph}"
        );
        // No backup server in scope: said, not an empty success that reads as "no jobs".
        let (error, jobs) = ask(&ctx, json!({"type": "pbs_jobs"})).await;
        assert!(!error, "{jobs}");
        assert_eq!(jobs["total"], 0);
        assert!(
            jobs["note"]
                .as_str()
                .unwrap_or_default()
                .contains("Proxmox Backup Server")
        );
        let (error, unknown) =
            ask(&ctx, json!({"type": "pools", "resource_id": "storage:x:y"})).await;
        assert!(error);
        assert!(unknown.to_string().contains("nearest ids"), "{unknown}");
        db.cleanup().await
    }

    /// A Proxmox Backup Server datastore as `pulse_proxmox::pbs` reports it: its jobs under
    /// `pbs_jobs` (filtered by type and state), its backup groups under `backups` beside the
    /// guests, and its PBS facts in its `pools` row.
    #[tokio::test]
    async fn a_backup_servers_jobs_and_groups_are_read_with_their_alerts() -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let tenant = TenantId::new("acme")?;
        pulse_store::tenants::create(db.store(), &tenant, "Acme").await?;
        let server = {
            let mut s = resource("pbs.backup", "pbs.backup", Health::Healthy);
            s.id = ResourceId::of(ResourceType::Host, "pbs.backup", "pbs.backup");
            s
        };
        let mut store1 = resource("pbs.backup", "store1", Health::Healthy);
        store1.id = ResourceId::of(ResourceType::Storage, "pbs.backup", "datastore/store1");
        store1.resource_type = ResourceType::Storage;
        store1.source_id = "datastore/store1".into();
        store1.parent = Some(server.id.clone());
        let day_ago = (Utc::now() - Span::hours(24)).to_rfc3339();
        store1.details = json!({
            "platform": "proxmox-backup", "kind": "pbs-datastore", "storage_type": "pbs",
            "failed_jobs": ["verify job v-1: TASK ERROR: corrupt chunk"],
            "verify_failed_groups": ["vm/100"], "backup_group_count": 2,
            "jobs": [
                {"type": "garbage", "id": null, "last_run_state": "OK", "last_run_ok": true},
                {"type": "verify", "id": "v-1", "last_run_state": "TASK ERROR: corrupt chunk",
                 "last_run_ok": false},
                {"type": "sync", "id": "s-1", "last_run_state": "OK", "last_run_ok": true}
            ],
            "backup_groups": [
                {"group": "ct/105", "namespace": "", "backup_type": "ct", "backup_id": "105",
                 "last_backup_at": day_ago, "backup_count": 1, "verification": null},
                {"group": "vm/100", "namespace": "", "backup_type": "vm", "backup_id": "100",
                 "last_backup_at": day_ago, "backup_count": 4, "verification": "failed"}
            ]
        });
        // A cluster's Ceph beside it, as `pulse_proxmox::inventory` reports it.
        let mut ceph = resource("pve.lab", "ceph", Health::Unhealthy);
        ceph.id = ResourceId::of(ResourceType::Storage, "pve.lab", "ceph");
        ceph.resource_type = ResourceType::Storage;
        ceph.source_id = "ceph".into();
        ceph.details = json!({"platform": "proxmox-ve", "kind": "ceph", "ceph_health": "HEALTH_WARN",
                              "checks": ["OSD_DOWN: 1 osds down"], "osds": 3, "osds_up": 2});
        let ctx = ToolContext {
            store: db.store().clone(),
            bus: None,
            tenant,
            run_id: RunId::from_uuid(uuid::Uuid::now_v7()),
            scope: Arc::new(vec![server, store1, ceph]),
            backend_timeout: std::time::Duration::from_millis(200),
        };

        let (error, jobs) = ask(&ctx, json!({"type": "pbs_jobs"})).await;
        assert!(!error, "{jobs}");
        assert_eq!(jobs["total"], 3, "{jobs}");
        assert_eq!(jobs["rows"][0]["datastore"]["name"], "store1");
        let (_, failed) = ask(&ctx, json!({"type": "pbs_jobs", "state": "failed"})).await;
        assert_eq!(failed["total"], 1, "{failed}");
        assert_eq!(failed["rows"][0]["id"], "v-1");
        let (_, syncs) = ask(&ctx, json!({"type": "pbs_jobs", "job_type": "sync"})).await;
        assert_eq!(syncs["total"], 1, "{syncs}");
        let (_, limited) = ask(&ctx, json!({"type": "pbs_jobs", "limit": 1})).await;
        assert_eq!(
            (
                limited["total"].clone(),
                limited["rows"].as_array().map(Vec::len)
            ),
            (json!(3), Some(1))
        );

        let (error, backups) = ask(&ctx, json!({"type": "backups", "vm_id": "100"})).await;
        assert!(!error, "{backups}");
        assert_eq!(backups["total"], 1, "{backups}");
        let vm = &backups["rows"][0];
        assert_eq!(vm["source"], "proxmox-backup");
        assert_eq!(vm["verification"], "failed");
        assert_eq!(vm["backup_count"], 4);
        let hours = vm["hours_since_backup"].as_f64().unwrap_or_default();
        assert!((hours - 24.0).abs() < 0.2, "{vm}");

        let (error, ceph) = ask(&ctx, json!({"type": "ceph"})).await;
        assert!(!error, "{ceph}");
        assert_eq!(ceph["total"], 1, "{ceph}");
        assert_eq!(
            ceph["rows"][0]["details"]["checks"],
            json!(["OSD_DOWN: 1 osds down"])
        );
        assert_eq!(ceph["rows"][0]["details"]["osds_up"], 2);

        let (_, pools) = ask(
            &ctx,
            json!({"type": "pools", "resource_id": "storage:pbs.backup:datastore/store1"}),
        )
        .await;
        assert_eq!(pools["total"], 1, "{pools}");
        assert_eq!(
            pools["rows"][0]["details"]["verify_failed_groups"],
            json!(["vm/100"])
        );
        assert_eq!(
            pools["rows"][0]["details"]["failed_jobs"][0],
            "verify job v-1: TASK ERROR: corrupt chunk"
        );
        db.cleanup().await
    }
}
