//! The one list of secret words, and how a key and its value are judged: which field names,
//! flags and assignment keys name a secret, and which values under them could be credentials
//! (not placeholders, paths, prose or auth scheme words). Every entry point (the provider-bound
//! [`crate::Redactor`] and the read-time [`crate::redact_read`]) goes through these.

use crate::kind::{RedactionKind, is_marker};

/// How a key's value is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyClass {
    /// Any value that is not a placeholder is a secret (`password`, `api_key`, `AUTH_TOKEN`).
    Strong,
    /// Only a value that looks random is (`sig`, `signature`, a lone `pass`, `sessionid`).
    NeedsRandom,
    /// Any value is (`MYSQL_PWD`); not a secret name by itself (`PWD=/srv/app` is a directory).
    NotPath,
    /// A secret word inside a longer word (`AUTHKEY`, `basicauth`, `DB_PASSWORDS`, but also
    /// `author`, `max_tokens`): only a single value that looks random and like a credential is.
    Embedded,
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
/// Words that hold a secret word and mean something else (`author`, `authenticated`,
/// `tokenizer`, `secretary`), by how they begin.
const LOOKALIKE_PREFIXES: &[&str] = &["author", "authent", "tokeniz", "secretar"];

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

pub(crate) fn eq_any(word: &str, list: &[&str]) -> bool {
    list.iter().any(|w| w.eq_ignore_ascii_case(word))
}

fn ends_with_ci(word: &str, suffix: &str) -> bool {
    word.len() > suffix.len()
        && word
            .get(word.len() - suffix.len()..)
            .is_some_and(|tail| tail.eq_ignore_ascii_case(suffix))
}

fn starts_with_ci(word: &str, prefix: &str) -> bool {
    word.get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
}

/// Whether `word` holds `part` (ASCII case-insensitive).
fn contains_ci(word: &str, part: &str) -> bool {
    word.len() > part.len()
        && word
            .as_bytes()
            .windows(part.len())
            .any(|w| w.eq_ignore_ascii_case(part.as_bytes()))
}

/// Whether `a` followed by `b` spells one of `list` (`api` + `key`).
fn pair_in(a: &str, b: &str, list: &[&str]) -> bool {
    list.iter().any(|w| {
        w.len() == a.len() + b.len()
            && w[..a.len()].eq_ignore_ascii_case(a)
            && w[a.len()..].eq_ignore_ascii_case(b)
    })
}

pub(crate) fn key_class(key: &str) -> Option<KeyClass> {
    let mut strong = false;
    let mut random = false;
    let mut not_path = false;
    let mut embedded = false;
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
        } else if STRONG_WORDS.iter().any(|w| contains_ci(word, w))
            && !LOOKALIKE_PREFIXES.iter().any(|p| starts_with_ci(word, p))
        {
            embedded = true;
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
    } else if embedded {
        Some(KeyClass::Embedded)
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

pub(crate) const AUTH_SCHEMES: &[&str] = &[
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

pub(crate) fn is_placeholder(value: &str) -> bool {
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
pub(crate) fn is_path(value: &str) -> bool {
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

pub(crate) fn has_digit(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_digit())
}

/// Random tokens have digits or mixed case; words in prose ("bearer authentication") do not.
pub(crate) fn looks_random(s: &str) -> bool {
    has_digit(s)
        || (s.bytes().any(|b| b.is_ascii_uppercase()) && s.bytes().any(|b| b.is_ascii_lowercase()))
}

/// Base64 or hex rather than a capitalised word: digits, symbols of the encoding, or an
/// uppercase letter past the first (`dXNlcjpwYXNz`, not `Authentication`).
pub(crate) fn looks_encoded(s: &str) -> bool {
    has_digit(s)
        || s.bytes().any(|b| matches!(b, b'+' | b'/'))
        || (s.bytes().skip(1).any(|b| b.is_ascii_uppercase())
            && s.bytes().any(|b| b.is_ascii_lowercase()))
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
pub(crate) fn secret_value(class: KeyClass, value: &str) -> bool {
    if is_placeholder(value) || is_path(value) || is_prose(value) {
        return false;
    }
    match class {
        KeyClass::Strong | KeyClass::NotPath => true,
        KeyClass::NeedsRandom => {
            let v = value.trim();
            !v.contains(char::is_whitespace) && looks_like_credential(v)
        }
        KeyClass::Embedded => {
            let v = value.trim();
            !v.contains(char::is_whitespace) && looks_random(v) && looks_like_credential(v)
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
pub(crate) fn is_secret_flag(arg: &str) -> bool {
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

/// The replacement of `value` (unquoted) under a key of `class`, or `None` to keep it.
/// `Authorization: Bearer <token>`: the scheme word stays; the credential after it goes unless
/// a token rule took it already.
pub(crate) fn field_replacement(class: KeyClass, value: &str) -> Option<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
