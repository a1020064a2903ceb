//! What the Proxmox VE API answers, as far as Pulse reads it. Every field is optional unless the
//! API documents it as always present, and every number and flag is read loosely (`loose`).
//! Fields Pulse does not read are ignored.

use serde::Deserialize;

use crate::loose;

/// `GET /version`.
#[derive(Debug, Clone, Deserialize)]
pub struct Version {
    pub version: String,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub release: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub repoid: Option<String>,
}

/// One entry of `GET /cluster/status`: the cluster itself (`type: cluster`) or a member node.
#[derive(Debug, Clone, Deserialize)]
pub struct ClusterStatusEntry {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_bool")]
    pub quorate: Option<bool>,
    #[serde(default, deserialize_with = "loose::opt_bool")]
    pub online: Option<bool>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub nodes: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub ip: Option<String>,
    #[serde(default, deserialize_with = "loose::flag")]
    pub local: bool,
}

/// `GET /cluster/status` read as a whole.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterStatus {
    /// `None` for a node that is not in a cluster (it has no quorum to lose).
    pub cluster_name: Option<String>,
    /// `None` for a stand-alone node.
    pub quorate: Option<bool>,
    pub members: Vec<Member>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub name: String,
    pub online: bool,
    pub ip: Option<String>,
}

impl ClusterStatus {
    pub fn from_entries(entries: Vec<ClusterStatusEntry>) -> Self {
        let cluster = entries.iter().find(|e| e.kind == "cluster");
        ClusterStatus {
            cluster_name: cluster.and_then(|c| c.name.clone()),
            quorate: cluster.and_then(|c| c.quorate),
            members: entries
                .iter()
                .filter(|e| e.kind == "node")
                .filter_map(|e| {
                    Some(Member {
                        name: e.name.clone()?,
                        online: e.online.unwrap_or(false),
                        ip: e.ip.clone(),
                    })
                })
                .collect(),
        }
    }

    /// Whether the cluster has lost quorum (never for a stand-alone node).
    pub fn lost_quorum(&self) -> bool {
        self.quorate == Some(false)
    }

    /// What the operator is told while the cluster has no quorum; `None` while it has one.
    pub fn quorum_cause(&self) -> Option<String> {
        self.lost_quorum().then(|| {
            format!(
                "cluster {} has lost quorum ({} of {} nodes online): reads work, guest actions \
                 are refused until quorum is back",
                self.cluster_name.as_deref().unwrap_or("?"),
                self.members.iter().filter(|m| m.online).count(),
                self.members.len()
            )
        })
    }
}

/// One entry of `GET /cluster/resources`: a guest (`qemu`, `lxc`), a `node`, a `storage`, or a
/// kind Pulse does not read (`pool`, `sdn`, ...), kept by its type only.
#[derive(Debug, Clone, Deserialize)]
pub struct ClusterResource {
    /// `qemu/100`, `lxc/200`, `node/pve1`, `storage/pve1/local`.
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub node: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub vmid: Option<u64>,
    /// Guests: `running`, `stopped`, `paused`, `unknown`; nodes: `online`, `offline`,
    /// `unknown`; storage: `available`, `unknown`.
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub status: Option<String>,
    #[serde(default, deserialize_with = "loose::flag")]
    pub template: bool,
    /// The share of the guest's or node's CPUs in use, 0..=1 per CPU.
    #[serde(default, deserialize_with = "loose::opt_f64")]
    pub cpu: Option<f64>,
    #[serde(default, deserialize_with = "loose::opt_f64")]
    pub maxcpu: Option<f64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub mem: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub maxmem: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub disk: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub maxdisk: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub uptime: Option<u64>,
    #[serde(default, deserialize_with = "loose::tags")]
    pub tags: Vec<String>,
    /// The config lock (`backup`, `migrate`, `snapshot`, ...), when held.
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub lock: Option<String>,
    /// The HA state of a guest HA manages.
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub hastate: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub pool: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub storage: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub plugintype: Option<String>,
    #[serde(default, deserialize_with = "loose::comma_list")]
    pub content: Vec<String>,
    #[serde(default, deserialize_with = "loose::flag")]
    pub shared: bool,
}

