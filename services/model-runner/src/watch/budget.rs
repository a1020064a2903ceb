//! The Watch turn budget and token economy (WATCH-01..03).
//!
//! - A declining run allowance of [`RUN_ALLOWANCE_TOKENS`]: each turn is charged what it added
//!   to the run (its output plus the growth of its input over the previous turn; the seed and
//!   tool list of the first request are the fixed base). When what remains cannot fund another
//!   structured turn, investigation stops and the run goes to its final decision turn, which is
//!   never refused for prior usage.
//! - [`STRUCTURED_TURN_OUTPUT_TOKENS`] per structured turn, [`OPENING_TURN_OUTPUT_TOKENS`] for
//!   the opening turn, which can only read. There is no separate summary turn:
//!   the stored analysis is written by Pulse from accepted outcomes, so a model summary would
//!   be spent and discarded.
//! - Model turns: [`SCOPED_TURNS`] for a quick scoped check, [`FULL_TURNS`] for a full run, the
//!   final decision turn included; one repair-only turn may extend either by one.
//! - A batch of lifecycle calls with both accepted and refused calls stops the turn for one
//!   repair-only turn (once per run).
//! - A read identical to one already answered in the run (a weak model's loop) ends the
//!   investigation: the run goes to its decision turn.

use std::sync::Arc;

use pulse_agent_loop::agent_loop::{AllowanceDecision, TokenAllowance};
use pulse_agent_loop::provider::Usage;

use crate::tools::RunLedger;

pub const RUN_ALLOWANCE_TOKENS: u64 = 7_000;
pub const STRUCTURED_TURN_OUTPUT_TOKENS: u32 = 2_048;
/// The opening turn offers reads only: a call is about 40 tokens, so 512 is a dozen reads. A
/// real 1.5B model on a CPU wrote 2,048 tokens of the same reads over and over, 194 s of the
/// run's 300.
pub const OPENING_TURN_OUTPUT_TOKENS: u32 = 512;
/// An investigation turn on a route whose calls come as text (see [`TurnCaps::for_route`]).
pub const TEXT_ROUTE_TURN_OUTPUT_TOKENS: u32 = 768;
/// The final decision, repair and review turns on such a route.
pub const TEXT_ROUTE_DECISION_OUTPUT_TOKENS: u32 = 1_024;
/// Distinct calls one investigation answer may run on such a route.
pub const TEXT_ROUTE_CALLS_PER_ANSWER: usize = 6;
pub const SCOPED_TURNS: u32 = 4;
pub const FULL_TURNS: u32 = 10;

/// What each turn of a run may write, by how the route's calls arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnCaps {
    /// Output tokens of the opening turn (reads only).
    pub opening_output: u32,
    /// Output tokens of every other investigation turn.
    pub investigate_output: u32,
    /// Output tokens of a one-answer turn (decision, repair, review).
    pub decision_output: u32,
    /// Distinct calls one investigation answer may run.
    pub investigate_calls: usize,
}

impl TurnCaps {
    /// The caps of a route; `calls_as_text` is whether its calls are recovered from text (by
    /// default the local model servers). Such a model writes every call out token by token on
    /// the user's own CPU: a 1.5B model on 2 cores writes about 10 tokens a second, so a
    /// 2,048-token answer is 200 s of a 300 s run, and it once wrote 2,048 tokens of calls whose
    /// results made the next prompt 5,000 tokens long. 768 tokens are still a dozen reads or
    /// four reports; a capped call is made again in the next answer.
    pub fn for_route(calls_as_text: bool) -> Self {
        if calls_as_text {
            Self {
                opening_output: OPENING_TURN_OUTPUT_TOKENS,
                investigate_output: TEXT_ROUTE_TURN_OUTPUT_TOKENS,
                decision_output: TEXT_ROUTE_DECISION_OUTPUT_TOKENS,
                investigate_calls: TEXT_ROUTE_CALLS_PER_ANSWER,
            }
        } else {
            Self {
                opening_output: OPENING_TURN_OUTPUT_TOKENS,
                investigate_output: STRUCTURED_TURN_OUTPUT_TOKENS,
                decision_output: STRUCTURED_TURN_OUTPUT_TOKENS,
                investigate_calls: pulse_agent_loop::agent_loop::DEFAULT_MAX_CALLS_PER_TURN,
            }
        }
    }
}

/// Why the allowance stopped the investigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllowanceStop {
    /// What remains cannot fund another structured turn.
    Exhausted,
    /// The last batch of lifecycle calls was partly refused: one repair-only turn.
    Repair,
    /// A read repeated one already answered in the run: reading on is a loop, so the run goes
    /// to its decision turn.
    Decide,
}

/// The run's declining allowance, told every turn's usage.
#[derive(Debug)]
pub struct DecliningAllowance {
    remaining: u64,
    last_input: Option<u64>,
    ledger: Arc<RunLedger>,
    repair_available: bool,
    stopped: Option<AllowanceStop>,
    /// What one more investigation turn may cost: the route's cap on its output.
    turn_output: u64,
}

impl DecliningAllowance {
    pub fn new(ledger: Arc<RunLedger>) -> Self {
        Self {
            remaining: RUN_ALLOWANCE_TOKENS,
            last_input: None,
            ledger,
            repair_available: true,
            stopped: None,
            turn_output: u64::from(STRUCTURED_TURN_OUTPUT_TOKENS),
        }
    }

    /// An allowance for turns capped at `caps`: it stops when what remains cannot fund one
    /// more investigation turn of the route.
    pub fn with_caps(mut self, caps: TurnCaps) -> Self {
        self.turn_output = u64::from(caps.investigate_output);
        self
    }

