//! The canonical tool vocabulary: wire names (as upstream Pulse spells them), model-facing
//! descriptions, closed JSON schemas and invocation descriptors. Every surface (model-runner, MCP)
//! reads tools from here; none keeps its own list.
//!
//! Deliberate departures from the upstream input lists, all in the direction of less authority:
//! `pulse_docker` has no `operation`, `pulse_kubernetes` no `command`/`replicas`, and
//! `pulse_control` no raw `command`/`target_host`/`run_on_host` (Docker/Kubernetes control, raw
//! commands and host exec are omitted from offered schemas and denied if fabricated; the only
//! infrastructure mutation is a typed `pulse_control type=resource` plan).

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::invocation::{InvocationClass as C, InvocationDescriptor};

macro_rules! tool_names {
    ($( $variant:ident => $wire:literal, $family:ident; )*) => {
        /// A canonical tool, in upstream exposure order.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        pub enum ToolName {
            $( #[serde(rename = $wire)] $variant, )*
        }

        impl ToolName {
            pub const ALL: &'static [ToolName] = &[$(ToolName::$variant,)*];

            /// The name on the wire.
            pub fn wire_name(self) -> &'static str {
                match self { $(ToolName::$variant => $wire,)* }
            }

            /// The canonical tool with this wire name (exact match; legacy names are not tools).
            pub fn from_wire(name: &str) -> Option<Self> {
                match name { $($wire => Some(ToolName::$variant),)* _ => None }
            }

            /// Which group of surfaces the tool belongs to.
            pub fn family(self) -> ToolFamily {
                match self { $(ToolName::$variant => ToolFamily::$family,)* }
            }
        }
    };
}

tool_names! {
    PulseQuery => "pulse_query", Infrastructure;
    PulseMetrics => "pulse_metrics", Infrastructure;
    PulseStorage => "pulse_storage", Infrastructure;
    PulseDocker => "pulse_docker", Infrastructure;
    PulseKubernetes => "pulse_kubernetes", Infrastructure;
    PulseAlerts => "pulse_alerts", Infrastructure;
    PulseRead => "pulse_read", Infrastructure;
    PulseControl => "pulse_control", Infrastructure;
    PulseFileEdit => "pulse_file_edit", Infrastructure;
    PulseDiscovery => "pulse_discovery", Infrastructure;
    PulseKnowledge => "pulse_knowledge", Infrastructure;
    PulsePmg => "pulse_pmg", Infrastructure;
    PatrolGetFindings => "patrol_get_findings", PatrolLifecycle;
    PatrolReportFinding => "patrol_report_finding", PatrolLifecycle;
    PatrolAssessFinding => "patrol_assess_finding", PatrolLifecycle;
    PatrolClearSignal => "patrol_clear_signal", PatrolLifecycle;
    PatrolResolveFinding => "patrol_resolve_finding", PatrolLifecycle;
    PatrolProposeObserver => "patrol_propose_observer", PatrolLifecycle;
    PatrolActionCapabilities => "patrol_action_capabilities", PatrolInvestigation;
    PatrolProposeAction => "patrol_propose_action", PatrolInvestigation;
    PulseSummarize => "pulse_summarize", Infrastructure;
    PulseQuestion => "pulse_question", Interaction;
}

impl std::fmt::Display for ToolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.wire_name())
    }
}

/// Which surfaces a tool can appear on at all (before mutation rules apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolFamily {
    /// Shared infrastructure tools (Assistant and both Patrol profiles).
    Infrastructure,
    /// Native Assistant interaction (`pulse_question`): interactive only.
    Interaction,
    /// Watch finding lifecycle: Patrol detection only.
    PatrolLifecycle,
    /// Capability catalogue and the single typed proposal: Patrol investigation only.
    PatrolInvestigation,
}

