//! Embeds every file of `migrations/` in name order, so adding a migration is adding a file.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    // Read when the script runs, not when it was compiled: a build directory shared between
    // checkouts must embed the migrations of the checkout being built.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR set by cargo");
    let dir = Path::new(&manifest).join("migrations");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("migrations directory exists")
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".sql"))
        .collect();
    names.sort();
    let mut out = String::from("pub(crate) static MIGRATIONS: &[(&str, &str)] = &[\n");
    for name in names {
        let version = name.trim_end_matches(".sql");
        let path = dir.join(&name);
        writeln!(
            out,
            "    ({version:?}, include_str!({:?})),",
            path.display().to_string()
        )
        .expect("write to string");
    }
    out.push_str("];\n");
    let target =
        Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR set by cargo")).join("migrations.rs");
    std::fs::write(target, out).expect("write generated migration list");
}
