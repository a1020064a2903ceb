//! A Proxmox VE cluster read as canonical resources: what the connector reports through the
//! relay, as a host agent reports its host.
//!
//! - the cluster itself: a `host` whose source id is the connector's agent id, unhealthy
//!   while it has no quorum;
//! - each `node` (online or not: a node the cluster shows offline, or one that cannot be read,
//!   is reported `unknown`, never dropped);
//! - each guest, `vm` or `system-container`, by its VMID (unique in a cluster, so a migrated
//!   guest keeps its id), with its node as parent;
//! - each node's `storage`, its ZFS pools (`storage` with `details.kind: zfs-pool`) and its
//!   `physical-disk`s with their SMART health and wearout.
//!
//! Metric names are the host agent's where they mean the same (`cpu_percent`,
//! `memory_percent`, `used_percent`, `load1`, `uptime_seconds`).

use std::collections::BTreeMap;

use pulse_domain::resource::{Health, ObservedResource, ParentRef, ResourceStatus, ResourceType};
use serde_json::{Value, json};

use crate::{Client, ClusterResource, ClusterStatus, Disk, Error, NodeStorage, ZfsPool};

/// What one read of a cluster found.
#[derive(Debug, Clone)]
pub struct Inventory {
    pub resources: Vec<ObservedResource>,
    pub cluster: ClusterStatus,
    /// Nodes whose own reads failed (offline, or an error), with why: their resources from the
    /// cluster-wide list are still reported.
    pub unreadable_nodes: BTreeMap<String, String>,
}

pub(crate) fn resource(kind: ResourceType, source_id: String, name: String) -> ObservedResource {
    ObservedResource {
        resource_type: kind,
        source_id,
        name,
        aliases: Vec::new(),
        status: ResourceStatus::Unknown,
        health: Health::Unknown,
        restart_count: None,
        labels: BTreeMap::new(),
        details: json!({}),
        metrics: BTreeMap::new(),
        parent: None,
    }
}

fn node_parent(node: &str) -> Option<ParentRef> {
    Some(ParentRef {
        resource_type: ResourceType::Node,
        source_id: node.to_owned(),
    })
}

pub(crate) fn percent(part: Option<u64>, whole: Option<u64>) -> Option<f64> {
    let whole = whole.filter(|w| *w > 0)? as f64;
    Some(part? as f64 / whole * 100.0)
}

/// The usage metrics every storage reports under the host agent's names: `used_percent` (from
/// used and total), `total_bytes`, `used_bytes`, `available_bytes`.
pub(crate) fn put_usage(
    metrics: &mut BTreeMap<String, f64>,
    used: Option<u64>,
    total: Option<u64>,
    available: Option<u64>,
) {
    put(metrics, "used_percent", percent(used, total));
    put(metrics, "total_bytes", total.map(|v| v as f64));
    put(metrics, "used_bytes", used.map(|v| v as f64));
    put(metrics, "available_bytes", available.map(|v| v as f64));
}

pub(crate) fn put(metrics: &mut BTreeMap<String, f64>, name: &str, value: Option<f64>) {
    if let Some(v) = value.filter(|v| v.is_finite()) {
        metrics.insert(name.to_owned(), v);
    }
}

/// A guest's status as Pulse's vocabulary has it; PVE's own word stays in the details.
fn guest_status(status: Option<&str>) -> ResourceStatus {
    match status {
        Some("running") => ResourceStatus::Running,
        Some("stopped") | Some("paused") | Some("suspended") => ResourceStatus::Stopped,
        _ => ResourceStatus::Unknown,
    }
}

