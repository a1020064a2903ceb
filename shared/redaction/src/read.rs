//! Read-time redaction: the output of a host read is redacted where it is produced (on the
//! agent, before the text leaves the host) and the relay redacts the command it records in the
//! audit. Nothing is configured there, so it is the built-in words and rules alone; the
//! provider-bound [`crate::Redactor`] applies them again, with the deployment's own secrets,
//! before anything reaches a model.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use crate::redactor::{RedactionReport, Redactor, TrustBoundary};

static BUILT_IN: LazyLock<Redactor> = LazyLock::new(Redactor::built_in);

/// `text` with every credential the built-in rules recognise replaced by its marker.
pub fn redact_read(text: &str) -> String {
    let mut report = RedactionReport {
        route: String::new(),
        boundary: TrustBoundary::Local,
        local_only_withheld: false,
        counts: BTreeMap::new(),
        total: 0,
    };
    BUILT_IN
        .sanitize_text(text, 0, &mut report)
        .unwrap_or_else(|| text.to_owned())
}
