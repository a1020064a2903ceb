//! The agent wire protocol (WebSocket text frames of JSON), version 1.
//!
//! An agent connects to the relay with its token, sends [`AgentMessage::Hello`], waits for
//! [`RelayMessage::Welcome`], then sends a [`AgentMessage::Report`] every interval and at once
//! on a change. Each report is a full snapshot of what the agent observes; the relay answers
//! [`RelayMessage::Ack`] or [`RelayMessage::Rejected`] with a reason.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::resource::ObservedResource;

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// The relay's WebSocket path.
pub const AGENT_WS_PATH: &str = "/api/agent/ws";

/// Agent to relay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentMessage {
    Hello(Hello),
    Report(Report),
}

/// The first message of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    pub protocol: u32,
    /// Stable id of the host (machine id or hostname); `host:<agent_id>` is its resource id.
    pub agent_id: String,
    pub hostname: String,
    pub agent_version: String,
    /// How often the agent reports when nothing changes.
    pub report_interval_ms: u64,
}

/// A full snapshot of what the agent observes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    /// Increases by one per report of an agent process; the relay acks it back.
    pub seq: u64,
    pub observed_at: DateTime<Utc>,
    pub resources: Vec<ObservedResource>,
}

/// Relay to agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RelayMessage {
    Welcome {
        protocol: u32,
        agent_id: String,
        /// An agent silent for longer than this is marked offline.
        offline_after_ms: u64,
    },
    Ack {
        seq: u64,
    },
    Rejected {
        /// The report's seq when it could be read.
        seq: Option<u64>,
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::resource::{Health, ResourceStatus, ResourceType};

    fn at() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn report() -> AgentMessage {
        AgentMessage::Report(Report {
            seq: 7,
            observed_at: at(),
            resources: vec![
                ObservedResource {
                    resource_type: ResourceType::Host,
                    source_id: "m1".into(),
                    name: "box".into(),
                    aliases: vec!["box.lan".into()],
                    status: ResourceStatus::Running,
                    health: Health::Healthy,
                    restart_count: None,
                    labels: BTreeMap::new(),
                    details: serde_json::json!({"kernel": "6.1"}),
                    metrics: [("cpu_percent".to_owned(), 12.5)].into(),
                },
                ObservedResource {
                    resource_type: ResourceType::Service,
                    source_id: "web".into(),
                    name: "web".into(),
                    aliases: vec![],
                    status: ResourceStatus::Running,
                    health: Health::Unhealthy,
                    restart_count: Some(2),
                    labels: [("team".to_owned(), "ops".to_owned())].into(),
                    details: serde_json::json!({"pid": 42, "last_exit_code": 1}),
                    metrics: BTreeMap::new(),
                },
            ],
        })
    }

    #[test]
    fn agent_messages_wire_shape() {
        let hello = AgentMessage::Hello(Hello {
            protocol: PROTOCOL_VERSION,
            agent_id: "m1".into(),
            hostname: "box".into(),
            agent_version: "0.1.0".into(),
            report_interval_ms: 10_000,
        });
        insta::assert_json_snapshot!("hello", hello);
        insta::assert_json_snapshot!("report", report());
        for msg in [hello, report()] {
            let text = serde_json::to_string(&msg).unwrap();
            assert_eq!(serde_json::from_str::<AgentMessage>(&text).unwrap(), msg);
        }
    }

    #[test]
    fn relay_messages_wire_shape() {
        let welcome = RelayMessage::Welcome {
            protocol: PROTOCOL_VERSION,
            agent_id: "m1".into(),
            offline_after_ms: 30_000,
        };
        let ack = RelayMessage::Ack { seq: 7 };
        let rejected = RelayMessage::Rejected {
            seq: None,
            reason: "malformed report: expected value at line 1 column 1".into(),
        };
        insta::assert_json_snapshot!("welcome", welcome);
        insta::assert_json_snapshot!("ack", ack);
        insta::assert_json_snapshot!("rejected", rejected);
        for msg in [welcome, ack, rejected] {
            let text = serde_json::to_string(&msg).unwrap();
            assert_eq!(serde_json::from_str::<RelayMessage>(&text).unwrap(), msg);
        }
    }

    #[test]
    fn resource_changed_wire_shape() {
        let event = crate::resource::ResourceChanged {
            resource_id: crate::resource::ResourceId::service("m1", "web"),
            resource_type: ResourceType::Service,
            change: crate::resource::ResourceChange::Updated,
            status: ResourceStatus::Running,
            health: Health::Unhealthy,
            previous_status: Some(ResourceStatus::Running),
            previous_health: Some(Health::Healthy),
            at: at(),
        };
        insta::assert_json_snapshot!("resource_changed", event);
    }

    #[test]
    fn unknown_fields_and_types_are_refused() {
        assert!(serde_json::from_str::<AgentMessage>(r#"{"type":"command"}"#).is_err());
        assert!(
            serde_json::from_str::<AgentMessage>(
                r#"{"type":"hello","protocol":1,"agent_id":"a","hostname":"h","agent_version":"1","report_interval_ms":1,"x":1}"#
            )
            .is_err()
        );
    }
}
