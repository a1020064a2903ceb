//! Error codes travel typed: no service names a code of the table as a string literal. A literal
//! is how a typo became `internal_error` before; with [`ErrorCode`] the compiler checks each one.
//!
//! The scan covers the production code of every service and of the bus (test modules after a
//! `#[cfg(test)]` line are not production code and may spell a wire value to check it).

use std::path::{Path, PathBuf};

use pulse_capabilities::ErrorCode;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
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

/// The production part of a source file: everything before its first `#[cfg(test)]`, without
/// comment lines; `None` for a file that is a test module itself.
fn production(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    if name == "tests.rs" || name.ends_with("_tests.rs") {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    Some(
        code.lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n"),
    )
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

fn scanned_files() -> Vec<PathBuf> {
    let root = root();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(root.join("services"))
        .expect("services/")
        .flatten()
    {
        rust_files(&entry.path().join("src"), &mut files);
    }
    rust_files(&root.join("shared/bus/src"), &mut files);
    rust_files(&root.join("shared/runtime/src"), &mut files);
    files
}

#[test]
fn no_service_spells_an_error_code_as_a_string() {
    let files = scanned_files();
    assert!(
        files.len() > 50,
        "the scan found only {} files",
        files.len()
    );
    let mut found = Vec::new();
    for path in &files {
        let Some(code) = production(path) else {
            continue;
        };
        for literal in literals(&code) {
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
