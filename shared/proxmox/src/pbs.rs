//! A Proxmox Backup Server read as canonical resources, and what its API answers as far as Pulse
//! reads it.
//!
//! - the server itself: a `host` whose source id is the connector's agent id (`pbs.<name>`),
//!   with its version;
//! - each datastore: a `storage` (`details.kind: pbs-datastore`) with its usage (so it fills
//!   under `filesystem_usage` and has a forecast like every storage), its maintenance mode, the
//!   estimate PBS itself makes of when it is full, the state of its garbage collection, verify,
//!   prune and sync jobs (`details.jobs`, and the ones whose last run failed in
//!   `details.failed_jobs`), and its backup groups in every namespace: each group's latest
//!   snapshot, how many it holds, and whether the latest was verified (`details.backup_groups`,
//!   with the groups whose latest snapshot failed verification in
//!   `details.verify_failed_groups`).
//!
//! Reads: `GET /version`, `/admin/datastore`, `/status/datastore-usage`, `/admin/gc`,
//! `/admin/verify`, `/admin/prune`, `/admin/sync`, and per datastore
//! `/admin/datastore/{store}/namespace` and `/admin/datastore/{store}/snapshots?ns=...`. A token
//! with the `Audit` role on `/` reads all of it (see docs/proxmox.md). The shapes are those the
//! PBS API documents (its `pbs-api-types`): kebab-case names, epochs in seconds, a job's
//! `last-run-state` `OK`, `WARNINGS: n` or the task's error text.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeZone, Utc};
use pulse_domain::resource::{Health, ObservedResource, ParentRef, ResourceStatus, ResourceType};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::inventory::{put_usage, resource};
use crate::{Client, Error, loose};

/// Backup groups listed per datastore at most, the least recently backed up first (the ones an
/// operator must see); the count of all of them is always reported.
pub const MAX_GROUPS: usize = 500;

/// `GET /admin/datastore`: one configured datastore.
#[derive(Debug, Clone, Deserialize)]
pub struct DatastoreListItem {
    pub store: String,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub comment: Option<String>,
    /// Set while the datastore is in maintenance mode (`read-only`, `offline`, with a message).
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub maintenance: Option<String>,
}

/// `GET /status/datastore-usage`: one datastore's usage.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct DatastoreUsage {
    pub store: String,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub total: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub used: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub avail: Option<u64>,
    /// PBS's own estimate (epoch) of when the datastore is full; in the past when usage is
    /// flat or falling.
    #[serde(default, deserialize_with = "loose::opt_i64")]
    pub estimated_full_date: Option<i64>,
    /// Why the datastore could not be read.
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub error: Option<String>,
}

/// `GET /admin/datastore/{store}/namespace`: one namespace (`""` is the root).
#[derive(Debug, Clone, Deserialize)]
pub struct NamespaceListItem {
    #[serde(default)]
    pub ns: String,
}

/// The verification of a snapshot: `ok` or `failed`, by the verify task `upid`.
#[derive(Debug, Clone, Deserialize)]
pub struct SnapshotVerifyState {
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub upid: Option<String>,
    pub state: String,
}

/// `GET /admin/datastore/{store}/snapshots`: one snapshot of a backup group.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SnapshotListItem {
    /// `vm`, `ct` or `host`.
    pub backup_type: String,
    pub backup_id: String,
    /// Epoch seconds.
    pub backup_time: i64,
    #[serde(default)]
    pub verification: Option<SnapshotVerifyState>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub size: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub owner: Option<String>,
    #[serde(default, deserialize_with = "loose::flag")]
    pub protected: bool,
}

