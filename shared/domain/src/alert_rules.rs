//! Deterministic threshold alerts with hysteresis.
//!
//! The scheduler keeps one [`ResourceAlertState`] per resource and feeds each new
//! [`ResourceObservation`] through [`AlertRuleEngine::evaluate`], which returns the next state
//! and the lifecycle transitions (`fired`, `level_changed`, `cleared`) to publish. Pure: no
//! clock is read; `now` is passed in.
//!
//! Rules and hysteresis (defaults in [`AlertRuleConfig::default`]):
//!
//! | rule | fires | level | clears |
//! |---|---|---|---|
//! | `unhealthy` | health check unhealthy, or a service in `failed` state | warning (health), critical (failed service) | first healthy observation, or running with no health check |
//! | `unexpected_exit` | exited/dead with a non-zero code that nobody asked for | critical | running again, or exited with code 0 |
//! | `restart_loop` | at least 3 restarts within the last 10 minutes | critical | a full window with no restart |
//! | `filesystem_usage` | >= 90% warning, >= 95% critical | warning / critical | at or below threshold - 5 points (85%); critical drops to warning at or below 90% |
//! | `memory_usage` | >= 90% | warning | at or below 85% |
//! | `agent_offline` | agent reported offline | critical | agent reported online |
//! | `guest_stopped` | a VM or system container seen running is now stopped (templates never; not a stop inside a maintenance window) | warning | running again |
//! | `guest_locked` | a guest has held a Proxmox lock (backup, migrate, ...) for 30 minutes | warning | the lock is gone |
//! | `node_offline` | a Proxmox VE node is offline in its cluster | critical | online again |
//! | `quorum_lost` | the cluster reports no quorum | critical | quorate again |
//! | `pool_degraded` | a ZFS pool is not `ONLINE` | warning (`DEGRADED`), critical (faulted, unavailable, suspended, offline, removed) | `ONLINE` |
//! | `smart_failure` | a physical disk's SMART self-assessment failed | critical | it passes |
//! | `disk_wearout` | an SSD has used >= 90% of its rated endurance (warning), >= 95% (critical) | warning / critical | at or below 85% used |
//! | `backup_failed` | a guest's latest backup task ended in error | warning | a later backup ends well |
//! | `backup_stale` | a guest's latest successful backup ended more than 48 hours ago (templates never; not inside a maintenance window) | warning | a backup ends well within the window |
//! | `pbs_job_failed` | the last run of a Proxmox Backup Server datastore's garbage collection, verify, prune or sync job failed | warning | every job's last run ended well |
//! | `backup_verify_failed` | the latest snapshot of a backup group on a Proxmox Backup Server datastore failed verification | warning | no group's latest snapshot failed verification |
//! | `ceph_degraded` | a Proxmox VE cluster's Ceph reports `HEALTH_WARN` (warning), `HEALTH_ERR` or does not answer (critical) | warning / critical | `HEALTH_OK` |
//!
//! Storage and ZFS pools fill up under `filesystem_usage` (their `used_percent`). A resource whose
//! unhealthiness a specific rule explains (a pool's health, a disk's SMART result, a cluster's
//! quorum) gets that rule's alert, not a second `unhealthy` one.
//!
//! A reading that is missing (`None`) never fires and never clears: no data is not good news.
//! So a guest with no successful backup task in sight has no `backup_stale` alert: Pulse cannot
//! tell a guest that is never backed up on purpose from one whose backups stopped.
//! A Proxmox Backup Server datastore whose jobs or verification results could not be read keeps
//! its `pbs_job_failed` and `backup_verify_failed` alerts as they were.
//! A change of level on a firing alert is a `level_changed` transition on the same alert, never a
//! second alert. Boolean rules carry `value` 1 and `threshold` 1.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ObservedResourceType {
    Host,
    AppContainer,
    Service,
    Storage,
    Node,
    Vm,
    SystemContainer,
    PhysicalDisk,
}

impl ObservedResourceType {
    fn label(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::AppContainer => "container",
            Self::Service => "service",
            Self::Storage => "storage",
            Self::Node => "node",
            Self::Vm => "vm",
            Self::SystemContainer => "system container",
            Self::PhysicalDisk => "physical disk",
        }
    }
}

/// Run state as the collectors report it (Docker states plus systemd's `failed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Created,
    Running,
    Paused,
    Restarting,
    Exited,
    Dead,
    Stopped,
    Failed,
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum HealthState {
    Healthy,
    Unhealthy,
    Starting,
}

/// One observation of one resource; every reading is optional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ResourceObservation {
    pub resource_id: String,
    pub resource_type: ObservedResourceType,
    pub run_state: Option<RunState>,
    /// `None` when the resource has no health check.
    pub health: Option<HealthState>,
    pub exit_code: Option<i64>,
    /// The last stop was asked for (operator, orchestrator), so a non-zero exit is expected.
    pub stop_requested: bool,
    /// Cumulative restart counter as the runtime reports it (Docker `RestartCount`).
    pub restart_count: Option<u64>,
    pub fs_used_pct: Option<f64>,
    pub mem_used_pct: Option<f64>,
    pub agent_online: Option<bool>,
    /// A guest template (never running by design).
    #[serde(default)]
    pub template: bool,
    /// A guest's Proxmox lock (`backup`, `migrate`, ...); `None` when it holds none.
    #[serde(default)]
    pub lock: Option<String>,
    /// A Proxmox VE cluster's quorum (the connector's host resource).
    #[serde(default)]
    pub quorate: Option<bool>,
    /// A Proxmox VE node's membership state.
    #[serde(default)]
    pub node_online: Option<bool>,
    /// A ZFS pool's health word (`ONLINE`, `DEGRADED`, ...).
    #[serde(default)]
    pub pool_health: Option<String>,
    /// Whether a disk's SMART self-assessment failed.
    #[serde(default)]
    pub smart_failed: Option<bool>,
    /// Percent of an SSD's rated endurance left (Proxmox's `wearout`).
    #[serde(default)]
    pub wearout_remaining_pct: Option<f64>,
    /// Whether a guest's latest backup task ended well (`None`: no backup task seen).
    #[serde(default)]
    pub last_backup_ok: Option<bool>,
    /// When a guest's latest successful backup task (`OK` or with warnings) ended (`None`: none
    /// seen).
    #[serde(default)]
    pub last_backup_ok_at: Option<DateTime<Utc>>,
    /// A Proxmox Backup Server datastore's jobs (garbage collection, verify, prune, sync) whose
    /// last run failed, one line each as the connector words it; empty when every job's last
    /// run ended well (`None`: the jobs could not be read).
    #[serde(default)]
    pub failed_jobs: Option<Vec<String>>,
    /// The backup groups of a Proxmox Backup Server datastore (`vm/100`, `ns1:ct/105`) whose
    /// latest snapshot failed verification; empty when none did (`None`: not read).
    #[serde(default)]
    pub verify_failed_groups: Option<Vec<String>>,
    /// A Proxmox VE cluster's Ceph health word (`HEALTH_OK`, `HEALTH_WARN`, `HEALTH_ERR`), or
    /// `unreachable` when Ceph did not answer the cluster (`None`: no Ceph, or not read).
    #[serde(default)]
    pub ceph_health: Option<String>,
    /// The operator has the resource in an active maintenance window: what stops during it
    /// was meant to.
    #[serde(default)]
    pub in_maintenance: bool,
    /// When Pulse last completed an approved `guest.shutdown` or `guest.stop` of this guest (the
    /// observation's time while one is executing): a stop after the guest was last seen running
    /// was meant.
    #[serde(default)]
    pub stopped_by_action_at: Option<DateTime<Utc>>,
    pub observed_at: DateTime<Utc>,
}

impl ResourceObservation {
    /// An observation with no readings; set the ones the collector has.
    pub fn new(
        resource_id: impl Into<String>,
        resource_type: ObservedResourceType,
        observed_at: DateTime<Utc>,
    ) -> Self {
        Self {
            resource_id: resource_id.into(),
            resource_type,
            run_state: None,
            health: None,
            exit_code: None,
            stop_requested: false,
            restart_count: None,
            fs_used_pct: None,
            mem_used_pct: None,
            agent_online: None,
            template: false,
            lock: None,
            quorate: None,
            node_online: None,
            pool_health: None,
            smart_failed: None,
            wearout_remaining_pct: None,
            last_backup_ok: None,
            last_backup_ok_at: None,
            failed_jobs: None,
            verify_failed_groups: None,
            ceph_health: None,
            in_maintenance: false,
            stopped_by_action_at: None,
            observed_at,
        }
    }

