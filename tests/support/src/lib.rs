//! Test support: per-test databases and subject prefixes, binary spawners, waiting helpers.
//! Tests run against the real Postgres and NATS of the machine.

pub mod action_api;
pub mod action_broker;
pub mod agent;
pub mod cli;
pub mod db;
pub mod fakepve;
pub mod fleet;
pub mod json_text;
pub mod module_graph;
pub mod nats;
pub mod patrol;
pub mod provider_sim;
pub mod python;
pub mod qualify;
pub mod runner;
pub mod scheduler;
pub mod seed;
pub mod service;
pub mod sse;
pub mod stack;
pub mod verifier;
pub mod wait;
pub mod web;

/// Installs the process-wide rustls crypto provider (ring) once; harmless when repeated.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
