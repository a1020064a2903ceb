//! Query parameters as what they are: a count is a number, a filter an enum. A query string is
//! text, so the fields of the query types read their values from text here, each with the
//! refusal the API states for it.
//!
//! A refusal is serde's `invalid_value` whose unexpected part is the refusal itself (see
//! [`crate::constraints::refuse`]); the gateway's query reader answers it as `<parameter>: <refusal>`. Anything else
//! a query can get wrong (an unknown parameter, a value that is not a number at all where
//! serde reads one) is a malformed query, answered as such.

use std::fmt;
use std::str::FromStr;

use serde::de::{Deserialize, Deserializer};

use crate::constraints::{IntegerIn, refuse};

/// A present parameter's text.
fn text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    String::deserialize(deserializer)
}

/// A whole number from `MIN` to `MAX`, spelled in decimal.
pub fn integer_in<'de, D: Deserializer<'de>, const MIN: i64, const MAX: i64>(
    deserializer: D,
) -> Result<Option<i64>, D::Error> {
    let raw = text(deserializer)?;
    IntegerIn::<MIN, MAX>::parse(&raw)
        .map(Some)
        .ok_or_else(|| refuse(&IntegerIn::<MIN, MAX>::requirement()))
}

/// A value of `T` by its `FromStr` spelling; the refusal is `T`'s parse error.
pub fn parsed<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: fmt::Display,
{
    let raw = text(deserializer)?;
    raw.parse()
        .map(Some)
        .map_err(|e: T::Err| refuse(&e.to_string()))
}

/// A value of `T` by its wire name, between optional white space; empty (or blank) for none.
/// `valid` lists the wire names, for the refusal.
pub fn wire_name_or_empty<'de, D, T>(deserializer: D, valid: &str) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let raw = text(deserializer)?;
    let value = raw.trim();
    if value.is_empty() {
        return Ok(None);
    }
    serde_json::from_value::<T>(serde_json::Value::String(value.to_owned()))
        .map(Some)
        .map_err(|_| refuse(&format!("{value:?} is not one of {valid}")))
}

/// Text between optional white space; empty (or blank) for none.
pub fn trimmed_or_empty<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    let raw = text(deserializer)?;
    let value = raw.trim();
    Ok((!value.is_empty()).then(|| value.to_owned()))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    struct Limit {
        #[serde(default, deserialize_with = "integer_in::<_, 1, 10>")]
        limit: Option<i64>,
    }

    #[test]
    fn a_refusal_is_an_invalid_value_naming_what_is_accepted() {
        let read = |text: &str| serde_json::from_str::<Limit>(text).map(|l| l.limit);
        assert_eq!(read(r#"{"limit": "3"}"#).ok(), Some(Some(3)));
        assert_eq!(read("{}").ok(), Some(None));
        let refused = read(r#"{"limit": "11"}"#).expect_err("out of range");
        assert!(
            refused
                .to_string()
                .starts_with("invalid value: must be an integer from 1 to 10, expected a value"),
            "{refused}"
        );
    }
}
