//! Finding identity: the normalized key, the deterministic id, and the one table of keys that
//! have a deterministic resolution verifier.
//!
//! Construction of a [`FindingId`] (stable across builds and releases, FIND-14):
//!
//! 1. the key is normalized with [`FindingKey::normalize`];
//! 2. the UTF-8 bytes of `"{resource_id}:{category}:{key}"` (category in its wire spelling, e.g.
//!    `performance`) are hashed with SHA-256;
//! 3. the id is the first 8 bytes of the digest as 16 lowercase hex characters.
//!
//! This is upstream's `generateFindingID`, so ids agree with the upstream implementation.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Category;

/// Longest accepted key, after normalization.
pub const MAX_KEY_LEN: usize = 64;

/// The first 8 bytes of the SHA-256 of `parts` joined by `:`: the derived ids of findings and
/// suppression rules.
pub(crate) fn short_digest(parts: &[&str]) -> [u8; 8] {
    let mut hasher = Sha256::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            hasher.update(b":");
        }
        hasher.update(part.as_bytes());
    }
    let digest = hasher.finalize();
    let mut id = [0u8; 8];
    id.copy_from_slice(&digest[..8]);
    id
}

/// Exactly 16 lowercase hex characters as 8 bytes.
pub(crate) fn parse_short_hex(s: &str) -> Option<[u8; 8]> {
    if s.len() != 16
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let mut id = [0u8; 8];
    hex::decode_to_slice(s, &mut id).ok()?;
    Some(id)
}

/// Identity of a finding: see the module documentation for the exact construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct FindingId([u8; 8]);

/// The JSON Schema of a finding id: the form [`parse_short_hex`] accepts.
#[cfg(feature = "schemars")]
impl schemars::JsonSchema for FindingId {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "FindingId".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "pattern": SHORT_HEX_PATTERN})
    }
}

/// What [`parse_short_hex`] accepts, as a regular expression (for API documents).
#[cfg(any(test, feature = "schemars"))]
const SHORT_HEX_PATTERN: &str = "^[0-9a-f]{16}$";

impl FindingId {
    /// The id of the finding on `resource_id` in `category` under `key`.
    pub fn derive(resource_id: &str, category: Category, key: &FindingKey) -> Self {
        Self(short_digest(&[
            resource_id,
            category.as_str(),
            key.as_str(),
        ]))
    }

    /// The 16 lowercase hex characters.
    pub fn as_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for FindingId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_hex())
    }
}

/// A string that is not 16 lowercase hex characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid finding id (expected 16 lowercase hex characters)")]
pub struct FindingIdError;

impl FromStr for FindingId {
    type Err = FindingIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_short_hex(s).map(Self).ok_or(FindingIdError)
    }
}

impl TryFrom<String> for FindingId {
    type Error = FindingIdError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl From<FindingId> for String {
    fn from(id: FindingId) -> Self {
        id.as_hex()
    }
}

/// A finding key in canonical form: lowercase kebab-case `[a-z0-9-]`, 1 to [`MAX_KEY_LEN`]
/// characters, with the directional synonyms of FIND-12 mapped onto the verifier vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(try_from = "String", into = "String")]
pub struct FindingKey(String);

/// Why a reported key cannot be normalized.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FindingKeyError {
    #[error("finding key is empty")]
    Empty,
    #[error("finding key is longer than {MAX_KEY_LEN} characters")]
    TooLong,
    #[error("finding key may contain only letters, digits, '-', '_' and spaces")]
    BadCharacter,
}

/// Unambiguous directional synonyms only (FIND-12). Semantically distinct keys such as
/// `pbs-job-failed` or `node-offline` are deliberately absent: aliasing them onto a verifier key
/// would verify them against a resource model they do not match.
const KEY_ALIASES: [(&str, &str); 3] = [
    ("high-cpu", "cpu-high"),
    ("high-memory", "memory-high"),
    ("high-disk", "disk-high"),
];

