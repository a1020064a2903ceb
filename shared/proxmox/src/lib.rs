//! The Proxmox VE and Proxmox Backup Server API client (ADR 0013): TLS that is always verified
//! (a pinned fingerprint, a CA, or the platform's roots), the API-token header, typed reads that
//! tolerate the API's loose typing, task ids, and the classification of every failure into the
//! connection states the operator sees (`pulse_domain::connection::ConnectionState`).
//!
//! The gateway's connection test and the connector use this one implementation.

pub mod api;
pub mod inventory;
mod loose;
pub mod pbs;
pub mod tls;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use pulse_capabilities::ErrorCode;
use pulse_domain::connection::{ConnectionKind, ConnectionState, Fingerprint, TokenId};
use reqwest::Url;
use reqwest::header::{AUTHORIZATION, HeaderValue};
use serde::de::DeserializeOwned;

pub use api::{
    ClusterResource, ClusterStatus, Disk, GuestCurrent, GuestKind, GuestRef, Member, NodeStatus,
    NodeStorage, PowerAction, Task, Upid, Version, ZfsPool,
};
pub use tls::TlsMode;

/// The largest answer read (a 1,000-guest `/cluster/resources` is about 0.5 MB).
pub const MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;

/// An API token's secret. Never printed, never serialised.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(secret: impl Into<String>) -> Result<Self, Error> {
        let secret = secret.into();
        if secret.is_empty()
            || secret.len() > 512
            || secret.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(Error::Secret);
        }
        Ok(Self(secret))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Why a request failed, classified. `state()` maps each to what the operator sees.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("URL {given:?} cannot be used: {why}")]
    Url { given: String, why: String },
    #[error(
        "the token secret is empty, longer than 512 characters or holds a space; copy the \
         \"Secret\" Proxmox showed once when the token was created"
    )]
    Secret,
    #[error("{why}")]
    Ca { why: String },
    #[error("nothing usable answered at {url}: {cause}")]
    Unreachable { url: String, cause: String },
    #[error("{cause}")]
    TlsMismatch {
        presented: Option<Fingerprint>,
        cause: String,
    },
    #[error(
        "the server refused the API token ({status} {message}); check the token id and \
         secret, and that the token has not expired or been removed"
    )]
    AuthFailed { status: u16, message: String },
    #[error("the token may not read {path}: {message}")]
    Forbidden { path: String, message: String },
    #[error("the token lacks {missing}; {fix}")]
    Privileges { missing: String, fix: String },
    #[error("the cluster has no quorum: {message}")]
    NoQuorum { message: String },
    #[error("{path} answered {status}: {message}")]
    Api {
        path: String,
        status: u16,
        message: String,
    },
    #[error("{path} answered something that is not the documented shape: {cause}")]
    Decode { path: String, cause: String },
}

impl Error {
    /// The connection state this failure puts the connection in; `None` for failures of one
    /// read that say nothing about the connection (a node offline, a bad answer).
    pub fn state(&self) -> Option<ConnectionState> {
        match self {
            Error::Url { .. } | Error::Unreachable { .. } => Some(ConnectionState::Unreachable),
            Error::Secret
            | Error::AuthFailed { .. }
            | Error::Forbidden { .. }
            | Error::Privileges { .. } => Some(ConnectionState::AuthFailed),
            Error::Ca { .. } | Error::TlsMismatch { .. } => Some(ConnectionState::TlsMismatch),
            Error::NoQuorum { .. } => Some(ConnectionState::NoQuorum),
            Error::Api { .. } | Error::Decode { .. } => None,
        }
    }

    /// The stable code of the API's error table (`pulse_capabilities::ErrorCode`) that this
    /// failure is answered with. Input the operator wrote wrongly (URL, secret, CA file) is
    /// `invalid_request`; a lost quorum is not an error of the connection (it is a state).
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Url { .. } | Error::Secret | Error::Ca { .. } => ErrorCode::InvalidRequest,
            Error::Unreachable { .. } | Error::Api { .. } | Error::Decode { .. } => {
                ErrorCode::ConnectionUnreachable
            }
            Error::TlsMismatch { .. } => ErrorCode::ConnectionTlsMismatch,
            Error::AuthFailed { .. } => ErrorCode::ConnectionAuthFailed,
            Error::Forbidden { .. } | Error::Privileges { .. } => {
                ErrorCode::ConnectionPrivilegesMissing
            }
            Error::NoQuorum { .. } => ErrorCode::Conflict,
        }
    }
}

