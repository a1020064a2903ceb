//! The service harness every Pulse service runs in: config, telemetry, connections with retry,
//! `/healthz` `/readyz` `/metrics`, the heartbeat, and graceful shutdown.
//!
//! A service's `main` is `pulse_runtime::main(SPEC, |ctx| run(ctx))`; its `run` does its own work
//! until `ctx.shutdown` is cancelled, finishes what it has in flight, and returns.

mod connect;
mod health;
mod heartbeat;
mod service;
mod shutdown;

pub use connect::{ConnectError, RetryPolicy, connect_nats, connect_store};
pub use health::{Readiness, health_router};
pub use service::{ServiceContext, ServiceSpec, main, start};
pub use shutdown::shutdown_signal;
pub use tokio_util::sync::CancellationToken;

/// Installs the process-wide rustls crypto provider. async-nats brings `ring`; installing it
/// explicitly avoids the "could not determine the process-level CryptoProvider" panic when a
/// second back-end is linked.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
