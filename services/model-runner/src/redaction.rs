//! The provider-bound sanitizer: every `ChatRequest` passes through [`Redactor::sanitize`] right
//! before transport. It strips credentials (known token formats, configured secrets, secret-named
//! assignments, PEM private keys) on every route, and replaces local-only resource identifiers
//! with opaque placeholders on routes that leave the local trust boundary.
//!
//! The report it returns counts redactions per kind and never carries a redacted value; it is
//! what the export audit stores.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::{Captures, Regex};
use serde::Serialize;
use serde_json::Value;

use crate::provider::types::{ChatRequest, Message, Tool, ToolCall};

/// What was redacted. The wire value appears in the marker `[REDACTED:<kind>]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RedactionKind {
    PrivateKey,
    ConfiguredSecret,
    UrlCredentials,
    PulseToken,
    AwsAccessKey,
    GithubToken,
    SlackToken,
    AnthropicKey,
    OpenaiKey,
    Jwt,
    BearerToken,
    BasicAuth,
    SecretAssignment,
    LocalOnlyResource,
}

impl RedactionKind {
    pub const ALL: &'static [RedactionKind] = &[
        Self::PrivateKey,
        Self::ConfiguredSecret,
        Self::UrlCredentials,
        Self::PulseToken,
        Self::AwsAccessKey,
        Self::GithubToken,
        Self::SlackToken,
        Self::AnthropicKey,
        Self::OpenaiKey,
        Self::Jwt,
        Self::BearerToken,
        Self::BasicAuth,
        Self::SecretAssignment,
        Self::LocalOnlyResource,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::PrivateKey => "private_key",
            Self::ConfiguredSecret => "configured_secret",
            Self::UrlCredentials => "url_credentials",
            Self::PulseToken => "pulse_token",
            Self::AwsAccessKey => "aws_access_key",
            Self::GithubToken => "github_token",
            Self::SlackToken => "slack_token",
            Self::AnthropicKey => "anthropic_key",
            Self::OpenaiKey => "openai_key",
            Self::Jwt => "jwt",
            Self::BearerToken => "bearer_token",
            Self::BasicAuth => "basic_auth",
            Self::SecretAssignment => "secret_assignment",
            Self::LocalOnlyResource => "local_only_resource",
        }
    }

    /// The text that replaces a redacted value.
    pub fn marker(self) -> String {
        format!("{MARKER_PREFIX}{}]", self.as_str())
    }
}

const MARKER_PREFIX: &str = "[REDACTED:";
/// Shortest configured secret or local-only identifier accepted: shorter ones would shred
/// ordinary text.
pub const MIN_CONFIGURED_LEN: usize = 4;

/// Whether the destination is inside the local trust boundary (a local model server gets
/// local-only resource identifiers; credentials are stripped everywhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TrustBoundary {
    Local,
    External,
}

/// Where the request goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Destination {
    /// `provider:model`.
    pub route: String,
    pub boundary: TrustBoundary,
}

impl Destination {
    pub fn external(route: impl Into<String>) -> Self {
        Self {
            route: route.into(),
            boundary: TrustBoundary::External,
        }
    }

    pub fn local(route: impl Into<String>) -> Self {
        Self {
            route: route.into(),
            boundary: TrustBoundary::Local,
        }
    }
}

/// One resource whose identifiers (id, name, aliases, hostnames, addresses) never leave the
/// local trust boundary.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LocalOnlyResource {
    pub identifiers: Vec<String>,
}

/// What to redact beyond the built-in credential formats.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RedactionConfig {
    /// Exact secret strings (e.g. the provider keys and tokens this deployment holds).
    pub secrets: Vec<String>,
    pub local_only: Vec<LocalOnlyResource>,
}

/// A configuration entry the sanitizer refuses. Never names the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedactionConfigError {
    #[error("configured secret #{index} is shorter than {MIN_CONFIGURED_LEN} characters")]
    SecretTooShort { index: usize },
    #[error(
        "identifier #{identifier} of local-only resource #{resource} is shorter than {MIN_CONFIGURED_LEN} characters"
    )]
    IdentifierTooShort { resource: usize, identifier: usize },
    #[error("configured value #{index} occurs inside a redaction marker")]
    CollidesWithMarker { index: usize },
}

/// Counts per kind for one sanitized request. Serializable: the export audit stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RedactionReport {
    pub route: String,
    pub boundary: TrustBoundary,
    /// Whether local-only identifiers were withheld (external destinations only).
    pub local_only_withheld: bool,
    pub counts: BTreeMap<RedactionKind, u64>,
    pub total: u64,
}

