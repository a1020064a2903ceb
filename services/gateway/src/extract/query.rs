//! The query string extractor.
//!
//! A query is read by serde into the route's query type (`pulse_api`), whose fields are typed
//! and read their values with the refusals the API states for them (`pulse_api::query`). The
//! reader here keeps the two ways a query fails apart, which serde's text errors cannot: a
//! parameter's own refusal (serde's `invalid_value` with the refusal as its unexpected part)
//! answers `<parameter>: <refusal>`; anything else (an unknown parameter, one given twice, a
//! value that is not a number where one is read) is a malformed query, answered as
//! `Failed to deserialize query string: <what serde says>`. Values are parsed as
//! `serde_urlencoded` parses them (`+` and percent-decoding, numbers and booleans by their
//! `FromStr`), so every message is what a plain query reader would have said.

use std::fmt;
use std::marker::PhantomData;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::value::{MapDeserializer, StringDeserializer};
use serde::de::{self, DeserializeOwned, Deserializer, IntoDeserializer, Unexpected, Visitor};

use super::{Refusals, Standard};
use crate::error::ApiError;

/// The request's query string as `T`, refused with `R`'s code.
pub struct ApiQuery<T, R = Standard>(pub T, pub PhantomData<R>);

impl<T, R> ApiQuery<T, R> {
    /// A query already typed (what a web page hands the API's handler).
    pub fn new(query: T) -> Self {
        Self(query, PhantomData)
    }
}

impl<T: DeserializeOwned, R: Refusals> ApiQuery<T, R> {
    /// Reads `query` (the text after `?`) as the handler would receive it.
    pub fn parse(query: &str) -> Result<Self, ApiError> {
        let malformed =
            |why: &dyn fmt::Display| format!("Failed to deserialize query string: {why}");
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query)
            .map_err(|e| ApiError::new(R::INVALID_PARAMETER, malformed(&e)))?;
        let values = pairs.into_iter().map(|(name, value)| (name, Value(value)));
        serde_path_to_error::deserialize(MapDeserializer::new(values))
            .map(Self::new)
            .map_err(|e| {
                let message = match e.inner() {
                    QueryError::Refused(why) => format!("{}: {why}", e.path()),
                    QueryError::Malformed(_) => malformed(&e),
                };
                ApiError::new(R::INVALID_PARAMETER, message)
            })
    }
}

impl<S, T, R> FromRequestParts<S> for ApiQuery<T, R>
where
    S: Send + Sync,
    T: DeserializeOwned,
    R: Refusals,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Self::parse(parts.uri.query().unwrap_or_default())
    }
}

/// Why a query was not read.
#[derive(Debug)]
enum QueryError {
    /// A parameter's own refusal of its value (the parameter is not named in it).
    Refused(String),
    /// Anything else serde found wrong.
    Malformed(String),
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueryError::Refused(why) | QueryError::Malformed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for QueryError {}

impl de::Error for QueryError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        QueryError::Malformed(message.to_string())
    }

    fn invalid_value(unexpected: Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        match unexpected {
            Unexpected::Other(refusal) => QueryError::Refused(refusal.to_owned()),
            other => Self::custom(format_args!("invalid value: {other}, expected {expected}")),
        }
    }
}

/// One parameter's value.
struct Value(String);

impl<'de> IntoDeserializer<'de, QueryError> for Value {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

macro_rules! parsed {
    ($($method:ident => $visit:ident,)*) => {
        $(fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, QueryError> {
            visitor.$visit(self.0.parse().map_err(de::Error::custom)?)
        })*
    };
}

impl<'de> Deserializer<'de> for Value {
    type Error = QueryError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, QueryError> {
        visitor.visit_string(self.0)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, QueryError> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, QueryError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, QueryError> {
        let variant: StringDeserializer<QueryError> = self.0.into_deserializer();
        visitor.visit_enum(variant)
    }

    parsed! {
        deserialize_bool => visit_bool,
        deserialize_i8 => visit_i8,
        deserialize_i16 => visit_i16,
        deserialize_i32 => visit_i32,
        deserialize_i64 => visit_i64,
        deserialize_u8 => visit_u8,
        deserialize_u16 => visit_u16,
        deserialize_u32 => visit_u32,
        deserialize_u64 => visit_u64,
        deserialize_f32 => visit_f32,
        deserialize_f64 => visit_f64,
    }

    serde::forward_to_deserialize_any! {
        char str string bytes byte_buf unit unit_struct seq tuple tuple_struct map struct
        identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use pulse_capabilities::ErrorCode;
    use serde::Deserialize;

    use super::*;
    use crate::extract::FindingRequest;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Sample {
        #[serde(default, deserialize_with = "pulse_api::query::integer_in::<_, 1, 10>")]
        limit: Option<i64>,
        #[serde(default)]
        flag: bool,
        #[serde(default, rename = "type")]
        kind: Option<pulse_domain::resource::ResourceType>,
        #[serde(default)]
        text: Option<String>,
    }

    fn read(query: &str) -> Result<Sample, ApiError> {
        ApiQuery::<Sample>::parse(query).map(|q| q.0)
    }

    #[test]
    fn values_are_read_as_a_plain_query_reader_reads_them() {
        let sample = read("limit=3&flag=true&type=host&text=a+b%21").expect("valid");
        assert_eq!(sample.limit, Some(3));
        assert!(sample.flag);
        assert_eq!(
            sample.kind,
            Some(pulse_domain::resource::ResourceType::Host)
        );
        assert_eq!(sample.text.as_deref(), Some("a b!"));
        assert!(read("").expect("empty").limit.is_none());
    }

    #[test]
    fn a_parameter_refusal_names_the_parameter() {
        let refused = read("limit=11").expect_err("out of range");
        assert_eq!(refused.code, ErrorCode::InvalidParameter);
        assert_eq!(refused.message, "limit: must be an integer from 1 to 10");
    }

    #[test]
    fn a_malformed_query_says_what_serde_says() {
        for (query, message) in [
            (
                "flag=yes",
                "Failed to deserialize query string: flag: provided string was not `true` or \
                 `false`",
            ),
            (
                "zzz=1",
                "Failed to deserialize query string: zzz: unknown field `zzz`, expected one of \
                 `limit`, `flag`, `type`, `text`",
            ),
            (
                "limit=1&limit=2",
                "Failed to deserialize query string: duplicate field `limit`",
            ),
            (
                "type=k8s-pod",
                "Failed to deserialize query string: type: unknown variant `k8s-pod`, expected \
                 one of `host`, `app-container`, `service`, `storage`, `node`, `vm`, \
                 `system-container`, `physical-disk`",
            ),
        ] {
            let refused = read(query).expect_err(query);
            assert_eq!(refused.code, ErrorCode::InvalidParameter, "{query}");
            assert_eq!(refused.message, message, "{query}");
        }
    }

    #[test]
    fn the_route_family_decides_the_code() {
        let refused = ApiQuery::<Sample, FindingRequest>::parse("limit=0")
            .map(|q| q.0)
            .expect_err("refused");
        assert_eq!(refused.code, ErrorCode::InvalidFindingRequest);
    }
}