/// One job's status: `GET /admin/verify`, `/admin/prune`, `/admin/sync` (the job's config with
/// its schedule status flattened in) and `/admin/gc` (one per datastore, no `id`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct JobStatus {
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub id: Option<String>,
    pub store: String,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub schedule: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub last_run_state: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_i64")]
    pub last_run_endtime: Option<i64>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub last_run_upid: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_i64")]
    pub next_run: Option<i64>,
    /// A sync job's remote (absent for a local sync).
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub remote: Option<String>,
    #[serde(default, deserialize_with = "loose::flag")]
    pub disable: bool,
}

/// The kinds of PBS jobs, as `pulse_storage` `job_type` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum JobKind {
    Garbage,
    Verify,
    Prune,
    Sync,
}

impl JobKind {
    pub const ALL: [JobKind; 4] = [
        JobKind::Garbage,
        JobKind::Verify,
        JobKind::Prune,
        JobKind::Sync,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Garbage => "garbage",
            JobKind::Verify => "verify",
            JobKind::Prune => "prune",
            JobKind::Sync => "sync",
        }
    }

    fn path(self) -> &'static str {
        match self {
            JobKind::Garbage => "admin/gc",
            JobKind::Verify => "admin/verify",
            JobKind::Prune => "admin/prune",
            JobKind::Sync => "admin/sync",
        }
    }

    fn label(self) -> &'static str {
        match self {
            JobKind::Garbage => "garbage collection",
            JobKind::Verify => "verify job",
            JobKind::Prune => "prune job",
            JobKind::Sync => "sync job",
        }
    }
}

/// How a job's last run ended: `Some(true)` for `OK` or `WARNINGS: n`, `Some(false)` for an
/// error, `None` when it never ran or PBS does not know (`unknown`).
pub fn ended_well(state: Option<&str>) -> Option<bool> {
    let state = state?.trim();
    if state.is_empty() || state.eq_ignore_ascii_case("unknown") {
        return None;
    }
    Some(state == "OK" || state.starts_with("WARNINGS"))
}

fn at(epoch: Option<i64>) -> Option<DateTime<Utc>> {
    epoch.and_then(|e| Utc.timestamp_opt(e, 0).single())
}

impl Client {
    pub async fn pbs_datastores(&self) -> Result<Vec<DatastoreListItem>, Error> {
        self.get("admin/datastore").await
    }

    pub async fn pbs_datastore_usage(&self) -> Result<Vec<DatastoreUsage>, Error> {
        self.get("status/datastore-usage").await
    }

    pub async fn pbs_jobs(&self, kind: JobKind) -> Result<Vec<JobStatus>, Error> {
        self.get(kind.path()).await
    }

    pub async fn pbs_namespaces(&self, store: &str) -> Result<Vec<NamespaceListItem>, Error> {
        self.get(&format!("admin/datastore/{}/namespace", segment(store)))
            .await
    }

    pub async fn pbs_snapshots(
        &self,
        store: &str,
        ns: &str,
    ) -> Result<Vec<SnapshotListItem>, Error> {
        let mut path = format!("admin/datastore/{}/snapshots", segment(store));
        if !ns.is_empty() {
            path.push_str("?ns=");
            path.push_str(&segment(ns));
        }
        self.get(&path).await
    }
}

/// A path segment or query value, percent-encoded (a datastore name is `[A-Za-z0-9_-]`, a
/// namespace may hold `/`).
fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A token that cannot audit any datastore sees an empty server, which would read as "nothing
/// to watch": refuse it with the role to grant instead. `GET /access/permissions` lists, per
/// path, the privileges the token holds there (the value says whether they propagate), so
/// `Datastore.Audit` on `/`, `/datastore` or one datastore is enough to read something.
pub fn check_privileges(held: &crate::api::Permissions) -> Result<(), Error> {
    let audits = held.iter().any(|(path, privs)| {
        (path == "/" || path == "/datastore" || path.starts_with("/datastore/"))
            && privs.get("Datastore.Audit").is_some()
    });
    if audits {
        return Ok(());
    }
    Err(Error::Privileges {
        missing: "Datastore.Audit on /datastore".into(),
        fix: "give the token (and, with privilege separation, its user) the Audit role on / \
              (proxmox-backup-manager acl update / Audit --auth-id <token id>)"
            .into(),
    })
}

