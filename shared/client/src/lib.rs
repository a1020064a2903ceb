//! The typed client of the HTTP API: one method per operation, taking the request types and
//! answering the answer types of `pulse-api`, so a client built on it stops compiling when a
//! field it reads changes, instead of failing at run time.
//!
//! Every request carries the bearer token; every error answer is decoded from the API's error
//! envelope into [`Error::Api`] with its stable code. Answers that are not the envelope (a proxy's
//! page, an empty body) are [`Error::Status`], and failures below HTTP are [`Error::Transport`].

use std::time::Duration;

use pulse_api::actions::{ActionView, AuditRecord, DecisionBody, PlanBody};
use pulse_api::agents::ForgottenAgent;
use pulse_api::audit::VerifyView;
use pulse_api::connections::{
    ConnectionBody, ConnectionCheck, ConnectionList, ConnectionView, GuestActionsBody,
};
use pulse_api::findings::{
    DismissBody, FindingAnswer, FindingList, FindingRef, ListQuery as FindingsQuery, NoteBody,
    ResolveBody, SnoozeBody, SuppressBody,
};
use pulse_api::models::{ModelCatalogue, ProviderTestAnswer, ProviderTestBody};
use pulse_api::patrol::{PreflightAnswer, RunAccepted, RunList};
use pulse_api::platform::{
    CreateTenantRequest, CreateUserRequest, CreatedTenant, CreatedUser, PlatformUserList,
    SuspendRequest, TenantErasure, TenantList, TenantRecord, TenantView,
};
use pulse_api::resources::{ListQuery as ResourcesQuery, ResourceList};
use pulse_api::settings::SettingsView;
use pulse_api::system::{ErrorEnvelope, HealthReport, Manifest};
use pulse_api::tokens::{CreateTokenRequest, CreatedToken, TokenList};
use pulse_capabilities::ErrorCode;
use pulse_domain::ai_settings::PatchBody;
use pulse_domain::patrol::run::{PatrolRun, RunId};
use pulse_domain::patrol::scope::RawRunRequest;
use pulse_domain::patrol::status::PatrolStatus;
use pulse_domain::resource::Resource;
use pulse_domain::tenant::TenantQuotas;
pub use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API refused the request with a code from the error-code table.
    #[error("{code}: {message}")]
    Api {
        status: u16,
        code: ErrorCode,
        message: String,
    },
    /// An error status whose body is not the API's error envelope (a proxy in front of the
    /// gateway, or a code this client does not know).
    #[error("http {status}: {body}")]
    Status { status: u16, body: String },
    /// Nothing listens at the base URL.
    #[error("connection to {url} refused")]
    ConnectionRefused { url: String },
    #[error("request to {url} failed: {source}")]
    Transport {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// A success answer that is not the documented shape.
    #[error("unexpected answer from {url}: {source}")]
    Decode {
        url: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("invalid base URL '{0}' (expected http:// or https:// and a host)")]
    BaseUrl(String),
    /// A query value that has no query-string form (a bug of the caller's type).
    #[error("cannot write the query: {0}")]
    Query(String),
}

impl Error {
    /// The HTTP status of an error answer; `None` when no answer came.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } | Error::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The stable code of a refusal in the API's error envelope; `None` for anything else.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Api { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// A client of one gateway, authenticated by one token.
#[derive(Debug, Clone)]
pub struct Client {
    base: Url,
    /// `None` for the public operations only (the capabilities manifest).
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    /// Requests time out after `REQUEST_TIMEOUT`; connecting after `CONNECT_TIMEOUT`.
    pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

    /// A client of the gateway at `base` (`http(s)://host[:port][/prefix]`).
    pub fn new(base: &str, token: impl Into<String>) -> Result<Self, Error> {
        // reqwest is built without a TLS back-end of its own: install ring for whoever
        // constructs a client (a binary's main may already have done it).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(Self::REQUEST_TIMEOUT)
            .connect_timeout(Self::CONNECT_TIMEOUT)
            .build()
            .map_err(|source| Error::Transport {
                url: base.to_owned(),
                source,
            })?;
        Self::with_http(base, Some(token.into()), http)
    }

    /// A client that sends through `http` (its own timeouts, default headers, TLS roots), with
    /// no token for the public operations only.
    pub fn with_http(
        base: &str,
        token: Option<String>,
        http: reqwest::Client,
    ) -> Result<Self, Error> {
        let base = Url::parse(base)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https") && url.has_host())
            .ok_or_else(|| Error::BaseUrl(base.to_owned()))?;
        Ok(Self { base, token, http })
    }

