use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    pulse_runtime::main(pulse_agent_relay::SPEC, pulse_agent_relay::run).await
}
