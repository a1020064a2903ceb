//! The provider-bound sanitizer: every `ChatRequest` passes through [`Redactor::sanitize`] right
//! before transport. It strips credentials (known token formats, configured secrets, secret-named
//! assignments, command-line secrets, cookies, PEM private keys) on every route, and replaces
//! local-only resource identifiers with opaque placeholders on routes that leave the local trust
//! boundary.
//!
//! Invariants:
//! - Depth does not hide a secret. A string that is itself a JSON document (a tool result, a
//!   structured log line, JSON inside a JSON string) is decoded and sanitized value by value, keys
//!   included, and encoded again only when something was redacted. Text that does not decode (a
//!   truncated line, escaped JSON inside a log line) is scanned as text, and a non-secret
//!   `key = "value"` never shields the assignments inside its value.
//! - Ordinary text survives: a secret-named key only loses a value that could be a credential
//!   (not a placeholder such as `null` or `${VAR}`, not an auth scheme word), and weak names
//!   (`sig`, `pass`, `pwd`) need a value that looks like one.
//! - Every change is counted: the report's `total` grows exactly when text changed, so
//!   sanitizing is idempotent (a second pass finds nothing) and a decoded document is re-encoded
//!   only when its count grew.
//! - Cost: one `RegexSet` pass over literal triggers picks the rules a string can match; only
//!   those run. Strings too short to hold a credential skip the rules.
//!
//! The report it returns counts redactions per kind and never carries a redacted value; it is
//! what the export audit stores.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex};

use regex::{Captures, Regex, RegexSet};
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
    AwsSecretKey,
    GoogleApiKey,
    GoogleOauth,
    StripeKey,
    GitlabToken,
    NpmToken,
    HuggingfaceToken,
    SendgridKey,
    AzureStorageKey,
    VendorToken,
    CommandLineSecret,
    Cookie,
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
        Self::AwsSecretKey,
        Self::GoogleApiKey,
        Self::GoogleOauth,
        Self::StripeKey,
        Self::GitlabToken,
        Self::NpmToken,
        Self::HuggingfaceToken,
        Self::SendgridKey,
        Self::AzureStorageKey,
        Self::VendorToken,
        Self::CommandLineSecret,
        Self::Cookie,
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
            Self::AwsSecretKey => "aws_secret_key",
            Self::GoogleApiKey => "google_api_key",
            Self::GoogleOauth => "google_oauth",
            Self::StripeKey => "stripe_key",
            Self::GitlabToken => "gitlab_token",
            Self::NpmToken => "npm_token",
            Self::HuggingfaceToken => "huggingface_token",
            Self::SendgridKey => "sendgrid_key",
            Self::AzureStorageKey => "azure_storage_key",
            Self::VendorToken => "vendor_token",
            Self::CommandLineSecret => "command_line_secret",
            Self::Cookie => "cookie",
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
/// Strings shorter than this cannot hold a credential the built-in rules recognise (`pwd=x`).
const MIN_RULE_LEN: usize = 5;
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
    fn add(&mut self, kind: RedactionKind, n: u64) {
        if n > 0 {
            *self.counts.entry(kind).or_insert(0) += n;
            self.total += n;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Secret-named keys.

/// How a key's value is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyClass {
    /// Any value that is not a placeholder is a secret (`password`, `api_key`, `AUTH_TOKEN`).
    Strong,
    /// Only a value that looks random is (`sig`, `signature`, a lone `pass`, `sessionid`).
    NeedsRandom,
    /// Any value is (`MYSQL_PWD`); not a secret name by itself (`PWD=/srv/app` is a directory).
    NotPath,
}

/// Words (and two-word compounds, `api` `key`) that make a key secret.
const STRONG_WORDS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "secrets",
    "token",
    "apikey",
    "accesskey",
    "privatekey",
    "secretkey",
    "accountkey",
    "masterkey",
    "encryptionkey",
    "signingkey",
    "credential",
    "credentials",
    "auth",
    "authorization",
    "dockercfg",
    "dockerconfigjson",
    "requirepass",
    "masterauth",
    "storepass",
    "keypass",
    "keydata",
];
/// A single word ending in one of these is secret too (`PGPASSWORD`, `clientsecret`, `authtoken`).
const STRONG_SUFFIXES: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "accesskey",
    "secretkey",
    "privatekey",
];
/// A key ending in one of these names something about a secret, not the secret itself
/// (`secret_name`, `password_file`, `token_type`, `SSH_AUTH_SOCK`, `password_last_changed`).
const QUALIFIERS: &[&str] = &[
    "name",
    "names",
    "ref",
    "volume",
    "mount",
    "file",
    "path",
    "dir",
    "sock",
    "socket",
    "policy",
    "type",
    "length",
    "len",
    "ttl",
    "expiry",
    "expires",
    "expiration",
    "count",
    "enabled",
    "provider",
    "store",
    "manager",
    "rotation",
    "rotated",
    "version",
    "hint",
    "prompt",
    "url",
    "uri",
    "endpoint",
    "header",
    "field",
    "env",
    "format",
    "mode",
    "size",
    "limit",
    "max",
    "min",
    "method",
    "methods",
    "mechanism",
    "scheme",
    "status",
    "state",
    "error",
    "result",
    "time",
    "timeout",
    "age",
    "at",
    "date",
    "changed",
    "updated",
    "created",
    "expired",
    "last",
    "source",
    "backend",
    "plugin",
    "module",
    "server",
    "host",
    "port",
    "user",
    "username",
    "realm",
    "scope",
    "scopes",
    "issuer",
    "audience",
    "required",
    "reset",
    "strength",
    "days",
    "algorithm",
    "handler",
    "middleware",
    "service",
    "controller",
    "client",
    "filter",
    "request",
    "response",
];
const RANDOM_WORDS: &[&str] = &["sig", "signature", "jsessionid", "phpsessid"];

