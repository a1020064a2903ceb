use thiserror::Error;

#[derive(Debug, Error)]
pub enum DockerError {
    /// Nothing answered at the endpoint (no socket, refused, connect timed out).
    #[error("docker engine unavailable at {endpoint}: {reason}")]
    EngineUnavailable { endpoint: String, reason: String },
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
