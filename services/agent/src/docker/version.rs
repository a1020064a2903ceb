//! Engine API version negotiation.
//!
//! The client speaks at most [`CLIENT_API_VERSION`] and at least [`MIN_API_VERSION`]. At the
//! first request (and again after the engine went away or changed) it asks the engine
//! `GET /version` (unversioned) and pins every later request to the version [`negotiate`]
//! picks:
//!
//! - the lower of the engine's `ApiVersion` and ours, so a Docker 20.10 engine (1.41) is spoken
//!   to at 1.41 and a newer engine at ours;
//! - raised to the engine's `MinAPIVersion` when ours is below it (an engine that no longer
//!   serves our version; every field the client reads is optional, so a newer shape decodes);
//! - refused with [`VersionRefusal::EngineTooOld`] when the engine's `ApiVersion` is below
//!   [`MIN_API_VERSION`], so the agent says why instead of reporting no containers.
//!
//! 1.24 (Docker 1.12) is the minimum because it is the first version whose inspect carries
//! `State.Health` and whose events carry `Type`/`Action`/`Actor`; everything the collector,
//! the reads and the commands use exists there. It is also the oldest version current engines
//! still accept.

use std::cmp::Ordering;
use std::fmt;

use serde::Deserialize;

/// The newest Engine API version the client asks for (Docker Engine 24).
pub const CLIENT_API_VERSION: ApiVersion = ApiVersion::new(1, 43);
/// The oldest Engine API version the client accepts (Docker 1.12).
pub const MIN_API_VERSION: ApiVersion = ApiVersion::new(1, 24);
/// The Docker release that introduced [`MIN_API_VERSION`], for the refusal message.
pub const MIN_DOCKER_RELEASE: &str = "1.12";

/// An Engine API version, `major.minor`, ordered numerically (1.9 < 1.24 < 1.41).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ApiVersion {
    pub major: u16,
    pub minor: u16,
}

impl ApiVersion {
    pub const fn new(major: u16, minor: u16) -> Self {
        Self { major, minor }
    }

    /// `"1.41"` (an optional leading `v` is accepted); anything else is `None`.
    pub fn parse(value: &str) -> Option<Self> {
        let value = value.trim();
        let value = value.strip_prefix('v').unwrap_or(value);
        let (major, minor) = value.split_once('.')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(major) || !digits(minor) {
            return None;
        }
        Some(Self::new(major.parse().ok()?, minor.parse().ok()?))
    }

    /// The request path prefix, `/v1.41`.
    pub fn path_prefix(self) -> String {
        format!("/v{self}")
    }
}

impl Ord for ApiVersion {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.major, self.minor).cmp(&(other.major, other.minor))
    }
}

impl PartialOrd for ApiVersion {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// What `GET /version` says about the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineVersion {
    /// The newest API version the engine serves.
    pub api_version: ApiVersion,
    /// The oldest API version the engine serves; absent on old engines.
    pub min_api_version: Option<ApiVersion>,
    /// The engine release, e.g. `20.10.24+dfsg1` (empty when not stated).
    pub release: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawVersion {
    #[serde(rename = "ApiVersion")]
    api_version: Option<String>,
    #[serde(rename = "MinAPIVersion")]
    min_api_version: Option<String>,
    #[serde(rename = "Version")]
    version: Option<String>,
}

impl EngineVersion {
    /// Decodes a `GET /version` body; `Err` names what is missing or malformed.
    pub fn from_json(body: &[u8]) -> Result<Self, String> {
        let raw: RawVersion = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        let stated = raw
            .api_version
            .ok_or_else(|| "the engine did not state its ApiVersion".to_owned())?;
        let api_version = ApiVersion::parse(&stated)
            .ok_or_else(|| format!("ApiVersion {:?} is not a version", bounded(&stated)))?;
        Ok(Self {
            api_version,
            min_api_version: raw.min_api_version.as_deref().and_then(ApiVersion::parse),
            release: raw.version.as_deref().map(bounded).unwrap_or_default(),
        })
    }
}

fn bounded(text: &str) -> String {
    super::model::bounded(text, 64)
}

/// Why no version could be agreed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionRefusal {
    /// The engine's newest API is older than [`MIN_API_VERSION`].
    EngineTooOld { engine: ApiVersion },
}

/// The version to pin requests to, given what the engine says and the newest we speak
/// (`ours`, itself never taken below [`MIN_API_VERSION`]). Pure; see the module docs.
pub fn negotiate(engine: &EngineVersion, ours: ApiVersion) -> Result<ApiVersion, VersionRefusal> {
    if engine.api_version < MIN_API_VERSION {
        return Err(VersionRefusal::EngineTooOld {
            engine: engine.api_version,
        });
    }
    let ours = ours.max(MIN_API_VERSION);
    let chosen = engine.api_version.min(ours);
    Ok(match engine.min_api_version {
        Some(engine_min) if chosen < engine_min && engine_min <= engine.api_version => engine_min,
        _ => chosen,
    })
}

