//! A NATS connection with a random subject prefix per test, so tests share one server without
//! seeing each other's messages or streams.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream;
use pulse_bus::{Bus, StreamSettings, Subjects};

/// The server tests use: `PULSE_NATS_URL`, else the machine's local server.
pub fn nats_url() -> String {
    std::env::var("PULSE_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

/// A bus on the test server under the subject prefix `prefix` (e.g. a test gateway's), to talk
/// to the services of that stack.
pub async fn bus_on(prefix: &str) -> anyhow::Result<Bus> {
    let client = async_nats::connect(nats_url()).await?;
    Ok(Bus::new(client, Subjects::try_new(Some(prefix))?))
}

pub struct TestNats {
    client: async_nats::Client,
    js: jetstream::Context,
    prefix: String,
    subjects: Subjects,
}

impl TestNats {
    /// Connects and picks a fresh prefix `t<12 hex digits>`.
    pub async fn connect() -> anyhow::Result<Self> {
        let url = nats_url();
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(5))
            .connect(url.as_str())
            .await
            .with_context(|| format!("connecting to test NATS at {url}"))?;
        let prefix = format!("t{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff);
        let subjects = Subjects::try_new(Some(&prefix))?;
        let js = jetstream::new(client.clone());
        Ok(Self {
            client,
            js,
            prefix,
            subjects,
        })
    }

    pub fn client(&self) -> async_nats::Client {
        self.client.clone()
    }

    pub fn jetstream(&self) -> jetstream::Context {
        self.js.clone()
    }

    /// The subject prefix of this test, e.g. `t0123456789ab`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn subjects(&self) -> Subjects {
        self.subjects.clone()
    }

    /// A bus on this connection and prefix.
    pub fn bus(&self) -> Bus {
        Bus::with_jetstream(self.client(), self.jetstream(), self.subjects())
    }

    /// Creates this test's JOBS, EVENTS and DLQ streams with small limits.
    pub async fn ensure_streams(&self) -> anyhow::Result<()> {
        pulse_bus::ensure_streams_with(&self.js, &self.subjects, &StreamSettings::small()).await?;
        Ok(())
    }

    /// Deletes every JetStream stream created under this prefix.
    pub async fn cleanup(&self) -> anyhow::Result<()> {
        pulse_bus::streams::delete_streams(&self.js, &self.subjects)
            .await
            .context("deleting the test's streams")?;
        Ok(())
    }
}
