//! Message types and helpers shared by the integration tests.
#![allow(dead_code)]

use std::time::Duration;

use pulse_bus::{Bus, Message, Request};
use pulse_domain::TenantId;
use pulse_test_support::wait;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Echo {
    pub text: String,
}

impl Message for Echo {
    const TYPE: &'static str = "test.echo";
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EchoReply {
    pub text: String,
    pub tenant: String,
}

impl Message for EchoReply {
    const TYPE: &'static str = "test.echo_reply";
}

impl Request for Echo {
    type Reply = EchoReply;
}

/// The same wire type at a newer schema version than any responder knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EchoV2 {
    pub text: String,
}

impl Message for EchoV2 {
    const TYPE: &'static str = "test.echo";
    const SCHEMA: u32 = 2;
}

impl Request for EchoV2 {
    type Reply = EchoReply;
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub n: u32,
}

impl Message for Job {
    const TYPE: &'static str = "test.job";
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Other {
    pub x: String,
}

impl Message for Other {
    const TYPE: &'static str = "test.other";
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindingCreated {
    pub finding_id: String,
    pub n: u32,
}

impl Message for FindingCreated {
    const TYPE: &'static str = "test.finding_created";
}

pub fn acme() -> TenantId {
    TenantId::new("acme").expect("valid tenant")
}

/// Waits until the durable consumer of `kind` has nothing pending and nothing unacked.
pub async fn consumer_drained(bus: &Bus, kind: &str, deadline: Duration) -> anyhow::Result<()> {
    let stream = bus.subjects().jobs_stream();
    let name = bus.subjects().job_consumer(kind);
    let js = bus.jetstream().clone();
    wait::until(deadline, "the job consumer to drain", || {
        let js = js.clone();
        let stream = stream.clone();
        let name = name.clone();
        async move {
            let s = js.get_stream(&stream).await.ok()?;
            let info = s.consumer_info(&name).await.ok()?;
            (info.num_pending == 0 && info.num_ack_pending == 0).then_some(())
        }
    })
    .await
}

/// Messages currently stored in a stream.
pub async fn stream_messages(bus: &Bus, stream: &str) -> anyhow::Result<u64> {
    let s = bus.jetstream().get_stream(stream).await?;
    Ok(s.get_info().await?.state.messages)
}
