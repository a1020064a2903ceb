//! Docker Engine API client for the Docker collector.
//!
//! HTTP/1.1 over the engine's unix socket (default `/var/run/docker.sock`) or a plain
//! `DOCKER_HOST=tcp://` endpoint, one connection per request, API version pinned to
//! [`API_VERSION`]. Every call has a timeout; an engine that cannot be reached is a typed
//! [`DockerError::EngineUnavailable`] so the collector can log "Docker collector off: ..." and
//! carry on. Responses are mapped into the crate's own types ([`model`]); the
//! [`CompactInspect`] projection is what may travel further (spec INV-13/14): it keeps state and
//! health evidence and never carries env values or unrelated labels.

pub mod client;
pub mod endpoint;
pub mod error;
pub mod events;
pub mod logs;
pub mod model;
pub mod projection;

pub use client::{ContainerAction, DockerClient, DockerClientConfig, LogTailRequest};
pub use endpoint::DockerEndpoint;
pub use error::DockerError;
pub use events::{ContainerEvent, EventAction, EventDecoder, EventStream};
pub use logs::{LogDemuxer, LogLine, LogStream, LogTail};
pub use model::{
    ContainerDetails, ContainerRunState, ContainerSummary, HealthLogEntry, HealthReport,
    HealthStatus, RestartPolicy,
};
pub use projection::CompactInspect;

/// Engine API version every request is pinned to (Docker Engine 24+).
pub const API_VERSION: &str = "v1.43";