impl ClusterResource {
    pub fn is_guest(&self) -> bool {
        matches!(self.kind.as_str(), "qemu" | "lxc")
    }
}

/// The two kinds of guest, by the path segment the API files them under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestKind {
    Qemu,
    Lxc,
}

impl GuestKind {
    pub fn as_str(self) -> &'static str {
        match self {
            GuestKind::Qemu => "qemu",
            GuestKind::Lxc => "lxc",
        }
    }

    pub fn parse(kind: &str) -> Option<Self> {
        match kind {
            "qemu" => Some(GuestKind::Qemu),
            "lxc" => Some(GuestKind::Lxc),
            _ => None,
        }
    }
}

/// Where a guest lives now: its node, its kind and its VMID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestRef {
    pub node: String,
    pub kind: GuestKind,
    pub vmid: u64,
}

impl GuestRef {
    /// The guest of a `/cluster/resources` entry; `None` for anything but a guest.
    pub fn of(entry: &ClusterResource) -> Option<Self> {
        Some(Self {
            node: entry.node.clone()?,
            kind: GuestKind::parse(&entry.kind)?,
            vmid: entry.vmid?,
        })
    }

    /// `nodes/{node}/{qemu|lxc}/{vmid}`.
    pub(crate) fn path(&self) -> Result<String, crate::Error> {
        Ok(format!(
            "nodes/{}/{}/{}",
            crate::segment(&self.node)?,
            self.kind.as_str(),
            self.vmid
        ))
    }
}

/// A power action on a guest: the last segment of its `status/{action}` path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerAction {
    Start,
    Shutdown,
    Reboot,
    Stop,
}

impl PowerAction {
    pub fn as_str(self) -> &'static str {
        match self {
            PowerAction::Start => "start",
            PowerAction::Shutdown => "shutdown",
            PowerAction::Reboot => "reboot",
            PowerAction::Stop => "stop",
        }
    }
}

/// `GET /nodes/{node}/{qemu|lxc}/{vmid}/status/current`: what the node running the guest says
/// about it now.
#[derive(Debug, Clone, Deserialize)]
pub struct GuestCurrent {
    /// `running` or `stopped`.
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub status: Option<String>,
    /// QEMU's own view (`running`, `paused`, `prelaunch`, ...); VMs only.
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub qmpstatus: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub uptime: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub lock: Option<String>,
    #[serde(default, deserialize_with = "loose::flag")]
    pub template: bool,
    #[serde(default, deserialize_with = "loose::opt_f64")]
    pub cpu: Option<f64>,
    #[serde(default, deserialize_with = "loose::opt_f64")]
    pub cpus: Option<f64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub mem: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub maxmem: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub disk: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub maxdisk: Option<u64>,
    #[serde(default, deserialize_with = "loose::tags")]
    pub tags: Vec<String>,
}

impl GuestCurrent {
    /// The guest as a `/cluster/resources` entry would show it, so one mapping makes both into
    /// canonical resources.
    pub fn as_cluster_entry(&self, guest: &GuestRef) -> ClusterResource {
        ClusterResource {
            id: format!("{}/{}", guest.kind.as_str(), guest.vmid),
            kind: guest.kind.as_str().to_owned(),
            node: Some(guest.node.clone()),
            name: self.name.clone(),
            vmid: Some(guest.vmid),
            status: self.status.clone(),
            template: self.template,
            cpu: self.cpu,
            maxcpu: self.cpus,
            mem: self.mem,
            maxmem: self.maxmem,
            disk: self.disk,
            maxdisk: self.maxdisk,
            uptime: self.uptime,
            tags: self.tags.clone(),
            lock: self.lock.clone(),
            hastate: None,
            pool: None,
            storage: None,
            plugintype: None,
            content: Vec::new(),
            shared: false,
        }
    }
}

