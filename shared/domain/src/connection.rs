//! Platform connections (ADR 0013): a Proxmox VE cluster or a Proxmox Backup Server that Pulse
//! reads through its HTTPS API with an API token. This module holds the vocabulary the API, the
//! UI, readiness and the connector share; the client lives in `pulse-proxmox`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What a connection talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ConnectionKind {
    ProxmoxVe,
    ProxmoxBackup,
}

impl ConnectionKind {
    pub const ALL: [ConnectionKind; 2] = [ConnectionKind::ProxmoxVe, ConnectionKind::ProxmoxBackup];

    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionKind::ProxmoxVe => "proxmox-ve",
            ConnectionKind::ProxmoxBackup => "proxmox-backup",
        }
    }

    /// The port the product serves its API on when a URL names none.
    pub fn default_port(self) -> u16 {
        match self {
            ConnectionKind::ProxmoxVe => 8006,
            ConnectionKind::ProxmoxBackup => 8007,
        }
    }

    /// The prefix of the agent id a connector reports under (`pve.<name>`, `pbs.<name>`).
    pub fn agent_prefix(self) -> &'static str {
        match self {
            ConnectionKind::ProxmoxVe => "pve.",
            ConnectionKind::ProxmoxBackup => "pbs.",
        }
    }
}

/// How a connection trusts its server's certificate, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// The server certificate's SHA-256.
    Pinned(Fingerprint),
    /// PEM certificates of the CA.
    Ca(String),
    /// The platform's roots.
    Public,
}

impl Trust {
    pub fn mode(&self) -> &'static str {
        match self {
            Trust::Pinned(_) => "pinned",
            Trust::Ca(_) => "ca",
            Trust::Public => "public",
        }
    }
}

/// Whether a session authenticated with a token bound to `bound` (a connector's token, or
/// `None` for any other) may report as `agent_id`. A bound token reports only as its own agent;
/// an unbound one never under a connector prefix, so no host agent speaks for a cluster.
pub fn may_report_as(bound: Option<&str>, agent_id: &str) -> Result<(), String> {
    match bound {
        Some(bound) if bound == agent_id => Ok(()),
        Some(bound) => Err(format!(
            "this token reports only as agent {bound:?}, not {agent_id:?}"
        )),
        None => match ConnectionKind::ALL
            .iter()
            .find(|kind| agent_id.starts_with(kind.agent_prefix()))
        {
            Some(kind) => Err(format!(
                "agent ids starting with {:?} belong to the connector of a {} connection; \
                 choose another agent id",
                kind.agent_prefix(),
                kind.as_str()
            )),
            None => Ok(()),
        },
    }
}

impl fmt::Display for ConnectionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ConnectionKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ConnectionKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                format!("unknown connection kind {s:?} (expected proxmox-ve or proxmox-backup)")
            })
    }
}

/// What Pulse last saw when it talked to the connection. Every state but `Connected` carries a
/// cause that says what to fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ConnectionState {
    /// Never checked. Adding a connection checks it first, so no route stores this state
    /// today; it is the table's default, and readiness does not count it as unreadable.
    Pending,
    Connected,
    /// The token was refused (wrong id or secret, expired, or without the privileges read).
    AuthFailed,
    /// Nothing answered at the URL (DNS, refused, timeout, not a Proxmox API).
    Unreachable,
    /// The server's certificate is not the one pinned, or does not chain to the CA given.
    TlsMismatch,
    /// The cluster answered but has lost quorum: reads work, writes and guest actions fail.
    NoQuorum,
}

impl ConnectionState {
    pub const ALL: [ConnectionState; 6] = [
        ConnectionState::Pending,
        ConnectionState::Connected,
        ConnectionState::AuthFailed,
        ConnectionState::Unreachable,
        ConnectionState::TlsMismatch,
        ConnectionState::NoQuorum,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionState::Pending => "pending",
            ConnectionState::Connected => "connected",
            ConnectionState::AuthFailed => "auth_failed",
            ConnectionState::Unreachable => "unreachable",
            ConnectionState::TlsMismatch => "tls_mismatch",
            ConnectionState::NoQuorum => "no_quorum",
        }
    }

    /// Whether resources read through the connection can be trusted as current.
    pub fn is_reading(self) -> bool {
        matches!(self, ConnectionState::Connected | ConnectionState::NoQuorum)
    }
}

impl fmt::Display for ConnectionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ConnectionState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ConnectionState::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown connection state {s:?}"))
    }
}

/// A Proxmox API token id, `user@realm!name`, checked the way Proxmox checks it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(try_from = "String", into = "String")]
pub struct TokenId(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "token id {given:?} is not of the form user@realm!name ({why}); create the token under \
     Datacenter > Permissions > API Tokens and copy its \"Token ID\""
)]
pub struct TokenIdError {
    pub given: String,
    pub why: &'static str,
}