impl FindingKey {
    /// Normalizes a reported key: trims, lowercases, turns `_` and whitespace into `-`,
    /// collapses repeated `-`, strips leading and trailing `-`, then applies the alias map.
    /// Any other character is refused rather than silently dropped, because dropping it could
    /// fold two distinct keys into one identity.
    pub fn normalize(raw: &str) -> Result<Self, FindingKeyError> {
        let mut out = String::with_capacity(raw.len());
        for c in raw.trim().chars() {
            let c = match c {
                'A'..='Z' => c.to_ascii_lowercase(),
                'a'..='z' | '0'..='9' => c,
                '-' | '_' => '-',
                c if c.is_whitespace() => '-',
                _ => return Err(FindingKeyError::BadCharacter),
            };
            if c == '-' && (out.is_empty() || out.ends_with('-')) {
                continue;
            }
            out.push(c);
        }
        while out.ends_with('-') {
            out.pop();
        }
        if out.is_empty() {
            return Err(FindingKeyError::Empty);
        }
        if out.len() > MAX_KEY_LEN {
            return Err(FindingKeyError::TooLong);
        }
        if let Some((_, canonical)) = KEY_ALIASES.iter().find(|(alias, _)| *alias == out) {
            out = (*canonical).to_owned();
        }
        Ok(Self(out))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FindingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for FindingKey {
    type Error = FindingKeyError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::normalize(&value)
    }
}

impl From<FindingKey> for String {
    fn from(key: FindingKey) -> Self {
        key.0
    }
}

/// The keys the verifier service checks deterministically. The verifier dispatches on this enum
/// with an exhaustive `match`, and [`has_deterministic_verifier`] is derived from it, so the gate,
/// the reconcile pass and the dispatch cannot disagree (FIND-11).
///
/// The first seven are the upstream dispatch keys. The rest name the faults a `pulse-agent`
/// observes on supervised services and Docker containers, after the alert rules of
/// [`crate::alert_rules`] (`unhealthy`, `unexpected_exit`, `restart_loop`), so a finding and the
/// alert that triggered its run speak of the same fault:
///
/// | key | resource | the fault is gone when |
/// |---|---|---|
/// | `service-unhealthy` | service | the `unhealthy` rule clears on a fresh observation |
/// | `container-unhealthy` | app-container | the `unhealthy` rule clears on a fresh observation |
/// | `service-exited` | service | the `unexpected_exit` rule clears (running again, or exited 0) |
/// | `container-exited` | app-container | the `unexpected_exit` rule clears |
/// | `restart-loop` | service, app-container | it has run for a full restart-loop window |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum VerifierKey {
    CpuHigh,
    MemoryHigh,
    DiskHigh,
    BackupStale,
    BackupFailed,
    SmartFailure,
    GuestUnreachable,
    ServiceUnhealthy,
    ContainerUnhealthy,
    ServiceExited,
    ContainerExited,
    RestartLoop,
}

impl VerifierKey {
    pub const ALL: [VerifierKey; 12] = [
        VerifierKey::CpuHigh,
        VerifierKey::MemoryHigh,
        VerifierKey::DiskHigh,
        VerifierKey::BackupStale,
        VerifierKey::BackupFailed,
        VerifierKey::SmartFailure,
        VerifierKey::GuestUnreachable,
        VerifierKey::ServiceUnhealthy,
        VerifierKey::ContainerUnhealthy,
        VerifierKey::ServiceExited,
        VerifierKey::ContainerExited,
        VerifierKey::RestartLoop,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            VerifierKey::CpuHigh => "cpu-high",
            VerifierKey::MemoryHigh => "memory-high",
            VerifierKey::DiskHigh => "disk-high",
            VerifierKey::BackupStale => "backup-stale",
            VerifierKey::BackupFailed => "backup-failed",
            VerifierKey::SmartFailure => "smart-failure",
            VerifierKey::GuestUnreachable => "guest-unreachable",
            VerifierKey::ServiceUnhealthy => "service-unhealthy",
            VerifierKey::ContainerUnhealthy => "container-unhealthy",
            VerifierKey::ServiceExited => "service-exited",
            VerifierKey::ContainerExited => "container-exited",
            VerifierKey::RestartLoop => "restart-loop",
        }
    }

    /// The verifier for a (normalized) key, if one exists.
    pub fn for_key(key: &FindingKey) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == key.as_str())
    }
}