/// The words of a key: split at non-alphanumerics and lower-to-upper camelCase boundaries, as
/// byte ranges (no allocation).
fn key_words<'a>(key: &'a str, mut each: impl FnMut(&'a str)) {
    let bytes = key.as_bytes();
    let mut start: Option<usize> = None;
    for (i, &b) in bytes.iter().enumerate() {
        if !b.is_ascii_alphanumeric() {
            if let Some(s) = start.take() {
                each(&key[s..i]);
            }
            continue;
        }
        match start {
            None => start = Some(i),
            Some(s) if b.is_ascii_uppercase() && i > 0 && bytes[i - 1].is_ascii_lowercase() => {
                each(&key[s..i]);
                start = Some(i);
            }
            Some(_) => {}
        }
    }
    if let Some(s) = start {
        each(&key[s..]);
    }
}

fn eq_any(word: &str, list: &[&str]) -> bool {
    list.iter().any(|w| w.eq_ignore_ascii_case(word))
}

fn ends_with_ci(word: &str, suffix: &str) -> bool {
    word.len() > suffix.len()
        && word
            .get(word.len() - suffix.len()..)
            .is_some_and(|tail| tail.eq_ignore_ascii_case(suffix))
}

/// Whether `a` followed by `b` spells one of `list` (`api` + `key`).
fn pair_in(a: &str, b: &str, list: &[&str]) -> bool {
    list.iter().any(|w| {
        w.len() == a.len() + b.len()
            && w[..a.len()].eq_ignore_ascii_case(a)
            && w[a.len()..].eq_ignore_ascii_case(b)
    })
}

fn key_class(key: &str) -> Option<KeyClass> {
    let mut strong = false;
    let mut random = false;
    let mut not_path = false;
    let mut count = 0usize;
    let mut last_is_pass = false;
    let mut last_qualifies = false;
    let mut prev: Option<&str> = None;
    key_words(key, |word| {
        count += 1;
        last_qualifies = count > 1 && eq_any(word, QUALIFIERS);
        last_is_pass = word.eq_ignore_ascii_case("pass");
        if eq_any(word, STRONG_WORDS) || STRONG_SUFFIXES.iter().any(|s| ends_with_ci(word, s)) {
            strong = true;
        } else if eq_any(word, RANDOM_WORDS) || word.eq_ignore_ascii_case("pass") {
            random = true;
        } else if word.eq_ignore_ascii_case("pwd") || ends_with_ci(word, "pwd") {
            not_path = true;
        }
        if let Some(p) = prev {
            if pair_in(p, word, STRONG_WORDS) {
                strong = true;
            } else if pair_in(p, word, RANDOM_WORDS) {
                random = true;
            }
        }
        prev = Some(word);
    });
    if last_qualifies {
        None
    } else if strong || (last_is_pass && count > 1) {
        Some(KeyClass::Strong)
    } else if not_path {
        Some(KeyClass::NotPath)
    } else if random {
        Some(KeyClass::NeedsRandom)
    } else {
        None
    }
}

/// Whether a field name names a secret: one of its words (split at `_ - .`, spaces and camelCase)
/// is a secret word or ends in one (`PGPASSWORD`), two adjacent words form one (`api` `key`), or
/// it ends in `pass` after another word (`DB_PASS`). Weaker names (`sig`, `PWD`) are not: their
/// values are judged one by one.
pub fn is_secret_key(key: &str) -> bool {
    key_class(key) == Some(KeyClass::Strong)
}

const AUTH_SCHEMES: &[&str] = &[
    "aws4-hmac-sha256",
    "bearer",
    "basic",
    "token",
    "digest",
    "negotiate",
    "ntlm",
    "hoba",
    "mutual",
];

