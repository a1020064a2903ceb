use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    pulse_runtime::main(pulse_verifier::SPEC, pulse_verifier::run).await
}