/// The base URL of an API: `https://host[:port]`, with the product's port when none is given.
pub fn api_base(kind: ConnectionKind, given: &str) -> Result<Url, Error> {
    let fail = |why: &str| Error::Url {
        given: given.chars().take(256).collect(),
        why: why.to_owned(),
    };
    let trimmed = given.trim();
    let mut url = Url::parse(trimmed).map_err(|e| {
        fail(&format!(
            "{e}; write it as https://host:{}",
            kind.default_port()
        ))
    })?;
    if url.scheme() != "https" {
        return Err(fail(&format!(
            "Proxmox serves its API over HTTPS only; write https://{}:{}",
            url.host_str().unwrap_or("host"),
            kind.default_port()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(fail("it names no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(fail(
            "it carries a user or password; give the API token separately",
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(fail("it carries a query or fragment"));
    }
    // `Url` forgets an explicit :443, so look at what was written.
    let authority = trimmed
        .trim_start_matches("https://")
        .split('/')
        .next()
        .unwrap_or("");
    let explicit_port = authority.rsplit_once(':').is_some_and(|(_, p)| {
        !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()) && !authority.ends_with(']')
    });
    if url.port().is_none() && !explicit_port {
        let _ = url.set_port(Some(kind.default_port()));
    }
    // The API lives under /api2/json; a path the operator gave (a reverse proxy's prefix) stays.
    let path = url
        .path()
        .trim_end_matches('/')
        .trim_end_matches("/api2/json")
        .to_owned();
    url.set_path(&format!("{path}/"));
    Ok(url)
}

/// A client of one Proxmox VE or PBS API.
#[derive(Clone)]
pub struct Client {
    kind: ConnectionKind,
    base: Url,
    http: reqwest::Client,
    auth: HeaderValue,
    verifier: Arc<tls::Verifier>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("kind", &self.kind)
            .field("base", &self.base.as_str())
            .finish_non_exhaustive()
    }
}

/// Timeouts of the client.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub request: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(5),
            request: Duration::from_secs(30),
        }
    }
}