/// One backup group as the inventory reports it: its latest snapshot and count.
#[derive(Debug, Clone, PartialEq)]
struct Group {
    namespace: String,
    backup_type: String,
    backup_id: String,
    last_backup: i64,
    count: u64,
    verification: Option<String>,
    owner: Option<String>,
}

impl Group {
    /// `vm/100`, or `ns:vm/100` outside the root namespace.
    fn name(&self) -> String {
        if self.namespace.is_empty() {
            format!("{}/{}", self.backup_type, self.backup_id)
        } else {
            format!("{}:{}/{}", self.namespace, self.backup_type, self.backup_id)
        }
    }

    fn row(&self) -> Value {
        json!({
            "namespace": self.namespace,
            "backup_type": self.backup_type,
            "backup_id": self.backup_id,
            "group": self.name(),
            "last_backup_at": at(Some(self.last_backup)),
            "backup_count": self.count,
            "verification": self.verification,
            "owner": self.owner,
        })
    }
}

/// The groups of a namespace's snapshots: each group's newest snapshot, with its verification.
fn groups(namespace: &str, snapshots: &[SnapshotListItem]) -> Vec<Group> {
    let mut by_group: BTreeMap<(&str, &str), Group> = BTreeMap::new();
    for s in snapshots {
        let group = by_group
            .entry((s.backup_type.as_str(), s.backup_id.as_str()))
            .or_insert_with(|| Group {
                namespace: namespace.to_owned(),
                backup_type: s.backup_type.clone(),
                backup_id: s.backup_id.clone(),
                last_backup: s.backup_time,
                count: 0,
                verification: None,
                owner: None,
            });
        group.count += 1;
        if s.backup_time >= group.last_backup {
            group.last_backup = s.backup_time;
            group.verification = s.verification.as_ref().map(|v| v.state.clone());
            group.owner = s.owner.clone();
        }
    }
    by_group.into_values().collect()
}

fn job_row(kind: JobKind, job: &JobStatus) -> Value {
    json!({
        "type": kind.as_str(),
        "id": job.id,
        "schedule": job.schedule,
        "disabled": job.disable,
        "remote": job.remote,
        "last_run_state": job.last_run_state,
        "last_run_ok": ended_well(job.last_run_state.as_deref()),
        "last_run_ended_at": at(job.last_run_endtime),
        "last_run_upid": job.last_run_upid,
        "next_run_at": at(job.next_run),
    })
}

fn failed_job(kind: JobKind, job: &JobStatus) -> Option<String> {
    if ended_well(job.last_run_state.as_deref()) != Some(false) {
        return None;
    }
    let name = match &job.id {
        Some(id) => format!("{} {id}", kind.label()),
        None => kind.label().to_owned(),
    };
    Some(format!(
        "{name}: {}",
        job.last_run_state.as_deref().unwrap_or_default()
    ))
}

/// Everything read of one datastore besides its list entry.
struct DatastoreRead<'a> {
    usage: Option<&'a DatastoreUsage>,
    /// `None` when the job lists could not be read.
    jobs: Option<Vec<(JobKind, &'a JobStatus)>>,
    /// The groups of every namespace, or why they could not be read.
    groups: Result<Vec<Group>, String>,
}

