//! Whether a firing alert starts a scoped Patrol run (`AlertTriggersInvestigation`), and the
//! scoped request framed on the alert's payload.
//!
//! The policy applies, in order: the master enable, the minimum-severity floor (default
//! critical-only) and the optional alert-type allowlist (absent or empty = every type). The level
//! is read as it arrives on the wire; a level this build does not know counts as critical so an
//! alert is never silently dropped. The check runs before enqueue, never inside the run.
//!
//! The framed request carries resource identity and the breach payload as context only; the alert
//! itself is never turned into a finding.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::run::TriggerReason;
use super::scope::{RequestedScope, RunRequest, ScopedRequest};
use crate::alert_rules::{Alert, AlertLevel, AlertTransition};
use crate::resource::truncate_chars;

/// The tenant's alert-trigger policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct AlertTriggerPolicy {
    pub enabled: bool,
    #[serde(default = "default_min_severity")]
    pub min_severity: AlertLevel,
    /// Alert types that may trigger a run; `None` or empty admits every type.
    #[serde(default)]
    pub alert_types: Option<BTreeSet<String>>,
}

fn default_min_severity() -> AlertLevel {
    AlertLevel::Critical
}

impl Default for AlertTriggerPolicy {
    fn default() -> Self {
        Self {
            enabled: true,
            min_severity: default_min_severity(),
            alert_types: None,
        }
    }
}

/// An alert level as it arrives on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(transparent)]
pub struct WireAlertLevel(pub String);

impl WireAlertLevel {
    /// The level the policy compares; anything unknown is critical.
    pub fn effective(&self) -> AlertLevel {
        match self.0.trim().to_ascii_lowercase().as_str() {
            "warning" => AlertLevel::Warning,
            _ => AlertLevel::Critical,
        }
    }
}

impl From<AlertLevel> for WireAlertLevel {
    fn from(level: AlertLevel) -> Self {
        Self(
            match level {
                AlertLevel::Warning => "warning",
                AlertLevel::Critical => "critical",
            }
            .to_owned(),
        )
    }
}

/// The breach payload an alert-triggered run is framed on: type, level, value, threshold,
/// resource and message, plus the alert identifier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct AlertContext {
    pub alert_identifier: String,
    #[serde(rename = "type")]
    pub alert_type: String,
    pub level: WireAlertLevel,
    pub value: f64,
    pub threshold: f64,
    pub resource_id: String,
    pub message: String,
}

impl From<&Alert> for AlertContext {
    fn from(alert: &Alert) -> Self {
        Self {
            alert_identifier: alert.key.as_str().to_owned(),
            alert_type: alert.rule.as_str().to_owned(),
            level: alert.level.into(),
            value: alert.value,
            threshold: alert.threshold,
            resource_id: alert.resource_id.clone(),
            message: alert.message.clone(),
        }
    }
}

/// The policy's answer for one alert.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    Admit,
    Reject { reason: RejectReason },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RejectReason {
    /// Alert-triggered Patrol is switched off for the tenant.
    Disabled,
    /// The alert's level is below the policy's minimum severity.
    BelowMinSeverity,
    /// The alert's type is not on the allowlist.
    TypeNotAllowed,
    /// The transition does not start or escalate a breach (a clear, or a level drop).
    NotFiring,
}

/// Applies the policy to one alert payload.
pub fn admits(policy: &AlertTriggerPolicy, alert: &AlertContext) -> Decision {
    if !policy.enabled {
        return Decision::Reject {
            reason: RejectReason::Disabled,
        };
    }
    if alert.level.effective() < policy.min_severity {
        return Decision::Reject {
            reason: RejectReason::BelowMinSeverity,
        };
    }
    if let Some(types) = &policy.alert_types {
        if !types.is_empty() && !types.contains(alert.alert_type.as_str()) {
            return Decision::Reject {
                reason: RejectReason::TypeNotAllowed,
            };
        }
    }
    Decision::Admit
}

/// Applies the policy to an alert lifecycle transition: a fired alert is judged on its level; a
/// level change triggers only when it raises the alert past the floor it was below; a clear never
/// triggers.
pub fn admits_transition(policy: &AlertTriggerPolicy, transition: &AlertTransition) -> Decision {
    match transition {
        AlertTransition::Fired { alert } => admits(policy, &AlertContext::from(alert)),
        AlertTransition::LevelChanged { from, alert } => {
            if *from >= policy.min_severity || alert.level <= *from {
                Decision::Reject {
                    reason: RejectReason::NotFiring,
                }
            } else {
                admits(policy, &AlertContext::from(alert))
            }
        }
        AlertTransition::Cleared { .. } => Decision::Reject {
            reason: RejectReason::NotFiring,
        },
    }
}

