use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    pulse_runtime::main(pulse_action_broker::SPEC, pulse_action_broker::run).await
}
