//! The readiness gate and the `GET /api/ai/patrol/status` projection.
//!
//! `runtime_state` comes from live inputs, first match wins:
//!
//! | state | when |
//! |---|---|
//! | `disabled` | Patrol is switched off for the tenant (`blocked_cause` `patrol_disabled`, with how to switch it on) |
//! | `unavailable` | no runner is available to take Patrol jobs |
//! | `running` | a run is in flight (`current_run_id` names it) |
//! | `blocked` | a readiness check failed: runs are refused before any model call (a used-up spend budget too: `blocked_cause` `budget_exceeded`, `blocked_until` its reset) |
//! | `active` | otherwise |
//!
//! `last_patrol_at` is the last *successful full* run; scoped and verification runs only move
//! `last_activity_at`.
//!
//! `findings_count` is the number of the tenant's active findings of every severity (snoozed ones
//! whose snooze ran out included), `active_findings` the same by severity. The health verdict,
//! first match wins:
//!
//! | `healthy` | `health_basis` | when |
//! |---|---|---|
//! | `false` | `active_findings` | a `warning` or `critical` finding is active, whatever any run said |
//! | `true` | `recent_full_run` | the most recent full run succeeded within the health window |
//! | null | `recent_full_run_errored` | the most recent full run, within the window, ended in error |
//! | null | `no_recent_full_run` | no full run finished within the window |
//!
//! `info` and `watch` findings are counted but do not deny the all-clear: they are notes, not
//! problems. An all-clear is never given without a recent successful full run as evidence.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::run::{RunId, RunStatus, RunType};
use crate::finding::SeverityCounts;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RuntimeState {
    Unavailable,
    Disabled,
    Running,
    Blocked,
    Active,
}

/// Stable machine ids of the readiness checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReadinessCheckId {
    /// Patrol mode and settings are complete.
    Configuration,
    /// A provider is configured and reachable.
    Provider,
    /// A Patrol model is selected.
    Model,
    /// Settings can be saved.
    SettingsPersistence,
    /// The selected model makes tool calls (last preflight).
    ToolCalling,
    /// The tenant's spend budgets have room (see [`super::budget`]).
    Budget,
    /// Every platform connection (Proxmox VE) can be read. A warning, never a block: Patrol
    /// runs, but sees nothing of a connection it cannot read, so no health verdict is given.
    Connections,
}

impl ReadinessCheckId {
    pub const ALL: [ReadinessCheckId; 7] = [
        Self::Configuration,
        Self::Provider,
        Self::Model,
        Self::SettingsPersistence,
        Self::ToolCalling,
        Self::Budget,
        Self::Connections,
    ];

    /// The cause recorded when this check fails without a more specific one.
    pub fn default_cause(self) -> BlockedCause {
        match self {
            Self::Configuration => BlockedCause::ConfigurationIncomplete,
            Self::Provider => BlockedCause::ProviderNotConfigured,
            Self::Model => BlockedCause::ModelNotSelected,
            Self::SettingsPersistence => BlockedCause::SettingsNotPersisted,
            Self::ToolCalling => BlockedCause::ModelWithoutTools,
            Self::Budget => BlockedCause::BudgetExceeded,
            Self::Connections => BlockedCause::ConnectionUnreadable,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    Pass,
    Warning,
    Fail,
    NotAssessed,
}

impl CheckStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Warning => "warning",
            Self::Fail => "fail",
            Self::NotAssessed => "not_assessed",
        }
    }
}

/// Why the readiness gate blocks Patrol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum BlockedCause {
    ConfigurationIncomplete,
    ProviderNotConfigured,
    ProviderUnreachable,
    ProviderAuth,
    ProviderQuota,
    ModelNotSelected,
    ModelWithoutTools,
    SettingsNotPersisted,
    /// A tenant spend budget is used up until its period resets (the run cause
    /// [`ErrorCause::BudgetExceeded`](super::run::ErrorCause::BudgetExceeded)).
    BudgetExceeded,
    /// The tenant switched Patrol off (`patrol_enabled: false`); shown with `runtime_state`
    /// `disabled`, never a readiness check's cause.
    PatrolDisabled,
    /// A platform connection cannot be read (the `connections` check, which only warns).
    ConnectionUnreadable,
}