impl fmt::Display for VerifierKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The single source of truth for "this key has a deterministic resolution verifier" (FIND-11),
/// used by the `resolved` gate of [`super::assess`] and by every reconcile pass.
pub fn has_deterministic_verifier(key: &FindingKey) -> bool {
    VerifierKey::for_key(key).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn strings_of_the_documented_pattern_parse(s in "[0-9a-f]{16}") {
            prop_assert!(s.parse::<FindingId>().is_ok());
            prop_assert!(s.to_uppercase().parse::<FindingId>().is_err() || s.chars().all(|c| c.is_ascii_digit()));
        }
    }

    #[test]
    fn the_documented_pattern() {
        assert_eq!(SHORT_HEX_PATTERN, "^[0-9a-f]{16}$");
        assert!("0123456789abcdeg".parse::<FindingId>().is_err());
        assert!("0123456789abcde".parse::<FindingId>().is_err());
    }

    fn key(s: &str) -> FindingKey {
        FindingKey::normalize(s).expect("valid key")
    }

    #[test]
    fn id_is_the_first_eight_bytes_of_sha256_of_resource_category_key() {
        let id = FindingId::derive("host:h1", Category::Performance, &key("cpu-high"));
        let digest = Sha256::digest(b"host:h1:performance:cpu-high");
        assert_eq!(id.as_hex(), hex::encode(&digest[..8]));
        assert_eq!(id.as_hex().len(), 16);
        // Pinned so a change to the construction cannot slip through: ids are stored and
        // referenced by operators, so they must be stable across builds.
        assert_eq!(id.as_hex(), "40d57bb7c6c30f6f");
    }

    #[test]
    fn id_depends_on_every_component() {
        let base = FindingId::derive("host:h1", Category::Performance, &key("cpu-high"));
        assert_ne!(
            base,
            FindingId::derive("host:h2", Category::Performance, &key("cpu-high"))
        );
        assert_ne!(
            base,
            FindingId::derive("host:h1", Category::Capacity, &key("cpu-high"))
        );
        assert_ne!(
            base,
            FindingId::derive("host:h1", Category::Performance, &key("memory-high"))
        );
        // Aliases meet on one identity.
        assert_eq!(
            base,
            FindingId::derive("host:h1", Category::Performance, &key("high-cpu"))
        );
    }

    #[test]
    fn id_parses_only_lowercase_hex_of_the_right_length() {
        let id = FindingId::derive("r", Category::General, &key("k"));
        assert_eq!(id.as_hex().parse::<FindingId>(), Ok(id));
        for bad in [
            "",
            "abc",
            "7E3AB4B7F83AC60A",
            "7e3ab4b7f83ac60g",
            "7e3ab4b7f83ac60a0",
        ] {
            assert_eq!(bad.parse::<FindingId>(), Err(FindingIdError), "{bad:?}");
        }
        assert_eq!(
            serde_json::to_string(&id).expect("serialize"),
            format!("\"{}\"", id.as_hex())
        );
    }

    #[test]
    fn normalization_table() {
        let cases = [
            ("cpu-high", "cpu-high"),
            ("  CPU_High ", "cpu-high"),
            ("high-cpu", "cpu-high"),
            ("High CPU", "cpu-high"),
            ("high_memory", "memory-high"),
            ("high-disk", "disk-high"),
            ("--restart--loop--", "restart-loop"),
            ("pbs-job-failed", "pbs-job-failed"),
            ("node-offline", "node-offline"),
            ("high-cpu-steal", "high-cpu-steal"),
        ];
        for (raw, want) in cases {
            assert_eq!(key(raw).as_str(), want, "{raw:?}");
        }
        assert_eq!(FindingKey::normalize(""), Err(FindingKeyError::Empty));
        assert_eq!(FindingKey::normalize(" - _ "), Err(FindingKeyError::Empty));
        assert_eq!(
            FindingKey::normalize("cpu.high"),
            Err(FindingKeyError::BadCharacter)
        );
        assert_eq!(
            FindingKey::normalize("cpu/high"),
            Err(FindingKeyError::BadCharacter)
        );
        assert_eq!(
            FindingKey::normalize(&"a".repeat(MAX_KEY_LEN + 1)),
            Err(FindingKeyError::TooLong)
        );
        assert!(FindingKey::normalize(&"a".repeat(MAX_KEY_LEN)).is_ok());
    }

    #[test]
    fn distinct_keys_are_not_aliased_onto_verifier_keys() {
        for raw in ["pbs-job-failed", "node-offline"] {
            let k = key(raw);
            assert!(!has_deterministic_verifier(&k), "{raw}");
        }
    }

    #[test]
    fn exactly_the_dispatch_keys_have_verifiers() {
        assert_eq!(VerifierKey::ALL.len(), 12);
        let distinct: std::collections::BTreeSet<_> =
            VerifierKey::ALL.iter().map(|v| v.as_str()).collect();
        assert_eq!(distinct.len(), VerifierKey::ALL.len(), "keys are distinct");
        for v in VerifierKey::ALL {
            let k = key(v.as_str());
            assert_eq!(
                k.as_str(),
                v.as_str(),
                "verifier keys are already canonical"
            );
            assert_eq!(VerifierKey::for_key(&k), Some(v));
            assert!(has_deterministic_verifier(&k));
            assert_eq!(
                serde_json::to_value(v).expect("serialize"),
                serde_json::json!(v.as_str())
            );
            assert_eq!(
                serde_json::from_value::<VerifierKey>(serde_json::json!(v.as_str())).ok(),
                Some(v)
            );
        }
        // The aliases reach the verifier vocabulary; spelling variants of the agent-fault keys
        // normalize onto them.
        for alias in [
            "high-cpu",
            "high-memory",
            "high-disk",
            "Restart_Loop",
            "service unhealthy",
            "CONTAINER-EXITED",
        ] {
            assert!(has_deterministic_verifier(&key(alias)), "{alias}");
        }
        for other in [
            "cpu",
            "backup",
            "disk-full",
            "unhealthy",
            "restart",
            "service-down",
            "container-restart-loop",
            "pbs-job-failed",
        ] {
            assert!(!has_deterministic_verifier(&key(other)), "{other}");
        }
    }

    proptest! {
        #[test]
        fn normalization_is_idempotent(raw in "[ A-Za-z0-9_-]{0,80}") {
            if let Ok(k) = FindingKey::normalize(&raw) {
                let again = FindingKey::normalize(k.as_str()).expect("canonical keys normalize");
                prop_assert_eq!(&again, &k);
                prop_assert!(k.as_str().len() <= MAX_KEY_LEN);
                prop_assert!(k.as_str().bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
                prop_assert!(!k.as_str().starts_with('-') && !k.as_str().ends_with('-'));
                prop_assert!(!k.as_str().contains("--"));
            }
        }

        #[test]
        fn id_is_deterministic_and_round_trips(resource in "[a-z0-9:-]{1,40}", raw in "[a-z0-9-]{1,30}") {
            if let Ok(k) = FindingKey::normalize(&raw) {
                let a = FindingId::derive(&resource, Category::Reliability, &k);
                let b = FindingId::derive(&resource, Category::Reliability, &k);
                prop_assert_eq!(a, b);
                prop_assert_eq!(a.as_hex().parse::<FindingId>(), Ok(a));
            }
        }
    }
}
