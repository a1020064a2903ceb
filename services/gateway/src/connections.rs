//! Platform connections (ADR 0013): a Proxmox VE cluster or a Proxmox Backup Server Pulse reads
//! through its API with an API token.
//!
//! - `POST /api/connections/test` (`admin`): checks a connection without storing anything and
//!   answers what the check found (a failure is a state with a code and a cause, and the
//!   fingerprint the server presented).
//! - `POST /api/connections` (`admin`): checks, then stores. A check that fails (unreachable,
//!   certificate, token, privileges) is refused with its own error code and what to fix, so a
//!   mistyped token is never stored; a cluster without quorum is stored, in `no_quorum`.
//! - `GET /api/connections`, `GET /api/connections/{id}` (`monitoring:read`).
//! - `POST /api/connections/{id}/test` (`admin`): checks a stored connection again and records
//!   its state.
//! - `DELETE /api/connections/{id}` (`admin`): removes it and its sealed secret.
//! - `PUT /api/connections/{id}/guest-actions` (`admin`): turns guest power actions on or off
//!   (`guest_actions`, also settable when adding). Off, the broker's catalogue offers no guest
//!   capability for the connection's guests and its connector refuses any command.
//!
//! The token secret is sealed at rest with the master key and appears in no answer, log line or
//! audit record. The one client implementation is `pulse-proxmox`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing;
use chrono::Utc;
use pulse_api::connections::{
    ClusterCheck, ConnectionBody, ConnectionCheck, ConnectionId, ConnectionList, ConnectionView,
    DEFAULT_CADENCE_SECONDS, GuestActionsBody, MAX_CA_PEM_BYTES, MAX_CADENCE_SECONDS,
    MAX_NAME_CHARS, MIN_CADENCE_SECONDS, NodeCheck, TlsModeView,
};
use pulse_api::system::{ActionMode, ApprovalPolicy, Category};
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use pulse_domain::connection::{ConnectionKind, ConnectionState, Fingerprint, TokenId};
use pulse_proxmox::{Client, Probe, Secret, Timeouts, TlsMode};
use pulse_store::connections::{
    self as store, Connection, ConnectionStoreError, MAX_CONNECTIONS_PER_TENANT, NewConnection,
    Observation, StoredTls,
};

use crate::actions::actor;
use crate::authorized::{AdminScope, Authorized, MonitoringReadScope};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, PathParam};
use crate::route::{Answer, Body, RouteSpec, schema};
use crate::state::AppState;

/// How long a check may take: connecting, then each request.
const CHECK_TIMEOUTS: Timeouts = Timeouts {
    connect: std::time::Duration::from_secs(5),
    request: std::time::Duration::from_secs(10),
};

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message)
}

/// A body checked: what to build the client from and what to store.
struct Checked {
    kind: ConnectionKind,
    name: String,
    url: String,
    token_id: TokenId,
    secret: Secret,
    tls: TlsMode,
    stored_tls: StoredTls,
    cadence: std::time::Duration,
    guest_actions: bool,
}