impl Client {
    pub fn new(
        kind: ConnectionKind,
        url: &str,
        token_id: &TokenId,
        secret: &Secret,
        tls: &TlsMode,
        timeouts: Timeouts,
    ) -> Result<Self, Error> {
        let base = api_base(kind, url)?;
        let verifier = tls::Verifier::new(tls)?;
        let config = verifier.client_config()?;
        // The header each product documents: PVE joins id and secret with '=', PBS with ':'.
        let header = match kind {
            ConnectionKind::ProxmoxVe => format!("PVEAPIToken={token_id}={}", secret.expose()),
            ConnectionKind::ProxmoxBackup => format!("PBSAPIToken={token_id}:{}", secret.expose()),
        };
        let mut auth = HeaderValue::from_str(&header).map_err(|_| Error::Secret)?;
        auth.set_sensitive(true);
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(config)
            .connect_timeout(timeouts.connect)
            .timeout(timeouts.request)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Error::Ca {
                why: format!("the HTTPS client could not be built ({e})"),
            })?;
        Ok(Self {
            kind,
            base,
            http,
            auth,
            verifier,
        })
    }

    pub fn kind(&self) -> ConnectionKind {
        self.kind
    }

    /// `https://host:port/`, as requests are sent.
    pub fn base(&self) -> &Url {
        &self.base
    }

    /// The fingerprint of the certificate the server last presented, if a handshake happened.
    pub fn presented_fingerprint(&self) -> Option<Fingerprint> {
        self.verifier.seen().presented
    }

    fn url(&self, path: &str) -> Result<Url, Error> {
        self.base
            .join(&format!("api2/json/{}", path.trim_start_matches('/')))
            .map_err(|e| Error::Url {
                given: path.to_owned(),
                why: e.to_string(),
            })
    }

    /// GET `path` (under `/api2/json`) and read its `data`.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// POST `form` (`application/x-www-form-urlencoded`, as the API takes parameters) to
    /// `path` and read its `data`. An API token needs no CSRF token.
    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        form: &[(&str, String)],
    ) -> Result<T, Error> {
        let body = serde_urlencoded::to_string(form).map_err(|e| Error::Url {
            given: path.to_owned(),
            why: format!("the parameters cannot be encoded ({e})"),
        })?;
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        form: Option<String>,
    ) -> Result<T, Error> {
        let url = self.url(path)?;
        let mut request = self
            .http
            .request(method, url)
            .header(AUTHORIZATION, self.auth.clone());
        if let Some(form) = form {
            request = request
                .header(
                    reqwest::header::CONTENT_TYPE,
                    "application/x-www-form-urlencoded",
                )
                .body(form);
        }
        let response = request.send().await.map_err(|e| self.transport(&e))?;
        let status = response.status();
        let reason = status.canonical_reason().unwrap_or("").to_owned();
        let body = read_capped(response)
            .await
            .map_err(|cause| self.transport_text(cause))?;
        if !status.is_success() {
            return Err(self.refusal(path, status.as_u16(), &reason, &body));
        }
        let mut de = serde_json::Deserializer::from_slice(&body);
        let envelope: Envelope<T> =
            serde_path_to_error::deserialize(&mut de).map_err(|e| Error::Decode {
                path: path.to_owned(),
                cause: format!("{} at {}", e.inner(), e.path()),
            })?;
        Ok(envelope.data)
    }

    fn transport(&self, e: &reqwest::Error) -> Error {
        let seen = self.verifier.seen();
        if let Some(cause) = seen.refused {
            return Error::TlsMismatch {
                presented: seen.presented,
                cause: format!(
                    "{cause}; if this is the server you meant, pin the presented fingerprint"
                ),
            };
        }
        let mut cause = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            cause = s.to_string();
            source = s.source();
        }
        if e.is_timeout() {
            cause = format!("no answer in time ({cause})");
        }
        self.transport_text(cause)
    }

    fn transport_text(&self, cause: String) -> Error {
        Error::Unreachable {
            url: self.base.to_string(),
            cause,
        }
    }

    fn refusal(&self, path: &str, status: u16, reason: &str, body: &[u8]) -> Error {
        let message = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
            .map(|m| m.trim().to_owned())
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| reason.to_owned());
        match status {
            401 => Error::AuthFailed { status, message },
            403 => Error::Forbidden {
                path: path.to_owned(),
                message,
            },
            _ if message.contains("no quorum") => Error::NoQuorum { message },
            404 if path == "version" => Error::Unreachable {
                url: self.base.to_string(),
                cause: format!(
                    "{path} answered 404: this is not a {} API",
                    match self.kind {
                        ConnectionKind::ProxmoxVe => "Proxmox VE",
                        ConnectionKind::ProxmoxBackup => "Proxmox Backup Server",
                    }
                ),
            },
            _ => Error::Api {
                path: path.to_owned(),
                status,
                message,
            },
        }
    }

    pub async fn version(&self) -> Result<Version, Error> {
        self.get("version").await
    }

    pub async fn cluster_status(&self) -> Result<ClusterStatus, Error> {
        Ok(ClusterStatus::from_entries(
            self.get("cluster/status").await?,
        ))
    }

    pub async fn cluster_resources(&self) -> Result<Vec<ClusterResource>, Error> {
        self.get("cluster/resources").await
    }

    pub async fn node_status(&self, node: &str) -> Result<NodeStatus, Error> {
        self.get(&format!("nodes/{}/status", segment(node)?)).await
    }

    pub async fn node_storage(&self, node: &str) -> Result<Vec<NodeStorage>, Error> {
        self.get(&format!("nodes/{}/storage", segment(node)?)).await
    }

    pub async fn node_disks(&self, node: &str) -> Result<Vec<Disk>, Error> {
        self.get(&format!("nodes/{}/disks/list", segment(node)?))
            .await
    }

    pub async fn node_zfs_pools(&self, node: &str) -> Result<Vec<ZfsPool>, Error> {
        self.get(&format!("nodes/{}/disks/zfs", segment(node)?))
            .await
    }

    /// The cluster's recent tasks (every node's, as far as the token may see them).
    pub async fn node_replication(&self, node: &str) -> Result<Vec<api::ReplicationJob>, Error> {
        self.get(&format!("nodes/{node}/replication")).await
    }

    pub async fn ceph_status(&self) -> Result<api::CephStatus, Error> {
        self.get("cluster/ceph/status").await
    }

    pub async fn cluster_tasks(&self) -> Result<Vec<Task>, Error> {
        self.get("cluster/tasks").await
    }

    /// Tasks of a node that ended in error since `since` (unix seconds), newest first.
    pub async fn node_failed_tasks(&self, node: &str, since: i64) -> Result<Vec<Task>, Error> {
        self.get(&format!(
            "nodes/{}/tasks?errors=1&since={since}&limit=500",
            segment(node)?
        ))
        .await
    }

    pub async fn task_status(&self, upid: &Upid) -> Result<Task, Error> {
        self.get(&format!(
            "nodes/{}/tasks/{}/status",
            segment(&upid.node)?,
            segment(upid.as_str())?
        ))
        .await
    }

    /// Asks for a power action on a guest (`POST /nodes/{node}/{qemu|lxc}/{vmid}/status/{action}`)
    /// and returns the task it started. `timeout` (seconds) bounds a shutdown or reboot on the
    /// Proxmox side; a shutdown is never turned into a hard stop (`forceStop` is not sent).
    pub async fn guest_power(
        &self,
        guest: &GuestRef,
        action: PowerAction,
        timeout: Option<u32>,
    ) -> Result<Upid, Error> {
        let path = format!("{}/status/{}", guest.path()?, action.as_str());
        let mut form = Vec::new();
        if let (Some(timeout), PowerAction::Shutdown | PowerAction::Reboot) = (timeout, action) {
            form.push(("timeout", timeout.to_string()));
        }
        let raw: String = self.post(&path, &form).await?;
        Upid::parse(&raw).ok_or_else(|| Error::Decode {
            path,
            cause: format!(
                "the answer is not a task id (UPID): {:?}",
                raw.chars().take(120).collect::<String>()
            ),
        })
    }

    /// A guest's own current status (`GET /nodes/{node}/{qemu|lxc}/{vmid}/status/current`),
    /// read fresh from the node that runs it.
    pub async fn guest_current(&self, guest: &GuestRef) -> Result<api::GuestCurrent, Error> {
        self.get(&format!("{}/status/current", guest.path()?)).await
    }

    /// The token's effective privileges per path.
    pub async fn permissions(&self) -> Result<api::Permissions, Error> {
        self.get("access/permissions").await
    }

    /// Checks the connection as the operator needs it checked: the certificate, the token, the
    /// privileges read, and the cluster's quorum. Never fails: a failure is a state with a cause.
    pub async fn probe(&self) -> Probe {
        match self.probe_inner().await {
            Ok(probe) => probe,
            Err(e) => Probe {
                state: e.state().unwrap_or(ConnectionState::Unreachable),
                code: Some(e.code()),
                cause: Some(e.to_string()),
                version: None,
                cluster: None,
                presented: match &e {
                    Error::TlsMismatch { presented, .. } => *presented,
                    _ => self.presented_fingerprint(),
                },
            },
        }
    }

    async fn probe_inner(&self) -> Result<Probe, Error> {
        let version = self.version().await?;
        let mut probe = Probe {
            state: ConnectionState::Connected,
            code: None,
            cause: None,
            version: Some(version.version),
            cluster: None,
            presented: self.presented_fingerprint(),
        };
        if self.kind == ConnectionKind::ProxmoxBackup {
            pbs::check_privileges(&self.permissions().await?)?;
            return Ok(probe);
        }
        self.check_privileges(&self.permissions().await?)?;
        let cluster = self.cluster_status().await?;
        if let Some(cause) = cluster.quorum_cause() {
            probe.state = ConnectionState::NoQuorum;
            probe.cause = Some(cause);
        }
        probe.cluster = Some(cluster);
        Ok(probe)
    }

    /// A token made with privilege separation and no role sees an empty cluster, which would
    /// read as "nothing to watch": refuse it with the role to grant instead.
    fn check_privileges(&self, held: &api::Permissions) -> Result<(), Error> {
        let holds = |privilege: &str, path: &str| {
            [path, "/"].iter().any(|p| {
                held.get(*p).is_some_and(|privs| {
                    privs
                        .get(privilege)
                        .is_some_and(|v| v.as_i64().unwrap_or(0) != 0 || v.as_bool() == Some(true))
                })
            })
        };
        let missing: Vec<String> = [
            ("Sys.Audit", "/nodes"),
            ("VM.Audit", "/vms"),
            ("Datastore.Audit", "/storage"),
        ]
        .iter()
        .filter(|(privilege, path)| !holds(privilege, path))
        .map(|(privilege, path)| format!("{privilege} on {path}"))
        .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(Error::Privileges {
            missing: missing.join(", "),
            fix: "give the token (or, without privilege separation, its user) the PVEAuditor \
                  role on / with propagation (pveum acl modify / --tokens <token id> --roles \
                  PVEAuditor)"
                .into(),
        })
    }
}