    fn is_guest(&self) -> bool {
        matches!(
            self.resource_type,
            ObservedResourceType::Vm | ObservedResourceType::SystemContainer
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum AlertRule {
    Unhealthy,
    UnexpectedExit,
    RestartLoop,
    FilesystemUsage,
    MemoryUsage,
    AgentOffline,
    GuestStopped,
    GuestLocked,
    NodeOffline,
    QuorumLost,
    PoolDegraded,
    SmartFailure,
    DiskWearout,
    BackupFailed,
    BackupStale,
    PbsJobFailed,
    BackupVerifyFailed,
    CephDegraded,
}

impl AlertRule {
    pub const ALL: [AlertRule; 18] = [
        Self::Unhealthy,
        Self::UnexpectedExit,
        Self::RestartLoop,
        Self::FilesystemUsage,
        Self::MemoryUsage,
        Self::AgentOffline,
        Self::GuestStopped,
        Self::GuestLocked,
        Self::NodeOffline,
        Self::QuorumLost,
        Self::PoolDegraded,
        Self::SmartFailure,
        Self::DiskWearout,
        Self::BackupFailed,
        Self::BackupStale,
        Self::PbsJobFailed,
        Self::BackupVerifyFailed,
        Self::CephDegraded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unhealthy => "unhealthy",
            Self::UnexpectedExit => "unexpected_exit",
            Self::RestartLoop => "restart_loop",
            Self::FilesystemUsage => "filesystem_usage",
            Self::MemoryUsage => "memory_usage",
            Self::AgentOffline => "agent_offline",
            Self::GuestStopped => "guest_stopped",
            Self::GuestLocked => "guest_locked",
            Self::NodeOffline => "node_offline",
            Self::QuorumLost => "quorum_lost",
            Self::PoolDegraded => "pool_degraded",
            Self::SmartFailure => "smart_failure",
            Self::DiskWearout => "disk_wearout",
            Self::BackupFailed => "backup_failed",
            Self::BackupStale => "backup_stale",
            Self::PbsJobFailed => "pbs_job_failed",
            Self::BackupVerifyFailed => "backup_verify_failed",
            Self::CephDegraded => "ceph_degraded",
        }
    }
}

impl fmt::Display for AlertRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum AlertLevel {
    Warning,
    Critical,
}

impl AlertLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Warning => "warning",
            Self::Critical => "critical",
        }
    }
}

/// Stable alert identity: `<resource_id>:<rule>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(transparent)]
pub struct AlertKey(String);

