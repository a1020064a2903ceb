//! The take deadline of a dispatched Patrol run. Pure and clock-free: `now` is passed in.
//!
//! A run whose `jobs.watch` job was written stays `queued` until a model-runner takes the job and
//! starts it. When no runner does (none is running, none is connected to NATS, or the job never
//! reached the stream), the run would wait forever. So:
//!
//! - A run still `queued` `deadline` after its job was written gets its job written again, with
//!   a new message id, at most `max_redispatches` times. Each re-dispatch restarts the deadline.
//!   A runner that later takes an older copy of the job starts the run; the other copies find it
//!   started (or ended) and are acked untouched.
//! - A run still untaken one deadline after its last re-dispatch ends `error` with cause
//!   [`ErrorCause::RunnerUnavailable`], whose summary and recommendation tell the operator to
//!   check the model-runner.
//!
//! Invariant: a dispatched run is never `queued` longer than [`TakeDeadline::longest_wait`]
//! after its first dispatch (plus one sweep interval).
//!
//! [`ErrorCause::RunnerUnavailable`]: pulse_domain::patrol::run::ErrorCause::RunnerUnavailable

use std::time::Duration;

use chrono::{DateTime, Utc};

/// How long a dispatched run may wait to be taken, and how often its job is written again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TakeDeadline {
    pub deadline: Duration,
    pub max_redispatches: u32,
}

impl TakeDeadline {
    /// `patrol.take_deadline_ms` and `patrol.max_redispatches`.
    pub fn from_config(config: &pulse_config::PatrolConfig) -> Self {
        Self {
            deadline: config.take_deadline(),
            max_redispatches: config.max_redispatches,
        }
    }

    /// The longest a run stays `queued` after its first dispatch when no runner takes it.
    pub fn longest_wait(&self) -> Duration {
        self.deadline
            .saturating_mul(self.max_redispatches.saturating_add(1))
    }

    /// What to do with a `queued` run whose current job was written at `dispatched_at` and
    /// written again `redispatches` times so far.
    pub fn decide(
        &self,
        dispatched_at: DateTime<Utc>,
        redispatches: u32,
        now: DateTime<Utc>,
    ) -> TakeDecision {
        let waited = (now - dispatched_at).to_std().unwrap_or(Duration::ZERO);
        if waited < self.deadline {
            TakeDecision::Wait
        } else if redispatches < self.max_redispatches {
            TakeDecision::Redispatch {
                attempt: redispatches + 1,
            }
        } else {
            TakeDecision::GiveUp
        }
    }
}

/// The decision on one dispatched, untaken run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakeDecision {
    /// Its deadline has not passed.
    Wait,
    /// Write its job again; `attempt` counts re-dispatches from 1.
    Redispatch { attempt: u32 },
    /// End it `error` with cause `runner_unavailable`.
    GiveUp,
}

