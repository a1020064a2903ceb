//! What one judgement of a fresh observation concluded, why, and the readings it used: the one
//! shape of both [`crate::resolution::ResolutionCheck`] and
//! [`crate::postcondition::PostconditionCheck`].

use std::collections::BTreeMap;

/// A conclusion `outcome`, why, and the readings judged. `reason` holds only verifier-built text
/// and numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Check<O> {
    pub outcome: O,
    pub reason: String,
    /// The readings the check judged (e.g. `memory_percent`, `uptime_seconds`).
    pub readings: BTreeMap<String, f64>,
}

impl<O> Check<O> {
    pub(crate) fn new(outcome: O, reason: impl Into<String>) -> Self {
        Self {
            outcome,
            reason: reason.into(),
            readings: BTreeMap::new(),
        }
    }

    /// Adds reading `name` when there is one and it is finite.
    pub(crate) fn reading(mut self, name: &str, value: Option<f64>) -> Self {
        if let Some(v) = value.filter(|v| v.is_finite()) {
            self.readings.insert(name.to_owned(), v);
        }
        self
    }
}
