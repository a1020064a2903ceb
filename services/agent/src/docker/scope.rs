//! Which containers an agent watches and acts on: all of the engine's, or only those carrying
//! one label (`--docker-label KEY` or `KEY=VALUE`).
//!
//! An engine shared by several projects (a CI machine, a host running other people's stacks)
//! would otherwise put every container into the agent's reports, where Patrol judges them. The
//! label goes to the engine as its own `label` filter on the list and the event stream, so the
//! engine decides what matches; inspect, logs and lifecycle calls on a container outside the
//! scope answer [`DockerError::NotFound`](super::DockerError::NotFound), as if it were absent.

use std::collections::BTreeMap;
use std::fmt;

/// Longest label selector accepted, in bytes.
pub const MAX_SELECTOR_LEN: usize = 512;

/// A label selector: `key` (the label is present) or `key=value` (it has this value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelScope {
    key: String,
    value: Option<String>,
}

/// Why a selector was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid docker label selector {selector:?}: {reason}")]
pub struct InvalidLabelScope {
    pub selector: String,
    pub reason: &'static str,
}

impl LabelScope {
    /// Parses `key` or `key=value`. Keys are what Docker accepts in practice (letters, digits,
    /// `.`, `-`, `_`, `/`); values are printable with no control characters.
    pub fn parse(selector: &str) -> Result<Self, InvalidLabelScope> {
        let refuse = |reason| InvalidLabelScope {
            selector: selector.chars().take(MAX_SELECTOR_LEN).collect(),
            reason,
        };
        if selector.len() > MAX_SELECTOR_LEN {
            return Err(refuse("longer than 512 bytes"));
        }
        let (key, value) = match selector.split_once('=') {
            Some((key, value)) => (key, Some(value)),
            None => (selector, None),
        };
        if key.is_empty() {
            return Err(refuse("the label key is empty"));
        }
        if !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'/'))
        {
            return Err(refuse(
                "the label key may hold only letters, digits and . - _ /",
            ));
        }
        if value.is_some_and(|v| v.chars().any(char::is_control)) {
            return Err(refuse("the label value holds a control character"));
        }
        Ok(Self {
            key: key.to_owned(),
            value: value.map(str::to_owned),
        })
    }

    /// Whether a container with these labels is in scope.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match (labels.get(&self.key), &self.value) {
            (Some(have), Some(want)) => have == want,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

impl fmt::Display for LabelScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(value) => write!(f, "{}={value}", self.key),
            None => f.write_str(&self.key),
        }
    }
}

/// The Engine API `filters` query value: `{"type":["container"]}` for events when `events`,
/// plus `{"label":[scope]}` when scoped; percent-encoded. `None` when there is nothing to filter.
pub fn filters(scope: Option<&LabelScope>, events: bool) -> Option<String> {
    let mut map = serde_json::Map::new();
    if events {
        map.insert("type".to_owned(), serde_json::json!(["container"]));
    }
    if let Some(scope) = scope {
        map.insert("label".to_owned(), serde_json::json!([scope.to_string()]));
    }
    (!map.is_empty()).then(|| percent_encode(&serde_json::Value::Object(map).to_string()))
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_selector_matches_presence_or_value() {
        let present = LabelScope::parse("com.docker.compose.project").unwrap();
        let valued = LabelScope::parse("com.docker.compose.project=pulse-1").unwrap();
        let mine = labels(&[("com.docker.compose.project", "pulse-1")]);
        let theirs = labels(&[("com.docker.compose.project", "other")]);
        assert!(present.matches(&mine) && present.matches(&theirs));
        assert!(valued.matches(&mine));
        assert!(!valued.matches(&theirs));
        assert!(!valued.matches(&labels(&[])));
        // An empty value is a value: the label must be present and empty.
        let empty = LabelScope::parse("k=").unwrap();
        assert!(empty.matches(&labels(&[("k", "")])));
        assert!(!empty.matches(&labels(&[("k", "x")])));
    }

    #[test]
    fn bad_selectors_are_refused_with_a_reason() {
        for bad in ["", "=x", "a b", "k\u{0}=v", "k=v\nw", &"k".repeat(600)] {
            let err = LabelScope::parse(bad).expect_err(bad);
            assert!(!err.reason.is_empty());
        }
    }

    #[test]
    fn filters_are_the_engines_json_percent_encoded() {
        assert_eq!(filters(None, false), None);
        assert_eq!(
            filters(None, true).unwrap(),
            "%7B%22type%22%3A%5B%22container%22%5D%7D"
        );
        let scope = LabelScope::parse("pulse.qualify.run=a b&c").unwrap();
        assert_eq!(
            filters(Some(&scope), true).unwrap(),
            "%7B%22label%22%3A%5B%22pulse.qualify.run%3Da%20b%26c%22%5D%2C%22type%22%3A%5B%22container%22%5D%7D"
        );
    }
}