    /// The base URL requests are sent under.
    pub fn base(&self) -> &Url {
        &self.base
    }

    /// `segments` appended to the base URL's path, each percent-encoded.
    pub fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.set_query(None);
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// `GET /api/agent/capabilities`: the capabilities manifest (public).
    pub async fn capabilities(&self) -> Result<Manifest, Error> {
        self.call::<(), _>(Method::GET, &["api", "agent", "capabilities"], &[], None)
            .await
    }

    /// `GET /api/health`: the fleet's readiness (public).
    pub async fn health(&self) -> Result<HealthReport, Error> {
        self.get(&["api", "health"]).await
    }

    /// `GET /api/audit/verify`: the verification of the tenant's audit chain.
    pub async fn verify_audit(&self) -> Result<VerifyView, Error> {
        self.get(&["api", "audit", "verify"]).await
    }

    /// `GET /api/settings/ai`.
    pub async fn ai_settings(&self) -> Result<SettingsView, Error> {
        self.get(&["api", "settings", "ai"]).await
    }

    /// `PUT /api/settings/ai` with a merge patch (RFC 7396: `null` resets a field), for a patch
    /// that comes as JSON (a file, a command line); a patch built in code is a
    /// [`Client::patch_ai_settings`].
    pub async fn update_ai_settings(
        &self,
        patch: &serde_json::Value,
    ) -> Result<SettingsView, Error> {
        self.call(Method::PUT, &["api", "settings", "ai"], &[], Some(patch))
            .await
    }

    /// `PUT /api/settings/ai` with a typed patch: the fields it leaves `None` are unchanged.
    pub async fn patch_ai_settings(&self, patch: &PatchBody) -> Result<SettingsView, Error> {
        self.call(Method::PUT, &["api", "settings", "ai"], &[], Some(patch))
            .await
    }

    /// `GET /api/resources`.
    pub async fn resources(&self, query: &ResourcesQuery) -> Result<ResourceList, Error> {
        let query = query_pairs(query)?;
        self.call::<(), _>(Method::GET, &["api", "resources"], &pairs(&query), None)
            .await
    }

    /// `GET /api/resources/{id}`: any reference the resolver accepts.
    pub async fn resource(&self, reference: &str) -> Result<Resource, Error> {
        self.get(&["api", "resources", reference]).await
    }

    /// `POST /api/tokens`: the one answer that carries the secret.
    pub async fn create_token(&self, request: &CreateTokenRequest) -> Result<CreatedToken, Error> {
        self.post(&["api", "tokens"], request).await
    }

    /// `GET /api/tokens`.
    pub async fn tokens(&self) -> Result<TokenList, Error> {
        self.get(&["api", "tokens"]).await
    }

    /// `DELETE /api/tokens/{id}`.
    pub async fn revoke_token(&self, id: &str) -> Result<(), Error> {
        self.send::<()>(Method::DELETE, &["api", "tokens", id], &[], None)
            .await
            .map(drop)
    }

    /// `GET /api/connections`.
    pub async fn connections(&self) -> Result<ConnectionList, Error> {
        self.get(&["api", "connections"]).await
    }

    /// `POST /api/connections`: checks the connection, then stores it (its secret sealed).
    pub async fn add_connection(&self, body: &ConnectionBody) -> Result<ConnectionView, Error> {
        self.post(&["api", "connections"], body).await
    }

    /// `POST /api/connections/test`: checks a connection without storing it.
    pub async fn test_connection(&self, body: &ConnectionBody) -> Result<ConnectionCheck, Error> {
        self.post(&["api", "connections", "test"], body).await
    }

    /// `POST /api/connections/{id}/test`: checks a stored connection again.
    pub async fn retest_connection(&self, id: &str) -> Result<ConnectionCheck, Error> {
        self.call::<(), _>(Method::POST, &["api", "connections", id, "test"], &[], None)
            .await
    }

    /// `PUT /api/connections/{id}/guest-actions`: turns guest power actions on or off.
    pub async fn set_connection_guest_actions(
        &self,
        id: &str,
        enabled: bool,
    ) -> Result<ConnectionView, Error> {
        self.call(
            Method::PUT,
            &["api", "connections", id, "guest-actions"],
            &[],
            Some(&GuestActionsBody { enabled }),
        )
        .await
    }

