//! The crate's top-level modules form a layered graph: the transport and routes at the bottom,
//! prices over them, the loop, and the cost ledger sink over the loop's usage hook; no module
//! imports a module that imports it back (`pulse_test_support::module_graph` names any cycle).

use std::path::Path;

#[test]
fn top_level_modules_import_each_other_without_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    pulse_test_support::module_graph::assert_layered(
        &src,
        &["agent_loop", "cost", "pricing", "provider", "route"],
    );
}