impl RedactionReport {
    fn add(&mut self, kind: RedactionKind, n: u64) {
        if n > 0 {
            *self.counts.entry(kind).or_insert(0) += n;
            self.total += n;
        }
    }
}

/// A built-in credential pattern. `keep` is the capture group kept in front of the marker
/// (a scheme or header word), `accept` rejects lookalikes.
struct Pattern {
    kind: RedactionKind,
    regex: Regex,
    keep: Option<usize>,
    suffix: &'static str,
    secret_group: usize,
    accept: fn(&str) -> bool,
}

fn any(_: &str) -> bool {
    true
}

fn has_digit(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_digit())
}

/// Random tokens have digits or mixed case; words in prose ("bearer authentication") do not.
fn looks_random(s: &str) -> bool {
    has_digit(s)
        || (s.bytes().any(|b| b.is_ascii_uppercase()) && s.bytes().any(|b| b.is_ascii_lowercase()))
}

fn pattern(
    kind: RedactionKind,
    re: &str,
    keep: Option<usize>,
    suffix: &'static str,
    secret_group: usize,
    accept: fn(&str) -> bool,
) -> Pattern {
    Pattern {
        kind,
        // Static patterns, compiled once; a test compiles every one of them.
        regex: Regex::new(re).expect("static redaction pattern compiles"),
        keep,
        suffix,
        secret_group,
        accept,
    }
}

static PRIVATE_KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----|[A-Za-z0-9+/=\s:,-]*)",
    )
    .expect("static redaction pattern compiles")
});

static TOKEN_PATTERNS: LazyLock<Vec<Pattern>> = LazyLock::new(|| {
    use RedactionKind as K;
    vec![
        pattern(
            K::UrlCredentials,
            r#"(?i)\b([a-z][a-z0-9+.-]{1,15}://)([^\s/@:"'<>\[\]]+:[^\s/@"'<>\[\]]+)@"#,
            Some(1),
            "@",
            2,
            any,
        ),
        pattern(K::PulseToken, r"\b(pulse_[0-9a-f]{64})\b", None, "", 1, any),
        pattern(
            K::AwsAccessKey,
            r"\b((?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16})\b",
            None,
            "",
            1,
            any,
        ),
        pattern(
            K::GithubToken,
            r"\b(gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
            None,
            "",
            1,
            any,
        ),
        pattern(
            K::SlackToken,
            r"\b(xox[abposre]-[A-Za-z0-9-]{10,})",
            None,
            "",
            1,
            any,
        ),
        pattern(
            K::AnthropicKey,
            r"\b(sk-ant-[A-Za-z0-9_-]{20,})",
            None,
            "",
            1,
            any,
        ),
        pattern(
            K::OpenaiKey,
            r"\b(sk-[A-Za-z0-9_-]{20,})",
            None,
            "",
            1,
            has_digit,
        ),
        pattern(
            K::Jwt,
            r"\b(eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*)",
            None,
            "",
            1,
            any,
        ),
        pattern(
            K::BasicAuth,
            r#"(?i)\b(authorization\s*[:=]\s*"?basic\s+)([A-Za-z0-9+/=]{6,})"#,
            Some(1),
            "",
            2,
            any,
        ),
        pattern(
            K::BearerToken,
            r"(?i)\b((?:bearer|token)\s+)([A-Za-z0-9._~+/=-]{8,})",
            Some(1),
            "",
            2,
            looks_random,
        ),
    ]
});

/// `key = value`, `key: value`, `"key": "value"`: the key decides (see [`is_secret_key`]).
static ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(["']?)([A-Za-z_][A-Za-z0-9_.-]*)(\\?["']?\s*[:=]\s*)(\\"[^"\n]*?\\"|"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[^\s,;&"'<>{}\[\]()\\]+)"#,
    )
    .expect("static redaction pattern compiles")
});

