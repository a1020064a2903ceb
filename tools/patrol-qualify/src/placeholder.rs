//! The placeholders a manifest may write, and the one substitution every lab and the manifest
//! use. Validation reads the same vocabulary, so what `validate` accepts is what a lab builds.
//!
//! - The run placeholders, [`RUN_PLACEHOLDERS`]: `${run_id}` (this project's spelling) and
//!   `${run_token}` (upstream's catalogue spelling) mean the same thing, the run's opaque token.
//!   A resource name must contain one of them, so every run's resources are its own.
//! - `${port}` and `${port:<alias>}`, in a Docker command or health check only: the port the
//!   driver allocated for this resource, or for the resource with that alias.
//!
//! Any other `${...}`, an unclosed `${`, or a port placeholder where no ports exist (a
//! resource name, the process lab) is an error, never text passed on. A `$` not followed by
//! `{` is plain text.

use std::collections::BTreeMap;

/// The run placeholders, in the order messages name them.
pub const RUN_PLACEHOLDERS: [&str; 2] = ["${run_id}", "${run_token}"];

/// The keys (inside `${...}`) of [`RUN_PLACEHOLDERS`].
const RUN_KEYS: [&str; 2] = ["run_id", "run_token"];

/// Where a port placeholder may appear, and what it resolves to.
#[derive(Debug, Clone, Copy)]
pub struct Ports<'a> {
    /// The alias whose port `${port}` is.
    pub own: &'a str,
    /// Every resource's allocated port, by alias.
    pub by_alias: &'a BTreeMap<String, u16>,
}

/// One placeholder found in a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholder<'t> {
    /// `${run_id}` or `${run_token}`.
    Run,
    /// `${port}`.
    OwnPort,
    /// `${port:<alias>}`.
    PortOf(&'t str),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceholderError {
    #[error("unclosed placeholder in {text:?}")]
    Unclosed { text: String },
    #[error(
        "unknown placeholder ${{{key}}} in {text:?} (known: ${{run_id}}, ${{run_token}}, ${{port}}, ${{port:<alias>}})"
    )]
    Unknown { key: String, text: String },
    #[error("${{{key}}} in {text:?}: ports exist only in a Docker command or health check")]
    NoPorts { key: String, text: String },
    #[error("${{{key}}}: no resource {alias} has a port")]
    NoSuchPort { key: String, alias: String },
}

/// The run placeholders as a message names them: `${run_id} or ${run_token}`.
pub fn run_placeholders_text() -> String {
    RUN_PLACEHOLDERS.join(" or ")
}

/// A text cut at its placeholders: each placeholder with the text before it, and the text
/// after the last one.
struct Split<'t> {
    parts: Vec<(&'t str, Placeholder<'t>)>,
    tail: &'t str,
}

fn split(text: &str) -> Result<Split<'_>, PlaceholderError> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(PlaceholderError::Unclosed {
                text: text.to_owned(),
            });
        };
        let key = &after[..end];
        let placeholder = if RUN_KEYS.contains(&key) {
            Placeholder::Run
        } else if key == "port" {
            Placeholder::OwnPort
        } else if let Some(alias) = key.strip_prefix("port:") {
            Placeholder::PortOf(alias)
        } else {
            return Err(PlaceholderError::Unknown {
                key: key.to_owned(),
                text: text.to_owned(),
            });
        };
        found.push((&rest[..start], placeholder));
        rest = &after[end + 1..];
    }
    Ok(Split {
        parts: found,
        tail: rest,
    })
}

/// Every placeholder of `text`, in order.
pub fn scan(text: &str) -> Result<Vec<Placeholder<'_>>, PlaceholderError> {
    Ok(split(text)?.parts.into_iter().map(|(_, p)| p).collect())
}

