//! pulsectl's side of the gateway's API: the typed client (`pulse-client`), the token to use, and
//! its errors as pulsectl reports them (exit codes, the hint to start the stack).

use std::path::{Path, PathBuf};

use pulse_client::StatusCode;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The API answered with an error.
    #[error("{code}: {message}")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    #[error(
        "the gateway at {url} isn't running (connection refused)\n  start the stack with \
         `pulsectl up`, or point --gateway (PULSE_GATEWAY_URL) at a running gateway"
    )]
    NotRunning { url: String },
    #[error("request to {url} failed: {source}")]
    Transport {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("unexpected answer from {url}: {reason}")]
    Unexpected { url: String, reason: String },
    #[error("invalid gateway URL '{0}'")]
    GatewayUrl(String),
    #[error("cannot build the request: {0}")]
    Request(String),
    #[error(
        "no API token: pass --token or set PULSE_TOKEN, or start the stack with `pulsectl up` \
         (its gateway writes the admin token to {})",
        .0.display()
    )]
    NoToken(PathBuf),
    #[error("cannot read the admin token {}: {source}", .path.display())]
    ReadToken {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ApiError {
    /// 2 for an error the API reported, 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            ApiError::Api { .. } => 2,
            _ => 1,
        }
    }
}

impl From<pulse_client::Error> for ApiError {
    fn from(err: pulse_client::Error) -> Self {
        match err {
            pulse_client::Error::Api {
                status,
                code,
                message,
            } => ApiError::Api {
                status,
                code: code.code().to_owned(),
                message,
            },
            pulse_client::Error::Status { status, body } => {
                let message = if body.is_empty() {
                    StatusCode::from_u16(status)
                        .ok()
                        .and_then(|s| s.canonical_reason())
                        .unwrap_or("no explanation")
                        .to_lowercase()
                } else {
                    body
                };
                ApiError::Api {
                    status,
                    code: format!("http_{status}"),
                    message,
                }
            }
            pulse_client::Error::ConnectionRefused { url } => ApiError::NotRunning { url },
            pulse_client::Error::Transport { url, source } => ApiError::Transport { url, source },
            pulse_client::Error::Decode { url, source } => ApiError::Unexpected {
                url,
                reason: source.to_string(),
            },
            pulse_client::Error::BaseUrl(url) => ApiError::GatewayUrl(url),
            pulse_client::Error::Query(reason) => ApiError::Request(reason),
        }
    }
}

/// The token to use: the explicit one, else the admin token pulsectl's stack wrote.
pub fn resolve_token(explicit: Option<&str>, state_dir: &Path) -> Result<String, ApiError> {
    if let Some(token) = explicit.map(str::trim).filter(|t| !t.is_empty()) {
        return Ok(token.to_owned());
    }
    let path = state_dir.join("admin-token");
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => Ok(text.trim().to_owned()),
        Ok(_) => Err(ApiError::NoToken(path)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Err(ApiError::NoToken(path)),
        Err(source) => Err(ApiError::ReadToken { path, source }),
    }
}

/// The typed API client of one gateway and token.
#[derive(Debug, Clone)]
pub struct GatewayClient {
    api: pulse_client::Client,
}

impl GatewayClient {
    pub fn new(gateway: &str, token: String) -> Result<Self, ApiError> {
        Ok(Self {
            api: pulse_client::Client::new(gateway, token)?,
        })
    }

    /// The typed operations.
    pub fn api(&self) -> &pulse_client::Client {
        &self.api
    }
}

/// An answer printed for `--json`: pretty JSON.
pub fn print_json<T: serde::Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(err) => eprintln!("cannot print the answer as JSON: {err}"),
    }
}

/// The error of an answer with `status` and `body`, as the client decodes it.
#[cfg(test)]
pub fn api_error(status: StatusCode, body: &str) -> ApiError {
    pulse_client::error_answer(status, body.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_keep_code_and_message() {
        let err = api_error(
            StatusCode::FORBIDDEN,
            r#"{"error": "missing_scope", "message": "admin scope required"}"#,
        );
        assert_eq!(err.to_string(), "missing_scope: admin scope required");
        assert_eq!(err.exit_code(), 2);

        let err = api_error(StatusCode::BAD_GATEWAY, "");
        assert_eq!(err.to_string(), "http_502: bad gateway");
        let err = api_error(StatusCode::NOT_FOUND, "no route\n");
        assert_eq!(err.to_string(), "http_404: no route");
    }

    #[test]
    fn urls_are_joined_and_encoded() {
        let client = GatewayClient::new("http://127.0.0.1:7655/", "t".into()).unwrap();
        assert_eq!(
            client.api().url(&["api", "tokens", "a b/c"]).as_str(),
            "http://127.0.0.1:7655/api/tokens/a%20b%2Fc"
        );
        let prefixed = GatewayClient::new("https://pulse.example/base", "t".into()).unwrap();
        assert_eq!(
            prefixed.api().url(&["api", "tokens"]).as_str(),
            "https://pulse.example/base/api/tokens"
        );
        assert!(GatewayClient::new("127.0.0.1:7655", "t".into()).is_err());
    }

    #[test]
    fn token_comes_from_the_flag_or_the_state_dir() {
        let dir = std::env::temp_dir().join(format!("pulsectl-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(matches!(
            resolve_token(None, &dir),
            Err(ApiError::NoToken(_))
        ));
        std::fs::write(dir.join("admin-token"), "pulse_admin_secret\n").unwrap();
        assert_eq!(resolve_token(None, &dir).unwrap(), "pulse_admin_secret");
        assert_eq!(resolve_token(Some("explicit"), &dir).unwrap(), "explicit");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn connection_refused_says_the_gateway_is_not_running() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = GatewayClient::new(&format!("http://127.0.0.1:{port}"), "t".into()).unwrap();
        let err = ApiError::from(client.api().tokens().await.unwrap_err());
        assert!(matches!(err, ApiError::NotRunning { .. }), "{err:?}");
        assert!(err.to_string().contains("pulsectl up"), "{err}");
        assert_eq!(err.exit_code(), 1);
    }
}