    /// Whether what remains funds one more investigation turn.
    pub fn funds_a_turn(&self) -> bool {
        self.remaining >= self.turn_output
    }

    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Why the last loop stopped on the allowance, cleared.
    pub fn take_stop(&mut self) -> Option<AllowanceStop> {
        self.stopped.take()
    }

    /// Charges one turn; the same rule the loop hook applies.
    pub fn charge(&mut self, turn_usage: Usage) {
        let added_input = self
            .last_input
            .map_or(0, |last| turn_usage.input_tokens.saturating_sub(last));
        self.last_input = Some(turn_usage.input_tokens);
        self.remaining = self
            .remaining
            .saturating_sub(turn_usage.output_tokens.saturating_add(added_input));
    }
}

impl TokenAllowance for DecliningAllowance {
    fn after_turn(&mut self, _turn: u32, turn_usage: Usage, _total: Usage) -> AllowanceDecision {
        self.charge(turn_usage);
        let batch = self.ledger.take_batch();
        if batch.is_mixed() && self.repair_available {
            self.repair_available = false;
            self.stopped = Some(AllowanceStop::Repair);
            return AllowanceDecision::Stop;
        }
        if self.ledger.take_repeated_read() {
            self.stopped = Some(AllowanceStop::Decide);
            return AllowanceDecision::Stop;
        }
        if !self.funds_a_turn() {
            self.stopped = Some(AllowanceStop::Exhausted);
            return AllowanceDecision::Stop;
        }
        AllowanceDecision::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64) -> Usage {
        Usage::new(input, output)
    }

    #[test]
    fn the_allowance_declines_with_what_each_turn_adds() {
        let mut allowance = DecliningAllowance::new(Arc::new(RunLedger::new()));
        // The first request's input is the fixed base.
        assert_eq!(
            allowance.after_turn(1, usage(3_000, 100), usage(3_000, 100)),
            AllowanceDecision::Continue
        );
        assert_eq!(allowance.remaining(), RUN_ALLOWANCE_TOKENS - 100);
        // 2,000 tokens of tool results and 500 of output.
        assert_eq!(
            allowance.after_turn(2, usage(5_000, 500), usage(8_000, 600)),
            AllowanceDecision::Continue
        );
        assert_eq!(allowance.remaining(), RUN_ALLOWANCE_TOKENS - 2_600);
        assert_eq!(
            allowance.after_turn(3, usage(8_000, 500), usage(16_000, 1_100)),
            AllowanceDecision::Stop
        );
        assert_eq!(allowance.take_stop(), Some(AllowanceStop::Exhausted));
        assert_eq!(allowance.take_stop(), None);
    }

    #[test]
    fn a_route_whose_calls_come_as_text_funds_turns_down_to_its_own_cap() {
        let text = TurnCaps::for_route(true);
        let native = TurnCaps::for_route(false);
        assert!(text.investigate_output < native.investigate_output);
        assert!(text.decision_output < native.decision_output);
        assert!(text.investigate_calls < native.investigate_calls);
        // 1,000 left: one more 768-token turn, but not a 2,048-token one.
        let turns = |caps: TurnCaps| {
            let mut allowance = DecliningAllowance::new(Arc::new(RunLedger::new())).with_caps(caps);
            allowance.after_turn(1, usage(3_000, 100), usage(3_000, 100));
            allowance.after_turn(2, usage(8_000, 900), usage(11_000, 1_000))
        };
        assert_eq!(turns(text), AllowanceDecision::Continue);
        assert_eq!(turns(native), AllowanceDecision::Stop);
    }

    #[test]
    fn a_repeated_read_sends_the_run_to_its_decision() {
        let ledger = Arc::new(RunLedger::new());
        let mut allowance = DecliningAllowance::new(ledger.clone());
        assert_eq!(
            allowance.after_turn(1, usage(1_000, 50), usage(1_000, 50)),
            AllowanceDecision::Continue
        );
        ledger.note_repeated_read();
        assert_eq!(
            allowance.after_turn(2, usage(1_100, 50), usage(2_100, 100)),
            AllowanceDecision::Stop
        );
        assert_eq!(allowance.take_stop(), Some(AllowanceStop::Decide));
        assert!(!ledger.take_repeated_read(), "taken by the allowance");
    }

    #[test]
    fn one_mixed_lifecycle_batch_gets_one_repair_turn() {
        let ledger = Arc::new(RunLedger::new());
        let mut allowance = DecliningAllowance::new(ledger.clone());
        // All accepted, or all refused: no repair.
        ledger.tally(2, 0);
        assert_eq!(
            allowance.after_turn(1, usage(1_000, 50), usage(1_000, 50)),
            AllowanceDecision::Continue
        );
        ledger.tally(0, 1);
        assert_eq!(
            allowance.after_turn(2, usage(1_100, 50), usage(2_100, 100)),
            AllowanceDecision::Continue
        );
        ledger.tally(1, 1);
        assert_eq!(
            allowance.after_turn(3, usage(1_200, 50), usage(3_300, 150)),
            AllowanceDecision::Stop
        );
        assert_eq!(allowance.take_stop(), Some(AllowanceStop::Repair));
        // Exactly one per run.
        ledger.tally(1, 1);
        assert_eq!(
            allowance.after_turn(4, usage(1_300, 50), usage(4_600, 200)),
            AllowanceDecision::Continue
        );
        assert_eq!(allowance.take_stop(), None);
    }
}
