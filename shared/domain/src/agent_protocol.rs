//! The agent wire protocol (WebSocket text frames of JSON), version 1.
//!
//! An agent connects to the relay with its token, sends [`AgentMessage::Hello`], waits for
//! [`RelayMessage::Welcome`], then sends a [`AgentMessage::Report`] every interval and at once
//! on a change. Each report is a full snapshot of what the agent observes; the relay answers
//! [`RelayMessage::Ack`] or [`RelayMessage::Rejected`] with a reason.
//!
//! The connection is full duplex: at any time the relay may send a request
//! ([`RelayMessage::Command`], [`RelayMessage::Observe`], [`RelayMessage::Read`]), each with a
//! `request_id`; the agent answers with the matching [`AgentMessage::Receipt`],
//! [`AgentMessage::Observation`] or [`AgentMessage::ReadResult`], or with
//! [`AgentMessage::Refused`] and a reason. Reports and their acks continue meanwhile.
//!
//! Commands are typed: the capability is a wire name ([`Capability`]); the agent parses it and
//! refuses a name it does not know with a stated reason, so a newer relay never makes an older
//! agent fail to read a message.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::resource::ObservedResource;

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// The relay's WebSocket path.
pub const AGENT_WS_PATH: &str = "/api/agent/ws";

/// Longest command output carried by a [`Receipt`], in bytes.
pub const MAX_OUTPUT_BYTES: usize = 8 * 1024;
/// Longest reason text (receipts, refusals), in bytes.
pub const MAX_REASON_BYTES: usize = 1024;
/// Most log lines a [`ReadRequest::LogTail`] may ask for.
pub const MAX_LOG_LINES: u32 = 2_000;
/// Most log bytes a [`ReadRequest::LogTail`] may ask for.
pub const MAX_LOG_BYTES: u32 = 256 * 1024;
/// Longest request, action or lease id, in bytes.
pub const MAX_ID_BYTES: usize = 128;
/// Longest time a [`ReadRequest::Exec`] may run, in milliseconds.
pub const MAX_EXEC_TIMEOUT_MS: u32 = 30_000;
/// Most output bytes a host read ([`ReadRequest::Exec`], [`ReadRequest::File`],
/// [`ReadRequest::Tail`]) may ask for.
pub const MAX_READ_BYTES: u32 = 256 * 1024;
/// Most entries and directory levels a [`ReadRequest::Find`] may ask for.
pub const MAX_FIND_ENTRIES: u32 = 2_000;
pub const MAX_FIND_DEPTH: u32 = 16;
/// Longest path or name pattern of a host read, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;

/// Agent to relay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentMessage {
    Hello(Hello),
    Report(Report),
    Receipt(Receipt),
    Observation(Observation),
    ReadResult(ReadResult),
    /// The agent could not or would not answer a request.
    Refused(Refused),
}

impl AgentMessage {
    /// The request this message answers, for the answer forms.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            AgentMessage::Hello(_) | AgentMessage::Report(_) => None,
            AgentMessage::Receipt(r) => Some(&r.request_id),
            AgentMessage::Observation(o) => Some(&o.request_id),
            AgentMessage::ReadResult(r) => Some(&r.request_id),
            AgentMessage::Refused(r) => Some(&r.request_id),
        }
    }
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
    Command(Command),
    Observe(Observe),
    Read(Read),
}

impl RelayMessage {
    /// The request id of a request form.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            RelayMessage::Command(c) => Some(&c.request_id),
            RelayMessage::Observe(o) => Some(&o.request_id),
            RelayMessage::Read(r) => Some(&r.request_id),
            _ => None,
        }
    }
}

/// The typed capabilities a command may name: the action model's ([`crate::action::Capability`]);
/// the wire protocol carries them, it does not define them.
pub use crate::action::Capability;

/// Run one capability on one target, at most once per `action_id`, within a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Command {
    pub request_id: String,
    /// The agent executes each action id at most once, across reconnects and restarts.
    pub action_id: String,
    pub lease_id: String,
    /// The agent refuses the command once its own clock is past this instant.
    pub lease_expires_at: DateTime<Utc>,
    /// A [`Capability`] wire name; kept as text so an unknown name is refused with a reason.
    pub capability: String,
    /// The supervised service name (`service.*`), the container id or name (`docker.*`) or the
    /// guest's VMID (`guest.*`).
    pub target: String,
}

/// What a receipt says about a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptStatus {
    Accepted,
    Rejected,
    Completed,
    Failed,
}

