//! The redaction of host read output (`pulse_read` exec, file and tail), applied on the agent
//! before the text leaves the host, and by the relay to the command it records in the audit.
//!
//! What counts as a secret is owned by `pulse-redaction`: read time applies the same secret
//! words and rules as the model runner's provider-bound `Redactor`, which sanitises every
//! request again (with the deployment's own secrets) before it leaves for a model provider.

pub use pulse_redaction::redact_read as redact;