fn datastore(
    agent_id: &str,
    item: &DatastoreListItem,
    read: DatastoreRead<'_>,
) -> ObservedResource {
    let mut r = resource(
        ResourceType::Storage,
        format!("datastore/{}", item.store),
        item.store.clone(),
    );
    r.parent = Some(ParentRef {
        resource_type: ResourceType::Host,
        source_id: agent_id.to_owned(),
    });
    let error = read.usage.and_then(|u| u.error.clone());
    r.status = if item.maintenance.is_some() {
        ResourceStatus::Stopped
    } else if read.usage.is_some() && error.is_none() {
        ResourceStatus::Running
    } else {
        ResourceStatus::Unknown
    };
    r.health = match (&error, read.usage) {
        (Some(_), _) => Health::Unhealthy,
        (None, Some(_)) => Health::Healthy,
        (None, None) => Health::Unknown,
    };
    if let Some(u) = read.usage {
        put_usage(&mut r.metrics, u.used, u.total, u.avail);
    }
    let mut details = json!({
        "platform": "proxmox-backup",
        "kind": "pbs-datastore",
        "storage_type": "pbs",
        "content": "backup",
        "comment": item.comment,
        "maintenance": item.maintenance,
        "error": error,
        "estimated_full_at": read
            .usage
            .and_then(|u| at(u.estimated_full_date))
            .filter(|t| *t > Utc::now()),
    });
    let object = details.as_object_mut().expect("an object");
    match &read.jobs {
        Some(jobs) => {
            object.insert(
                "jobs".into(),
                jobs.iter().map(|(k, j)| job_row(*k, j)).collect(),
            );
            object.insert(
                "failed_jobs".into(),
                jobs.iter()
                    .filter_map(|(k, j)| failed_job(*k, j))
                    .collect::<Vec<_>>()
                    .into(),
            );
        }
        None => {
            object.insert(
                "jobs_error".into(),
                "the job lists could not be read".into(),
            );
        }
    }
    match read.groups {
        Ok(mut groups) => {
            groups.sort_by(|a, b| {
                a.last_backup
                    .cmp(&b.last_backup)
                    .then_with(|| a.name().cmp(&b.name()))
            });
            let failed: Vec<String> = groups
                .iter()
                .filter(|g| g.verification.as_deref() == Some("failed"))
                .map(Group::name)
                .collect();
            object.insert("backup_group_count".into(), groups.len().into());
            object.insert("verify_failed_groups".into(), failed.into());
            object.insert(
                "backup_groups".into(),
                groups.iter().take(MAX_GROUPS).map(Group::row).collect(),
            );
        }
        Err(why) => {
            object.insert("backup_groups_error".into(), why.into());
        }
    }
    r.details = details;
    r
}

/// Reads the server: its version, every datastore with its usage, jobs and backup groups. Only
/// the version and the datastore list must answer; what fails beyond them is noted on the
/// datastore (`jobs_error`, `backup_groups_error`), never reported as "none".
pub async fn read(client: &Client, agent_id: &str) -> Result<Vec<ObservedResource>, Error> {
    let version = client.version().await?;
    let stores = client.pbs_datastores().await?;
    let usage = client.pbs_datastore_usage().await;
    let mut jobs: Option<Vec<(JobKind, JobStatus)>> = Some(Vec::new());
    for kind in JobKind::ALL {
        match client.pbs_jobs(kind).await {
            Ok(list) => {
                if let Some(all) = jobs.as_mut() {
                    all.extend(list.into_iter().map(|j| (kind, j)));
                }
            }
            Err(error) => {
                tracing::debug!(kind = kind.as_str(), %error, "PBS job list unreadable");
                jobs = None;
            }
        }
    }
    let mut head = resource(ResourceType::Host, agent_id.to_owned(), agent_id.to_owned());
    head.status = ResourceStatus::Running;
    head.health = Health::Healthy;
    head.details = json!({
        "platform": "proxmox-backup",
        "kind": "pbs",
        "version": version.version,
        "release": version.release,
        "datastores": stores.len(),
        "usage_error": usage.as_ref().err().map(ToString::to_string),
    });
    let usage = usage.unwrap_or_default();
    let mut resources = vec![head];
    for item in &stores {
        let groups = read_groups(client, &item.store).await;
        let store_jobs = jobs.as_ref().map(|all| {
            all.iter()
                .filter(|(_, j)| j.store == item.store)
                .map(|(k, j)| (*k, j))
                .collect()
        });
        resources.push(datastore(
            agent_id,
            item,
            DatastoreRead {
                usage: usage.iter().find(|u| u.store == item.store),
                jobs: store_jobs,
                groups,
            },
        ));
    }
    Ok(resources)
}

