//! How a Watch run that reached its model's final answer ends: the one place that decides
//! whether a run may be recorded `healthy`.
//!
//! A final answer alone proves nothing: `healthy` is an all-clear, so it needs the inventory to
//! have been collected, a scope that covered at least one resource, no error along the way, and
//! no finding that the run reported or kept active (new, reconfirmed `present`, or `uncertain`,
//! which keeps its finding active). Anything active is `issues_found`; anything incomplete is
//! `error`, never an absence-based all-clear.
//!
//! The model skipping its work is told apart from Pulse failing: an answer with no text and no
//! accepted call is `model_empty_answer`, an active finding left without a verdict is
//! `model_missing_verdict`, and a run that would be an all-clear while a flagged resource went
//! unaddressed (neither reported, assessed nor cleared with evidence) is
//! `model_unaddressed_flags`. Failures of Pulse's own tools stay `internal`.

use serde::{Deserialize, Serialize};

use super::run::{ErrorCause, RunEvent};

/// What a run accounted for by the time its model gave its final answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAccounting {
    /// The resource inventory the run was seeded with was read completely.
    pub collection_completed: bool,
    /// Resources in the run's effective scope.
    pub scope_resources: u32,
    /// Errors the run met (failed tool calls that left a question open, findings left without
    /// a verdict, ...).
    pub errors: u32,
    /// Findings the run reported as new.
    pub new_findings: u32,
    /// Existing findings the run assessed `present`.
    pub reconfirmed_findings: u32,
    /// Existing findings the run assessed `uncertain`; they stay active.
    pub uncertain_verdicts: u32,
    /// Active findings shown to the run that got no verdict.
    #[serde(default)]
    pub missing_verdicts: u32,
    /// Triage flags and firing alerts on resources in scope that the run neither reported,
    /// assessed nor cleared with evidence.
    #[serde(default)]
    pub unaddressed_signals: u32,
    /// The model's final answer had no text, and the run accepted no lifecycle call.
    #[serde(default)]
    pub empty_answer: bool,
}

/// How the run ends, with the operator-facing detail of an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conclusion {
    pub event: RunEvent,
    pub detail: Option<String>,
}

impl RunAccounting {
    /// Findings the run leaves active.
    pub fn active_findings(&self) -> u32 {
        self.new_findings
            .saturating_add(self.reconfirmed_findings)
            .saturating_add(self.uncertain_verdicts)
    }
}