/// Whether a field name names a secret: one of its words (split at `_ - .`, spaces and camelCase)
/// is a secret word, or two adjacent words form one (`api` `key`).
pub fn is_secret_key(key: &str) -> bool {
    const WORDS: &[&str] = &[
        "password",
        "passwd",
        "passphrase",
        "secret",
        "secrets",
        "token",
        "apikey",
        "accesskey",
        "privatekey",
        "credential",
        "credentials",
        "auth",
        "authorization",
    ];
    let mut words: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut prev_lower = false;
    for c in key.chars() {
        if !c.is_ascii_alphanumeric() {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        current.push(c.to_ascii_lowercase());
    }
    if !current.is_empty() {
        words.push(current);
    }
    words.iter().any(|w| WORDS.contains(&w.as_str()))
        || words
            .windows(2)
            .any(|pair| WORDS.contains(&format!("{}{}", pair[0], pair[1]).as_str()))
}

const AUTH_SCHEMES: &[&str] = &["bearer", "basic", "token", "digest", "negotiate"];

fn is_marker(value: &str) -> bool {
    let inner = value.trim_matches(|c| c == '"' || c == '\'' || c == '\\');
    inner.starts_with(MARKER_PREFIX)
}

/// Redacts provider-bound requests for one destination.
#[derive(Debug, Clone)]
pub struct Redactor {
    destination: Destination,
    /// Longest first, so a secret containing another is replaced whole.
    secrets: Vec<String>,
    /// (lowercased identifier, placeholder), longest identifier first.
    local_only: Vec<(String, String)>,
}

impl Redactor {
    pub fn new(
        destination: Destination,
        config: &RedactionConfig,
    ) -> Result<Self, RedactionConfigError> {
        let markers: String = RedactionKind::ALL
            .iter()
            .map(|k| k.marker())
            .collect::<Vec<_>>()
            .join(" ")
            .to_ascii_lowercase();
        let mut secrets = Vec::new();
        for (index, secret) in config.secrets.iter().enumerate() {
            if secret.chars().count() < MIN_CONFIGURED_LEN {
                return Err(RedactionConfigError::SecretTooShort { index });
            }
            if markers.contains(&secret.to_ascii_lowercase()) {
                return Err(RedactionConfigError::CollidesWithMarker { index });
            }
            secrets.push(secret.clone());
        }
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        let mut local_only = Vec::new();
        for (resource, entry) in config.local_only.iter().enumerate() {
            let placeholder = format!(
                "{MARKER_PREFIX}{}:{}]",
                RedactionKind::LocalOnlyResource.as_str(),
                resource + 1
            );
            for (identifier, id) in entry.identifiers.iter().enumerate() {
                if id.chars().count() < MIN_CONFIGURED_LEN {
                    return Err(RedactionConfigError::IdentifierTooShort {
                        resource,
                        identifier,
                    });
                }
                let lowered = id.to_ascii_lowercase();
                if markers.contains(&lowered) {
                    return Err(RedactionConfigError::CollidesWithMarker { index: resource });
                }
                local_only.push((lowered, placeholder.clone()));
            }
        }
        local_only.sort_by_key(|(id, _)| std::cmp::Reverse(id.len()));
        Ok(Self {
            destination,
            secrets,
            local_only,
        })
    }

    pub fn destination(&self) -> &Destination {
        &self.destination
    }

    fn withholds_local_only(&self) -> bool {
        self.destination.boundary == TrustBoundary::External
    }

    /// Sanitizes every string of the request in place: message contents, reasoning, tool-call
    /// arguments (recursively, keys included), tool results, tool descriptions and schemas.
    pub fn sanitize(&self, request: &mut ChatRequest) -> RedactionReport {
        let mut report = RedactionReport {
            route: self.destination.route.clone(),
            boundary: self.destination.boundary,
            local_only_withheld: self.withholds_local_only(),
            counts: BTreeMap::new(),
            total: 0,
        };
        for message in &mut request.messages {
            match message {
                Message::System { content } | Message::User { content } => {
                    self.sanitize_string(content, &mut report)
                }
                Message::Assistant {
                    content,
                    tool_calls,
                    reasoning_content,
                } => {
                    self.sanitize_string(content, &mut report);
                    if let Some(reasoning) = reasoning_content {
                        self.sanitize_string(reasoning, &mut report);
                    }
                    for call in tool_calls {
                        self.sanitize_call(call, &mut report);
                    }
                }
                Message::Tool(result) => self.sanitize_string(&mut result.content, &mut report),
            }
        }
        for tool in &mut request.tools {
            self.sanitize_tool(tool, &mut report);
        }
        report
    }

    fn sanitize_call(&self, call: &mut ToolCall, report: &mut RedactionReport) {
        self.sanitize_value(&mut call.arguments, report);
    }

    fn sanitize_tool(&self, tool: &mut Tool, report: &mut RedactionReport) {
        self.sanitize_string(&mut tool.description, report);
        self.sanitize_value(&mut tool.parameters, report);
    }

    fn sanitize_value(&self, value: &mut Value, report: &mut RedactionReport) {
        match value {
            Value::String(s) => self.sanitize_string(s, report),
            Value::Array(items) => {
                for item in items {
                    self.sanitize_value(item, report);
                }
            }
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (mut key, mut item) in entries {
                    let secret_field = is_secret_key(&key);
                    self.sanitize_string(&mut key, report);
                    match &item {
                        Value::String(s) if secret_field && !s.is_empty() && !is_marker(s) => {
                            item = Value::String(RedactionKind::SecretAssignment.marker());
                            report.add(RedactionKind::SecretAssignment, 1);
                        }
                        Value::Number(_) if secret_field => {
                            item = Value::String(RedactionKind::SecretAssignment.marker());
                            report.add(RedactionKind::SecretAssignment, 1);
                        }
                        _ => self.sanitize_value(&mut item, report),
                    }
                    map.insert(key, item);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// Sanitizes one string in place.
    pub fn sanitize_string(&self, text: &mut String, report: &mut RedactionReport) {
        if let Some(out) = self.sanitize_text(text, report) {
            *text = out;
        }
    }

    /// The sanitized text, or `None` when nothing changed.
    fn sanitize_text(&self, text: &str, report: &mut RedactionReport) -> Option<String> {
        let mut current: Option<String> = None;
        let mut apply = |f: &dyn Fn(&str, &mut RedactionReport) -> Option<String>,
                         report: &mut RedactionReport| {
            let input = current.as_deref().unwrap_or(text);
            if let Some(out) = f(input, report) {
                current = Some(out);
            }
        };
        apply(&redact_private_keys, report);
        apply(&|t, r| self.redact_secrets(t, r), report);
        apply(&redact_token_formats, report);
        apply(&redact_assignments, report);
        if self.withholds_local_only() {
            apply(&|t, r| self.redact_local_only(t, r), report);
        }
        current
    }

    fn redact_secrets(&self, text: &str, report: &mut RedactionReport) -> Option<String> {
        let mut out: Option<String> = None;
        for secret in &self.secrets {
            let input = out.as_deref().unwrap_or(text);
            let n = input.matches(secret.as_str()).count();
            if n > 0 {
                out =
                    Some(input.replace(secret.as_str(), &RedactionKind::ConfiguredSecret.marker()));
                report.add(RedactionKind::ConfiguredSecret, n as u64);
            }
        }
        out
    }

    fn redact_local_only(&self, text: &str, report: &mut RedactionReport) -> Option<String> {
        let mut out: Option<String> = None;
        for (identifier, placeholder) in &self.local_only {
            let input = out.as_deref().unwrap_or(text);
            if let Some((replaced, n)) = replace_identifier(input, identifier, placeholder) {
                report.add(RedactionKind::LocalOnlyResource, n);
                out = Some(replaced);
            }
        }
        out
    }
}

fn redact_private_keys(text: &str, report: &mut RedactionReport) -> Option<String> {
    if !text.contains("PRIVATE KEY-----") {
        return None;
    }
    let n = PRIVATE_KEY.find_iter(text).count();
    if n == 0 {
        return None;
    }
    report.add(RedactionKind::PrivateKey, n as u64);
    Some(
        PRIVATE_KEY
            .replace_all(text, RedactionKind::PrivateKey.marker().as_str())
            .into_owned(),
    )
}

fn redact_token_formats(text: &str, report: &mut RedactionReport) -> Option<String> {
    let mut out: Option<String> = None;
    for p in TOKEN_PATTERNS.iter() {
        let input = out.as_deref().unwrap_or(text);
        let mut n = 0u64;
        let replaced = p.regex.replace_all(input, |caps: &Captures<'_>| {
            let whole = caps.get(0).map_or("", |m| m.as_str());
            let secret = caps.get(p.secret_group).map_or("", |m| m.as_str());
            if !(p.accept)(secret) {
                return whole.to_owned();
            }
            n += 1;
            let kept = p.keep.and_then(|g| caps.get(g)).map_or("", |m| m.as_str());
            format!("{kept}{}{}", p.kind.marker(), p.suffix)
        });
        if n > 0 {
            report.add(p.kind, n);
            out = Some(replaced.into_owned());
        }
    }
    out
}

fn redact_assignments(text: &str, report: &mut RedactionReport) -> Option<String> {
    let mut n = 0u64;
    let replaced = ASSIGNMENT.replace_all(text, |caps: &Captures<'_>| {
        let part = |i: usize| caps.get(i).map_or("", |m| m.as_str());
        let (open, key, sep, value) = (part(1), part(2), part(3), part(4));
        let empty = matches!(value, "\"\"" | "''");
        // `Authorization: Bearer <token>`: the scheme word stays, the token patterns took the
        // credential that follows it.
        let scheme = AUTH_SCHEMES.iter().any(|w| value.eq_ignore_ascii_case(w));
        if !is_secret_key(key) || empty || scheme || is_marker(value) {
            return part(0).to_owned();
        }
        n += 1;
        let marker = RedactionKind::SecretAssignment.marker();
        match value.chars().next() {
            Some('\\') => format!("{open}{key}{sep}\\\"{marker}\\\""),
            Some(q @ ('"' | '\'')) => format!("{open}{key}{sep}{q}{marker}{q}"),
            _ => format!("{open}{key}{sep}{marker}"),
        }
    });
    if n == 0 {
        return None;
    }
    report.add(RedactionKind::SecretAssignment, n);
    Some(replaced.into_owned())
}

/// Replaces ASCII-case-insensitive occurrences of `identifier` (already lowercased) that are not
/// part of a longer word (neighbours are not alphanumeric or `_`).
fn replace_identifier(text: &str, identifier: &str, placeholder: &str) -> Option<(String, u64)> {
    if identifier.is_empty() {
        return None;
    }
    // ASCII lowercasing keeps byte offsets, so positions found here are valid in `text`.
    let lowered = text.to_ascii_lowercase();
    let is_word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    let mut count = 0u64;
    let mut from = 0;
    while let Some(pos) = lowered.get(from..).and_then(|rest| rest.find(identifier)) {
        let start = from + pos;
        let end = start + identifier.len();
        let before = text.get(..start).and_then(|s| s.chars().next_back());
        let after = text.get(end..).and_then(|s| s.chars().next());
        if !is_word(before) && !is_word(after) {
            out.push_str(text.get(last..start).unwrap_or_default());
            out.push_str(placeholder);
            last = end;
            count += 1;
            from = end;
        } else {
            // Step past the first character of this occurrence.
            from = start + lowered[start..].chars().next().map_or(1, char::len_utf8);
        }
    }
    if count == 0 {
        return None;
    }
    out.push_str(text.get(last..).unwrap_or_default());
    Some((out, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_static_pattern_compiles() {
        assert_eq!(TOKEN_PATTERNS.len(), 10);
        LazyLock::force(&PRIVATE_KEY);
        LazyLock::force(&ASSIGNMENT);
    }

    #[test]
    fn secret_keys_are_recognised_by_their_words() {
        for key in [
            "password",
            "DB_PASSWORD",
            "passwd",
            "client_secret",
            "apiKey",
            "x-api-key",
            "API_KEY",
            "apikey",
            "aws_access_key_id",
            "private_key",
            "PrivateKey",
            "credential",
            "auth",
            "AUTH_TOKEN",
            "authorization",
            "githubToken",
        ] {
            assert!(is_secret_key(key), "{key}");
        }
        for key in [
            "author",
            "tokens",
            "max_tokens",
            "input_tokens",
            "passage",
            "secretary",
            "PWD",
            "keyboard",
            "host",
        ] {
            assert!(!is_secret_key(key), "{key}");
        }
    }

    #[test]
    fn double_encoded_json_and_truncated_pem_blocks_are_redacted() {
        let redactor = Redactor::new(Destination::external("a:b"), &RedactionConfig::default())
            .expect("empty config is valid");
        let mut report = RedactionReport {
            route: String::new(),
            boundary: TrustBoundary::External,
            local_only_withheld: true,
            counts: BTreeMap::new(),
            total: 0,
        };
        let mut text = r#"{\"db_password\": \"s3cr3t-value\", \"port\": 5432}"#.to_owned();
        redactor.sanitize_string(&mut text, &mut report);
        assert_eq!(
            text,
            r#"{\"db_password\": \"[REDACTED:secret_assignment]\", \"port\": 5432}"#
        );
        let mut pem = "key:\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkq\nhkiG9w0B".to_owned();
        redactor.sanitize_string(&mut pem, &mut report);
        assert_eq!(pem, "key:\n[REDACTED:private_key]");
        let before = pem.clone();
        redactor.sanitize_string(&mut pem, &mut report);
        assert_eq!(pem, before);
    }

    #[test]
    fn identifiers_match_whole_words_only() {
        let r = replace_identifier(
            "vm-secret01 and vm-secret011 and VM-SECRET01.",
            "vm-secret01",
            "[X]",
        );
        assert_eq!(r, Some(("[X] and vm-secret011 and [X].".to_owned(), 2)));
    }
}
