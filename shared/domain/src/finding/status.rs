//! The finding status state machine and the operator actions built on it.
//!
//! | from \ event | acknowledge | snooze | dismiss | resolve | suppress | note | undo_dismiss | undo_suppress | reconfirm | redetect | regress | remind | snooze_expired | auto_resolve |
//! |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
//! | active     | active  | snoozed | dismissed | resolved | suppressed | active     | -      | -      | active  | active     | -      | -      | -      | resolved |
//! | snoozed    | snoozed | snoozed | dismissed | resolved | suppressed | snoozed    | -      | -      | snoozed | snoozed    | -      | -      | active | resolved |
//! | dismissed  | -       | -       | -         | resolved | suppressed | dismissed  | active | -      | -       | dismissed  | active | active | -      | -        |
//! | suppressed | -       | -       | -         | resolved | -          | suppressed | -      | active | -       | suppressed | -      | -      | -      | -        |
//! | resolved   | -       | -       | -         | -        | -          | resolved   | -      | -      | -       | -          | active | -      | -      | -        |
//!
//! `reconfirm` is a `present`/`uncertain` verdict, `redetect` a same-id report of an open or
//! silenced finding, `regress` a report that reopens a resolved finding (or a dismissed one
//! whose severity escalated), `remind` the due reminder of a `will_fix_later` dismissal.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::model::{DismissedReason, Finding, FindingStatus, LifecycleEvent, LifecycleEventType};
use super::suppression::{BroadScopeRefused, SuppressBreadth, SuppressionId, SuppressionRule};

/// A `will_fix_later` dismissal reminds the operator after this long.
pub const WILL_FIX_LATER_REMINDER: Duration = Duration::days(7);
/// Shortest and longest snooze.
pub const MIN_SNOOZE: Duration = Duration::minutes(1);
pub const MAX_SNOOZE: Duration = Duration::hours(MAX_SNOOZE_HOURS);
/// [`MAX_SNOOZE`] in hours (90 days).
pub const MAX_SNOOZE_HOURS: i64 = 90 * 24;
/// Longest operator note or resolution note, in characters.
pub const MAX_NOTE_CHARS: usize = 4096;

/// What may happen to a finding, as far as its status is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum StatusEvent {
    Acknowledge,
    Snooze,
    Dismiss,
    Resolve,
    Suppress,
    Note,
    UndoDismiss,
    UndoSuppress,
    Reconfirm,
    Redetect,
    Regress,
    Remind,
    SnoozeExpired,
    AutoResolve,
}

impl StatusEvent {
    pub const ALL: [StatusEvent; 14] = [
        StatusEvent::Acknowledge,
        StatusEvent::Snooze,
        StatusEvent::Dismiss,
        StatusEvent::Resolve,
        StatusEvent::Suppress,
        StatusEvent::Note,
        StatusEvent::UndoDismiss,
        StatusEvent::UndoSuppress,
        StatusEvent::Reconfirm,
        StatusEvent::Redetect,
        StatusEvent::Regress,
        StatusEvent::Remind,
        StatusEvent::SnoozeExpired,
        StatusEvent::AutoResolve,
    ];
}

/// The state machine refuses `event` in status `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("finding in status {from} does not accept {event:?}")]
pub struct IllegalTransition {
    pub from: FindingStatus,
    pub event: StatusEvent,
}

/// The finding status state machine (table in the module documentation).
pub fn transition(
    from: FindingStatus,
    event: StatusEvent,
) -> Result<FindingStatus, IllegalTransition> {
    use FindingStatus as S;
    use StatusEvent as E;
    let to = match (from, event) {
        (any, E::Note) => any,
        (S::Active | S::Snoozed, E::Acknowledge | E::Reconfirm | E::Redetect) => from,
        (S::Active | S::Snoozed, E::Snooze) => S::Snoozed,
        (S::Active | S::Snoozed, E::Dismiss) => S::Dismissed,
        (S::Active | S::Snoozed, E::AutoResolve) => S::Resolved,
        (S::Active | S::Snoozed | S::Dismissed | S::Suppressed, E::Resolve) => S::Resolved,
        (S::Active | S::Snoozed | S::Dismissed, E::Suppress) => S::Suppressed,
        (S::Dismissed | S::Suppressed, E::Redetect) => from,
        (S::Dismissed, E::UndoDismiss | E::Regress | E::Remind) => S::Active,
        (S::Suppressed, E::UndoSuppress) => S::Active,
        (S::Resolved, E::Regress) => S::Active,
        (S::Snoozed, E::SnoozeExpired) => S::Active,
        _ => return Err(IllegalTransition { from, event }),
    };
    Ok(to)
}