/// Values that stand for a credential without being one.
const PLACEHOLDERS: &[&str] = &[
    "null",
    "none",
    "nil",
    "true",
    "false",
    "yes",
    "no",
    "on",
    "off",
    "ok",
    "success",
    "failed",
    "failure",
    "enabled",
    "disabled",
    "required",
    "optional",
    "unset",
    "empty",
    "redacted",
    "hidden",
    "masked",
    "n/a",
    "-",
    "plain",
    "md5",
    "scram-sha-256",
    "trust",
    "peer",
    "password",
    "oauth",
    "oauth2",
    "jwt",
    "saml",
    "ldap",
    "kerberos",
    "anonymous",
    "apikey",
    "api_key",
    "iam",
    "sso",
    "error",
    "warn",
    "warning",
    "info",
    "debug",
    "notice",
    "crit",
    "alert",
    "emerg",
    "trace",
];

fn is_marker(value: &str) -> bool {
    let inner = value.trim_matches(|c| c == '"' || c == '\'' || c == '\\');
    inner.starts_with(MARKER_PREFIX)
}

fn is_placeholder(value: &str) -> bool {
    let v = value.trim();
    if v.is_empty() || eq_any(v, PLACEHOLDERS) || is_marker(v) {
        return true;
    }
    let masked = v.len() >= 3 && v.bytes().all(|b| matches!(b, b'*' | b'x' | b'X' | b'.'));
    let variable = v.starts_with("${")
        || v.starts_with("{{")
        || v.starts_with("%(")
        || (v.starts_with('$')
            && v[1..]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_'));
    let angle = v.starts_with('<') && v.ends_with('>');
    masked || variable || angle || v.starts_with("****")
}

/// A filesystem path (`/run/secrets/db`, `~/.kube/config`): a locator, not a credential.
fn is_path(value: &str) -> bool {
    let v = value.trim();
    let rooted = v.starts_with('/')
        || v.starts_with("~/")
        || v.starts_with("./")
        || v.starts_with("../")
        || (v.len() > 2 && v.as_bytes()[1] == b':' && matches!(v.as_bytes()[2], b'\\' | b'/'));
    rooted
        && v.len() > 1
        && v.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(b, b'/' | b'.' | b'_' | b'-' | b'~' | b'\\' | b':')
        })
}

/// Three or more lowercase words (`password updated successfully`): prose, not a credential.
fn is_prose(value: &str) -> bool {
    let mut words = 0;
    for word in value.split_whitespace() {
        let word = word.trim_end_matches(['.', ',', '!', ':', ';']);
        if word.is_empty() || !word.bytes().all(|b| b.is_ascii_lowercase()) {
            return false;
        }
        words += 1;
    }
    words >= 3
}

fn has_digit(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_digit())
}

/// Random tokens have digits or mixed case; words in prose ("bearer authentication") do not.
fn looks_random(s: &str) -> bool {
    has_digit(s)
        || (s.bytes().any(|b| b.is_ascii_uppercase()) && s.bytes().any(|b| b.is_ascii_lowercase()))
}

/// A credential-like value: long enough, and mixing letters with digits or symbols
/// (`TestTokenBucketRefill` and `chauthtok` are names).
fn looks_like_credential(s: &str) -> bool {
    let letters = s.bytes().any(|b| b.is_ascii_alphabetic());
    let symbols = s
        .bytes()
        .any(|b| !b.is_ascii_alphanumeric() && !b.is_ascii_whitespace());
    s.len() >= 6 && letters && (has_digit(s) || symbols)
}

/// Whether `value` (unquoted) under a key of `class` is to be redacted.
fn secret_value(class: KeyClass, value: &str) -> bool {
    if is_placeholder(value) || is_path(value) || is_prose(value) {
        return false;
    }
    match class {
        KeyClass::Strong | KeyClass::NotPath => true,
        KeyClass::NeedsRandom => {
            let v = value.trim();
            !v.contains(char::is_whitespace) && looks_like_credential(v)
        }
    }
}

/// `name=value, ...` after an auth scheme (base64 padding `abc=` is no parameter).
fn is_auth_params(rest: &str) -> bool {
    let first = rest.split([',', ' ']).next().unwrap_or("");
    match first.split_once('=') {
        Some((name, value)) => {
            name.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !value.is_empty()
                && !value.starts_with('=')
        }
        None => false,
    }
}

/// `Bearer abc`: the scheme word, and what follows it.
fn split_scheme(value: &str) -> Option<(&str, &str)> {
    let v = value.trim_start();
    let (word, rest) = v.split_once(char::is_whitespace).unwrap_or((v, ""));
    eq_any(word, AUTH_SCHEMES).then_some((word, rest.trim_start()))
}

