//! Per-run admission: the profile's [`ToolPolicy`], per-run call limits, and the rule that a
//! repeated identical denied call ends the run.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::policy::{AdmittedCall, Denial, DenialCode, ProposedCall, ToolPolicy};
use crate::tools::ToolName;

/// The run must stop: the model repeated a call that was already denied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("repeated identical denied call to {tool} ({code}); the run ends")]
pub struct TerminalDenial {
    /// Stable code of this terminal failure.
    pub terminal_code: &'static str,
    pub tool: String,
    /// The code the call was denied with (both times).
    pub code: DenialCode,
}

impl TerminalDenial {
    pub const CODE: &'static str = "repeated_denied_call";
}

/// What makes two calls the same call: the tool name and the canonical JSON of the arguments,
/// so key order and whitespace do not make a repeat look new.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallKey {
    name: String,
    arguments: Vec<u8>,
}

impl CallKey {
    pub fn of(name: &str, arguments: &Value) -> Self {
        Self {
            name: name.to_owned(),
            arguments: canonical_key(arguments),
        }
    }
}

/// Remembers denied calls of one run by [`CallKey`].
#[derive(Debug, Default, Clone)]
pub struct DenialTracker {
    seen: HashSet<CallKey>,
}

impl DenialTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a denial. The first time a call is denied the denial is returned for the model;
    /// the second identical denied call is terminal.
    pub fn record(
        &mut self,
        name: &str,
        arguments: &Value,
        denial: Denial,
    ) -> Result<Denial, TerminalDenial> {
        if self.seen.insert(CallKey::of(name, arguments)) {
            Ok(denial)
        } else {
            Err(TerminalDenial {
                terminal_code: TerminalDenial::CODE,
                tool: denial.tool,
                code: denial.code,
            })
        }
    }

    /// How many distinct calls were denied.
    pub fn distinct_denials(&self) -> usize {
        self.seen.len()
    }
}

fn canonical_key(arguments: &Value) -> Vec<u8> {
    // Canonicalization only fails for integers outside the I-JSON range; serde_json's sorted map
    // still gives a stable key for those.
    pulse_domain::canonical_json::canonicalize(arguments)
        .unwrap_or_else(|_| arguments.to_string().into_bytes())
}

/// Why a call did not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    /// Return the denial to the model as the call's error result and continue.
    #[error(transparent)]
    Denied(Denial),
    /// End the loop.
    #[error(transparent)]
    Terminal(TerminalDenial),
}

/// Admission for one run: create one per run and pass every model call through it before
/// dispatch.
#[derive(Debug)]
pub struct RunGate {
    policy: Arc<ToolPolicy>,
    denials: DenialTracker,
    admitted: HashMap<ToolName, u32>,
}

impl RunGate {
    pub fn new(policy: Arc<ToolPolicy>) -> Self {
        Self {
            policy,
            denials: DenialTracker::new(),
            admitted: HashMap::new(),
        }
    }

    pub fn policy(&self) -> &ToolPolicy {
        &self.policy
    }

    pub fn admit<C: ProposedCall + ?Sized>(&mut self, call: &C) -> Result<AdmittedCall, GateError> {
        let denial = match self.policy.admit(call) {
            Ok(admitted) => {
                let count = self.admitted.entry(admitted.tool).or_insert(0);
                match self.policy.call_limit(admitted.tool) {
                    Some(limit) if *count >= limit => Denial::new(
                        DenialCode::CallLimitReached,
                        call.tool_name(),
                        format!(
                            "{} may be called {limit} time(s) per run; reuse the earlier result",
                            admitted.tool
                        ),
                    ),
                    _ => {
                        *count += 1;
                        return Ok(admitted);
                    }
                }
            }
            Err(denial) => denial,
        };
        match self
            .denials
            .record(call.tool_name(), call.tool_arguments(), denial)
        {
            Ok(denial) => Err(GateError::Denied(denial)),
            Err(terminal) => Err(GateError::Terminal(terminal)),
        }
    }
}
