//! The Docker collector: containers as `app-container` resources, and engine events that
//! trigger a prompt report. Off, with one clear log line, while no engine is reachable.

use std::sync::Arc;
use std::time::Duration;

use pulse_domain::resource::{Health, ObservedResource, ResourceStatus, ResourceType, limits};
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::docker::{ContainerDetails, ContainerRunState, DockerClient, DockerError, HealthStatus};

/// Containers reported at most (the rest are left out with a warning).
pub const MAX_CONTAINERS: usize = 500;
/// Health-log lines carried per container in a report.
const HEALTH_LOG_LINES: usize = 3;
/// Pause between attempts to reach the events stream while the engine is away.
const EVENTS_RETRY: Duration = Duration::from_secs(15);

/// A container as a report resource.
pub fn container_resource(details: &ContainerDetails) -> ObservedResource {
    let status = match details.state {
        ContainerRunState::Running | ContainerRunState::Restarting => ResourceStatus::Running,
        ContainerRunState::Created | ContainerRunState::Paused => ResourceStatus::Stopped,
        ContainerRunState::Exited | ContainerRunState::Dead => ResourceStatus::Exited,
        ContainerRunState::Removing | ContainerRunState::Unknown => ResourceStatus::Unknown,
    };
    let health_status = details.health.as_ref().map(|h| h.status);
    let health = match health_status {
        Some(HealthStatus::Healthy) => Health::Healthy,
        Some(HealthStatus::Unhealthy) => Health::Unhealthy,
        _ if details.dead || (details.oom_killed && !details.running) => Health::Unhealthy,
        _ => Health::Unknown,
    };
    let health_log: Vec<_> = details
        .health
        .as_ref()
        .map(|h| {
            let skip = h.log.len().saturating_sub(HEALTH_LOG_LINES);
            h.log
                .iter()
                .skip(skip)
                .map(|e| json!({"exit_code": e.exit_code, "end": e.end, "output": e.output}))
                .collect()
        })
        .unwrap_or_default();
    let short_id: String = details.id.chars().take(12).collect();
    let mut aliases = Vec::new();
    if short_id != details.id {
        aliases.push(short_id);
    }
    ObservedResource {
        resource_type: ResourceType::AppContainer,
        source_id: details.id.clone(),
        name: if details.name.is_empty() {
            details.id.clone()
        } else {
            details.name.clone()
        },
        aliases,
        status,
        health,
        restart_count: Some(u32::try_from(details.restart_count).unwrap_or(u32::MAX)),
        labels: details
            .labels
            .iter()
            .take(limits::MAX_LABELS)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        details: json!({
            "state": details.state,
            "running": details.running,
            "paused": details.paused,
            "restarting": details.restarting,
            "oom_killed": details.oom_killed,
            "dead": details.dead,
            "exit_code": details.exit_code,
            "error": details.error,
            "health_status": health_status,
            "health_log": health_log,
            "restart_count": details.restart_count,
            "restart_policy": details.restart_policy,
            "image": details.image,
            "image_id": details.image_id,
            "created": details.created,
            "started_at": details.started_at,
            "finished_at": details.finished_at,
        }),
        metrics: Default::default(),
        parent: None,
    }
}

/// What the collector last found at the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Engine {
    NotTried,
    /// Answered the list at this Engine API version.
    Up {
        api_version: String,
    },
    /// Did not: the error's class and message.
    Down {
        code: &'static str,
        reason: String,
    },
}

/// Lists and inspects containers for each report.
pub struct ContainerCollector {
    client: DockerClient,
    engine: Engine,
}

impl ContainerCollector {
    pub fn new(client: DockerClient) -> Self {
        Self {
            client,
            engine: Engine::NotTried,
        }
    }

