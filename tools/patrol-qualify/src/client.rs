//! The Pulse API as the harness uses it: normal collection (`/api/resources`), a scoped Patrol
//! run, its record and findings, investigations, and governed-action decisions. Everything goes
//! through the public HTTP API with the operator's token, like any other client.

use pulse_api::actions::{ActionView, DecisionBody, DecisionOutcome};
use pulse_api::findings::FindingAnswer;
use pulse_api::patrol::PreflightAnswer;
use pulse_api::resources::ListQuery as ResourcesQuery;
use pulse_api::settings::SettingsView;
use pulse_api::tokens::{CreateTokenRequest, RequestedScope};
use pulse_client::{Method, StatusCode};
use pulse_domain::Scope;
use pulse_domain::patrol::run::{PatrolRun, RunId};
use pulse_domain::patrol::scope::RawRunRequest;
use pulse_domain::patrol::status::PatrolStatus;
use pulse_domain::resource::Resource;
use serde_json::Value;

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

/// The typed API client, with errors that name the call.
#[derive(Clone)]
pub struct PulseClient {
    api: pulse_client::Client,
    base: String,
}

/// What an error of `method path` becomes.
fn refused(method: Method, path: &str) -> impl FnOnce(pulse_client::Error) -> ClientError + '_ {
    move |e| ClientError::from_api(&method, path, e)
}

