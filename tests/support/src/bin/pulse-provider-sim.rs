//! `pulse-provider-sim --listen 127.0.0.1:PORT`: the provider simulator as a process, for manual
//! runs and for tests that need it outside their own process. Models named `sim:<behaviour>`
//! choose what it does; any other model gets a 500 (the binary has no script).

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use pulse_test_support::provider_sim::{self, Script};

#[derive(Debug, Parser)]
#[command(
    name = "pulse-provider-sim",
    about = "A simulated LLM provider (OpenAI, Anthropic, Gemini, Ollama)"
)]
struct Args {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Seconds open responses get to finish after SIGINT or SIGTERM.
    #[arg(long, default_value_t = 2)]
    grace_secs: u64,
    /// Answer a provider preflight (a request offering `pulse_preflight_ping`) with a call to
    /// it, as a tool-capable model does; without it `sim:` behaviours answer the probe in text.
    #[arg(long)]
    answer_preflight: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let addr = listener.local_addr()?;
    // Signal handlers are installed before the address is announced: whoever reads the line may
    // send SIGTERM at once, before the server has polled its shutdown future.
    let shutdown = shutdown_signal()?;
    // A closed stdout must not stop the simulator, so printing errors are ignored.
    say(&format!(
        "pulse-provider-sim listening on http://{addr}\n\
         SIMULATED MODEL: pulse-provider-sim (no real AI)\n\
         openai:    http://{addr}/v1\n\
         anthropic: http://{addr}\n\
         gemini:    http://{addr}/v1beta\n\
         ollama:    http://{addr}\n\
         requests:  http://{addr}/_sim/requests"
    ));
    // The line pulsectl reads the bound port from (`--listen` with port 0).
    pulse_config::listening::announce(addr);
    // Scripts are for in-process tests; the binary answers `sim:` models only.
    let mut script = Script::steps([]);
    if args.answer_preflight {
        script = script.with_tool_offer_reply(provider_sim::preflight_reply());
    }
    provider_sim::serve(
        listener,
        script,
        shutdown,
        Duration::from_secs(args.grace_secs),
    )
    .await?;
    say("pulse-provider-sim stopped");
    Ok(())
}

fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// Registers SIGTERM and SIGINT now and returns the future that completes on either.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
