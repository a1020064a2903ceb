use thiserror::Error;

#[derive(Debug, Error)]
pub enum DockerError {
    /// Nothing answered at the endpoint (no socket, refused, connect timed out).
    #[error("docker engine unavailable at {endpoint}: {reason}")]
    EngineUnavailable { endpoint: String, reason: String },
    /// The engine answers but serves only Engine API versions older than the client's minimum.
    #[error(
        "docker engine at {endpoint} (release {release:?}) serves Engine API {engine} at most, older than the minimum {minimum} this agent speaks; upgrade Docker to {min_release} or newer"
    )]
    UnsupportedApiVersion {
        endpoint: String,
        release: String,
        engine: String,
        minimum: String,
        min_release: String,
    },
    #[error("docker {operation} timed out after {timeout_ms} ms")]
    Timeout { operation: String, timeout_ms: u64 },
    #[error("docker container not found: {id}")]
    NotFound { id: String },
    #[error("docker engine returned {status} for {operation}: {message}")]
    Api {
        operation: String,
        status: u16,
        message: String,
    },
    #[error("docker {operation} response exceeded {limit} bytes")]
    ResponseTooLarge { operation: String, limit: usize },
    #[error("docker {operation} response could not be decoded: {reason}")]
    Decode { operation: String, reason: String },
    #[error("docker http exchange failed during {operation}: {reason}")]
    Transport { operation: String, reason: String },
    #[error("invalid docker endpoint {value:?}: {reason}")]
    InvalidEndpoint { value: String, reason: String },
    #[error("invalid docker container id {id:?}")]
    InvalidContainerId { id: String },
}

impl DockerError {
    /// A stable machine-readable class, carried in reports next to the message.
    pub fn code(&self) -> &'static str {
        match self {
            Self::EngineUnavailable { .. } => "docker_engine_unavailable",
            Self::UnsupportedApiVersion { .. } => "docker_api_version_unsupported",
            Self::Timeout { .. } => "docker_timeout",
            Self::NotFound { .. } => "docker_container_not_found",
            Self::Api { .. } => "docker_api_error",
            Self::ResponseTooLarge { .. } => "docker_response_too_large",
            Self::Decode { .. } => "docker_decode_failed",
            Self::Transport { .. } => "docker_transport_failed",
            Self::InvalidEndpoint { .. } => "docker_invalid_endpoint",
            Self::InvalidContainerId { .. } => "docker_invalid_container_id",
        }
    }

    /// The engine may have gone away (or been replaced): the negotiated version is stale.
    pub(crate) fn is_connection_loss(&self) -> bool {
        matches!(
            self,
            Self::EngineUnavailable { .. } | Self::Transport { .. }
        )
    }
}