    /// `DELETE /api/connections/{id}`.
    pub async fn delete_connection(&self, id: &str) -> Result<(), Error> {
        self.send::<()>(Method::DELETE, &["api", "connections", id], &[], None)
            .await
            .map(drop)
    }

    /// `DELETE /api/agents/{id}`: forgets a decommissioned host's agent and its resources.
    pub async fn forget_agent(&self, id: &str) -> Result<ForgottenAgent, Error> {
        self.call::<(), _>(Method::DELETE, &["api", "agents", id], &[], None)
            .await
    }

    /// `GET /api/ai/patrol/findings`.
    pub async fn findings(&self, query: &FindingsQuery) -> Result<FindingList, Error> {
        let query = query_pairs(query)?;
        let segments = ["api", "ai", "patrol", "findings"];
        self.call::<(), _>(Method::GET, &segments, &pairs(&query), None)
            .await
    }

    /// `GET /api/ai/patrol/findings/{id}`, with its newest investigation record.
    pub async fn finding(&self, id: &str) -> Result<FindingAnswer, Error> {
        self.get(&["api", "ai", "patrol", "findings", id]).await
    }

    /// `POST /api/ai/patrol/acknowledge`.
    pub async fn acknowledge_finding(&self, body: &FindingRef) -> Result<FindingAnswer, Error> {
        self.post(&["api", "ai", "patrol", "acknowledge"], body)
            .await
    }

    /// `POST /api/ai/patrol/snooze`.
    pub async fn snooze_finding(&self, body: &SnoozeBody) -> Result<FindingAnswer, Error> {
        self.post(&["api", "ai", "patrol", "snooze"], body).await
    }

    /// `POST /api/ai/patrol/dismiss`.
    pub async fn dismiss_finding(&self, body: &DismissBody) -> Result<FindingAnswer, Error> {
        self.post(&["api", "ai", "patrol", "dismiss"], body).await
    }

    /// `POST /api/ai/patrol/dismiss/undo`.
    pub async fn undo_dismiss_finding(&self, body: &FindingRef) -> Result<FindingAnswer, Error> {
        self.post(&["api", "ai", "patrol", "dismiss", "undo"], body)
            .await
    }

    /// `POST /api/ai/patrol/resolve`.
    pub async fn resolve_finding(&self, body: &ResolveBody) -> Result<FindingAnswer, Error> {
        self.post(&["api", "ai", "patrol", "resolve"], body).await
    }

    /// `POST /api/ai/patrol/suppress`.
    pub async fn suppress_finding(&self, body: &SuppressBody) -> Result<FindingAnswer, Error> {
        self.post(&["api", "ai", "patrol", "suppress"], body).await
    }

    /// `POST /api/ai/patrol/suppress/undo`.
    pub async fn undo_suppress_finding(&self, body: &FindingRef) -> Result<FindingAnswer, Error> {
        self.post(&["api", "ai", "patrol", "suppress", "undo"], body)
            .await
    }

    /// `POST /api/ai/patrol/findings/note`.
    pub async fn note_finding(&self, body: &NoteBody) -> Result<FindingAnswer, Error> {
        self.post(&["api", "ai", "patrol", "findings", "note"], body)
            .await
    }

    /// `POST /api/actions/plan`: the planned action, pending a human or already authorized.
    pub async fn plan_action(&self, body: &PlanBody) -> Result<ActionView, Error> {
        self.post(&["api", "actions", "plan"], body).await
    }

    /// `GET /api/actions/{id}`.
    pub async fn action(&self, id: &str) -> Result<ActionView, Error> {
        self.get(&["api", "actions", id]).await
    }

    /// `GET /api/actions[?limit=]` or, with `pending`, `GET /api/actions/pending[?limit=]`.
    pub async fn actions(
        &self,
        pending: bool,
        limit: Option<i64>,
    ) -> Result<Vec<ActionView>, Error> {
        let limit = limit.map(|limit| limit.to_string());
        let query: Vec<(&str, &str)> = limit.iter().map(|l| ("limit", l.as_str())).collect();
        let segments: &[&str] = if pending {
            &["api", "actions", "pending"]
        } else {
            &["api", "actions"]
        };
        self.call::<(), _>(Method::GET, segments, &query, None)
            .await
    }

