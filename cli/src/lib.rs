//! The `conveyor` command. Thin: it parses flags and environment, builds configuration, and
//! calls into the gateway, worker and client crates.
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
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("conveyor: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        // Inside the runtime: the gRPC exporter needs one.
        // A client command says what went wrong itself; rmcp's own error log of the same failure
        // would only repeat it above the message.
        let level = if cli.is_client() { "warn,rmcp=off" } else { "info" };
        let telemetry = conveyor_shared::telemetry::init(cli.log_format, cli.service_name(), level)?;
        if let Some(target) = telemetry.exporting() {
            tracing::info!(%target, "exporting traces over OTLP");
        }
        if let Some(code) = run::run_client(&cli.command).await {
            let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
            return Ok(ExitCode::from(code));
        }
        let outcome = run::run(cli).await.map(|()| ExitCode::SUCCESS);
        // Flushing waits on the exporter; keep it off the runtime's threads.
        let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
        outcome
    });
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("conveyor: {e:#}");
            ExitCode::FAILURE
        }
    }
}
