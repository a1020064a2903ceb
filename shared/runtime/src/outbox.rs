//! The outbox relay of a service process: one per process, started when the service asks for
//! it ([`crate::ServiceContext::outbox_relay`]) and stopped by the harness only after the
//! service's `run` returned, so the events of work that finished while it drained are still
//! published (what is left waits in the outbox for the next relay of any service).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use pulse_bus::{Bus, OutboxRelay, RelayConfig};
use pulse_store::Store;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The process's relay and its wake-up; shared by every clone of the context.
#[derive(Clone, Default)]
pub(crate) struct OutboxSlot {
    notify: Arc<Notify>,
    started: Arc<AtomicBool>,
    stop: CancellationToken,
}

impl OutboxSlot {
    /// What wakes the relay, whether it runs yet or not.
    pub(crate) fn notify(&self) -> Arc<Notify> {
        self.notify.clone()
    }

    /// Starts the relay on `tasks` unless it runs already; returns its wake-up.
    pub(crate) fn start(&self, bus: &Bus, store: &Store, tasks: &TaskTracker) -> Arc<Notify> {
        if !self.started.swap(true, Ordering::AcqRel) {
            let relay = OutboxRelay::new(
                store.pool().clone(),
                bus.jetstream().clone(),
                RelayConfig::default(),
            )
            .with_notify(self.notify.clone());
            let stop = self.stop.clone();
            tasks.spawn(async move { relay.run(stop).await });
        }
        self.notify()
    }

    /// Stops the relay (if it runs) after its current round.
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }
}