/// The terminal event of a run whose model loop ended with a final answer.
pub fn conclude(accounting: &RunAccounting) -> Conclusion {
    let failed = |cause, detail: String| Conclusion {
        event: RunEvent::Failed { cause },
        detail: Some(detail),
    };
    if !accounting.collection_completed {
        return failed(
            ErrorCause::Internal,
            "the resource inventory was not collected completely".to_owned(),
        );
    }
    if accounting.scope_resources == 0 {
        return failed(
            ErrorCause::ScopeEmpty,
            "the run covered no resource".to_owned(),
        );
    }
    if accounting.errors > 0 {
        return failed(
            ErrorCause::Internal,
            format!(
                "the run met {} error(s) before its answer",
                accounting.errors
            ),
        );
    }
    if accounting.empty_answer {
        return failed(
            ErrorCause::ModelEmptyAnswer,
            format!(
                "the model answered with no text and no tool call; {} active finding(s) got no \
                 verdict and {} flag(s) went unaddressed",
                accounting.missing_verdicts, accounting.unaddressed_signals
            ),
        );
    }
    if accounting.missing_verdicts > 0 {
        return failed(
            ErrorCause::ModelMissingVerdict,
            format!(
                "{} active finding(s) got no verdict from the model",
                accounting.missing_verdicts
            ),
        );
    }
    if accounting.unaddressed_signals > 0 && accounting.active_findings() == 0 {
        return failed(
            ErrorCause::ModelUnaddressedFlags,
            format!(
                "{} flag(s) on resources in scope were neither reported, assessed nor cleared",
                accounting.unaddressed_signals
            ),
        );
    }
    Conclusion {
        event: RunEvent::Completed {
            issues_found: accounting.active_findings() > 0,
        },
        detail: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patrol::run::{RunStatus, transition};

    fn clean() -> RunAccounting {
        RunAccounting {
            collection_completed: true,
            scope_resources: 3,
            ..RunAccounting::default()
        }
    }

    fn status(accounting: &RunAccounting) -> RunStatus {
        transition(RunStatus::Running, conclude(accounting).event).expect("a terminal event")
    }

    #[test]
    fn a_complete_clean_run_is_healthy() {
        assert_eq!(status(&clean()), RunStatus::Healthy);
        assert_eq!(conclude(&clean()).detail, None);
    }

    #[test]
    fn any_active_finding_is_issues_found() {
        for accounting in [
            RunAccounting {
                new_findings: 1,
                ..clean()
            },
            RunAccounting {
                reconfirmed_findings: 2,
                ..clean()
            },
            RunAccounting {
                uncertain_verdicts: 1,
                ..clean()
            },
        ] {
            assert_eq!(
                status(&accounting),
                RunStatus::IssuesFound,
                "{accounting:?}"
            );
        }
    }

    #[test]
    fn incomplete_runs_are_errors_whatever_they_found() {
        let cases = [
            (
                RunAccounting {
                    collection_completed: false,
                    ..clean()
                },
                ErrorCause::Internal,
            ),
            (
                RunAccounting {
                    scope_resources: 0,
                    new_findings: 1,
                    ..clean()
                },
                ErrorCause::ScopeEmpty,
            ),
            (
                RunAccounting {
                    errors: 1,
                    new_findings: 4,
                    ..clean()
                },
                ErrorCause::Internal,
            ),
        ];
        for (accounting, cause) in cases {
            let conclusion = conclude(&accounting);
            assert_eq!(
                conclusion.event,
                RunEvent::Failed { cause },
                "{accounting:?}"
            );
            assert!(conclusion.detail.is_some());
            assert_eq!(status(&accounting), RunStatus::Error);
        }
    }

    #[test]
    fn a_model_that_skipped_its_work_is_a_model_analysis_error_not_an_internal_one() {
        let cases = [
            (
                RunAccounting {
                    empty_answer: true,
                    ..clean()
                },
                ErrorCause::ModelEmptyAnswer,
            ),
            (
                RunAccounting {
                    empty_answer: true,
                    missing_verdicts: 1,
                    unaddressed_signals: 2,
                    ..clean()
                },
                ErrorCause::ModelEmptyAnswer,
            ),
            (
                RunAccounting {
                    missing_verdicts: 1,
                    new_findings: 1,
                    ..clean()
                },
                ErrorCause::ModelMissingVerdict,
            ),
            (
                RunAccounting {
                    unaddressed_signals: 1,
                    ..clean()
                },
                ErrorCause::ModelUnaddressedFlags,
            ),
            // A failure of Pulse's own tools stays internal whatever the model did.
            (
                RunAccounting {
                    errors: 1,
                    empty_answer: true,
                    ..clean()
                },
                ErrorCause::Internal,
            ),
        ];
        for (accounting, cause) in cases {
            let conclusion = conclude(&accounting);
            assert_eq!(
                conclusion.event,
                RunEvent::Failed { cause },
                "{accounting:?}"
            );
            assert_eq!(cause.is_model_analysis(), cause != ErrorCause::Internal);
        }
    }

    #[test]
    fn unaddressed_flags_block_only_the_all_clear() {
        let accounting = RunAccounting {
            unaddressed_signals: 2,
            new_findings: 1,
            ..clean()
        };
        assert_eq!(status(&accounting), RunStatus::IssuesFound);
    }

    proptest::proptest! {
        /// `healthy` only for a complete, non-empty, error-free run that leaves nothing active.
        #[test]
        fn healthy_only_when_everything_is_accounted_for(
            collection_completed: bool,
            scope_resources in 0u32..4,
            errors in 0u32..3,
            new_findings in 0u32..3,
            reconfirmed_findings in 0u32..3,
            uncertain_verdicts in 0u32..3,
            missing_verdicts in 0u32..3,
            unaddressed_signals in 0u32..3,
            empty_answer: bool,
        ) {
            let accounting = RunAccounting {
                collection_completed,
                scope_resources,
                errors,
                new_findings,
                reconfirmed_findings,
                uncertain_verdicts,
                missing_verdicts,
                unaddressed_signals,
                empty_answer,
            };
            let healthy = status(&accounting) == RunStatus::Healthy;
            proptest::prop_assert_eq!(
                healthy,
                collection_completed
                    && scope_resources > 0
                    && errors == 0
                    && !empty_answer
                    && missing_verdicts == 0
                    && unaddressed_signals == 0
                    && new_findings + reconfirmed_findings + uncertain_verdicts == 0
            );
        }
    }
}
