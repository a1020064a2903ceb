//! `pulse-bench`: prints throughput and latency figures for the foundation, measured against the
//! real NATS and Postgres of this machine.
//!
//! ```text
//! cargo run --release -p pulse-bench -- [all|bus|outbox|audit|loop|relay|scheduler|watch|actions|ui|events|chat|qualify|connector] [--quick]
//! cargo run --release -p pulse-bench -- watch-real --route PROVIDER:MODEL --base-url URL [--runs N]
//! ```

mod actions;
mod agent_events;
mod agent_loop;
mod assistant;
mod audit;
mod bus;
mod connector;
mod outbox;
mod qualify;
mod relay;
mod scheduler;
mod ui;
mod watch;

use std::process::ExitCode;

pub struct BenchArgs {
    pub nats_url: String,
    pub database_url: String,
    /// Small sample sizes, for the test suite's smoke run.
    pub quick: bool,
}

/// Prints one figure in a stable, grep-able shape.
pub fn figure(bench: &str, name: &str, value: f64, unit: &str) {
    println!("{bench:<8} {name:<40} {value:>14.2} {unit}");
}

/// The `q`-quantile of sorted samples.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() -> ExitCode {
    pulse_test_support::install_crypto_provider();
    let mut which = "all".to_owned();
    let mut quick = false;
    let mut real = watch::RealRoute {
        route: String::new(),
        base_url: String::new(),
        runs: 3,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "watch-real" => which = arg,
            "--route" | "--base-url" | "--runs" => {
                let Some(value) = args.next() else {
                    eprintln!("pulse-bench: {arg} needs a value");
                    return ExitCode::from(2);
                };
                match arg.as_str() {
                    "--route" => real.route = value,
                    "--base-url" => real.base_url = value,
                    _ => match value.parse::<usize>() {
                        Ok(n) if n > 0 => real.runs = n,
                        _ => {
                            eprintln!("pulse-bench: --runs takes a positive number, not '{value}'");
                            return ExitCode::from(2);
                        }
                    },
                }
            }
            "all" | "bus" | "outbox" | "audit" | "loop" | "relay" | "scheduler" | "watch"
            | "actions" | "ui" | "events" | "chat" | "qualify" | "connector" => which = arg,
            other => {
                eprintln!(
                    "pulse-bench: unknown argument '{other}'; usage: pulse-bench [all|bus|outbox|audit|loop|relay|scheduler|watch|actions|ui|events|chat|qualify|connector] [--quick], or pulse-bench watch-real --route PROVIDER:MODEL --base-url URL [--runs N]"
                );
                return ExitCode::from(2);
            }
        }
    }
    let args = BenchArgs {
        nats_url: pulse_test_support::nats::nats_url(),
        database_url: pulse_test_support::db::server_url(),
        quick,
    };
    if which == "watch-real" && (real.route.is_empty() || real.base_url.is_empty()) {
        eprintln!(
            "pulse-bench: watch-real needs --route PROVIDER:MODEL and --base-url URL of a running model server"
        );
        return ExitCode::from(2);
    }
    let result = async {
        if which == "watch-real" {
            watch::real(&real).await?;
        }
        if which == "all" || which == "bus" {
            bus::run(&args).await?;
        }
        if which == "all" || which == "outbox" {
            outbox::run(&args).await?;
        }
        if which == "all" || which == "audit" {
            audit::run(&args).await?;
        }
        if which == "all" || which == "loop" {
            agent_loop::run(&args).await?;
        }
        if which == "all" || which == "relay" {
            relay::run(&args).await?;
        }
        if which == "all" || which == "scheduler" {
            scheduler::run(&args).await?;
        }
        if which == "all" || which == "watch" {
            watch::run(&args).await?;
        }
        if which == "all" || which == "actions" {
            actions::run(&args).await?;
        }
        if which == "all" || which == "ui" {
            ui::run(&args).await?;
        }
        if which == "all" || which == "events" {
            agent_events::run(&args).await?;
        }
        if which == "all" || which == "chat" {
            assistant::run(&args).await?;
        }
        if which == "all" || which == "qualify" {
            qualify::run(&args).await?;
        }
        if which == "all" || which == "connector" {
            connector::run(&args).await?;
        }
        anyhow::Ok(())
    }
    .await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("pulse-bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}