/// One entry of `GET /nodes/{node}/storage`.
#[derive(Debug, Clone, Deserialize)]
pub struct NodeStorage {
    pub storage: String,
    #[serde(rename = "type", default, deserialize_with = "loose::opt_text")]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "loose::comma_list")]
    pub content: Vec<String>,
    #[serde(default, deserialize_with = "loose::opt_bool")]
    pub enabled: Option<bool>,
    #[serde(default, deserialize_with = "loose::opt_bool")]
    pub active: Option<bool>,
    #[serde(default, deserialize_with = "loose::flag")]
    pub shared: bool,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub total: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub used: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub avail: Option<u64>,
}

impl NodeStorage {
    /// Used share 0..=1, when the storage reports a size.
    pub fn used_fraction(&self) -> Option<f64> {
        let total = self.total.filter(|t| *t > 0)?;
        Some(self.used? as f64 / total as f64)
    }
}

/// One entry of `GET /nodes/{node}/disks/list`.
#[derive(Debug, Clone, Deserialize)]
pub struct Disk {
    pub devpath: String,
    /// SMART's overall assessment: `PASSED`, `OK`, `FAILED`, `UNKNOWN`.
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub health: Option<String>,
    /// Remaining life in percent for SSDs (`100` new); `"N/A"` for disks without it.
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub wearout: Option<u64>,
    #[serde(rename = "type", default, deserialize_with = "loose::opt_text")]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub model: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub serial: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub vendor: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub wwn: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub size: Option<u64>,
    /// What uses the disk (`LVM`, `ZFS`, `mounted`, `partitions`, ...).
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub used: Option<String>,
}

/// One entry of `GET /nodes/{node}/disks/zfs`.
#[derive(Debug, Clone, Deserialize)]
pub struct ZfsPool {
    pub name: String,
    /// `ONLINE`, `DEGRADED`, `FAULTED`, `OFFLINE`, `UNAVAIL`, `REMOVED`.
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub health: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub size: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub alloc: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub free: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub frag: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_f64")]
    pub dedup: Option<f64>,
}

/// `GET /nodes/{node}/status`, the parts Pulse reads.
#[derive(Debug, Clone, Deserialize)]
pub struct NodeStatus {
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub uptime: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_f64")]
    pub cpu: Option<f64>,
    #[serde(default, deserialize_with = "loose::floats")]
    pub loadavg: Vec<f64>,
    #[serde(default)]
    pub memory: Option<Usage>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub pveversion: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub kversion: Option<String>,
    #[serde(rename = "current-kernel", default)]
    pub current_kernel: Option<Kernel>,
}