fn guest(entry: &ClusterResource) -> Option<ObservedResource> {
    let kind = match entry.kind.as_str() {
        "qemu" => ResourceType::Vm,
        "lxc" => ResourceType::SystemContainer,
        _ => return None,
    };
    let vmid = entry.vmid?;
    let name = entry.name.clone().unwrap_or_else(|| vmid.to_string());
    let mut r = resource(kind, vmid.to_string(), name.clone());
    r.aliases = vec![name];
    r.status = guest_status(entry.status.as_deref());
    r.parent = entry.node.as_deref().and_then(node_parent);
    put(&mut r.metrics, "cpu_percent", entry.cpu.map(|c| c * 100.0));
    put(
        &mut r.metrics,
        "memory_percent",
        percent(entry.mem, entry.maxmem),
    );
    put(
        &mut r.metrics,
        "uptime_seconds",
        entry.uptime.map(|u| u as f64),
    );
    // Only containers report their root disk's use; a VM's `disk` is always 0.
    if kind == ResourceType::SystemContainer {
        put(
            &mut r.metrics,
            "used_percent",
            percent(entry.disk, entry.maxdisk),
        );
    }
    r.details = json!({
        "platform": "proxmox-ve",
        "vmid": vmid,
        "node": entry.node,
        "pve_status": entry.status,
        "template": entry.template,
        "lock": entry.lock,
        "ha_state": entry.hastate,
        "tags": entry.tags,
        "pool": entry.pool,
        "cpus": entry.maxcpu,
        "memory_bytes": entry.maxmem,
        "disk_bytes": entry.maxdisk,
    });
    Some(r)
}

