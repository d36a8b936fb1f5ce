//! What exporting traces costs: sync `tools/call` throughput with spans exported over OTLP
//! against export off, in one run, on one private `redis-server`.
//!
//! An OTLP receiver ([`OtlpReceiver`], gRPC and HTTP/protobuf) runs in this process. Three modes,
//! each a fresh `conveyor gateway` and one `conveyor worker --fixtures --tools noop --concurrency
//! 64` on the same Redis, at the binary's own log level:
//!
//! - `off`: no `OTEL_*` variable at all (those of this process's environment are removed), so
//!   spans are made in-process and dropped when they end;
//! - `exported over gRPC`: `OTEL_EXPORTER_OTLP_ENDPOINT` the receiver's gRPC listener,
//!   `OTEL_EXPORTER_OTLP_PROTOCOL=grpc`;
//! - `exported over HTTP/protobuf`: its HTTP listener, `http/protobuf`.
//!
//! The batch processor keeps the SDK's defaults (`OTEL_BSP_*` unset). The modes run interleaved
//! over R rounds (off, gRPC, HTTP, off, gRPC, HTTP, …) so that drift of a shared machine falls on
//! each alike. A round of a mode: a warm-up of sync calls; a pause until the receiver has heard
//! nothing for longer than the batch processor's schedule delay, so that the warm-up's spans are
//! not counted (the same pause in every mode); then N sync calls of the `noop` fixture as
//! 2026-07-28 calls (as `bench` makes them), C in flight, from this process's HTTP client.
//! Measured over those N calls: calls/s, p50 and p99 latency, CPU per call of the gateway and
//! the worker (`utime + stime` of `/proc/<pid>/stat`), of Redis (`INFO cpu`) and of this process
//! (the client and, when spans are exported, the receiver: both take the same cores); and spans
//! received per call, counted from the start of the N calls until both processes, stopped with
//! SIGTERM, have exported what they still held.
//!
//! It prints each round, then the median per mode and exported ÷ off for calls/s and for the
//! gateway's and worker's CPU per call. Nothing about timings is asserted; a mode that exports no
//! spans, or spans arriving while export is off, fails the run.
//!
//! Usage: cargo run --release -p conveyor-tests --bin trace-bench -- [--calls N] [--in-flight C] [--rounds R]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Parser;
use conveyor_tests::load::{
    self, BenchProcess, Latencies, SyncCaller, at_least_one, process_cpu_seconds, redis_cpu_seconds,
};
use conveyor_tests::otlp::OtlpReceiver;
use conveyor_tests::{Mcp, RedisServer};

/// Worker concurrency of the worker process, as in `bench`.
const WORKER_CONCURRENCY: &str = "64";
/// Longer than the batch processor's default schedule delay (`OTEL_BSP_SCHEDULE_DELAY`, 5 s), the
/// longest a finished span waits before it is exported.
const QUIET: Duration = Duration::from_secs(6);

/// Sync tools/call throughput with traces exported over OTLP versus off, in one run (see the
/// header of tests/src/bin/trace_bench.rs)
#[derive(Parser)]
#[command(
    name = "trace-bench",
    override_usage = "cargo run --release -p conveyor-tests --bin trace-bench -- [OPTIONS]",
    args_override_self = true
)]
struct Options {
    /// Measured sync calls per round of each mode
    #[arg(long, value_name = "N", default_value_t = 3000, value_parser = at_least_one::<u64>())]
    calls: u64,
    /// Calls in flight
    #[arg(long, value_name = "C", default_value_t = 32, value_parser = at_least_one::<usize>())]
    in_flight: usize,
    /// Rounds, each running every mode once: off, gRPC, HTTP/protobuf
    #[arg(long, value_name = "R", default_value_t = 3, value_parser = at_least_one::<usize>())]
    rounds: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Off,
    Grpc,
    Http,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Off, Mode::Grpc, Mode::Http];

    fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Grpc => "exported over gRPC",
            Mode::Http => "exported over HTTP/protobuf",
        }
    }

    /// The `OTEL_*` variables of the mode's processes.
    fn env(self, receiver: &OtlpReceiver) -> Vec<(&'static str, String)> {
        let (endpoint, protocol) = match self {
            Mode::Off => return Vec::new(),
            Mode::Grpc => (&receiver.grpc_endpoint, "grpc"),
            Mode::Http => (&receiver.http_endpoint, "http/protobuf"),
        };
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.clone()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.to_owned()),
        ]
    }
}

/// What one round of one mode measured.
struct Round {
    mode: Mode,
    calls_per_sec: f64,
    latency: Latencies,
    /// CPU µs per call.
    gateway_us: f64,
    worker_us: f64,
    redis_us: f64,
    this_process_us: f64,
    /// Spans received per call, by `service: span name`.
    spans: BTreeMap<String, f64>,
}

impl Round {
    fn conveyor_us(&self) -> f64 {
        self.gateway_us + self.worker_us
    }