/// What a probe found.
#[derive(Debug, Clone)]
pub struct Probe {
    pub state: ConnectionState,
    /// The stable code of the failure, when there is one.
    pub code: Option<ErrorCode>,
    /// What to fix, for every state but `Connected`.
    pub cause: Option<String>,
    pub version: Option<String>,
    pub cluster: Option<ClusterStatus>,
    /// The fingerprint the server presented (what to pin after a mismatch).
    pub presented: Option<Fingerprint>,
}

#[derive(serde::Deserialize)]
struct Envelope<T> {
    data: T,
}

/// A path segment, percent-encoded; node names and UPIDs never hold '/', so one that does is
/// refused rather than sent somewhere else.
pub(crate) fn segment(value: &str) -> Result<String, Error> {
    if value.is_empty() || value.contains('/') || value.contains("..") {
        return Err(Error::Url {
            given: value.chars().take(128).collect(),
            why: "not a node name or task id".into(),
        });
    }
    Ok(value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z'
            | b'a'..=b'z'
            | b'0'..=b'9'
            | b'-'
            | b'_'
            | b'.'
            | b'~'
            | b':'
            | b'!'
            | b'@' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect())
}

async fn read_capped(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("the answer broke off ({e})"))?
    {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(format!(
                "the answer is larger than {} MiB",
                MAX_RESPONSE_BYTES / (1024 * 1024)
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_urls_get_the_products_port_and_https_only() {
        let pve = ConnectionKind::ProxmoxVe;
        assert_eq!(
            api_base(pve, "https://pve.lan").unwrap().as_str(),
            "https://pve.lan:8006/"
        );
        assert_eq!(
            api_base(ConnectionKind::ProxmoxBackup, "https://pbs.lan/")
                .unwrap()
                .as_str(),
            "https://pbs.lan:8007/"
        );
        assert_eq!(
            api_base(pve, "https://pve.lan:443").unwrap().as_str(),
            "https://pve.lan/"
        );
        assert_eq!(
            api_base(pve, "https://10.0.0.5:8006/api2/json")
                .unwrap()
                .as_str(),
            "https://10.0.0.5:8006/"
        );
        assert_eq!(
            api_base(pve, "https://proxy.lan/pve/").unwrap().as_str(),
            "https://proxy.lan:8006/pve/"
        );
        assert_eq!(
            api_base(pve, "https://[::1]").unwrap().as_str(),
            "https://[::1]:8006/"
        );
        for (bad, why) in [
            ("http://pve.lan:8006", "HTTPS only"),
            ("pve.lan", "https://host:8006"),
            ("https://root:pw@pve.lan", "user or password"),
            ("https://pve.lan/?x=1", "query"),
        ] {
            let err = api_base(pve, bad).unwrap_err();
            assert!(err.to_string().contains(why), "{bad}: {err}");
            assert_eq!(err.state(), Some(ConnectionState::Unreachable));
        }
    }

    #[test]
    fn a_secret_is_never_printed() {
        let secret = Secret::new("d3adbeef-0000").unwrap();
        assert_eq!(format!("{secret:?}"), "Secret(***)");
        assert!(Secret::new("").is_err());
        assert!(Secret::new("a b").is_err());
        let client = Client::new(
            ConnectionKind::ProxmoxVe,
            "https://pve.lan",
            &TokenId::parse("pulse@pve!reader").unwrap(),
            &secret,
            &TlsMode::Pinned(Fingerprint::of_der(b"x")),
            Timeouts::default(),
        )
        .unwrap();
        assert!(!format!("{client:?}").contains("d3adbeef"));
    }

    #[test]
    fn segments_cannot_leave_their_place_in_the_path() {
        assert_eq!(segment("pve1").unwrap(), "pve1");
        assert_eq!(
            segment("UPID:pve1:1:1:1:qmstart:100:pulse@pve!ops:").unwrap(),
            "UPID:pve1:1:1:1:qmstart:100:pulse@pve!ops:"
        );
        assert_eq!(segment("a b").unwrap(), "a%20b");
        assert!(segment("../access").is_err());
        assert!(segment("a/b").is_err());
    }
}