/// One guest read afresh from its own `status/current` at `now`: the inventory's shape, plus
/// `details.started_at` (now minus the uptime Proxmox reports, on the reader's clock) for a
/// running guest, so a verifier can tell a start that came after a command from an old one.
pub fn fresh_guest(
    guest: &crate::GuestRef,
    current: &crate::GuestCurrent,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<ObservedResource> {
    let mut r = self::guest(&current.as_cluster_entry(guest))?;
    let uptime = current
        .uptime
        .and_then(|u| i64::try_from(u).ok())
        .and_then(chrono::Duration::try_seconds);
    if let (ResourceStatus::Running, Some(uptime), Some(details)) =
        (r.status, uptime, r.details.as_object_mut())
    {
        let started = now - uptime;
        details.insert(
            "started_at".to_owned(),
            json!(started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        );
        details.insert("qmp_status".to_owned(), json!(current.qmpstatus));
    }
    Some(r)
}

fn node(entry: &ClusterResource, online_in_cluster: Option<bool>) -> Option<ObservedResource> {
    let name = entry.node.clone()?;
    let mut r = resource(ResourceType::Node, name.clone(), name);
    let online = entry.status.as_deref() == Some("online") && online_in_cluster != Some(false);
    r.status = if online {
        ResourceStatus::Running
    } else {
        ResourceStatus::Unknown
    };
    r.health = if online {
        Health::Healthy
    } else {
        Health::Unknown
    };
    put(&mut r.metrics, "cpu_percent", entry.cpu.map(|c| c * 100.0));
    put(
        &mut r.metrics,
        "memory_percent",
        percent(entry.mem, entry.maxmem),
    );
    put(
        &mut r.metrics,
        "uptime_seconds",
        entry.uptime.map(|u| u as f64),
    );
    r.details = json!({
        "platform": "proxmox-ve",
        "online": online,
        "pve_status": entry.status,
        "cpus": entry.maxcpu,
        "memory_bytes": entry.maxmem,
    });
    Some(r)
}

fn storage(node: &str, s: &NodeStorage) -> ObservedResource {
    let mut r = resource(
        ResourceType::Storage,
        format!("{node}/{}", s.storage),
        s.storage.clone(),
    );
    let enabled = s.enabled.unwrap_or(true);
    let active = s.active.unwrap_or(false);
    r.status = if active {
        ResourceStatus::Running
    } else {
        ResourceStatus::Stopped
    };
    // Enabled but not active: the storage is configured for use and cannot be used.
    r.health = match (enabled, active) {
        (true, true) => Health::Healthy,
        (true, false) => Health::Unhealthy,
        (false, _) => Health::Unknown,
    };
    r.parent = node_parent(node);
    put(
        &mut r.metrics,
        "used_percent",
        s.used_fraction().map(|f| f * 100.0),
    );
    put(&mut r.metrics, "total_bytes", s.total.map(|v| v as f64));
    put(&mut r.metrics, "used_bytes", s.used.map(|v| v as f64));
    put(&mut r.metrics, "available_bytes", s.avail.map(|v| v as f64));
    r.details = json!({
        "platform": "proxmox-ve",
        "kind": "storage",
        "node": node,
        "storage_type": s.kind,
        "content": s.content,
        "enabled": enabled,
        "active": active,
        "shared": s.shared,
    });
    r
}

fn zfs_pool(node: &str, p: &ZfsPool) -> ObservedResource {
    let mut r = resource(
        ResourceType::Storage,
        format!("{node}/zfs/{}", p.name),
        p.name.clone(),
    );
    r.status = ResourceStatus::Running;
    r.health = match p.health.as_deref() {
        Some("ONLINE") => Health::Healthy,
        Some("DEGRADED" | "FAULTED" | "OFFLINE" | "UNAVAIL" | "REMOVED" | "SUSPENDED") => {
            Health::Unhealthy
        }
        _ => Health::Unknown,
    };
    r.parent = node_parent(node);
    put_usage(&mut r.metrics, p.alloc, p.size, p.free);
    put(
        &mut r.metrics,
        "fragmentation_percent",
        p.frag.map(|v| v as f64),
    );
    r.details = json!({
        "platform": "proxmox-ve",
        "kind": "zfs-pool",
        "node": node,
        "zfs_health": p.health,
        "dedup_ratio": p.dedup,
    });
    r
}

fn disk(node: &str, d: &Disk) -> ObservedResource {
    let source_id = if d.devpath.starts_with('/') {
        format!("{node}{}", d.devpath)
    } else {
        format!("{node}/{}", d.devpath)
    };
    let name = format!("{node}:{}", d.devpath);
    let mut r = resource(ResourceType::PhysicalDisk, source_id, name);
    r.aliases = [d.serial.clone(), d.wwn.clone()]
        .into_iter()
        .flatten()
        .filter(|a| !a.is_empty() && a != "unknown")
        .collect();
    r.status = ResourceStatus::Running;
    r.health = match d.health.as_deref().map(str::to_ascii_uppercase).as_deref() {
        Some("PASSED" | "OK") => Health::Healthy,
        Some("FAILED") => Health::Unhealthy,
        _ => Health::Unknown,
    };
    r.parent = node_parent(node);
    put(
        &mut r.metrics,
        "wearout_remaining_percent",
        d.wearout.map(|w| w as f64),
    );
    put(&mut r.metrics, "size_bytes", d.size.map(|v| v as f64));
    r.details = json!({
        "platform": "proxmox-ve",
        "node": node,
        "devpath": d.devpath,
        "smart_health": d.health,
        "disk_type": d.kind,
        "model": d.model,
        "serial": d.serial,
        "used_by": d.used,
    });
    r
}

/// Reads the cluster: the cluster-wide lists first (a failure there is the connection's), then
/// each online node's status, storage, ZFS pools and disks (a failure there marks the node
/// unreadable and keeps the rest).
pub async fn read(client: &Client, agent_id: &str) -> Result<Inventory, Error> {
    let cluster = client.cluster_status().await?;
    let entries = client.cluster_resources().await?;
    let online_in_cluster: BTreeMap<&str, bool> = cluster
        .members
        .iter()
        .map(|m| (m.name.as_str(), m.online))
        .collect();
    let mut resources = Vec::new();
    let mut unreadable_nodes = BTreeMap::new();

    let mut head = resource(
        ResourceType::Host,
        agent_id.to_owned(),
        cluster
            .cluster_name
            .clone()
            .unwrap_or_else(|| agent_id.to_owned()),
    );
    head.status = ResourceStatus::Running;
    head.health = if cluster.lost_quorum() {
        Health::Unhealthy
    } else {
        Health::Healthy
    };
    let version = client.version().await.ok().map(|v| v.version);
    head.details = json!({
        "platform": "proxmox-ve",
        "kind": "cluster",
        "cluster_name": cluster.cluster_name,
        "quorate": cluster.quorate,
        "nodes_online": cluster.members.iter().filter(|m| m.online).count(),
        "nodes_total": cluster.members.len(),
        "version": version,
    });
    resources.push(head);

    // Recent tasks: each guest's latest backup (vzdump) with how it ended, and when its latest
    // successful one ended. A failure to read them is noted on the cluster, never the
    // connection's failure.
    let tasks = match client.cluster_tasks().await {
        Ok(tasks) => tasks,
        Err(e) => {
            if let Some(details) = resources[0].details.as_object_mut() {
                details.insert("tasks_error".into(), Value::String(e.to_string()));
            }
            Vec::new()
        }
    };
    let backups = latest_backups(&tasks);
    let migrations = latest_migrations(&tasks);
    let successes = latest_successful_backups(&tasks);
    // Each node's storage replication jobs, by guest.
    let mut replication: BTreeMap<String, Vec<Value>> = BTreeMap::new();

    for entry in &entries {
        if entry.kind == "node" {
            let in_cluster = entry
                .node
                .as_deref()
                .and_then(|n| online_in_cluster.get(n).copied());
            let Some(mut n) = node(entry, in_cluster) else {
                continue;
            };
            if n.status == ResourceStatus::Running {
                let name = n.source_id.clone();
                match read_node(client, &name, &mut n, &mut resources).await {
                    Ok(()) => match client.node_replication(&name).await {
                        Ok(jobs) => {
                            for job in jobs {
                                if let Some(guest) = job.guest.clone() {
                                    replication
                                        .entry(guest)
                                        .or_default()
                                        .push(job.summary(&name));
                                }
                            }
                        }
                        Err(e) => {
                            if let Some(details) = n.details.as_object_mut() {
                                details.insert(
                                    "replication_error".into(),
                                    Value::String(e.to_string()),
                                );
                            }
                        }
                    },
                    Err(e) => {
                        n.health = Health::Unknown;
                        if let Some(details) = n.details.as_object_mut() {
                            details.insert("read_error".into(), Value::String(e.to_string()));
                        }
                        unreadable_nodes.insert(n.source_id.clone(), e.to_string());
                    }
                }
            } else {
                unreadable_nodes.insert(n.source_id.clone(), "the cluster shows it offline".into());
            }
            resources.push(n);
        } else if let Some(mut g) = guest(entry) {
            if let Some(details) = g.details.as_object_mut() {
                if let Some(task) = backups.get(g.source_id.as_str()) {
                    details.insert("last_backup".into(), backup_summary(task));
                }
                if let Some(task) = migrations.get(g.source_id.as_str()) {
                    details.insert("last_migration".into(), backup_summary(task));
                }
                if let Some(ended) = successes
                    .get(g.source_id.as_str())
                    .and_then(|ended| rfc3339(*ended))
                {
                    details.insert("last_backup_ok_at".into(), Value::String(ended));
                }
            }
            resources.push(g);
        }
    }
    // Replication jobs are read per node (the job's source), guests are listed cluster-wide.
    for r in resources.iter_mut() {
        if !matches!(
            r.resource_type,
            ResourceType::Vm | ResourceType::SystemContainer
        ) {
            continue;
        }
        if let (Some(jobs), Some(details)) =
            (replication.remove(&r.source_id), r.details.as_object_mut())
        {
            details.insert("replication".into(), Value::Array(jobs));
        }
    }
    // Ceph, when the cluster stores anything on it: one resource for the Ceph cluster.
    let on_ceph = entries
        .iter()
        .any(|e| e.kind == "storage" && matches!(e.plugintype.as_deref(), Some("rbd" | "cephfs")))
        || resources.iter().any(|r| {
            r.details["kind"] == "storage"
                && matches!(r.details["storage_type"].as_str(), Some("rbd" | "cephfs"))
        });
    if on_ceph {
        resources.push(ceph(agent_id, client.ceph_status().await));
    }
    Ok(Inventory {
        resources,
        cluster,
        unreadable_nodes,
    })
}

/// The cluster's Ceph as a `storage` (`details.kind: ceph`, source id `ceph`) under the cluster:
/// its health word and failing checks, OSDs up and in, placement groups by state, monitors in
/// quorum and raw usage. Ceph that does not answer the cluster is reported, never dropped:
/// `ceph_health: unreachable` with the error.
fn ceph(agent_id: &str, status: Result<crate::api::CephStatus, Error>) -> ObservedResource {
    let mut r = resource(ResourceType::Storage, "ceph".into(), "ceph".into());
    r.parent = Some(ParentRef {
        resource_type: ResourceType::Host,
        source_id: agent_id.to_owned(),
    });
    match status {
        Ok(status) => {
            let word = status.health.status.clone();
            r.status = ResourceStatus::Running;
            r.health = match word.as_deref() {
                Some("HEALTH_OK") => Health::Healthy,
                Some(_) => Health::Unhealthy,
                None => Health::Unknown,
            };
            let (osds, up, inside) = status.osds();
            let pg = &status.pgmap;
            put_usage(
                &mut r.metrics,
                pg.bytes_used,
                pg.bytes_total,
                pg.bytes_avail,
            );
            r.details = json!({
                "platform": "proxmox-ve",
                "kind": "ceph",
                "ceph_health": word,
                "checks": status.failing_checks(),
                "osds": osds,
                "osds_up": up,
                "osds_in": inside,
                "pgs": pg.num_pgs,
                "pgs_by_state": pg.pgs_by_state,
                "monitors_in_quorum": status.quorum_names,
            });
        }
        Err(error) => {
            r.status = ResourceStatus::Unknown;
            r.health = Health::Unhealthy;
            r.details = json!({
                "platform": "proxmox-ve",
                "kind": "ceph",
                "ceph_health": "unreachable",
                "error": error.to_string(),
            });
        }
    }
    r
}

/// The newest finished backup task of each guest (by VMID), from the cluster's recent tasks.
fn latest_backups(tasks: &[crate::Task]) -> BTreeMap<&str, &crate::Task> {
    latest_of(tasks, &["vzdump"])
}

/// The newest finished migration task (`qmigrate`, `vzmigrate`) of each guest (by VMID).
fn latest_migrations(tasks: &[crate::Task]) -> BTreeMap<&str, &crate::Task> {
    latest_of(tasks, &["qmigrate", "vzmigrate"])
}

/// The newest finished task of one of `kinds` of each guest (by VMID).
fn latest_of<'a>(tasks: &'a [crate::Task], kinds: &[&str]) -> BTreeMap<&'a str, &'a crate::Task> {
    let mut latest: BTreeMap<&str, &crate::Task> = BTreeMap::new();
    for task in tasks {
        let (Some(kind), Some(id)) = (task.kind.as_deref(), task.id.as_deref()) else {
            continue;
        };
        if !kinds.contains(&kind) {
            continue;
        }
        if task.ended_well().is_none() {
            continue;
        }
        let newer = latest
            .get(id)
            .is_none_or(|seen| task.starttime.unwrap_or(0) > seen.starttime.unwrap_or(0));
        if newer {
            latest.insert(id, task);
        }
    }
    latest
}

/// When each guest's (by VMID) newest successful backup task (`OK` or with warnings) ended, as
/// Unix seconds. A task without an end time says nothing about when the backup was made.
fn latest_successful_backups(tasks: &[crate::Task]) -> BTreeMap<&str, i64> {
    let mut latest: BTreeMap<&str, i64> = BTreeMap::new();
    for task in tasks {
        let (Some("vzdump"), Some(id), Some(true), Some(ended)) = (
            task.kind.as_deref(),
            task.id.as_deref(),
            task.ended_well(),
            task.endtime,
        ) else {
            continue;
        };
        let newest = latest.entry(id).or_insert(ended);
        *newest = (*newest).max(ended);
    }
    latest
}

fn rfc3339(unix_secs: i64) -> Option<String> {
    chrono::DateTime::from_timestamp(unix_secs, 0)
        .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

fn backup_summary(task: &crate::Task) -> Value {
    json!({
        "ok": task.ended_well(),
        "exit_status": task.exit_status(),
        "started_at": task.starttime,
        "ended_at": task.endtime,
        "node": task.node,
        "upid": task.upid,
    })
}

async fn read_node(
    client: &Client,
    name: &str,
    node: &mut ObservedResource,
    out: &mut Vec<ObservedResource>,
) -> Result<(), Error> {
    let status = client.node_status(name).await?;
    put(&mut node.metrics, "load1", status.loadavg.first().copied());
    if let Some(details) = node.details.as_object_mut() {
        details.insert("kernel".into(), json!(status.kernel()));
        details.insert("pve_version".into(), json!(status.pveversion));
    }
    for s in client.node_storage(name).await? {
        out.push(storage(name, &s));
    }
    for p in client.node_zfs_pools(name).await? {
        out.push(zfs_pool(name, &p));
    }
    for d in client.node_disks(name).await? {
        out.push(disk(name, &d));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guests_keep_their_vmid_whatever_node_they_run_on() {
        let entry: ClusterResource = serde_json::from_value(json!({
            "id": "qemu/100", "type": "qemu", "node": "pve2", "vmid": 100, "name": "web",
            "status": "paused", "cpu": 0.25, "mem": 512, "maxmem": 2048, "template": 0
        }))
        .unwrap();
        let g = guest(&entry).unwrap();
        assert_eq!(g.resource_type, ResourceType::Vm);
        assert_eq!(g.source_id, "100");
        assert_eq!(g.status, ResourceStatus::Stopped);
        assert_eq!(g.details["pve_status"], "paused");
        assert_eq!(g.metrics["cpu_percent"], 25.0);
        assert_eq!(g.metrics["memory_percent"], 25.0);
        assert_eq!(g.parent.unwrap().source_id, "pve2");
    }

    #[test]
    fn each_guests_latest_finished_backup_is_its_last_backup() {
        let task = |id: &str, start: i64, status: &str| -> crate::Task {
            serde_json::from_value(json!({
                "upid": format!("UPID:pve1:00000001:00000002:{start:08X}:vzdump:{id}:root@pam:"),
                "type": "vzdump", "id": id, "node": "pve1", "starttime": start,
                "endtime": start + 60, "status": status
            }))
            .unwrap()
        };
        let mut running = task("101", 500, "OK");
        running.status = None;
        running.endtime = None;
        let tasks = vec![
            task("100", 100, "OK"),
            task("100", 300, "job errors"),
            task("100", 200, "OK"),
            task("101", 100, "WARNINGS: 1"),
            running,
        ];
        let latest = latest_backups(&tasks);
        assert_eq!(latest["100"].starttime, Some(300));
        assert_eq!(latest["100"].ended_well(), Some(false));
        assert_eq!(latest["101"].ended_well(), Some(true));
        assert_eq!(backup_summary(latest["100"])["exit_status"], "job errors");
        // The latest successful one: 100's failed at 300, so its last good one ended at 260;
        // 101's running task has not ended, so its one with warnings counts.
        let ok_at = latest_successful_backups(&tasks);
        assert_eq!(ok_at, BTreeMap::from([("100", 260), ("101", 160)]));
        assert_eq!(
            rfc3339(1_700_000_000).as_deref(),
            Some("2023-11-14T22:13:20Z")
        );
        let failed_only = [task("102", 100, "job errors")];
        assert!(latest_successful_backups(&failed_only).is_empty());
    }

    #[test]
    fn disk_and_pool_health_read_as_pulse_health() {
        let d: Disk =
            serde_json::from_value(json!({"devpath": "/dev/sdb", "health": "failed"})).unwrap();
        let r = disk("pve1", &d);
        assert_eq!(r.source_id, "pve1/dev/sdb");
        assert_eq!(r.health, Health::Unhealthy);
        let p: ZfsPool =
            serde_json::from_value(json!({"name": "tank", "health": "DEGRADED"})).unwrap();
        assert_eq!(zfs_pool("pve1", &p).health, Health::Unhealthy);
        let s: NodeStorage = serde_json::from_value(json!({
            "storage": "nfs", "enabled": 1, "active": 0, "total": 0
        }))
        .unwrap();
        let r = storage("pve1", &s);
        assert_eq!(
            (r.status, r.health),
            (ResourceStatus::Stopped, Health::Unhealthy)
        );
        assert!(!r.metrics.contains_key("used_percent"));
    }

    /// `ceph status` as Proxmox VE passes it on (fakepve's shape, from the official schema),
    /// with a failing check; and Ceph that does not answer.
    #[test]
    fn ceph_is_read_with_its_health_checks_and_osds_or_reported_unreachable() {
        let status: crate::api::CephStatus = serde_json::from_value(json!({
            "fsid": "00000000-0000-4000-8000-000000000000",
            "health": {"status": "HEALTH_WARN", "checks": {
                "OSD_DOWN": {"severity": "HEALTH_WARN", "summary": {"message": "1 osds down", "count": 1}}
            }, "mutes": []},
            "osdmap": {"epoch": 10, "num_osds": 3, "num_up_osds": 2, "num_in_osds": 3},
            "pgmap": {"num_pgs": 128, "bytes_used": 300, "bytes_avail": 700, "bytes_total": 1000,
                      "pgs_by_state": [{"state_name": "active+clean", "count": 120}]},
            "quorum_names": ["pve1", "pve2"]
        }))
        .unwrap();
        let r = ceph("pve.lab", Ok(status));
        assert_eq!(r.source_id, "ceph");
        assert_eq!(r.parent.as_ref().unwrap().source_id, "pve.lab");
        assert_eq!(r.health, Health::Unhealthy);
        assert_eq!(r.details["ceph_health"], "HEALTH_WARN");
        assert_eq!(r.details["checks"], json!(["OSD_DOWN: 1 osds down"]));
        assert_eq!(
            (r.details["osds"].clone(), r.details["osds_up"].clone()),
            (json!(3), json!(2))
        );
        assert_eq!(r.metrics["used_percent"], 30.0);
        // An older Ceph nests the OSD counts.
        let nested: crate::api::CephStatus = serde_json::from_value(json!({
            "health": {"status": "HEALTH_OK"},
            "osdmap": {"osdmap": {"num_osds": 4, "num_up_osds": 4, "num_in_osds": 4}}
        }))
        .unwrap();
        assert_eq!(nested.osds(), (Some(4), Some(4), Some(4)));
        let down = ceph(
            "pve.lab",
            Err(Error::Api {
                path: "cluster/ceph/status".into(),
                status: 500,
                message: "rados_connect failed - Connection timed out".into(),
            }),
        );
        assert_eq!(down.details["ceph_health"], "unreachable");
        assert!(
            down.details["error"]
                .as_str()
                .unwrap()
                .contains("rados_connect")
        );
    }
}
