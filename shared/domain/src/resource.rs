//! Monitored resources: canonical identity, type, status and health, and the limits applied to
//! the untrusted text agents report about them.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What kind of thing a resource is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ResourceType {
    Host,
    AppContainer,
    Service,
    Storage,
    // What a platform connector reports: a Proxmox VE node, a virtual machine (`qemu`), a
    // system container (`lxc`), a disk of a node with its SMART health. (Plain comments: the
    // wire schema stays one enum of names.)
    Node,
    Vm,
    SystemContainer,
    PhysicalDisk,
}

impl ResourceType {
    pub const ALL: [ResourceType; 8] = [
        ResourceType::Host,
        ResourceType::AppContainer,
        ResourceType::Service,
        ResourceType::Storage,
        ResourceType::Node,
        ResourceType::Vm,
        ResourceType::SystemContainer,
        ResourceType::PhysicalDisk,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ResourceType::Host => "host",
            ResourceType::AppContainer => "app-container",
            ResourceType::Service => "service",
            ResourceType::Storage => "storage",
            ResourceType::Node => "node",
            ResourceType::Vm => "vm",
            ResourceType::SystemContainer => "system-container",
            ResourceType::PhysicalDisk => "physical-disk",
        }
    }

    /// A guest of a hypervisor: what the guest power actions act on.
    pub fn is_guest(self) -> bool {
        matches!(self, ResourceType::Vm | ResourceType::SystemContainer)
    }
}

impl fmt::Display for ResourceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown resource type {0:?} (expected host, app-container, service, storage, node, vm, \
     system-container or physical-disk)"
)]
pub struct UnknownResourceType(pub String);

impl std::str::FromStr for ResourceType {
    type Err = UnknownResourceType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ResourceType::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| UnknownResourceType(s.to_owned()))
    }
}

/// Whether the resource is up. `Unknown` means nobody can currently tell (its agent went
/// silent); it never means stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ResourceStatus {
    Running,
    Exited,
    Stopped,
    Unknown,
}

impl ResourceStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceStatus::Running => "running",
            ResourceStatus::Exited => "exited",
            ResourceStatus::Stopped => "stopped",
            ResourceStatus::Unknown => "unknown",
        }
    }
}

impl std::str::FromStr for ResourceStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "running" => Ok(ResourceStatus::Running),
            "exited" => Ok(ResourceStatus::Exited),
            "stopped" => Ok(ResourceStatus::Stopped),
            "unknown" => Ok(ResourceStatus::Unknown),
            other => Err(format!("unknown resource status {other:?}")),
        }
    }
}

/// The result of the resource's health check, if it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Healthy,
    Unhealthy,
    Unknown,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Healthy => "healthy",
            Health::Unhealthy => "unhealthy",
            Health::Unknown => "unknown",
        }
    }
}

impl std::str::FromStr for Health {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "healthy" => Ok(Health::Healthy),
            "unhealthy" => Ok(Health::Unhealthy),
            "unknown" => Ok(Health::Unknown),
            other => Err(format!("unknown health {other:?}")),
        }
    }
}

/// A canonical resource id: `host:<agent-id>`, `service:<host>:<name>`,
/// `storage:<host>:<mount>`, `app-container:<host>:<container-id>`; for what a platform
/// connector reports (agent `pve.<name>`), `<type>:<agent>:<source id>`, e.g.
/// `vm:pve.home:100`, `node:pve.home:pve1`, `physical-disk:pve.home:pve1/dev/sda`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(transparent)]
pub struct ResourceId(String);

impl ResourceId {
    pub fn host(agent_id: &str) -> Self {
        Self(format!("host:{agent_id}"))
    }

    pub fn service(host: &str, name: &str) -> Self {
        Self(format!("service:{host}:{name}"))
    }

    pub fn storage(host: &str, mount: &str) -> Self {
        Self(format!("storage:{host}:{mount}"))
    }

    pub fn app_container(host: &str, container_id: &str) -> Self {
        Self(format!("app-container:{host}:{container_id}"))
    }

    /// The canonical id of a resource of `kind` with `source_id`, observed by agent `host`.
    pub fn of(kind: ResourceType, host: &str, source_id: &str) -> Self {
        match kind {
            ResourceType::Host => Self::host(host),
            ResourceType::Service => Self::service(host, source_id),
            ResourceType::Storage => Self::storage(host, source_id),
            ResourceType::AppContainer => Self::app_container(host, source_id),
            other => Self(format!("{}:{host}:{source_id}", other.as_str())),
        }
    }

