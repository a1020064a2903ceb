//! Platform connections (ADR 0013): `POST /api/connections`, `POST /api/connections/test`,
//! `GET /api/connections`, `GET` and `DELETE /api/connections/{id}`,
//! `POST /api/connections/{id}/test`, `PUT /api/connections/{id}/guest-actions`.
//!
//! The token secret goes in and never comes out: no answer carries it.

use chrono::{DateTime, Utc};
use pulse_domain::connection::{ConnectionKind, ConnectionState};
use serde::{Deserialize, Serialize};

uuid_id! {
    /// A connection's id.
    ConnectionId
}

/// Characters of a connection name.
pub const MAX_NAME_CHARS: usize = 63;
/// Bytes of a CA file.
pub const MAX_CA_PEM_BYTES: usize = 64 * 1024;
/// The poll cadence when a connection names none, and its bounds, in seconds.
pub const DEFAULT_CADENCE_SECONDS: u32 = 30;
pub const MIN_CADENCE_SECONDS: u32 = 10;
pub const MAX_CADENCE_SECONDS: u32 = 3600;

/// A connection to add (or to test without adding).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectionBody {
    pub kind: ConnectionKind,
    /// Unique per kind in the organization: lower-case letters, digits and '-', at most 63,
    /// starting with a letter or digit. The connector reports as agent `pve.<name>` or
    /// `pbs.<name>`. Defaults to the URL's host name, made to fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9-]{0,62}$"))]
    pub name: Option<String>,
    /// `https://host[:port]`; the port defaults to 8006 (Proxmox VE) or 8007 (PBS).
    #[schemars(length(min = 1, max = 2048))]
    pub url: String,
    /// The API token's id, `user@realm!name`.
    #[schemars(length(min = 1, max = 256))]
    pub token_id: String,
    /// The token's secret, as Proxmox showed it once. Sealed at rest, never returned.
    #[schemars(length(min = 1, max = 512))]
    pub token_secret: String,
    /// The SHA-256 fingerprint of the server's certificate (`AB:CD:...` or plain hex), for a
    /// self-signed certificate. Exactly one of `fingerprint`, `ca_pem` and `public_ca`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// PEM certificates of the CA that signed the server's certificate (its name is checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 65536))]
    pub ca_pem: Option<String>,
    /// Trust the platform's roots (a publicly signed certificate, its name checked).
    #[serde(default)]
    pub public_ca: bool,
    /// How often the connector reads the cluster, in seconds (10 to 3600; default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 3600))]
    pub cadence_seconds: Option<u32>,
    /// Whether guest power actions (`guest.start`, `guest.shutdown`, `guest.reboot`,
    /// `guest.stop`) may be planned for its guests, each still through policy and approval.
    /// Off by default; the token then also needs `VM.PowerMgmt` (see docs/proxmox.md).
    #[serde(default)]
    pub guest_actions: bool,
}

/// Turns guest power actions on or off for a connection.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GuestActionsBody {
    pub enabled: bool,
}

/// How a connection trusts the server's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TlsModeView {
    Pinned,
    Ca,
    Public,
}

/// A stored connection. The token secret is never part of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConnectionView {
    pub id: ConnectionId,
    pub kind: ConnectionKind,
    pub name: String,
    /// The agent id its resources are reported under.
    pub agent_id: String,
    pub url: String,
    pub token_id: String,
    pub tls_mode: TlsModeView,
    /// The pinned fingerprint (`pinned` only).
    pub fingerprint: Option<String>,
    /// What the last check saw.
    pub state: ConnectionState,
    /// The stable error code of the last failure, if the state is one.
    pub state_code: Option<String>,
    /// What to fix, for every state but `connected`.
    pub state_cause: Option<String>,
    /// The fingerprint the server last presented.
    pub presented_fingerprint: Option<String>,
    /// The product version the server reported.
    pub version: Option<String>,
    pub checked_at: Option<DateTime<Utc>>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// How often the connector reads it, in seconds.
    pub cadence_seconds: u32,
    /// Whether guest power actions may be planned for its guests.
    pub guest_actions: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConnectionList {
    pub connections: Vec<ConnectionView>,
}

/// A cluster as a check saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClusterCheck {
    /// `null` for a node that is not in a cluster.
    pub name: Option<String>,
    /// `null` for a stand-alone node, which has no quorum to lose.
    pub quorate: Option<bool>,
    pub nodes: Vec<NodeCheck>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeCheck {
    pub name: String,
    pub online: bool,
}

/// What a check of a connection found. A failure is a state with a code and a cause, not an
/// error of the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConnectionCheck {
    pub state: ConnectionState,
    pub code: Option<String>,
    pub cause: Option<String>,
    /// The SHA-256 fingerprint of the certificate the server presented: what to pin.
    pub presented_fingerprint: Option<String>,
    pub version: Option<String>,
    pub cluster: Option<ClusterCheck>,
    pub checked_at: DateTime<Utc>,
}
