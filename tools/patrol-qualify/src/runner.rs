//! One live run of one scenario, and suites of them.

use crate::cli::{LiveArgs, Outcome, Refusal, SuiteArgs};

pub async fn cli_live(_args: LiveArgs) -> Result<Outcome, Refusal> {
    todo!("live mode")
}

pub async fn cli_suite(_args: SuiteArgs) -> Result<Outcome, Refusal> {
    todo!("live-suite mode")
}
