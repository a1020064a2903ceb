use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = pulsectl::cli::Cli::parse();
    // reqwest is built without a crypto provider of its own; install ring once for the process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Current-thread on purpose: children die with the thread that spawned them.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(pulsectl::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}