/// The agent's answer to a [`Command`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    pub request_id: String,
    pub action_id: String,
    pub status: ReceiptStatus,
    /// Why a command was rejected or failed.
    #[serde(default)]
    pub reason: Option<String>,
    /// What the execution printed or said, at most [`MAX_OUTPUT_BYTES`].
    #[serde(default)]
    pub output: String,
    #[serde(default)]
    pub output_truncated: bool,
    /// 0 on success; the failing step's status otherwise; absent when nothing ran.
    #[serde(default)]
    pub exit_status: Option<i32>,
    /// When the agent accepted the command and started running it, by its clock; absent when
    /// nothing ran (a refusal) and from agents that predate the field. A command that blocks
    /// until its unit is ready (a restart of a slow service) starts well before [`Receipt::at`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_at: Option<DateTime<Utc>>,
    /// When the agent finished (or refused) the command, by its clock.
    pub at: DateTime<Utc>,
    /// This action id was seen before; the recorded receipt is returned and nothing ran.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
}

impl Receipt {
    /// A receipt of `command` with `status` and `reason` (bounded to [`MAX_REASON_BYTES`]) at
    /// `at`, nothing run yet: no output, exit status or acceptance time.
    pub fn of(
        command: &Command,
        status: ReceiptStatus,
        reason: Option<String>,
        at: DateTime<Utc>,
    ) -> Self {
        Self {
            request_id: command.request_id.clone(),
            action_id: command.action_id.clone(),
            status,
            reason: reason.map(|r| bounded_text(&r, MAX_REASON_BYTES).0),
            output: String::new(),
            output_truncated: false,
            exit_status: None,
            accepted_at: None,
            at,
            replayed: false,
        }
    }
}

/// One resource of the agent, for [`Observe`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ResourceTarget {
    Host,
    Service {
        name: String,
    },
    Container {
        id: String,
    },
    Filesystem {
        mount_point: String,
    },
    /// A Proxmox VE guest by its VMID, read by the connector of its cluster.
    Guest {
        vmid: String,
    },
}

/// Re-collect one resource now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observe {
    pub request_id: String,
    pub target: ResourceTarget,
}

/// A fresh observation of one resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observation {
    pub request_id: String,
    /// When the source was read (the agent's clock).
    pub observed_at: DateTime<Utc>,
    pub resource: ObservedResource,
}

/// Where a log tail comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LogSource {
    Service { name: String },
    Container { id: String },
}

/// A bounded live read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ReadRequest {
    /// The newest lines, at most `max_lines` and `max_bytes` (capped at [`MAX_LOG_LINES`] and
    /// [`MAX_LOG_BYTES`]).
    LogTail {
        source: LogSource,
        max_lines: u32,
        max_bytes: u32,
    },
    /// The compacted inspect projection of a container (no env values, allowlisted labels).
    Inspect { container: String },
    /// A read-only diagnostic command, as the argv of each pipeline stage (no shell). The agent
    /// runs it only when started with `--allow-read-exec`, and only when the stages pass the
    /// exec classifier again there; stdout is cut at `max_bytes`, the run at `timeout_ms`
    /// (capped at [`MAX_READ_BYTES`] and [`MAX_EXEC_TIMEOUT_MS`]).
    Exec {
        stages: Vec<Vec<String>>,
        timeout_ms: u32,
        max_bytes: u32,
    },
    /// The first `max_bytes` of a regular file (never a secret file).
    File { path: String, max_bytes: u32 },
    /// The last `max_lines` lines within the last `max_bytes` of a regular file.
    Tail {
        path: String,
        max_lines: u32,
        max_bytes: u32,
    },
    /// Entries under a directory, without following symlinks, optionally only those whose name
    /// matches `name_pattern` (`*` and `?` wildcards).
    Find {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name_pattern: Option<String>,
        max_entries: u32,
        max_depth: u32,
    },
}