/// Whether a command-line argument is a flag whose next argument is a secret (`--password`,
/// `--db-token`, `--requirepass`, `-storepass`); `--password-file` and `--token-ttl` are not.
fn is_secret_flag(arg: &str) -> bool {
    let Some(name) = arg.strip_prefix('-') else {
        return false;
    };
    let name = name.strip_prefix('-').unwrap_or(name);
    if name.is_empty() || name.contains(['=', ' ']) {
        return false;
    }
    let mut last = "";
    let mut prev = "";
    key_words(name, |w| {
        prev = last;
        last = w;
    });
    eq_any(
        last,
        &[
            "password",
            "passwd",
            "pass",
            "passphrase",
            "token",
            "secret",
            "apikey",
            "credentials",
            "credential",
            "requirepass",
            "masterauth",
            "storepass",
            "keypass",
        ],
    ) || ["password", "token", "secret"]
        .iter()
        .any(|s| ends_with_ci(last, s))
        || (last.eq_ignore_ascii_case("key")
            && eq_any(
                prev,
                &["api", "access", "secret", "private", "account", "master"],
            ))
}

// ---------------------------------------------------------------------------------------------
// Built-in rules.

/// What a rule does with one match.
enum Action {
    /// Replace capture group `secret` with the kind's marker, keep the rest of the match;
    /// `accept` rejects lookalikes.
    Group {
        kind: RedactionKind,
        secret: usize,
        accept: fn(&str) -> bool,
    },
    /// A match with several secrets: the replacement of the whole match, counting what it
    /// redacted; `None` keeps the match.
    Custom(fn(&Captures<'_>, &mut RedactionReport) -> Option<String>),
}

struct Rule {
    regex: &'static str,
    /// Lowercase literals, one of which any match contains: a string holding none of them
    /// skips the rule without running its regex.
    triggers: &'static [&'static str],
    action: Action,
}

fn any(_: &str) -> bool {
    true
}

fn not_marker(s: &str) -> bool {
    !is_marker(s)
}

fn not_path_or_placeholder(s: &str) -> bool {
    let inner = s.trim_matches(|c| c == '"' || c == '\'');
    !inner.is_empty() && !is_path(inner) && !is_placeholder(inner)
}

/// An openssl `-passin` argument that is the password itself, not `env:VAR` or `file:path`.
fn literal_pass_argument(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    not_path_or_placeholder(s)
        && !["env:", "file:", "fd:", "stdin"]
            .iter()
            .any(|p| lower.starts_with(p))
}

const fn group(kind: RedactionKind, secret: usize, accept: fn(&str) -> bool) -> Action {
    Action::Group {
        kind,
        secret,
        accept,
    }
}

/// The rules in the order they run: specific formats before the generic ones that would also
/// see them (a GitHub token after `--token` is counted as a GitHub token).
static RULES: &[Rule] = {
    use RedactionKind as K;
    &[
        // scheme://user:password@host, an empty user too (redis://:pw@host).
        Rule {
            regex: r#"(?i)(?-u:\b)[a-z][a-z0-9+.-]{1,15}://([^\s/@:"'<>\[\]\\]*:[^\s/"'<>\[\]\\]+)@"#,
            triggers: &["://"],
            action: group(K::UrlCredentials, 1, not_marker),
        },
        Rule {
            regex: r"(?-u:\b)(pulse_[0-9a-f]{64})(?-u:\b)",
            triggers: &["pulse_"],
            action: group(K::PulseToken, 1, any),
        },
        // An access key id, and the 40-character secret key written right after it (CSV,
        // `aws configure` echoes).
        Rule {
            regex: r#"(?-u:\b)((?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16})(?-u:\b)(?:([\s,;:|"'=]{1,8})([A-Za-z0-9/+]{40})([^A-Za-z0-9/+=]|$))?"#,
            triggers: &["akia", "asia", "abia", "acca"],
            action: Action::Custom(aws_key_pair),
        },
        Rule {
            regex: r#"(?i)(?:secret_?access_?key|aws_?secret_?(?:access_?)?key)\\*["']?\s*[:=]\s*\\*["']?([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)"#,
            triggers: &["secret"],
            action: group(K::AwsSecretKey, 1, looks_random),
        },
        Rule {
            regex: r"(?-u:\b)(gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
            triggers: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
            action: group(K::GithubToken, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)(gl(?:pat|dt|rt|ptt|cbt|imt|oas|soat|ft|agent|ffct)-[0-9A-Za-z_-]{20,}|GR1348941[0-9A-Za-z_-]{20,})",
            triggers: &[
                "glpat-",
                "gldt-",
                "glrt-",
                "glptt-",
                "glcbt-",
                "glimt-",
                "gloas-",
                "glsoat-",
                "glft-",
                "glagent-",
                "glffct-",
                "gr1348941",
            ],
            action: group(K::GitlabToken, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)(xox[abposre]-[A-Za-z0-9-]{10,})",
            triggers: &["xox"],
            action: group(K::SlackToken, 1, any),
        },
        Rule {
            regex: r"hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9_/-]{20,})",
            triggers: &["hooks.slack.com"],
            action: group(K::SlackToken, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)(sk-ant-[A-Za-z0-9_-]{20,})",
            triggers: &["sk-ant-"],
            action: group(K::AnthropicKey, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)((?:sk|rk)_(?:live|test)_[0-9A-Za-z]{10,}|whsec_[0-9A-Za-z]{20,})",
            triggers: &["sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_"],
            action: group(K::StripeKey, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)(sk-[A-Za-z0-9_-]{20,})",
            triggers: &["sk-"],
            action: group(K::OpenaiKey, 1, has_digit),
        },
        Rule {
            regex: r"(?-u:\b)(AIza[0-9A-Za-z_-]{35})",
            triggers: &["aiza"],
            action: group(K::GoogleApiKey, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)(ya29\.[0-9A-Za-z_-]{20,}|GOCSPX-[0-9A-Za-z_-]{20,}|1//0[0-9A-Za-z_-]{30,})",
            triggers: &["ya29.", "gocspx-", "1//0"],
            action: group(K::GoogleOauth, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)(npm_[A-Za-z0-9]{36})(?-u:\b)",
            triggers: &["npm_"],
            action: group(K::NpmToken, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)(hf_[A-Za-z0-9]{30,})(?-u:\b)",
            triggers: &["hf_"],
            action: group(K::HuggingfaceToken, 1, looks_random),
        },
        Rule {
            regex: r"(?-u:\b)(SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,})",
            triggers: &["sg."],
            action: group(K::SendgridKey, 1, any),
        },
        Rule {
            regex: r#"(?i)(?:AccountKey|SharedAccessKey|account_key|storage_?(?:account_?)?key)\\*["']?\s*[:=]\s*\\*["']?([A-Za-z0-9+/]{20,}={0,2})"#,
            triggers: &["accountkey", "sharedaccesskey", "account_key", "storage"],
            action: group(K::AzureStorageKey, 1, looks_random),
        },
        // The signature of a shared access signature URL.
        Rule {
            regex: r"[?&]sig=([A-Za-z0-9%+/=]{16,})",
            triggers: &["sig="],
            action: group(K::AzureStorageKey, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)(dop_v1_[a-f0-9]{64}|pypi-AgE[A-Za-z0-9_-]{40,}|hv[sb]\.[A-Za-z0-9_-]{24,}|shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}|dapi[a-f0-9]{32}|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|PMAK-[a-f0-9]{24}-[a-f0-9]{34}|lin_api_[A-Za-z0-9]{40})",
            triggers: &[
                "dop_v1_", "pypi-", "hvs.", "hvb.", "shpat_", "shpss_", "shpca_", "shppa_", "dapi",
                "glsa_", "pmak-", "lin_api_",
            ],
            action: group(K::VendorToken, 1, any),
        },
        Rule {
            regex: r"discord(?:app)?\.com/api/webhooks/[0-9]+/([A-Za-z0-9_-]{40,})",
            triggers: &["discord"],
            action: group(K::VendorToken, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)(eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*)",
            triggers: &["eyj"],
            action: group(K::Jwt, 1, any),
        },
        // --password x, --db-password=x, --token x, --api-key x, --client-secret x.
        Rule {
            regex: r#"(?i)(?:^|[\s"'=])--(?:[a-z0-9]+[-_])*(?:password|passwd|pass|passphrase|token|secret|api-?key|access-?key|secret-?key|private-?key|account-?key|client-?secret|credentials?|requirepass|masterauth)(?:\s+|\s*=\s*|\\*"\s*,\s*\\*")("[^"\n]*"|'[^'\n]*'|[^\s"'\-\\][^\s"'\\]*)"#,
            triggers: &["--"],
            action: group(K::CommandLineSecret, 1, not_path_or_placeholder),
        },
        // mysql -pSECRET / -p SECRET, sshpass -p, docker login -p.
        Rule {
            regex: r#"(?-u:\b)(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mysqlsh|mysqlpump|mariadb|mariadb-dump|mariadb-admin|sshpass|docker\s+login|podman\s+login|nerdctl\s+login|buildah\s+login|skopeo\s+login|helm\s+registry\s+login|az\s+login)(?-u:\b)[^\n]*?\s-p[ \t]*('[^'\n]*'|"[^"\n]*"|[^\s'"\-\\][^\s"'\\]*)"#,
            triggers: &["mysql", "mariadb", "sshpass", "login"],
            action: group(K::CommandLineSecret, 1, not_marker),
        },
        Rule {
            regex: r#"(?-u:\b)redis-cli(?-u:\b)[^\n]*?\s-a[ \t]+('[^'\n]*'|"[^"\n]*"|[^\s'"\-\\][^\s"'\\]*)"#,
            triggers: &["redis-cli"],
            action: group(K::CommandLineSecret, 1, not_marker),
        },
        Rule {
            regex: r#"(?-u:\b)(?:curl|wget)(?-u:\b)[^\n]*?\s(?:-u|--user|-U|--proxy-user)[ \t]*['"]?[^\s:'"]*:([^\s'"\\]+)"#,
            triggers: &["curl", "wget"],
            action: group(K::CommandLineSecret, 1, not_marker),
        },
        // htpasswd -b file user password.
        Rule {
            regex: r"(?-u:\b)htpasswd\s+-[A-Za-z]*b[A-Za-z]*\s+(?:-\S+\s+)*\S+\s+\S+\s+(\S+)",
            triggers: &["htpasswd"],
            action: group(K::CommandLineSecret, 1, not_marker),
        },
        // keytool -storepass x, openssl -passin pass:x.
        Rule {
            regex: r"(?i)\s-(?:src|dest|new)?(?:store|key)?pass(?:in|out|word)?[ \t]+(?:pass:)?([^\s\-\\][^\s\\]*)",
            triggers: &["pass"],
            action: group(K::CommandLineSecret, 1, literal_pass_argument),
        },
        // redis.conf: `requirepass x`, `masterauth x`.
        Rule {
            regex: r#"(?im)^[ \t]*(?:requirepass|masterauth|masteruser-password)[ \t]+("[^"\n]*"|\S+)"#,
            triggers: &["requirepass", "masterauth", "masteruser"],
            action: group(K::SecretAssignment, 1, not_marker),
        },
        // Redis MONITOR: "AUTH" "password" or "AUTH" "user" "password".
        Rule {
            regex: r#"(?i)"auth"(?:\s+"[^"\n]*")?\s+"([^"\n]+)""#,
            triggers: &["\"auth\""],
            action: group(K::CommandLineSecret, 1, not_marker),
        },
        // SQL: ALTER USER .. PASSWORD 'x', IDENTIFIED [WITH plugin] BY 'x'.
        Rule {
            regex: r"(?i)(?-u:\b)(?:identified\s+(?:with\s+\S+\s+)?by|password)\s+'([^'\n]+)'",
            triggers: &["identified", "password"],
            action: group(K::SecretAssignment, 1, not_marker),
        },
        Rule {
            regex: r#"(?i)(?:^|[^a-z0-9])(?:set-)?cookie2?\\*"?\s*[:=]\s*\\*"?([^\r\n"\\]+)"#,
            triggers: &["cookie"],
            action: Action::Custom(cookie_values),
        },
        Rule {
            regex: r#"(?i)(?-u:\b)authorization\s*[:=]\s*"?basic\s+([A-Za-z0-9+/=]{6,})"#,
            triggers: &["basic"],
            action: group(K::BasicAuth, 1, any),
        },
        // RFC 6750 b64token after the scheme word; `POST /oauth/token HTTP/1.1` is no header.
        Rule {
            regex: r"(?i)(?:^|[^/A-Za-z0-9_.-])bearer\s+([A-Za-z0-9._~+/-]{8,}=*)",
            triggers: &["bearer"],
            action: group(K::BearerToken, 1, looks_random),
        },
        Rule {
            regex: r"(?i)(?:^|[^/A-Za-z0-9_.-])token\s+([A-Za-z0-9._~+/-]{16,}=*)",
            triggers: &["token"],
            action: group(K::BearerToken, 1, looks_random),
        },
    ]
};

fn aws_key_pair(caps: &Captures<'_>, report: &mut RedactionReport) -> Option<String> {
    let part = |i: usize| caps.get(i).map_or("", |m| m.as_str());
    let mut out = RedactionKind::AwsAccessKey.marker();
    report.add(RedactionKind::AwsAccessKey, 1);
    if caps.get(3).is_some() {
        out.push_str(part(2));
        if looks_random(part(3)) {
            out.push_str(&RedactionKind::AwsSecretKey.marker());
            report.add(RedactionKind::AwsSecretKey, 1);
        } else {
            out.push_str(part(3));
        }
        out.push_str(part(4));
    }
    Some(out)
}

/// Cookie attributes of `Set-Cookie`, kept with their values.
const COOKIE_ATTRIBUTES: &[&str] = &[
    "path",
    "domain",
    "expires",
    "max-age",
    "samesite",
    "secure",
    "httponly",
    "priority",
    "partitioned",
    "version",
    "comment",
];

/// `Cookie: a=1; b=2`, `Set-Cookie: s=..; Path=/`: every cookie value, attributes kept.
fn cookie_values(caps: &Captures<'_>, report: &mut RedactionReport) -> Option<String> {
    let whole = caps.get(0)?;
    let value = caps.get(1)?;
    let marker = RedactionKind::Cookie.marker();
    let mut out = String::with_capacity(whole.as_str().len());
    out.push_str(&whole.as_str()[..value.start() - whole.start()]);
    let mut n = 0u64;
    for (i, part) in value.as_str().split(';').enumerate() {
        if i > 0 {
            out.push(';');
        }
        match part.split_once('=') {
            Some((name, v))
                if !eq_any(name.trim(), COOKIE_ATTRIBUTES)
                    && !v.trim().is_empty()
                    && !is_marker(v.trim()) =>
            {
                out.push_str(name);
                out.push('=');
                out.push_str(&marker);
                n += 1;
            }
            None if i == 0 && part.trim().len() >= 8 && !is_marker(part.trim()) => {
                out.push(' ');
                out.push_str(&marker);
                n += 1;
            }
            _ => out.push_str(part),
        }
    }
    if n == 0 {
        return None;
    }
    report.add(RedactionKind::Cookie, n);
    Some(out)
}

/// A key that may name a secret: it contains one of the stems [`key_class`] looks for.
const KEY: &str = r"(?:[A-Za-z_][A-Za-z0-9_.-]*)?(?i:pass|pwd|secret|token|key|auth|credential|sig|sess|dockercfg|dockerconfigjson)[A-Za-z0-9_.-]*";

/// `key = value` anywhere (`"key": "value"`, `\"key\":\"value\"` at any escaping depth,
/// `key=value&`), and config lines (`KEY=value with spaces`, `key: value`) whose value runs to
/// the end of the line.
static ASSIGNMENT: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"(?m)^(?P<lead>[ \t]*(?:export[ \t]+|-[ \t]+)?)(?P<lkey>{KEY})(?P<lsep>[ \t]*[:=][ \t]*)(?P<lval>[^\s"'\[{{|>\\][^\r\n]*?)[ \t]*\r?$|(?P<open>\\*["']?)(?P<key>{KEY})(?P<sep>\\*["']?[ \t]*[:=][ \t]*)(?P<val>\\+"[^"\n]*?\\+"|"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|\$\{{[^}}\n]*\}}|[^\s,;&"'<>{{}}\[\]()\\]+)"#
    )
});

