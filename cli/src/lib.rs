//! The `conveyor` command. Thin: it parses flags and environment, builds configuration, and
//! calls into the gateway and worker crates.
//!
//! # Layout
//!
//! - [`args`]: every subcommand, flag and environment variable, with its help text.
//! - [`run`]: what each subcommand does: serve, work, both, or talk to a deployment.
//! - [`private_redis`]: the throwaway `redis-server` that `conveyor up` starts when no Redis answers.

pub mod args;
pub mod private_redis;
pub mod run;

use std::process::ExitCode;

use clap::Parser;

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = args::Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("CONVEYOR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("conveyor: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("conveyor: {e:#}");
            ExitCode::FAILURE
        }
    }
}
