//! Pulse domain: identifiers, vocabularies and pure rules. No IO lives here.

pub mod action;
pub mod agent_protocol;
pub mod ai_settings;
pub mod alert_rules;
pub mod backoff;
pub mod canonical_json;
pub mod connection;
pub mod finding;
pub mod fleet;
pub mod forecast;
pub mod ids;
pub mod listing;
pub mod model_catalogue;
pub mod patrol;
pub mod resource;
pub mod scope;
pub mod tenant;
pub mod text;
pub mod usd;

pub use ids::{TenantId, TenantIdError};
pub use scope::{Scope, ScopeError};
