use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    pulse_runtime::main(pulse_patrol_scheduler::SPEC, pulse_patrol_scheduler::run).await
}