impl TokenId {
    pub fn parse(given: &str) -> Result<Self, TokenIdError> {
        let fail = |why| TokenIdError {
            given: given.chars().take(128).collect(),
            why,
        };
        if given.len() > 256 {
            return Err(fail("longer than 256 characters"));
        }
        let (userid, name) = given.split_once('!').ok_or_else(|| fail("no '!'"))?;
        let (user, realm) = userid.rsplit_once('@').ok_or_else(|| fail("no '@realm'"))?;
        if user.is_empty()
            || user
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == ':' || c == '/')
        {
            return Err(fail("the user part is empty or holds a space, ':' or '/'"));
        }
        let realm_ok = realm
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
            && realm
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_');
        if !realm_ok {
            return Err(fail(
                "the realm must start with a letter and hold letters, digits, '.', '-' or '_'",
            ));
        }
        let name_ok = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && name.len() >= 2
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_');
        if !name_ok {
            return Err(fail(
                "the token name must start with a letter and hold at least two letters, digits, '.', '-' or '_'",
            ));
        }
        Ok(Self(given.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TokenId {
    type Error = TokenIdError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<TokenId> for String {
    fn from(value: TokenId) -> Self {
        value.0
    }
}

impl fmt::Display for TokenId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A certificate's SHA-256 fingerprint, written as Proxmox shows it: 32 upper-case hex bytes
/// joined by ':'. Parsed from that form, from plain hex, in either case.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "fingerprint {given:?} is not a SHA-256 fingerprint (64 hex digits, ':' between bytes \
     allowed); on the Proxmox node, Certificates shows it, or run \
     `openssl x509 -in /etc/pve/local/pve-ssl.pem -noout -fingerprint -sha256`"
)]
pub struct FingerprintError {
    pub given: String,
}

impl Fingerprint {
    pub fn of_der(der: &[u8]) -> Self {
        use sha2::Digest as _;
        Self(sha2::Sha256::digest(der).into())
    }

    pub fn parse(given: &str) -> Result<Self, FingerprintError> {
        let trimmed = given.trim();
        let trimmed = trimmed
            .strip_prefix("sha256 Fingerprint=")
            .or_else(|| trimmed.strip_prefix("SHA256 Fingerprint="))
            .unwrap_or(trimmed);
        let digits: String = trimmed.chars().filter(|c| *c != ':').collect();
        let fail = || FingerprintError {
            given: given.chars().take(128).collect(),
        };
        if digits.len() != 64 {
            return Err(fail());
        }
        let bytes = hex::decode(&digits).map_err(|_| fail())?;
        let bytes: [u8; 32] = bytes.try_into().map_err(|_| fail())?;
        Ok(Self(bytes))
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{b:02X}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

impl Serialize for Fingerprint {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Fingerprint {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Fingerprint::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn connector_agent_ids_belong_to_their_bound_tokens() {
        assert!(may_report_as(None, "web-1").is_ok());
        assert!(may_report_as(None, "pve.lab").is_err());
        assert!(may_report_as(None, "pbs.backup").is_err());
        assert!(may_report_as(Some("pve.lab"), "pve.lab").is_ok());
        let other = may_report_as(Some("pve.lab"), "pve.other").unwrap_err();
        assert!(other.contains("pve.lab"), "{other}");
        assert!(may_report_as(Some("pve.lab"), "web-1").is_err());
    }

    use super::*;

    #[test]
    fn token_ids_are_checked_as_proxmox_checks_them() {
        for good in ["pulse@pve!reader", "root@pam!ci-01", "a.b@ldap-corp!x_y.z"] {
            assert_eq!(TokenId::parse(good).unwrap().as_str(), good);
        }
        for (bad, why) in [
            ("pulse@pve", "no '!'"),
            ("pulse!reader", "no '@realm'"),
            ("@pve!reader", "the user part"),
            ("pulse@pve!r", "the token name"),
            ("pulse@pve!9abc", "the token name"),
            ("pulse@1pve!reader", "the realm"),
            ("pulse@pve!read er", "the token name"),
        ] {
            let err = TokenId::parse(bad).unwrap_err();
            assert!(err.why.starts_with(why), "{bad}: {}", err.why);
            assert!(err.to_string().contains("API Tokens"), "{err}");
        }
    }

    #[test]
    fn fingerprints_read_in_the_forms_operators_copy_and_print_as_proxmox_does() {
        let colon = "AB:".repeat(31) + "AB";
        let plain = "ab".repeat(32);
        let openssl = format!("sha256 Fingerprint={colon}");
        let a = Fingerprint::parse(&colon).unwrap();
        assert_eq!(Fingerprint::parse(&plain).unwrap(), a);
        assert_eq!(Fingerprint::parse(&openssl).unwrap(), a);
        assert_eq!(a.to_string(), colon);
        for bad in ["", "AB:CD", &"zz".repeat(32), &"ab".repeat(33)] {
            assert!(Fingerprint::parse(bad).is_err(), "{bad}");
        }
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<Fingerprint>(&json).unwrap(), a);
    }

    #[test]
    fn states_and_kinds_round_trip_through_their_wire_names() {
        for state in ConnectionState::ALL {
            assert_eq!(state.as_str().parse::<ConnectionState>().unwrap(), state);
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
        }
        for kind in ConnectionKind::ALL {
            assert_eq!(kind.as_str().parse::<ConnectionKind>().unwrap(), kind);
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
    }
}