/// An operator action on one finding (the API's acknowledge / snooze / dismiss / resolve /
/// suppress / note routes and their undo).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum OperatorAction {
    Acknowledge,
    /// Hide the finding for `duration_seconds` ([`MIN_SNOOZE`]..=[`MAX_SNOOZE`]).
    Snooze {
        duration_seconds: i64,
    },
    Dismiss {
        reason: DismissedReason,
        #[serde(default)]
        note: String,
    },
    Resolve {
        note: String,
    },
    Suppress {
        #[serde(default)]
        breadth: SuppressBreadth,
        #[serde(default)]
        allow_broad_scope: bool,
    },
    Note {
        text: String,
    },
    UndoDismiss,
    UndoSuppress,
}

impl OperatorAction {
    /// The status event this action drives.
    pub fn status_event(&self) -> StatusEvent {
        match self {
            OperatorAction::Acknowledge => StatusEvent::Acknowledge,
            OperatorAction::Snooze { .. } => StatusEvent::Snooze,
            OperatorAction::Dismiss { .. } => StatusEvent::Dismiss,
            OperatorAction::Resolve { .. } => StatusEvent::Resolve,
            OperatorAction::Suppress { .. } => StatusEvent::Suppress,
            OperatorAction::Note { .. } => StatusEvent::Note,
            OperatorAction::UndoDismiss => StatusEvent::UndoDismiss,
            OperatorAction::UndoSuppress => StatusEvent::UndoSuppress,
        }
    }
}

/// Why an operator action was refused. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperatorRefusal {
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
    #[error("snooze duration must be between 1 minute and 90 days")]
    InvalidSnoozeDuration,
    #[error("note is longer than {MAX_NOTE_CHARS} characters")]
    NoteTooLong,
    #[error("a note must not be empty")]
    EmptyNote,
    #[error(transparent)]
    BroadScope(#[from] BroadScopeRefused),
    /// Synthetic Patrol runtime findings (`ai-service`) clear only when Patrol recovers.
    #[error(
        "a Patrol runtime finding cannot be triaged by hand: correct the provider settings and \
         let the next run re-evaluate it"
    )]
    RuntimeFinding,
}

/// What applying an operator action produces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorDecision {
    /// The finding to write, lifecycle included.
    pub finding: Finding,
    /// Events appended by this action (also at the end of `finding.lifecycle`).
    pub new_events: Vec<LifecycleEvent>,
    /// A rule to create (suppress). Other open findings it matches are suppressed with
    /// [`suppress_under`].
    pub create_suppression: Option<SuppressionRule>,
    /// A rule to lift (undo suppress). Other findings it holds are released with
    /// [`lift_suppression`].
    pub lift_suppression: Option<SuppressionId>,
}

fn check_note(text: &str, may_be_empty: bool) -> Result<(), OperatorRefusal> {
    if !may_be_empty && text.trim().is_empty() {
        return Err(OperatorRefusal::EmptyNote);
    }
    if text.chars().count() > MAX_NOTE_CHARS {
        return Err(OperatorRefusal::NoteTooLong);
    }
    Ok(())
}

