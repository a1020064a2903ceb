//! The Pulse API as the harness uses it: normal collection (`/api/resources`), a scoped Patrol
//! run, its record and findings, investigations, and governed-action decisions. Everything goes
//! through the public HTTP API with the operator's token, like any other client.

use pulse_client::{Method, StatusCode};
use pulse_domain::patrol::run::{PatrolRun, RunId};
use pulse_domain::patrol::scope::RawRunRequest;
use serde_json::{Value, json};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("pulse at {url} did not answer: {reason}")]
    Unreachable { url: String, reason: String },
    /// Pulse refused the request with its stable error code.
    #[error("{method} {path} answered {status} {code}: {message}")]
    Refused {
        method: String,
        path: String,
        status: u16,
        code: String,
        message: String,
    },
    #[error("{method} {path}: unreadable answer: {reason}")]
    Decode {
        method: String,
        path: String,
        reason: String,
    },
}

impl ClientError {
    /// The API's error code, when Pulse answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Refused { code, .. } => Some(code),
            _ => None,
        }
    }
}

impl ClientError {
    fn from_api(method: &Method, path: &str, err: pulse_client::Error) -> Self {
        let (method, path) = (method.to_string(), path.to_owned());
        match err {
            pulse_client::Error::Api {
                status,
                code,
                message,
            } => Self::Refused {
                method,
                path,
                status,
                code: code.code().to_owned(),
                message,
            },
            pulse_client::Error::Status { status, body } => Self::Refused {
                method,
                path,
                status,
                code: "unknown".to_owned(),
                message: body,
            },
            pulse_client::Error::Decode { source, .. } => Self::Decode {
                method,
                path,
                reason: source.to_string(),
            },
            pulse_client::Error::ConnectionRefused { url } => Self::Unreachable {
                url,
                reason: "connection refused".to_owned(),
            },
            pulse_client::Error::Transport { url, source } => Self::Unreachable {
                url,
                reason: source.to_string(),
            },
            pulse_client::Error::BaseUrl(url) => Self::Unreachable {
                reason: "not an http(s) URL".to_owned(),
                url,
            },
            pulse_client::Error::Query(reason) => Self::Decode {
                method,
                path,
                reason,
            },
        }
    }
}

/// The typed API client, plus the calls the harness reads as JSON documents.
#[derive(Clone)]
pub struct PulseClient {
    api: pulse_client::Client,
    base: String,
}

impl PulseClient {
    pub fn new(base_url: &str, token: &str) -> Result<Self, ClientError> {
        let base = base_url.trim_end_matches('/').to_owned();
        let api = pulse_client::Client::new(&base, token)
            .map_err(|e| ClientError::from_api(&Method::GET, "/", e))?;
        Ok(Self { api, base })
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// One JSON call; a non-2xx answer is [`ClientError::Refused`] with the API's code.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let bytes = self
            .api
            .send_untyped(method.clone(), &segments, &[], body)
            .await
            .map_err(|e| ClientError::from_api(&method, path, e))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode {
            method: method.to_string(),
            path: path.to_owned(),
            reason: e.to_string(),
        })
    }

    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.call(Method::GET, path, None).await
    }

    /// The version identity the running Pulse reports (its API document's `info.version`).
    pub async fn version(&self) -> Result<String, ClientError> {
        let doc = self.get("/api/openapi.json").await?;
        Ok(doc["info"]["version"]
            .as_str()
            .unwrap_or("unknown")
            .to_owned())
    }

    /// `GET /api/health`: whether every service is ready.
    pub async fn ready(&self) -> Result<bool, ClientError> {
        let health = self.get("/api/health").await?;
        Ok(health["status"] == "ok" || health["status"] == "ready")
    }

    /// Every resource Pulse collected, as the API lists them.
    pub async fn resources(&self) -> Result<Vec<Value>, ClientError> {
        let listed = self.get("/api/resources").await?;
        Ok(listed["resources"]
            .as_array()
            .or_else(|| listed.as_array())
            .cloned()
            .unwrap_or_default())
    }

    /// A token for the lab's collecting agent (shown once).
    pub async fn create_agent_token(
        &self,
        name: &str,
        exec: bool,
    ) -> Result<(String, String), ClientError> {
        let mut scopes = vec!["agent:report"];
        if exec {
            scopes.push("agent:exec");
        }
        let created = self
            .call(
                Method::POST,
                "/api/tokens",
                Some(&json!({"name": name, "scopes": scopes})),
            )
            .await?;
        let id = created["id"].as_str().unwrap_or_default().to_owned();
        let token = created["token"].as_str().unwrap_or_default().to_owned();
        Ok((id, token))
    }

    /// Revokes a token; a token already gone is fine.
    pub async fn revoke_token(&self, id: &str) -> Result<(), ClientError> {
        match self
            .call(Method::DELETE, &format!("/api/tokens/{id}"), None)
            .await
        {
            Ok(_) => Ok(()),
            Err(ClientError::Refused { status, .. })
                if status == StatusCode::NOT_FOUND.as_u16() =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    pub async fn ai_settings(&self) -> Result<Value, ClientError> {
        self.get("/api/settings/ai").await
    }

    pub async fn update_ai_settings(&self, patch: &Value) -> Result<Value, ClientError> {
        self.call(Method::PUT, "/api/settings/ai", Some(patch))
            .await
    }

    /// Requests a scoped Patrol run; the accepted run id.
    pub async fn request_scoped_run(&self, resource_ids: &[String]) -> Result<RunId, ClientError> {
        let request = RawRunRequest {
            resource_ids: Some(resource_ids.to_vec()),
            ..RawRunRequest::default()
        };
        self.api
            .run_patrol(&request)
            .await
            .map(|accepted| accepted.accepted.run_id)
            .map_err(|e| ClientError::from_api(&Method::POST, "/api/ai/patrol/run", e))
    }

    /// Asks for a fresh Patrol preflight of the tenant's route now; the stored outcome.
    pub async fn preflight(&self) -> Result<Value, ClientError> {
        self.call(Method::POST, "/api/ai/patrol/preflight", None)
            .await
    }

    pub async fn patrol_run(&self, run_id: RunId) -> Result<PatrolRun, ClientError> {
        self.api.patrol_run_by_id(run_id).await.map_err(|e| {
            ClientError::from_api(&Method::GET, &format!("/api/ai/patrol/runs/{run_id}"), e)
        })
    }

    pub async fn finding(&self, id: &str) -> Result<Value, ClientError> {
        self.get(&format!("/api/ai/patrol/findings/{id}")).await
    }

    pub async fn action(&self, id: &str) -> Result<Value, ClientError> {
        self.get(&format!("/api/actions/{id}")).await
    }

    /// Records a human decision (`approved` or `rejected`) on an action.
    pub async fn decide(
        &self,
        id: &str,
        outcome: &str,
        reason: &str,
    ) -> Result<Value, ClientError> {
        self.call(
            Method::POST,
            &format!("/api/actions/{id}/decision"),
            Some(&json!({"outcome": outcome, "reason": reason})),
        )
        .await
    }
}
