//! The compacted inspect projection (spec INV-13/14): a bounded, deterministic record of the
//! safety-relevant parts of `docker inspect` that may be shown to Patrol or stored as evidence.
//! Keeps state, running/paused/restarting/OOM/dead flags, exit code, health results, restart
//! count and policy, image identity and times; keeps only allowlisted orchestration labels;
//! never carries env values (the source type has none) or other labels.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::model::{ContainerDetails, ContainerRunState, HealthStatus, RestartPolicy, bounded};

/// Labels that identify the container's place in a compose project, and nothing else.
pub const LABEL_ALLOWLIST: [&str; 4] = [
    "com.docker.compose.project",
    "com.docker.compose.service",
    "com.docker.compose.container-number",
    "com.docker.compose.oneoff",
];
/// Health results kept (newest last).
pub const MAX_HEALTH_RESULTS: usize = 3;
/// Bytes of health-check output kept per result.
pub const MAX_HEALTH_OUTPUT: usize = 200;
const MAX_LABEL_VALUE: usize = 128;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompactHealthResult {
    pub exit_code: Option<i64>,
    pub end: Option<DateTime<Utc>>,
    pub output: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompactInspect {
    pub id: String,
    pub name: String,
    pub image: String,
    pub image_id: String,
    pub state: ContainerRunState,
    pub running: bool,
    pub paused: bool,
    pub restarting: bool,
    pub oom_killed: bool,
    pub dead: bool,
    pub exit_code: Option<i64>,
    pub error: Option<String>,
    pub health_status: Option<HealthStatus>,
    pub failing_streak: Option<u64>,
    pub health_results: Vec<CompactHealthResult>,
    pub restart_count: u64,
    pub restart_policy: RestartPolicy,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub labels: BTreeMap<String, String>,
}

impl CompactInspect {
    pub fn from_details(details: &ContainerDetails) -> Self {
        let (health_status, failing_streak, health_results) = match &details.health {
            Some(h) => {
                let skip = h.log.len().saturating_sub(MAX_HEALTH_RESULTS);
                (
                    Some(h.status),
                    Some(h.failing_streak),
                    h.log
                        .iter()
                        .skip(skip)
                        .map(|e| CompactHealthResult {
                            exit_code: e.exit_code,
                            end: e.end,
                            output: bounded(e.output.trim(), MAX_HEALTH_OUTPUT),
                        })
                        .collect(),
                )
            }
            None => (None, None, Vec::new()),
        };
        Self {
            id: details.id.clone(),
            name: details.name.clone(),
            image: details.image.clone(),
            image_id: details.image_id.clone(),
            state: details.state,
            running: details.running,
            paused: details.paused,
            restarting: details.restarting,
            oom_killed: details.oom_killed,
            dead: details.dead,
            exit_code: details.exit_code,
            error: details
                .error
                .as_deref()
                .map(|e| bounded(e, MAX_HEALTH_OUTPUT)),
            health_status,
            failing_streak,
            health_results,
            restart_count: details.restart_count,
            restart_policy: details.restart_policy.clone(),
            started_at: details.started_at,
            finished_at: details.finished_at,
            labels: details
                .labels
                .iter()
                .filter(|(k, _)| LABEL_ALLOWLIST.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), bounded(v, MAX_LABEL_VALUE)))
                .collect(),
        }
    }
}

impl From<&ContainerDetails> for CompactInspect {
    fn from(details: &ContainerDetails) -> Self {
        Self::from_details(details)
    }
}