    /// Wraps an id read back from the store.
    pub fn from_stored(id: String) -> Self {
        Self(id)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Limits applied to agent-reported text before it is stored. Longer values are truncated.
pub mod limits {
    pub const MAX_NAME_CHARS: usize = 256;
    pub const MAX_SOURCE_ID_CHARS: usize = 512;
    pub const MAX_ALIASES: usize = 16;
    pub const MAX_LABELS: usize = 64;
    pub const MAX_LABEL_KEY_CHARS: usize = 128;
    pub const MAX_LABEL_VALUE_CHARS: usize = 1024;
    pub const MAX_METRICS: usize = 64;
    pub const MAX_RESOURCES_PER_REPORT: usize = 5_000;
    pub const MAX_AGENT_ID_CHARS: usize = 128;
}

/// `value` cut to at most `max` characters (on a character boundary).
pub fn truncate_chars(value: &str, max: usize) -> String {
    match value.char_indices().nth(max) {
        Some((cut, _)) => value[..cut].to_owned(),
        None => value.to_owned(),
    }
}

/// Whether `id` is an acceptable agent id: 1 to 128 of `[A-Za-z0-9._-]`. Agent ids appear in
/// every canonical id, so they may not contain `:`.
pub fn valid_agent_id(id: &str) -> bool {
    !id.is_empty()
        && id.chars().count() <= limits::MAX_AGENT_ID_CHARS
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// One resource as an agent observed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ObservedResource {
    #[serde(rename = "type")]
    pub resource_type: ResourceType,
    /// The provider coordinate: the agent id for a host, the service name, the mount point, the
    /// Docker container id.
    pub source_id: String,
    pub name: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    pub status: ResourceStatus,
    pub health: Health,
    #[serde(default)]
    pub restart_count: Option<u32>,
    /// Untrusted text.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Type-specific facts (pid, last exit code, health log, usage...).
    #[serde(default)]
    pub details: serde_json::Value,
    /// The resource of the same report this one belongs to (a guest's node, a disk's node);
    /// none: the reporting agent's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentRef>,
    /// Current values, stored as metric history.
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
}

/// A resource of the same report, by type and source id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ParentRef {
    #[serde(rename = "type")]
    pub resource_type: ResourceType,
    pub source_id: String,
}

impl ObservedResource {
    /// Truncates over-long text and drops what is over the count limits. Returns whether
    /// anything was cut.
    pub fn sanitize(&mut self) -> bool {
        let mut cut = false;
        let mut clip = |value: &mut String, max: usize| {
            if value.chars().count() > max {
                *value = truncate_chars(value, max);
                cut = true;
            }
        };
        clip(&mut self.name, limits::MAX_NAME_CHARS);
        clip(&mut self.source_id, limits::MAX_SOURCE_ID_CHARS);
        for alias in &mut self.aliases {
            clip(alias, limits::MAX_NAME_CHARS);
        }
        if self.aliases.len() > limits::MAX_ALIASES {
            self.aliases.truncate(limits::MAX_ALIASES);
            cut = true;
        }
        if self.labels.len() > limits::MAX_LABELS
            || self.labels.iter().any(|(k, v)| {
                k.chars().count() > limits::MAX_LABEL_KEY_CHARS
                    || v.chars().count() > limits::MAX_LABEL_VALUE_CHARS
            })
        {
            cut = true;
            self.labels = std::mem::take(&mut self.labels)
                .into_iter()
                .take(limits::MAX_LABELS)
                .map(|(k, v)| {
                    (
                        truncate_chars(&k, limits::MAX_LABEL_KEY_CHARS),
                        truncate_chars(&v, limits::MAX_LABEL_VALUE_CHARS),
                    )
                })
                .collect();
        }
        if self.metrics.len() > limits::MAX_METRICS {
            cut = true;
            self.metrics = std::mem::take(&mut self.metrics)
                .into_iter()
                .take(limits::MAX_METRICS)
                .collect();
        }
        self.metrics.retain(|_, v| v.is_finite());
        cut
    }
}

/// A resource as stored and served by the API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Resource {
    pub id: ResourceId,
    #[serde(rename = "type")]
    pub resource_type: ResourceType,
    pub source_id: String,
    pub name: String,
    pub aliases: Vec<String>,
    pub parent: Option<ResourceId>,
    pub agent_id: String,
    pub status: ResourceStatus,
    pub health: Health,
    pub restart_count: Option<u32>,
    pub labels: BTreeMap<String, String>,
    pub details: serde_json::Value,
    /// When the agent observed it.
    pub observed_at: DateTime<Utc>,
    /// When the relay stored it.
    pub received_at: DateTime<Utc>,
}

