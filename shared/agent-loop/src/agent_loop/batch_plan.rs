//! Which calls of one answer go to the run's gate. Weak models repeat themselves inside one
//! answer (one was seen writing 45 calls, 41 of them the same): a call identical to an earlier
//! call of the same answer (same name, JSON-equal arguments, see [`CallKey`]) is not admitted
//! or run again but answered with a pointer to that call's result, and distinct calls past the
//! answer's cap ([`super::LoopLimits::max_calls_per_turn`]) are refused unseen. Pure: the loop
//! applies the plan, so every call id still gets exactly one result.
//!
//! Identity is per answer only: a call repeated in a later turn is the gate's business (it may
//! be a legitimate re-read, and a repeated denied call ends the run).

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use pulse_capabilities::CallKey;

use crate::provider::types::ToolCall;

/// What the loop does with one call of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Disposition {
    /// The first of its kind and within the cap: goes to the run's gate.
    Admit,
    /// Identical to the call at this index of the same answer, which comes first.
    DuplicateOf(usize),
    /// A distinct call past the cap: refused without admission.
    OverCap,
}

/// One disposition per call, in the answer's order. The first `cap` distinct calls are
/// admitted (a cap of 0 counts as 1: an answer's first call always gets its chance).
pub(crate) fn plan(calls: &[ToolCall], cap: usize) -> Vec<Disposition> {
    let cap = cap.max(1);
    let mut first: HashMap<CallKey, usize> = HashMap::new();
    let mut distinct = 0usize;
    let mut plan = Vec::with_capacity(calls.len());
    for (index, call) in calls.iter().enumerate() {
        plan.push(
            match first.entry(CallKey::of(&call.name, &call.arguments)) {
                Entry::Occupied(earlier) => Disposition::DuplicateOf(*earlier.get()),
                Entry::Vacant(slot) => {
                    slot.insert(index);
                    distinct += 1;
                    if distinct <= cap {
                        Disposition::Admit
                    } else {
                        Disposition::OverCap
                    }
                }
            },
        );
    }
    plan
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::Disposition::{Admit, DuplicateOf, OverCap};
    use super::*;

    fn call(id: &str, name: &str, arguments: serde_json::Value) -> ToolCall {
        ToolCall::new(id, name, arguments)
    }

    #[test]
    fn identical_calls_point_at_the_first_and_key_order_does_not_matter() {
        let calls = [
            call(
                "a",
                "pulse_query",
                json!({"action": "get", "resource_id": "vm/1"}),
            ),
            call(
                "b",
                "pulse_query",
                json!({"resource_id": "vm/1", "action": "get"}),
            ),
            call(
                "c",
                "pulse_query",
                json!({"action": "get", "resource_id": "vm/2"}),
            ),
            call(
                "d",
                "patrol_get_findings",
                json!({"action": "get", "resource_id": "vm/1"}),
            ),
            call(
                "e",
                "pulse_query",
                json!({"action": "get", "resource_id": "vm/1"}),
            ),
        ];
        assert_eq!(
            plan(&calls, 16),
            [Admit, DuplicateOf(0), Admit, Admit, DuplicateOf(0)]
        );
    }

    #[test]
    fn distinct_calls_past_the_cap_are_refused_and_duplicates_do_not_count() {
        let calls: Vec<ToolCall> = [1, 1, 2, 3, 2, 4, 3]
            .iter()
            .enumerate()
            .map(|(i, n)| call(&format!("c{i}"), "pulse_query", json!({"limit": n})))
            .collect();
        assert_eq!(
            plan(&calls, 2),
            [
                Admit,
                DuplicateOf(0),
                Admit,
                OverCap,
                DuplicateOf(2),
                OverCap,
                DuplicateOf(3)
            ]
        );
    }

    #[test]
    fn a_cap_of_zero_still_admits_the_first_call() {
        let calls = [
            call("a", "pulse_query", json!({"limit": 1})),
            call("b", "pulse_query", json!({"limit": 2})),
        ];
        assert_eq!(plan(&calls, 0), [Admit, OverCap]);
    }
}