/// A name from the URL's host: lower case, other characters as '-', cut to fit.
fn name_from_host(url: &reqwest::Url) -> String {
    let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
    let mapped: String = host
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let trimmed: String = mapped
        .trim_matches('-')
        .chars()
        .take(MAX_NAME_CHARS)
        .collect();
    let trimmed = trimmed.trim_end_matches('-').to_owned();
    if trimmed.is_empty() {
        "cluster".to_owned()
    } else {
        trimmed
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.len() <= MAX_NAME_CHARS
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn check_body(body: ConnectionBody) -> Result<Checked, ApiError> {
    if body.kind == ConnectionKind::ProxmoxBackup && body.guest_actions {
        return Err(invalid(
            "guest_actions: a Proxmox Backup Server has no guests; leave guest_actions off",
        ));
    }
    let base =
        pulse_proxmox::api_base(body.kind, &body.url).map_err(|e| invalid(format!("url: {e}")))?;
    let name = match body.name {
        Some(name) if valid_name(&name) => name,
        Some(name) => {
            return Err(invalid(format!(
                "name {:?}: lower-case letters, digits and '-', at most {MAX_NAME_CHARS}, \
                 starting with a letter or digit",
                name.chars().take(80).collect::<String>()
            )));
        }
        None => name_from_host(&base),
    };
    let cadence = body.cadence_seconds.unwrap_or(DEFAULT_CADENCE_SECONDS);
    if !(MIN_CADENCE_SECONDS..=MAX_CADENCE_SECONDS).contains(&cadence) {
        return Err(invalid(format!(
            "cadence_seconds {cadence}: between {MIN_CADENCE_SECONDS} and \
             {MAX_CADENCE_SECONDS}; a Proxmox API read every few seconds costs the cluster more \
             than it tells"
        )));
    }
    let token_id = TokenId::parse(&body.token_id).map_err(|e| invalid(format!("token_id: {e}")))?;
    let secret =
        Secret::new(body.token_secret).map_err(|e| invalid(format!("token_secret: {e}")))?;
    let (tls, stored_tls) = match (body.fingerprint, body.ca_pem, body.public_ca) {
        (Some(fp), None, false) => {
            let fp = Fingerprint::parse(&fp).map_err(|e| invalid(format!("fingerprint: {e}")))?;
            (TlsMode::Pinned(fp), StoredTls::Pinned(fp))
        }
        (None, Some(pem), false) => {
            if pem.len() > MAX_CA_PEM_BYTES {
                return Err(invalid(format!(
                    "ca_pem: larger than {MAX_CA_PEM_BYTES} bytes; give only the CA's certificates"
                )));
            }
            let mode =
                TlsMode::ca_pem(pem.as_bytes()).map_err(|e| invalid(format!("ca_pem: {e}")))?;
            (mode, StoredTls::Ca(pem))
        }
        (None, None, true) => (TlsMode::Public, StoredTls::Public),
        _ => {
            return Err(invalid(
                "say how the server's certificate is trusted, with exactly one of: \
                 fingerprint (its SHA-256, for Proxmox's own self-signed certificate), ca_pem \
                 (the CA that signed it) or public_ca: true (a publicly signed certificate); \
                 verification cannot be turned off",
            ));
        }
    };
    Ok(Checked {
        kind: body.kind,
        name,
        url: base.to_string(),
        token_id,
        secret,
        tls,
        stored_tls,
        cadence: std::time::Duration::from_secs(u64::from(cadence)),
        guest_actions: body.guest_actions,
    })
}

fn client(checked: &Checked) -> Result<Client, ApiError> {
    Client::new(
        checked.kind,
        &checked.url,
        &checked.token_id,
        &checked.secret,
        &checked.tls,
        CHECK_TIMEOUTS,
    )
    .map_err(|e| ApiError::new(e.code(), e.to_string()))
}

fn observation(probe: &Probe) -> Observation {
    Observation {
        state: probe.state,
        code: probe.code.map(|c| c.code().to_owned()),
        cause: probe.cause.clone(),
        presented: probe.presented,
        version: probe.version.clone(),
        at: Utc::now(),
    }
}

fn check_view(probe: Probe, at: chrono::DateTime<Utc>) -> ConnectionCheck {
    ConnectionCheck {
        state: probe.state,
        code: probe.code.map(|c| c.code().to_owned()),
        cause: probe.cause,
        presented_fingerprint: probe.presented.map(|f| f.to_string()),
        version: probe.version,
        cluster: probe.cluster.map(|c| ClusterCheck {
            name: c.cluster_name,
            quorate: c.quorate,
            nodes: c
                .members
                .into_iter()
                .map(|m| NodeCheck {
                    name: m.name,
                    online: m.online,
                })
                .collect(),
        }),
        checked_at: at,
    }
}

pub(crate) fn view(c: Connection) -> ConnectionView {
    let agent_id = c.agent_id();
    let (tls_mode, fingerprint) = match &c.tls {
        StoredTls::Pinned(fp) => (TlsModeView::Pinned, Some(fp.to_string())),
        StoredTls::Ca(_) => (TlsModeView::Ca, None),
        StoredTls::Public => (TlsModeView::Public, None),
    };
    ConnectionView {
        id: ConnectionId(c.id),
        kind: c.kind,
        name: c.name,
        agent_id,
        url: c.url,
        token_id: c.token_id.to_string(),
        tls_mode,
        fingerprint,
        state: c.state,
        state_code: c.state_code,
        state_cause: c.state_cause,
        presented_fingerprint: c.presented_fingerprint.map(|f| f.to_string()),
        version: c.version,
        checked_at: c.checked_at,
        created_by: c.created_by,
        created_at: c.created_at,
        updated_at: c.updated_at,
        cadence_seconds: u32::try_from(c.cadence.as_secs()).unwrap_or(u32::MAX),
        guest_actions: c.guest_actions,
    }
}

fn store_error(e: ConnectionStoreError) -> ApiError {
    match e {
        ConnectionStoreError::NameTaken { kind, name } => ApiError::new(
            ErrorCode::Conflict,
            format!(
                "a {kind} connection named {name:?} already exists; give another name, or \
                 DELETE /api/connections/{{id}} first"
            ),
        ),
        ConnectionStoreError::Sealing { id, reason } => {
            tracing::error!(%id, reason, "a connection's secret cannot be opened");
            ApiError::new(
                ErrorCode::InternalError,
                "the connection's token secret cannot be opened (was the master key changed?); \
                 delete the connection and add it again",
            )
        }
        ConnectionStoreError::Store(e) => e.into(),
    }
}

impl PathParam for ConnectionId {
    fn from_segment(raw: String) -> Result<Self, ApiError> {
        raw.parse().map_err(|_| {
            ApiError::new(
                ErrorCode::InvalidParameter,
                format!(
                    "{:?} is not a connection id (a UUID; GET /api/connections lists them)",
                    raw.chars().take(80).collect::<String>()
                ),
            )
        })
    }
}

fn not_found(id: ConnectionId) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("no connection {id} in this organization (GET /api/connections lists them)"),
    )
}

