//! Pulse capabilities: the vocabulary every surface shares (tool names, schemas, invocation
//! descriptors, execution profiles, the tool policy) and the stable error-code table.

pub mod error_codes;
pub mod exec_intent;
pub mod invocation;
pub mod object_schemas;
pub mod policy;
pub mod profile;
pub mod read_redaction;
pub mod run_gate;
pub mod secret_paths;
pub mod tools;

pub use error_codes::ErrorCode;
pub use invocation::{InvocationClass, InvocationDescriptor, InvocationKind, MutationTarget};
pub use policy::{
    AdmittedCall, ArgumentSchema, CallRef, Denial, DenialCode, OfferedTool, PolicyError,
    ProposedCall, ToolPolicy,
};
pub use profile::{ControlLevel, ExecutionProfile};
pub use run_gate::{CallKey, DenialTracker, GateError, RunGate, TerminalDenial};
pub use tools::{ToolFamily, ToolName};
