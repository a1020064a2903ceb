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
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(try_from = "String", into = "String")]
pub struct TenantId(String);

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
