use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    pulse_runtime::main(pulse_gateway::SPEC, pulse_gateway::run).await
}
