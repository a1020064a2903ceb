//! Semantic validation of a decoded manifest (what the JSON Schema cannot say).

use crate::manifest::Manifest;

/// Every rule the manifest breaks, each naming the field and the reason; empty when valid.
pub fn problems(_manifest: &Manifest) -> Vec<String> {
    Vec::new()
}
