//! Docker Engine API client for the Docker collector.
//!
//! HTTP/1.1 over the engine's unix socket (default `/var/run/docker.sock`) or a plain
//! `DOCKER_HOST=tcp://` endpoint, one connection per request. The API version is negotiated
//! with the engine (`GET /version`, see [`version`]): the lower of the engine's and
//! [`CLIENT_API_VERSION`], never below [`MIN_API_VERSION`]; it is cached per client (and its
//! clones) and negotiated again after the engine was lost or restarted. Every call has a
//! timeout; an engine that cannot be reached is a typed
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
pub mod scope;
pub mod version;

pub use client::{ContainerAction, DockerClient, DockerClientConfig, LogTailRequest, RequestBody};
pub use endpoint::DockerEndpoint;
pub use error::DockerError;
pub use events::{ContainerEvent, EventAction, EventDecoder, EventStream};
/// The method and status types of [`DockerClient::request`].
pub use hyper::{Method, StatusCode};
pub use logs::{LogDemuxer, LogLine, LogStream, LogTail};
pub use model::{
    ContainerDetails, ContainerRunState, ContainerSummary, HealthLogEntry, HealthReport,
    HealthStatus, RestartPolicy,
};
pub use projection::CompactInspect;
pub use scope::{InvalidLabelScope, LabelScope};
pub use version::{ApiVersion, CLIENT_API_VERSION, MIN_API_VERSION};
