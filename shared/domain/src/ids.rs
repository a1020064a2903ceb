//! Identifiers shared by every service.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A tenant (organization) identifier.
///
/// Tenant ids appear inside NATS subjects (`pulse.<tenant>.…`) and Postgres settings, so the
/// alphabet is restricted: lowercase ASCII letters, digits, `-` and `_`, 1 to 63 characters,
/// starting with a letter or digit.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TenantId(String);

/// The JSON Schema of a tenant id: the pattern [`TenantId::validate`] checks.
#[cfg(feature = "schemars")]
impl schemars::JsonSchema for TenantId {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TenantId".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "pattern": TenantId::pattern()})
    }
}

/// Why a string is not a valid tenant id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantIdError {
    #[error("tenant id is empty")]
    Empty,
    #[error("tenant id is longer than 63 characters")]
    TooLong,
    #[error("tenant id must start with a lowercase letter or digit")]
    BadStart,
    #[error("tenant id may contain only lowercase letters, digits, '-' and '_'")]
    BadCharacter,
}

impl TenantId {
    pub const MAX_LEN: usize = 63;

    /// The rule of [`TenantId::new`] as a regular expression (for API documents).
    pub fn pattern() -> String {
        format!("^[a-z0-9][a-z0-9_-]{{0,{}}}$", Self::MAX_LEN - 1)
    }

    pub fn new(value: impl Into<String>) -> Result<Self, TenantIdError> {
        let value = value.into();
        Self::validate(&value)?;
        Ok(Self(value))
    }

    fn validate(value: &str) -> Result<(), TenantIdError> {
        let first = value.chars().next().ok_or(TenantIdError::Empty)?;
        if value.len() > Self::MAX_LEN {
            return Err(TenantIdError::TooLong);
        }
        if !(first.is_ascii_lowercase() || first.is_ascii_digit()) {
            return Err(TenantIdError::BadStart);
        }
        if !value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        {
            return Err(TenantIdError::BadCharacter);
        }
        Ok(())
    }

    /// The tenant every fresh stack creates on first start.
    pub fn default_tenant() -> Self {
        Self("default".to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for TenantId {
    type Err = TenantIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<String> for TenantId {
    type Error = TenantIdError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<TenantId> for String {
    fn from(value: TenantId) -> Self {
        value.0
    }
}

impl AsRef<str> for TenantId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_pattern_spells_the_rule() {
        assert_eq!(TenantId::pattern(), "^[a-z0-9][a-z0-9_-]{0,62}$");
        assert!(TenantId::new("a".repeat(63)).is_ok());
        assert!(TenantId::new("a".repeat(64)).is_err());
        assert!(TenantId::new("-a").is_err());
        assert!(TenantId::new("0_a-b").is_ok());
    }

    #[test]
    fn accepts_subject_safe_ids() {
        for ok in ["default", "a", "acme-corp", "t_1", "0abc"] {
            assert!(TenantId::new(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_ids_that_would_break_subjects_or_settings() {
        assert_eq!(TenantId::new(""), Err(TenantIdError::Empty));
        assert_eq!(TenantId::new("-a"), Err(TenantIdError::BadStart));
        assert_eq!(TenantId::new("A"), Err(TenantIdError::BadStart));
        for bad in ["a.b", "a*", "a>", "a b", "aé"] {
            assert_eq!(
                TenantId::new(bad),
                Err(TenantIdError::BadCharacter),
                "{bad}"
            );
        }
        assert_eq!(TenantId::new("a".repeat(64)), Err(TenantIdError::TooLong));
    }

    #[test]
    fn serde_validates() {
        let err = serde_json::from_str::<TenantId>("\"a.b\"").unwrap_err();
        assert!(err.to_string().contains("only lowercase"));
        let ok: TenantId = serde_json::from_str("\"acme\"").unwrap();
        assert_eq!(ok.as_str(), "acme");
    }
}