/// What a private key block or a secret-named key contains (see [`KEY`]).
const PRIVATE_KEY_TRIGGERS: &[&str] = &["private key"];
const KEY_TRIGGERS: &[&str] = &[
    "pass",
    "pwd",
    "secret",
    "token",
    "key",
    "auth",
    "credential",
    "sig",
    "sess",
    "dockercfg",
    "dockerconfigjson",
];

/// The private key pattern: a PEM (or PGP) private key block, or what is left of a truncated one.
const PRIVATE_KEY: &str = r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s:,\\-]*)";

/// Compiled once: the private key pattern, the rules, the assignment pattern, and the set of
/// their trigger literals that tells which of them can match a string (one pass over the text;
/// a set of the full patterns would be far slower).
struct Compiled {
    set: RegexSet,
    private_key: Regex,
    rules: Vec<Regex>,
    assignment: Regex,
}

const SET_PRIVATE_KEY: usize = 0;
const SET_FIRST_RULE: usize = 1;

impl Compiled {
    fn set_assignment(&self) -> usize {
        SET_FIRST_RULE + self.rules.len()
    }
}

static COMPILED: LazyLock<Compiled> = LazyLock::new(|| {
    // Static patterns; a unit test compiles every one of them.
    let compile = |re: &str| Regex::new(re).expect("static redaction pattern compiles");
    let literals = |triggers: &[&str]| {
        let escaped: Vec<String> = triggers.iter().map(|t| regex::escape(t)).collect();
        format!("(?i:{})", escaped.join("|"))
    };
    let mut all: Vec<String> = vec![literals(PRIVATE_KEY_TRIGGERS)];
    all.extend(RULES.iter().map(|r| literals(r.triggers)));
    all.push(literals(KEY_TRIGGERS));
    Compiled {
        set: RegexSet::new(&all).expect("static redaction triggers compile as a set"),
        private_key: compile(PRIVATE_KEY),
        rules: RULES.iter().map(|r| compile(r.regex)).collect(),
        assignment: compile(&ASSIGNMENT),
    }
});