pub async fn test(
    _auth: Authorized<AdminScope>,
    ApiJson(body, _): ApiJson<ConnectionBody>,
) -> Result<Json<ConnectionCheck>, ApiError> {
    let checked = check_body(body)?;
    let probe = client(&checked)?.probe().await;
    Ok(Json(check_view(probe, Utc::now())))
}

pub async fn create(
    State(state): State<AppState>,
    auth: Authorized<AdminScope>,
    ApiJson(body, _): ApiJson<ConnectionBody>,
) -> Result<impl IntoResponse, ApiError> {
    let created = add(&state, &auth, body).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// Checks, then stores: what `POST /api/connections` and the Settings page do.
pub(crate) async fn add(
    state: &AppState,
    auth: &Authorized<AdminScope>,
    body: ConnectionBody,
) -> Result<ConnectionView, ApiError> {
    let checked = check_body(body)?;
    let tenant = auth.principal.tenant.clone();
    {
        let tx = state.store.tenant_tx(&tenant).await?;
        let held = store::count(&tx).await?;
        tx.rollback().await?;
        if held >= MAX_CONNECTIONS_PER_TENANT {
            return Err(ApiError::new(
                ErrorCode::QuotaExceeded,
                format!(
                    "this organization holds {held} connections, the most it may \
                     ({MAX_CONNECTIONS_PER_TENANT}); delete one first"
                ),
            ));
        }
    }
    // The check runs with no transaction open: it waits on the network.
    let probe = client(&checked)?.probe().await;
    if !matches!(
        probe.state,
        ConnectionState::Connected | ConnectionState::NoQuorum
    ) {
        let code = probe.code.unwrap_or(ErrorCode::ConnectionUnreachable);
        let mut message = probe
            .cause
            .clone()
            .unwrap_or_else(|| "the connection check failed".to_owned());
        if let (ConnectionState::TlsMismatch, Some(presented)) = (probe.state, probe.presented) {
            message.push_str(&format!(" (presented fingerprint: {presented})"));
        }
        tracing::info!(kind = %checked.kind, name = checked.name, state = %probe.state, "connection refused by its check");
        return Err(ApiError::new(
            code,
            format!("{message}; nothing was stored"),
        ));
    }
    let actor = actor(&auth.principal);
    let new = NewConnection {
        kind: checked.kind,
        name: checked.name.clone(),
        url: checked.url.clone(),
        token_id: checked.token_id.clone(),
        secret: checked.secret.expose().to_owned(),
        tls: checked.stored_tls.clone(),
        cadence: checked.cadence,
        guest_actions: checked.guest_actions,
        observed: observation(&probe),
    };
    let tx = state.store.tenant_tx(&tenant).await?;
    let stored = store::insert(&tx, &state.settings.master_key, &new, &actor)
        .await
        .map_err(store_error)?;
    tx.commit().await?;
    tracing::info!(id = %stored.id, kind = %stored.kind, name = stored.name, state = %stored.state, actor, "connection added");
    Ok(view(stored))
}

pub async fn list(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
) -> Result<Json<ConnectionList>, ApiError> {
    listed(&state, &auth).await.map(Json)
}

/// The tenant's connections: what `GET /api/connections` and the Settings page show.
pub(crate) async fn listed(
    state: &AppState,
    auth: &Authorized<MonitoringReadScope>,
) -> Result<ConnectionList, ApiError> {
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let connections = store::list(&tx).await?;
    tx.rollback().await?;
    Ok(ConnectionList {
        connections: connections.into_iter().map(view).collect(),
    })
}

pub async fn get(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    ApiPath(id): ApiPath<ConnectionId>,
) -> Result<Json<ConnectionView>, ApiError> {
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let found = store::get(&tx, id.0).await?;
    tx.rollback().await?;
    found.map(|c| Json(view(c))).ok_or_else(|| not_found(id))
}

pub async fn retest(
    State(state): State<AppState>,
    auth: Authorized<AdminScope>,
    ApiPath(id): ApiPath<ConnectionId>,
) -> Result<Json<ConnectionCheck>, ApiError> {
    recheck(&state, &auth, id).await.map(Json)
}

/// Checks a stored connection again and records its state.
pub(crate) async fn recheck(
    state: &AppState,
    auth: &Authorized<AdminScope>,
    id: ConnectionId,
) -> Result<ConnectionCheck, ApiError> {
    let tenant = auth.principal.tenant.clone();
    let tx = state.store.tenant_tx(&tenant).await?;
    let found = store::get(&tx, id.0).await?.ok_or_else(|| not_found(id))?;
    let secret = store::secret(&tx, &state.settings.master_key, id.0)
        .await
        .map_err(store_error)?
        .ok_or_else(|| not_found(id))?;
    tx.rollback().await?;
    let secret = Secret::new(secret).map_err(|e| {
        tracing::error!(%id, error = %e, "a stored connection secret is not usable");
        ApiError::new(
            ErrorCode::InternalError,
            "the stored token secret is not usable",
        )
    })?;
    let tls = TlsMode::from_trust(&found.tls)
        .map_err(|e| ApiError::new(ErrorCode::InternalError, e.to_string()))?;
    let client = Client::new(
        found.kind,
        &found.url,
        &found.token_id,
        &secret,
        &tls,
        CHECK_TIMEOUTS,
    )
    .map_err(|e| ApiError::new(e.code(), e.to_string()))?;
    let probe = client.probe().await;
    let observed = observation(&probe);
    let tx = state.store.tenant_tx(&tenant).await?;
    if !store::record(&tx, id.0, &observed).await? {
        return Err(not_found(id));
    }
    tx.commit().await?;
    Ok(check_view(probe, observed.at))
}

pub async fn delete(
    State(state): State<AppState>,
    auth: Authorized<AdminScope>,
    ApiPath(id): ApiPath<ConnectionId>,
) -> Result<StatusCode, ApiError> {
    remove(&state, &auth, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Removes a connection and its sealed secret.
pub(crate) async fn remove(
    state: &AppState,
    auth: &Authorized<AdminScope>,
    id: ConnectionId,
) -> Result<(), ApiError> {
    let actor = actor(&auth.principal);
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let deleted = store::delete(&tx, id.0, &actor).await?;
    tx.commit().await?;
    if !deleted {
        return Err(not_found(id));
    }
    tracing::info!(%id, actor, "connection removed");
    Ok(())
}

pub async fn guest_actions(
    State(state): State<AppState>,
    auth: Authorized<AdminScope>,
    ApiPath(id): ApiPath<ConnectionId>,
    ApiJson(body, _): ApiJson<GuestActionsBody>,
) -> Result<Json<ConnectionView>, ApiError> {
    set_guest_actions(&state, &auth, id, body.enabled)
        .await
        .map(Json)
}

/// Turns guest power actions on or off: what the API and the Settings page do.
pub(crate) async fn set_guest_actions(
    state: &AppState,
    auth: &Authorized<AdminScope>,
    id: ConnectionId,
    enabled: bool,
) -> Result<ConnectionView, ApiError> {
    let actor = actor(&auth.principal);
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let Some(connection) = store::set_guest_actions(&tx, id.0, enabled, &actor).await? else {
        return Err(not_found(id));
    };
    if connection.kind != ConnectionKind::ProxmoxVe && enabled {
        tx.rollback().await?;
        return Err(invalid(
            "guest actions exist only for proxmox-ve connections; a backup server has no guests",
        ));
    }
    tx.commit().await?;
    tracing::info!(%id, enabled, actor, "guest actions switched");
    Ok(view(connection))
}

const CHECK_ERRORS: &[ErrorCode] = &[
    ErrorCode::InvalidJson,
    ErrorCode::UnsupportedMediaType,
    ErrorCode::InvalidRequest,
];

/// The routes of this module, in the order the API lists them.
pub(crate) const ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: "GET",
        path: "/api/connections",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "list_connections",
        title: "List platform connections",
        description: "The Proxmox VE clusters and Proxmox Backup Servers Pulse reads, with the \
            state of each (connected, auth_failed, unreachable, tls_mismatch, no_quorum) and \
            what to fix. Token secrets are never shown.",
        category: Category::Settings,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<ConnectionList>,
        },
        errors: &[],
        handler: || routing::get(list),
    },
    RouteSpec {
        method: "POST",
        path: "/api/connections",
        scopes: &[Scope::Admin],
        public: false,
        name: "add_connection",
        title: "Add a platform connection",
        description: "Checks a Proxmox VE or Proxmox Backup Server connection (certificate, \
            token, privileges, quorum), then stores it with its token secret sealed. A failed \
            check is refused with its code and what to fix, and nothing is stored.",
        category: Category::Settings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<ConnectionBody>)),
        response: Answer::Json {
            status: 201,
            schema: schema::<ConnectionView>,
        },
        errors: &[
            ErrorCode::InvalidJson,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::InvalidRequest,
            ErrorCode::ConnectionUnreachable,
            ErrorCode::ConnectionTlsMismatch,
            ErrorCode::ConnectionAuthFailed,
            ErrorCode::ConnectionPrivilegesMissing,
            ErrorCode::Conflict,
            ErrorCode::QuotaExceeded,
        ],
        handler: || routing::post(create),
    },
    RouteSpec {
        method: "POST",
        path: "/api/connections/test",
        scopes: &[Scope::Admin],
        public: false,
        name: "test_connection",
        title: "Test a platform connection without adding it",
        description: "Checks a connection as adding it would and answers what the check found: \
            the state, its code and cause, the fingerprint the server presented, the version \
            and the cluster's members and quorum. Nothing is stored.",
        category: Category::Settings,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<ConnectionBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<ConnectionCheck>,
        },
        errors: CHECK_ERRORS,
        handler: || routing::post(test),
    },
    RouteSpec {
        method: "GET",
        path: "/api/connections/{id}",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_connection",
        title: "Get a platform connection",
        description: "One connection with its state and what to fix.",
        category: Category::Settings,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<ConnectionId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<ConnectionView>,
        },
        errors: &[ErrorCode::InvalidParameter, ErrorCode::NotFound],
        handler: || routing::get(get),
    },
    RouteSpec {
        method: "DELETE",
        path: "/api/connections/{id}",
        scopes: &[Scope::Admin],
        public: false,
        name: "delete_connection",
        title: "Remove a platform connection",
        description: "Removes the connection and its sealed token secret.",
        category: Category::Settings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<ConnectionId>),
        query: None,
        body: None,
        response: Answer::Empty { status: 204 },
        errors: &[ErrorCode::InvalidParameter, ErrorCode::NotFound],
        handler: || routing::delete(delete),
    },
    RouteSpec {
        method: "POST",
        path: "/api/connections/{id}/test",
        scopes: &[Scope::Admin],
        public: false,
        name: "retest_connection",
        title: "Check a platform connection again",
        description: "Checks a stored connection again, records its state and answers what the \
            check found.",
        category: Category::Settings,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<ConnectionId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<ConnectionCheck>,
        },
        errors: &[ErrorCode::InvalidParameter, ErrorCode::NotFound],
        handler: || routing::post(retest),
    },
    RouteSpec {
        method: "PUT",
        path: "/api/connections/{id}/guest-actions",
        scopes: &[Scope::Admin],
        public: false,
        name: "set_connection_guest_actions",
        title: "Turn guest power actions on or off",
        description: "Whether guest.start, guest.shutdown, guest.reboot and guest.stop may be \
            planned for the connection's guests. Each action still goes through policy and a \
            human approval, and the token needs VM.PowerMgmt. Off, the catalogue offers none \
            and the connector refuses any command.",
        category: Category::Settings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<ConnectionId>),
        query: None,
        body: Some(Body::required(schema::<GuestActionsBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<ConnectionView>,
        },
        errors: &[
            ErrorCode::InvalidJson,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidParameter,
            ErrorCode::NotFound,
        ],
        handler: || routing::put(guest_actions),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn body(json: serde_json::Value) -> Result<Checked, String> {
        let body: ConnectionBody = serde_json::from_value(json).map_err(|e| e.to_string())?;
        check_body(body).map_err(|e| e.message)
    }

    fn base() -> serde_json::Value {
        serde_json::json!({
            "kind": "proxmox-ve", "url": "https://PVE-1.home.arpa",
            "token_id": "pulse@pve!reader", "token_secret": "5f0c2a7e",
            "fingerprint": "ab".repeat(32)
        })
    }

    #[test]
    fn a_body_is_checked_field_by_field_with_what_to_fix() {
        let ok = body(base()).unwrap();
        assert_eq!(ok.name, "pve-1-home-arpa");
        assert_eq!(ok.url, "https://pve-1.home.arpa:8006/");
        assert!(matches!(ok.stored_tls, StoredTls::Pinned(_)));
        let with = |key: &str, value: serde_json::Value| {
            let mut b = base();
            b[key] = value;
            body(b)
        };
        for (key, value, says) in [
            ("url", serde_json::json!("http://pve:8006"), "HTTPS only"),
            (
                "name",
                serde_json::json!("Prod Cluster"),
                "lower-case letters",
            ),
            (
                "token_id",
                serde_json::json!("pulse@pve"),
                "user@realm!name",
            ),
            (
                "token_secret",
                serde_json::json!("has space"),
                "token_secret",
            ),
            ("fingerprint", serde_json::json!("AB:CD"), "SHA-256"),
            (
                "cadence_seconds",
                serde_json::json!(5),
                "between 10 and 3600",
            ),
            (
                "cadence_seconds",
                serde_json::json!(7200),
                "between 10 and 3600",
            ),
            ("public_ca", serde_json::json!(true), "exactly one of"),
            ("verify_tls", serde_json::json!(false), "unknown field"),
        ] {
            let err = with(key, value).map(|_| ()).unwrap_err();
            assert!(err.contains(says), "{key}: {err}");
        }
        let mut none = base();
        none.as_object_mut().unwrap().remove("fingerprint");
        assert!(
            body(none)
                .map(|_| ())
                .unwrap_err()
                .contains("cannot be turned off")
        );
        // A backup server: its own default port, and no guests to act on.
        let mut pbs = base();
        pbs["kind"] = serde_json::json!("proxmox-backup");
        pbs["url"] = serde_json::json!("https://pbs.home.arpa");
        assert_eq!(
            body(pbs.clone()).unwrap().url,
            "https://pbs.home.arpa:8007/"
        );
        pbs["guest_actions"] = serde_json::json!(true);
        assert!(body(pbs).map(|_| ()).unwrap_err().contains("no guests"));
    }

    #[test]
    fn names_from_hosts_fit_the_rule() {
        for (url, name) in [
            ("https://10.0.0.5", "10-0-0-5"),
            ("https://[::1]", "1"),
            ("https://Node_A.example.com", "node-a-example-com"),
        ] {
            let got = name_from_host(&reqwest::Url::parse(url).unwrap());
            assert_eq!(got, name);
            assert!(valid_name(&got), "{got}");
        }
    }
}
