//! Invocation descriptors: what one call of a tool does, decided from the tool name and, for mixed
//! tools, one discriminator argument. Anything that cannot be classified is treated as the most
//! dangerous class there is (write to infrastructure).

use serde::Serialize;
use serde_json::Value;

/// The workflow kind of one invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InvocationKind {
    Resolve,
    Read,
    Write,
    UserInput,
}

/// What one invocation may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MutationTarget {
    None,
    PulseState,
    Infrastructure,
}

/// The classification of one invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct InvocationClass {
    pub kind: InvocationKind,
    pub mutation: MutationTarget,
}

impl InvocationClass {
    pub const RESOLVE: Self = Self::new(InvocationKind::Resolve, MutationTarget::None);
    pub const READ: Self = Self::new(InvocationKind::Read, MutationTarget::None);
    pub const USER_INPUT: Self = Self::new(InvocationKind::UserInput, MutationTarget::None);
    pub const WRITE_PULSE_STATE: Self =
        Self::new(InvocationKind::Write, MutationTarget::PulseState);
    pub const WRITE_INFRASTRUCTURE: Self =
        Self::new(InvocationKind::Write, MutationTarget::Infrastructure);
    /// What an unknown tool or an unknown, missing or malformed discriminator classifies as.
    pub const FAIL_CLOSED: Self = Self::WRITE_INFRASTRUCTURE;

    pub const fn new(kind: InvocationKind, mutation: MutationTarget) -> Self {
        Self { kind, mutation }
    }
}

/// How a tool's invocations are classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvocationDescriptor {
    /// Every invocation has the same class.
    Static(InvocationClass),
    /// The class depends on the string value of one argument; the cases exactly cover that
    /// argument's schema enum (checked by [`crate::tools::check_catalogue`]).
    Discriminator {
        argument: &'static str,
        cases: &'static [(&'static str, InvocationClass)],
    },
}

impl InvocationDescriptor {
    /// The class of a call with these arguments; unknown, missing or non-string discriminator
    /// values fail closed.
    pub fn classify(&self, arguments: &Value) -> InvocationClass {
        match self {
            Self::Static(class) => *class,
            Self::Discriminator { argument, cases } => arguments
                .get(argument)
                .and_then(Value::as_str)
                .and_then(|value| lookup(cases, value))
                .unwrap_or(InvocationClass::FAIL_CLOSED),
        }
    }

    /// The class of one discriminator value (`None` for static descriptors or unknown values).
    pub fn case(&self, value: &str) -> Option<InvocationClass> {
        match self {
            Self::Static(_) => None,
            Self::Discriminator { cases, .. } => lookup(cases, value),
        }
    }

    /// The discriminator argument, when there is one.
    pub fn discriminator(&self) -> Option<&'static str> {
        match self {
            Self::Static(_) => None,
            Self::Discriminator { argument, .. } => Some(argument),
        }
    }
}

fn lookup(cases: &[(&'static str, InvocationClass)], value: &str) -> Option<InvocationClass> {
    cases
        .iter()
        .find(|(case, _)| *case == value)
        .map(|(_, class)| *class)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MIXED: InvocationDescriptor = InvocationDescriptor::Discriminator {
        argument: "action",
        cases: &[
            ("list", InvocationClass::READ),
            ("dismiss", InvocationClass::WRITE_PULSE_STATE),
        ],
    };

    #[test]
    fn discriminator_cases_classify_and_everything_else_fails_closed() {
        assert_eq!(
            MIXED.classify(&json!({"action": "list"})),
            InvocationClass::READ
        );
        assert_eq!(
            MIXED.classify(&json!({"action": "dismiss"})),
            InvocationClass::WRITE_PULSE_STATE
        );
        for args in [
            json!({"action": "scale"}),
            json!({}),
            json!({"action": 3}),
            json!({"action": null}),
            json!("list"),
            json!(null),
        ] {
            assert_eq!(
                MIXED.classify(&args),
                InvocationClass::FAIL_CLOSED,
                "{args}"
            );
        }
    }
}
