//! The provider-bound sanitizer: every `ChatRequest` passes through [`Redactor::sanitize`] right
//! before transport. On every route it applies the built-in rules (`crate::rules`) and the
//! deployment's configured secrets; on routes that leave the local trust boundary it also
//! replaces local-only resource identifiers with opaque placeholders.
//!
//! The report it returns counts redactions per kind and never carries a redacted value; it is
//! what the export audit stores.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use pulse_providers::types::{ChatRequest, Message, Tool, ToolCall};
use serde::Serialize;
use serde_json::Value;

use crate::kind::{MARKER_PREFIX, RedactionKind};
use crate::rules::{
    COMPILED, MIN_RULE_LEN, RULES, SET_FIRST_RULE, SET_PRIVATE_KEY, apply_rule, json_document,
    not_path_or_placeholder, redact_assignments, redact_private_keys,
};
use crate::secret_words::{KeyClass, field_replacement, is_secret_flag, key_class, secret_value};

/// Shortest configured secret or local-only identifier accepted: shorter ones would shred
/// ordinary text.
pub const MIN_CONFIGURED_LEN: usize = 4;
/// Nesting of JSON documents inside strings that is decoded; deeper text is scanned as text.
const MAX_JSON_DEPTH: usize = 6;

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
    pub(crate) fn add(&mut self, kind: RedactionKind, n: u64) {
        if n > 0 {
            *self.counts.entry(kind).or_insert(0) += n;
            self.total += n;
        }
    }
}

/// Strings at least this long are sanitized once per redactor and the outcome reused: a run
/// resends its whole history on every turn, and a long tool result (a log read) would otherwise
/// be scanned again on each of them.
pub const MEMO_MIN_BYTES: usize = 2_048;
/// Distinct long strings remembered per redactor; past it the memo starts afresh.
const MEMO_MAX_ENTRIES: usize = 128;

/// The outcome of sanitizing one long string: the new text (`None` when unchanged) and what was
/// removed, counted again on every request that carries the string.
#[derive(Debug, Clone)]
struct Memo {
    out: Option<String>,
    counts: Vec<(RedactionKind, u64)>,
}

/// The memo, locked. A poisoned memo only loses reuse: a miss recomputes from the text.
fn lock_memo(
    memo: &Mutex<HashMap<String, Memo>>,
) -> std::sync::MutexGuard<'_, HashMap<String, Memo>> {
    memo.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Redacts provider-bound requests for one destination. Clones share the memo of long strings.
