//! HTTP client for the gateway's API: bearer authentication and the `{"error", "message"}`
//! error shape.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;
use serde::de::DeserializeOwned;

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

#[derive(Debug, Deserialize)]
struct ErrorBody {
    error: String,
    #[serde(default)]
    message: String,
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

#[derive(Debug, Clone)]
pub struct GatewayClient {
    base: Url,
    token: String,
    http: reqwest::Client,
}

impl GatewayClient {
    pub fn new(gateway: &str, token: String) -> Result<Self, ApiError> {
        let base = Url::parse(gateway)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https") && url.has_host())
            .ok_or_else(|| ApiError::GatewayUrl(gateway.to_owned()))?;
        // reqwest is built without a TLS back-end of its own; make sure ring is installed
        // whoever constructs the client (main does it too; this covers library callers).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|source| ApiError::Transport {
                url: gateway.to_owned(),
                source,
            })?;
        Ok(Self { base, token, http })
    }

    /// `segments` appended to the base URL, each percent-encoded.
    pub fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// Sends a request; a success status yields the response, anything else an `ApiError`.
    async fn send(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<&serde_json::Value>,
    ) -> Result<(Url, reqwest::Response), ApiError> {
        let url = self.url(segments);
        let mut request = self
            .http
            .request(method, url.clone())
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|source| transport_error(&self.base, &url, source))?;
        let status = response.status();
        if status.is_success() {
            return Ok((url, response));
        }
        let text = response.text().await.unwrap_or_default();
        Err(api_error(status, &text))
    }

    pub async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<&serde_json::Value>,
    ) -> Result<T, ApiError> {
        let (url, response) = self.send(method, segments, body).await?;
        response
            .json::<T>()
            .await
            .map_err(|err| ApiError::Unexpected {
                url: url.to_string(),
                reason: err.to_string(),
            })
    }

    /// The answer as `T`, or, with `raw` (`--json`), printed as pretty JSON and `None`.
    pub async fn fetch<T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<&serde_json::Value>,
        raw: bool,
    ) -> Result<Option<T>, ApiError> {
        let value: serde_json::Value = self.json(method, segments, body).await?;
        if raw {
            println!(
                "{}",
                serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string())
            );
            return Ok(None);
        }
        serde_json::from_value(value)
            .map(Some)
            .map_err(|err| ApiError::Unexpected {
                url: self.url(segments).to_string(),
                reason: err.to_string(),
            })
    }

    pub async fn no_content(&self, method: Method, segments: &[&str]) -> Result<(), ApiError> {
        self.send(method, segments, None).await.map(drop)
    }
}

fn transport_error(base: &Url, url: &Url, source: reqwest::Error) -> ApiError {
    if is_connection_refused(&source) {
        let mut base = base.to_string();
        if base.ends_with('/') {
            base.pop();
        }
        return ApiError::NotRunning { url: base };
    }
    ApiError::Transport {
        url: url.to_string(),
        source,
    }
}

fn is_connection_refused(err: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(current) = source {
        let refused = current
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
        if refused {
            return true;
        }
        source = current.source();
    }
    false
}

/// The API's `{"error", "message"}` body, or a stand-in built from the status.
pub fn api_error(status: StatusCode, body: &str) -> ApiError {
    match serde_json::from_str::<ErrorBody>(body) {
        Ok(parsed) => ApiError::Api {
            status: status.as_u16(),
            code: parsed.error,
            message: parsed.message,
        },
        Err(_) => {
            let mut message: String = body.trim().chars().take(200).collect();
            if message.is_empty() {
                message = status
                    .canonical_reason()
                    .unwrap_or("no explanation")
                    .to_lowercase();
            }
            ApiError::Api {
                status: status.as_u16(),
                code: format!("http_{}", status.as_u16()),
                message,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_keep_code_and_message() {
        let err = api_error(
            StatusCode::FORBIDDEN,
            r#"{"error": "insufficient_scope", "message": "admin scope required"}"#,
        );
        assert_eq!(err.to_string(), "insufficient_scope: admin scope required");
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
            client.url(&["api", "tokens", "a b/c"]).as_str(),
            "http://127.0.0.1:7655/api/tokens/a%20b%2Fc"
        );
        let prefixed = GatewayClient::new("https://pulse.example/base", "t".into()).unwrap();
        assert_eq!(
            prefixed.url(&["api", "tokens"]).as_str(),
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
        let err = client
            .json::<serde_json::Value>(Method::GET, &["api", "tokens"], None)
            .await
            .unwrap_err();
        assert!(matches!(err, ApiError::NotRunning { .. }), "{err:?}");
        assert!(err.to_string().contains("pulsectl up"), "{err}");
        assert_eq!(err.exit_code(), 1);
    }
}