/// Applies an operator action by `actor` at `now`. Pure: the caller writes the result.
///
/// - acknowledge: sets `acknowledged_at` (idempotent: a second acknowledgement records nothing);
/// - snooze: `snoozed_until = now + duration`;
/// - dismiss: records the reason; `will_fix_later` sets `remind_at = now + 7 days`;
/// - resolve: operator resolution with a note (`auto_resolved = false`);
/// - suppress: creates the rule (broad rules need `allow_broad_scope`) and suppresses the finding;
/// - note: replaces `user_note`;
/// - undo dismiss / undo suppress: back to `active` (`undismissed` / `suppression_lifted`).
pub fn apply_operator_action(
    finding: &Finding,
    action: &OperatorAction,
    actor: &str,
    now: DateTime<Utc>,
) -> Result<OperatorDecision, OperatorRefusal> {
    if super::runtime::refuses_operator_action(finding, action) {
        return Err(OperatorRefusal::RuntimeFinding);
    }
    let from = finding.status;
    let to = transition(from, action.status_event())?;
    let mut next = finding.clone();
    next.status = to;
    let mut events = Vec::new();
    let mut create_suppression = None;
    let mut lift = None;
    let event = |t| {
        LifecycleEvent::new(t, now)
            .statuses(from, to)
            .meta("actor", actor)
    };
    match action {
        OperatorAction::Acknowledge => {
            if finding.acknowledged_at.is_none() {
                next.acknowledged_at = Some(now);
                events.push(event(LifecycleEventType::Acknowledged));
            }
        }
        OperatorAction::Snooze { duration_seconds } => {
            let duration = Duration::try_seconds(*duration_seconds)
                .filter(|d| *d >= MIN_SNOOZE && *d <= MAX_SNOOZE)
                .ok_or(OperatorRefusal::InvalidSnoozeDuration)?;
            let until = now + duration;
            next.snoozed_until = Some(until);
            events.push(event(LifecycleEventType::Snoozed).meta("until", until.to_rfc3339()));
        }
        OperatorAction::Dismiss { reason, note } => {
            check_note(note, true)?;
            next.dismissed_reason = Some(*reason);
            next.snoozed_until = None;
            next.remind_at =
                (*reason == DismissedReason::WillFixLater).then(|| now + WILL_FIX_LATER_REMINDER);
            let mut e = event(LifecycleEventType::Dismissed)
                .meta("reason", reason.as_str())
                .message(note.clone());
            if let Some(at) = next.remind_at {
                e = e.meta("remind_at", at.to_rfc3339());
            }
            events.push(e);
        }
        OperatorAction::Resolve { note } => {
            check_note(note, true)?;
            next.resolved_at = Some(now);
            next.auto_resolved = false;
            next.resolve_reason = note.clone();
            next.snoozed_until = None;
            next.remind_at = None;
            next.suppression_id = None;
            events.push(event(LifecycleEventType::Resolved).message(note.clone()));
        }
        OperatorAction::Suppress {
            breadth,
            allow_broad_scope,
        } => {
            let rule = SuppressionRule::for_finding(
                &finding.resource_id,
                finding.category,
                *breadth,
                *allow_broad_scope,
                actor,
                now,
            )?;
            next.suppression_id = Some(rule.id);
            next.snoozed_until = None;
            events.push(
                event(LifecycleEventType::Suppressed).meta("suppression_id", rule.id.as_hex()),
            );
            create_suppression = Some(rule);
        }
        OperatorAction::Note { text } => {
            check_note(text, false)?;
            next.user_note = text.clone();
            events.push(event(LifecycleEventType::UserNoteUpdated));
        }
        OperatorAction::UndoDismiss => {
            next.dismissed_reason = None;
            next.remind_at = None;
            events.push(event(LifecycleEventType::Undismissed));
        }
        OperatorAction::UndoSuppress => {
            lift = finding.suppression_id;
            next.suppression_id = None;
            events.push(event(LifecycleEventType::SuppressionLifted));
        }
    }
    for e in &events {
        next.push_event(e.clone());
    }
    Ok(OperatorDecision {
        finding: next,
        new_events: events,
        create_suppression,
        lift_suppression: lift,
    })
}

/// Puts another open finding under a newly created `rule` (suppress applies to every open
/// finding the rule matches). Returns `None` when the finding is not open or not matched.
pub fn suppress_under(
    finding: &Finding,
    rule: &SuppressionRule,
    now: DateTime<Utc>,
) -> Option<(Finding, LifecycleEvent)> {
    if !finding.status.is_open()
        || !rule.matches(&finding.resource_id, finding.category)
        || super::runtime::is_runtime_finding(finding)
    {
        return None;
    }
    let to = transition(finding.status, StatusEvent::Suppress).ok()?;
    let event = LifecycleEvent::new(LifecycleEventType::Suppressed, now)
        .statuses(finding.status, to)
        .meta("suppression_id", rule.id.as_hex());
    let mut next = finding.clone();
    next.status = to;
    next.suppression_id = Some(rule.id);
    next.snoozed_until = None;
    next.push_event(event.clone());
    Some((next, event))
}