/// The stored detail of a run that no runner took.
pub fn give_up_detail(policy: &TakeDeadline, redispatches: u32) -> String {
    let jobs = redispatches.saturating_add(1);
    format!(
        "no model-runner took the run's job ({jobs} {} written, {} s apart); check that the \
         model-runner service is running and connected to NATS, then run Patrol again",
        if jobs == 1 { "job" } else { "jobs" },
        policy.deadline.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use chrono::TimeZone;
    use proptest::prelude::*;

    fn t(ms: i64) -> DateTime<Utc> {
        Utc.timestamp_millis_opt(1_767_225_600_000 + ms).unwrap()
    }

    const POLICY: TakeDeadline = TakeDeadline {
        deadline: Duration::from_secs(60),
        max_redispatches: 2,
    };

    #[test]
    fn a_run_waits_its_deadline_then_is_dispatched_again_then_given_up() {
        assert_eq!(POLICY.decide(t(0), 0, t(59_999)), TakeDecision::Wait);
        assert_eq!(
            POLICY.decide(t(0), 0, t(60_000)),
            TakeDecision::Redispatch { attempt: 1 }
        );
        assert_eq!(
            POLICY.decide(t(60_000), 1, t(120_000)),
            TakeDecision::Redispatch { attempt: 2 }
        );
        assert_eq!(POLICY.decide(t(120_000), 2, t(179_000)), TakeDecision::Wait);
        assert_eq!(
            POLICY.decide(t(120_000), 2, t(180_000)),
            TakeDecision::GiveUp
        );
        assert_eq!(POLICY.longest_wait(), Duration::from_secs(180));
    }

    #[test]
    fn no_redispatch_allowed_gives_up_at_the_first_deadline() {
        let policy = TakeDeadline {
            deadline: Duration::from_secs(5),
            max_redispatches: 0,
        };
        assert_eq!(policy.decide(t(0), 0, t(4_999)), TakeDecision::Wait);
        assert_eq!(policy.decide(t(0), 0, t(5_000)), TakeDecision::GiveUp);
    }

    #[test]
    fn a_clock_behind_the_dispatch_waits() {
        assert_eq!(POLICY.decide(t(10_000), 0, t(0)), TakeDecision::Wait);
    }

    #[test]
    fn the_detail_says_what_to_do() {
        let detail = give_up_detail(&POLICY, 2);
        assert!(detail.contains("3 jobs written, 60 s apart"), "{detail}");
        assert!(detail.contains("check that the model-runner"), "{detail}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Simulates a run no runner ever takes, swept at arbitrary moments: it is dispatched
        /// again at most `max_redispatches` times, each only after a full deadline, and ends
        /// no later than `longest_wait` plus one sweep gap after its first dispatch.
        #[test]
        fn an_untaken_run_always_ends_within_its_longest_wait(
            deadline_ms in 1_000u64..600_000,
            max_redispatches in 0u32..6,
            gaps in proptest::collection::vec(1u64..120_000, 1..400),
        ) {
            let policy = TakeDeadline {
                deadline: Duration::from_millis(deadline_ms),
                max_redispatches,
            };
            let mut now = 0i64;
            let mut dispatched_at = 0i64;
            let mut redispatches = 0u32;
            let mut ended_at = None;
            let largest_gap = gaps.iter().copied().max().unwrap_or(0);
            for gap in gaps.iter().copied().chain(std::iter::repeat(largest_gap)) {
                now += gap as i64;
                match policy.decide(t(dispatched_at), redispatches, t(now)) {
                    TakeDecision::Wait => {
                        prop_assert!(now - dispatched_at < deadline_ms as i64);
                    }
                    TakeDecision::Redispatch { attempt } => {
                        prop_assert!(now - dispatched_at >= deadline_ms as i64);
                        prop_assert_eq!(attempt, redispatches + 1);
                        prop_assert!(attempt <= max_redispatches);
                        redispatches = attempt;
                        dispatched_at = now;
                    }
                    TakeDecision::GiveUp => {
                        prop_assert!(now - dispatched_at >= deadline_ms as i64);
                        prop_assert_eq!(redispatches, max_redispatches);
                        ended_at = Some(now);
                        break;
                    }
                }
            }
            let ended_at = ended_at.expect("the loop ends only by giving up");
            let bound = policy.longest_wait().as_millis() as i64
                + (max_redispatches as i64 + 1) * largest_gap as i64;
            prop_assert!(ended_at <= bound, "ended at {} > {}", ended_at, bound);
        }

        /// The decision only moves forward as time passes: once due, never back to waiting.
        #[test]
        fn a_due_run_stays_due(
            deadline_ms in 1_000u64..600_000,
            redispatches in 0u32..5,
            max_redispatches in 0u32..5,
            at in 0i64..1_000_000,
            later in 0i64..1_000_000,
        ) {
            let policy = TakeDeadline {
                deadline: Duration::from_millis(deadline_ms),
                max_redispatches,
            };
            let first = policy.decide(t(0), redispatches, t(at));
            let second = policy.decide(t(0), redispatches, t(at + later));
            if first != TakeDecision::Wait {
                prop_assert_eq!(first, second);
            }
        }
    }
}
