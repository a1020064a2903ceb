//! Pulse store: the Postgres pool, embedded migrations, tenant-scoped transactions and the
//! repositories every service shares.

pub mod actions;
pub mod agents;
pub mod alerts;
pub mod audit;
pub mod bootstrap;
pub mod chat;
pub mod connections;
pub mod connector_commands;
pub mod cost_ledger;
mod error;
pub mod findings;
pub mod investigations;
pub mod metrics;
pub mod migrations;
pub mod operator_state;
pub mod patrol_dispatch;
pub mod patrol_readiness;
pub mod patrol_runs;
pub mod platform;
mod pool;
pub mod quotas;
pub mod read_exec_audit;
pub mod resources;
pub mod settings;
mod tenant_tx;
pub mod tenants;
pub mod tokens;
pub mod users;
pub mod web_sessions;

pub use error::StoreError;
pub use pool::{Store, app_connection_config, connect_owner, create_database_if_missing};
pub use tenant_tx::{TenantTx, TxError, TxRetry};