impl ReadRequest {
    /// The wire name of the read (`log_tail`, `inspect`, `exec`, `file`, `tail`, `find`).
    pub fn kind(&self) -> &'static str {
        match self {
            ReadRequest::LogTail { .. } => "log_tail",
            ReadRequest::Inspect { .. } => "inspect",
            ReadRequest::Exec { .. } => "exec",
            ReadRequest::File { .. } => "file",
            ReadRequest::Tail { .. } => "tail",
            ReadRequest::Find { .. } => "find",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Read {
    pub request_id: String,
    pub read: ReadRequest,
}

/// One log line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogLine {
    /// `stdout`, `stderr`, or `file` for a service's log file.
    pub stream: String,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ReadOutput {
    LogTail {
        lines: Vec<LogLine>,
        /// Lines or bytes were cut to stay within the bounds.
        truncated: bool,
    },
    Inspect {
        projection: serde_json::Value,
    },
    /// What a read-only command did. Output is redacted on the agent.
    Exec {
        /// The last stage's exit status; `None` when it was killed (timeout, output bound) or
        /// ended by a signal.
        exit_status: Option<i32>,
        stdout: String,
        stderr: String,
        /// Output was cut at the byte bound (and the pipeline stopped).
        truncated: bool,
        /// The pipeline was killed at its timeout.
        timed_out: bool,
        duration_ms: u64,
    },
    File {
        /// The canonical path read.
        path: String,
        /// Redacted text (lossy UTF-8).
        text: String,
        /// The file's size in bytes.
        size: u64,
        truncated: bool,
    },
    Tail {
        path: String,
        lines: Vec<String>,
        truncated: bool,
    },
    Find {
        path: String,
        entries: Vec<FoundEntry>,
        /// More entries (or deeper levels) existed than the bounds allowed.
        truncated: bool,
    },
}

/// One entry of a [`ReadOutput::Find`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FoundEntry {
    pub path: String,
    /// `file`, `dir`, `symlink` or `other`.
    pub kind: String,
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadResult {
    pub request_id: String,
    pub read_at: DateTime<Utc>,
    pub output: ReadOutput,
}

/// A request the agent could not answer (unknown resource, engine unreachable, bad bounds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Refused {
    pub request_id: String,
    pub reason: String,
    /// A stable code for refusals a caller acts on ([`ReadRefusalCode`], or the exec
    /// classifier's `exec_*` codes); absent for the others and from older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

/// Why an agent refused a host read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadRefusalCode {
    /// The agent was not started with `--allow-read-exec`.
    ExecDisabled,
    /// The path is, or resolves to, a secret file (keys, shadow, `.env`, ...).
    SecretPath,
    /// Bounds out of range, a relative or unreadable path, not a regular file or directory.
    InvalidRead,
    /// The read could not be carried out (the command could not start, IO failed).
    ReadFailed,
}

impl ReadRefusalCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ReadRefusalCode::ExecDisabled => "read_exec_disabled",
            ReadRefusalCode::SecretPath => "read_secret_path",
            ReadRefusalCode::InvalidRead => "read_invalid",
            ReadRefusalCode::ReadFailed => "read_failed",
        }
    }
}

