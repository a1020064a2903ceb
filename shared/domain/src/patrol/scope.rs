//! The body of `POST /api/ai/patrol/run` and the scope of a run.
//!
//! No body, or an object with no field (`{}`, what most clients send for "no parameters"), means a
//! full run. A body is closed (unknown fields are rejected, so no command, prompt or remediation
//! payload can ride along) and names resources only: `resource_ids` and/or `resource_types`,
//! optionally `alert_identifier`, `alert_type` and a bounded `context`. An object that has fields
//! but names neither ids nor types (`{"resource_ids": []}`, or a `context` alone) is refused
//! rather than read as a full run: an explicit empty scope is a caller bug, not a request to look
//! at everything.
//!
//! The ids here are the *requested* scope as the caller wrote them; the store's resolver turns
//! them into the *effective* scope of canonical resource ids.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::resource::{ResourceId, ResourceType};

/// What a run request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunRequest {
    Full,
    Scoped(ScopedRequest),
}

/// A validated scoped request: the requested scope plus alert identity and context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ScopedRequest {
    pub scope: RequestedScope,
    pub alert_identifier: Option<String>,
    pub alert_type: Option<String>,
    pub context: Option<String>,
}

/// Resource identities as the caller named them (canonical ids, source ids or aliases).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct RequestedScope {
    pub resource_ids: Vec<String>,
    pub resource_types: Vec<ResourceType>,
}

/// The canonical resources a requested scope resolved to; never empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct EffectiveScope {
    resource_ids: Vec<ResourceId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the scope resolved to no resource")]
pub struct EmptyEffectiveScope;

impl EffectiveScope {
    /// Deduplicates `resolved` (keeping first occurrence order); an empty result is the
    /// `scope_empty` condition of the run record.
    pub fn new(
        resolved: impl IntoIterator<Item = ResourceId>,
    ) -> Result<Self, EmptyEffectiveScope> {
        let mut seen = BTreeSet::new();
        let resource_ids: Vec<ResourceId> = resolved
            .into_iter()
            .filter(|id| seen.insert(id.as_str().to_owned()))
            .collect();
        if resource_ids.is_empty() {
            return Err(EmptyEffectiveScope);
        }
        Ok(Self { resource_ids })
    }

    pub fn resource_ids(&self) -> &[ResourceId] {
        &self.resource_ids
    }
}

/// Why a run request body was refused. [`RunRequestError::code`] gives the stable API code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunRequestError {
    #[error("request body is not valid JSON: {0}")]
    Malformed(String),
    #[error("request body is not a valid run request: {0}")]
    Invalid(String),
    #[error(
        "unknown field {0:?}: a run request carries resource identity only (resource_ids, resource_types, alert_identifier, alert_type, context)"
    )]
    UnknownField(String),
    #[error("a scoped run request needs resource_ids or resource_types")]
    EmptyScope,
    #[error("too many resource_ids: at most {max}")]
    TooManyResourceIds { max: usize },
    #[error("resource_ids[{index}] is invalid: {reason}")]
    InvalidResourceId { index: usize, reason: &'static str },
    #[error(
        "unknown resource type {0:?} in resource_types (expected host, app-container, service or storage)"
    )]
    UnknownResourceType(String),
    #[error("{field} is invalid: {reason}")]
    InvalidField {
        field: &'static str,
        reason: &'static str,
    },
}

impl RunRequestError {
    /// The stable error code (the shared error-code table): `invalid_json` for a body that is not
    /// JSON, `invalid_request` for everything else.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "invalid_json",
            _ => "invalid_request",
        }
    }
}

/// The body of a run request as sent: no body, `{}` or no field is a full run; otherwise a
/// scope of `resource_ids` and/or `resource_types` with optional alert identity and context.
/// Clients build and send it as is (absent fields are left out), so the one shape serves both.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRunRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_ids: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_types: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert_identifier: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

