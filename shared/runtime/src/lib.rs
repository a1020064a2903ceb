//! The service harness every Pulse service runs in: config, telemetry, connections with retry,
//! `/healthz` `/readyz` `/metrics`, the heartbeat, and graceful shutdown.
//!
//! A service's `main` is `pulse_runtime::main(SPEC, |ctx| run(ctx))`; its `run` does its own work
//! until `ctx.shutdown` is cancelled, finishes what it has in flight, and returns. A service that
//! writes to the transactional outbox asks for the process's relay with
//! [`ServiceContext::outbox_relay`]; the harness stops it after `run` returned.

mod connect;
mod health;
mod heartbeat;
pub mod metrics;
mod outbox;
mod service;
mod shutdown;

pub use connect::{ConnectError, RetryPolicy, connect_nats, connect_store};
pub use health::{Readiness, health_router};
pub use service::{Background, ServiceContext, ServiceSpec, bind, main, start};
pub use shutdown::shutdown_signal;
pub use tokio_util::sync::CancellationToken;
pub use tokio_util::task::TaskTracker;

/// Installs the process-wide rustls crypto provider. async-nats brings `ring`; installing it
/// explicitly avoids the "could not determine the process-level CryptoProvider" panic when a
/// second back-end is linked.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