fn apply_rule(
    regex: &Regex,
    action: &Action,
    text: &str,
    report: &mut RedactionReport,
) -> Option<String> {
    let mut changed = false;
    let replaced = regex.replace_all(text, |caps: &Captures<'_>| {
        let whole = caps.get(0).map_or("", |m| m.as_str());
        let start = caps.get(0).map_or(0, |m| m.start());
        match action {
            Action::Group {
                kind,
                secret,
                accept,
            } => match caps.get(*secret) {
                Some(m) if !m.as_str().is_empty() && accept(m.as_str()) => {
                    changed = true;
                    report.add(*kind, 1);
                    format!(
                        "{}{}{}",
                        &whole[..m.start() - start],
                        kind.marker(),
                        &whole[m.end() - start..]
                    )
                }
                _ => whole.to_owned(),
            },
            Action::Custom(f) => match f(caps, report) {
                Some(out) => {
                    changed = true;
                    out
                }
                None => whole.to_owned(),
            },
        }
    });
    changed.then(|| replaced.into_owned())
}

fn redact_private_keys(text: &str, report: &mut RedactionReport) -> Option<String> {
    let regex = &COMPILED.private_key;
    let n = regex.find_iter(text).count();
    if n == 0 {
        return None;
    }
    report.add(RedactionKind::PrivateKey, n as u64);
    Some(
        regex
            .replace_all(text, RedactionKind::PrivateKey.marker().as_str())
            .into_owned(),
    )
}