#[derive(Debug, Clone)]
pub struct Redactor {
    destination: Destination,
    /// Longest first, so a secret containing another is replaced whole.
    secrets: Vec<String>,
    /// (lowercased identifier, placeholder), longest identifier first.
    local_only: Vec<(String, String)>,
    /// Keyed by the whole original string, so a hit is the same input, never a lookalike.
    memo: Arc<Mutex<HashMap<String, Memo>>>,
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
            memo: Arc::default(),
        })
    }

    /// The built-in words and rules alone: no configured secret, no local-only identifier.
    pub(crate) fn built_in() -> Self {
        Self {
            destination: Destination::local(String::new()),
            secrets: Vec::new(),
            local_only: Vec::new(),
            memo: Arc::default(),
        }
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
        self.sanitize_value(&mut call.arguments, 0, &mut false, report);
    }

    fn sanitize_tool(&self, tool: &mut Tool, report: &mut RedactionReport) {
        self.sanitize_string(&mut tool.description, report);
        self.sanitize_value(&mut tool.parameters, 0, &mut false, report);
    }

    /// Sanitizes a JSON value in place. `pem` is set while the strings walked so far opened a
    /// private key block without closing it (a key logged line by line): the base64 lines that
    /// follow are part of the key.
    fn sanitize_value(
        &self,
        value: &mut Value,
        depth: usize,
        pem: &mut bool,
        report: &mut RedactionReport,
    ) {
        match value {
            Value::String(s) => {
                if *pem {
                    let line = s.trim();
                    if line.len() >= 16
                        && line
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
                    {
                        *s = RedactionKind::PrivateKey.marker();
                        report.add(RedactionKind::PrivateKey, 1);
                        return;
                    }
                    // Short fields (`"stream": "file"`) sit between the lines of one block.
                    if line.contains("-----END") || line.len() >= 16 {
                        *pem = false;
                    }
                }
                let opens = s.contains("-----BEGIN")
                    && s.contains("PRIVATE KEY")
                    && !s.contains("-----END");
                if let Some(out) = self.sanitize_text(s, depth, report) {
                    *s = out;
                }
                if opens {
                    *pem = true;
                }
            }
            Value::Array(items) => {
                // `"Args": ["--requirepass", "<secret>"]`: the value after a secret flag.
                let mut after_flag = false;
                for item in items {
                    match item {
                        Value::String(s) if after_flag && not_path_or_placeholder(s) => {
                            *s = RedactionKind::CommandLineSecret.marker();
                            report.add(RedactionKind::CommandLineSecret, 1);
                            after_flag = false;
                        }
                        _ => {
                            after_flag = item.as_str().is_some_and(is_secret_flag);
                            self.sanitize_value(item, depth, pem, report);
                        }
                    }
                }
            }
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (mut key, mut item) in entries {
                    let class = key_class(&key);
                    if let Some(out) = self.sanitize_text(&key, depth, report) {
                        key = out;
                    }
                    match (&mut item, class) {
                        (Value::String(s), Some(class)) => match field_replacement(class, s) {
                            Some(out) => {
                                *s = out;
                                report.add(RedactionKind::SecretAssignment, 1);
                            }
                            None => self.sanitize_value(&mut item, depth, pem, report),
                        },
                        (Value::Number(_), Some(KeyClass::Strong)) => {
                            item = Value::String(RedactionKind::SecretAssignment.marker());
                            report.add(RedactionKind::SecretAssignment, 1);
                        }
                        // `"secrets": ["a", "b"]`: every scalar under a secret name.
                        (Value::Array(items), Some(KeyClass::Strong)) => {
                            for entry in items.iter_mut() {
                                let secret = match entry {
                                    Value::String(s) => secret_value(KeyClass::Strong, s),
                                    Value::Number(_) => true,
                                    _ => false,
                                };
                                if secret {
                                    *entry =
                                        Value::String(RedactionKind::SecretAssignment.marker());
                                    report.add(RedactionKind::SecretAssignment, 1);
                                } else {
                                    self.sanitize_value(entry, depth, pem, report);
                                }
                            }
                        }
                        _ => self.sanitize_value(&mut item, depth, pem, report),
                    }
                    map.insert(key, item);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// Sanitizes one string in place.
    pub fn sanitize_string(&self, text: &mut String, report: &mut RedactionReport) {
        if text.len() >= MEMO_MIN_BYTES {
            return self.sanitize_long(text, report);
        }
        if let Some(out) = self.sanitize_text(text, 0, report) {
            *text = out;
        }
    }

    /// [`Self::sanitize_string`] of a long string, through the memo.
    fn sanitize_long(&self, text: &mut String, report: &mut RedactionReport) {
        let known = lock_memo(&self.memo).get(text.as_str()).cloned();
        let memo = match known {
            Some(memo) => memo,
            None => {
                let mut own = RedactionReport {
                    route: String::new(),
                    boundary: self.destination.boundary,
                    local_only_withheld: self.withholds_local_only(),
                    counts: BTreeMap::new(),
                    total: 0,
                };
                let out = self.sanitize_text(text, 0, &mut own);
                let memo = Memo {
                    out,
                    counts: own.counts.into_iter().collect(),
                };
                let mut entries = lock_memo(&self.memo);
                if entries.len() >= MEMO_MAX_ENTRIES {
                    entries.clear();
                }
                entries.insert(text.clone(), memo.clone());
                memo
            }
        };
        for (kind, n) in memo.counts {
            report.add(kind, n);
        }
        if let Some(out) = memo.out {
            *text = out;
        }
    }

    /// The sanitized text, or `None` when nothing changed. A JSON document is decoded and
    /// sanitized value by value (`depth` counts the documents around it).
    pub(crate) fn sanitize_text(
        &self,
        text: &str,
        depth: usize,
        report: &mut RedactionReport,
    ) -> Option<String> {
        if depth < MAX_JSON_DEPTH
            && let Some(mut document) = json_document(text)
        {
            let before = report.total;
            self.sanitize_value(&mut document, depth + 1, &mut false, report);
            return (report.total > before).then(|| document.to_string());
        }
        self.sanitize_plain(text, report)
    }

    /// Sanitizes text that is not (or no longer decoded as) a JSON document.
    fn sanitize_plain(&self, text: &str, report: &mut RedactionReport) -> Option<String> {
        let mut current: Option<String> = None;
        let mut apply = |f: &dyn Fn(&str, &mut RedactionReport) -> Option<String>,
                         report: &mut RedactionReport| {
            let input = current.as_deref().unwrap_or(text);
            if let Some(out) = f(input, report) {
                current = Some(out);
            }
        };
        if text.len() >= MIN_RULE_LEN {
            let compiled = &*COMPILED;
            let hits = compiled.set.matches(text);
            if hits.matched(SET_PRIVATE_KEY) {
                apply(&redact_private_keys, report);
            }
            if !self.secrets.is_empty() {
                apply(&|t, r| self.redact_secrets(t, r), report);
            }
            for (i, (rule, regex)) in RULES.iter().zip(&compiled.rules).enumerate() {
                if hits.matched(SET_FIRST_RULE + i) {
                    apply(&|t, r| apply_rule(regex, &rule.action, t, r), report);
                }
            }
            if hits.matched(compiled.set_assignment()) {
                apply(&redact_assignments, report);
            }
        } else if !self.secrets.is_empty() {
            apply(&|t, r| self.redact_secrets(t, r), report);
        }
        if self.withholds_local_only() && !self.local_only.is_empty() {
            apply(&|t, r| self.redact_local_only(t, r), report);
        }
        current
    }

    fn redact_secrets(&self, text: &str, report: &mut RedactionReport) -> Option<String> {
        let mut out: Option<String> = None;
        for secret in &self.secrets {
            let input = out.as_deref().unwrap_or(text);
            if secret.len() > input.len() {
                continue;
            }
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
    fn a_long_string_is_scanned_once_and_counted_on_every_request_that_carries_it() {
        let redactor = Redactor::new(Destination::external("a:b"), &RedactionConfig::default())
            .expect("empty config is valid");
        let filler = "GET /healthz 200 0.4ms\n".repeat(MEMO_MIN_BYTES / 20);
        let long = format!("{filler}DB_PASSWORD=hunter2-s3cret\n{filler}");
        let mut first = long.clone();
        let mut first_report = empty_report();
        redactor.sanitize_string(&mut first, &mut first_report);
        assert!(!first.contains("hunter2-s3cret"));
        assert_eq!(first_report.total, 1);
        // The same text again: the same output and the same count, from the memo.
        let mut again = long.clone();
        let mut again_report = empty_report();
        redactor.sanitize_string(&mut again, &mut again_report);
        assert_eq!(again, first);
        assert_eq!(again_report.counts, first_report.counts);
        // A text differing in one character is its own entry.
        let other_text = long.replacen("hunter2-s3cret", "hunter3-s3cret", 1);
        let mut other = other_text.clone();
        let mut other_report = empty_report();
        redactor.sanitize_string(&mut other, &mut other_report);
        assert!(!other.contains("hunter3-s3cret"));
        assert_eq!(other_report.total, 1);
        // A clone shares the memo; memo entries never exceed the bound.
        let clone = redactor.clone();
        for i in 0..(MEMO_MAX_ENTRIES + 5) {
            let mut text = format!("{filler}{i}");
            clone.sanitize_string(&mut text, &mut empty_report());
        }
        assert!(lock_memo(&redactor.memo).len() <= MEMO_MAX_ENTRIES);
    }

    fn empty_report() -> RedactionReport {
        RedactionReport {
            route: String::new(),
            boundary: TrustBoundary::External,
            local_only_withheld: true,
            counts: BTreeMap::new(),
            total: 0,
        }
    }

    #[test]
    fn a_logs_result_does_not_shield_the_assignments_of_its_lines() {
        let redactor = Redactor::new(Destination::external("a:b"), &RedactionConfig::default())
            .expect("empty config is valid");
        let mut report = empty_report();
        // The `pulse_read` `logs` shape, and the same read quoted once more as a string value.
        let lines = serde_json::json!({"resource_id": "service:h1:web", "lines": [
            {"stream": "file", "text": "DB_PASSWORD=Pg-Pa55-9f3a"},
            {"stream": "file", "text": "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
        ]})
        .to_string();
        for mut text in [
            lines.clone(),
            serde_json::json!({ "output": lines }).to_string(),
        ] {
            redactor.sanitize_string(&mut text, &mut report);
            assert!(!text.contains("Pg-Pa55-9f3a"), "{text}");
            assert!(!text.contains("bPxRfiCYEXAMPLEKEY"), "{text}");
            assert!(
                text.contains("DB_PASSWORD=[REDACTED:secret_assignment]"),
                "{text}"
            );
        }
        assert_eq!(report.counts[&RedactionKind::AwsSecretKey], 2);
        // Text that no longer decodes (a cut line) is scanned as text, escapes and all.
        let mut cut = r#"{"lines":[{"text":"{"msg":"x","token":"tok-9f3a-77"}"},{"te"#.to_owned();
        redactor.sanitize_string(&mut cut, &mut report);
        assert!(!cut.contains("tok-9f3a-77"), "{cut}");
    }

    #[test]
    fn weak_names_need_values_that_look_like_credentials() {
        let redactor = Redactor::new(Destination::external("a:b"), &RedactionConfig::default())
            .expect("empty config is valid");
        for kept in [
            "PWD=/home/deploy",
            "sig=ok signature=valid",
            "--- PASS: TestTokenBucket (0.00s)",
            "token_type=Bearer expires_in=3600",
            "password: <redacted>",
            "spring.datasource.password=${DB_PASSWORD}",
            "pam_unix(passwd:chauthtok): password changed",
            // A secret word inside a longer word: only a credential-looking value goes.
            "the author: Jane wrote max_tokens=4096",
            "git log --author=jane",
            "authorized: user=app",
            "tokenizer=cl100k_base author=jdoe42",
        ] {
            let mut text = kept.to_owned();
            let mut report = empty_report();
            redactor.sanitize_string(&mut text, &mut report);
            assert_eq!(text, kept);
            assert_eq!(report.total, 0);
        }
        for (text, secret) in [
            ("MYSQL_PWD=S3cret!", "S3cret!"),
            ("signature=3045022100ab8f9c", "3045022100ab8f9c"),
            ("pass=hunter22", "hunter22"),
            ("SMTP_PASS=mailpass", "mailpass"),
            ("AUTHKEY=abc123xyz", "abc123xyz"),
            ("basicauth=u53r:p4ss", "u53r:p4ss"),
            ("DB_PASSWORDS=Xk9-mq2Lp7", "Xk9-mq2Lp7"),
        ] {
            let mut text = text.to_owned();
            redactor.sanitize_string(&mut text, &mut empty_report());
            assert!(!text.contains(secret), "{text}");
        }
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