/// `text` with every placeholder replaced: run placeholders by `run_token`, port placeholders
/// by `ports` (an error where `ports` is `None`).
pub fn substitute(
    text: &str,
    run_token: &str,
    ports: Option<Ports<'_>>,
) -> Result<String, PlaceholderError> {
    let Split { parts, tail } = split(text)?;
    let port_of = |key: String, alias: &str| {
        let ports = ports.ok_or_else(|| PlaceholderError::NoPorts {
            key: key.clone(),
            text: text.to_owned(),
        })?;
        ports
            .by_alias
            .get(alias)
            .copied()
            .ok_or_else(|| PlaceholderError::NoSuchPort {
                key,
                alias: alias.to_owned(),
            })
    };
    let mut out = String::with_capacity(text.len() + run_token.len());
    for (before, placeholder) in parts {
        out.push_str(before);
        match placeholder {
            Placeholder::Run => out.push_str(run_token),
            Placeholder::OwnPort => {
                let own = ports.map(|p| p.own).unwrap_or_default();
                out.push_str(&port_of("port".to_owned(), own)?.to_string());
            }
            Placeholder::PortOf(alias) => {
                out.push_str(&port_of(format!("port:{alias}"), alias)?.to_string());
            }
        }
    }
    out.push_str(tail);
    Ok(out)
}

/// A resource name for one run: the run placeholders replaced, and no other placeholder.
pub fn resource_name(name: &str, run_token: &str) -> Result<String, PlaceholderError> {
    substitute(name, run_token, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_run_placeholders_become_the_token() {
        assert_eq!(
            resource_name("orders-api-${run_id}", "k3x9").unwrap(),
            "orders-api-k3x9"
        );
        assert_eq!(
            resource_name("pulse-qual-${run_token}-faulty", "k3x9").unwrap(),
            "pulse-qual-k3x9-faulty"
        );
        assert_eq!(
            resource_name("a-${run_token}-${run_id}", "t").unwrap(),
            "a-t-t"
        );
        let holds_run = |name: &str| scan(name).is_ok_and(|f| f.contains(&Placeholder::Run));
        assert!(holds_run("x-${run_id}"));
        assert!(holds_run("x-${run_token}"));
        for without in [
            "x",
            "x-run_token",
            "x-$run_id",
            "x-{run_id}",
            "x-${run_tok}",
        ] {
            assert!(!holds_run(without), "{without}");
        }
        assert_eq!(run_placeholders_text(), "${run_id} or ${run_token}");
    }

    #[test]
    fn ports_resolve_only_where_they_exist() {
        let ports = BTreeMap::from([("a".to_owned(), 8080), ("b".to_owned(), 9090)]);
        let here = Some(Ports {
            own: "a",
            by_alias: &ports,
        });
        assert_eq!(
            substitute("x-${run_id}-${run_token}-${port}-${port:b}", "tok", here).unwrap(),
            "x-tok-tok-8080-9090"
        );
        assert_eq!(substitute("plain $x", "tok", here).unwrap(), "plain $x");
        assert!(matches!(
            substitute("${port:zz}", "tok", here),
            Err(PlaceholderError::NoSuchPort { .. })
        ));
        assert!(matches!(
            resource_name("svc-${run_id}-${port}", "tok"),
            Err(PlaceholderError::NoPorts { .. })
        ));
        assert!(matches!(
            substitute("${home}", "tok", here),
            Err(PlaceholderError::Unknown { .. })
        ));
        assert!(matches!(
            substitute("${run_id", "tok", here),
            Err(PlaceholderError::Unclosed { .. })
        ));
    }

    #[test]
    fn scan_names_every_placeholder_in_order() {
        assert_eq!(
            scan("${port:db}/x ${run_token} ${port}").unwrap(),
            vec![
                Placeholder::PortOf("db"),
                Placeholder::Run,
                Placeholder::OwnPort
            ]
        );
        assert!(scan("${port:unterminated").is_err());
        assert!(scan("no placeholders").unwrap().is_empty());
    }
}