/// The inside of a quoted value and its quotes: `("\"", "abc", "\"")`.
fn unquote(value: &str) -> (&str, &str, &str) {
    let lead = value.len() - value.trim_start_matches('\\').len();
    let rest = &value[lead..];
    for q in ['"', '\''] {
        if rest.len() >= 2 && rest.starts_with(q) && rest.ends_with(q) {
            let trail_start = value.len() - 1;
            let inner_end = value[..trail_start].trim_end_matches('\\').len();
            if inner_end > lead {
                return (
                    &value[..=lead],
                    &value[lead + 1..inner_end],
                    &value[inner_end..],
                );
            }
        }
    }
    ("", value, "")
}

/// The replacement of `value` (unquoted) under a key of `class`, or `None` to keep it.
/// `Authorization: Bearer <token>`: the scheme word stays; the credential after it goes unless
/// a token rule took it already.
fn field_replacement(class: KeyClass, value: &str) -> Option<String> {
    let marker = RedactionKind::SecretAssignment.marker();
    if let Some((scheme, rest)) = split_scheme(value) {
        // `Digest username=.., response=..`, `AWS4-HMAC-SHA256 Credential=.., Signature=..`:
        // parameters, judged one by one as assignments of their own.
        if rest.is_empty() || is_auth_params(rest) || !secret_value(class, rest) {
            return None;
        }
        return Some(format!("{scheme} {marker}"));
    }
    secret_value(class, value).then_some(marker)
}