/// Whether an engine's error message is its refusal of the requested API version
/// (`client version 1.43 is too new. Maximum supported API version is 1.41`, or `... is too
/// old. Minimum supported API version is 1.44 ...`).
pub fn is_version_refusal(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("client version")
        && (message.contains("too new") || message.contains("too old"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(api: &str, min: Option<&str>) -> EngineVersion {
        EngineVersion {
            api_version: ApiVersion::parse(api).expect("version"),
            min_api_version: min.and_then(ApiVersion::parse),
            release: String::new(),
        }
    }

    #[test]
    fn parses_and_orders_numerically() {
        assert_eq!(ApiVersion::parse("1.41"), Some(ApiVersion::new(1, 41)));
        assert_eq!(ApiVersion::parse("v1.43"), Some(ApiVersion::new(1, 43)));
        assert_eq!(ApiVersion::parse(" 1.9 "), Some(ApiVersion::new(1, 9)));
        for bad in ["", "1", "1.", ".4", "1.4.1", "one.two", "1.-4", "99999.1"] {
            assert_eq!(ApiVersion::parse(bad), None, "{bad}");
        }
        assert!(ApiVersion::new(1, 9) < ApiVersion::new(1, 24));
        assert!(ApiVersion::new(1, 41) < ApiVersion::new(1, 43));
        assert!(ApiVersion::new(2, 0) > ApiVersion::new(1, 99));
        assert_eq!(ApiVersion::new(1, 41).path_prefix(), "/v1.41");
    }

    #[test]
    fn docker_20_10_is_spoken_to_at_its_own_version() {
        assert_eq!(
            negotiate(&engine("1.41", Some("1.12")), CLIENT_API_VERSION),
            Ok(ApiVersion::new(1, 41))
        );
    }

    #[test]
    fn a_newer_engine_is_spoken_to_at_ours() {
        assert_eq!(
            negotiate(&engine("1.45", Some("1.24")), CLIENT_API_VERSION),
            Ok(CLIENT_API_VERSION)
        );
        assert_eq!(
            negotiate(&engine("1.43", None), CLIENT_API_VERSION),
            Ok(CLIENT_API_VERSION)
        );
    }

    #[test]
    fn an_engine_below_the_minimum_is_refused() {
        assert_eq!(
            negotiate(&engine("1.23", Some("1.12")), CLIENT_API_VERSION),
            Err(VersionRefusal::EngineTooOld {
                engine: ApiVersion::new(1, 23)
            })
        );
        // The minimum itself is accepted.
        assert_eq!(
            negotiate(&engine("1.24", None), CLIENT_API_VERSION),
            Ok(MIN_API_VERSION)
        );
    }

    #[test]
    fn an_engine_that_no_longer_serves_ours_is_spoken_to_at_its_minimum() {
        assert_eq!(
            negotiate(&engine("1.52", Some("1.44")), CLIENT_API_VERSION),
            Ok(ApiVersion::new(1, 44))
        );
    }

    #[test]
    fn a_lower_cap_is_honoured_but_never_below_the_minimum() {
        let engine = engine("1.41", Some("1.12"));
        assert_eq!(negotiate(&engine, MIN_API_VERSION), Ok(MIN_API_VERSION));
        assert_eq!(
            negotiate(&engine, ApiVersion::new(1, 12)),
            Ok(MIN_API_VERSION)
        );
    }

    #[test]
    fn decodes_the_version_body() {
        let body = br#"{"Version":"20.10.24+dfsg1","ApiVersion":"1.41","MinAPIVersion":"1.12","Os":"linux"}"#;
        assert_eq!(
            EngineVersion::from_json(body),
            Ok(EngineVersion {
                api_version: ApiVersion::new(1, 41),
                min_api_version: Some(ApiVersion::new(1, 12)),
                release: "20.10.24+dfsg1".to_owned(),
            })
        );
        let old = EngineVersion::from_json(br#"{"Version":"1.11.2","ApiVersion":"1.23"}"#)
            .expect("old engine");
        assert_eq!(old.min_api_version, None);
        assert!(EngineVersion::from_json(br#"{"Version":"x"}"#).is_err());
        assert!(EngineVersion::from_json(br#"{"ApiVersion":"new"}"#).is_err());
        assert!(EngineVersion::from_json(b"not json").is_err());
    }

    #[test]
    fn recognises_the_engine_refusal_of_a_version() {
        assert!(is_version_refusal(
            "client version 1.43 is too new. Maximum supported API version is 1.41"
        ));
        assert!(is_version_refusal(
            "client version 1.23 is too old. Minimum supported API version is 1.24, please upgrade your client to a newer version"
        ));
        assert!(!is_version_refusal("No such container: web"));
    }
}
