//! (interface placeholder)

/// `patrol-qualify compare`.
pub fn cli_compare(
    _args: &crate::cli::CompareArgs,
) -> Result<crate::cli::Outcome, crate::cli::Refusal> {
    todo!("compare mode")
}