impl AlertKey {
    pub fn new(resource_id: &str, rule: AlertRule) -> Self {
        Self(format!("{resource_id}:{rule}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AlertKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A firing alert. `type`, `level`, `value`, `threshold`, `resource_id` and `message` are the
/// payload an alert-triggered Patrol reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Alert {
    pub key: AlertKey,
    #[serde(rename = "type")]
    pub rule: AlertRule,
    pub level: AlertLevel,
    pub value: f64,
    pub threshold: f64,
    pub resource_id: String,
    pub message: String,
    pub fired_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(tag = "transition", rename_all = "snake_case")]
pub enum AlertTransition {
    Fired {
        alert: Alert,
    },
    /// Same alert, new level (e.g. filesystem warning -> critical).
    LevelChanged {
        from: AlertLevel,
        alert: Alert,
    },
    Cleared {
        alert: Alert,
        cleared_at: DateTime<Utc>,
    },
}

impl AlertTransition {
    pub fn alert(&self) -> &Alert {
        match self {
            Self::Fired { alert }
            | Self::LevelChanged { alert, .. }
            | Self::Cleared { alert, .. } => alert,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct AlertRuleConfig {
    pub fs_warning_pct: f64,
    pub fs_critical_pct: f64,
    pub mem_warning_pct: f64,
    /// Points below a threshold a value must fall (inclusive) before the alert clears or drops a level.
    pub hysteresis_pct: f64,
    pub restart_loop_count: u32,
    pub restart_loop_window_secs: i64,
    /// How long a guest may hold a Proxmox lock before `guest_locked` fires.
    #[serde(default = "default_guest_lock_secs")]
    pub guest_lock_secs: i64,
    /// Endurance used (100 - Proxmox's `wearout`) at which `disk_wearout` warns, and is critical.
    #[serde(default = "default_wearout_warning")]
    pub wearout_warning_used_pct: f64,
    #[serde(default = "default_wearout_critical")]
    pub wearout_critical_used_pct: f64,
    /// How old a guest's latest successful backup may be before `backup_stale` fires. 48 hours:
    /// a daily backup that missed one run is still within it; two missed runs are not.
    #[serde(default = "default_backup_max_age_hours")]
    pub backup_max_age_hours: u32,
}

fn default_guest_lock_secs() -> i64 {
    1800
}

fn default_wearout_warning() -> f64 {
    90.0
}

fn default_wearout_critical() -> f64 {
    95.0
}

fn default_backup_max_age_hours() -> u32 {
    48
}

impl Default for AlertRuleConfig {
    fn default() -> Self {
        Self {
            fs_warning_pct: 90.0,
            fs_critical_pct: 95.0,
            mem_warning_pct: 90.0,
            hysteresis_pct: 5.0,
            restart_loop_count: 3,
            restart_loop_window_secs: 600,
            guest_lock_secs: default_guest_lock_secs(),
            wearout_warning_used_pct: default_wearout_warning(),
            wearout_critical_used_pct: default_wearout_critical(),
            backup_max_age_hours: default_backup_max_age_hours(),
        }
    }
}

/// Most restart instants remembered; more than this inside one window is a loop either way.
const MAX_RESTARTS_TRACKED: usize = 64;

/// Restarts seen as increments of the runtime's cumulative counter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct RestartHistory {
    pub last_count: Option<u64>,
    /// Instants at which restarts were observed, oldest first, bounded.
    pub restarts: Vec<DateTime<Utc>>,
}

/// Everything the engine remembers about one resource between observations.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ResourceAlertState {
    pub firing: BTreeMap<AlertRule, Alert>,
    pub restart_history: RestartHistory,
    /// The last run state observed (a guest that was running and now is stopped).
    #[serde(default)]
    pub last_run_state: Option<RunState>,
    /// When the guest's current lock was first seen.
    #[serde(default)]
    pub locked_since: Option<DateTime<Utc>>,
    /// When the guest was last observed running.
    #[serde(default)]
    pub running_seen_at: Option<DateTime<Utc>>,
}

/// What one rule says about the latest observation.
enum Verdict {
    Fire {
        level: AlertLevel,
        value: f64,
        threshold: f64,
    },
    /// Leave the alert as it is (firing or not); refresh its value if given.
    Keep {
        value: Option<f64>,
    },
    Clear,
}

#[derive(Debug, Clone, Default)]
pub struct AlertRuleEngine {
    config: AlertRuleConfig,
}

impl AlertRuleEngine {
    pub fn new(config: AlertRuleConfig) -> Self {
        Self { config }
    }

    pub fn config(&self) -> &AlertRuleConfig {
        &self.config
    }

    /// Applies `observation` to `previous`, returning the next state and the transitions, in
    /// [`AlertRule::ALL`] order.
    pub fn evaluate(
        &self,
        previous: &ResourceAlertState,
        observation: &ResourceObservation,
        now: DateTime<Utc>,
    ) -> (ResourceAlertState, Vec<AlertTransition>) {
        let mut state = previous.clone();
        self.track_restarts(&mut state.restart_history, observation, now);
        let was = state.last_run_state;
        let running_seen_at = state.running_seen_at;
        if observation.run_state.is_some() {
            state.last_run_state = observation.run_state;
        }
        if observation.is_guest() && observation.run_state == Some(RunState::Running) {
            state.running_seen_at = Some(observation.observed_at);
        }
        if observation.is_guest() && observation.run_state.is_some() {
            state.locked_since = match (&observation.lock, state.locked_since) {
                (Some(_), Some(since)) => Some(since),
                (Some(_), None) => Some(observation.observed_at),
                (None, _) => None,
            };
        }
        let mut transitions = Vec::new();
        for rule in AlertRule::ALL {
            let current = state.firing.get(&rule).map(|a| a.level);
            let verdict = match rule {
                AlertRule::Unhealthy => unhealthy_verdict(observation),
                AlertRule::UnexpectedExit => exit_verdict(observation),
                AlertRule::RestartLoop => self.restart_verdict(&state.restart_history, now),
                AlertRule::FilesystemUsage => self.threshold_verdict(
                    observation.fs_used_pct,
                    current,
                    self.config.fs_warning_pct,
                    Some(self.config.fs_critical_pct),
                ),
                AlertRule::MemoryUsage => self.threshold_verdict(
                    observation.mem_used_pct,
                    current,
                    self.config.mem_warning_pct,
                    None,
                ),
                AlertRule::AgentOffline => match observation.agent_online {
                    Some(false) => Verdict::Fire {
                        level: AlertLevel::Critical,
                        value: 1.0,
                        threshold: 1.0,
                    },
                    Some(true) => Verdict::Clear,
                    None => Verdict::Keep { value: None },
                },
                AlertRule::GuestStopped => guest_stopped_verdict(observation, was, running_seen_at),
                AlertRule::GuestLocked => self.guest_locked_verdict(&state, observation, now),
                AlertRule::NodeOffline => flag_verdict(
                    observation.node_online.map(|online| !online),
                    AlertLevel::Critical,
                ),
                AlertRule::QuorumLost => flag_verdict(
                    observation.quorate.map(|quorate| !quorate),
                    AlertLevel::Critical,
                ),
                AlertRule::PoolDegraded => pool_verdict(observation.pool_health.as_deref()),
                AlertRule::SmartFailure => {
                    flag_verdict(observation.smart_failed, AlertLevel::Critical)
                }
                AlertRule::BackupFailed => flag_verdict(
                    observation.last_backup_ok.map(|ok| !ok),
                    AlertLevel::Warning,
                ),
                AlertRule::BackupStale => self.backup_stale_verdict(observation, now),
                AlertRule::PbsJobFailed => failures_verdict(observation.failed_jobs.as_deref()),
                AlertRule::BackupVerifyFailed => {
                    failures_verdict(observation.verify_failed_groups.as_deref())
                }
                AlertRule::CephDegraded => ceph_verdict(observation.ceph_health.as_deref()),
                AlertRule::DiskWearout => self.threshold_verdict(
                    observation
                        .wearout_remaining_pct
                        .map(|left| (100.0 - left).clamp(0.0, 100.0)),
                    current,
                    self.config.wearout_warning_used_pct,
                    Some(self.config.wearout_critical_used_pct),
                ),
            };
            apply(
                &mut state,
                &mut transitions,
                rule,
                verdict,
                observation,
                now,
            );
        }
        (state, transitions)
    }

    fn guest_locked_verdict(
        &self,
        state: &ResourceAlertState,
        observation: &ResourceObservation,
        now: DateTime<Utc>,
    ) -> Verdict {
        if !observation.is_guest() || observation.run_state.is_none() {
            return Verdict::Keep { value: None };
        }
        let Some(since) = state.locked_since else {
            return Verdict::Clear;
        };
        let minutes = (now - since).num_seconds().max(0) as f64 / 60.0;
        let threshold = self.config.guest_lock_secs.max(0) as f64 / 60.0;
        if minutes >= threshold {
            Verdict::Fire {
                level: AlertLevel::Warning,
                value: minutes.floor(),
                threshold,
            }
        } else {
            Verdict::Keep {
                value: Some(minutes.floor()),
            }
        }
    }

    /// A guest whose latest successful backup is older than the window. No reading keeps (no
    /// backup seen: never backed up on purpose, or its tasks are out of sight); a template is
    /// never backed up by design; inside a maintenance window a missed backup was meant, so it
    /// does not fire, though a new backup still clears.
    fn backup_stale_verdict(
        &self,
        observation: &ResourceObservation,
        now: DateTime<Utc>,
    ) -> Verdict {
        if !observation.is_guest() {
            return Verdict::Keep { value: None };
        }
        if observation.template {
            return Verdict::Clear;
        }
        let Some(ended) = observation.last_backup_ok_at else {
            return Verdict::Keep { value: None };
        };
        let window = Duration::hours(i64::from(self.config.backup_max_age_hours));
        let age = now - ended;
        if age <= window {
            return Verdict::Clear;
        }
        let hours = (age.num_seconds() / 3600) as f64;
        if observation.in_maintenance {
            return Verdict::Keep { value: Some(hours) };
        }
        Verdict::Fire {
            level: AlertLevel::Warning,
            value: hours,
            threshold: f64::from(self.config.backup_max_age_hours),
        }
    }

    fn window(&self) -> Duration {
        Duration::seconds(self.config.restart_loop_window_secs.max(0))
    }

    fn track_restarts(
        &self,
        history: &mut RestartHistory,
        observation: &ResourceObservation,
        now: DateTime<Utc>,
    ) {
        if let Some(count) = observation.restart_count {
            if let Some(last) = history.last_count
                && count > last
            {
                let added = (count - last).min(MAX_RESTARTS_TRACKED as u64);
                for _ in 0..added {
                    history.restarts.push(observation.observed_at);
                }
            }
            // First sight sets the baseline (earlier restarts have unknown times); a lower count
            // means the container was recreated and the counter started over.
            history.last_count = Some(count);
        }
        let horizon = now - self.window();
        history.restarts.retain(|at| *at > horizon);
        history.restarts.sort();
        let excess = history.restarts.len().saturating_sub(MAX_RESTARTS_TRACKED);
        history.restarts.drain(..excess);
    }

    fn restart_verdict(&self, history: &RestartHistory, now: DateTime<Utc>) -> Verdict {
        // Window is (now - window, now]; later instants (clock skew) still count.
        let horizon = now - self.window();
        let in_window = history.restarts.iter().filter(|at| **at > horizon).count();
        let threshold = f64::from(self.config.restart_loop_count.max(1));
        if in_window as f64 >= threshold {
            Verdict::Fire {
                level: AlertLevel::Critical,
                value: in_window as f64,
                threshold,
            }
        } else if in_window == 0 {
            Verdict::Clear
        } else {
            Verdict::Keep {
                value: Some(in_window as f64),
            }
        }
    }

    fn threshold_verdict(
        &self,
        value: Option<f64>,
        current: Option<AlertLevel>,
        warning: f64,
        critical: Option<f64>,
    ) -> Verdict {
        let Some(value) = value.filter(|v| v.is_finite()) else {
            return Verdict::Keep { value: None };
        };
        let band = self.config.hysteresis_pct;
        if let Some(critical) = critical {
            let holds_critical = current == Some(AlertLevel::Critical) && value > critical - band;
            if value >= critical || holds_critical {
                return Verdict::Fire {
                    level: AlertLevel::Critical,
                    value,
                    threshold: critical,
                };
            }
        }
        let holds_warning = current.is_some() && value > warning - band;
        if value >= warning || holds_warning {
            Verdict::Fire {
                level: AlertLevel::Warning,
                value,
                threshold: warning,
            }
        } else {
            Verdict::Clear
        }
    }
}

/// A yes/no reading: `Some(true)` fires at `level`, `Some(false)` clears, `None` keeps.
fn flag_verdict(bad: Option<bool>, level: AlertLevel) -> Verdict {
    match bad {
        Some(true) => Verdict::Fire {
            level,
            value: 1.0,
            threshold: 1.0,
        },
        Some(false) => Verdict::Clear,
        None => Verdict::Keep { value: None },
    }
}

/// A list of failures (a datastore's failed jobs, its groups that failed verification): any
/// fires at warning with their count as the value, an empty list clears, no list keeps.
fn failures_verdict(failures: Option<&[String]>) -> Verdict {
    match failures {
        Some([]) => Verdict::Clear,
        Some(failures) => Verdict::Fire {
            level: AlertLevel::Warning,
            value: failures.len() as f64,
            threshold: 1.0,
        },
        None => Verdict::Keep { value: None },
    }
}

/// A guest seen running that is now stopped. A guest first seen stopped may be stopped on
/// purpose, so it does not fire; a template never does.
/// A guest seen running that is now stopped, unless the stop was meant: inside its maintenance
/// window, or by a `guest.shutdown`/`guest.stop` Pulse completed after it was last seen running
/// (an approved stop is not a fault to find and undo).
fn guest_stopped_verdict(
    observation: &ResourceObservation,
    was: Option<RunState>,
    running_seen_at: Option<DateTime<Utc>>,
) -> Verdict {
    if !observation.is_guest() {
        return Verdict::Keep { value: None };
    }
    if observation.template {
        return Verdict::Clear;
    }
    let stopped_by_pulse = match (observation.stopped_by_action_at, running_seen_at) {
        (Some(stopped), Some(running)) => stopped >= running,
        _ => false,
    };
    match observation.run_state {
        Some(RunState::Running) => Verdict::Clear,
        Some(RunState::Stopped | RunState::Exited | RunState::Dead)
            if was == Some(RunState::Running)
                && !observation.in_maintenance
                && !stopped_by_pulse =>
        {
            Verdict::Fire {
                level: AlertLevel::Warning,
                value: 1.0,
                threshold: 1.0,
            }
        }
        _ => Verdict::Keep { value: None },
    }
}

fn pool_verdict(health: Option<&str>) -> Verdict {
    match health.map(str::to_ascii_uppercase).as_deref() {
        Some("ONLINE") => Verdict::Clear,
        Some("DEGRADED") => Verdict::Fire {
            level: AlertLevel::Warning,
            value: 1.0,
            threshold: 1.0,
        },
        Some("FAULTED" | "UNAVAIL" | "SUSPENDED" | "OFFLINE" | "REMOVED") => Verdict::Fire {
            level: AlertLevel::Critical,
            value: 1.0,
            threshold: 1.0,
        },
        _ => Verdict::Keep { value: None },
    }
}

/// Ceph's own health word: `HEALTH_WARN` warns, `HEALTH_ERR` or no answer is critical.
fn ceph_verdict(health: Option<&str>) -> Verdict {
    let level = match health.map(str::to_ascii_uppercase).as_deref() {
        Some("HEALTH_OK") => return Verdict::Clear,
        Some("HEALTH_WARN") => AlertLevel::Warning,
        Some("HEALTH_ERR" | "UNREACHABLE") => AlertLevel::Critical,
        _ => return Verdict::Keep { value: None },
    };
    Verdict::Fire {
        level,
        value: 1.0,
        threshold: 1.0,
    }
}

/// Whether a specific rule explains this resource's health, so `unhealthy` stays quiet.
fn explained_by_a_specific_rule(observation: &ResourceObservation) -> bool {
    observation.ceph_health.is_some()
        || observation.pool_health.is_some()
        || observation.smart_failed.is_some()
        || observation.quorate.is_some()
}

fn unhealthy_verdict(observation: &ResourceObservation) -> Verdict {
    if explained_by_a_specific_rule(observation) {
        return Verdict::Clear;
    }
    let failed_service = observation.resource_type == ObservedResourceType::Service
        && observation.run_state == Some(RunState::Failed);
    if failed_service {
        return Verdict::Fire {
            level: AlertLevel::Critical,
            value: 1.0,
            threshold: 1.0,
        };
    }
    match (observation.health, observation.run_state) {
        (Some(HealthState::Unhealthy), _) => Verdict::Fire {
            level: AlertLevel::Warning,
            value: 1.0,
            threshold: 1.0,
        },
        (Some(HealthState::Healthy), _) | (None, Some(RunState::Running)) => Verdict::Clear,
        _ => Verdict::Keep { value: None },
    }
}

fn exit_verdict(observation: &ResourceObservation) -> Verdict {
    match (observation.run_state, observation.exit_code) {
        (Some(RunState::Exited | RunState::Dead), Some(code))
            if code != 0 && !observation.stop_requested =>
        {
            Verdict::Fire {
                level: AlertLevel::Critical,
                value: code as f64,
                threshold: 0.0,
            }
        }
        (Some(RunState::Running), _) | (Some(RunState::Exited), Some(0)) => Verdict::Clear,
        _ => Verdict::Keep { value: None },
    }
}

fn message(
    rule: AlertRule,
    observation: &ResourceObservation,
    level: AlertLevel,
    value: f64,
    threshold: f64,
) -> String {
    let kind = observation.resource_type.label();
    let id = &observation.resource_id;
    match rule {
        AlertRule::Unhealthy if observation.run_state == Some(RunState::Failed) => {
            format!("{kind} {id} has failed")
        }
        AlertRule::Unhealthy => format!("{kind} {id} is unhealthy"),
        AlertRule::UnexpectedExit => {
            format!("{kind} {id} exited unexpectedly with code {value}")
        }
        AlertRule::RestartLoop => {
            format!("{kind} {id} restarted {value} times within the restart-loop window")
        }
        AlertRule::FilesystemUsage => format!(
            "{kind} {id} filesystem usage {value:.1}% is at or above the {} threshold of {threshold}%",
            level.as_str()
        ),
        AlertRule::MemoryUsage => format!(
            "{kind} {id} memory usage {value:.1}% is at or above the {} threshold of {threshold}%",
            level.as_str()
        ),
        AlertRule::AgentOffline => format!("agent for {kind} {id} is offline"),
        AlertRule::GuestStopped => format!("{kind} {id} was running and is now stopped"),
        AlertRule::GuestLocked => format!(
            "{kind} {id} has held the Proxmox lock {:?} for {value} minutes (threshold \
             {threshold} minutes)",
            observation.lock.as_deref().unwrap_or("?")
        ),
        AlertRule::NodeOffline => format!("{kind} {id} is offline in its cluster"),
        AlertRule::QuorumLost => format!("cluster {id} has lost quorum"),
        AlertRule::PoolDegraded => format!(
            "ZFS pool {id} is {}",
            observation.pool_health.as_deref().unwrap_or("not ONLINE")
        ),
        AlertRule::SmartFailure => format!("{kind} {id} failed its SMART self-assessment"),
        AlertRule::BackupFailed => format!("the latest backup of {kind} {id} failed"),
        AlertRule::BackupStale => format!(
            "the latest successful backup of {kind} {id} ended {value} hours ago, beyond the \
             {threshold}-hour window"
        ),
        AlertRule::DiskWearout => format!(
            "{kind} {id} has used {value:.0}% of its rated endurance, at or above the {} \
             threshold of {threshold}%",
            level.as_str()
        ),
        AlertRule::PbsJobFailed => {
            let jobs = observation.failed_jobs.as_deref().unwrap_or_default();
            let (noun, their) = if jobs.len() == 1 {
                ("job", "its")
            } else {
                ("jobs", "their")
            };
            format!(
                "{kind} {id}: {} Proxmox Backup Server {noun} failed {their} last run: {}",
                jobs.len(),
                listing(jobs, "; ")
            )
        }
        AlertRule::BackupVerifyFailed => format!(
            "the latest backup of {} on {kind} {id} failed verification",
            listing(
                observation
                    .verify_failed_groups
                    .as_deref()
                    .unwrap_or_default(),
                ", "
            )
        ),
        AlertRule::CephDegraded => match observation.ceph_health.as_deref() {
            Some("unreachable") => format!("Ceph of the cluster does not answer ({kind} {id})"),
            Some(word) => format!("Ceph of the cluster reports {word} ({kind} {id})"),
            None => format!("Ceph of the cluster is not healthy ({kind} {id})"),
        },
    }
}

/// Most bytes of listed items a message carries, so that with a resource id (at most 1024
/// characters) it stays within the 4096 characters the `alerts` table stores.
const MAX_LISTING_BYTES: usize = 2048;
/// Most bytes of one listed item (a failed job's line can carry a long task error).
const MAX_LISTED_ITEM_BYTES: usize = 512;

/// `items` joined by `separator`, each clipped to [`MAX_LISTED_ITEM_BYTES`]; the ones past
/// [`MAX_LISTING_BYTES`] are counted (" and 3 more"), not listed.
fn listing(items: &[String], separator: &str) -> String {
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        let item = clip(item.trim(), MAX_LISTED_ITEM_BYTES);
        let separator = if i == 0 { "" } else { separator };
        if out.len() + separator.len() + item.len() > MAX_LISTING_BYTES {
            out.push_str(&format!(" and {} more", items.len() - i));
            break;
        }
        out.push_str(separator);
        out.push_str(item.as_ref());
    }
    out
}

/// `text` cut to at most `max` bytes on a character boundary, marked with `…` when cut.
fn clip(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end]).into()
}

fn apply(
    state: &mut ResourceAlertState,
    transitions: &mut Vec<AlertTransition>,
    rule: AlertRule,
    verdict: Verdict,
    observation: &ResourceObservation,
    now: DateTime<Utc>,
) {
    match verdict {
        Verdict::Fire {
            level,
            value,
            threshold,
        } => {
            let text = message(rule, observation, level, value, threshold);
            match state.firing.get_mut(&rule) {
                Some(alert) => {
                    let from = alert.level;
                    alert.value = value;
                    alert.threshold = threshold;
                    alert.message = text;
                    if from != level {
                        alert.level = level;
                        alert.updated_at = now;
                        transitions.push(AlertTransition::LevelChanged {
                            from,
                            alert: alert.clone(),
                        });
                    }
                }
                None => {
                    let alert = Alert {
                        key: AlertKey::new(&observation.resource_id, rule),
                        rule,
                        level,
                        value,
                        threshold,
                        resource_id: observation.resource_id.clone(),
                        message: text,
                        fired_at: now,
                        updated_at: now,
                    };
                    state.firing.insert(rule, alert.clone());
                    transitions.push(AlertTransition::Fired { alert });
                }
            }
        }
        Verdict::Keep { value } => {
            if let (Some(alert), Some(value)) = (state.firing.get_mut(&rule), value) {
                alert.value = value;
                alert.message = message(rule, observation, alert.level, value, alert.threshold);
            }
        }
        Verdict::Clear => {
            if let Some(alert) = state.firing.remove(&rule) {
                transitions.push(AlertTransition::Cleared {
                    alert,
                    cleared_at: now,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    const ID: &str = "app-container:h1:abc";

    #[test]
    fn alert_level_names_are_the_wire_names() {
        for level in [AlertLevel::Warning, AlertLevel::Critical] {
            assert_eq!(
                serde_json::to_string(&level).unwrap(),
                format!("\"{}\"", level.as_str())
            );
        }
    }

    fn t(secs: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 1, 12, 0, 0)
            .single()
            .unwrap_or_default()
            + Duration::seconds(secs)
    }

    fn obs(at: i64) -> ResourceObservation {
        ResourceObservation::new(ID, ObservedResourceType::AppContainer, t(at))
    }

    fn fs(at: i64, pct: f64) -> ResourceObservation {
        ResourceObservation {
            fs_used_pct: Some(pct),
            ..obs(at)
        }
    }

    fn mem(at: i64, pct: f64) -> ResourceObservation {
        ResourceObservation {
            mem_used_pct: Some(pct),
            ..obs(at)
        }
    }

    /// Feeds observations in order; returns the final state and every transition as
    /// `(kind, rule, level)` strings for compact assertions.
    fn run(
        observations: &[ResourceObservation],
    ) -> (ResourceAlertState, Vec<(String, AlertRule, AlertLevel)>) {
        let engine = AlertRuleEngine::default();
        let mut state = ResourceAlertState::default();
        let mut seen = Vec::new();
        for o in observations {
            let (next, transitions) = engine.evaluate(&state, o, o.observed_at);
            for tr in transitions {
                let kind = match &tr {
                    AlertTransition::Fired { .. } => "fired",
                    AlertTransition::LevelChanged { .. } => "level_changed",
                    AlertTransition::Cleared { .. } => "cleared",
                };
                seen.push((kind.to_owned(), tr.alert().rule, tr.alert().level));
            }
            state = next;
        }
        (state, seen)
    }

    fn level_of(state: &ResourceAlertState, rule: AlertRule) -> Option<AlertLevel> {
        state.firing.get(&rule).map(|a| a.level)
    }

    use AlertLevel::{Critical, Warning};
    use AlertRule::*;

    #[test]
    fn filesystem_thresholds_at_the_boundaries() {
        for (pct, expected) in [
            (0.0, None),
            (89.9, None),
            (90.0, Some(Warning)),
            (94.9, Some(Warning)),
            (95.0, Some(Critical)),
            (100.0, Some(Critical)),
        ] {
            let (state, _) = run(&[fs(0, pct)]);
            assert_eq!(level_of(&state, FilesystemUsage), expected, "at {pct}%");
        }
    }

    #[test]
    fn filesystem_warning_clears_at_85_not_86() {
        let (state, tr) = run(&[fs(0, 90.0), fs(60, 86.0)]);
        assert_eq!(level_of(&state, FilesystemUsage), Some(Warning));
        assert_eq!(tr.len(), 1);
        let (state, tr) = run(&[fs(0, 90.0), fs(60, 85.1)]);
        assert_eq!(level_of(&state, FilesystemUsage), Some(Warning));
        assert_eq!(tr.len(), 1);
        let (state, tr) = run(&[fs(0, 90.0), fs(60, 85.0)]);
        assert_eq!(level_of(&state, FilesystemUsage), None);
        assert_eq!(
            tr,
            vec![
                ("fired".into(), FilesystemUsage, Warning),
                ("cleared".into(), FilesystemUsage, Warning)
            ]
        );
    }

    #[test]
    fn filesystem_warning_escalates_to_critical_on_the_same_alert() {
        let engine = AlertRuleEngine::default();
        let (s1, _) = engine.evaluate(&ResourceAlertState::default(), &fs(0, 91.0), t(0));
        let (s2, tr) = engine.evaluate(&s1, &fs(60, 96.0), t(60));
        assert_eq!(tr.len(), 1);
        match &tr[0] {
            AlertTransition::LevelChanged { from, alert } => {
                assert_eq!(*from, Warning);
                assert_eq!(alert.level, Critical);
                assert_eq!(alert.threshold, 95.0);
                assert_eq!(alert.value, 96.0);
                assert_eq!(alert.fired_at, t(0), "escalation keeps the original alert");
                assert_eq!(alert.key.as_str(), "app-container:h1:abc:filesystem_usage");
            }
            other => panic!("expected level change, got {other:?}"),
        }
        assert_eq!(s2.firing.len(), 1);
    }

    #[test]
    fn filesystem_critical_holds_above_90_then_drops_to_warning_then_clears() {
        let (state, tr) = run(&[
            fs(0, 95.0),
            fs(60, 92.0),  // inside the critical band: stays critical
            fs(120, 94.9), // still critical, no transition
            fs(180, 90.0), // at critical - 5: drops to warning
            fs(240, 86.0), // inside the warning band
            fs(300, 85.0), // clears
        ]);
        assert_eq!(level_of(&state, FilesystemUsage), None);
        assert_eq!(
            tr,
            vec![
                ("fired".into(), FilesystemUsage, Critical),
                ("level_changed".into(), FilesystemUsage, Warning),
                ("cleared".into(), FilesystemUsage, Warning),
            ]
        );
    }

    #[test]
    fn filesystem_flapping_around_the_threshold_fires_once() {
        let series: Vec<_> = [90.0, 89.0, 90.5, 88.0, 91.0, 86.0, 90.0, 89.9]
            .iter()
            .enumerate()
            .map(|(i, pct)| fs(i as i64 * 60, *pct))
            .collect();
        let (state, tr) = run(&series);
        assert_eq!(tr, vec![("fired".into(), FilesystemUsage, Warning)]);
        assert_eq!(level_of(&state, FilesystemUsage), Some(Warning));
        assert_eq!(state.firing[&FilesystemUsage].value, 89.9);
    }

    #[test]
    fn flapping_across_the_clear_point_fires_and_clears_each_time() {
        let (_, tr) = run(&[fs(0, 90.0), fs(60, 85.0), fs(120, 89.9), fs(180, 90.0)]);
        assert_eq!(
            tr,
            vec![
                ("fired".into(), FilesystemUsage, Warning),
                ("cleared".into(), FilesystemUsage, Warning),
                ("fired".into(), FilesystemUsage, Warning),
            ]
        );
    }

    #[test]
    fn missing_reading_neither_fires_nor_clears() {
        let (state, tr) = run(&[fs(0, 96.0), obs(60), obs(120)]);
        assert_eq!(level_of(&state, FilesystemUsage), Some(Critical));
        assert_eq!(tr.len(), 1);
        let (state, tr) = run(&[fs(0, f64::NAN), fs(60, f64::INFINITY)]);
        assert!(state.firing.is_empty());
        assert!(tr.is_empty());
    }

    #[test]
    fn memory_threshold_and_hysteresis() {
        for (pct, expected) in [(89.9, None), (90.0, Some(Warning)), (99.0, Some(Warning))] {
            let (state, _) = run(&[mem(0, pct)]);
            assert_eq!(level_of(&state, MemoryUsage), expected, "at {pct}%");
        }
        let (state, _) = run(&[mem(0, 92.0), mem(60, 86.0)]);
        assert_eq!(level_of(&state, MemoryUsage), Some(Warning));
        let (state, tr) = run(&[mem(0, 92.0), mem(60, 85.0)]);
        assert_eq!(level_of(&state, MemoryUsage), None);
        assert_eq!(tr.last().map(|t| t.0.as_str()), Some("cleared"));
    }

    fn health(at: i64, h: Option<HealthState>, run_state: RunState) -> ResourceObservation {
        ResourceObservation {
            health: h,
            run_state: Some(run_state),
            ..obs(at)
        }
    }

    #[test]
    fn unhealthy_fires_and_clears_on_first_healthy_observation() {
        use HealthState::{Healthy, Starting};
        let unhealthy = Some(HealthState::Unhealthy);
        let (state, tr) = run(&[
            health(0, Some(Healthy), RunState::Running),
            health(30, unhealthy, RunState::Running),
            health(60, unhealthy, RunState::Running),
            health(90, Some(Starting), RunState::Running),
            health(120, Some(Healthy), RunState::Running),
        ]);
        assert!(state.firing.is_empty());
        assert_eq!(
            tr,
            vec![
                ("fired".into(), Unhealthy, Warning),
                ("cleared".into(), Unhealthy, Warning),
            ]
        );
    }

    #[test]
    fn unhealthy_flapping_fires_and_clears_each_time() {
        use HealthState::Healthy;
        let unhealthy = Some(HealthState::Unhealthy);
        let (_, tr) = run(&[
            health(0, unhealthy, RunState::Running),
            health(30, Some(Healthy), RunState::Running),
            health(60, unhealthy, RunState::Running),
        ]);
        assert_eq!(tr.len(), 3);
    }

    #[test]
    fn unhealthy_stays_firing_while_health_is_unknown() {
        let (state, _) = run(&[
            health(0, Some(HealthState::Unhealthy), RunState::Running),
            health(30, None, RunState::Exited),
        ]);
        assert_eq!(level_of(&state, Unhealthy), Some(Warning));
    }

    #[test]
    fn failed_service_is_critical_and_clears_when_running() {
        let failed = ResourceObservation {
            run_state: Some(RunState::Failed),
            ..ResourceObservation::new("service:h1:nginx", ObservedResourceType::Service, t(0))
        };
        let running = ResourceObservation {
            run_state: Some(RunState::Running),
            ..ResourceObservation::new("service:h1:nginx", ObservedResourceType::Service, t(60))
        };
        let (state, tr) = run(std::slice::from_ref(&failed));
        assert_eq!(level_of(&state, Unhealthy), Some(Critical));
        assert_eq!(
            state.firing[&Unhealthy].message,
            "service service:h1:nginx has failed"
        );
        assert_eq!(tr.len(), 1);
        let (state, tr) = run(&[failed, running]);
        assert!(state.firing.is_empty());
        assert_eq!(tr.len(), 2);
    }

    fn exited(at: i64, code: i64, stop_requested: bool) -> ResourceObservation {
        ResourceObservation {
            run_state: Some(RunState::Exited),
            exit_code: Some(code),
            stop_requested,
            ..obs(at)
        }
    }

    #[test]
    fn unexpected_non_zero_exit_fires_critical() {
        let (state, _) = run(&[exited(0, 137, false)]);
        let alert = &state.firing[&UnexpectedExit];
        assert_eq!(alert.level, Critical);
        assert_eq!(alert.value, 137.0);
        assert_eq!(alert.threshold, 0.0);
    }

    #[test]
    fn zero_exit_and_requested_stop_do_not_fire() {
        let (state, _) = run(&[exited(0, 0, false)]);
        assert!(state.firing.is_empty());
        let (state, _) = run(&[exited(0, 143, true)]);
        assert!(state.firing.is_empty());
        let dead = ResourceObservation {
            run_state: Some(RunState::Dead),
            exit_code: Some(1),
            ..obs(0)
        };
        assert_eq!(level_of(&run(&[dead]).0, UnexpectedExit), Some(Critical));
    }

    #[test]
    fn unexpected_exit_clears_when_running_again() {
        let running = ResourceObservation {
            run_state: Some(RunState::Running),
            ..obs(60)
        };
        let (state, tr) = run(&[exited(0, 1, false), exited(30, 1, false), running]);
        assert!(state.firing.is_empty());
        assert_eq!(
            tr,
            vec![
                ("fired".into(), UnexpectedExit, Critical),
                ("cleared".into(), UnexpectedExit, Critical),
            ]
        );
    }

    fn restarts(at: i64, count: u64) -> ResourceObservation {
        ResourceObservation {
            restart_count: Some(count),
            run_state: Some(RunState::Running),
            ..obs(at)
        }
    }

    #[test]
    fn three_restarts_inside_the_window_fire() {
        // Baseline, then restarts at 0s, 300s and 599s: all within (599 - 600, 599].
        let (state, tr) = run(&[
            restarts(-60, 5),
            restarts(0, 6),
            restarts(300, 7),
            restarts(599, 8),
        ]);
        assert_eq!(level_of(&state, RestartLoop), Some(Critical));
        assert_eq!(state.firing[&RestartLoop].value, 3.0);
        assert_eq!(tr, vec![("fired".into(), RestartLoop, Critical)]);
    }

    #[test]
    fn three_restarts_spanning_exactly_the_window_do_not_fire() {
        // The first restart is exactly 600s before the third: outside (now - 600, now].
        let (state, _) = run(&[
            restarts(-60, 5),
            restarts(0, 6),
            restarts(300, 7),
            restarts(600, 8),
        ]);
        assert_eq!(level_of(&state, RestartLoop), None);
    }

    #[test]
    fn first_observation_sets_a_baseline_and_does_not_fire() {
        let (state, _) = run(&[restarts(0, 50)]);
        assert_eq!(level_of(&state, RestartLoop), None);
        assert!(state.restart_history.restarts.is_empty());
    }

    #[test]
    fn a_jump_of_three_in_one_observation_fires() {
        let (state, _) = run(&[restarts(0, 1), restarts(30, 4)]);
        assert_eq!(level_of(&state, RestartLoop), Some(Critical));
    }

    #[test]
    fn counter_reset_is_a_new_baseline_not_restarts() {
        let (state, _) = run(&[restarts(0, 10), restarts(30, 0), restarts(60, 1)]);
        assert_eq!(level_of(&state, RestartLoop), None);
        assert_eq!(state.restart_history.restarts.len(), 1);
    }

    #[test]
    fn restart_loop_clears_only_after_a_full_quiet_window() {
        let engine = AlertRuleEngine::default();
        let mut state = ResourceAlertState::default();
        for (at, count) in [(0, 0), (10, 1), (20, 2), (30, 3)] {
            state = engine.evaluate(&state, &restarts(at, count), t(at)).0;
        }
        assert_eq!(level_of(&state, RestartLoop), Some(Critical));
        // 599s after the last restart it is still in the window: keep firing.
        let (held, tr) = engine.evaluate(&state, &restarts(629, 3), t(629));
        assert!(tr.is_empty());
        assert_eq!(level_of(&held, RestartLoop), Some(Critical));
        assert_eq!(held.firing[&RestartLoop].value, 1.0);
        // Exactly 600s after the last restart: no restart left in the window, clears.
        let (cleared, tr) = engine.evaluate(&held, &restarts(630, 3), t(630));
        assert_eq!(level_of(&cleared, RestartLoop), None);
        assert_eq!(tr.len(), 1);
        assert!(matches!(tr[0], AlertTransition::Cleared { .. }));
    }

    #[test]
    fn restart_history_is_bounded() {
        let (state, _) = run(&[restarts(0, 0), restarts(10, u64::MAX)]);
        assert_eq!(state.restart_history.restarts.len(), MAX_RESTARTS_TRACKED);
        assert_eq!(level_of(&state, RestartLoop), Some(Critical));
    }

    #[test]
    fn agent_offline_fires_and_clears() {
        let offline = ResourceObservation {
            agent_online: Some(false),
            ..ResourceObservation::new("host:agent-1", ObservedResourceType::Host, t(0))
        };
        let unknown = ResourceObservation::new("host:agent-1", ObservedResourceType::Host, t(30));
        let online = ResourceObservation {
            agent_online: Some(true),
            ..ResourceObservation::new("host:agent-1", ObservedResourceType::Host, t(60))
        };
        let (state, tr) = run(&[offline.clone(), unknown]);
        assert_eq!(level_of(&state, AgentOffline), Some(Critical));
        assert_eq!(tr.len(), 1);
        let (state, tr) = run(&[offline, online]);
        assert!(state.firing.is_empty());
        assert_eq!(tr.len(), 2);
    }

    #[test]
    fn several_rules_fire_independently_with_distinct_keys() {
        let o = ResourceObservation {
            fs_used_pct: Some(97.0),
            mem_used_pct: Some(93.0),
            health: Some(HealthState::Unhealthy),
            run_state: Some(RunState::Running),
            ..obs(0)
        };
        let (state, tr) = run(&[o]);
        assert_eq!(tr.len(), 3);
        let keys: Vec<_> = state.firing.values().map(|a| a.key.to_string()).collect();
        assert_eq!(
            keys,
            vec![
                "app-container:h1:abc:unhealthy",
                "app-container:h1:abc:filesystem_usage",
                "app-container:h1:abc:memory_usage",
            ]
        );
    }

    #[test]
    fn state_round_trips_through_json_so_the_scheduler_can_persist_it() {
        let (state, _) = run(&[restarts(0, 0), restarts(10, 2), fs(20, 96.0)]);
        let json = serde_json::to_string(&state).unwrap_or_default();
        let back: ResourceAlertState = serde_json::from_str(&json).unwrap_or_default();
        assert_eq!(back, state);
        // Evaluating from the restored state continues the same alerts.
        let engine = AlertRuleEngine::default();
        let (_, tr) = engine.evaluate(&back, &restarts(30, 3), t(30));
        assert_eq!(tr.len(), 1);
        assert!(matches!(tr[0], AlertTransition::Fired { .. }));
        assert_eq!(tr[0].alert().rule, RestartLoop);
    }

    #[test]
    fn alert_transition_wire_shape() {
        let engine = AlertRuleEngine::default();
        let (_, tr) = engine.evaluate(&ResourceAlertState::default(), &fs(0, 96.5), t(0));
        insta::assert_json_snapshot!(tr, @r#"
            [
              {
                "transition": "fired",
                "alert": {
                  "key": "app-container:h1:abc:filesystem_usage",
                  "type": "filesystem_usage",
                  "level": "critical",
                  "value": 96.5,
                  "threshold": 95.0,
                  "resource_id": "app-container:h1:abc",
                  "message": "container app-container:h1:abc filesystem usage 96.5% is at or above the critical threshold of 95%",
                  "fired_at": "2026-11-01T12:00:00Z",
                  "updated_at": "2026-11-01T12:00:00Z"
                }
              }
            ]
        "#);
    }

    fn guest(at: i64, run: RunState) -> ResourceObservation {
        ResourceObservation {
            run_state: Some(run),
            stop_requested: run == RunState::Stopped,
            ..ResourceObservation::new("vm:pve.lab:101", ObservedResourceType::Vm, t(at))
        }
    }

    #[test]
    fn a_guest_seen_running_then_stopped_fires_and_a_template_or_first_sight_never_does() {
        let (_, seen) = run(&[guest(0, RunState::Stopped), guest(30, RunState::Stopped)]);
        assert!(seen.is_empty(), "first seen stopped: {seen:?}");
        let (state, seen) = run(&[
            guest(0, RunState::Running),
            guest(30, RunState::Stopped),
            guest(60, RunState::Stopped),
            guest(90, RunState::Running),
        ]);
        assert_eq!(
            seen,
            [
                ("fired".into(), AlertRule::GuestStopped, Warning),
                ("cleared".into(), AlertRule::GuestStopped, Warning)
            ]
        );
        assert_eq!(state.last_run_state, Some(RunState::Running));
        let template = |at, run| ResourceObservation {
            template: true,
            ..guest(at, run)
        };
        let (_, seen) = run(&[
            template(0, RunState::Running),
            template(30, RunState::Stopped),
        ]);
        assert!(seen.is_empty(), "template: {seen:?}");
        // Stopped inside a maintenance window: meant, and still meant after it ends.
        let maintained = |at, run| ResourceObservation {
            in_maintenance: true,
            ..guest(at, run)
        };
        let (_, seen) = run(&[
            guest(0, RunState::Running),
            maintained(30, RunState::Stopped),
            guest(60, RunState::Stopped),
        ]);
        assert!(seen.is_empty(), "maintenance: {seen:?}");
        // Stopped by an approved guest.shutdown Pulse completed after the guest was last seen
        // running: meant. A later start outside Pulse and a crash is a fault again.
        let by_pulse = |at, run| ResourceObservation {
            stopped_by_action_at: Some(t(20)),
            ..guest(at, run)
        };
        let (_, seen) = run(&[
            guest(0, RunState::Running),
            by_pulse(30, RunState::Stopped),
            by_pulse(60, RunState::Stopped),
        ]);
        assert!(seen.is_empty(), "stopped by Pulse: {seen:?}");
        let (_, seen) = run(&[
            guest(0, RunState::Running),
            by_pulse(30, RunState::Stopped),
            by_pulse(60, RunState::Running),
            by_pulse(90, RunState::Stopped),
        ]);
        assert_eq!(
            seen,
            [("fired".into(), AlertRule::GuestStopped, Warning)],
            "running again after Pulse's stop, then stopped: a fault"
        );
        // No reading (its node is offline) keeps what was known.
        let unknown = ResourceObservation::new("vm:pve.lab:101", ObservedResourceType::Vm, t(60));
        let (state, _) = run(&[
            guest(0, RunState::Running),
            guest(30, RunState::Stopped),
            unknown,
        ]);
        assert_eq!(level_of(&state, AlertRule::GuestStopped), Some(Warning));
    }

    #[test]
    fn a_guest_locked_past_the_threshold_fires_and_clears_when_the_lock_is_gone() {
        let locked = |at| ResourceObservation {
            lock: Some("backup".into()),
            ..guest(at, RunState::Running)
        };
        let (state, seen) = run(&[locked(0), locked(1000), locked(1799)]);
        assert!(seen.is_empty(), "{seen:?}");
        assert_eq!(state.locked_since, Some(t(0)));
        let (state, seen) = run(&[locked(0), locked(1800), guest(1900, RunState::Running)]);
        assert_eq!(
            seen,
            [
                ("fired".into(), AlertRule::GuestLocked, Warning),
                ("cleared".into(), AlertRule::GuestLocked, Warning)
            ]
        );
        assert_eq!(state.locked_since, None);
    }

    #[test]
    fn cluster_node_pool_and_disk_signals_fire_their_own_rules_not_unhealthy() {
        let at = |secs| t(secs);
        let cluster = |quorate| ResourceObservation {
            quorate: Some(quorate),
            health: Some(if quorate {
                HealthState::Healthy
            } else {
                HealthState::Unhealthy
            }),
            ..ResourceObservation::new("host:pve.lab", ObservedResourceType::Host, at(0))
        };
        let (state, _) = run(&[cluster(false)]);
        assert_eq!(level_of(&state, AlertRule::QuorumLost), Some(Critical));
        assert_eq!(level_of(&state, AlertRule::Unhealthy), None);
        let (state, _) = run(&[cluster(false), cluster(true)]);
        assert!(state.firing.is_empty());

        let node = |online| ResourceObservation {
            node_online: Some(online),
            ..ResourceObservation::new("node:pve.lab:pve2", ObservedResourceType::Node, at(0))
        };
        let (state, _) = run(&[node(false)]);
        assert_eq!(level_of(&state, AlertRule::NodeOffline), Some(Critical));
        let (state, _) = run(&[node(false), node(true)]);
        assert!(state.firing.is_empty());

        let pool = |health: &str| ResourceObservation {
            pool_health: Some(health.into()),
            health: Some(HealthState::Unhealthy),
            ..ResourceObservation::new(
                "storage:pve.lab:pve1/zfs/tank",
                ObservedResourceType::Storage,
                at(0),
            )
        };
        let (state, seen) = run(&[pool("DEGRADED"), pool("FAULTED"), pool("ONLINE")]);
        assert_eq!(
            seen,
            [
                ("fired".into(), AlertRule::PoolDegraded, Warning),
                ("level_changed".into(), AlertRule::PoolDegraded, Critical),
                ("cleared".into(), AlertRule::PoolDegraded, Critical)
            ]
        );
        assert!(state.firing.is_empty());

        let disk = |failed, left| ResourceObservation {
            smart_failed: Some(failed),
            wearout_remaining_pct: Some(left),
            ..ResourceObservation::new(
                "physical-disk:pve.lab:pve1/dev/sda",
                ObservedResourceType::PhysicalDisk,
                at(0),
            )
        };
        let (state, _) = run(&[disk(true, 50.0)]);
        assert_eq!(level_of(&state, AlertRule::SmartFailure), Some(Critical));
        assert_eq!(level_of(&state, AlertRule::DiskWearout), None);
        let (state, seen) = run(&[
            disk(false, 9.0),
            disk(false, 4.0),
            disk(false, 12.0),
            disk(false, 16.0),
        ]);
        assert_eq!(
            seen,
            [
                ("fired".into(), AlertRule::DiskWearout, Warning),
                ("level_changed".into(), AlertRule::DiskWearout, Critical),
                ("level_changed".into(), AlertRule::DiskWearout, Warning),
                ("cleared".into(), AlertRule::DiskWearout, Warning)
            ]
        );
        assert!(state.firing.is_empty());
    }

    #[test]
    fn a_failed_backup_fires_until_a_later_one_ends_well() {
        let backup = |at, ok| ResourceObservation {
            last_backup_ok: ok,
            ..guest(at, RunState::Running)
        };
        let (state, seen) = run(&[
            backup(0, None),
            backup(30, Some(false)),
            backup(60, None),
            backup(90, Some(true)),
        ]);
        assert_eq!(
            seen,
            [
                ("fired".into(), AlertRule::BackupFailed, Warning),
                ("cleared".into(), AlertRule::BackupFailed, Warning)
            ]
        );
        assert!(state.firing.is_empty());
    }

    /// A running guest observed at `at` whose latest successful backup ended at `ok_at`.
    fn backed_up(at: i64, ok_at: Option<i64>) -> ResourceObservation {
        ResourceObservation {
            last_backup_ok: ok_at.map(|_| true),
            last_backup_ok_at: ok_at.map(t),
            ..guest(at, RunState::Running)
        }
    }

    const HOUR: i64 = 3600;

    #[test]
    fn a_backup_older_than_the_window_fires_with_its_age_in_hours() {
        let (state, seen) = run(&[backed_up(48 * HOUR, Some(0))]);
        assert!(
            seen.is_empty(),
            "exactly 48 hours is within the window: {seen:?}"
        );
        assert!(state.firing.is_empty());
        let (state, seen) = run(&[
            backed_up(48 * HOUR + 1, Some(0)),
            backed_up(50 * HOUR + 1800, Some(0)),
        ]);
        assert_eq!(seen, [("fired".into(), AlertRule::BackupStale, Warning)]);
        let alert = &state.firing[&AlertRule::BackupStale];
        assert_eq!((alert.value, alert.threshold), (50.0, 48.0));
        assert_eq!(alert.key.as_str(), "vm:pve.lab:101:backup_stale");
        assert_eq!(
            alert.message,
            "the latest successful backup of vm vm:pve.lab:101 ended 50 hours ago, beyond the \
             48-hour window"
        );
        assert_eq!(level_of(&state, AlertRule::BackupFailed), None);
    }

    #[test]
    fn a_stale_backup_clears_after_a_new_successful_backup() {
        let (state, seen) = run(&[
            backed_up(49 * HOUR, Some(0)),
            backed_up(72 * HOUR, Some(0)),
            backed_up(73 * HOUR, Some(72 * HOUR + 600)),
        ]);
        assert_eq!(
            seen,
            [
                ("fired".into(), AlertRule::BackupStale, Warning),
                ("cleared".into(), AlertRule::BackupStale, Warning)
            ]
        );
        assert!(state.firing.is_empty());
    }

    #[test]
    fn no_backup_reading_neither_fires_nor_clears_a_stale_backup() {
        let (state, seen) = run(&[backed_up(0, None), backed_up(1000 * HOUR, None)]);
        assert!(
            seen.is_empty(),
            "never backed up, as far as Pulse can see: {seen:?}"
        );
        assert!(state.firing.is_empty());
        let (state, seen) = run(&[backed_up(49 * HOUR, Some(0)), backed_up(50 * HOUR, None)]);
        assert_eq!(seen, [("fired".into(), AlertRule::BackupStale, Warning)]);
        assert_eq!(level_of(&state, AlertRule::BackupStale), Some(Warning));
    }

    #[test]
    fn a_template_or_a_guest_in_maintenance_never_fires_backup_stale() {
        let template = ResourceObservation {
            template: true,
            ..backed_up(100 * HOUR, Some(0))
        };
        let (state, seen) = run(&[template]);
        assert!(seen.is_empty(), "template: {seen:?}");
        assert!(state.firing.is_empty());
        let maintained = |at, ok_at| ResourceObservation {
            in_maintenance: true,
            ..backed_up(at, ok_at)
        };
        let (_, seen) = run(&[maintained(100 * HOUR, Some(0))]);
        assert!(seen.is_empty(), "maintenance: {seen:?}");
        let (_, seen) = run(&[
            backed_up(49 * HOUR, Some(0)),
            maintained(60 * HOUR, Some(59 * HOUR)),
        ]);
        assert_eq!(
            seen,
            [
                ("fired".into(), AlertRule::BackupStale, Warning),
                ("cleared".into(), AlertRule::BackupStale, Warning)
            ],
            "a backup inside a maintenance window still clears"
        );
        // Only guests are backed up by vzdump.
        let node = ResourceObservation {
            last_backup_ok_at: Some(t(0)),
            ..ResourceObservation::new("node:pve.lab:pve1", ObservedResourceType::Node, t(0))
        };
        let (state, _) = AlertRuleEngine::default().evaluate(
            &ResourceAlertState::default(),
            &node,
            t(100 * HOUR),
        );
        assert!(state.firing.is_empty());
    }

    const STORE: &str = "storage:pbs.backup1:store1";

    /// A Proxmox Backup Server datastore observed at `at` with its failed jobs and the groups
    /// whose latest snapshot failed verification (`None`: not read).
    fn datastore(
        at: i64,
        failed_jobs: Option<&[&str]>,
        verify_failed_groups: Option<&[&str]>,
    ) -> ResourceObservation {
        let owned = |items: Option<&[&str]>| {
            items.map(|items| items.iter().map(|item| (*item).to_owned()).collect())
        };
        ResourceObservation {
            failed_jobs: owned(failed_jobs),
            verify_failed_groups: owned(verify_failed_groups),
            ..ResourceObservation::new(STORE, ObservedResourceType::Storage, t(at))
        }
    }

    const GC_FAILED: &str = "garbage collection (datastore store1): TASK ERROR: no space left";
    const VERIFY_FAILED: &str =
        "verify job v-3f2a (datastore store1): TASK ERROR: verification failed on 2 snapshots";

    #[test]
    fn a_failed_pbs_job_fires_keeps_without_a_reading_and_clears_when_every_job_ends_well() {
        let both = [GC_FAILED, VERIFY_FAILED];
        let (state, seen) = run(&[
            datastore(0, None, None),
            datastore(30, Some(&both), None),
            datastore(60, None, None),
        ]);
        assert_eq!(seen, [("fired".into(), AlertRule::PbsJobFailed, Warning)]);
        let alert = &state.firing[&AlertRule::PbsJobFailed];
        assert_eq!(
            (alert.level, alert.value, alert.threshold),
            (Warning, 2.0, 1.0)
        );
        assert_eq!(
            alert.key.as_str(),
            "storage:pbs.backup1:store1:pbs_job_failed"
        );
        assert_eq!(
            alert.message,
            format!(
                "storage {STORE}: 2 Proxmox Backup Server jobs failed their last run: \
                 {GC_FAILED}; {VERIFY_FAILED}"
            )
        );
        assert_eq!(
            level_of(&state, AlertRule::BackupVerifyFailed),
            None,
            "a failed verify job is not a group that failed verification"
        );
        let (state, seen) = run(&[
            datastore(0, Some(&both), None),
            datastore(30, Some(&[GC_FAILED]), None),
            datastore(60, Some(&[]), None),
        ]);
        assert_eq!(
            seen,
            [
                ("fired".into(), AlertRule::PbsJobFailed, Warning),
                ("cleared".into(), AlertRule::PbsJobFailed, Warning)
            ],
            "one job fewer is the same alert"
        );
        assert!(state.firing.is_empty());
        let (state, seen) = run(&[datastore(0, Some(&[]), None)]);
        assert!(seen.is_empty(), "every job ended well: {seen:?}");
        assert!(state.firing.is_empty());
    }

    #[test]
    fn a_firing_pbs_job_alert_names_the_jobs_of_the_latest_reading() {
        let (state, _) = run(&[
            datastore(0, Some(&[GC_FAILED, VERIFY_FAILED]), None),
            datastore(30, Some(&[VERIFY_FAILED]), None),
        ]);
        let alert = &state.firing[&AlertRule::PbsJobFailed];
        assert_eq!(alert.value, 1.0);
        assert_eq!(
            alert.message,
            format!(
                "storage {STORE}: 1 Proxmox Backup Server job failed its last run: {VERIFY_FAILED}"
            )
        );
        assert_eq!(alert.fired_at, t(0));
    }

    #[test]
    fn a_group_that_failed_verification_fires_keeps_without_a_reading_and_clears_when_none_do() {
        let groups = ["vm/100", "ns1:ct/105"];
        let (state, seen) = run(&[
            datastore(0, Some(&[]), None),
            datastore(30, Some(&[]), Some(&groups)),
            datastore(60, None, None),
        ]);
        assert_eq!(
            seen,
            [("fired".into(), AlertRule::BackupVerifyFailed, Warning)]
        );
        let alert = &state.firing[&AlertRule::BackupVerifyFailed];
        assert_eq!(
            (alert.level, alert.value, alert.threshold),
            (Warning, 2.0, 1.0)
        );
        assert_eq!(
            alert.key.as_str(),
            "storage:pbs.backup1:store1:backup_verify_failed"
        );
        assert_eq!(
            alert.message,
            format!(
                "the latest backup of vm/100, ns1:ct/105 on storage {STORE} failed verification"
            )
        );
        assert_eq!(level_of(&state, AlertRule::PbsJobFailed), None);
        let (state, seen) = run(&[
            datastore(0, None, Some(&groups)),
            datastore(30, None, Some(&[])),
        ]);
        assert_eq!(
            seen,
            [
                ("fired".into(), AlertRule::BackupVerifyFailed, Warning),
                ("cleared".into(), AlertRule::BackupVerifyFailed, Warning)
            ]
        );
        assert!(state.firing.is_empty());
        let (_, seen) = run(&[datastore(0, None, None), datastore(30, None, Some(&[]))]);
        assert!(seen.is_empty(), "never read, then none failed: {seen:?}");
    }

    #[test]
    fn a_long_failure_listing_is_cut_so_the_message_fits_the_alerts_table() {
        let id = format!("storage:pbs.backup1:{}", "s".repeat(1000));
        let groups: Vec<String> = (0..1000).map(|vmid| format!("ns1:vm/{vmid}")).collect();
        let long_job = format!(
            "sync job s-1 (datastore store1): TASK ERROR: {}",
            "é".repeat(2000)
        );
        let o = ResourceObservation {
            failed_jobs: Some(vec![long_job.clone(), VERIFY_FAILED.to_owned()]),
            verify_failed_groups: Some(groups),
            ..ResourceObservation::new(&id, ObservedResourceType::Storage, t(0))
        };
        let (state, _) = run(&[o]);
        let verify = &state.firing[&AlertRule::BackupVerifyFailed];
        assert_eq!(verify.value, 1000.0, "the value counts every group");
        assert!(
            verify.message.chars().count() <= 4096,
            "{}",
            verify.message.len()
        );
        assert!(
            verify
                .message
                .starts_with("the latest backup of ns1:vm/0, ns1:vm/1, ")
        );
        assert!(
            verify.message.contains(" more on storage "),
            "{}",
            verify.message
        );
        let jobs = &state.firing[&AlertRule::PbsJobFailed];
        assert!(jobs.message.chars().count() <= 4096);
        assert!(
            jobs.message.contains("é…; verify job v-3f2a"),
            "a long line is clipped on a character boundary: {}",
            jobs.message
        );
        assert!(!jobs.message.contains(&long_job));
    }

    #[test]
    fn an_observation_stored_before_the_pbs_rules_reads_without_their_readings() {
        let mut stored = serde_json::to_value(datastore(0, Some(&[GC_FAILED]), Some(&[]))).unwrap();
        let fields = stored.as_object_mut().unwrap();
        fields.remove("failed_jobs");
        fields.remove("verify_failed_groups");
        let back: ResourceObservation = serde_json::from_value(stored).unwrap();
        assert_eq!(back, datastore(0, None, None));
    }

    #[test]
    fn a_config_stored_before_backup_stale_reads_the_48_hour_window() {
        let mut stored = serde_json::to_value(AlertRuleConfig::default()).unwrap();
        stored
            .as_object_mut()
            .unwrap()
            .remove("backup_max_age_hours");
        let config: AlertRuleConfig = serde_json::from_value(stored).unwrap();
        assert_eq!(config.backup_max_age_hours, 48);
    }

    #[test]
    fn a_state_stored_before_the_platform_rules_still_reads() {
        let old = r#"{"firing": {}, "restart_history": {"last_count": null, "restarts": []}}"#;
        let state: ResourceAlertState = serde_json::from_str(old).unwrap();
        assert_eq!(state.last_run_state, None);
        assert_eq!(state.locked_since, None);
    }

    #[test]
    fn ceph_health_warns_errs_and_clears_and_explains_its_unhealthiness() {
        let engine = AlertRuleEngine::default();
        let now = Utc::now();
        let at = |health: Option<&str>| {
            let mut obs = ResourceObservation::new(
                "storage:pve.lab:ceph",
                ObservedResourceType::Storage,
                now,
            );
            // The connector reports Ceph unhealthy whenever it reads a word other than
            // HEALTH_OK, and leaves health unknown when it read none.
            obs.health = health.map(|_| HealthState::Unhealthy);
            obs.ceph_health = health.map(str::to_owned);
            obs
        };
        let (state, seen) = engine.evaluate(
            &ResourceAlertState::default(),
            &at(Some("HEALTH_WARN")),
            now,
        );
        assert_eq!(
            state.firing[&AlertRule::CephDegraded].level,
            AlertLevel::Warning
        );
        assert!(
            seen.iter()
                .all(|t| t.alert().rule == AlertRule::CephDegraded),
            "Ceph's own rule, no second unhealthy: {seen:?}"
        );
        let (state, _) = engine.evaluate(&state, &at(Some("unreachable")), now);
        let alert = &state.firing[&AlertRule::CephDegraded];
        assert_eq!(alert.level, AlertLevel::Critical);
        assert!(
            alert.message.contains("does not answer"),
            "{}",
            alert.message
        );
        let (state, _) = engine.evaluate(&state, &at(None), now);
        assert!(
            state.firing.contains_key(&AlertRule::CephDegraded),
            "no reading keeps"
        );
        let (state, seen) = engine.evaluate(&state, &at(Some("HEALTH_ERR")), now);
        assert_eq!(
            state.firing[&AlertRule::CephDegraded].level,
            AlertLevel::Critical
        );
        assert!(seen.is_empty(), "{seen:?}");
        let (state, seen) = engine.evaluate(&state, &at(Some("HEALTH_OK")), now);
        assert!(state.firing.is_empty(), "{state:?}");
        assert_eq!(seen.len(), 1);
    }
}