    /// `POST /api/actions/{id}/decision`.
    pub async fn decide_action(&self, id: &str, body: &DecisionBody) -> Result<ActionView, Error> {
        self.post(&["api", "actions", id, "decision"], body).await
    }

    /// `GET /api/actions/{id}/audit`: the action's audit rows, oldest first.
    pub async fn action_audit(&self, id: &str) -> Result<Vec<AuditRecord>, Error> {
        self.get(&["api", "actions", id, "audit"]).await
    }

    /// `POST /api/platform/tenants`: the one answer that carries the new tenant's secrets.
    pub async fn create_tenant(
        &self,
        request: &CreateTenantRequest,
    ) -> Result<CreatedTenant, Error> {
        self.post(&["api", "platform", "tenants"], request).await
    }

    /// `GET /api/platform/tenants`.
    pub async fn tenants(&self) -> Result<TenantList, Error> {
        self.get(&["api", "platform", "tenants"]).await
    }

    /// `GET /api/platform/tenants/{id}`.
    pub async fn tenant(&self, id: &str) -> Result<TenantView, Error> {
        self.get(&["api", "platform", "tenants", id]).await
    }

    /// `POST /api/platform/tenants/{id}/suspend`.
    pub async fn suspend_tenant(
        &self,
        id: &str,
        request: &SuspendRequest,
    ) -> Result<TenantRecord, Error> {
        self.post(&["api", "platform", "tenants", id, "suspend"], request)
            .await
    }

    /// `POST /api/platform/tenants/{id}/resume`.
    pub async fn resume_tenant(&self, id: &str) -> Result<TenantRecord, Error> {
        let segments = ["api", "platform", "tenants", id, "resume"];
        self.call::<(), _>(Method::POST, &segments, &[], None).await
    }

    /// `DELETE /api/platform/tenants/{id}`: erases the tenant and everything it holds.
    pub async fn erase_tenant(&self, id: &str) -> Result<TenantErasure, Error> {
        let segments = ["api", "platform", "tenants", id];
        self.call::<(), _>(Method::DELETE, &segments, &[], None)
            .await
    }

    /// `GET /api/platform/tenants/{id}/quotas`.
    pub async fn tenant_quotas(&self, id: &str) -> Result<TenantQuotas, Error> {
        self.get(&["api", "platform", "tenants", id, "quotas"])
            .await
    }

    /// `PUT /api/platform/tenants/{id}/quotas`.
    pub async fn set_tenant_quotas(
        &self,
        id: &str,
        quotas: &TenantQuotas,
    ) -> Result<TenantQuotas, Error> {
        let segments = ["api", "platform", "tenants", id, "quotas"];
        self.call(Method::PUT, &segments, &[], Some(quotas)).await
    }

    /// `GET /api/platform/tenants/{id}/users`.
    pub async fn tenant_users(&self, id: &str) -> Result<PlatformUserList, Error> {
        self.get(&["api", "platform", "tenants", id, "users"]).await
    }

    /// `POST /api/platform/tenants/{id}/users`: the one answer that carries the password.
    pub async fn create_tenant_user(
        &self,
        id: &str,
        request: &CreateUserRequest,
    ) -> Result<CreatedUser, Error> {
        self.post(&["api", "platform", "tenants", id, "users"], request)
            .await
    }

    /// `POST /api/ai/patrol/preflight`: a fresh preflight of the tenant's Patrol route.
    pub async fn patrol_preflight(&self) -> Result<PreflightAnswer, Error> {
        let segments = ["api", "ai", "patrol", "preflight"];
        self.call::<(), _>(Method::POST, &segments, &[], None).await
    }

    /// `GET /api/ai/models`: each provider the tenant uses with the models it lists, or its
    /// classified error.
    pub async fn ai_models(&self) -> Result<ModelCatalogue, Error> {
        self.get(&["api", "ai", "models"]).await
    }

    /// `POST /api/ai/test/{provider}`: the preflight's model turn on `provider` and `model`;
    /// nothing is saved.
    pub async fn test_provider(
        &self,
        provider: &str,
        model: &str,
    ) -> Result<ProviderTestAnswer, Error> {
        let body = ProviderTestBody {
            model: model.to_owned(),
        };
        self.post(&["api", "ai", "test", provider], &body).await
    }

    /// `POST /api/ai/patrol/run`: a full run for the default request, else a scoped one.
    pub async fn run_patrol(&self, request: &RawRunRequest) -> Result<RunAccepted, Error> {
        let body = (request != &RawRunRequest::default()).then_some(request);
        self.call(Method::POST, &["api", "ai", "patrol", "run"], &[], body)
            .await
    }

