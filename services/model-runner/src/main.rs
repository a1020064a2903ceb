use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    pulse_runtime::main(pulse_model_runner::SPEC, pulse_model_runner::run).await
}