    /// The containers as resources; empty (after one log line) while no engine answers or the
    /// engine's API is older than the client's minimum ([`Self::engine_status`] says which).
    pub async fn collect(&mut self) -> Vec<ObservedResource> {
        let summaries = match self.client.list_containers().await {
            Ok(list) => list,
            Err(error) => {
                self.engine_down(&error);
                return Vec::new();
            }
        };
        // Cached by the list call that just succeeded: no second request.
        let api_version = self
            .client
            .api_version()
            .await
            .map(|v| v.to_string())
            .unwrap_or_default();
        if !matches!(&self.engine, Engine::Up { api_version: known } if *known == api_version) {
            tracing::info!(endpoint = %self.client.endpoint(), %api_version, containers = summaries.len(), "Docker collector on");
            self.engine = Engine::Up { api_version };
        }
        if summaries.len() > MAX_CONTAINERS {
            tracing::warn!(
                containers = summaries.len(),
                "more containers than {MAX_CONTAINERS}; the rest are not reported"
            );
        }
        let mut out = Vec::with_capacity(summaries.len().min(MAX_CONTAINERS));
        for summary in summaries.iter().take(MAX_CONTAINERS) {
            match self.client.inspect_container(&summary.id).await {
                Ok(details) => out.push(container_resource(&details)),
                // Removed between list and inspect.
                Err(DockerError::NotFound { .. }) => {}
                Err(error) => {
                    tracing::debug!(container = %summary.id, %error, "inspect failed");
                }
            }
        }
        out
    }

    /// The collector's state for the host resource's `details.docker`: `{"state": "on",
    /// "endpoint", "api_version"}`, `{"state": "off", "endpoint", "code", "reason"}` with the
    /// error's class (e.g. `docker_api_version_unsupported`), or `null` before the first try.
    pub fn engine_status(&self) -> serde_json::Value {
        let endpoint = self.client.endpoint().to_string();
        match &self.engine {
            Engine::NotTried => serde_json::Value::Null,
            Engine::Up { api_version } => {
                json!({"state": "on", "endpoint": endpoint, "api_version": api_version})
            }
            Engine::Down { code, reason } => {
                json!({"state": "off", "endpoint": endpoint, "code": code, "reason": reason})
            }
        }
    }

    fn engine_down(&mut self, error: &DockerError) {
        let code = error.code();
        let reason = error.to_string();
        // One log line per kind of outage, not one per report.
        if matches!(&self.engine, Engine::Down { code: known, .. } if *known == code) {
            self.engine = Engine::Down { code, reason };
            return;
        }
        match error {
            DockerError::EngineUnavailable { .. } => {
                tracing::info!(endpoint = %self.client.endpoint(), %error, "Docker collector off: no engine reachable; containers are not reported until one answers");
            }
            DockerError::UnsupportedApiVersion { .. } => {
                tracing::warn!(endpoint = %self.client.endpoint(), code, %error, "Docker collector off: the engine is too old for this agent; containers are not reported until it is upgraded");
            }
            _ => {
                tracing::warn!(endpoint = %self.client.endpoint(), code, %error, "Docker collector off: the engine did not answer the container list");
            }
        }
        self.engine = Engine::Down { code, reason };
    }
}

/// Follows engine container events and wakes `changed` on each, so a report goes out at once.
/// Reconnects quietly while the engine is away.
pub async fn watch_events(client: DockerClient, changed: Arc<Notify>, shutdown: CancellationToken) {
    let mut since = None;
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => return,
            stream = client.events(since) => stream,
        };
        match stream {
            Ok(mut stream) => loop {
                let next = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    next = stream.next() => next,
                };
                match next {
                    Ok(Some(event)) => {
                        tracing::debug!(container = %event.container_id, action = ?event.action, "docker event");
                        if event.time.is_some() {
                            since = event.time;
                        }
                        changed.notify_one();
                    }
                    Ok(None) => break,
                    Err(error) => {
                        tracing::debug!(%error, "docker events stream ended");
                        break;
                    }
                }
            },
            Err(error) => tracing::debug!(%error, "docker events not available"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(EVENTS_RETRY) => {}
        }
    }
}