    fn spans_per_call(&self) -> f64 {
        self.spans.values().sum()
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = Options::parse();
    if !cfg!(debug_assertions) {
        // A release benchmark measures the release build of conveyor too.
        conveyor_tests::process::prefer_release_binary();
    }
    let redis = RedisServer::start()?;
    let receiver = OtlpReceiver::start().await?;
    let inherited: Vec<OsString> =
        std::env::vars_os().map(|(k, _)| k).filter(|k| k.to_string_lossy().starts_with("OTEL_")).collect();
    let cores = std::thread::available_parallelism().map(usize::from).unwrap_or(1);
    println!(
        "Traces exported over OTLP versus off: one redis-server ({}), an OTLP receiver in this process \
         (gRPC {}, HTTP {}), {cores} cores shared by every process",
        redis.url(),
        receiver.grpc_endpoint,
        receiver.http_endpoint
    );
    println!(
        "Each round of a mode: a fresh conveyor gateway + 1 worker (--fixtures --tools noop --concurrency \
         {WORKER_CONCURRENCY}), {} warm-up calls, then {} sync tools/call of noop, {} in flight; OTEL_BSP_* \
         at the SDK's defaults",
        warmup(&options),
        options.calls,
        options.in_flight
    );
    if !inherited.is_empty() {
        let names: Vec<_> = inherited.iter().map(|k| k.to_string_lossy()).collect();
        println!("Left out of the conveyor processes' environment: {}", names.join(", "));
    }
    println!();
    println!(
        "{:<6} {:<28} {:>8} {:>8} {:>8} {:>12} {:>12} {:>12} {:>12} {:>10}",
        "round",
        "mode",
        "calls/s",
        "p50 ms",
        "p99 ms",
        "gateway µs",
        "worker µs",
        "Redis µs",
        "this proc µs",
        "spans/call"
    );
    let mut rounds = Vec::new();
    for round in 1..=options.rounds {
        for mode in Mode::ALL {
            let r = run_round(&redis, &receiver, mode, &options, &inherited).await?;
            println!(
                "{:<6} {:<28} {:>8.0} {:>8.2} {:>8.2} {:>12.1} {:>12.1} {:>12.1} {:>12.1} {:>10}",
                round,
                mode.name(),
                r.calls_per_sec,
                r.latency.p50,
                r.latency.p99,
                r.gateway_us,
                r.worker_us,
                r.redis_us,
                r.this_process_us,
                spans_cell(&r)
            );
            rounds.push(r);
        }
    }
    print_summary(&rounds, &options);
    Ok(())
}

fn warmup(options: &Options) -> u64 {
    (options.calls / 10).max(200)
}

async fn run_round(
    redis: &RedisServer,
    receiver: &OtlpReceiver,
    mode: Mode,
    options: &Options,
    inherited: &[OsString],
) -> anyhow::Result<Round> {
    let deployment = Deployment::start(redis, &mode.env(receiver), inherited)?;
    let url = deployment.gateway.mcp_url();
    Mcp::new(&url).wait_for_tool("noop", Duration::from_secs(30)).await?;
    let caller = SyncCaller::new(&url)?;
    load::drive(&caller, warmup(options), options.in_flight).await?;
    let before = quiet(receiver).await;

    let pids = [deployment.gateway.child.id(), deployment.worker.child.id(), std::process::id()];
    let cpu_before = pids.map(process_cpu_seconds);
    let redis_before = redis_cpu_seconds(redis)?;
    let (elapsed, latencies) = load::drive(&caller, options.calls, options.in_flight).await?;
    let cpu_after = pids.map(process_cpu_seconds);
    let redis_after = redis_cpu_seconds(redis)?;
    let per_call = |seconds: f64| seconds * 1e6 / options.calls as f64;

    drop(caller);
    let logs = deployment.stop().await?;
    let received = receiver.spans();
    let new = received.get(before..).unwrap_or_default();
    match mode {
        Mode::Off if !new.is_empty() => {
            bail!("{} spans arrived while export was off; the first: {:?}", new.len(), new[0])
        }
        Mode::Grpc | Mode::Http if new.is_empty() => {
            bail!("no span arrived {}; the processes' logs:\n{logs}", mode.name())
        }
        _ => {}
    }
    let mut spans = BTreeMap::new();
    for span in new {
        *spans.entry(format!("{}: {}", span.service, span.name)).or_insert(0.0) += 1.0 / options.calls as f64;
    }
    Ok(Round {
        mode,
        calls_per_sec: options.calls as f64 / elapsed.as_secs_f64(),
        latency: Latencies::of(latencies),
        gateway_us: per_call(cpu_after[0] - cpu_before[0]),
        worker_us: per_call(cpu_after[1] - cpu_before[1]),
        this_process_us: per_call(cpu_after[2] - cpu_before[2]),
        redis_us: per_call(redis_after - redis_before),
        spans,
    })
}

/// Waits until no span has arrived for [`QUIET`]; the number received by then.
async fn quiet(receiver: &OtlpReceiver) -> usize {
    let mut count = receiver.spans().len();
    let mut since = Instant::now();
    while since.elapsed() < QUIET {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = receiver.spans().len();
        if now != count {
            count = now;
            since = Instant::now();
        }
    }
    count
}

fn spans_cell(round: &Round) -> String {
    if round.mode == Mode::Off { "-".to_owned() } else { format!("{:.2}", round.spans_per_call()) }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn print_summary(rounds: &[Round], options: &Options) {
    let of = |mode: Mode, figure: fn(&Round) -> f64| -> f64 {
        median(rounds.iter().filter(|r| r.mode == mode).map(figure).collect())
    };
    let off_rate = of(Mode::Off, |r| r.calls_per_sec);
    let off_cpu = of(Mode::Off, Round::conveyor_us);
    println!();
    println!(
        "== Median of {} rounds per mode ({} calls, {} in flight); CPU in µs per call; ratios are the mode's median ÷ off's",
        options.rounds, options.calls, options.in_flight
    );
    println!(
        "{:<28} {:>8} {:>8} {:>8} {:>10} {:>10} {:>14} {:>9} {:>12} {:>10} {:>14} {:>14}",
        "mode",
        "calls/s",
        "p50 ms",
        "p99 ms",
        "gateway",
        "worker",
        "gateway+worker",
        "Redis",
        "this process",
        "spans/call",
        "calls/s ÷ off",
        "CPU/call ÷ off"
    );
    for mode in Mode::ALL {
        let rate = of(mode, |r| r.calls_per_sec);
        let cpu = of(mode, Round::conveyor_us);
        let spans = if mode == Mode::Off {
            "-".to_owned()
        } else {
            format!("{:.2}", of(mode, Round::spans_per_call))
        };
        println!(
            "{:<28} {:>8.0} {:>8.2} {:>8.2} {:>10.1} {:>10.1} {:>14.1} {:>9.1} {:>12.1} {:>10} {:>14.3} {:>14.3}",
            mode.name(),
            rate,
            of(mode, |r| r.latency.p50),
            of(mode, |r| r.latency.p99),
            of(mode, |r| r.gateway_us),
            of(mode, |r| r.worker_us),
            cpu,
            of(mode, |r| r.redis_us),
            of(mode, |r| r.this_process_us),
            spans,
            rate / off_rate,
            cpu / off_cpu
        );
    }
    // Each exported round beside the off round run just before it: how steady the ratio is.
    println!();
    println!("Exported ÷ the same round's off (calls/s, gateway+worker CPU per call):");
    for mode in [Mode::Grpc, Mode::Http] {
        let pairs: Vec<String> = rounds
            .chunks(Mode::ALL.len())
            .filter_map(|round| {
                let off = round.iter().find(|r| r.mode == Mode::Off)?;
                let exported = round.iter().find(|r| r.mode == mode)?;
                Some(format!(
                    "{:.3}/{:.3}",
                    exported.calls_per_sec / off.calls_per_sec,
                    exported.conveyor_us() / off.conveyor_us()
                ))
            })
            .collect();
        println!("  {:<28} {}", mode.name(), pairs.join("  "));
    }
    println!();
    println!("Spans received per call, by service and span name (median over rounds):");
    for mode in [Mode::Grpc, Mode::Http] {
        let names: std::collections::BTreeSet<&String> =
            rounds.iter().filter(|r| r.mode == mode).flat_map(|r| r.spans.keys()).collect();
        let list: Vec<String> = names
            .into_iter()
            .map(|name| {
                let per = median(
                    rounds
                        .iter()
                        .filter(|r| r.mode == mode)
                        .map(|r| r.spans.get(name).copied().unwrap_or(0.0))
                        .collect(),
                );
                format!("{name} {per:.2}")
            })
            .collect();
        println!("  {:<28} {}", mode.name(), list.join(", "));
    }
}

/// A `conveyor gateway` and one worker, started for one round of one mode.
struct Deployment {
    gateway: BenchProcess,
    worker: BenchProcess,
}

impl Deployment {
    fn start(
        redis: &RedisServer,
        otel: &[(&'static str, String)],
        inherited: &[OsString],
    ) -> anyhow::Result<Self> {
        let gateway = BenchProcess::start("gateway", &redis.url(), &[], otel, inherited)?;
        let worker = BenchProcess::start(
            "worker",
            &redis.url(),
            &["--fixtures", "--tools", "noop", "--concurrency", WORKER_CONCURRENCY],
            otel,
            inherited,
        )?;
        Ok(Self { gateway, worker })
    }

    /// Stops both processes; their logs, for a failure message.
    async fn stop(self) -> anyhow::Result<String> {
        let Self { gateway, worker } = self;
        let mut logs = String::new();
        // SIGTERM, so that each exports the spans it still holds before it exits.
        for mut proc in [gateway, worker] {
            proc.terminate().await?;
            logs.push_str(&format!("--- {} ---\n{}", proc.command, proc.log_text()));
        }
        Ok(logs)
    }
}
