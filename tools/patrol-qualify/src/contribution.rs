//! (interface placeholder)

/// `patrol-qualify export-contribution`.
pub fn cli_export(
    _args: &crate::cli::ExportArgs,
) -> Result<crate::cli::Outcome, crate::cli::Refusal> {
    todo!("export mode")
}
