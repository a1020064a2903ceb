//! Typed views of Engine API responses. The raw wire structs are private and tolerant (every
//! field optional); the public types are what the collector uses. Env values are never read.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Most health-check log entries kept per container (Docker keeps up to 5).
pub const MAX_HEALTH_LOG_ENTRIES: usize = 5;
/// Longest health-check output kept per entry, in bytes (cut at a char boundary).
pub const MAX_HEALTH_OUTPUT_BYTES: usize = 512;
/// Most labels kept per container; engines allow far more than a collector needs.
pub const MAX_LABELS: usize = 256;
/// Longest label key or value kept, in bytes.
pub const MAX_LABEL_BYTES: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContainerRunState {
    Created,
    Running,
    Paused,
    Restarting,
    Removing,
    Exited,
    Dead,
    Unknown,
}

impl ContainerRunState {
    pub fn parse(value: &str) -> Self {
        match value.to_ascii_lowercase().as_str() {
            "created" => Self::Created,
            "running" => Self::Running,
            "paused" => Self::Paused,
            "restarting" => Self::Restarting,
            "removing" => Self::Removing,
            "exited" => Self::Exited,
            "dead" => Self::Dead,
            _ => Self::Unknown,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    Starting,
    Healthy,
    Unhealthy,
    /// A health check is configured as `NONE` or not at all.
    None,
}

impl HealthStatus {
    pub fn parse(value: &str) -> Self {
        match value.trim().to_ascii_lowercase().as_str() {
            "starting" => Self::Starting,
            "healthy" => Self::Healthy,
            "unhealthy" => Self::Unhealthy,
            _ => Self::None,
        }
    }

    /// Reads the health hint the list endpoint embeds in `Status`, e.g. `Up 2 hours (healthy)`.
    pub fn from_list_status(status: &str) -> Option<Self> {
        if status.contains("(unhealthy)") {
            Some(Self::Unhealthy)
        } else if status.contains("(healthy)") {
            Some(Self::Healthy)
        } else if status.contains("(health: starting)") {
            Some(Self::Starting)
        } else {
            None
        }
    }
}

/// One row of `GET /containers/json?all=1`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContainerSummary {
    pub id: String,
    /// Names without the leading `/`.
    pub names: Vec<String>,
    pub image: String,
    pub image_id: String,
    pub state: ContainerRunState,
    pub status: String,
    /// From the `(healthy)` style suffix of `status`; `None` when the container has no check.
    pub health: Option<HealthStatus>,
    pub labels: BTreeMap<String, String>,
    pub created: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HealthLogEntry {
    pub start: Option<DateTime<Utc>>,
    pub end: Option<DateTime<Utc>>,
    pub exit_code: Option<i64>,
    /// Bounded to [`MAX_HEALTH_OUTPUT_BYTES`].
    pub output: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HealthReport {
    pub status: HealthStatus,
    pub failing_streak: u64,
    /// Newest last, at most [`MAX_HEALTH_LOG_ENTRIES`].
    pub log: Vec<HealthLogEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestartPolicy {
    /// `no`, `always`, `unless-stopped`, `on-failure` (empty means `no`).
    pub name: String,
    pub maximum_retry_count: u64,
}

/// `GET /containers/{id}/json`, minus everything the collector has no use for. `Config.Env` is
/// deliberately not part of this type, so env values cannot leak from it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContainerDetails {
    pub id: String,
    pub name: String,
    /// The image reference the container was created from (`Config.Image`).
    pub image: String,
    /// The resolved image id (`Image`, `sha256:...`).
    pub image_id: String,
    pub state: ContainerRunState,
    pub running: bool,
    pub paused: bool,
    pub restarting: bool,
    pub oom_killed: bool,
    pub dead: bool,
    pub exit_code: Option<i64>,
    /// Engine-side error for the last start, if any.
    pub error: Option<String>,
    pub health: Option<HealthReport>,
    pub restart_count: u64,
    pub restart_policy: RestartPolicy,
    pub labels: BTreeMap<String, String>,
    pub tty: bool,
    pub created: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

// ---- wire structs -----------------------------------------------------------------------

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct RawSummary {
    id: String,
    names: Option<Vec<String>>,
    image: String,
    #[serde(rename = "ImageID")]
    image_id: String,
    state: String,
    status: String,
    labels: Option<BTreeMap<String, String>>,
    created: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct RawDetails {
    id: String,
    name: String,
    created: Option<String>,
    image: String,
    restart_count: u64,
    state: Option<RawState>,
    host_config: Option<RawHostConfig>,
    config: Option<RawConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct RawState {
    status: String,
    running: bool,
    paused: bool,
    restarting: bool,
    #[serde(rename = "OOMKilled")]
    oom_killed: bool,
    dead: bool,
    exit_code: Option<i64>,
    error: Option<String>,
    started_at: Option<String>,
    finished_at: Option<String>,
    health: Option<RawHealth>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct RawHealth {
    status: String,
    failing_streak: u64,
    log: Option<Vec<RawHealthLog>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct RawHealthLog {
    start: Option<String>,
    end: Option<String>,
    exit_code: Option<i64>,
    output: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct RawHostConfig {
    restart_policy: Option<RawRestartPolicy>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct RawRestartPolicy {
    name: String,
    maximum_retry_count: u64,
}

impl RawDetails {
    /// The container's labels as the engine sent them, none dropped.
    pub(crate) fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.config.as_ref()?.labels.as_ref()
    }
}

/// Only the fields we keep; `Env` is intentionally absent so serde skips it unread.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct RawConfig {
    image: String,
    labels: Option<BTreeMap<String, String>>,
    tty: bool,
}

/// Cuts `text` to at most `max` bytes at a char boundary.
pub(crate) fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// RFC 3339 timestamp; Docker's zero time (`0001-01-01T00:00:00Z`) and junk are `None`.
pub(crate) fn parse_time(value: Option<&str>) -> Option<DateTime<Utc>> {
    let parsed = DateTime::parse_from_rfc3339(value?.trim()).ok()?;
    let utc = parsed.with_timezone(&Utc);
    (utc.timestamp() > 0).then_some(utc)
}

fn bounded_labels(labels: Option<BTreeMap<String, String>>) -> BTreeMap<String, String> {
    labels
        .unwrap_or_default()
        .into_iter()
        .take(MAX_LABELS)
        .map(|(k, v)| (bounded(&k, MAX_LABEL_BYTES), bounded(&v, MAX_LABEL_BYTES)))
        .collect()
}

impl From<RawSummary> for ContainerSummary {
    fn from(raw: RawSummary) -> Self {
        Self {
            names: raw
                .names
                .unwrap_or_default()
                .into_iter()
                .map(|n| n.trim_start_matches('/').to_owned())
                .collect(),
            health: HealthStatus::from_list_status(&raw.status),
            state: ContainerRunState::parse(&raw.state),
            labels: bounded_labels(raw.labels),
            created: raw
                .created
                .and_then(|secs| DateTime::<Utc>::from_timestamp(secs, 0)),
            id: raw.id,
            image: raw.image,
            image_id: raw.image_id,
            status: raw.status,
        }
    }
}

impl From<RawDetails> for ContainerDetails {
    fn from(raw: RawDetails) -> Self {
        let state = raw.state.unwrap_or_default();
        let config = raw.config.unwrap_or_default();
        let policy = raw
            .host_config
            .and_then(|h| h.restart_policy)
            .unwrap_or_default();
        let health = state.health.and_then(|h| {
            let status = HealthStatus::parse(&h.status);
            if status == HealthStatus::None && h.log.as_ref().is_none_or(Vec::is_empty) {
                return None;
            }
            let log = h.log.unwrap_or_default();
            let skip = log.len().saturating_sub(MAX_HEALTH_LOG_ENTRIES);
            Some(HealthReport {
                status,
                failing_streak: h.failing_streak,
                log: log
                    .into_iter()
                    .skip(skip)
                    .map(|entry| HealthLogEntry {
                        start: parse_time(entry.start.as_deref()),
                        end: parse_time(entry.end.as_deref()),
                        exit_code: entry.exit_code,
                        output: bounded(
                            entry.output.as_deref().unwrap_or_default().trim_end(),
                            MAX_HEALTH_OUTPUT_BYTES,
                        ),
                    })
                    .collect(),
            })
        });
        Self {
            id: raw.id,
            name: raw.name.trim_start_matches('/').to_owned(),
            image: config.image,
            image_id: raw.image,
            state: ContainerRunState::parse(&state.status),
            running: state.running,
            paused: state.paused,
            restarting: state.restarting,
            oom_killed: state.oom_killed,
            dead: state.dead,
            exit_code: state.exit_code,
            error: state
                .error
                .filter(|e| !e.is_empty())
                .map(|e| bounded(&e, MAX_HEALTH_OUTPUT_BYTES)),
            health,
            restart_count: raw.restart_count,
            restart_policy: RestartPolicy {
                name: if policy.name.is_empty() {
                    "no".to_owned()
                } else {
                    policy.name
                },
                maximum_retry_count: policy.maximum_retry_count,
            },
            labels: bounded_labels(config.labels),
            tty: config.tty,
            created: parse_time(raw.created.as_deref()),
            started_at: parse_time(state.started_at.as_deref()),
            finished_at: parse_time(state.finished_at.as_deref()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_cuts_at_char_boundaries() {
        assert_eq!(bounded("héllo", 2), "h");
        assert_eq!(bounded("héllo", 3), "hé");
        assert_eq!(bounded("abc", 10), "abc");
    }

    #[test]
    fn zero_time_is_none() {
        assert_eq!(parse_time(Some("0001-01-01T00:00:00Z")), None);
        assert_eq!(parse_time(Some("garbage")), None);
        assert!(parse_time(Some("2026-11-29T10:00:00.123456789Z")).is_some());
    }

    #[test]
    fn list_status_health_hints() {
        assert_eq!(
            HealthStatus::from_list_status("Up 2 hours (healthy)"),
            Some(HealthStatus::Healthy)
        );
        assert_eq!(
            HealthStatus::from_list_status("Up 3 minutes (unhealthy)"),
            Some(HealthStatus::Unhealthy)
        );
        assert_eq!(
            HealthStatus::from_list_status("Up 1 second (health: starting)"),
            Some(HealthStatus::Starting)
        );
        assert_eq!(
            HealthStatus::from_list_status("Exited (0) 2 days ago"),
            None
        );
    }
}
