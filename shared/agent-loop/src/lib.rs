//! pulse-agent-loop: the agentic loop, the provider transports and what model calls cost.
//!
//! What it owns:
//! - [`provider`]: the HTTP transport over the pure protocols of `pulse-providers` (re-exported
//!   here: the provider-neutral types, the four wire formats, the one stream parser), with its
//!   retry (one, same route, only before output), its timeouts and transport-error
//!   classification, and the [`provider::pool::ProviderPool`] a service keeps one of, so every
//!   provider of one base URL and connect timeout shares one HTTP client.
//! - [`route`]: `provider:model` routes and which configured route each surface uses, with no
//!   silent fallback; [`registry`] is the provider table of `pulse-providers`.
//! - [`agent_loop`]: the loop itself: ask the model, admit its tool calls through the run's gate,
//!   execute the admitted ones, feed the results back, under turn, call and token limits; when
//!   the caller allows it, calls a model wrote as text become tool calls under the same
//!   admission ([`agent_loop::text_calls`]).
//! - [`pricing`] and [`cost`]: the exact price table, the cost of one call, dollar budgets, the
//!   tenant spend budgets checked before each call and the usage sink that writes the cost
//!   ledger (the ledger's rows and sums are `pulse-store`'s).
//!
//! What it does not own, and takes from its caller instead:
//! - the tools: a run's [`agent_loop::ToolHandler`] executes what the gate admitted, under the
//!   [`agent_loop::ToolPolicy`] of `pulse-capabilities`;
//! - redaction: the run's `pulse_redaction::Redactor` comes in [`agent_loop::LoopInput`] (the
//!   service builds it from its route connection);
//! - the audit chain: the [`agent_loop::ExportAudit`] hook records each provider-bound request;
//! - metrics: the ledger sink counts every call into the service's [`cost::CallMetrics`];
//! - the bus, Watch, investigations, preflights and the Assistant: those are the model-runner's,
//!   which depends on this crate (never the other way round).

pub mod agent_loop;
pub mod cost;
pub mod pricing;
pub mod provider;
pub mod route;

/// The provider table, owned by `pulse-providers` so settings and readiness read the same one.
pub use pulse_providers::registry;