/// The backup groups of every namespace of `store`.
async fn read_groups(client: &Client, store: &str) -> Result<Vec<Group>, String> {
    let mut namespaces: Vec<String> = client
        .pbs_namespaces(store)
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|n| n.ns)
        .collect();
    if !namespaces.iter().any(String::is_empty) {
        namespaces.insert(0, String::new());
    }
    let mut all = Vec::new();
    for ns in namespaces {
        let snapshots = client
            .pbs_snapshots(store, &ns)
            .await
            .map_err(|e| e.to_string())?;
        all.extend(groups(&ns, &snapshots));
    }
    Ok(all)
}

/// Tests on payloads shaped exactly as the Proxmox Backup Server API documents them (its
/// API viewer and the `pbs-api-types` it is generated from): no fake of the PBS API exists, so
/// these payloads, not a server, are what the reader is checked against.
#[cfg(test)]
mod tests {
    use super::*;

    fn usage_payload() -> Value {
        json!([
            {"store": "store1", "total": 1_000_000_000_000_u64, "used": 930_000_000_000_u64,
             "avail": 70_000_000_000_u64, "history-start": 1_733_000_000, "history-delta": 86400,
             "history": [0.91, 0.92, null, 0.93], "estimated-full-date": 4_102_444_800_i64,
             "gc-status": {"index-file-count": 12, "removed-bytes": 0, "pending-bytes": 0}},
            {"store": "broken", "error": "unable to open chunk store at \"/mnt/broken\""}
        ])
    }

    fn snapshots_payload() -> Value {
        json!([
            {"backup-type": "vm", "backup-id": "100", "backup-time": 1_765_000_000_i64,
             "files": [{"filename": "index.json.blob", "size": 500, "crypt-mode": "none"}],
             "size": 123_456, "owner": "root@pam", "protected": false,
             "verification": {"state": "ok", "upid": "UPID:pbs:00001234:0000ABCD:00000001:65700000:verify:store1:root@pam:"}},
            {"backup-type": "vm", "backup-id": "100", "backup-time": 1_765_086_400_i64,
             "files": [], "owner": "root@pam", "protected": true,
             "verification": {"state": "failed", "upid": "UPID:pbs:00001235:0000ABCE:00000001:65710000:verify:store1:root@pam:"}},
            {"backup-type": "ct", "backup-id": "105", "backup-time": 1_764_000_000_i64,
             "files": [], "comment": "before upgrade"}
        ])
    }

    fn jobs_payload() -> (Value, Value) {
        let verify = json!([
            {"id": "v-3f2a", "store": "store1", "schedule": "daily", "ignore-verified": true,
             "outdated-after": 30, "next-run": 1_765_200_000_i64,
             "last-run-state": "TASK ERROR: verification failed - 1 snapshot(s) corrupt",
             "last-run-upid": "UPID:pbs:00001235:0000ABCE:00000001:65710000:verify:store1:root@pam:",
             "last-run-endtime": 1_765_090_000_i64},
            {"id": "v-other", "store": "store2", "last-run-state": "OK"}
        ]);
        let gc = json!([
            {"store": "store1", "schedule": "daily", "next-run": 1_765_200_000_i64,
             "last-run-state": "OK", "last-run-endtime": 1_765_080_000_i64, "duration": 42,
             "upid": "UPID:pbs:0000AAAA:0000BBBB:00000001:65700001:garbage_collection:store1:root@pam:",
             "index-file-count": 12, "removed-bytes": 1024, "pending-bytes": 0,
             "removed-chunks": 1, "pending-chunks": 0, "removed-bad": 0, "still-bad": 0,
             "disk-bytes": 9000, "disk-chunks": 4}
        ]);
        (verify, gc)
    }