/// Releases a finding held by the lifted rule `id`. Returns `None` when it is not held by it.
pub fn lift_suppression(
    finding: &Finding,
    id: SuppressionId,
    now: DateTime<Utc>,
) -> Option<(Finding, LifecycleEvent)> {
    if finding.status != FindingStatus::Suppressed || finding.suppression_id != Some(id) {
        return None;
    }
    let to = transition(finding.status, StatusEvent::UndoSuppress).ok()?;
    let event = LifecycleEvent::new(LifecycleEventType::SuppressionLifted, now)
        .statuses(finding.status, to)
        .meta("suppression_id", id.as_hex());
    let mut next = finding.clone();
    next.status = to;
    next.suppression_id = None;
    next.push_event(event.clone());
    Some((next, event))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::test_support::finding;
    use FindingStatus as S;
    use StatusEvent as E;

    /// The expected table, written out independently of `transition`'s match arms.
    fn expected(from: FindingStatus, event: StatusEvent) -> Option<FindingStatus> {
        let row: [(StatusEvent, Option<FindingStatus>); 14] = match from {
            S::Active => [
                (E::Acknowledge, Some(S::Active)),
                (E::Snooze, Some(S::Snoozed)),
                (E::Dismiss, Some(S::Dismissed)),
                (E::Resolve, Some(S::Resolved)),
                (E::Suppress, Some(S::Suppressed)),
                (E::Note, Some(S::Active)),
                (E::UndoDismiss, None),
                (E::UndoSuppress, None),
                (E::Reconfirm, Some(S::Active)),
                (E::Redetect, Some(S::Active)),
                (E::Regress, None),
                (E::Remind, None),
                (E::SnoozeExpired, None),
                (E::AutoResolve, Some(S::Resolved)),
            ],
            S::Snoozed => [
                (E::Acknowledge, Some(S::Snoozed)),
                (E::Snooze, Some(S::Snoozed)),
                (E::Dismiss, Some(S::Dismissed)),
                (E::Resolve, Some(S::Resolved)),
                (E::Suppress, Some(S::Suppressed)),
                (E::Note, Some(S::Snoozed)),
                (E::UndoDismiss, None),
                (E::UndoSuppress, None),
                (E::Reconfirm, Some(S::Snoozed)),
                (E::Redetect, Some(S::Snoozed)),
                (E::Regress, None),
                (E::Remind, None),
                (E::SnoozeExpired, Some(S::Active)),
                (E::AutoResolve, Some(S::Resolved)),
            ],
            S::Dismissed => [
                (E::Acknowledge, None),
                (E::Snooze, None),
                (E::Dismiss, None),
                (E::Resolve, Some(S::Resolved)),
                (E::Suppress, Some(S::Suppressed)),
                (E::Note, Some(S::Dismissed)),
                (E::UndoDismiss, Some(S::Active)),
                (E::UndoSuppress, None),
                (E::Reconfirm, None),
                (E::Redetect, Some(S::Dismissed)),
                (E::Regress, Some(S::Active)),
                (E::Remind, Some(S::Active)),
                (E::SnoozeExpired, None),
                (E::AutoResolve, None),
            ],
            S::Suppressed => [
                (E::Acknowledge, None),
                (E::Snooze, None),
                (E::Dismiss, None),
                (E::Resolve, Some(S::Resolved)),
                (E::Suppress, None),
                (E::Note, Some(S::Suppressed)),
                (E::UndoDismiss, None),
                (E::UndoSuppress, Some(S::Active)),
                (E::Reconfirm, None),
                (E::Redetect, Some(S::Suppressed)),
                (E::Regress, None),
                (E::Remind, None),
                (E::SnoozeExpired, None),
                (E::AutoResolve, None),
            ],
            S::Resolved => [
                (E::Acknowledge, None),
                (E::Snooze, None),
                (E::Dismiss, None),
                (E::Resolve, None),
                (E::Suppress, None),
                (E::Note, Some(S::Resolved)),
                (E::UndoDismiss, None),
                (E::UndoSuppress, None),
                (E::Reconfirm, None),
                (E::Redetect, None),
                (E::Regress, Some(S::Active)),
                (E::Remind, None),
                (E::SnoozeExpired, None),
                (E::AutoResolve, None),
            ],
        };
        row.into_iter()
            .find(|(e, _)| *e == event)
            .map(|(_, to)| to)
            .expect("every event is in the row")
    }

    #[test]
    fn transition_matches_the_table_for_every_status_and_event() {
        let mut checked = 0;
        for from in FindingStatus::ALL {
            for event in StatusEvent::ALL {
                let got = transition(from, event);
                match expected(from, event) {
                    Some(to) => assert_eq!(got, Ok(to), "{from} --{event:?}"),
                    None => assert_eq!(
                        got,
                        Err(IllegalTransition { from, event }),
                        "{from} --{event:?}"
                    ),
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 5 * 14);
    }

    fn at(f: &Finding) -> DateTime<Utc> {
        f.detected_at + Duration::hours(1)
    }

    #[test]
    fn acknowledge_is_recorded_once() {
        let f = finding("cpu-high");
        let now = at(&f);
        let d = apply_operator_action(&f, &OperatorAction::Acknowledge, "ops", now).expect("ok");
        assert_eq!(d.finding.acknowledged_at, Some(now));
        assert_eq!(d.finding.status, S::Active);
        assert_eq!(d.new_events.len(), 1);
        assert_eq!(d.new_events[0].event_type, LifecycleEventType::Acknowledged);
        assert_eq!(d.new_events[0].metadata["actor"], "ops");
        let again = apply_operator_action(&d.finding, &OperatorAction::Acknowledge, "ops", now)
            .expect("idempotent");
        assert!(again.new_events.is_empty());
        assert_eq!(again.finding, d.finding);
    }

    #[test]
    fn snooze_sets_until_and_bounds_the_duration() {
        let f = finding("cpu-high");
        let now = at(&f);
        let d = apply_operator_action(
            &f,
            &OperatorAction::Snooze {
                duration_seconds: 3600,
            },
            "ops",
            now,
        )
        .expect("ok");
        assert_eq!(d.finding.status, S::Snoozed);
        assert_eq!(d.finding.snoozed_until, Some(now + Duration::hours(1)));
        assert_eq!(d.finding.effective_status(now), S::Snoozed);
        assert_eq!(
            d.finding.effective_status(now + Duration::hours(1)),
            S::Active
        );
        for bad in [0, 59, -10, 90 * 86_400 + 1, i64::MAX] {
            assert_eq!(
                apply_operator_action(
                    &f,
                    &OperatorAction::Snooze {
                        duration_seconds: bad
                    },
                    "ops",
                    now
                ),
                Err(OperatorRefusal::InvalidSnoozeDuration),
                "{bad}"
            );
        }
    }

    #[test]
    fn dismiss_will_fix_later_reminds_after_seven_days() {
        let f = finding("cpu-high");
        let now = at(&f);
        for reason in DismissedReason::ALL {
            let d = apply_operator_action(
                &f,
                &OperatorAction::Dismiss {
                    reason,
                    note: String::new(),
                },
                "ops",
                now,
            )
            .expect("ok");
            assert_eq!(d.finding.status, S::Dismissed);
            assert_eq!(d.finding.dismissed_reason, Some(reason));
            let want = (reason == DismissedReason::WillFixLater).then(|| now + Duration::days(7));
            assert_eq!(d.finding.remind_at, want, "{reason:?}");
            assert_eq!(d.new_events[0].metadata["reason"], reason.as_str());

            let undone =
                apply_operator_action(&d.finding, &OperatorAction::UndoDismiss, "ops", now)
                    .expect("undo");
            assert_eq!(undone.finding.status, S::Active);
            assert_eq!(undone.finding.dismissed_reason, None);
            assert_eq!(undone.finding.remind_at, None);
            assert_eq!(
                undone.new_events[0].event_type,
                LifecycleEventType::Undismissed
            );
        }
    }

    #[test]
    fn resolve_records_the_operator_note() {
        let f = finding("restart-loop");
        let now = at(&f);
        let d = apply_operator_action(
            &f,
            &OperatorAction::Resolve {
                note: "replaced the disk".into(),
            },
            "ops",
            now,
        )
        .expect("ok");
        assert_eq!(d.finding.status, S::Resolved);
        assert_eq!(d.finding.resolved_at, Some(now));
        assert!(!d.finding.auto_resolved);
        assert_eq!(d.finding.resolve_reason, "replaced the disk");
        assert_eq!(
            apply_operator_action(&d.finding, &OperatorAction::Acknowledge, "ops", now),
            Err(OperatorRefusal::Illegal(IllegalTransition {
                from: S::Resolved,
                event: E::Acknowledge
            }))
        );
    }

    #[test]
    fn suppress_creates_a_rule_and_undo_lifts_it() {
        let f = finding("cpu-high");
        let now = at(&f);
        let d = apply_operator_action(
            &f,
            &OperatorAction::Suppress {
                breadth: SuppressBreadth::ResourceAndCategory,
                allow_broad_scope: false,
            },
            "ops",
            now,
        )
        .expect("ok");
        let rule = d.create_suppression.clone().expect("a rule");
        assert!(rule.matches(&f.resource_id, f.category));
        assert_eq!(d.finding.status, S::Suppressed);
        assert_eq!(d.finding.suppression_id, Some(rule.id));

        let broad = apply_operator_action(
            &f,
            &OperatorAction::Suppress {
                breadth: SuppressBreadth::CategoryOnAllResources,
                allow_broad_scope: false,
            },
            "ops",
            now,
        );
        assert_eq!(
            broad,
            Err(OperatorRefusal::BroadScope(BroadScopeRefused("resource")))
        );

        let undone = apply_operator_action(&d.finding, &OperatorAction::UndoSuppress, "ops", now)
            .expect("undo");
        assert_eq!(undone.finding.status, S::Active);
        assert_eq!(undone.lift_suppression, Some(rule.id));
        assert_eq!(undone.finding.suppression_id, None);
        assert_eq!(
            undone.new_events[0].event_type,
            LifecycleEventType::SuppressionLifted
        );
    }

    #[test]
    fn suppress_under_and_lift_touch_only_matching_findings() {
        let f = finding("cpu-high");
        let now = at(&f);
        let rule = SuppressionRule::for_finding(
            &f.resource_id,
            f.category,
            SuppressBreadth::ResourceAndCategory,
            false,
            "ops",
            now,
        )
        .expect("rule");
        let (held, event) = suppress_under(&f, &rule, now).expect("matches");
        assert_eq!(held.status, S::Suppressed);
        assert_eq!(event.event_type, LifecycleEventType::Suppressed);
        let mut other = finding("cpu-high");
        other.resource_id = "host:other".into();
        assert!(suppress_under(&other, &rule, now).is_none());
        let (released, _) = lift_suppression(&held, rule.id, now).expect("held by the rule");
        assert_eq!(released.status, S::Active);
        assert!(lift_suppression(&f, rule.id, now).is_none());
    }

    #[test]
    fn notes_are_bounded_and_allowed_in_every_status() {
        let mut f = finding("cpu-high");
        let now = at(&f);
        for status in FindingStatus::ALL {
            f.status = status;
            let d = apply_operator_action(
                &f,
                &OperatorAction::Note {
                    text: "vendor ticket 42".into(),
                },
                "ops",
                now,
            )
            .expect("ok");
            assert_eq!(d.finding.status, status);
            assert_eq!(d.finding.user_note, "vendor ticket 42");
        }
        assert_eq!(
            apply_operator_action(&f, &OperatorAction::Note { text: " ".into() }, "ops", now),
            Err(OperatorRefusal::EmptyNote)
        );
        assert_eq!(
            apply_operator_action(
                &f,
                &OperatorAction::Note {
                    text: "x".repeat(MAX_NOTE_CHARS + 1)
                },
                "ops",
                now
            ),
            Err(OperatorRefusal::NoteTooLong)
        );
    }

    #[test]
    fn operator_action_wire_shape() {
        let json = serde_json::json!({"action": "dismiss", "reason": "will_fix_later"});
        let action: OperatorAction = serde_json::from_value(json).expect("parse");
        assert_eq!(
            action,
            OperatorAction::Dismiss {
                reason: DismissedReason::WillFixLater,
                note: String::new()
            }
        );
        let json = serde_json::json!({"action": "suppress"});
        let action: OperatorAction = serde_json::from_value(json).expect("parse");
        assert_eq!(
            action,
            OperatorAction::Suppress {
                breadth: SuppressBreadth::ResourceAndCategory,
                allow_broad_scope: false
            }
        );
    }
}
