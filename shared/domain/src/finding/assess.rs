//! `patrol_assess_finding`: a Watch verdict on an existing open finding (FIND-02, FIND-04,
//! FIND-07, FIND-08).
//!
//! - `present`: the heartbeat advances (`times_raised`, `last_seen_at`), evidence and run
//!   ownership refresh; no event.
//! - `uncertain`: nothing about the problem changes; the finding stays open and the verdict is
//!   recorded, which protects it from absence-based stale resolution.
//! - `resolved`: for a key with a deterministic verifier ([`has_deterministic_verifier`]) the
//!   verifier's outcome is authoritative and fails closed: only [`VerifierOutcome::Confirmed`]
//!   resolves; still present, inconclusive (timeouts, executor unavailable, transport faults)
//!   or a verifier that was not consulted refuse and leave the finding open. Keys without a
//!   verifier resolve on the model's evidence. A resolution is `auto_resolved`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::id::{VerifierKey, has_deterministic_verifier};
use super::model::{Assessment, Finding, LifecycleEvent, LifecycleEventType, Verdict};
use super::report::MAX_EVIDENCE_CHARS;
use super::status::{IllegalTransition, StatusEvent, transition};
use crate::patrol::run::RunId;

/// What the verifier service said about the finding's key, fresh for this assessment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum VerifierOutcome {
    /// The deterministic check ran and the fault is gone.
    Confirmed,
    /// The deterministic check ran and still sees the fault.
    StillPresent,
    /// The check could not conclude (timeout, executor unavailable, transport fault).
    Inconclusive,
    /// No verifier was consulted (the caller's choice for keys without one).
    NotRun,
}

impl VerifierOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            VerifierOutcome::Confirmed => "confirmed",
            VerifierOutcome::StillPresent => "still_present",
            VerifierOutcome::Inconclusive => "inconclusive",
            VerifierOutcome::NotRun => "not_run",
        }
    }
}

/// One verdict as the model sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct VerdictInput {
    pub verdict: Verdict,
    pub evidence: String,
    pub reason: String,
}

/// Why a verdict was refused. The finding was not changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssessRefusal {
    /// Only open (active or snoozed) findings take verdicts.
    #[error(transparent)]
    NotOpen(#[from] IllegalTransition),
    #[error("the {0} verifier still detects the fault; the finding stays active")]
    StillPresent(VerifierKey),
    #[error(
        "the {0} verifier could not conclude; resolution fails closed and the finding stays active"
    )]
    Inconclusive(VerifierKey),
    #[error("key {0} has a deterministic verifier that was not consulted; resolution fails closed")]
    VerifierNotRun(VerifierKey),
    #[error("evidence must not be empty")]
    EmptyEvidence,
    #[error("evidence is longer than {MAX_EVIDENCE_CHARS} characters")]
    EvidenceTooLong,
}

/// An accepted verdict: the finding to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssessDecision {
    pub finding: Finding,
    pub new_events: Vec<LifecycleEvent>,
}

