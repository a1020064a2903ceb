//! The gateway's modules import each other without a cycle: no module imports one that imports
//! it back, directly or through others. A module is a top-level module of the crate (a folder
//! such as `web/` is one module); an import is any `crate::<module>` path in its code (tests
//! excluded), and for the crate root (`lib.rs`) any `<module>::` path. A path to an item the
//! root re-exports counts as an import of the root.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Imports the graph may keep for now, with why. Each must still exist (so a fixed one is
/// removed from here); none may be part of a cycle once it is left out.
const KNOWN: &[(&str, &str, &str)] = &[];

const ROOT: &str = "lib";

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable source folder") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a source file belongs to (`None` for the binary's `main.rs`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).expect("under src");
    let first = relative
        .components()
        .next()?
        .as_os_str()
        .to_str()?
        .to_owned();
    match first.as_str() {
        "main.rs" => None,
        "lib.rs" => Some(ROOT.to_owned()),
        name => Some(name.trim_end_matches(".rs").to_owned()),
    }
}

/// The code of a file without its comments and its test module.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first path segments after every `crate::` (`crate::a::b` gives `a`; `crate::{a, b::c}`
/// gives `a` and `b`).
fn crate_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(is_ident) {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        rest = &group[i..];
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && is_ident(c) => {
                        let name: String =
                            group[i..].chars().take_while(|c| is_ident(*c)).collect();
                        found.push(name);
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            found.push(rest.chars().take_while(|c| is_ident(*c)).collect());
        }
    }
    found
}

/// The modules the crate root names as `<module>::` (its `mod` declarations aside).
fn root_paths(code: &str, modules: &BTreeSet<String>) -> Vec<String> {
    let mut found = Vec::new();
    for line in code.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("mod ") || trimmed.starts_with("pub mod ") {
            continue;
        }
        for module in modules {
            let needle = format!("{module}::");
            let mut from = 0;
            while let Some(at) = line[from..].find(&needle) {
                let start = from + at;
                let before = line[..start].chars().next_back();
                if !before.is_some_and(|c| is_ident(c) || c == ':') {
                    found.push(module.clone());
                }
                from = start + needle.len();
            }
        }
    }
    found
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let owned: Vec<(String, PathBuf)> = files
        .into_iter()
        .filter_map(|file| Some((module_of(&src, &file)?, file)))
        .collect();
    let modules: BTreeSet<String> = owned
        .iter()
        .map(|(m, _)| m.clone())
        .filter(|m| m != ROOT)
        .collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, file) in &owned {
        let code = code(&std::fs::read_to_string(file).expect("readable source"));
        let mut targets: Vec<String> = crate_paths(&code)
            .into_iter()
            .map(|name| {
                if modules.contains(&name) {
                    name
                } else {
                    ROOT.to_owned()
                }
            })
            .collect();
        if module == ROOT {
            targets.extend(root_paths(&code, &modules));
        }
        let entry = edges.entry(module.clone()).or_default();
        entry.extend(targets.into_iter().filter(|t| t != module));
    }
    edges
}

/// The strongly connected components with more than one module (Tarjan).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, node: &'a str) {
            let at = self.index.len();
            self.index.insert(node, at);
            self.low.insert(node, at);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.edges.get(node).into_iter().flatten() {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    component.push(top.to_owned());
                    if top == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in edges.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let mut edges = graph();
    for (from, to, why) in KNOWN {
        let removed = edges.get_mut(*from).is_some_and(|t| t.remove(*to));
        assert!(
            removed,
            "{from} no longer imports {to} ({why}): remove the exception from KNOWN"
        );
    }
    let found = cycles(&edges);
    assert!(
        found.is_empty(),
        "modules that import each other (move what they share into a module both import): \
         {found:?}"
    );
}

#[test]
fn the_reader_sees_the_imports_that_make_a_cycle() {
    let code = code(
        "use crate::a::X;\nuse crate::{b, c::{D, E}};\nfn f() { crate::d::g(); }\n\
         // crate::commented::out\n#[cfg(test)]\nmod tests { use crate::e; }\n",
    );
    assert_eq!(crate_paths(&code), ["a", "b", "c", "d"]);
    let edges: BTreeMap<String, BTreeSet<String>> = [
        ("a", &["b"][..]),
        ("b", &["c"]),
        ("c", &["a"]),
        ("d", &["a"]),
    ]
    .into_iter()
    .map(|(from, to)| {
        (
            from.to_owned(),
            to.iter().map(|t| (*t).to_owned()).collect(),
        )
    })
    .collect();
    assert_eq!(cycles(&edges), [["a", "b", "c"]]);
    // And the real graph is read: the root imports the route table, handlers their state.
    let real = graph();
    assert!(real[ROOT].contains("routes"), "{:?}", real[ROOT]);
    assert!(real["findings"].contains("state"), "{:?}", real["findings"]);
}
