//! pulse-redaction: the one owner of what counts as a secret and how it is removed.
//!
//! One list of secret words (`secret_words`) and one table of rules (`rules`) serve two entry
//! points:
//! - [`Redactor`], provider-bound: every `ChatRequest` passes [`Redactor::sanitize`] right
//!   before transport; it adds the deployment's configured secrets and, on routes that leave
//!   the local trust boundary, withholds local-only resource identifiers, and it counts what it
//!   removed for the export audit.
//! - [`redact_read`], read time: the output of a host read (`pulse_read` exec, file and tail) is
//!   redacted on the agent before it leaves the host, and the relay redacts the command it
//!   records. It applies the same built-in words and rules, with nothing configured.
//!
//! Both write the same markers (`[REDACTED:<kind>]`), so text redacted at read time passes the
//! provider-bound sanitizer unchanged.
//!
//! Invariants:
//! - Depth does not hide a secret. A string that is itself a JSON document (a tool result, a
//!   structured log line, JSON inside a JSON string) is decoded and sanitized value by value, keys
//!   included, and encoded again only when something was redacted. Text that does not decode (a
//!   truncated line, escaped JSON inside a log line) is scanned as text, and a non-secret
//!   `key = "value"` never shields the assignments inside its value.
//! - Ordinary text survives: a secret-named key only loses a value that could be a credential
//!   (not a placeholder such as `null` or `${VAR}`, not an auth scheme word), and weak names
//!   (`sig`, `pass`, `pwd`, a secret word inside a longer word) need a value that looks like one.
//! - Every change is counted: the report's `total` grows exactly when text changed, so
//!   sanitizing is idempotent (a second pass finds nothing) and a decoded document is re-encoded
//!   only when its count grew.
//! - Cost: one `RegexSet` pass over literal triggers picks the rules a string can match; only
//!   those run. Strings too short to hold a credential skip the rules.

mod kind;
mod read;
mod redactor;
mod rules;
mod secret_words;

pub use kind::RedactionKind;
pub use read::redact_read;
pub use redactor::{
    Destination, LocalOnlyResource, MEMO_MIN_BYTES, MIN_CONFIGURED_LEN, RedactionConfig,
    RedactionConfigError, RedactionReport, Redactor, TrustBoundary,
};
pub use secret_words::is_secret_key;