/// Why a switched-off Patrol does nothing, and how to switch it on.
pub const PATROL_DISABLED_REASON: &str = "Patrol is switched off for this tenant, so no run \
     starts (scheduled, alert-triggered or requested); turn it on with PUT /api/settings/ai \
     {\"patrol_enabled\": true}";

/// One server-authored readiness check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ReadinessCheck {
    pub id: ReadinessCheckId,
    pub status: CheckStatus,
    pub message: String,
    /// More specific than [`ReadinessCheckId::default_cause`], when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<BlockedCause>,
    /// When a failing check frees itself (a spend budget's period boundary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resets_at: Option<DateTime<Utc>>,
}

/// The gate's refusal: the first failing check, in the stable check order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("patrol is blocked: {reason}")]
pub struct Blocked {
    pub check: ReadinessCheckId,
    pub reason: String,
    pub cause: BlockedCause,
    /// When the block lifts by itself, if it does (a spend budget's reset).
    pub resets_at: Option<DateTime<Utc>>,
}

/// The readiness gate: a run (full or scoped) may call the model unless a check is known to
/// fail. Warnings and unassessed checks do not block.
pub fn readiness_gate(checks: &[ReadinessCheck]) -> Result<(), Blocked> {
    let failing = ReadinessCheckId::ALL.iter().find_map(|id| {
        checks
            .iter()
            .find(|c| c.id == *id && c.status == CheckStatus::Fail)
    });
    match failing {
        Some(check) => Err(Blocked {
            check: check.id,
            reason: check.message.clone(),
            cause: check.cause.unwrap_or(check.id.default_cause()),
            resets_at: check.resets_at,
        }),
        None => Ok(()),
    }
}

/// The run in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentRun {
    pub id: RunId,
    pub run_type: RunType,
}

/// A full run that reached a terminal status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FullRunSummary {
    pub id: RunId,
    pub status: RunStatus,
    pub completed_at: DateTime<Utc>,
    pub duration_ms: u64,
    pub resources_checked: u32,
    pub error_count: u32,
}

/// Everything the status is derived from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusInputs {
    pub now: DateTime<Utc>,
    pub enabled: bool,
    pub runner_available: bool,
    pub readiness: Vec<ReadinessCheck>,
    pub current_run: Option<CurrentRun>,
    /// The most recent terminal full run, whatever its status.
    pub last_full_run: Option<FullRunSummary>,
    /// When the most recent successful full run completed.
    pub last_successful_full_at: Option<DateTime<Utc>>,
    /// The most recent terminal run of any type.
    pub last_activity_at: Option<DateTime<Utc>>,
    pub next_patrol_at: Option<DateTime<Utc>>,
    pub interval_ms: u64,
    /// Active findings now, by severity.
    pub active_findings: SeverityCounts,
    pub queued_scoped_runs: u32,
    /// How old the last full run may be for a health verdict.
    pub health_window_ms: u64,
}

/// Why there is (or is not) a health verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum HealthBasis {
    /// A `warning` or `critical` finding is active: not healthy, whatever the last run said.
    ActiveFindings,
    /// A recent full run succeeded.
    RecentFullRun,
    /// No full run finished within the health window (scoped runs do not count).
    NoRecentFullRun,
    /// The most recent full run, within the window, ended in error.
    RecentFullRunErrored,
    /// A platform connection cannot be read: what it holds is not seen, so no verdict covers
    /// it (the `connections` readiness check names it).
    ConnectionUnreadable,
}

/// `GET /api/ai/patrol/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct PatrolStatus {
    pub runtime_state: RuntimeState,
    pub enabled: bool,
    pub running: bool,
    pub current_run_id: Option<RunId>,
    pub current_run_type: Option<RunType>,
    pub last_patrol_at: Option<DateTime<Utc>>,
    pub last_activity_at: Option<DateTime<Utc>>,
    pub next_patrol_at: Option<DateTime<Utc>>,
    pub interval_ms: u64,
    pub last_duration_ms: Option<u64>,
    pub resources_checked: Option<u32>,
    /// Active findings of every severity (`active_findings.total`).
    pub findings_count: u32,
    /// Active findings by severity.
    pub active_findings: SeverityCounts,
    pub error_count: Option<u32>,
    pub queued_scoped_runs: u32,
    pub healthy: Option<bool>,
    pub health_basis: HealthBasis,
    pub blocked_reason: Option<String>,
    pub blocked_cause: Option<BlockedCause>,
    /// When the block lifts by itself (RFC 3339): the reset of a used-up spend budget.
    pub blocked_until: Option<DateTime<Utc>>,
    pub readiness_checks: Vec<ReadinessCheck>,
}

