//! The HTTP API's request and answer types: what every route of the gateway takes (bodies,
//! query strings, path parameters) and answers, with their JSON Schemas, organised by API area.
//!
//! The gateway's handlers take and answer these types, and its OpenAPI document and capabilities
//! manifest are derived from them, so a client that uses them speaks the documented API: a
//! renamed field breaks its build, not its users. No transport lives here (no axum, no store):
//! how a value is refused on the wire (status, error code) is the gateway's.

#[macro_use]
mod ids;

pub mod actions;
pub mod agents;
pub mod alerts;
pub mod assistant;
pub mod audit;
pub mod connections;
pub mod constraints;
pub mod context;
pub mod cost;
pub mod events;
pub mod findings;
pub mod forecast;
pub mod models;
pub mod operator_state;
pub mod patrol;
pub mod platform;
pub mod query;
pub mod resources;
pub mod settings;
pub mod system;
pub mod tokens;