impl NodeStatus {
    /// The running kernel's release (`6.8.12-4-pve`), from PVE 8's `current-kernel` or the older
    /// `kversion` line.
    pub fn kernel(&self) -> Option<String> {
        self.current_kernel
            .as_ref()
            .and_then(|k| k.release.clone())
            .or_else(|| {
                self.kversion
                    .as_ref()
                    .and_then(|k| k.split_whitespace().nth(1).map(str::to_owned))
            })
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Usage {
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub total: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub used: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub free: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Kernel {
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub release: Option<String>,
}

/// One entry of `GET /nodes/{node}/tasks`, or `GET /nodes/{node}/tasks/{upid}/status`.
#[derive(Debug, Clone, Deserialize)]
pub struct Task {
    pub upid: String,
    #[serde(rename = "type", default, deserialize_with = "loose::opt_text")]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub id: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub node: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub user: Option<String>,
    /// The status endpoint: `running` or `stopped`; the task list: the exit status itself.
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub status: Option<String>,
    /// `OK`, `WARNINGS: n`, or the error, once stopped (status endpoint).
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub exitstatus: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_i64")]
    pub starttime: Option<i64>,
    #[serde(default, deserialize_with = "loose::opt_i64")]
    pub endtime: Option<i64>,
}

impl Task {
    /// The exit status, wherever this endpoint put it; `None` while the task runs.
    pub fn exit_status(&self) -> Option<&str> {
        if let Some(exit) = self.exitstatus.as_deref() {
            return Some(exit);
        }
        match self.status.as_deref() {
            None | Some("running") | Some("stopped") => None,
            Some(other) => Some(other),
        }
    }

    /// Whether the task ended well: `OK` or `WARNINGS: n`; `None` while it runs.
    pub fn ended_well(&self) -> Option<bool> {
        let exit = self.exit_status()?;
        Some(exit == "OK" || exit.starts_with("WARNINGS"))
    }

    pub fn is_running(&self) -> bool {
        self.status.as_deref() == Some("running")
            || (self.endtime.is_none() && self.exit_status().is_none())
    }

    /// Whether the task ended well (`OK`, or `WARNINGS: n`).
    pub fn succeeded(&self) -> Option<bool> {
        let exit = self.exit_status()?;
        Some(exit == "OK" || exit.starts_with("WARNINGS"))
    }
}

/// A task id, `UPID:node:pid:pstart:starttime:type:id:user:`, with its hex fields read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upid {
    pub node: String,
    pub pid: u32,
    pub starttime: i64,
    pub kind: String,
    pub id: String,
    pub user: String,
    raw: String,
}

impl Upid {
    pub fn parse(raw: &str) -> Option<Self> {
        let rest = raw.strip_prefix("UPID:")?;
        let parts: Vec<&str> = rest.splitn(8, ':').collect();
        if parts.len() < 7 {
            return None;
        }
        let (node, pid, _pstart, start, kind, id, user) = (
            parts[0], parts[1], parts[2], parts[3], parts[4], parts[5], parts[6],
        );
        if node.is_empty() || kind.is_empty() || user.is_empty() {
            return None;
        }
        Some(Upid {
            node: node.to_owned(),
            pid: u32::from_str_radix(pid, 16).ok()?,
            starttime: i64::from_str_radix(start, 16).ok()?,
            kind: kind.to_owned(),
            id: id.to_owned(),
            user: user.to_owned(),
            raw: raw.to_owned(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.raw
    }
}

/// `GET /access/permissions`: path -> privilege -> 1.
pub type Permissions =
    std::collections::BTreeMap<String, std::collections::BTreeMap<String, serde_json::Value>>;

/// `GET /nodes/{node}/replication`: the state of one storage replication job whose source is
/// that node.
#[derive(Debug, Clone, Deserialize)]
pub struct ReplicationJob {
    /// `<vmid>-<n>`.
    pub id: String,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub guest: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub target: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_i64")]
    pub last_sync: Option<i64>,
    #[serde(default, deserialize_with = "loose::opt_i64")]
    pub last_try: Option<i64>,
    #[serde(default, deserialize_with = "loose::opt_i64")]
    pub next_sync: Option<i64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub fail_count: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub error: Option<String>,
    #[serde(default, deserialize_with = "loose::opt_f64")]
    pub duration: Option<f64>,
    #[serde(default, deserialize_with = "loose::flag")]
    pub disable: bool,
}

impl ReplicationJob {
    /// The job as a guest's details carry it: `ok` is false while it fails.
    pub fn summary(&self, node: &str) -> serde_json::Value {
        let at = |t: Option<i64>| {
            t.filter(|t| *t > 0)
                .and_then(|t| chrono::DateTime::from_timestamp(t, 0))
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        };
        let failing = self.fail_count.unwrap_or(0) > 0 || self.error.is_some();
        serde_json::json!({
            "id": self.id,
            "source": node,
            "target": self.target,
            "ok": !failing,
            "fail_count": self.fail_count,
            "error": self.error,
            "last_sync_at": at(self.last_sync),
            "last_try_at": at(self.last_try),
            "next_sync_at": at(self.next_sync),
            "duration_seconds": self.duration,
            "disabled": self.disable,
        })
    }
}

/// `GET /cluster/ceph/status`: the `ceph status` document, as far as Pulse reads it. Ceph's
/// own names (`snake_case`); older releases nest the OSD counts one level deeper
/// (`osdmap.osdmap`), which [`CephStatus::osds`] reads too.
#[derive(Debug, Clone, Deserialize)]
pub struct CephStatus {
    #[serde(default)]
    pub health: CephHealth,
    #[serde(default)]
    pub osdmap: serde_json::Value,
    #[serde(default)]
    pub pgmap: CephPgMap,
    #[serde(default)]
    pub quorum_names: Vec<String>,
    #[serde(default)]
    pub monmap: serde_json::Value,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct CephHealth {
    /// `HEALTH_OK`, `HEALTH_WARN` or `HEALTH_ERR`.
    #[serde(default, deserialize_with = "loose::opt_text")]
    pub status: Option<String>,
    /// The failing checks by name (`OSD_DOWN`, `PG_DEGRADED`, ...), each with its severity and
    /// summary.
    #[serde(default)]
    pub checks: std::collections::BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct CephPgMap {
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub num_pgs: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub bytes_used: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub bytes_avail: Option<u64>,
    #[serde(default, deserialize_with = "loose::opt_u64")]
    pub bytes_total: Option<u64>,
    #[serde(default)]
    pub pgs_by_state: Vec<serde_json::Value>,
}

impl CephStatus {
    /// OSDs in total, up and in.
    pub fn osds(&self) -> (Option<u64>, Option<u64>, Option<u64>) {
        let map = if self.osdmap.get("osdmap").is_some() {
            &self.osdmap["osdmap"]
        } else {
            &self.osdmap
        };
        let n = |key: &str| map[key].as_u64();
        (n("num_osds"), n("num_up_osds"), n("num_in_osds"))
    }

    /// Each failing check as `NAME: summary` (`OSD_DOWN: 1 osds down`).
    pub fn failing_checks(&self) -> Vec<String> {
        self.health
            .checks
            .iter()
            .map(|(name, check)| match check["summary"]["message"].as_str() {
                Some(summary) => format!("{name}: {summary}"),
                None => name.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_upid_is_read_with_its_hex_fields() {
        let upid =
            Upid::parse("UPID:pve1:000003E8:00001B58:6757A4C0:qmstart:100:pulse@pve!ops:").unwrap();
        assert_eq!(upid.node, "pve1");
        assert_eq!(upid.pid, 1000);
        assert_eq!(upid.starttime, 0x6757_A4C0);
        assert_eq!(upid.kind, "qmstart");
        assert_eq!(upid.id, "100");
        assert_eq!(upid.user, "pulse@pve!ops");
        for bad in [
            "",
            "UPID:",
            "UPID:pve1:zz:0:0:qmstart:100:root@pam:",
            "TASK:pve1:1:1:1:a:b:c:",
        ] {
            assert!(Upid::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn a_task_reads_its_exit_status_from_either_endpoint() {
        let status: Task = serde_json::from_value(serde_json::json!({
            "upid": "UPID:pve1:1:1:1:qmstart:100:root@pam:", "status": "stopped",
            "exitstatus": "can't lock file", "starttime": "100", "endtime": 105
        }))
        .unwrap();
        assert_eq!(status.exit_status(), Some("can't lock file"));
        assert_eq!(status.succeeded(), Some(false));
        assert!(!status.is_running());
        let listed: Task = serde_json::from_value(serde_json::json!({
            "upid": "UPID:pve1:1:1:1:vzdump:100:root@pam:", "status": "WARNINGS: 2", "endtime": 9
        }))
        .unwrap();
        assert_eq!(listed.succeeded(), Some(true));
        let running: Task = serde_json::from_value(serde_json::json!({
            "upid": "UPID:pve1:1:1:1:qmshutdown:100:root@pam:", "status": "running"
        }))
        .unwrap();
        assert!(running.is_running());
        assert_eq!(running.succeeded(), None);
    }

    #[test]
    fn a_stand_alone_node_has_no_quorum_to_lose() {
        let entries: Vec<ClusterStatusEntry> = serde_json::from_value(serde_json::json!([
            {"type": "node", "name": "pve1", "online": 1, "local": 1, "ip": "192.0.2.1"}
        ]))
        .unwrap();
        let status = ClusterStatus::from_entries(entries);
        assert_eq!(status.quorate, None);
        assert!(!status.lost_quorum());
        assert_eq!(status.members.len(), 1);
    }
}