const RESOURCE_TYPES: &[&str] = &[
    "agent",
    "system",
    "vm",
    "system-container",
    "app-container",
    "node",
    "docker-host",
    "storage",
    "storage-pool",
    "physical-disk",
];
const FINDING_RESOURCE_TYPES: &[&str] = &[
    "host",
    "service",
    "node",
    "vm",
    "system-container",
    "app-container",
    "storage",
    "physical_disk",
    "agent",
    "k8s-cluster",
    "pbs",
];

impl ToolName {
    /// The model-facing description.
    pub fn description(self) -> &'static str {
        match self {
            Self::PulseQuery => {
                "Discover and search canonical resources: search, get, config, topology, list or health."
            }
            Self::PulseMetrics => {
                "Performance history, temperatures, network, disk IO, disk SMART data, baselines and patterns of a resource."
            }
            Self::PulseStorage => {
                "Storage pools, backups, snapshots, Ceph, replication, PBS jobs, RAID and disk health."
            }
            Self::PulseDocker => {
                "Host-scoped Docker update posture and Swarm services and tasks (read only)."
            }
            Self::PulseKubernetes => {
                "Read Kubernetes clusters, nodes, pods, deployments and bounded logs."
            }
            Self::PulseAlerts => "Threshold alerts and Patrol findings.",
            Self::PulseRead => {
                "Bounded read-only exec, file, find, tail, logs and container inspect through an agent or a native log adapter."
            }
            Self::PulseControl => {
                "Plan one typed action on a resource that advertises the capability. It never executes: the plan needs approval."
            }
            Self::PulseFileEdit => "Append to or write files on hosts and containers.",
            Self::PulseDiscovery => "Get, run or list service discovery for a known resource.",
            Self::PulseKnowledge => "Resource notes and incident analysis.",
            Self::PulsePmg => "Proxmox Mail Gateway status, mail statistics, queues and spam.",
            Self::PatrolGetFindings => {
                "Read the active findings. Call it once near the start and reuse the result for deduplication and assessment."
            }
            Self::PatrolReportFinding => {
                "Report one finding: one causal incident per call, never in parallel."
            }
            Self::PatrolAssessFinding => {
                "Give a verdict for an existing active finding returned by patrol_get_findings."
            }
            Self::PatrolClearSignal => {
                "Judge one triage flag or firing alert of a resource expected and benign, with the evidence that shows it; report a finding instead when it is a problem."
            }
            Self::PatrolResolveFinding => "Resolve a finding directly after verification (legacy).",
            Self::PatrolProposeObserver => {
                "Propose a bounded read-only observer for an operator objective."
            }
            Self::PatrolActionCapabilities => {
                "Read the typed action capabilities a resource advertises."
            }
            Self::PatrolProposeAction => {
                "Capture one typed remediation proposal. It has no side effects; params must not be sensitive."
            }
            Self::PulseSummarize => "Retrospective summary of one resource or the fleet.",
            Self::PulseQuestion => "Ask the user one structured clarification question.",
        }
    }

    /// How the tool's invocations are classified.
    pub fn descriptor(self) -> InvocationDescriptor {
        use InvocationDescriptor::{Discriminator, Static};
        match self {
            Self::PulseQuery => Static(C::RESOLVE),
            Self::PulseDiscovery => Discriminator {
                argument: "action",
                cases: &[
                    ("get", C::RESOLVE),
                    ("run", C::RESOLVE),
                    ("list", C::RESOLVE),
                ],
            },
            Self::PulseMetrics | Self::PulseStorage | Self::PulsePmg | Self::PulseSummarize => {
                Static(C::READ)
            }
            Self::PulseDocker => Discriminator {
                argument: "action",
                cases: &[
                    ("updates", C::READ),
                    ("check_updates", C::READ),
                    ("services", C::READ),
                    ("tasks", C::READ),
                    ("swarm", C::READ),
                ],
            },
            Self::PulseKubernetes => Discriminator {
                argument: "type",
                cases: &[
                    ("clusters", C::READ),
                    ("nodes", C::READ),
                    ("pods", C::READ),
                    ("deployments", C::READ),
                    ("logs", C::READ),
                ],
            },
            Self::PulseAlerts => Discriminator {
                argument: "action",
                cases: &[
                    ("list", C::READ),
                    ("findings", C::READ),
                    ("resolved", C::READ),
                    ("resolve", C::WRITE_PULSE_STATE),
                    ("dismiss", C::WRITE_PULSE_STATE),
                ],
            },
            // Exec text is classified again by the handler's execution-intent check; this
            // descriptor alone cannot prove a command read-only.
            Self::PulseRead => Discriminator {
                argument: "action",
                cases: &[
                    ("exec", C::READ),
                    ("file", C::READ),
                    ("find", C::READ),
                    ("tail", C::READ),
                    ("logs", C::READ),
                    ("inspect", C::READ),
                ],
            },
            Self::PulseControl => Discriminator {
                argument: "type",
                cases: &[("resource", C::WRITE_INFRASTRUCTURE)],
            },
            Self::PulseFileEdit => Discriminator {
                argument: "action",
                cases: &[
                    ("append", C::WRITE_INFRASTRUCTURE),
                    ("write", C::WRITE_INFRASTRUCTURE),
                ],
            },
            Self::PulseKnowledge => Discriminator {
                argument: "action",
                cases: &[
                    ("remember", C::WRITE_PULSE_STATE),
                    ("recall", C::READ),
                    ("incidents", C::READ),
                    ("correlate", C::READ),
                ],
            },
            Self::PatrolGetFindings
            | Self::PatrolActionCapabilities
            | Self::PatrolProposeAction => Static(C::READ),
            Self::PatrolReportFinding
            | Self::PatrolAssessFinding
            | Self::PatrolClearSignal
            | Self::PatrolResolveFinding
            | Self::PatrolProposeObserver => Static(C::WRITE_PULSE_STATE),
            Self::PulseQuestion => Static(C::USER_INPUT),
        }
    }

    /// The canonical (unprojected) JSON schema of the arguments: always a closed object.
    pub fn schema(self) -> Value {
        match self {
            Self::PulseQuery => object(
                &[
                    (
                        "action",
                        enumerated(&["search", "get", "config", "topology", "list", "health"]),
                    ),
                    ("query", string()),
                    ("resource_type", enumerated(RESOURCE_TYPES)),
                    ("resource_id", string()),
                    ("type", string()),
                    ("status", string()),
                    ("cluster_name", string()),
                    ("namespace", string()),
                    (
                        "include",
                        enumerated(&["all", "proxmox", "app-containers", "kubernetes"]),
                    ),
                    ("summary_only", boolean()),
                    ("max_proxmox_nodes", count()),
                    ("max_vms_per_node", count()),
                    ("max_containers_per_node", count()),
                    ("max_docker_hosts", count()),
                    ("max_docker_containers_per_host", count()),
                    ("limit", count()),
                    ("offset", count()),
                ],
                &["action"],
            ),
            Self::PulseMetrics => object(
                &[
                    (
                        "type",
                        enumerated(&[
                            "performance",
                            "temperatures",
                            "network",
                            "diskio",
                            "disks",
                            "baselines",
                            "patterns",
                        ]),
                    ),
                    ("resource_id", string()),
                    ("resource_type", string()),
                    ("host", string()),
                    ("node", string()),
                    ("instance", string()),
                    ("period", enumerated(&["24h", "7d"])),
                    ("health", string()),
                    ("disk_type", string()),
                    ("limit", count()),
                    ("offset", count()),
                ],
                &["type"],
            ),
            Self::PulseStorage => object(
                &[
                    (
                        "type",
                        enumerated(&[
                            "pools",
                            "backups",
                            "backup_tasks",
                            "snapshots",
                            "ceph",
                            "ceph_details",
                            "replication",
                            "pbs_jobs",
                            "raid",
                            "disk_health",
                            "resource_disks",
                        ]),
                    ),
                    ("storage_id", string()),
                    ("resource_id", string()),
                    ("guest_id", string()),
                    ("vm_id", string()),
                    ("instance", string()),
                    ("node", string()),
                    ("host", string()),
                    ("cluster", string()),
                    (
                        "job_type",
                        enumerated(&["backup", "sync", "verify", "prune", "garbage"]),
                    ),
                    ("state", string()),
                    ("status", string()),
                    ("resource_type", string()),
                    ("min_usage", json!({"type": "number", "minimum": 0})),
                    ("limit", count()),
                    ("offset", count()),
                ],
                &["type"],
            ),
            Self::PulseDocker => object(
                &[
                    (
                        "action",
                        enumerated(&["updates", "check_updates", "services", "tasks", "swarm"]),
                    ),
                    ("host", string()),
                    ("container", string()),
                    ("service", string()),
                    ("stack", string()),
                ],
                &["action", "host"],
            ),
            Self::PulseKubernetes => object(
                &[
                    (
                        "type",
                        enumerated(&["clusters", "nodes", "pods", "deployments", "logs"]),
                    ),
                    ("cluster", string()),
                    ("namespace", string()),
                    ("deployment", string()),
                    ("pod", string()),
                    ("container", string()),
                    ("lines", count()),
                    ("status", string()),
                    ("limit", count()),
                    ("offset", count()),
                ],
                &["type"],
            ),
            Self::PulseAlerts => object(
                &[
                    (
                        "action",
                        enumerated(&["list", "findings", "resolved", "resolve", "dismiss"]),
                    ),
                    ("severity", enumerated(&["critical", "warning", "info"])),
                    ("resource_type", string()),
                    ("resource_id", string()),
                    ("finding_id", string()),
                    ("resolution_note", string()),
                    (
                        "reason",
                        enumerated(&["not_an_issue", "expected_behavior", "will_fix_later"]),
                    ),
                    ("note", string()),
                    ("include_dismissed", boolean()),
                    ("type", string()),
                    ("level", string()),
                    ("limit", count()),
                    ("offset", count()),
                ],
                &["action"],
            ),
            Self::PulseRead => object(
                &[
                    (
                        "action",
                        enumerated(&["exec", "file", "find", "tail", "logs", "inspect"]),
                    ),
                    ("target_host", string()),
                    ("resource_id", string()),
                    ("command", string()),
                    ("path", string()),
                    ("pattern", string()),
                    ("lines", count()),
                    ("source", enumerated(&["docker", "journal"])),
                    ("container", string()),
                    ("unit", string()),
                    ("since", string()),
                    ("grep", string()),
                ],
                &["action"],
            ),
            Self::PulseControl => object(
                &[
                    ("type", enumerated(&["resource"])),
                    ("resource_id", required_string()),
                    ("guest_id", string()),
                    (
                        "action",
                        enumerated(&["start", "stop", "shutdown", "reboot", "restart"]),
                    ),
                    ("force", boolean()),
                ],
                &["type", "resource_id", "action"],
            ),
            Self::PulseFileEdit => object(
                &[
                    ("action", enumerated(&["append", "write"])),
                    ("path", required_string()),
                    ("target_host", required_string()),
                    ("content", string()),
                    ("container", string()),
                ],
                &["action", "path", "target_host"],
            ),
            Self::PulseDiscovery => object(
                &[
                    ("action", enumerated(&["get", "run", "list"])),
                    (
                        "resource_type",
                        enumerated(&["vm", "system-container", "app-container", "agent"]),
                    ),
                    ("resource_id", string()),
                    ("target_id", string()),
                    ("type", string()),
                    ("service_type", string()),
                    ("limit", count()),
                ],
                &["action"],
            ),
            Self::PulseKnowledge => object(
                &[
                    (
                        "action",
                        enumerated(&["remember", "recall", "incidents", "correlate"]),
                    ),
                    ("resource_id", required_string()),
                    ("note", string()),
                    ("category", string()),
                    ("window_id", string()),
                    ("timestamp", string()),
                    ("window_minutes", count()),
                    ("limit", count()),
                ],
                &["action", "resource_id"],
            ),
            Self::PulsePmg => object(
                &[
                    (
                        "type",
                        enumerated(&["status", "mail_stats", "queues", "spam"]),
                    ),
                    ("instance", string()),
                ],
                &["type"],
            ),
            Self::PatrolGetFindings => object(
                &[
                    ("resource_id", string()),
                    (
                        "severity",
                        enumerated(&["info", "watch", "warning", "critical"]),
                    ),
                ],
                &[],
            ),
            Self::PatrolReportFinding => object(
                &[
                    (
                        "key",
                        json!({"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$", "maxLength": 80}),
                    ),
                    ("severity", enumerated(&["warning", "critical"])),
                    (
                        "category",
                        enumerated(&[
                            "performance",
                            "capacity",
                            "reliability",
                            "backup",
                            "security",
                            "general",
                        ]),
                    ),
                    ("resource_id", required_string()),
                    ("resource_name", required_string()),
                    ("resource_type", enumerated(FINDING_RESOURCE_TYPES)),
                    ("title", required_string()),
                    ("description", required_string()),
                    ("recommendation", required_string()),
                    ("evidence", required_string()),
                    ("impact", string()),
                ],
                &[
                    "key",
                    "severity",
                    "category",
                    "resource_id",
                    "resource_name",
                    "resource_type",
                    "title",
                    "description",
                    "recommendation",
                    "evidence",
                ],
            ),
            Self::PatrolAssessFinding => object(
                &[
                    ("finding_id", required_string()),
                    ("verdict", enumerated(&["present", "resolved", "uncertain"])),
                    ("evidence", required_string()),
                    ("reason", required_string()),
                ],
                &["finding_id", "verdict", "evidence", "reason"],
            ),
            Self::PatrolClearSignal => object(
                &[
                    ("resource_id", required_string()),
                    ("signal", required_string()),
                    ("evidence", required_string()),
                    ("reason", required_string()),
                ],
                &["resource_id", "signal", "evidence", "reason"],
            ),
            Self::PatrolResolveFinding => object(
                &[
                    ("finding_id", required_string()),
                    ("reason", required_string()),
                ],
                &["finding_id", "reason"],
            ),
            Self::PatrolProposeObserver => object(
                &[
                    ("objective_id", required_string()),
                    (
                        "expected_revision",
                        json!({"type": "integer", "minimum": 0}),
                    ),
                    ("evidence_fit", enumerated(&["direct", "proxy"])),
                    ("interpretation", required_string()),
                    (
                        "trigger_kind",
                        enumerated(&[
                            "event", "webhook", "log", "file", "socket", "api", "interval",
                        ]),
                    ),
                    ("probe_json", required_string()),
                    ("wake_evidence", required_string()),
                    ("requirements_json", required_string()),
                ],
                &[
                    "objective_id",
                    "expected_revision",
                    "evidence_fit",
                    "interpretation",
                    "trigger_kind",
                    "probe_json",
                    "wake_evidence",
                    "requirements_json",
                ],
            ),
            Self::PatrolActionCapabilities => {
                object(&[("resource_id", required_string())], &["resource_id"])
            }
            Self::PatrolProposeAction => object(
                &[
                    ("resource_id", required_string()),
                    ("causal_resource_id", required_string()),
                    ("capability_name", required_string()),
                    ("reason", required_string()),
                    ("params", json!({"type": "object"})),
                ],
                &[
                    "resource_id",
                    "causal_resource_id",
                    "capability_name",
                    "reason",
                ],
            ),
            Self::PulseSummarize => object(
                &[
                    ("action", enumerated(&["resource", "fleet"])),
                    ("resource_type", string()),
                    ("resource_id", string()),
                    (
                        "resource_ids",
                        json!({"type": "array", "items": {"type": "string"}, "maxItems": 100}),
                    ),
                    ("range", enumerated(&["24h", "7d", "30d"])),
                ],
                &["action"],
            ),
            Self::PulseQuestion => object(
                &[
                    ("question", required_string()),
                    ("type", enumerated(&["text", "select"])),
                    (
                        "options",
                        json!({"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 10}),
                    ),
                ],
                &["question"],
            ),
        }
    }
}

fn object(properties: &[(&str, Value)], required: &[&str]) -> Value {
    let properties: Map<String, Value> = properties
        .iter()
        .map(|(name, schema)| ((*name).to_owned(), schema.clone()))
        .collect();
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn string() -> Value {
    json!({"type": "string"})
}

fn required_string() -> Value {
    json!({"type": "string", "minLength": 1})
}

fn boolean() -> Value {
    json!({"type": "boolean"})
}

fn count() -> Value {
    json!({"type": "integer", "minimum": 0})
}

fn enumerated(values: &[&str]) -> Value {
    json!({"type": "string", "enum": values})
}

/// A way the catalogue is inconsistent (a bug in this file, caught by a test and at policy build).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogueError {
    #[error("tool {tool}: schema is not a closed object")]
    NotClosed { tool: ToolName },
    #[error("tool {tool}: boolean subschemas at {pointers:?} (use {{}} for any value)")]
    BooleanSubschema {
        tool: ToolName,
        pointers: Vec<String>,
    },
    #[error("tool {tool}: discriminator {argument} has no string enum in the schema")]
    DiscriminatorWithoutEnum {
        tool: ToolName,
        argument: &'static str,
    },
    #[error(
        "tool {tool}: discriminator cases {cases:?} do not exactly cover the schema enum {schema:?}"
    )]
    DiscriminatorCoverage {
        tool: ToolName,
        cases: Vec<String>,
        schema: Vec<String>,
    },
}