/// Applies a verdict in `run` at `now` (rules in the module documentation).
pub fn assess(
    finding: &Finding,
    input: &VerdictInput,
    verifier: VerifierOutcome,
    run: RunId,
    now: DateTime<Utc>,
) -> Result<AssessDecision, AssessRefusal> {
    if input.evidence.trim().is_empty() {
        return Err(AssessRefusal::EmptyEvidence);
    }
    if input.evidence.chars().count() > MAX_EVIDENCE_CHARS {
        return Err(AssessRefusal::EvidenceTooLong);
    }
    let event = match input.verdict {
        Verdict::Present | Verdict::Uncertain => StatusEvent::Reconfirm,
        Verdict::Resolved => StatusEvent::AutoResolve,
    };
    let to = transition(finding.status, event)?;
    let mut next = finding.clone();
    let mut events = Vec::new();
    match input.verdict {
        Verdict::Present => {
            next.times_raised = next.times_raised.saturating_add(1);
            next.last_seen_at = now;
            next.evidence = input.evidence.clone();
            next.last_run_id = Some(run);
        }
        Verdict::Uncertain => {}
        Verdict::Resolved => {
            if let Some(verifier_key) = VerifierKey::for_key(&finding.key) {
                debug_assert!(has_deterministic_verifier(&finding.key));
                match verifier {
                    VerifierOutcome::Confirmed => {}
                    VerifierOutcome::StillPresent => {
                        return Err(AssessRefusal::StillPresent(verifier_key));
                    }
                    VerifierOutcome::Inconclusive => {
                        return Err(AssessRefusal::Inconclusive(verifier_key));
                    }
                    VerifierOutcome::NotRun => {
                        return Err(AssessRefusal::VerifierNotRun(verifier_key));
                    }
                }
            }
            next.status = to;
            next.resolved_at = Some(now);
            next.auto_resolved = true;
            next.resolve_reason = input.reason.clone();
            next.snoozed_until = None;
            events.push(
                LifecycleEvent::new(LifecycleEventType::AutoResolved, now)
                    .statuses(finding.status, to)
                    .message(input.reason.clone())
                    .meta("run_id", run.to_string())
                    .meta("verifier", verifier.as_str()),
            );
        }
    }
    next.last_assessment = Some(Assessment {
        verdict: input.verdict,
        run_id: run,
        assessed_at: now,
    });
    for e in &events {
        next.push_event(e.clone());
    }
    Ok(AssessDecision {
        finding: next,
        new_events: events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::model::FindingStatus;
    use crate::finding::test_support::{finding, run_id, t0};
    use chrono::Duration;

    fn verdict(v: Verdict) -> VerdictInput {
        VerdictInput {
            verdict: v,
            evidence: "cpu 12% over 10 min".into(),
            reason: "load back to normal".into(),
        }
    }

    #[test]
    fn present_refreshes_heartbeat_evidence_and_run_ownership_without_events() {
        let f = finding("cpu-high");
        let now = t0() + Duration::minutes(5);
        let d = assess(
            &f,
            &verdict(Verdict::Present),
            VerifierOutcome::NotRun,
            run_id(7),
            now,
        )
        .expect("ok");
        assert_eq!(d.finding.status, FindingStatus::Active);
        assert_eq!(d.finding.times_raised, f.times_raised + 1);
        assert_eq!(d.finding.last_seen_at, now);
        assert_eq!(d.finding.evidence, "cpu 12% over 10 min");
        assert_eq!(d.finding.last_run_id, Some(run_id(7)));
        assert!(d.new_events.is_empty());
        assert!(!d.finding.is_uncertain());
    }

    #[test]
    fn uncertain_keeps_the_finding_open_and_protected() {
        let f = finding("restart-loop");
        let d = assess(
            &f,
            &verdict(Verdict::Uncertain),
            VerifierOutcome::NotRun,
            run_id(7),
            t0(),
        )
        .expect("ok");
        assert_eq!(d.finding.status, FindingStatus::Active);
        assert_eq!(d.finding.times_raised, f.times_raised);
        assert_eq!(d.finding.last_seen_at, f.last_seen_at);
        assert!(d.finding.is_uncertain());
        assert!(d.new_events.is_empty());
    }

    #[test]
    fn resolved_on_a_verifier_key_needs_a_confirmation() {
        for (key, vk) in [
            ("cpu-high", VerifierKey::CpuHigh),
            ("backup-failed", VerifierKey::BackupFailed),
        ] {
            let f = finding(key);
            let refusals = [
                (
                    VerifierOutcome::StillPresent,
                    AssessRefusal::StillPresent(vk),
                ),
                (
                    VerifierOutcome::Inconclusive,
                    AssessRefusal::Inconclusive(vk),
                ),
                (VerifierOutcome::NotRun, AssessRefusal::VerifierNotRun(vk)),
            ];
            for (outcome, refusal) in refusals {
                assert_eq!(
                    assess(&f, &verdict(Verdict::Resolved), outcome, run_id(1), t0()),
                    Err(refusal),
                    "{key} {outcome:?}"
                );
            }
            let d = assess(
                &f,
                &verdict(Verdict::Resolved),
                VerifierOutcome::Confirmed,
                run_id(1),
                t0(),
            )
            .expect("confirmed resolves");
            assert_eq!(d.finding.status, FindingStatus::Resolved);
            assert!(d.finding.auto_resolved);
            assert_eq!(d.finding.resolved_at, Some(t0()));
            assert_eq!(d.finding.resolve_reason, "load back to normal");
            assert_eq!(d.new_events.len(), 1);
            assert_eq!(d.new_events[0].event_type, LifecycleEventType::AutoResolved);
            assert_eq!(d.new_events[0].metadata["verifier"], "confirmed");
        }
    }

    #[test]
    fn resolved_on_a_key_without_a_verifier_resolves_on_evidence() {
        let f = finding("pbs-job-failed");
        let d = assess(
            &f,
            &verdict(Verdict::Resolved),
            VerifierOutcome::NotRun,
            run_id(1),
            t0(),
        )
        .expect("ok");
        assert_eq!(d.finding.status, FindingStatus::Resolved);
    }

    #[test]
    fn verdicts_need_an_open_finding_and_evidence() {
        let mut f = finding("restart-loop");
        for status in [
            FindingStatus::Resolved,
            FindingStatus::Dismissed,
            FindingStatus::Suppressed,
        ] {
            f.status = status;
            for v in [Verdict::Present, Verdict::Uncertain, Verdict::Resolved] {
                assert!(
                    matches!(
                        assess(&f, &verdict(v), VerifierOutcome::Confirmed, run_id(1), t0()),
                        Err(AssessRefusal::NotOpen(_))
                    ),
                    "{status} {v:?}"
                );
            }
        }
        f.status = FindingStatus::Snoozed;
        assert!(
            assess(
                &f,
                &verdict(Verdict::Present),
                VerifierOutcome::NotRun,
                run_id(1),
                t0()
            )
            .is_ok()
        );
        let mut empty = verdict(Verdict::Present);
        empty.evidence = " ".into();
        assert_eq!(
            assess(&f, &empty, VerifierOutcome::NotRun, run_id(1), t0()),
            Err(AssessRefusal::EmptyEvidence)
        );
    }
}