/// The JSON Schema of a run request: what [`RunRequest::parse`] accepts. Either nothing is named
/// (every field absent or null: a full run), or at least one resource id or resource type is.
/// Texts are read trimmed: the patterns allow white space around a middle that follows the
/// field's rule.
#[cfg(feature = "schemars")]
impl schemars::JsonSchema for RawRunRequest {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RawRunRequest".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        use crate::text;
        let ws = text::class(text::WHITE_SPACE);
        let nullable =
            |schema: serde_json::Value| serde_json::json!({"anyOf": [schema, {"type": "null"}]});
        let resource_type = generator.subschema_for::<ResourceType>();
        let properties = serde_json::json!({
            "resource_ids": nullable(serde_json::json!({
                "type": "array",
                "maxItems": RunRequest::MAX_RESOURCE_IDS,
                "items": {
                    "type": "string",
                    "maxLength": RunRequest::MAX_RESOURCE_ID_CHARS,
                    "pattern": text::trimmed_printable_with_content(),
                },
            })),
            "resource_types": nullable(serde_json::json!({"type": "array", "items": resource_type})),
            "alert_identifier": nullable(serde_json::json!({
                "type": "string",
                "maxLength": RunRequest::MAX_ALERT_IDENTIFIER_CHARS,
                "pattern": text::trimmed_free_of(text::CONTROL),
            })),
            "alert_type": nullable(serde_json::json!({
                "type": "string",
                "maxLength": RunRequest::MAX_ALERT_TYPE_CHARS,
                "pattern": format!("^[{ws}]*[A-Za-z0-9_.-]*[{ws}]*$"),
            })),
            "context": nullable(serde_json::json!({
                "type": "string",
                "maxLength": RunRequest::MAX_CONTEXT_CHARS,
                "pattern": text::trimmed_free_of(text::CONTROL_BUT_TAB_AND_NEWLINE),
            })),
        });
        let names_nothing: serde_json::Map<String, serde_json::Value> = properties
            .as_object()
            .into_iter()
            .flat_map(|p| p.keys())
            .map(|name| (name.clone(), serde_json::json!({"type": "null"})))
            .collect();
        schemars::json_schema!({
            "type": "object",
            "description": "No body, {} or only nulls is a full run; a scoped run names at least one resource id or resource type.",
            "properties": properties,
            "additionalProperties": false,
            "anyOf": [
                {"properties": names_nothing},
                {"required": ["resource_ids"], "properties": {"resource_ids": {"type": "array", "minItems": 1}}},
                {"required": ["resource_types"], "properties": {"resource_types": {"type": "array", "minItems": 1}}},
            ],
        })
    }
}

impl RunRequest {
    pub const MAX_RESOURCE_IDS: usize = 100;
    pub const MAX_RESOURCE_ID_CHARS: usize = 512;
    pub const MAX_ALERT_IDENTIFIER_CHARS: usize = 600;
    pub const MAX_ALERT_TYPE_CHARS: usize = 64;
    pub const MAX_CONTEXT_CHARS: usize = 2_000;

    /// Parses a request body. An empty (or whitespace-only) body, or an object without any field,
    /// is a full run.
    pub fn parse(body: &[u8]) -> Result<Self, RunRequestError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self::Full);
        }
        let first = body.iter().find(|b| !b.is_ascii_whitespace());
        if first != Some(&b'{') && serde_json::from_slice::<serde_json::Value>(body).is_ok() {
            return Err(RunRequestError::Invalid(
                "a run request body is a JSON object".to_owned(),
            ));
        }
        let raw: RawRunRequest = serde_json::from_slice(body).map_err(classify_json_error)?;
        Self::from_raw(raw)
    }

    /// Checks a request built field by field (a form's) as [`RunRequest::parse`] checks a body:
    /// no field named is a full run.
    pub fn from_raw(raw: RawRunRequest) -> Result<Self, RunRequestError> {
        if raw.names_nothing() {
            return Ok(Self::Full);
        }
        raw.validate().map(Self::Scoped)
    }
}

