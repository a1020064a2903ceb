//! `stream_idle` while the provider is silent.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pulse_bus::assistant_api::ChatEventKind;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::events::Signal;

/// Provider silence after which `stream_idle` is sent, and then again at this period.
pub const IDLE_AFTER: Duration = Duration::from_secs(5);

/// Aborts its task when dropped.
pub(super) struct AbortOnDrop(pub(super) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends `stream_idle` while the provider has been silent for [`IDLE_AFTER`].
pub(super) fn spawn_idle_watch(
    last_event: Arc<Mutex<Instant>>,
    signals: mpsc::UnboundedSender<Signal>,
    route: String,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(IDLE_AFTER);
        tick.tick().await;
        loop {
            tick.tick().await;
            let silent = last_event
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .elapsed();
            if silent >= IDLE_AFTER {
                let sent = signals.send(Signal::Event(
                    ChatEventKind::StreamIdle,
                    json!({
                        "state": "stream_idle", "model_route": route,
                        "silent_ms": u64::try_from(silent.as_millis()).unwrap_or(u64::MAX),
                    }),
                ));
                if sent.is_err() {
                    break;
                }
            }
        }
    })
}