    #[test]
    fn documented_payloads_parse_and_loose_numbers_are_read() {
        let usage: Vec<DatastoreUsage> = serde_json::from_value(usage_payload()).unwrap();
        assert_eq!(usage[0].total, Some(1_000_000_000_000));
        assert_eq!(usage[0].estimated_full_date, Some(4_102_444_800));
        assert_eq!(usage[1].total, None);
        assert!(usage[1].error.as_deref().unwrap().contains("chunk store"));
        let snapshots: Vec<SnapshotListItem> = serde_json::from_value(snapshots_payload()).unwrap();
        assert_eq!(snapshots.len(), 3);
        assert!(snapshots[1].protected);
        assert_eq!(snapshots[1].verification.as_ref().unwrap().state, "failed");
        assert!(snapshots[2].verification.is_none());
        let (verify, gc) = jobs_payload();
        let verify: Vec<JobStatus> = serde_json::from_value(verify).unwrap();
        assert_eq!(verify[0].id.as_deref(), Some("v-3f2a"));
        assert_eq!(verify[0].last_run_endtime, Some(1_765_090_000));
        let gc: Vec<JobStatus> = serde_json::from_value(gc).unwrap();
        assert_eq!(gc[0].id, None);
        assert_eq!(gc[0].last_run_state.as_deref(), Some("OK"));
        let stores: Vec<DatastoreListItem> = serde_json::from_value(json!([
            {"store": "store1", "comment": "main"},
            {"store": "cold", "maintenance": "read-only,message=\"disk swap\""}
        ]))
        .unwrap();
        assert_eq!(
            stores[1].maintenance.as_deref(),
            Some("read-only,message=\"disk swap\"")
        );
        let namespaces: Vec<NamespaceListItem> = serde_json::from_value(
            json!([{"ns": ""}, {"ns": "site-a"}, {"ns": "site-a/old", "comment": "x"}]),
        )
        .unwrap();
        assert_eq!(namespaces[2].ns, "site-a/old");
    }

    #[test]
    fn a_jobs_last_run_state_says_whether_it_ended_well() {
        assert_eq!(ended_well(Some("OK")), Some(true));
        assert_eq!(ended_well(Some("WARNINGS: 3")), Some(true));
        assert_eq!(
            ended_well(Some("TASK ERROR: connection refused")),
            Some(false)
        );
        assert_eq!(ended_well(Some("some error")), Some(false));
        assert_eq!(ended_well(Some("unknown")), None);
        assert_eq!(ended_well(None), None);
    }

    #[test]
    fn a_datastore_carries_usage_jobs_groups_and_their_failures() {
        let usage: Vec<DatastoreUsage> = serde_json::from_value(usage_payload()).unwrap();
        let snapshots: Vec<SnapshotListItem> = serde_json::from_value(snapshots_payload()).unwrap();
        let (verify, gc) = jobs_payload();
        let verify: Vec<JobStatus> = serde_json::from_value(verify).unwrap();
        let gc: Vec<JobStatus> = serde_json::from_value(gc).unwrap();
        let mut groups = groups("", &snapshots);
        groups.extend(super::groups("site-a", &snapshots[2..]));
        let item = DatastoreListItem {
            store: "store1".into(),
            comment: None,
            maintenance: None,
        };
        let r = datastore(
            "pbs.backup",
            &item,
            DatastoreRead {
                usage: Some(&usage[0]),
                jobs: Some(vec![
                    (JobKind::Verify, &verify[0]),
                    (JobKind::Garbage, &gc[0]),
                ]),
                groups: Ok(groups),
            },
        );
        assert_eq!(r.resource_type, ResourceType::Storage);
        assert_eq!(r.source_id, "datastore/store1");
        assert_eq!(r.parent.as_ref().unwrap().source_id, "pbs.backup");
        assert_eq!(r.status, ResourceStatus::Running);
        assert_eq!(r.health, Health::Healthy);
        assert!((r.metrics["used_percent"] - 93.0).abs() < 1e-9);
        let d = &r.details;
        assert_eq!(d["platform"], "proxmox-backup");
        assert_eq!(d["kind"], "pbs-datastore");
        assert_eq!(d["estimated_full_at"], "2100-01-01T00:00:00Z");
        assert_eq!(
            d["failed_jobs"],
            json!(["verify job v-3f2a: TASK ERROR: verification failed - 1 snapshot(s) corrupt"])
        );
        assert_eq!(d["jobs"][1]["type"], "garbage");
        assert_eq!(d["jobs"][1]["last_run_ok"], true);
        assert_eq!(d["jobs"][0]["next_run_at"], "2025-12-08T13:20:00Z");
        // vm/100's newest snapshot (of two) failed verification; ct/105 was never verified.
        assert_eq!(d["verify_failed_groups"], json!(["vm/100"]));
        assert_eq!(d["backup_group_count"], 3);
        // Least recently backed up first.
        assert_eq!(d["backup_groups"][0]["group"], "ct/105");
        assert_eq!(d["backup_groups"][1]["group"], "site-a:ct/105");
        let vm = &d["backup_groups"][2];
        assert_eq!(vm["backup_count"], 2);
        assert_eq!(vm["verification"], "failed");
        assert_eq!(vm["last_backup_at"], "2025-12-07T05:46:40Z");
    }