fn redact_assignments(text: &str, report: &mut RedactionReport) -> Option<String> {
    let regex = &COMPILED.assignment;
    let mut changed = false;
    let replaced = regex.replace_all(text, |caps: &Captures<'_>| {
        let whole = caps.get(0).map_or("", |m| m.as_str());
        let part = |name: &str| caps.name(name).map_or("", |m| m.as_str());
        let (lead, key, sep, value) = if caps.name("lkey").is_some() {
            (part("lead"), part("lkey"), part("lsep"), part("lval"))
        } else {
            (part("open"), part("key"), part("sep"), part("val"))
        };
        let (open_q, inner, close_q) = unquote(value);
        // `arn:aws:secretsmanager:..:secret:prod/db`: a path segment, not an assignment.
        let start = caps.get(0).map_or(0, |m| m.start());
        let end = caps.get(0).map_or(0, |m| m.end());
        if lead.is_empty() && sep == ":" && text[..start].ends_with(':') {
            return whole.to_owned();
        }
        // `token=[REDACTED:..]`: a token rule already took the value.
        if text[end..].starts_with(MARKER_PREFIX) {
            return whole.to_owned();
        }
        // `passwd:chauthtok`, `map[authorization:..]`: a bare `key:value` is a label unless the
        // value looks like a credential.
        let class = match key_class(key) {
            Some(_) if sep == ":" && open_q.is_empty() && lead.is_empty() => {
                Some(KeyClass::NeedsRandom)
            }
            class => class,
        };
        if let Some(out) = class.and_then(|class| field_replacement(class, inner)) {
            changed = true;
            report.add(RedactionKind::SecretAssignment, 1);
            return format!("{lead}{key}{sep}{open_q}{out}{close_q}");
        }
        // A kept value (`author: ...`, `auth: ok`) may still hold assignments of its own.
        if inner.len() < MIN_RULE_LEN || !inner.contains(['=', ':']) {
            return whole.to_owned();
        }
        match redact_assignments(inner, report) {
            Some(inside) => {
                changed = true;
                format!("{lead}{key}{sep}{open_q}{inside}{close_q}")
            }
            None => whole.to_owned(),
        }
    });
    changed.then(|| replaced.into_owned())
}

/// The JSON document `text` holds, when it is one (an object or an array).
fn json_document(text: &str) -> Option<Value> {
    let t = text.trim();
    let container =
        (t.starts_with('{') && t.ends_with('}')) || (t.starts_with('[') && t.ends_with(']'));
    if !container || t.starts_with(MARKER_PREFIX) {
        return None;
    }
    serde_json::from_str(t).ok()
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
    fn sanitize_text(
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
    fn every_static_pattern_compiles() {
        let compiled = LazyLock::force(&COMPILED);
        assert_eq!(compiled.rules.len(), RULES.len());
        assert_eq!(compiled.set.len(), RULES.len() + 2);
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
