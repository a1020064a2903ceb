//! Request subjects are built in one place: the subject module and the endpoint types of each
//! service API, used through the typed clients ([`pulse_bus::clients`]) and
//! [`pulse_bus::Bus::serve_endpoint`]. This scan fails when production code of a service builds a
//! tenant, relay or any-tenant subject by hand.

use std::path::{Path, PathBuf};

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

#[test]
fn only_the_bus_builds_request_subjects() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
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
    let mut found = Vec::new();
    for path in &files {
        let in_bus = path.components().any(|c| c.as_os_str() == "bus");
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if in_bus && OWNERS.contains(&name) {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let production = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in production.lines().enumerate() {
            if line.trim_start().starts_with("//") {
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
