//! The signals that stop a stack: SIGINT (Ctrl-C), SIGTERM (`pulsectl down`), SIGHUP (the
//! terminal went away).

use tokio::signal::unix::{Signal, SignalKind, signal};

#[derive(Debug)]
pub struct StopSignals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl StopSignals {
    /// Installs the handlers; from now on these signals no longer kill the process.
    pub fn install() -> std::io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// Waits for the next one and names it.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.hangup.recv() => "SIGHUP",
        }
    }
}