/// How a resource changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ResourceChange {
    Created,
    Updated,
    Removed,
}

/// The `events.resource.changed` event: a resource appeared, disappeared, or its status or
/// health changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ResourceChanged {
    pub resource_id: ResourceId,
    #[serde(rename = "type")]
    pub resource_type: ResourceType,
    pub change: ResourceChange,
    pub status: ResourceStatus,
    pub health: Health,
    pub previous_status: Option<ResourceStatus>,
    pub previous_health: Option<Health>,
    pub at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_ids() {
        assert_eq!(ResourceId::host("h1").as_str(), "host:h1");
        assert_eq!(
            ResourceId::of(ResourceType::Service, "h1", "web").as_str(),
            "service:h1:web"
        );
        assert_eq!(
            ResourceId::of(ResourceType::Storage, "h1", "/var").as_str(),
            "storage:h1:/var"
        );
        assert_eq!(
            ResourceId::of(ResourceType::AppContainer, "h1", "abc").as_str(),
            "app-container:h1:abc"
        );
        assert_eq!(
            ResourceId::of(ResourceType::Host, "h1", "ignored").as_str(),
            "host:h1"
        );
    }

    #[test]
    fn types_round_trip() {
        for t in ResourceType::ALL {
            assert_eq!(t.as_str().parse::<ResourceType>().unwrap(), t);
            assert_eq!(
                serde_json::to_value(t).unwrap(),
                serde_json::Value::String(t.as_str().to_owned())
            );
        }
        assert!("k8s-pod".parse::<ResourceType>().is_err());
    }

    #[test]
    fn resource_wire_shape() {
        let at = DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let resource = Resource {
            id: ResourceId::service("m1", "web"),
            resource_type: ResourceType::Service,
            source_id: "web".into(),
            name: "web".into(),
            aliases: vec!["frontend".into()],
            parent: Some(ResourceId::host("m1")),
            agent_id: "m1".into(),
            status: ResourceStatus::Running,
            health: Health::Healthy,
            restart_count: Some(0),
            labels: [("team".to_owned(), "ops".to_owned())].into(),
            details: serde_json::json!({"pid": 42}),
            observed_at: at,
            received_at: at,
        };
        insta::assert_json_snapshot!("resource", resource);
    }

    #[test]
    fn agent_ids() {
        assert!(valid_agent_id("0f3a-host.local_1"));
        assert!(!valid_agent_id(""));
        assert!(!valid_agent_id("a:b"));
        assert!(!valid_agent_id(&"a".repeat(129)));
    }

    #[test]
    fn sanitize_truncates_untrusted_text() {
        let mut r = ObservedResource {
            resource_type: ResourceType::Service,
            source_id: "web".into(),
            name: "é".repeat(300),
            aliases: vec!["a".into(); 20],
            status: ResourceStatus::Running,
            health: Health::Healthy,
            restart_count: None,
            labels: (0..70)
                .map(|i| (format!("k{i:02}"), "v".repeat(2000)))
                .collect(),
            details: serde_json::Value::Null,
            metrics: [("x".to_owned(), f64::NAN), ("y".to_owned(), 1.0)].into(),
            parent: None,
        };
        assert!(r.sanitize());
        assert_eq!(r.name.chars().count(), limits::MAX_NAME_CHARS);
        assert_eq!(r.aliases.len(), limits::MAX_ALIASES);
        assert_eq!(r.labels.len(), limits::MAX_LABELS);
        assert!(
            r.labels
                .values()
                .all(|v| v.len() == limits::MAX_LABEL_VALUE_CHARS)
        );
        assert_eq!(r.metrics.len(), 1);
        assert!(!r.sanitize());
    }
}
