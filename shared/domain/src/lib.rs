//! Pulse domain: identifiers, vocabularies and pure rules. No IO lives here.

pub mod canonical_json;
pub mod fleet;
pub mod ids;
pub mod scope;

pub use ids::{TenantId, TenantIdError};
pub use scope::{Scope, ScopeError};