/// A removal's result, where the thing being gone already is fine (404).
fn gone_is_fine<T>(result: Result<T, ClientError>) -> Result<(), ClientError> {
    match result {
        Ok(_) => Ok(()),
        Err(ClientError::Refused { status, .. }) if status == StatusCode::NOT_FOUND.as_u16() => {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

impl PulseClient {
    pub fn new(base_url: &str, token: &str) -> Result<Self, ClientError> {
        let base = base_url.trim_end_matches('/').to_owned();
        let api = pulse_client::Client::new(&base, token).map_err(refused(Method::GET, "/"))?;
        Ok(Self { api, base })
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// The version identity the running Pulse reports (its API document's `info.version`).
    /// The document is JSON Schema text of its own, read as a JSON document.
    pub async fn version(&self) -> Result<String, ClientError> {
        let path = "/api/openapi.json";
        let bytes = self
            .api
            .send_untyped(Method::GET, &["api", "openapi.json"], &[], None)
            .await
            .map_err(refused(Method::GET, path))?;
        let doc: Value = serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode {
            method: Method::GET.to_string(),
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(doc["info"]["version"]
            .as_str()
            .unwrap_or("unknown")
            .to_owned())
    }

    /// The types of the alerts firing on `resource_id` (`GET /api/alerts`).
    pub async fn firing_alerts(&self, resource_id: &str) -> Result<Vec<String>, ClientError> {
        let path = "/api/alerts";
        let bytes = self
            .api
            .send_untyped(
                Method::GET,
                &["api", "alerts"],
                &[("state", "firing"), ("resource_id", resource_id)],
                None,
            )
            .await
            .map_err(refused(Method::GET, path))?;
        let listed: Value = serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode {
            method: Method::GET.to_string(),
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(listed["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["type"].as_str().map(str::to_owned))
            .collect())
    }

    /// `GET /api/health`: whether every service is ready.
    pub async fn ready(&self) -> Result<bool, ClientError> {
        let health = self
            .api
            .health()
            .await
            .map_err(refused(Method::GET, "/api/health"))?;
        Ok(health.status == "ok")
    }

    /// Every resource Pulse collected, as the API lists them.
    pub async fn resources(&self) -> Result<Vec<Resource>, ClientError> {
        self.api
            .resources(&ResourcesQuery::default())
            .await
            .map(|listed| listed.resources)
            .map_err(refused(Method::GET, "/api/resources"))
    }

    /// A token for the lab's collecting agent (shown once): its id and secret.
    pub async fn create_agent_token(
        &self,
        name: &str,
        exec: bool,
    ) -> Result<(String, String), ClientError> {
        let mut scopes = vec![RequestedScope::Tenant(Scope::AgentReport)];
        if exec {
            scopes.push(RequestedScope::Tenant(Scope::AgentExec));
        }
        let request = CreateTokenRequest {
            name: name.to_owned(),
            scopes,
            expires_at: None,
        };
        let created = self
            .api
            .create_token(&request)
            .await
            .map_err(refused(Method::POST, "/api/tokens"))?;
        Ok((created.id.to_string(), created.token))
    }

    /// Revokes a token; a token already gone is fine.
    pub async fn revoke_token(&self, id: &str) -> Result<(), ClientError> {
        let path = format!("/api/tokens/{id}");
        gone_is_fine(
            self.api
                .revoke_token(id)
                .await
                .map_err(refused(Method::DELETE, &path)),
        )
    }

    /// Adds the Proxmox lab's cluster as a connection (read every 10 s); its id.
    pub async fn add_connection(
        &self,
        wiring: &crate::lab::proxmox::ConnectionWiring,
    ) -> Result<String, ClientError> {
        let body = pulse_api::connections::ConnectionBody {
            kind: pulse_domain::connection::ConnectionKind::ProxmoxVe,
            name: Some(wiring.name.clone()),
            url: wiring.url.clone(),
            token_id: wiring.token_id.clone(),
            token_secret: wiring.token_secret.clone(),
            fingerprint: Some(wiring.fingerprint.clone()),
            ca_pem: None,
            public_ca: false,
            cadence_seconds: Some(pulse_api::connections::MIN_CADENCE_SECONDS),
            guest_actions: false,
        };
        self.api
            .add_connection(&body)
            .await
            .map(|c| c.id.to_string())
            .map_err(refused(Method::POST, "/api/connections"))
    }

    /// Removes a connection; one already gone is fine.
    pub async fn delete_connection(&self, id: &str) -> Result<(), ClientError> {
        let path = format!("/api/connections/{id}");
        gone_is_fine(
            self.api
                .delete_connection(id)
                .await
                .map_err(refused(Method::DELETE, &path)),
        )
    }

    /// Forgets the lab's agent and its resources once the lab is torn down, so they neither
    /// linger in the inventory (every later full run would read them) nor go offline (an
    /// `agent_offline` alert and its Patrol run). An agent Pulse never saw is nothing to forget.
    pub async fn forget_agent(&self, id: &str) -> Result<(), ClientError> {
        let path = format!("/api/agents/{id}");
        gone_is_fine(
            self.api
                .forget_agent(id)
                .await
                .map_err(refused(Method::DELETE, &path)),
        )
    }

    pub async fn ai_settings(&self) -> Result<SettingsView, ClientError> {
        self.api
            .ai_settings()
            .await
            .map_err(refused(Method::GET, "/api/settings/ai"))
    }

    /// Applies a merge patch to the AI settings.
    pub async fn update_ai_settings(&self, patch: &Value) -> Result<SettingsView, ClientError> {
        self.api
            .update_ai_settings(patch)
            .await
            .map_err(refused(Method::PUT, "/api/settings/ai"))
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
            .map_err(refused(Method::POST, "/api/ai/patrol/run"))
    }

    /// Asks for a fresh Patrol preflight of the tenant's route now; the stored outcome.
    pub async fn preflight(&self) -> Result<PreflightAnswer, ClientError> {
        self.api
            .patrol_preflight()
            .await
            .map_err(refused(Method::POST, "/api/ai/patrol/preflight"))
    }

    /// The tenant's Patrol status: whether a run is in progress and how many scoped runs wait.
    pub async fn patrol_status(&self) -> Result<PatrolStatus, ClientError> {
        self.api
            .patrol_status()
            .await
            .map_err(refused(Method::GET, "/api/ai/patrol/status"))
    }

    pub async fn patrol_run(&self, run_id: RunId) -> Result<PatrolRun, ClientError> {
        let path = format!("/api/ai/patrol/runs/{run_id}");
        self.api
            .patrol_run_by_id(run_id)
            .await
            .map_err(refused(Method::GET, &path))
    }

    pub async fn finding(&self, id: &str) -> Result<FindingAnswer, ClientError> {
        let path = format!("/api/ai/patrol/findings/{id}");
        self.api
            .finding(id)
            .await
            .map_err(refused(Method::GET, &path))
    }

    pub async fn action(&self, id: &str) -> Result<ActionView, ClientError> {
        let path = format!("/api/actions/{id}");
        self.api
            .action(id)
            .await
            .map_err(refused(Method::GET, &path))
    }

    /// Records a human decision on an action.
    pub async fn decide(
        &self,
        id: &str,
        outcome: DecisionOutcome,
        reason: &str,
    ) -> Result<ActionView, ClientError> {
        let path = format!("/api/actions/{id}/decision");
        let body = DecisionBody {
            outcome,
            reason: reason.to_owned(),
        };
        self.api
            .decide_action(id, &body)
            .await
            .map_err(refused(Method::POST, &path))
    }
}
