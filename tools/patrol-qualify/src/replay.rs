//! (interface placeholder)

/// `patrol-qualify replay`.
pub fn cli_replay(
    _args: &crate::cli::ReplayArgs,
) -> Result<crate::cli::Outcome, crate::cli::Refusal> {
    todo!("replay mode")
}

/// `patrol-qualify verify-replay`.
pub fn cli_verify(
    _args: &crate::cli::VerifyReplayArgs,
) -> Result<crate::cli::Outcome, crate::cli::Refusal> {
    todo!("verify-replay mode")
}