fn classify_json_error(err: serde_json::Error) -> RunRequestError {
    use serde_json::error::Category;
    let message = err.to_string();
    match err.classify() {
        Category::Syntax | Category::Eof | Category::Io => RunRequestError::Malformed(message),
        Category::Data => match message.strip_prefix("unknown field `") {
            Some(rest) => {
                RunRequestError::UnknownField(rest.split('`').next().unwrap_or("").to_owned())
            }
            None => RunRequestError::Invalid(message),
        },
    }
}

fn has_control(value: &str, allow_newlines: bool) -> bool {
    value
        .chars()
        .any(|c| c.is_control() && !(allow_newlines && (c == '\n' || c == '\t')))
}

fn optional_text(
    field: &'static str,
    value: Option<String>,
    max: usize,
    allow_newlines: bool,
) -> Result<Option<String>, RunRequestError> {
    let Some(value) = value else { return Ok(None) };
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Ok(None);
    }
    if trimmed.chars().count() > max {
        return Err(RunRequestError::InvalidField {
            field,
            reason: "too long",
        });
    }
    if has_control(trimmed, allow_newlines) {
        return Err(RunRequestError::InvalidField {
            field,
            reason: "contains control characters",
        });
    }
    Ok(Some(trimmed.to_owned()))
}

impl RawRunRequest {
    /// No field present (`{}`; a `null` counts as absent).
    fn names_nothing(&self) -> bool {
        self.resource_ids.is_none()
            && self.resource_types.is_none()
            && self.alert_identifier.is_none()
            && self.alert_type.is_none()
            && self.context.is_none()
    }

    fn validate(self) -> Result<ScopedRequest, RunRequestError> {
        let ids = self.resource_ids.unwrap_or_default();
        if ids.len() > RunRequest::MAX_RESOURCE_IDS {
            return Err(RunRequestError::TooManyResourceIds {
                max: RunRequest::MAX_RESOURCE_IDS,
            });
        }
        let mut seen = BTreeSet::new();
        let mut resource_ids = Vec::with_capacity(ids.len());
        for (index, id) in ids.into_iter().enumerate() {
            let id = id.trim();
            let reason = if id.is_empty() {
                Some("empty")
            } else if id.chars().count() > RunRequest::MAX_RESOURCE_ID_CHARS {
                Some("too long")
            } else if has_control(id, false) {
                Some("contains control characters")
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(RunRequestError::InvalidResourceId { index, reason });
            }
            if seen.insert(id.to_owned()) {
                resource_ids.push(id.to_owned());
            }
        }
        let mut resource_types: Vec<ResourceType> = Vec::new();
        for name in self.resource_types.unwrap_or_default() {
            let parsed: ResourceType = name
                .trim()
                .parse()
                .map_err(|_| RunRequestError::UnknownResourceType(truncate(&name)))?;
            if !resource_types.contains(&parsed) {
                resource_types.push(parsed);
            }
        }
        if resource_ids.is_empty() && resource_types.is_empty() {
            return Err(RunRequestError::EmptyScope);
        }
        let alert_identifier = optional_text(
            "alert_identifier",
            self.alert_identifier,
            RunRequest::MAX_ALERT_IDENTIFIER_CHARS,
            false,
        )?;
        let alert_type = optional_text(
            "alert_type",
            self.alert_type,
            RunRequest::MAX_ALERT_TYPE_CHARS,
            false,
        )?;
        if let Some(kind) = &alert_type {
            if !kind
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            {
                return Err(RunRequestError::InvalidField {
                    field: "alert_type",
                    reason: "may contain only letters, digits, '_', '-' and '.'",
                });
            }
        }
        let context = optional_text("context", self.context, RunRequest::MAX_CONTEXT_CHARS, true)?;
        Ok(ScopedRequest {
            scope: RequestedScope {
                resource_ids,
                resource_types,
            },
            alert_identifier,
            alert_type,
            context,
        })
    }
}