    #[test]
    fn what_cannot_be_read_is_said_never_read_as_none() {
        let usage: Vec<DatastoreUsage> = serde_json::from_value(usage_payload()).unwrap();
        let item = DatastoreListItem {
            store: "broken".into(),
            comment: None,
            maintenance: None,
        };
        let r = datastore(
            "pbs.backup",
            &item,
            DatastoreRead {
                usage: Some(&usage[1]),
                jobs: None,
                groups: Err("permission check failed".into()),
            },
        );
        assert_eq!(r.health, Health::Unhealthy);
        assert_eq!(r.status, ResourceStatus::Unknown);
        assert!(r.metrics.is_empty());
        let d = &r.details;
        assert!(d["error"].as_str().unwrap().contains("chunk store"));
        assert!(d.get("failed_jobs").is_none() && d.get("verify_failed_groups").is_none());
        assert_eq!(d["jobs_error"], "the job lists could not be read");
        assert_eq!(d["backup_groups_error"], "permission check failed");
        let cold = DatastoreListItem {
            store: "cold".into(),
            comment: None,
            maintenance: Some("offline".into()),
        };
        let r = datastore(
            "pbs.backup",
            &cold,
            DatastoreRead {
                usage: None,
                jobs: Some(Vec::new()),
                groups: Ok(Vec::new()),
            },
        );
        assert_eq!(r.status, ResourceStatus::Stopped);
        assert_eq!(r.details["failed_jobs"], json!([]));
        assert_eq!(r.details["verify_failed_groups"], json!([]));
    }

    #[test]
    fn a_token_that_audits_no_datastore_is_refused_with_the_role_to_grant() {
        let held = |v: Value| -> crate::api::Permissions { serde_json::from_value(v).unwrap() };
        assert!(
            check_privileges(&held(
                json!({"/": {"Datastore.Audit": true, "Sys.Audit": true}})
            ))
            .is_ok()
        );
        assert!(
            check_privileges(&held(
                json!({"/datastore/store1": {"Datastore.Audit": false}})
            ))
            .is_ok()
        );
        let refused = check_privileges(&held(json!({"/": {"Sys.Audit": true}}))).unwrap_err();
        assert!(refused.to_string().contains("Datastore.Audit"), "{refused}");
        assert!(check_privileges(&held(json!({}))).is_err());
    }

    #[test]
    fn names_are_percent_encoded_in_paths() {
        assert_eq!(segment("store_1-a"), "store_1-a");
        assert_eq!(segment("site-a/old"), "site-a%2Fold");
    }
}