/// The enum values of one schema property, if it is a string enum.
pub(crate) fn enum_values(schema: &Value, property: &str) -> Option<Vec<String>> {
    schema
        .get("properties")?
        .get(property)?
        .get("enum")?
        .as_array()?
        .iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// Checks the invariants every tool must hold: a closed object schema with only object
/// subschemas, and a discriminator whose cases exactly cover its schema enum.
pub fn check_catalogue() -> Result<(), CatalogueError> {
    for &tool in ToolName::ALL {
        let schema = tool.schema();
        if schema.get("additionalProperties") != Some(&Value::Bool(false))
            || schema.get("type") != Some(&json!("object"))
        {
            return Err(CatalogueError::NotClosed { tool });
        }
        let pointers = crate::object_schemas::boolean_subschemas(&schema);
        if !pointers.is_empty() {
            return Err(CatalogueError::BooleanSubschema { tool, pointers });
        }
        if let InvocationDescriptor::Discriminator { argument, cases } = tool.descriptor() {
            let Some(mut schema_values) = enum_values(&schema, argument) else {
                return Err(CatalogueError::DiscriminatorWithoutEnum { tool, argument });
            };
            let mut case_values: Vec<String> = cases.iter().map(|(v, _)| (*v).to_owned()).collect();
            schema_values.sort();
            case_values.sort();
            let unique = case_values.windows(2).all(|w| w[0] != w[1]);
            if schema_values != case_values || !unique {
                return Err(CatalogueError::DiscriminatorCoverage {
                    tool,
                    cases: case_values,
                    schema: schema_values,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_is_consistent() {
        assert_eq!(check_catalogue(), Ok(()));
    }

    #[test]
    fn wire_names_round_trip_and_legacy_names_are_not_tools() {
        for &tool in ToolName::ALL {
            assert_eq!(ToolName::from_wire(tool.wire_name()), Some(tool));
            assert_eq!(
                serde_json::to_value(tool).unwrap(),
                Value::String(tool.wire_name().to_owned())
            );
        }
        for legacy in [
            "pulse_run_command",
            "pulse_control_guest",
            "run_command",
            "Pulse_Query",
        ] {
            assert_eq!(ToolName::from_wire(legacy), None);
        }
    }
}