/// The scoped run an admitted alert starts: trigger `alert_fired`, the alert's resource as the
/// scope, and the breach payload as context.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertScopedRun {
    pub trigger_reason: TriggerReason,
    pub request: ScopedRequest,
    pub alert: AlertContext,
}

/// Frames the scoped run on the alert payload. Fields are cut to the run request's limits.
pub fn scoped_run_for(alert: &AlertContext) -> AlertScopedRun {
    let context = format!(
        "alert {kind} ({level}) on {resource}: value {value} against threshold {threshold}: {message}",
        kind = alert.alert_type,
        level = alert.level.0,
        resource = alert.resource_id,
        value = alert.value,
        threshold = alert.threshold,
        message = alert.message,
    );
    let context: String = context
        .chars()
        .map(|c| if c.is_control() && c != '\n' { ' ' } else { c })
        .collect();
    AlertScopedRun {
        trigger_reason: TriggerReason::AlertFired,
        request: ScopedRequest {
            scope: RequestedScope {
                resource_ids: vec![truncate_chars(
                    &alert.resource_id,
                    RunRequest::MAX_RESOURCE_ID_CHARS,
                )],
                resource_types: Vec::new(),
            },
            alert_identifier: Some(truncate_chars(
                &alert.alert_identifier,
                RunRequest::MAX_ALERT_IDENTIFIER_CHARS,
            )),
            alert_type: Some(truncate_chars(
                &alert.alert_type,
                RunRequest::MAX_ALERT_TYPE_CHARS,
            )),
            context: Some(truncate_chars(&context, RunRequest::MAX_CONTEXT_CHARS)),
        },
        alert: alert.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert_rules::{AlertKey, AlertRule};
    use chrono::{TimeZone, Utc};

    fn alert(rule: AlertRule, level: AlertLevel) -> Alert {
        let at = Utc.with_ymd_and_hms(2026, 3, 1, 10, 0, 0).unwrap();
        Alert {
            key: AlertKey::new("app-container:h1:abc", rule),
            rule,
            level,
            value: 93.5,
            threshold: 90.0,
            resource_id: "app-container:h1:abc".to_owned(),
            message: "memory usage 93.5% >= 90%".to_owned(),
            fired_at: at,
            updated_at: at,
        }
    }

    fn ctx(kind: &str, level: &str) -> AlertContext {
        AlertContext {
            alert_identifier: format!("host:h1:{kind}"),
            alert_type: kind.to_owned(),
            level: WireAlertLevel(level.to_owned()),
            value: 1.0,
            threshold: 1.0,
            resource_id: "host:h1".to_owned(),
            message: "m".to_owned(),
        }
    }

    const REJECT_SEVERITY: Decision = Decision::Reject {
        reason: RejectReason::BelowMinSeverity,
    };

    #[test]
    fn default_policy_admits_critical_only() {
        let policy = AlertTriggerPolicy::default();
        assert_eq!(policy.min_severity, AlertLevel::Critical);
        assert_eq!(
            admits(&policy, &ctx("memory_usage", "critical")),
            Decision::Admit
        );
        assert_eq!(
            admits(&policy, &ctx("memory_usage", "warning")),
            REJECT_SEVERITY
        );
    }

    #[test]
    fn policy_defaults_when_fields_are_absent() {
        let policy: AlertTriggerPolicy = serde_json::from_str(r#"{"enabled":true}"#).unwrap();
        assert_eq!(policy, AlertTriggerPolicy::default());
    }

    #[test]
    fn unknown_levels_count_as_critical() {
        let policy = AlertTriggerPolicy::default();
        for level in ["emergency", "", "CRIT", "info"] {
            assert_eq!(
                admits(&policy, &ctx("agent_offline", level)),
                Decision::Admit,
                "{level:?}"
            );
        }
        assert_eq!(
            admits(&policy, &ctx("agent_offline", " Warning ")),
            REJECT_SEVERITY
        );
    }

    #[test]
    fn warning_floor_admits_both_levels() {
        let policy = AlertTriggerPolicy {
            min_severity: AlertLevel::Warning,
            ..AlertTriggerPolicy::default()
        };
        assert_eq!(admits(&policy, &ctx("x", "warning")), Decision::Admit);
        assert_eq!(admits(&policy, &ctx("x", "critical")), Decision::Admit);
    }

    #[test]
    fn checks_apply_in_order() {
        let policy = AlertTriggerPolicy {
            enabled: false,
            min_severity: AlertLevel::Critical,
            alert_types: Some(BTreeSet::from(["restart_loop".to_owned()])),
        };
        // Disabled wins over a failing severity and a failing type.
        assert_eq!(
            admits(&policy, &ctx("memory_usage", "warning")),
            Decision::Reject {
                reason: RejectReason::Disabled
            }
        );
        let policy = AlertTriggerPolicy {
            enabled: true,
            ..policy
        };
        // Severity is checked before the type.
        assert_eq!(
            admits(&policy, &ctx("memory_usage", "warning")),
            REJECT_SEVERITY
        );
        assert_eq!(
            admits(&policy, &ctx("memory_usage", "critical")),
            Decision::Reject {
                reason: RejectReason::TypeNotAllowed
            }
        );
        assert_eq!(
            admits(&policy, &ctx("restart_loop", "critical")),
            Decision::Admit
        );
    }

    #[test]
    fn empty_allowlist_admits_every_type() {
        let policy = AlertTriggerPolicy {
            alert_types: Some(BTreeSet::new()),
            ..AlertTriggerPolicy::default()
        };
        assert_eq!(
            admits(&policy, &ctx("anything", "critical")),
            Decision::Admit
        );
    }

    #[test]
    fn transitions_fire_escalate_and_clear() {
        let policy = AlertTriggerPolicy::default();
        let fired = AlertTransition::Fired {
            alert: alert(AlertRule::FilesystemUsage, AlertLevel::Critical),
        };
        assert_eq!(admits_transition(&policy, &fired), Decision::Admit);
        let fired_warning = AlertTransition::Fired {
            alert: alert(AlertRule::FilesystemUsage, AlertLevel::Warning),
        };
        assert_eq!(admits_transition(&policy, &fired_warning), REJECT_SEVERITY);
        let escalated = AlertTransition::LevelChanged {
            from: AlertLevel::Warning,
            alert: alert(AlertRule::FilesystemUsage, AlertLevel::Critical),
        };
        assert_eq!(admits_transition(&policy, &escalated), Decision::Admit);
        let not_firing = Decision::Reject {
            reason: RejectReason::NotFiring,
        };
        let dropped = AlertTransition::LevelChanged {
            from: AlertLevel::Critical,
            alert: alert(AlertRule::FilesystemUsage, AlertLevel::Warning),
        };
        assert_eq!(admits_transition(&policy, &dropped), not_firing);
        // With a warning floor the alert already triggered when it fired as a warning.
        let warning_floor = AlertTriggerPolicy {
            min_severity: AlertLevel::Warning,
            ..policy.clone()
        };
        assert_eq!(admits_transition(&warning_floor, &escalated), not_firing);
        let cleared = AlertTransition::Cleared {
            alert: alert(AlertRule::FilesystemUsage, AlertLevel::Critical),
            cleared_at: Utc.with_ymd_and_hms(2026, 3, 1, 11, 0, 0).unwrap(),
        };
        assert_eq!(admits_transition(&policy, &cleared), not_firing);
    }

    #[test]
    fn scoped_run_is_framed_on_the_real_payload() {
        let alert = alert(AlertRule::MemoryUsage, AlertLevel::Critical);
        let run = scoped_run_for(&AlertContext::from(&alert));
        assert_eq!(run.trigger_reason, TriggerReason::AlertFired);
        assert_eq!(run.request.scope.resource_ids, vec!["app-container:h1:abc"]);
        assert!(run.request.scope.resource_types.is_empty());
        assert_eq!(
            run.request.alert_identifier.as_deref(),
            Some("app-container:h1:abc:memory_usage")
        );
        assert_eq!(run.request.alert_type.as_deref(), Some("memory_usage"));
        assert_eq!(run.alert.value, 93.5);
        assert_eq!(run.alert.threshold, 90.0);
        insta::assert_snapshot!(
            "patrol_alert_scoped_context",
            run.request.context.clone().unwrap()
        );
        insta::assert_json_snapshot!("patrol_alert_context", run.alert);
    }

    #[test]
    fn framed_context_respects_request_limits() {
        let mut payload = ctx("x", "critical");
        payload.message = "m\u{0007}".repeat(5_000);
        payload.resource_id = "r".repeat(2_000);
        let run = scoped_run_for(&payload);
        let context = run.request.context.unwrap();
        assert!(context.chars().count() <= RunRequest::MAX_CONTEXT_CHARS);
        assert!(!context.chars().any(|c| c == '\u{0007}'));
        assert_eq!(
            run.request.scope.resource_ids[0].chars().count(),
            RunRequest::MAX_RESOURCE_ID_CHARS
        );
    }

    #[test]
    fn wire_payload_with_unknown_level_deserializes() {
        let payload: AlertContext = serde_json::from_str(
            r#"{"alert_identifier":"host:h1:agent_offline","type":"agent_offline","level":"page",
                "value":1,"threshold":1,"resource_id":"host:h1","message":"agent offline"}"#,
        )
        .unwrap();
        assert_eq!(payload.level.effective(), AlertLevel::Critical);
        assert_eq!(
            admits(&AlertTriggerPolicy::default(), &payload),
            Decision::Admit
        );
    }
}