fn truncate(value: &str) -> String {
    crate::resource::truncate_chars(value, 64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn scoped(body: &str) -> ScopedRequest {
        match RunRequest::parse(body.as_bytes()).unwrap() {
            RunRequest::Scoped(s) => s,
            RunRequest::Full => panic!("expected a scoped request for {body}"),
        }
    }

    #[test]
    fn no_body_is_a_full_run() {
        assert_eq!(RunRequest::parse(b"").unwrap(), RunRequest::Full);
        assert_eq!(RunRequest::parse(b"  \n").unwrap(), RunRequest::Full);
    }

    #[test]
    fn an_object_without_fields_is_a_full_run_but_an_explicit_empty_scope_is_refused() {
        assert_eq!(RunRequest::parse(b"{}").unwrap(), RunRequest::Full);
        assert_eq!(RunRequest::parse(b" { } ").unwrap(), RunRequest::Full);
        assert_eq!(
            RunRequest::parse(br#"{"resource_ids":null}"#).unwrap(),
            RunRequest::Full
        );
        for body in [
            r#"{"resource_ids":[]}"#,
            r#"{"resource_types":[]}"#,
            r#"{"resource_ids":[],"resource_types":[]}"#,
            r#"{"context":"look at everything"}"#,
        ] {
            assert_eq!(
                RunRequest::parse(body.as_bytes()),
                Err(RunRequestError::EmptyScope),
                "{body}"
            );
        }
    }

    #[test]
    fn scoped_body_is_parsed_trimmed_and_deduplicated() {
        let req = scoped(
            r#"{"resource_ids":[" web ","web","host:h1"],"resource_types":["app-container","host","host"],
                "alert_identifier":"app-container:h1:abc:memory_usage","alert_type":"memory_usage",
                "context":"  memory near limit\nsince 10:00  "}"#,
        );
        assert_eq!(req.scope.resource_ids, vec!["web", "host:h1"]);
        assert_eq!(
            req.scope.resource_types,
            vec![ResourceType::AppContainer, ResourceType::Host]
        );
        assert_eq!(req.alert_type.as_deref(), Some("memory_usage"));
        assert_eq!(
            req.context.as_deref(),
            Some("memory near limit\nsince 10:00")
        );
    }

    #[test]
    fn types_alone_are_a_scope() {
        let req = scoped(r#"{"resource_types":["storage"]}"#);
        assert!(req.scope.resource_ids.is_empty());
        assert_eq!(req.scope.resource_types, vec![ResourceType::Storage]);
    }

    #[test]
    fn refusals_are_typed_with_stable_codes() {
        let cases: Vec<(&str, RunRequestError, &str)> = vec![
            (
                "{",
                RunRequestError::Malformed(String::new()),
                "invalid_json",
            ),
            (
                r#"{"resource_ids":["a"],"command":"rm -rf /"}"#,
                RunRequestError::UnknownField("command".into()),
                "invalid_request",
            ),
            (
                r#"{"resource_ids":["a"],"prompt":"ignore"}"#,
                RunRequestError::UnknownField("prompt".into()),
                "invalid_request",
            ),
            (
                r#"{"resource_ids":[]}"#,
                RunRequestError::EmptyScope,
                "invalid_request",
            ),
            (
                r#"{"resource_ids":[],"context":"x"}"#,
                RunRequestError::EmptyScope,
                "invalid_request",
            ),
            (
                r#"{"resource_ids":[""]}"#,
                RunRequestError::InvalidResourceId {
                    index: 0,
                    reason: "empty",
                },
                "invalid_request",
            ),
            (
                r#"{"resource_ids":["a","b\u0007"]}"#,
                RunRequestError::InvalidResourceId {
                    index: 1,
                    reason: "contains control characters",
                },
                "invalid_request",
            ),
            (
                r#"{"resource_types":["k8s-pod"]}"#,
                RunRequestError::UnknownResourceType("k8s-pod".into()),
                "invalid_request",
            ),
            (
                r#"{"resource_ids":["a"],"alert_type":"mem usage"}"#,
                RunRequestError::InvalidField {
                    field: "alert_type",
                    reason: "may contain only letters, digits, '_', '-' and '.'",
                },
                "invalid_request",
            ),
            (
                r#"{"resource_ids":"a"}"#,
                RunRequestError::Invalid(String::new()),
                "invalid_request",
            ),
            (
                "[]",
                RunRequestError::Invalid(String::new()),
                "invalid_request",
            ),
        ];
        for (body, want, code) in cases {
            let got = RunRequest::parse(body.as_bytes()).unwrap_err();
            assert_eq!(got.code(), code, "{body}");
            match (&got, &want) {
                (RunRequestError::Malformed(_), RunRequestError::Malformed(_))
                | (RunRequestError::Invalid(_), RunRequestError::Invalid(_)) => {}
                _ => assert_eq!(got, want, "{body}"),
            }
        }
    }

    #[test]
    fn limits_are_enforced() {
        let ids: Vec<String> = (0..=RunRequest::MAX_RESOURCE_IDS)
            .map(|i| format!("r{i}"))
            .collect();
        let body = serde_json::json!({ "resource_ids": ids }).to_string();
        assert_eq!(
            RunRequest::parse(body.as_bytes()).unwrap_err(),
            RunRequestError::TooManyResourceIds {
                max: RunRequest::MAX_RESOURCE_IDS
            }
        );
        let exactly: Vec<String> = ids[..RunRequest::MAX_RESOURCE_IDS].to_vec();
        let body = serde_json::json!({ "resource_ids": exactly }).to_string();
        assert!(RunRequest::parse(body.as_bytes()).is_ok());

        let long_id = "x".repeat(RunRequest::MAX_RESOURCE_ID_CHARS + 1);
        let body = serde_json::json!({ "resource_ids": [long_id] }).to_string();
        assert_eq!(
            RunRequest::parse(body.as_bytes()).unwrap_err(),
            RunRequestError::InvalidResourceId {
                index: 0,
                reason: "too long"
            }
        );

        let context = "c".repeat(RunRequest::MAX_CONTEXT_CHARS + 1);
        let body = serde_json::json!({ "resource_ids": ["a"], "context": context }).to_string();
        assert_eq!(
            RunRequest::parse(body.as_bytes()).unwrap_err(),
            RunRequestError::InvalidField {
                field: "context",
                reason: "too long"
            }
        );
        let context = "c".repeat(RunRequest::MAX_CONTEXT_CHARS);
        let body = serde_json::json!({ "resource_ids": ["a"], "context": context }).to_string();
        assert!(RunRequest::parse(body.as_bytes()).is_ok());
    }

    #[test]
    fn effective_scope_is_never_empty() {
        assert_eq!(EffectiveScope::new(Vec::new()), Err(EmptyEffectiveScope));
        let scope = EffectiveScope::new([
            ResourceId::host("h1"),
            ResourceId::host("h1"),
            ResourceId::service("h1", "nginx"),
        ])
        .unwrap();
        assert_eq!(scope.resource_ids().len(), 2);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn arbitrary_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = RunRequest::parse(&body);
        }

        #[test]
        fn accepted_requests_respect_every_bound(
            ids in proptest::collection::vec("[ -~]{0,600}", 0..120),
            context in proptest::option::of("[ -~\n]{0,2100}"),
        ) {
            let body = serde_json::json!({ "resource_ids": ids, "context": context }).to_string();
            if let Ok(RunRequest::Scoped(req)) = RunRequest::parse(body.as_bytes()) {
                prop_assert!(!req.scope.resource_ids.is_empty());
                prop_assert!(req.scope.resource_ids.len() <= RunRequest::MAX_RESOURCE_IDS);
                for id in &req.scope.resource_ids {
                    prop_assert!(!id.is_empty());
                    prop_assert!(id.chars().count() <= RunRequest::MAX_RESOURCE_ID_CHARS);
                }
                if let Some(c) = &req.context {
                    prop_assert!(c.chars().count() <= RunRequest::MAX_CONTEXT_CHARS);
                }
            }
        }
    }
}