/// `text` cut to at most `max` bytes at a char boundary; whether it was cut.
pub fn bounded_text(text: &str, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text.to_owned(), false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_owned(), true)
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
                    parent: None,
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
                    parent: None,
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

    fn lease() -> DateTime<Utc> {
        at() + chrono::Duration::seconds(60)
    }

    #[test]
    fn request_messages_wire_shape() {
        let command = RelayMessage::Command(Command {
            request_id: "r1".into(),
            action_id: "act-1".into(),
            lease_id: "lease-1".into(),
            lease_expires_at: lease(),
            capability: Capability::ServiceRestart.as_str().into(),
            target: "web".into(),
        });
        let observe = RelayMessage::Observe(Observe {
            request_id: "r2".into(),
            target: ResourceTarget::Service { name: "web".into() },
        });
        let read_tail = RelayMessage::Read(Read {
            request_id: "r3".into(),
            read: ReadRequest::LogTail {
                source: LogSource::Container { id: "3f4e".into() },
                max_lines: 50,
                max_bytes: 65_536,
            },
        });
        let read_inspect = RelayMessage::Read(Read {
            request_id: "r4".into(),
            read: ReadRequest::Inspect {
                container: "3f4e".into(),
            },
        });
        insta::assert_json_snapshot!("command", command);
        insta::assert_json_snapshot!("observe", observe);
        insta::assert_json_snapshot!("read_log_tail", read_tail);
        insta::assert_json_snapshot!("read_inspect", read_inspect);
        for msg in [command, observe, read_tail, read_inspect] {
            let text = serde_json::to_string(&msg).unwrap();
            assert_eq!(serde_json::from_str::<RelayMessage>(&text).unwrap(), msg);
            assert!(msg.request_id().is_some());
        }
    }

    #[test]
    fn answer_messages_wire_shape() {
        let receipt = AgentMessage::Receipt(Receipt {
            request_id: "r1".into(),
            action_id: "act-1".into(),
            status: ReceiptStatus::Completed,
            reason: None,
            output: "service web restarted (pid 4242)".into(),
            output_truncated: false,
            exit_status: Some(0),
            accepted_at: Some(at() - chrono::Duration::seconds(3)),
            at: at(),
            replayed: true,
        });
        let rejected = AgentMessage::Receipt(Receipt {
            request_id: "r5".into(),
            action_id: "act-2".into(),
            status: ReceiptStatus::Rejected,
            reason: Some("lease lease-2 expired at 2026-11-29T11:59:00Z".into()),
            output: String::new(),
            output_truncated: false,
            exit_status: None,
            accepted_at: None,
            at: at(),
            replayed: false,
        });
        let observation = AgentMessage::Observation(Observation {
            request_id: "r2".into(),
            observed_at: at(),
            resource: ObservedResource {
                resource_type: ResourceType::Service,
                source_id: "web".into(),
                name: "web".into(),
                aliases: vec![],
                status: ResourceStatus::Running,
                health: Health::Healthy,
                restart_count: Some(0),
                labels: BTreeMap::new(),
                details: serde_json::json!({"pid": 4242}),
                metrics: BTreeMap::new(),
                parent: None,
            },
        });
        let tail = AgentMessage::ReadResult(ReadResult {
            request_id: "r3".into(),
            read_at: at(),
            output: ReadOutput::LogTail {
                lines: vec![LogLine {
                    stream: "stderr".into(),
                    text: "listening on :8080".into(),
                }],
                truncated: true,
            },
        });
        let inspect = AgentMessage::ReadResult(ReadResult {
            request_id: "r4".into(),
            read_at: at(),
            output: ReadOutput::Inspect {
                projection: serde_json::json!({"id": "3f4e", "running": true, "oom_killed": false}),
            },
        });
        let refused = AgentMessage::Refused(Refused {
            request_id: "r6".into(),
            reason: "no supervised service named \"db\"".into(),
            code: None,
        });
        insta::assert_json_snapshot!("receipt", receipt);
        insta::assert_json_snapshot!("receipt_rejected", rejected);
        insta::assert_json_snapshot!("observation", observation);
        insta::assert_json_snapshot!("read_result_log_tail", tail);
        insta::assert_json_snapshot!("read_result_inspect", inspect);
        insta::assert_json_snapshot!("refused", refused);
        for msg in [receipt, rejected, observation, tail, inspect, refused] {
            let text = serde_json::to_string(&msg).unwrap();
            assert_eq!(serde_json::from_str::<AgentMessage>(&text).unwrap(), msg);
        }
    }

    #[test]
    fn host_read_messages_wire_shape() {
        let requests = [
            ReadRequest::Exec {
                stages: vec![
                    vec!["ps".into(), "aux".into()],
                    vec!["grep".into(), "nginx: worker".into()],
                ],
                timeout_ms: 8_000,
                max_bytes: 16_384,
            },
            ReadRequest::File {
                path: "/etc/nginx/nginx.conf".into(),
                max_bytes: 16_384,
            },
            ReadRequest::Tail {
                path: "/var/log/syslog".into(),
                max_lines: 50,
                max_bytes: 16_384,
            },
            ReadRequest::Find {
                path: "/var/log".into(),
                name_pattern: Some("*.log".into()),
                max_entries: 200,
                max_depth: 3,
            },
        ];
        let kinds: Vec<&str> = requests.iter().map(ReadRequest::kind).collect();
        assert_eq!(kinds, ["exec", "file", "tail", "find"]);
        let requests: Vec<RelayMessage> = requests
            .into_iter()
            .enumerate()
            .map(|(n, read)| {
                RelayMessage::Read(Read {
                    request_id: format!("r{n}"),
                    read,
                })
            })
            .collect();
        insta::assert_json_snapshot!("read_host", requests);
        let answers = vec![
            AgentMessage::ReadResult(ReadResult {
                request_id: "r0".into(),
                read_at: at(),
                output: ReadOutput::Exec {
                    exit_status: Some(0),
                    stdout: "root 1 0.0 /sbin/init\n".into(),
                    stderr: String::new(),
                    truncated: false,
                    timed_out: false,
                    duration_ms: 12,
                },
            }),
            AgentMessage::ReadResult(ReadResult {
                request_id: "r1".into(),
                read_at: at(),
                output: ReadOutput::File {
                    path: "/etc/nginx/nginx.conf".into(),
                    text: "worker_processes auto;\n".into(),
                    size: 24,
                    truncated: false,
                },
            }),
            AgentMessage::ReadResult(ReadResult {
                request_id: "r2".into(),
                read_at: at(),
                output: ReadOutput::Tail {
                    path: "/var/log/syslog".into(),
                    lines: vec!["kernel: eth0 up".into()],
                    truncated: true,
                },
            }),
            AgentMessage::ReadResult(ReadResult {
                request_id: "r3".into(),
                read_at: at(),
                output: ReadOutput::Find {
                    path: "/var/log".into(),
                    entries: vec![FoundEntry {
                        path: "/var/log/syslog".into(),
                        kind: "file".into(),
                        size: 4096,
                    }],
                    truncated: false,
                },
            }),
            AgentMessage::Refused(Refused {
                request_id: "r4".into(),
                reason: "read exec is disabled on this agent (start it with --allow-read-exec)"
                    .into(),
                code: Some(ReadRefusalCode::ExecDisabled.as_str().into()),
            }),
        ];
        insta::assert_json_snapshot!("read_host_answers", answers);
        for msg in &requests {
            let text = serde_json::to_string(msg).unwrap();
            assert_eq!(&serde_json::from_str::<RelayMessage>(&text).unwrap(), msg);
        }
        for msg in &answers {
            let text = serde_json::to_string(msg).unwrap();
            assert_eq!(&serde_json::from_str::<AgentMessage>(&text).unwrap(), msg);
        }
        // A refusal from an agent that predates the code still decodes.
        let old = r#"{"type":"refused","request_id":"r","reason":"no"}"#;
        let AgentMessage::Refused(refused) = serde_json::from_str(old).unwrap() else {
            panic!("not a refusal");
        };
        assert_eq!(refused.code, None);
    }

    #[test]
    fn capabilities_have_exact_wire_names_and_unknown_ones_still_parse() {
        let names: Vec<&str> = Capability::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            names,
            [
                "service.start",
                "service.stop",
                "service.restart",
                "docker.container.start",
                "docker.container.stop",
                "docker.container.restart",
                "guest.start",
                "guest.shutdown",
                "guest.reboot",
                "guest.stop"
            ]
        );
        for cap in Capability::ALL {
            assert_eq!(Capability::parse(cap.as_str()), Some(cap));
            assert_eq!(
                serde_json::to_value(cap).unwrap(),
                serde_json::Value::String(cap.as_str().to_owned())
            );
        }
        assert_eq!(Capability::parse("shell.exec"), None);
        // A command naming an unknown capability is still a readable message.
        let text = r#"{"type":"command","request_id":"r","action_id":"a","lease_id":"l","lease_expires_at":"2026-11-29T12:00:00Z","capability":"shell.exec","target":"x"}"#;
        let RelayMessage::Command(command) = serde_json::from_str(text).unwrap() else {
            panic!("not a command");
        };
        assert_eq!(Capability::parse(&command.capability), None);
    }

    #[test]
    fn a_receipt_without_accepted_at_still_decodes() {
        // The shape agents sent before `accepted_at` existed.
        let text = r#"{"type":"receipt","request_id":"r1","action_id":"act-1","status":"completed","reason":null,"output":"ok","output_truncated":false,"exit_status":0,"at":"2026-11-29T12:00:00Z"}"#;
        let AgentMessage::Receipt(receipt) = serde_json::from_str(text).unwrap() else {
            panic!("not a receipt");
        };
        assert_eq!(receipt.accepted_at, None);
        assert_eq!(receipt.at, at());
        // And one without it encodes without it, as before.
        let back = serde_json::to_value(AgentMessage::Receipt(receipt)).unwrap();
        assert!(back.get("accepted_at").is_none(), "{back}");
    }

    #[test]
    fn bounded_text_cuts_at_a_char_boundary() {
        assert_eq!(bounded_text("abc", 5), ("abc".to_owned(), false));
        assert_eq!(bounded_text("héllo", 2), ("h".to_owned(), true));
    }

    #[test]
    fn unknown_fields_and_types_are_refused() {
        assert!(serde_json::from_str::<AgentMessage>(r#"{"type":"command"}"#).is_err());
        assert!(
            serde_json::from_str::<RelayMessage>(
                r#"{"type":"observe","request_id":"r","target":{"kind":"host"},"extra":1}"#
            )
            .is_err()
        );
        assert!(
            serde_json::from_str::<RelayMessage>(
                r#"{"type":"read","request_id":"r","read":{"kind":"exec","cmd":"sh"}}"#
            )
            .is_err()
        );
        assert!(
            serde_json::from_str::<AgentMessage>(
                r#"{"type":"hello","protocol":1,"agent_id":"a","hostname":"h","agent_version":"1","report_interval_ms":1,"x":1}"#
            )
            .is_err()
        );
    }
}