    /// `GET /api/ai/patrol/status`.
    pub async fn patrol_status(&self) -> Result<PatrolStatus, Error> {
        self.call::<(), _>(Method::GET, &["api", "ai", "patrol", "status"], &[], None)
            .await
    }

    /// `GET /api/ai/patrol/runs[?limit=]`, newest first.
    pub async fn patrol_runs(&self, limit: Option<u32>) -> Result<RunList, Error> {
        let limit = limit.map(|limit| limit.to_string());
        let query: Vec<(&str, &str)> = limit.iter().map(|l| ("limit", l.as_str())).collect();
        self.call::<(), _>(Method::GET, &["api", "ai", "patrol", "runs"], &query, None)
            .await
    }

    /// `GET /api/ai/patrol/runs/{id}`. The id is a text so that a malformed one reaches the API
    /// and is refused with its code, as any other caller's would be.
    pub async fn patrol_run(&self, id: &str) -> Result<PatrolRun, Error> {
        self.call::<(), _>(Method::GET, &["api", "ai", "patrol", "runs", id], &[], None)
            .await
    }

    /// [`Client::patrol_run`] for an id the API gave.
    pub async fn patrol_run_by_id(&self, id: RunId) -> Result<PatrolRun, Error> {
        self.patrol_run(&id.to_string()).await
    }

    /// Sends `body` to the operation at `segments` with `query` and answers the success body as
    /// it came.
    /// For callers that dispatch operations by name (an operation listed in the capabilities
    /// manifest) and so cannot name its types; a fixed operation has its own typed method.
    pub async fn send_untyped(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, &str)],
        body: Option<&serde_json::Value>,
    ) -> Result<Vec<u8>, Error> {
        self.send(method, segments, query, body).await
    }

    async fn get<T: DeserializeOwned>(&self, segments: &[&str]) -> Result<T, Error> {
        self.call::<(), _>(Method::GET, segments, &[], None).await
    }

    async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        segments: &[&str],
        body: &B,
    ) -> Result<T, Error> {
        self.call(Method::POST, segments, &[], Some(body)).await
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, &str)],
        body: Option<&B>,
    ) -> Result<T, Error> {
        let bytes = self.send(method, segments, query, body).await?;
        serde_json::from_slice(&bytes).map_err(|source| Error::Decode {
            url: self.url(segments).to_string(),
            source,
        })
    }

    /// Sends a request; a success status yields the body, anything else an [`Error`].
    async fn send<B: Serialize>(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, &str)],
        body: Option<&B>,
    ) -> Result<Vec<u8>, Error> {
        let mut url = self.url(segments);
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        let mut request = self.http.request(method, url.clone());
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let transport = |source: reqwest::Error| transport_error(&self.base, &url, source);
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(transport)?;
        if status.is_success() {
            return Ok(bytes.to_vec());
        }
        Err(error_answer(status, &bytes))
    }
}

/// A query type as `name=value` pairs (what it serializes to as a query string).
fn query_pairs<Q: Serialize>(query: &Q) -> Result<Vec<(String, String)>, Error> {
    let text = serde_urlencoded::to_string(query).map_err(|err| Error::Query(err.to_string()))?;
    Ok(serde_urlencoded::from_str(&text).unwrap_or_default())
}

fn pairs(owned: &[(String, String)]) -> Vec<(&str, &str)> {
    owned
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

fn transport_error(base: &Url, url: &Url, source: reqwest::Error) -> Error {
    if is_connection_refused(&source) {
        let mut base = base.to_string();
        if base.ends_with('/') {
            base.pop();
        }
        return Error::ConnectionRefused { url: base };
    }
    Error::Transport {
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

/// The error envelope of an error answer, or the status and (the start of) its body.
pub fn error_answer(status: StatusCode, body: &[u8]) -> Error {
    match serde_json::from_slice::<ErrorEnvelope>(body) {
        Ok(envelope) => Error::Api {
            status: status.as_u16(),
            code: envelope.error,
            message: envelope.message,
        },
        Err(_) => Error::Status {
            status: status.as_u16(),
            body: String::from_utf8_lossy(body)
                .trim()
                .chars()
                .take(200)
                .collect(),
        },
    }
}

#[cfg(test)]
mod tests;