/// Derives the status.
pub fn project(inputs: &StatusInputs) -> PatrolStatus {
    let blocked = readiness_gate(&inputs.readiness).err();
    let runtime_state = if !inputs.enabled {
        RuntimeState::Disabled
    } else if !inputs.runner_available {
        RuntimeState::Unavailable
    } else if inputs.current_run.is_some() {
        RuntimeState::Running
    } else if blocked.is_some() {
        RuntimeState::Blocked
    } else {
        RuntimeState::Active
    };
    let window = Duration::milliseconds(inputs.health_window_ms.min(i64::MAX as u64) as i64);
    let recent_full = inputs
        .last_full_run
        .as_ref()
        .filter(|run| inputs.now - run.completed_at <= window);
    let (healthy, health_basis) = match recent_full {
        _ if inputs.active_findings.alarming() > 0 => (Some(false), HealthBasis::ActiveFindings),
        Some(run) if run.status.is_success() => (Some(true), HealthBasis::RecentFullRun),
        Some(_) => (None, HealthBasis::RecentFullRunErrored),
        None => (None, HealthBasis::NoRecentFullRun),
    };
    // No all-clear for what cannot be seen.
    let unreadable = inputs
        .readiness
        .iter()
        .any(|c| c.id == ReadinessCheckId::Connections && c.status == CheckStatus::Warning);
    let (healthy, health_basis) = match (healthy, unreadable) {
        (Some(true), true) => (None, HealthBasis::ConnectionUnreadable),
        other => (other.0, health_basis),
    };
    let last_activity_at = match (inputs.last_activity_at, inputs.last_successful_full_at) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let mut readiness_checks = inputs.readiness.clone();
    readiness_checks.sort_by_key(|c| c.id);
    let (blocked_reason, blocked_cause, blocked_until) = match (&blocked, inputs.enabled) {
        (_, false) => (
            Some(PATROL_DISABLED_REASON.to_owned()),
            Some(BlockedCause::PatrolDisabled),
            None,
        ),
        (Some(b), true) => (Some(b.reason.clone()), Some(b.cause), b.resets_at),
        (None, true) => (None, None, None),
    };
    PatrolStatus {
        runtime_state,
        enabled: inputs.enabled,
        running: inputs.current_run.is_some(),
        current_run_id: inputs.current_run.as_ref().map(|r| r.id),
        current_run_type: inputs.current_run.as_ref().map(|r| r.run_type),
        last_patrol_at: inputs.last_successful_full_at,
        last_activity_at,
        next_patrol_at: if inputs.enabled {
            inputs.next_patrol_at
        } else {
            None
        },
        interval_ms: inputs.interval_ms,
        last_duration_ms: inputs.last_full_run.as_ref().map(|r| r.duration_ms),
        resources_checked: inputs.last_full_run.as_ref().map(|r| r.resources_checked),
        findings_count: inputs.active_findings.total,
        active_findings: inputs.active_findings,
        error_count: inputs.last_full_run.as_ref().map(|r| r.error_count),
        queued_scoped_runs: inputs.queued_scoped_runs,
        healthy,
        health_basis,
        blocked_reason,
        blocked_cause,
        blocked_until,
        readiness_checks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::Severity;
    use chrono::TimeZone;
    use uuid::Uuid;

    #[test]
    fn check_status_names_are_the_wire_names() {
        for status in [
            CheckStatus::Pass,
            CheckStatus::Warning,
            CheckStatus::Fail,
            CheckStatus::NotAssessed,
        ] {
            assert_eq!(
                serde_json::to_string(&status).unwrap(),
                format!("\"{}\"", status.as_str())
            );
        }
    }

    fn t(minutes: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap() + Duration::minutes(minutes)
    }

    fn pass(id: ReadinessCheckId) -> ReadinessCheck {
        ReadinessCheck {
            id,
            status: CheckStatus::Pass,
            message: "ok".to_owned(),
            cause: None,
            resets_at: None,
        }
    }

    fn all_pass() -> Vec<ReadinessCheck> {
        ReadinessCheckId::ALL.map(pass).to_vec()
    }

    fn full_run(status: RunStatus, completed_minutes: i64) -> FullRunSummary {
        FullRunSummary {
            id: RunId::from_uuid(Uuid::from_u128(1)),
            status,
            completed_at: t(completed_minutes),
            duration_ms: 42_000,
            resources_checked: 12,
            error_count: u32::from(status == RunStatus::Error),
        }
    }

    fn base() -> StatusInputs {
        StatusInputs {
            now: t(0),
            enabled: true,
            runner_available: true,
            readiness: all_pass(),
            current_run: None,
            last_full_run: Some(full_run(RunStatus::Healthy, -3)),
            last_successful_full_at: Some(t(-3)),
            last_activity_at: Some(t(-1)),
            next_patrol_at: Some(t(2)),
            interval_ms: 300_000,
            active_findings: SeverityCounts::default(),
            queued_scoped_runs: 0,
            health_window_ms: 3_600_000,
        }
    }

    fn provider_missing() -> Vec<ReadinessCheck> {
        let mut checks = all_pass();
        checks[1] = ReadinessCheck {
            id: ReadinessCheckId::Provider,
            status: CheckStatus::Fail,
            message: "no provider is configured: open Pulse Intelligence > Provider & Models"
                .to_owned(),
            cause: None,
            resets_at: None,
        };
        checks
    }

    #[test]
    fn runtime_state_precedence() {
        type Tweak = Box<dyn Fn(&mut StatusInputs)>;
        let cases: Vec<(Tweak, RuntimeState)> = vec![
            (Box::new(|_| {}), RuntimeState::Active),
            (
                Box::new(|i| i.readiness = provider_missing()),
                RuntimeState::Blocked,
            ),
            (
                Box::new(|i| {
                    i.readiness = provider_missing();
                    i.current_run = Some(CurrentRun {
                        id: RunId::from_uuid(Uuid::from_u128(9)),
                        run_type: RunType::Scoped,
                    });
                }),
                RuntimeState::Running,
            ),
            (
                Box::new(|i| {
                    i.runner_available = false;
                    i.current_run = Some(CurrentRun {
                        id: RunId::from_uuid(Uuid::from_u128(9)),
                        run_type: RunType::Full,
                    });
                }),
                RuntimeState::Unavailable,
            ),
            (
                Box::new(|i| {
                    i.enabled = false;
                    i.runner_available = false;
                    i.readiness = provider_missing();
                }),
                RuntimeState::Disabled,
            ),
        ];
        for (i, (tweak, want)) in cases.into_iter().enumerate() {
            let mut inputs = base();
            tweak(&mut inputs);
            assert_eq!(project(&inputs).runtime_state, want, "case {i}");
        }
    }

    #[test]
    fn gate_reports_the_first_failing_check_in_stable_order() {
        assert_eq!(readiness_gate(&all_pass()), Ok(()));
        let mut checks = all_pass();
        checks[4] = ReadinessCheck {
            id: ReadinessCheckId::ToolCalling,
            status: CheckStatus::Fail,
            message: "model makes no tool calls".to_owned(),
            cause: None,
            resets_at: None,
        };
        checks[2] = ReadinessCheck {
            id: ReadinessCheckId::Model,
            status: CheckStatus::Fail,
            message: "no model".to_owned(),
            cause: None,
            resets_at: None,
        };
        checks.reverse();
        let blocked = readiness_gate(&checks).unwrap_err();
        assert_eq!(blocked.check, ReadinessCheckId::Model);
        assert_eq!(blocked.cause, BlockedCause::ModelNotSelected);
        // A warning or an unassessed check never blocks.
        let mut checks = all_pass();
        checks[0].status = CheckStatus::Warning;
        checks[4].status = CheckStatus::NotAssessed;
        assert_eq!(readiness_gate(&checks), Ok(()));
        // A specific cause wins over the check's default.
        let mut checks = provider_missing();
        checks[1].cause = Some(BlockedCause::ProviderAuth);
        assert_eq!(
            readiness_gate(&checks).unwrap_err().cause,
            BlockedCause::ProviderAuth
        );
    }

    #[test]
    fn no_health_verdict_without_a_recent_successful_full_run() {
        let verdict = |tweak: &dyn Fn(&mut StatusInputs)| {
            let mut inputs = base();
            tweak(&mut inputs);
            let status = project(&inputs);
            (status.healthy, status.health_basis)
        };
        assert_eq!(verdict(&|_| {}), (Some(true), HealthBasis::RecentFullRun));
        // A platform connection that cannot be read denies the all-clear (what it holds is not
        // seen), never a "not healthy" from active findings, and never blocks the run.
        let unreadable = |i: &mut StatusInputs| {
            for c in &mut i.readiness {
                if c.id == ReadinessCheckId::Connections {
                    c.status = CheckStatus::Warning;
                }
            }
        };
        assert_eq!(
            verdict(&unreadable),
            (None, HealthBasis::ConnectionUnreadable)
        );
        let mut inputs = base();
        unreadable(&mut inputs);
        assert_eq!(project(&inputs).blocked_reason, None);
        let with = |severity: Severity, n: u32| {
            let mut counts = SeverityCounts::default();
            counts.add_n(severity, n);
            counts
        };
        // An active warning or critical finding denies the all-clear, whatever the runs said.
        assert_eq!(
            verdict(&|i| i.active_findings = with(Severity::Warning, 2)),
            (Some(false), HealthBasis::ActiveFindings)
        );
        assert_eq!(
            verdict(&|i| {
                unreadable(i);
                i.active_findings = with(Severity::Warning, 1);
            }),
            (Some(false), HealthBasis::ActiveFindings)
        );
        assert_eq!(
            verdict(&|i| {
                i.active_findings = with(Severity::Critical, 1);
                i.last_full_run = None;
                i.last_successful_full_at = None;
            }),
            (Some(false), HealthBasis::ActiveFindings)
        );
        assert_eq!(
            verdict(&|i| {
                i.active_findings = with(Severity::Warning, 1);
                i.last_full_run = Some(full_run(RunStatus::Error, -2));
            }),
            (Some(false), HealthBasis::ActiveFindings)
        );
        // Notes (info, watch) are counted but do not deny it.
        assert_eq!(
            verdict(&|i| {
                i.active_findings = with(Severity::Info, 3).merged(with(Severity::Watch, 1))
            }),
            (Some(true), HealthBasis::RecentFullRun)
        );
        // ... nor give one without a full run.
        assert_eq!(
            verdict(&|i| {
                i.active_findings = with(Severity::Watch, 1);
                i.last_full_run = None;
                i.last_successful_full_at = None;
            }),
            (None, HealthBasis::NoRecentFullRun)
        );
        // Only scoped activity recently: the old full run is outside the window.
        assert_eq!(
            verdict(&|i| {
                i.last_full_run = Some(full_run(RunStatus::Healthy, -120));
                i.last_successful_full_at = Some(t(-120));
                i.last_activity_at = Some(t(-1));
            }),
            (None, HealthBasis::NoRecentFullRun)
        );
        assert_eq!(
            verdict(&|i| {
                i.last_full_run = None;
                i.last_successful_full_at = None;
            }),
            (None, HealthBasis::NoRecentFullRun)
        );
        // The most recent full run errored, even with an older success on record.
        assert_eq!(
            verdict(&|i| i.last_full_run = Some(full_run(RunStatus::Error, -2))),
            (None, HealthBasis::RecentFullRunErrored)
        );
        assert_eq!(
            verdict(&|i| i.last_full_run = Some(full_run(RunStatus::IssuesFound, -2))),
            (Some(true), HealthBasis::RecentFullRun)
        );
    }

    #[test]
    fn the_count_is_every_active_finding_and_healthy_never_hides_a_warning() {
        let runs = [
            None,
            Some(full_run(RunStatus::Healthy, -3)),
            Some(full_run(RunStatus::IssuesFound, -3)),
            Some(full_run(RunStatus::Error, -3)),
            Some(full_run(RunStatus::Healthy, -600)),
        ];
        for run in runs {
            for bits in 0..16u32 {
                let mut counts = SeverityCounts::default();
                for (i, severity) in Severity::ALL.into_iter().enumerate() {
                    counts.add_n(severity, (bits >> i) & 1);
                }
                let mut inputs = base();
                inputs.last_full_run = run.clone();
                inputs.active_findings = counts;
                let status = project(&inputs);
                assert_eq!(status.findings_count, counts.total);
                assert_eq!(status.active_findings, counts);
                let alarming = counts.warning + counts.critical;
                if alarming > 0 {
                    assert_eq!(status.healthy, Some(false), "{counts:?} {run:?}");
                }
                if status.healthy == Some(true) {
                    assert_eq!(alarming, 0);
                    assert_eq!(status.health_basis, HealthBasis::RecentFullRun);
                }
            }
        }
    }

    #[test]
    fn last_patrol_at_counts_full_runs_only() {
        let mut inputs = base();
        inputs.last_successful_full_at = Some(t(-30));
        inputs.last_activity_at = Some(t(-1));
        let status = project(&inputs);
        assert_eq!(status.last_patrol_at, Some(t(-30)));
        assert_eq!(status.last_activity_at, Some(t(-1)));
        inputs.last_activity_at = None;
        assert_eq!(project(&inputs).last_activity_at, Some(t(-30)));
    }

    #[test]
    fn status_wire_shape_active() {
        insta::assert_json_snapshot!("patrol_status_active", project(&base()));
    }

    #[test]
    fn status_wire_shape_blocked() {
        let mut inputs = base();
        inputs.readiness = provider_missing();
        inputs.last_full_run = Some(full_run(RunStatus::Error, -2));
        inputs.queued_scoped_runs = 1;
        insta::assert_json_snapshot!("patrol_status_blocked", project(&inputs));
    }

    #[test]
    fn status_wire_shape_running_scoped_only() {
        let mut inputs = base();
        inputs.current_run = Some(CurrentRun {
            id: RunId::from_uuid(Uuid::from_u128(0x0190_f5a2_0000_7000_8000_0000_0000_0002)),
            run_type: RunType::Scoped,
        });
        inputs.last_full_run = None;
        inputs.last_successful_full_at = None;
        insta::assert_json_snapshot!("patrol_status_running_scoped_only", project(&inputs));
    }

    #[test]
    fn status_wire_shape_disabled() {
        let mut inputs = base();
        inputs.enabled = false;
        inputs.readiness = provider_missing();
        let status = project(&inputs);
        // The switch is the cause shown, not the readiness check that also fails.
        assert_eq!(status.blocked_cause, Some(BlockedCause::PatrolDisabled));
        assert_eq!(
            status.blocked_reason.as_deref(),
            Some(PATROL_DISABLED_REASON)
        );
        assert_eq!(status.blocked_until, None);
        assert_eq!(status.next_patrol_at, None);
        insta::assert_json_snapshot!("patrol_status_disabled", status);
    }

    #[test]
    fn status_wire_shape_budget_exceeded() {
        let mut inputs = base();
        inputs.readiness[5] = ReadinessCheck {
            id: ReadinessCheckId::Budget,
            status: CheckStatus::Fail,
            message: "the daily token budget is used up (1200 of 1000 tokens); it resets at \
                      2026-03-02T00:00:00Z; wait for the reset or raise budgets.daily_tokens with \
                      PUT /api/settings/ai"
                .to_owned(),
            cause: Some(BlockedCause::BudgetExceeded),
            resets_at: Some(Utc.with_ymd_and_hms(2026, 3, 2, 0, 0, 0).unwrap()),
        };
        let status = project(&inputs);
        assert_eq!(status.runtime_state, RuntimeState::Blocked);
        assert_eq!(status.blocked_cause, Some(BlockedCause::BudgetExceeded));
        assert_eq!(
            status.blocked_until,
            Some(Utc.with_ymd_and_hms(2026, 3, 2, 0, 0, 0).unwrap())
        );
        insta::assert_json_snapshot!("patrol_status_budget_exceeded", status);
    }
}
