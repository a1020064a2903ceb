//! The import graph of a crate's top-level modules, for a test that keeps it layered: no module
//! imports, through `crate::` paths, a module that imports it back. Comments are skipped (a doc
//! link is no dependency). Each crate that keeps such a layering calls [`assert_layered`] from
//! its `tests/module_graph.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// For each top-level module, the top-level modules it names, each with one file that does.
pub type Graph = BTreeMap<String, BTreeMap<String, String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`None` for the crate root files).
fn top_level(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).expect("under src");
    let first = relative.components().next()?.as_os_str().to_str()?;
    match first {
        "lib.rs" | "main.rs" => None,
        name => Some(name.trim_end_matches(".rs").to_string()),
    }
}

/// The first segments of every `crate::` path in `code` (grouped imports included), comments
/// stripped.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in code.lines() {
        let line = line.split("//").next().unwrap_or_default();
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            let preceded_by_ident = rest[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_');
            rest = &rest[at + "crate::".len()..];
            if preceded_by_ident {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                let group = group.split('}').next().unwrap_or_default();
                names.extend(group.split(',').filter_map(first_segment));
            } else if let Some(name) = first_segment(rest) {
                names.insert(name);
            }
        }
    }
    names
}

fn first_segment(path: &str) -> Option<String> {
    let name: String = path
        .trim()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

pub fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let modules: BTreeSet<String> = files.iter().filter_map(|f| top_level(src, f)).collect();
    let mut graph = Graph::new();
    for file in &files {
        let Some(from) = top_level(src, file) else {
            continue;
        };
        let code = fs::read_to_string(file).expect("read source");
        let edges = graph.entry(from.clone()).or_default();
        for to in crate_paths(&code) {
            if to != from && modules.contains(&to) {
                let shown = file.strip_prefix(src).unwrap_or(file).display().to_string();
                edges.entry(to).or_insert(shown);
            }
        }
    }
    graph
}

/// The strongly connected components of more than one module (Tarjan).
pub fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, node: &'g str) {
        let n = s.index.len();
        s.index.insert(node, n);
        s.low.insert(node, n);
        s.stack.push(node);
        s.on_stack.insert(node);
        let graph = s.graph;
        for next in graph.get(node).into_iter().flat_map(|e| e.keys()) {
            let next = next.as_str();
            if !s.index.contains_key(next) {
                visit(s, next);
                let low = s.low[node].min(s.low[next]);
                s.low.insert(node, low);
            } else if s.on_stack.contains(next) {
                let low = s.low[node].min(s.index[next]);
                s.low.insert(node, low);
            }
        }
        if s.low[node] == s.index[node] {
            let mut component = Vec::new();
            while let Some(top) = s.stack.pop() {
                s.on_stack.remove(top);
                component.push(top.to_string());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.found
}

/// A cycle's edges inside its component, each with a file that makes it.
pub fn describe(graph: &Graph, component: &[String]) -> String {
    let mut lines = Vec::new();
    for from in component {
        for (to, file) in graph.get(from).into_iter().flatten() {
            if component.contains(to) {
                lines.push(format!("  {from} -> {to} ({file})"));
            }
        }
    }
    format!("cycle {{{}}}:\n{}", component.join(", "), lines.join("\n"))
}

/// Asserts that the top-level modules under `src` form no import cycle, naming each cycle's
/// edges and a file that makes each. `expected` are modules the crate is known to have: a check
/// that the graph was read from the right place, not an empty one.
pub fn assert_layered(src: &Path, expected: &[&str]) {
    let graph = graph(src);
    let missing: Vec<&str> = expected
        .iter()
        .copied()
        .filter(|m| !graph.contains_key(*m))
        .collect();
    assert!(
        missing.is_empty(),
        "modules {missing:?} not found in the graph read from {}",
        src.display()
    );
    let found = cycles(&graph);
    let report: Vec<String> = found.iter().map(|c| describe(&graph, c)).collect();
    assert!(found.is_empty(), "{}", report.join("\n"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mutual_import_is_reported_as_a_cycle() {
        let code_a = "use crate::b::Thing;\n// crate::c is only a doc link\n";
        let code_b = "use crate::{a::Other, provider};\nfn f() { my_crate::c::g(); }\n";
        assert_eq!(crate_paths(code_a), BTreeSet::from(["b".to_string()]));
        assert_eq!(
            crate_paths(code_b),
            BTreeSet::from(["a".to_string(), "provider".to_string()])
        );
        let mut graph = Graph::new();
        for (from, code) in [("a", code_a), ("b", code_b), ("provider", "")] {
            let edges = graph.entry(from.to_string()).or_default();
            for to in crate_paths(code) {
                edges.insert(to, format!("{from}.rs"));
            }
        }
        let found = cycles(&graph);
        assert_eq!(found, vec![vec!["a".to_string(), "b".to_string()]]);
        let shown = describe(&graph, &found[0]);
        assert!(
            shown.contains("a -> b (a.rs)") && shown.contains("b -> a (b.rs)"),
            "{shown}"
        );
    }
}
