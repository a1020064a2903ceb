//! The Pulse API as the harness uses it: normal collection (`/api/resources`), a scoped Patrol
//! run, its record and findings, investigations, and governed-action decisions. Everything goes
//! through the public HTTP API with the operator's token, like any other client.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// Every call's bound.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

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

#[derive(Clone)]
pub struct PulseClient {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl PulseClient {
    pub fn new(base_url: &str, token: &str) -> Result<Self, ClientError> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| ClientError::Unreachable {
                url: base_url.to_owned(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            http,
            base: base_url.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
        })
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
        let url = format!("{}{path}", self.base);
        let mut request = self
            .http
            .request(method.clone(), &url)
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| ClientError::Unreachable {
            url: self.base.clone(),
            reason: e.to_string(),
        })?;
        let status = response.status();
        let text = response.text().await.map_err(|e| ClientError::Decode {
            method: method.to_string(),
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        let value: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).map_err(|e| ClientError::Decode {
                method: method.to_string(),
                path: path.to_owned(),
                reason: format!("{e} (status {status})"),
            })?
        };
        if !status.is_success() {
            return Err(ClientError::Refused {
                method: method.to_string(),
                path: path.to_owned(),
                status: status.as_u16(),
                code: value["error"].as_str().unwrap_or("unknown").to_owned(),
                message: value["message"].as_str().unwrap_or(&text).to_owned(),
            });
        }
        Ok(value)
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
    pub async fn request_scoped_run(&self, resource_ids: &[String]) -> Result<String, ClientError> {
        let accepted = self
            .call(
                Method::POST,
                "/api/ai/patrol/run",
                Some(&json!({"resource_ids": resource_ids})),
            )
            .await?;
        Ok(accepted["run_id"]
            .as_str()
            .or_else(|| accepted["id"].as_str())
            .unwrap_or_default()
            .to_owned())
    }

    /// Asks for a fresh Patrol preflight of the tenant's route now; the stored outcome.
    pub async fn preflight(&self) -> Result<Value, ClientError> {
        self.call(Method::POST, "/api/ai/patrol/preflight", None)
            .await
    }

    pub async fn patrol_run(&self, run_id: &str) -> Result<Value, ClientError> {
        self.get(&format!("/api/ai/patrol/runs/{run_id}")).await
    }

    pub async fn patrol_status(&self) -> Result<Value, ClientError> {
        self.get("/api/ai/patrol/status").await
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
