//! Ownership scans over the production code of the services and shared crates:
//!
//! - Error codes travel typed: no service names a code of the table as a string literal (a
//!   literal is how a typo became `internal_error` before; with `ErrorCode` the compiler checks
//!   each one).
//! - Request subjects are built in one place: the subject module and the endpoint types of each
//!   service API, used through the typed clients (`pulse_bus::clients`) and
//!   `Bus::serve_endpoint`.
//!
//! Test modules after a `#[cfg(test)]` line are not production code and may spell a wire value to
//! check it.

use std::path::{Path, PathBuf};

use pulse_bus::ErrorCode;

fn root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::canonicalize(&root).unwrap_or(root)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `src` trees of every crate under `services/` and `shared/`.
fn production_files() -> Vec<PathBuf> {
    let root = root();
    let mut files = Vec::new();
    for dir in ["services", "shared"] {
        for entry in std::fs::read_dir(root.join(dir)).expect("dir").flatten() {
            rust_files(&entry.path().join("src"), &mut files);
        }
    }
    assert!(
        files.len() > 50,
        "the scan found only {} files",
        files.len()
    );
    files
}

/// The production part of a source file: everything before its first `#[cfg(test)]`; `None` for
/// a file that is a test module itself.
fn production(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    if name == "tests.rs" || name.ends_with("_tests.rs") {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    Some(
        text.split("#[cfg(test)]")
            .next()
            .unwrap_or_default()
            .to_owned(),
    )
}

fn is_comment(line: &str) -> bool {
    line.trim_start().starts_with("//")
}

/// The string literals of `code` (plain `"..."` literals; raw strings are not used for codes).
fn literals(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\'' if i + 2 < bytes.len() && (bytes[i + 2] == b'\'' || bytes[i + 1] == b'\\') => {
                // A char literal such as '"' or '\"': skip it.
                let end = code[i + 1..]
                    .find('\'')
                    .map_or(bytes.len(), |e| i + 1 + e + 1);
                i = end.max(i + 1);
            }
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < bytes.len() && bytes[j] != b'"' {
                    if bytes[j] == b'\\' {
                        j += 1;
                    }
                    j += 1;
                }
                out.push(&code[start..j.min(bytes.len())]);
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// Where error codes are answered: every service, the bus and the service harness. The domain's
/// own wire enums (policy reason codes, run causes) are not error codes and may share a word.
fn answers_errors(path: &Path) -> bool {
    let text = path.to_string_lossy();
    text.contains("/services/")
        || text.contains("/shared/bus/")
        || text.contains("/shared/runtime/")
}

#[test]
fn no_service_spells_an_error_code_as_a_string() {
    let mut found = Vec::new();
    for path in production_files().iter().filter(|p| answers_errors(p)) {
        let Some(code) = production(path) else {
            continue;
        };
        let code: Vec<&str> = code.lines().filter(|l| !is_comment(l)).collect();
        for literal in literals(&code.join("\n")) {
            if let Some(code) = ErrorCode::from_code(literal) {
                found.push(format!("{}: \"{}\"", path.display(), code.code()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "error codes spelled as strings (use ErrorCode::..):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_sees_a_literal_code() {
    let code = r#"let e = ErrorReply::new("agent_refused", "no"); let c = '"';"#;
    let hits: Vec<_> = literals(code)
        .into_iter()
        .filter_map(ErrorCode::from_code)
        .collect();
    assert_eq!(hits, [ErrorCode::AgentRefused]);
}

/// Subject builders only the bus's own modules may call.
const BUILDERS: &[&str] = &[
    "subjects().tenant(",
    "subjects.tenant(",
    "subjects().relay(",
    "subjects.relay(",
    "any_tenant(",
    "relay_any_tenant(",
    "relay_agent(",
];

/// The bus modules that own subjects: the builder itself, endpoints and the relay's per-agent
/// forwarding subject.
const OWNERS: &[&str] = &["subjects.rs", "endpoint.rs", "relay_api.rs"];

#[test]
fn only_the_bus_builds_request_subjects() {
    let mut found = Vec::new();
    for path in &production_files() {
        let in_bus = path.components().any(|c| c.as_os_str() == "bus");
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if in_bus && OWNERS.contains(&name) {
            continue;
        }
        let Some(production) = production(path) else {
            continue;
        };
        for (n, line) in production.lines().enumerate() {
            if is_comment(line) {
                continue;
            }
            let compact: String = line.split_whitespace().collect();
            for builder in BUILDERS {
                // `event_any_tenant(` is the events filter builder, not a request subject.
                if compact.contains(builder) && !compact.contains("event_any_tenant(") {
                    found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "subjects built by hand (use a client from pulse_bus::clients or Bus::serve_endpoint):\n{}",
        found.join("\n")
    );
}
