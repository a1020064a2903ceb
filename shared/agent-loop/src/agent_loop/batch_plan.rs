//! Which calls of one answer go to the run's gate. Weak models repeat themselves inside one
//! answer (one was seen writing 45 calls, 41 of them the same): a call identical to an earlier
//! call of the same answer (same name, JSON-equal arguments, see [`CallKey`]) is not admitted
//! or run again but answered with a pointer to that call's result. Pure: the loop applies the
//! plan, so every call id still gets exactly one result.
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
    /// The first of its kind: goes to the run's gate.
    Admit,
    /// Identical to the call at this index of the same answer, which comes first.
    DuplicateOf(usize),
}

/// One disposition per call, in the answer's order.
pub(crate) fn plan(calls: &[ToolCall]) -> Vec<Disposition> {
    let mut first: HashMap<CallKey, usize> = HashMap::new();
    let mut plan = Vec::with_capacity(calls.len());
    for (index, call) in calls.iter().enumerate() {
        plan.push(
            match first.entry(CallKey::of(&call.name, &call.arguments)) {
                Entry::Occupied(earlier) => Disposition::DuplicateOf(*earlier.get()),
                Entry::Vacant(slot) => {
                    slot.insert(index);
                    Disposition::Admit
                }
            },
        );
    }
    plan
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::Disposition::{Admit, DuplicateOf};
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
            plan(&calls),
            [Admit, DuplicateOf(0), Admit, Admit, DuplicateOf(0)]
        );
    }
}
