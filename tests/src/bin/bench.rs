//! Conveyor beside BullMQ 6.7: one run, one private `redis-server`, the same machine.
//!
//! What is measured, one after the other on the same server:
//!
//! 1. **BullMQ 6.7** ([`conveyor_tests::bullmq::run`], Node.js, first): N no-op jobs added then
//!    consumed at concurrency C (consume jobs/s), add→completed of jobs one at a time (p50), a
//!    fan-out of F jobs added at once and drained (jobs/s over add + drain), and Redis CPU and
//!    Redis commands per job over add + consume (`INFO cpu`, `INFO commandstats`; commands that
//!    Lua scripts run count too).
//! 2. **Conveyor sync over HTTP**: one `conveyor gateway` and `--workers` `conveyor worker
//!    --fixtures --tools noop --concurrency 64` processes (a worker serving one queue, as BullMQ's
//!    worker does) (at the binary's own log level). A `tools/call` of
//!    the `noop` fixture as a synchronous 2026-07-28 call (no tasks extension: the gateway creates
//!    a hidden task, a worker runs it, the gateway answers with the result), C in flight, N calls
//!    after a warm-up: calls/s and p50/p90/p99. Driven by `wrk` when it is installed (one thread,
//!    C connections; a Lua script checks every reply body for the tool's text and marks the N-th
//!    reply, then wrk is stopped), else by this process's HTTP client. Either driver takes CPU
//!    from the same cores; it is reported.
//! 3. **Round trip at one connection**: sequential sync calls through HTTP (this process's
//!    client), p50/p90/p99, beside BullMQ's add→completed.
//! 4. **Fan-out**: one `run_dag` task through the gateway, root → F no-op nodes → sink, polled
//!    with `tasks/get` every 10 ms until completed: nodes/s. The deployment of 2-4 is then
//!    stopped with SIGTERM, so that its workers neither take later sections' tasks nor stay
//!    behind as lost workers.
//! 5. **The deployment a user starts**: `conveyor up --workers 2 --fixtures --no-auth`, one
//!    process running a gateway and two workers (at their default concurrency) with every fixture
//!    tool. Synchronous `tools/call`s of the `greet` fixture (`{"name": "bench"}`, answered
//!    `Hello, bench!`) through its `/mcp`, as in 2 (C connections, N calls after a warm-up):
//!    calls/s, latency, and per call Redis CPU, Redis commands and the `conveyor up` process's
//!    CPU. `--skip-up` leaves this load out.
//! 6. **Idle command rate**: the Redis commands per second a deployment with nothing to do sends,
//!    over `--idle-seconds` (30): (a) the `conveyor up` process of 5, after its load and a 5 s
//!    pause; (b) one `conveyor gateway` and two `conveyor worker --fixtures` processes (default
//!    lease), started fresh, after one call and a 5 s pause. Counted under `MONITOR` (an idle
//!    server feeds it little), which tells blocking reads (`XREADGROUP ... BLOCK`) and the
//!    subscribe commands and `PING`s of pub/sub connections apart from the rest: commands/s sent
//!    in all and beyond those, the top commands, the commands scripts ran, `INFO commandstats`
//!    over the same window (scripts' commands included), and the CPU Redis and the deployment
//!    spent. `--skip-idle` leaves it out.
//! 7. **Takeover delay**: one `conveyor gateway` and two `conveyor worker --fixtures --lease-ms
//!    3000 --name ...`. A `slow_compute` task (2026-07-28 tasks extension) starts on one worker
//!    (its node's `worker` field in Redis names it), that worker is killed with SIGKILL, and the
//!    node's status, attempt and worker are read from Redis every 10 ms until the node runs
//!    again, with the next attempt, on the other worker: the delay from the kill, printed as
//!    lease + X s. Three times (a fresh worker replaces the killed one each time), each saying
//!    whether the killed worker held the deployment's maintenance lease; the table holds the
//!    slowest. `--skip-takeover` leaves it out.
//! 8. **Queue core without HTTP**, in this process: a [`Store`] creates no-op tasks (sync mode, the
//!    process's inbox as waiter; the local waiter is registered before the create) and
//!    [`conveyor_worker::run`] runs them with the fixtures registry at concurrency 64. (a) N
//!    tasks, K in flight, timed from create to the terminal status event: tasks/s. (b) N tasks
//!    created first with no worker (add rate), then a worker started and timed until the last one
//!    settles: the consume rate, BullMQ's add-then-consume shape. (c) Sequential tasks: the round
//!    trip without HTTP.
//! 9. **Cost per call**, for the sync HTTP runs (2 and 5) and the queue-core run (a): Redis CPU
//!    per call (`used_cpu_sys + used_cpu_user` delta over the measured run), Redis commands per
//!    call (`INFO commandstats`, as BullMQ's figure), Conveyor's CPU per call (`utime + stime`
//!    from `/proc/<pid>/stat` of the gateway and workers, of `conveyor up`, or of this process),
//!    Redis time per command (`INFO commandstats` usec: wall time, so it can exceed CPU time when
//!    cores are short); and, from a separate smaller run under `MONITOR` (which slows Redis down,
//!    so never during a timed run), the commands Conveyor sends per call apart from the commands
//!    its scripts run.
//!
//! 10. **Instructions per operation** (`--callgrind`, a mode of its own: nothing else runs): a
//!     `redis-server` under valgrind's callgrind ([`conveyor_tests::callgrind`]), which counts the
//!     instructions the server executes, stable on a noisy machine. Its idle rate first (a window
//!     of `--idle-seconds`), subtracted from every count below. BullMQ: add + consume of
//!     `--callgrind-calls` jobs, less a run of a quarter as many (which cancels the run's fixed
//!     costs), per job. Conveyor: `conveyor up --workers 2 --fixtures --no-auth`, warmed up, then
//!     `--callgrind-calls` sync `greet` calls at C in flight, per call; and the instructions of
//!     the `conveyor up` process per call by `perf stat -e instructions` where the machine counts
//!     them (else its CPU time per call).
//!
//! It ends with a table of every figure that has a target (and a few shown for comparison):
//! Conveyor's figure, BullMQ's where one applies, the ratio, the target, and whether it is met.
//! Nothing is asserted on timings (a missed target does not fail the run); errors in Conveyor (a
//! bad reply, a task that does not complete, a node that is not taken over) do.
//!
//! Usage: cargo run --release -p conveyor-tests --bin bench -- --help

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use conveyor_shared::Store;
use conveyor_shared::call::CallRecord;
use conveyor_shared::events::{Delivery, EventHub, Waiter};
use conveyor_shared::model::{TaskEvent, TaskMode, TaskStatus, new_task_id, now_ms};
use conveyor_shared::store::{Created, Limits, NewTask, StoreOptions};
use conveyor_tests::bullmq::{self, BullmqFigures, BullmqOptions};
use conveyor_tests::callgrind::CallgrindRedis;
use conveyor_tests::load::{
    self, BenchProcess, Latencies, SyncCaller, SyncRequest, at_least_one, process_cpu_seconds,
    redis_cpu_seconds, redis_cpu_seconds_on,
};
use conveyor_tests::mcp::tasks_client_capabilities;
use conveyor_tests::monitor::{Monitor, MonitorCounts};
use conveyor_tests::process::commands_per;
use conveyor_tests::{Mcp, RedisServer};
use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Worker concurrency of every Conveyor worker, in a process or in this one.
const WORKER_CONCURRENCY: usize = 64;
/// Calls run first and not counted, before a round-trip measurement.
const ROUND_TRIP_WARMUP: usize = 10;

/// Conveyor beside BullMQ 6.7 on one private redis-server (see the header of
/// tests/src/bin/bench.rs)
#[derive(Parser)]
#[command(
    name = "bench",
    override_usage = "cargo run --release -p conveyor-tests --bin bench -- [OPTIONS]",
    args_override_self = true
)]
struct Options {
    /// Sync calls over HTTP and queue-core tasks per measured run
    #[arg(long, value_name = "N", default_value_t = 20_000, value_parser = at_least_one::<u64>())]
    calls: u64,
    /// Calls in flight over HTTP; BullMQ's worker concurrency
    #[arg(long, value_name = "C", default_value_t = 64, value_parser = at_least_one::<usize>())]
    concurrency: usize,
    /// Conveyor worker processes, each --concurrency 64
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = at_least_one::<usize>())]
    workers: usize,
    /// Queue-core tasks in flight
    #[arg(long, value_name = "K", default_value_t = 256, value_parser = at_least_one::<usize>())]
    in_flight: usize,
    /// BullMQ jobs added then consumed
    #[arg(long, value_name = "N", default_value_t = 20_000, value_parser = at_least_one::<u64>())]
    bullmq_jobs: u64,
    /// Nodes between root and sink of the run_dag; BullMQ fan-out jobs
    #[arg(long, value_name = "F", default_value_t = 10_000, value_parser = at_least_one::<usize>())]
    fanout: usize,
    /// Sequential calls for the round trip
    #[arg(long, value_name = "L", default_value_t = 500, value_parser = at_least_one::<usize>())]
    latency_calls: usize,
    /// Calls counted under MONITOR, HTTP and queue core each
    #[arg(long, value_name = "M", default_value_t = 2000, value_parser = at_least_one::<u64>())]
    monitor_calls: u64,
    /// Window of each idle command-rate measurement, in seconds
    #[arg(long, value_name = "S", default_value_t = 30, value_parser = at_least_one::<u64>())]
    idle_seconds: u64,
    /// Leave BullMQ out (no ratios)
    #[arg(long)]
    skip_bullmq: bool,
    /// Leave out the gateway and noop worker processes (sync noop, round trip, fan-out)
    #[arg(long)]
    skip_http: bool,
    /// Leave out sync greet calls on `conveyor up --workers 2 --fixtures --no-auth`
    #[arg(long)]
    skip_up: bool,
    /// Leave out the idle command rates (of `conveyor up`; of a gateway + 2 workers)
    #[arg(long)]
    skip_idle: bool,
    /// Leave out the takeover delay of a SIGKILLed worker's node
    #[arg(long)]
    skip_takeover: bool,
    /// Measure only the instructions redis-server executes per sync call and per BullMQ job,
    /// with the server under valgrind's callgrind
    #[arg(long)]
    callgrind: bool,
    /// Calls and BullMQ jobs counted under callgrind (a server under callgrind runs ~50x slower)
    #[arg(long, value_name = "N", default_value_t = 2000, value_parser = at_least_one::<u64>())]
    callgrind_calls: u64,
    /// Keep callgrind's profile of the Conveyor calls at FILE, for `callgrind_annotate`
    #[arg(long, value_name = "FILE")]
    callgrind_profile: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = Options::parse();
    if !cfg!(debug_assertions) {
        // A release benchmark measures the release build of conveyor too.
        conveyor_tests::process::prefer_release_binary();
    }
    if options.callgrind {
        return measure_instructions(&options).await;
    }
    let redis = RedisServer::start()?;
    let cores = std::thread::available_parallelism().map(usize::from).unwrap_or(1);
    println!(
        "Conveyor beside BullMQ {}: one redis-server ({}), {cores} cores shared by every process",
        bullmq::BULLMQ_VERSION,
        redis.url()
    );

    let bullmq = if options.skip_bullmq { None } else { Some(measure_bullmq(&redis, &options)?) };
    let http = if options.skip_http {
        None
    } else {
        let deployment = Deployment::start(&redis, &options)?;
        let figures = measure_http(&redis, &deployment, &options, cores).await?;
        // Its workers would take the next sections' tasks; stopped cleanly, they leave no lost
        // worker behind for the idle measurements.
        deployment.stop().await?;
        Some(figures)
    };
    let up = if options.skip_up && options.skip_idle {
        None
    } else {
        Some(measure_up(&redis, &options, cores).await?)
    };
    let split_idle = if options.skip_idle { None } else { Some(measure_split_idle(&redis, &options).await?) };
    let takeover = if options.skip_takeover { None } else { Some(measure_takeover(&redis).await?) };
    let core = measure_core(&redis, &options, cores).await?;
    let figures = Figures { bullmq, http, up, split_idle, takeover, core };
    print_ratios(&figures, &options);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 10. Instructions per operation, under callgrind

async fn measure_instructions(options: &Options) -> anyhow::Result<()> {
    let mut redis = CallgrindRedis::start()?;
    let url = redis.url();
    let calls = options.callgrind_calls;
    println!(
        "Instructions redis-server executes per operation: valgrind --tool=callgrind, one server ({url})"
    );

    // Every script of Conveyor's is loaded before anything is counted: the compile of one first
    // used in a counted run (the maintenance's, say) is no cost of a call. BullMQ's first run
    // below, not counted, does the same for its own.
    let mut conn = redis::Client::open(url.as_str())?.get_connection()?;
    for script in conveyor_shared::scripts::every() {
        script.prepare_invoke().load(&mut conn)?;
    }
    drop(conn);
    let idle_window = Duration::from_secs(options.idle_seconds);
    redis.zero()?;
    tokio::time::sleep(idle_window).await;
    let idle_per_sec = redis.dump()? as f64 / idle_window.as_secs_f64();
    println!("  idle        {idle_per_sec:>12.0} instructions/s (subtracted below, over each run's time)");
    // What a run executed beyond what the idle server would have in the same time.
    let less_idle = |instructions: u64, elapsed: Duration| {
        (instructions as f64 - idle_per_sec * elapsed.as_secs_f64()).max(0.0)
    };

    let bullmq = if options.skip_bullmq {
        None
    } else {
        let small = (calls / 4).max(20);
        let mut run = |jobs: u64| -> anyhow::Result<f64> {
            let bullmq_options =
                BullmqOptions { jobs, concurrency: options.concurrency as u64, latency_jobs: 1, fanout: 1 };
            redis.zero()?;
            let started = Instant::now();
            bullmq::run(&url, &bullmq_options)?;
            let elapsed = started.elapsed();
            Ok(less_idle(redis.dump()?, elapsed))
        };
        // Its scripts are loaded on the first run: that one is not counted.
        run(small)?;
        let (few, many) = (run(small)?, run(calls + small)?);
        let per_job = (many - few) / calls as f64;
        println!(
            "  BullMQ {}   {per_job:>12.0} instructions/job (add + consume of {} jobs less {small}, concurrency {})",
            bullmq::BULLMQ_VERSION,
            calls + small,
            options.concurrency
        );
        Some(per_job)
    };

    let workers = UP_WORKERS.to_string();
    let mut up =
        BenchProcess::start("up", &url, &["--workers", &workers, "--fixtures", "--no-auth"], &[], &[])?;
    let mcp_url = up.mcp_url();
    Mcp::new(mcp_url.clone()).wait_for_tool("greet", Duration::from_secs(120)).await?;
    let request = SyncRequest::new("greet", json!({"name": "bench"}), "Hello, bench!");
    let caller = SyncCaller::with_request(&mcp_url, &request)?;
    load::drive(&caller, (calls / 10).max(100), options.concurrency).await?;
    let pid = up.child.id();
    let perf = PerfStat::start(pid);
    let cpu_before = process_cpu_seconds(pid);
    redis.zero()?;
    let (elapsed, _) = load::drive(&caller, calls, options.concurrency).await?;
    let instructions = redis.dump_keeping(options.callgrind_profile.as_deref())?;
    let cpu_us = (process_cpu_seconds(pid) - cpu_before) * 1e6 / calls as f64;
    let per_call = less_idle(instructions, elapsed) / calls as f64;
    println!(
        "  Conveyor    {per_call:>12.0} instructions/call (sync greet through /mcp of conveyor up --workers {UP_WORKERS} --fixtures, {calls} calls, {} in flight, {:.1} s)",
        options.concurrency,
        elapsed.as_secs_f64()
    );
    match perf.stop() {
        Some(counted) => println!(
            "  conveyor up {:>12.0} instructions/call (perf stat -e instructions), {cpu_us:.0} µs CPU/call",
            counted as f64 / calls as f64
        ),
        None => println!(
            "  conveyor up {cpu_us:>12.0} µs CPU/call (perf stat counts no instructions on this machine)"
        ),
    }
    if let Some(per_job) = bullmq {
        println!(
            "  ratio       {:.2} of BullMQ's instructions per job (target ≤ 0.5)",
            per_call / per_job.max(1.0)
        );
    }
    if let Some(profile) = &options.callgrind_profile {
        println!("  profile     {} (callgrind_annotate --inclusive=yes {0})", profile.display());
    }
    up.terminate().await?;
    Ok(())
}

/// `perf stat -e instructions` attached to a process, when the machine has `perf` and counts
/// instructions (a virtual machine often does not).
struct PerfStat(Option<std::process::Child>);

impl PerfStat {
    fn start(pid: u32) -> Self {
        let child = Command::new("perf")
            .args(["stat", "-x,", "-e", "instructions", "-p", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .ok();
        Self(child)
    }

    /// The instructions counted, once perf is told to stop (SIGINT, as at a terminal).
    fn stop(self) -> Option<u64> {
        let child = self.0?;
        let _ = Command::new("kill").arg("-INT").arg(child.id().to_string()).status();
        let output = child.wait_with_output().ok()?;
        let text = String::from_utf8_lossy(&output.stderr);
        // CSV: `<count>,<unit>,instructions,...`, or `<not supported>,...`.
        text.lines().find(|l| l.contains(",instructions")).and_then(|l| l.split(',').next()?.parse().ok())
    }
}

// ---------------------------------------------------------------------------------------------
// 1. BullMQ

fn measure_bullmq(redis: &RedisServer, options: &Options) -> anyhow::Result<BullmqFigures> {
    let bullmq_options = BullmqOptions {
        jobs: options.bullmq_jobs,
        concurrency: options.concurrency as u64,
        latency_jobs: options.latency_calls as u64,
        fanout: options.fanout as u64,
    };
    let f = bullmq::run(&redis.url(), &bullmq_options)?;
    println!();
    println!(
        "== BullMQ {} (ioredis {}, Node.js {}, Redis {}), worker concurrency {}",
        f.bullmq, f.ioredis, f.node, f.redis, f.concurrency
    );
    for (name, phase) in [("add", &f.add), ("consume", &f.consume)] {
        println!(
            "  {name:<8} {:>6} jobs {:>7.2} s {:>9.0} jobs/s   Redis CPU {:>6.1} µs/job   Redis commands {:>5.1}/job",
            phase.jobs,
            phase.seconds,
            phase.jobs_per_sec,
            phase.redis_cpu_seconds * 1e6 / phase.jobs.max(1) as f64,
            phase.redis_commands as f64 / phase.jobs.max(1) as f64,
        );
    }
    println!(
        "  cycle    add + consume: Redis CPU {:.1} µs/job, Redis commands {:.1}/job (scripts' commands included)",
        f.cycle.redis_cpu_us_per_job, f.cycle.redis_commands_per_job
    );
    println!(
        "  latency  add→completed, one at a time ({} jobs after {} warm-up): p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms",
        f.latency.jobs, f.latency.warmup, f.latency.p50_ms, f.latency.p90_ms, f.latency.p99_ms
    );
    let fanout_cpu = f.fanout.add.redis_cpu_seconds + f.fanout.consume.redis_cpu_seconds;
    println!(
        "  fan-out  {} jobs added at once then drained: {:.2} s, {:.0} jobs/s, Redis CPU {:.1} µs/job",
        f.fanout.jobs,
        f.fanout.seconds,
        f.fanout.jobs_per_sec,
        fanout_cpu * 1e6 / f.fanout.jobs.max(1) as f64
    );
    Ok(f)
}

// ---------------------------------------------------------------------------------------------
// 2-4 and 9. Conveyor through HTTP

/// What the HTTP part measured.
struct HttpFigures {
    sync: SyncRun,
    round_trip: Latencies,
    fanout: FanoutRun,
    counts: PerCall,
}

/// The measured run of synchronous calls.
struct SyncRun {
    driver: String,
    calls: u64,
    seconds: f64,
    latency: Latencies,
    cost: Cost,
    /// CPU of the load generator per call (wrk, or this process).
    client_cpu_us: f64,
}

/// The `run_dag` fan-out.
struct FanoutRun {
    nodes: usize,
    seconds: f64,
    cost: Cost,
}

async fn measure_http(
    redis: &RedisServer,
    deployment: &Deployment,
    options: &Options,
    cores: usize,
) -> anyhow::Result<HttpFigures> {
    let mcp = Mcp::new(deployment.gateway.mcp_url());
    mcp.wait_for_tool("noop", Duration::from_secs(30)).await?;
    // One call through the full client first, so that a wrong reply shape shows as itself.
    let reply = mcp.call_2026("tools/call", json!({"name": "noop", "arguments": {}}), json!({})).await?;
    anyhow::ensure!(reply.result()["content"][0]["text"] == "ok", "a sync noop call answered {}", reply.raw);
    let request = SyncRequest::noop();
    let caller = SyncCaller::with_request(&deployment.gateway.mcp_url(), &request)?;
    println!();
    println!(
        "== Conveyor sync tools/call over HTTP: 1 gateway + {} worker process(es) x concurrency {WORKER_CONCURRENCY}",
        options.workers
    );

    let warmup = (options.calls / 10).max(200);
    load::drive(&caller, warmup, options.concurrency).await?;
    let url = deployment.gateway.mcp_url();
    let sync = sync_calls(redis, deployment.processes(), &url, &request, &caller, options).await?;
    sync.print(options, cores);

    let round_trip = round_trip(|| caller.call(), options.latency_calls).await?;
    println!("  round trip  one call at a time ({} calls): {round_trip}", options.latency_calls);

    let fanout = fanout(redis, &mcp, deployment, options.fanout).await?;
    println!(
        "  fan-out     run_dag root → {} → sink ({} nodes): {:.2} s, {:.0} nodes/s",
        options.fanout,
        fanout.nodes,
        fanout.seconds,
        fanout.nodes as f64 / fanout.seconds
    );
    print_cost("  per node   ", &fanout.cost, None, cores);

    let monitor = Monitor::start(&redis.url())?;
    load::drive(&caller, options.monitor_calls, options.concurrency).await?;
    let counts = PerCall::new(monitor.stop()?, options.monitor_calls);
    println!("  MONITOR     {}", counts.describe(options.concurrency));
    Ok(HttpFigures { sync, round_trip, fanout, counts })
}

impl SyncRun {
    fn print(&self, options: &Options, cores: usize) {
        println!(
            "  throughput  {} calls, {} in flight, driven by {}: {:.2} s, {:.0} calls/s",
            self.calls,
            options.concurrency,
            self.driver,
            self.seconds,
            self.calls as f64 / self.seconds
        );
        println!("  latency     {}", self.latency);
        print_cost("  per call   ", &self.cost, Some(("load generator", self.client_cpu_us)), cores);
    }

    fn per_sec(&self) -> f64 {
        self.calls as f64 / self.seconds
    }
}

/// The measured run of sync calls of `request` to `url`, with wrk when installed (else with
/// `caller`, which makes the same call); `processes` are the deployment's, for their CPU.
async fn sync_calls(
    redis: &RedisServer,
    processes: Vec<(String, u32)>,
    url: &str,
    request: &SyncRequest,
    caller: &SyncCaller,
    options: &Options,
) -> anyhow::Result<SyncRun> {
    let meter = Meter::start(redis, processes)?;
    if wrk_installed() {
        let (url, request) = (url.to_owned(), request.clone());
        let (calls, concurrency) = (options.calls, options.concurrency);
        let run =
            tokio::task::spawn_blocking(move || drive_wrk(&url, &request, calls, concurrency)).await??;
        let cost = meter.stop(run.requests)?;
        if run.bad > 0 || run.socket_errors > 0 {
            bail!(
                "wrk saw {} bad replies and {} socket errors in {} calls; first bad reply: {}",
                run.bad,
                run.socket_errors,
                run.requests,
                run.first_bad
            );
        }
        anyhow::ensure!(run.finished, "wrk did not see {calls} replies in time ({} seen)", run.requests);
        return Ok(SyncRun {
            driver: "wrk (1 thread; percentiles include wrk's coordinated-omission correction)".to_owned(),
            calls: run.requests,
            seconds: run.seconds,
            latency: run.latency,
            cost,
            client_cpu_us: run.cpu_seconds * 1e6 / run.requests.max(1) as f64,
        });
    }
    let own = process_cpu_seconds(std::process::id());
    let (elapsed, latencies) = load::drive(caller, options.calls, options.concurrency).await?;
    let client = process_cpu_seconds(std::process::id()) - own;
    let cost = meter.stop(options.calls)?;
    Ok(SyncRun {
        driver: "this process's HTTP client (wrk is not installed)".to_owned(),
        calls: options.calls,
        seconds: elapsed.as_secs_f64(),
        latency: Latencies::of(latencies),
        cost,
        client_cpu_us: client * 1e6 / options.calls as f64,
    })
}

/// One `run_dag` task fanning out to `width` no-op nodes, from `tools/call` to `completed`.
async fn fanout(
    redis: &RedisServer,
    mcp: &Mcp,
    deployment: &Deployment,
    width: usize,
) -> anyhow::Result<FanoutRun> {
    let mut graph = vec![json!({"id": "root", "kind": "noop"})];
    graph.extend((0..width).map(|i| json!({"id": format!("n{i}"), "kind": "noop", "dependsOn": ["root"]})));
    let all: Vec<String> = (0..width).map(|i| format!("n{i}")).collect();
    graph.push(json!({"id": "sink", "kind": "noop", "dependsOn": all}));
    let nodes = graph.len();
    let arguments = json!({"name": "run_dag", "arguments": {"nodes": graph}});

    let meter = Meter::start(redis, deployment.processes())?;
    let started = Instant::now();
    let created = mcp.call_2026("tools/call", arguments, tasks_client_capabilities()).await?;
    let task = created.result()["taskId"]
        .as_str()
        .with_context(|| format!("run_dag created no task: {}", truncated(&created.raw)))?
        .to_owned();
    loop {
        let got = mcp.call_2026("tasks/get", json!({"taskId": task}), tasks_client_capabilities()).await?;
        match got.result()["status"].as_str() {
            Some("completed") => break,
            Some("working") => tokio::time::sleep(Duration::from_millis(10)).await,
            _ => bail!("the run_dag task did not complete: {}", truncated(&got.raw)),
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(FanoutRun { nodes, seconds, cost: meter.stop(nodes as u64)? })
}

/// A `conveyor gateway` and its worker processes.
struct Deployment {
    gateway: BenchProcess,
    workers: Vec<BenchProcess>,
}

impl Deployment {
    fn start(redis: &RedisServer, options: &Options) -> anyhow::Result<Self> {
        let dag_nodes = (options.fanout + 10).to_string();
        let gateway = BenchProcess::start(
            "gateway",
            &redis.url(),
            &[
                "--max-dag-nodes",
                &dag_nodes,
                "--max-body-bytes",
                "67108864",
                "--max-argument-bytes",
                "67108864",
                "--max-parsed-bytes",
                "536870912",
                "--max-inflight-bytes",
                "1073741824",
            ],
            &[],
            &[],
        )?;
        let concurrency = WORKER_CONCURRENCY.to_string();
        let workers = (0..options.workers)
            .map(|_| {
                BenchProcess::start(
                    "worker",
                    &redis.url(),
                    &["--fixtures", "--tools", "noop", "--concurrency", &concurrency],
                    &[],
                    &[],
                )
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self { gateway, workers })
    }

    /// Stops every process with SIGTERM and waits for each to exit cleanly.
    async fn stop(mut self) -> anyhow::Result<()> {
        for worker in &mut self.workers {
            worker.terminate().await?;
        }
        self.gateway.terminate().await
    }

    /// The processes by name, for CPU readings.
    fn processes(&self) -> Vec<(String, u32)> {
        let mut all = vec![("gateway".to_owned(), self.gateway.child.id())];
        let many = self.workers.len() > 1;
        for (i, worker) in self.workers.iter().enumerate() {
            all.push((
                if many { format!("worker {}", i + 1) } else { "worker".to_owned() },
                worker.child.id(),
            ));
        }
        all
    }
}

// ---------------------------------------------------------------------------------------------
// Load generators for sync calls

fn wrk_installed() -> bool {
    Command::new("wrk").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

/// What one wrk run reported.
struct WrkRun {
    /// Replies received (a few more than asked for: wrk stops within 100 ms of the signal).
    requests: u64,
    seconds: f64,
    latency: Latencies,
    /// Replies that were not HTTP 200 with the tool's text.
    bad: u64,
    first_bad: String,
    socket_errors: u64,
    /// Whether the asked-for number of replies arrived before the time budget ran out.
    finished: bool,
    /// wrk's own CPU time up to the N-th reply.
    cpu_seconds: f64,
}

/// The Lua script of a wrk run: the request, a check of every reply (HTTP 200 and the request's
/// expected text), `BENCH_DONE` on stderr at the `calls`-th reply, and the figures on one stdout
/// line at the end.
fn wrk_script(request: &SyncRequest, calls: u64) -> String {
    let mut headers = String::new();
    for (name, value) in request.headers() {
        headers.push_str(&format!("wrk.headers[\"{name}\"] = [==[{value}]==]\n"));
    }
    format!(
        r#"wrk.method = "POST"
wrk.body = [==[{body}]==]
{headers}
local expect = [==[{expect}]==]
local limit = {calls}
local seen = 0
bad = 0
first_bad = ""

function response(status, headers, body)
  seen = seen + 1
  if status ~= 200 or not string.find(body, expect, 1, true) then
    bad = bad + 1
    if first_bad == "" then first_bad = status .. " " .. string.sub(body, 1, 400) end
  end
  if seen == limit then io.stderr:write("BENCH_DONE\n") end
end

local threads = {{}}
function setup(thread) table.insert(threads, thread) end

function done(summary, latency, requests)
  local bad_total, first = 0, ""
  for _, t in ipairs(threads) do
    bad_total = bad_total + (t:get("bad") or 0)
    local f = t:get("first_bad")
    if first == "" and f then first = f end
  end
  local e = summary.errors
  io.write(string.format("BENCH_RESULT %d %d %d %d %.1f %.1f %.1f %.1f\n",
    summary.requests, summary.duration, bad_total, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
  if first ~= "" then io.write("BENCH_FIRST_BAD ", (string.gsub(first, "%s+", " ")), "\n") end
end
"#,
        body = request.body,
        expect = request.expect,
    )
}

/// Runs wrk (one thread, `concurrency` connections) sending `request` until `calls` replies
/// arrived, then stops it with SIGINT so that it prints its figures.
fn drive_wrk(url: &str, request: &SyncRequest, calls: u64, concurrency: usize) -> anyhow::Result<WrkRun> {
    let script = std::env::temp_dir().join(format!("conveyor-bench-{}.lua", std::process::id()));
    std::fs::write(&script, wrk_script(request, calls))?;
    let mut child = Command::new("wrk")
        .args(["-t1", &format!("-c{concurrency}"), "-d3600s", "--timeout", "60s", "-s"])
        .arg(&script)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start wrk")?;
    let pid = child.id();
    let stderr = child.stderr.take().context("wrk's stderr")?;
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut other = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line == "BENCH_DONE" {
                let _ = done_tx.send(());
            } else {
                other.push_str(&line);
                other.push('\n');
            }
        }
        other
    });
    let budget = Duration::from_secs(120 + calls / 200);
    let finished = done_rx.recv_timeout(budget).is_ok();
    let cpu_seconds = process_cpu_seconds(pid);
    let _ = Command::new("kill").arg("-INT").arg(pid.to_string()).status();
    let output = child.wait_with_output()?;
    let stderr = reader.join().unwrap_or_default();
    let _ = std::fs::remove_file(&script);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let figures: Vec<f64> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("BENCH_RESULT "))
        .with_context(|| {
            format!("wrk printed no figures\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}")
        })?
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    anyhow::ensure!(figures.len() == 8, "wrk's figures do not parse: {figures:?}");
    let first_bad =
        stdout.lines().find_map(|l| l.strip_prefix("BENCH_FIRST_BAD ")).unwrap_or_default().to_owned();
    let ms = |us: f64| us / 1000.0;
    Ok(WrkRun {
        requests: figures[0] as u64,
        seconds: figures[1] / 1e6,
        bad: figures[2] as u64,
        socket_errors: figures[3] as u64,
        latency: Latencies {
            p50: ms(figures[4]),
            p90: ms(figures[5]),
            p99: ms(figures[6]),
            max: ms(figures[7]),
        },
        first_bad,
        finished,
        cpu_seconds,
    })
}

// ---------------------------------------------------------------------------------------------
// 5-6. The deployment a user starts, and the idle command rate

/// Workers of the `conveyor up` process.
const UP_WORKERS: usize = 2;
/// The pause after a load, or after a deployment started, before an idle window opens.
const IDLE_SETTLE: Duration = Duration::from_secs(5);

/// What the `conveyor up` section measured.
struct UpFigures {
    /// Sync `greet` calls (`None` with `--skip-up`).
    sync: Option<SyncRun>,
    /// Its idle command rate after the load (`None` with `--skip-idle`).
    idle: Option<IdleRun>,
}

async fn measure_up(redis: &RedisServer, options: &Options, cores: usize) -> anyhow::Result<UpFigures> {
    let workers = UP_WORKERS.to_string();
    let mut up = BenchProcess::start(
        "up",
        &redis.url(),
        &["--workers", &workers, "--fixtures", "--no-auth"],
        &[],
        &[],
    )?;
    let url = up.mcp_url();
    let mcp = Mcp::new(url.clone());
    mcp.wait_for_tool("greet", Duration::from_secs(30)).await?;
    println!();
    println!(
        "== conveyor up --workers {UP_WORKERS} --fixtures --no-auth: one process, a gateway and {UP_WORKERS} workers (default concurrency) with every fixture tool"
    );
    let sync = if options.skip_up {
        None
    } else {
        // One call through the full client first, so that a wrong reply shows as itself.
        let arguments = json!({"name": "bench"});
        let request = SyncRequest::new("greet", arguments.clone(), "Hello, bench!");
        let reply =
            mcp.call_2026("tools/call", json!({"name": "greet", "arguments": arguments}), json!({})).await?;
        anyhow::ensure!(
            reply.result()["content"][0]["text"] == "Hello, bench!",
            "a sync greet call answered {}",
            reply.raw
        );
        let caller = SyncCaller::with_request(&url, &request)?;
        load::drive(&caller, (options.calls / 10).max(200), options.concurrency).await?;
        let processes = vec![("conveyor up".to_owned(), up.child.id())];
        let run = sync_calls(redis, processes, &url, &request, &caller, options).await?;
        println!("  sync tools/call of greet {{\"name\": \"bench\"}} through /mcp:");
        run.print(options, cores);
        Some(run)
    };
    let idle = if options.skip_idle {
        None
    } else {
        let processes = vec![("conveyor up".to_owned(), up.child.id())];
        settle(redis, &processes).await?;
        let run = idle_window(redis, processes, Duration::from_secs(options.idle_seconds)).await?;
        run.print(if options.skip_up { "after it started" } else { "after the load" });
        Some(run)
    };
    up.terminate().await?;
    Ok(UpFigures { sync, idle })
}

/// The idle command rate of one `conveyor gateway` and two `conveyor worker --fixtures`
/// processes, started fresh.
async fn measure_split_idle(redis: &RedisServer, options: &Options) -> anyhow::Result<IdleRun> {
    let mut gateway = BenchProcess::start("gateway", &redis.url(), &[], &[], &[])?;
    let mut workers = (0..UP_WORKERS)
        .map(|_| BenchProcess::start("worker", &redis.url(), &["--fixtures"], &[], &[]))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mcp = Mcp::new(gateway.mcp_url());
    mcp.wait_for_tool("greet", Duration::from_secs(30)).await?;
    let reply = mcp
        .call_2026("tools/call", json!({"name": "greet", "arguments": {"name": "idle"}}), json!({}))
        .await?;
    anyhow::ensure!(
        reply.result()["content"][0]["text"] == "Hello, idle!",
        "a sync greet call answered {}",
        reply.raw
    );
    println!();
    println!(
        "== conveyor gateway + {UP_WORKERS} x conveyor worker --fixtures (default lease), started fresh, after one call"
    );
    let mut processes = vec![("gateway".to_owned(), gateway.child.id())];
    processes.extend(workers.iter().enumerate().map(|(i, w)| (format!("worker {}", i + 1), w.child.id())));
    settle(redis, &processes).await?;
    let run = idle_window(redis, processes, Duration::from_secs(options.idle_seconds)).await?;
    run.print("after one call");
    for worker in &mut workers {
        worker.terminate().await?;
    }
    gateway.terminate().await?;
    Ok(run)
}

/// Waits until a worker of the deployment (of one of `processes`) holds the maintenance lease
/// (a worker of an earlier section may hold it until it lapses, and a new holder first looks
/// over every shard and stream once), then [`IDLE_SETTLE`] more.
async fn settle(redis: &RedisServer, processes: &[(String, u32)]) -> anyhow::Result<()> {
    use conveyor_shared::keys::{MAINTAINER, WORKERS};
    let pids: Vec<u32> = processes.iter().map(|(_, pid)| *pid).collect();
    let mut conn = redis.connection()?;
    let started = Instant::now();
    loop {
        let holder: Option<String> = redis::cmd("GET").arg(MAINTAINER).query(&mut conn)?;
        let record: Option<String> = match &holder {
            Some(name) => redis::cmd("HGET").arg(WORKERS).arg(name).query(&mut conn)?,
            None => None,
        };
        let pid = record
            .and_then(|r| serde_json::from_str::<serde_json::Value>(&r).ok())
            .and_then(|r| r["pid"].as_u64());
        if pid.is_some_and(|pid| pids.iter().any(|p| u64::from(*p) == pid)) {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "no worker of the deployment took the maintenance lease within 120 s (held by {holder:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(IDLE_SETTLE).await;
    Ok(())
}

/// Commands a deployment sent over a window in which it had nothing to do.
struct IdleRun {
    seconds: f64,
    counts: MonitorCounts,
    /// `INFO commandstats` calls over the window (scripts' commands included; the monitor's own
    /// `CLIENT LIST`, `MONITOR` and `ECHO` left out).
    info_commands: u64,
    /// Redis CPU over the window, seconds.
    redis_cpu: f64,
    /// The deployment's CPU over the window, process by process, seconds.
    processes: Vec<(String, f64)>,
}

/// Opens a `MONITOR` for `window` with nothing else sent by this process, and reads
/// `INFO commandstats` and CPU times around it (on one connection opened before, so that no
/// handshake falls inside).
async fn idle_window(
    redis: &RedisServer,
    processes: Vec<(String, u32)>,
    window: Duration,
) -> anyhow::Result<IdleRun> {
    let mut conn = redis.connection()?;
    let stats_before = CommandStats::read_on(&mut conn)?;
    let redis_before = redis_cpu_seconds_on(&mut conn)?;
    let cpu_before: Vec<f64> = processes.iter().map(|(_, pid)| process_cpu_seconds(*pid)).collect();
    let started = Instant::now();
    let monitor = Monitor::start(&redis.url())?;
    tokio::time::sleep(window).await;
    let counts = tokio::task::spawn_blocking(move || monitor.stop()).await??;
    let seconds = started.elapsed().as_secs_f64();
    let stats_after = CommandStats::read_on(&mut conn)?;
    let redis_cpu = redis_cpu_seconds_on(&mut conn)? - redis_before;
    let processes = processes
        .iter()
        .zip(cpu_before)
        .map(|((name, pid), before)| (name.clone(), process_cpu_seconds(*pid) - before))
        .collect();
    // The monitor's own commands: CLIENT LIST and MONITOR on its connection, the stop's ECHO.
    let own: u64 = ["client|list", "monitor", "echo"]
        .iter()
        .map(|name| {
            let delta = |s: &CommandStats| s.calls.get(*name).copied().unwrap_or(0);
            (delta(&stats_after) - delta(&stats_before)).min(1)
        })
        .sum();
    let total = |s: &CommandStats| s.calls.values().sum::<u64>();
    let info_commands = (total(&stats_after) - total(&stats_before)).saturating_sub(own);
    Ok(IdleRun { seconds, counts, info_commands, redis_cpu, processes })
}

impl IdleRun {
    fn rate(&self, n: u64) -> f64 {
        n as f64 / self.seconds.max(1e-9)
    }

    /// Commands sent per second beyond blocking reads and pub/sub connections' subscriptions.
    fn beyond_blocking(&self) -> f64 {
        let c = &self.counts;
        self.rate(c.client_commands.saturating_sub(c.blocking_reads + c.pubsub_commands))
    }

    fn print(&self, after: &str) {
        let c = &self.counts;
        println!(
            "  idle        {:.1} s with nothing to do, {after}, once one of its workers held maintenance, and a {} s pause: {:.2} commands/s sent; {:.2}/s beyond blocking reads ({:.2}/s) and pub/sub connections' subscribe and PING ({:.2}/s)",
            self.seconds,
            IDLE_SETTLE.as_secs(),
            self.rate(c.client_commands),
            self.beyond_blocking(),
            self.rate(c.blocking_reads),
            self.rate(c.pubsub_commands),
        );
        // Each command once: blocking reads and pub/sub commands apart from the same name's others.
        let mut top: Vec<(String, u64)> = Vec::new();
        for (name, &n) in &c.by_command {
            let blocking = c.blocking_by_command.get(name).copied().unwrap_or(0);
            let pubsub = c.pubsub_by_command.get(name).copied().unwrap_or(0);
            let rest = n.saturating_sub(blocking + pubsub);
            for (label, n) in [
                (name.clone(), rest),
                (format!("{name} BLOCK"), blocking),
                (format!("{name} (pub/sub)"), pubsub),
            ] {
                if n > 0 {
                    top.push((label, n));
                }
            }
        }
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let list = |l: &[(String, u64)]| {
            l.iter()
                .take(8)
                .map(|(name, n)| format!("{name} {:.2}", self.rate(*n)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "  idle top    commands sent per s: {}",
            if top.is_empty() { "none".to_owned() } else { list(&top) }
        );
        let mut scripts: Vec<(String, u64)> =
            c.script_by_command.iter().map(|(name, &n)| (name.clone(), n)).collect();
        scripts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        println!(
            "  idle        run inside scripts {:.2}/s ({}); INFO commandstats {:.2}/s in all",
            self.rate(c.script_commands),
            if scripts.is_empty() { "none".to_owned() } else { list(&scripts) },
            self.rate(self.info_commands)
        );
        let mut cpu = format!("Redis {:.2}%", self.redis_cpu * 100.0 / self.seconds.max(1e-9));
        for (name, seconds) in &self.processes {
            cpu.push_str(&format!(", {name} {:.2}%", seconds * 100.0 / self.seconds.max(1e-9)));
        }
        println!("  idle        CPU of one core: {cpu}");
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Takeover of a killed worker's node

/// The lease of the takeover's workers.
const TAKEOVER_LEASE: Duration = Duration::from_millis(3000);
/// Workers killed, one after the other.
const TAKEOVER_TRIALS: usize = 3;

/// What the takeover section measured.
struct TakeoverFigures {
    trials: Vec<TakeoverTrial>,
}

impl TakeoverFigures {
    /// The slowest trial's delay beyond the lease, seconds.
    fn worst_beyond_lease(&self) -> Option<f64> {
        self.trials.iter().map(TakeoverTrial::beyond_lease).max_by(f64::total_cmp)
    }
}

/// One killed worker.
struct TakeoverTrial {
    /// From the kill until the node was queued again (seen at the same poll as `running` when
    /// both happened within one poll).
    requeued: Option<Duration>,
    /// From the kill until the node ran again on another worker.
    running: Duration,
    killed: String,
    took_over: String,
    attempt: u64,
    /// Whether the killed worker held the deployment's maintenance lease.
    killed_maintainer: bool,
}

impl TakeoverTrial {
    fn beyond_lease(&self) -> f64 {
        self.running.as_secs_f64() - TAKEOVER_LEASE.as_secs_f64()
    }
}

/// A worker of the takeover section, named so that a node's `worker` field says which it is.
fn takeover_worker(redis: &RedisServer, name: &str) -> anyhow::Result<BenchProcess> {
    let lease = TAKEOVER_LEASE.as_millis().to_string();
    BenchProcess::start(
        "worker",
        &redis.url(),
        &["--fixtures", "--lease-ms", &lease, "--name", name],
        &[],
        &[],
    )
}

async fn measure_takeover(redis: &RedisServer) -> anyhow::Result<TakeoverFigures> {
    let mut gateway = BenchProcess::start("gateway", &redis.url(), &[], &[], &[])?;
    let mut workers: Vec<(String, BenchProcess)> = Vec::new();
    for i in 0..2 {
        let name = format!("bench-takeover-{}", i + 1);
        workers.push((name.clone(), takeover_worker(redis, &name)?));
    }
    let mcp = Mcp::new(gateway.mcp_url());
    mcp.wait_for_tool("slow_compute", Duration::from_secs(30)).await?;
    println!();
    println!(
        "== Takeover: conveyor gateway + 2 x conveyor worker --fixtures --lease-ms {}; the worker running a slow_compute task's node gets SIGKILL",
        TAKEOVER_LEASE.as_millis()
    );
    let mut conn = redis.connection()?;
    let mut trials = Vec::new();
    for trial in 1..=TAKEOVER_TRIALS {
        let names: Vec<String> = workers.iter().map(|(name, _)| name.clone()).collect();
        let maintainer = wait_takeover_ready(&mut conn, &names).await?;
        let created = mcp
            .call_2026(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 120, "label": "takeover"}}),
                tasks_client_capabilities(),
            )
            .await?;
        let task = created.result()["taskId"]
            .as_str()
            .with_context(|| format!("slow_compute created no task: {}", truncated(&created.raw)))?
            .to_owned();
        let key = conveyor_tests::process::nodes_key(&task);
        let deadline = Instant::now() + Duration::from_secs(30);
        let (attempt, losses, running_on) = loop {
            let node = RootNode::read(&mut conn, &key)?;
            if node.status == "running"
                && let Some(worker) = node.worker
            {
                break (node.attempt, node.losses, worker);
            }
            anyhow::ensure!(Instant::now() < deadline, "the node of task {task} never ran: {node:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let index = workers
            .iter()
            .position(|(name, _)| *name == running_on)
            .with_context(|| format!("task {task} runs on {running_on}, none of {names:?}"))?;
        let (killed, mut process) = workers.remove(index);
        process.child.kill()?;
        let killed_at = Instant::now();
        process.child.wait()?;

        let deadline = killed_at + TAKEOVER_LEASE * 4 + Duration::from_secs(30);
        let mut requeued = None;
        let (running, took_over, attempt) = loop {
            let node = RootNode::read(&mut conn, &key)?;
            let now = killed_at.elapsed();
            if requeued.is_none() && (node.status == "queued" || node.losses > losses) {
                requeued = Some(now);
            }
            if node.attempt > attempt && node.status == "running" {
                let took_over = node.worker.clone().unwrap_or_default();
                break (now, took_over, node.attempt);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the node of task {task} was not taken over from {killed} within {:?}: {node:?}",
                deadline - killed_at
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        anyhow::ensure!(took_over != killed, "the node of task {task} runs on the killed worker again");
        let run = TakeoverTrial {
            requeued,
            running,
            killed_maintainer: maintainer == killed,
            killed,
            took_over,
            attempt,
        };
        println!(
            "  takeover {trial}  lease {:.1} s + {:.3} s: killed {} ({}), node queued again after {}, running again after {:.3} s on {} (attempt {})",
            TAKEOVER_LEASE.as_secs_f64(),
            run.beyond_lease(),
            run.killed,
            if run.killed_maintainer { "held the maintenance lease" } else { "not the maintainer" },
            run.requeued.map_or_else(|| "(not seen)".to_owned(), |d| format!("{:.3} s", d.as_secs_f64())),
            run.running.as_secs_f64(),
            run.took_over,
            run.attempt
        );
        trials.push(run);

        let cancelled =
            mcp.call_2026("tasks/cancel", json!({"taskId": task}), tasks_client_capabilities()).await?;
        anyhow::ensure!(
            cancelled.message.get("error").is_none(),
            "tasks/cancel of {task} failed: {}",
            truncated(&cancelled.raw)
        );
        if trial < TAKEOVER_TRIALS {
            let name = format!("bench-takeover-{}", trial + 2);
            workers.push((name.clone(), takeover_worker(redis, &name)?));
        }
    }
    for (_, worker) in &mut workers {
        worker.terminate().await?;
    }
    gateway.terminate().await?;
    Ok(TakeoverFigures { trials })
}

/// Waits until every one of `names` has announced itself (its liveness in the catalog) and one of
/// them holds the maintenance lease (a worker of an earlier section may hold it until it lapses);
/// returns the holder.
async fn wait_takeover_ready(conn: &mut redis::Connection, names: &[String]) -> anyhow::Result<String> {
    use conveyor_shared::keys::{ALIVE, MAINTAINER};
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let holder: Option<String> = redis::cmd("GET").arg(MAINTAINER).query(conn)?;
        let mut alive = true;
        for name in names {
            let score: Option<f64> = redis::cmd("ZSCORE").arg(ALIVE).arg(name).query(conn)?;
            alive &= score.is_some();
        }
        if alive && let Some(holder) = holder.as_ref().filter(|h| names.contains(h)) {
            return Ok(holder.clone());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the takeover's workers {names:?} were not all live with one holding maintenance (held by {holder:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The root node of a task as Redis holds it.
#[derive(Debug)]
struct RootNode {
    status: String,
    attempt: u64,
    worker: Option<String>,
    /// Times the node lost its worker (counted when maintenance queues it again).
    losses: u64,
}

impl RootNode {
    fn read(conn: &mut redis::Connection, nodes_key: &str) -> anyhow::Result<Self> {
        type Fields = (Option<String>, Option<u64>, Option<String>, Option<u64>);
        let (status, attempt, worker, losses): Fields = redis::cmd("HMGET")
            .arg(nodes_key)
            .arg("root:status")
            .arg("root:attempt")
            .arg("root:worker")
            .arg("root:losses")
            .query(conn)?;
        Ok(Self {
            status: status.unwrap_or_default(),
            attempt: attempt.unwrap_or(0),
            worker,
            losses: losses.unwrap_or(0),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// 8-9. The queue core in this process

/// What the queue-core part measured.
struct CoreFigures {
    settle: CoreRun,
    add: CoreRun,
    consume: CoreRun,
    round_trip: Latencies,
    counts: PerCall,
}

/// One measured run of the queue core.
struct CoreRun {
    tasks: u64,
    seconds: f64,
    cost: Cost,
}

impl CoreRun {
    fn per_sec(&self) -> f64 {
        self.tasks as f64 / self.seconds
    }
}

async fn measure_core(redis: &RedisServer, options: &Options, cores: usize) -> anyhow::Result<CoreFigures> {
    let core = Core::connect(&redis.url()).await?;
    let me = vec![("this process".to_owned(), std::process::id())];
    println!();
    println!(
        "== Conveyor queue core in this process: Store + conveyor_worker::run (fixtures, concurrency {WORKER_CONCURRENCY}), no HTTP"
    );

    let worker = InProcessWorker::start(&redis.url()).await?;
    core.run_tasks((options.calls / 10).max(200), options.in_flight).await?; // warm-up
    let meter = Meter::start(redis, me.clone())?;
    let (elapsed, latencies) = core.run_tasks(options.calls, options.in_flight).await?;
    let settle =
        CoreRun { tasks: options.calls, seconds: elapsed.as_secs_f64(), cost: meter.stop(options.calls)? };
    println!(
        "  create→settle  {} tasks, {} in flight: {:.2} s, {:.0} tasks/s; latency {}",
        settle.tasks,
        options.in_flight,
        settle.seconds,
        settle.per_sec(),
        Latencies::of(latencies)
    );
    print_cost("  per task      ", &settle.cost, None, cores);

    let round_trip = round_trip(|| core.run_task(), options.latency_calls).await?;
    println!("  round trip     one task at a time ({} tasks): {round_trip}", options.latency_calls);

    let monitor = Monitor::start(&redis.url())?;
    core.run_tasks(options.monitor_calls, options.in_flight).await?;
    let counts = PerCall::new(monitor.stop()?, options.monitor_calls);
    println!("  MONITOR        {}", counts.describe(options.in_flight));
    worker.stop().await?;

    // BullMQ's shape: everything added first, then one worker drains the queue.
    let meter = Meter::start(redis, me.clone())?;
    let started = Instant::now();
    let waiting: Vec<(String, Waiter)> = futures::stream::iter(0..options.calls)
        .map(|_| core.create())
        .buffer_unordered(options.in_flight)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()?;
    let add = CoreRun {
        tasks: options.calls,
        seconds: started.elapsed().as_secs_f64(),
        cost: meter.stop(options.calls)?,
    };
    let meter = Meter::start(redis, me)?;
    let started = Instant::now();
    let worker = InProcessWorker::start(&redis.url()).await?;
    let settled = waiting.into_iter().map(|(task_id, mut waiter)| {
        let store = core.store.clone();
        async move { await_settled(&store, &task_id, &mut waiter).await }
    });
    futures::future::try_join_all(settled).await?;
    let consume = CoreRun {
        tasks: options.calls,
        seconds: started.elapsed().as_secs_f64(),
        cost: meter.stop(options.calls)?,
    };
    worker.stop().await?;
    for (name, run) in [("add", &add), ("consume", &consume)] {
        println!(
            "  {name:<8}       {} tasks: {:.2} s, {:.0} tasks/s   Redis CPU {:.1} µs/task   Redis commands {:.1}/task   this process {:.1} µs/task",
            run.tasks,
            run.seconds,
            run.per_sec(),
            run.cost.redis_cpu_us,
            run.cost.redis_commands,
            run.cost.process_cpu_us
        );
    }
    println!(
        "  cycle          add + consume: Redis CPU {:.1} µs/task, Redis commands {:.1}/task",
        add.cost.redis_cpu_us + consume.cost.redis_cpu_us,
        add.cost.redis_commands + consume.cost.redis_commands
    );
    Ok(CoreFigures { settle, add, consume, round_trip, counts })
}

/// A store with the shard count of the deployment the bench's processes set up on this Redis.
async fn deployment_store(url: &str) -> anyhow::Result<Store> {
    let options = StoreOptions { timeout: Duration::from_secs(3), ..StoreOptions::default() };
    Ok(Store::for_deployment(url, options).await?)
}

/// A producer of no-op tasks that waits for their end as a gateway does.
struct Core {
    store: Store,
    hub: EventHub,
}

impl Core {
    async fn connect(url: &str) -> anyhow::Result<Self> {
        let store = deployment_store(url).await?;
        let hub = store.events().await?;
        Ok(Self { store, hub })
    }

    /// Creates one sync no-op task with this process's inbox as its waiter; the local waiter is
    /// registered first, so that no event is missed.
    async fn create(&self) -> anyhow::Result<(String, Waiter)> {
        let shard = self.store.pick_shard();
        let task_id = new_task_id(shard);
        let waiter = self.hub.waiter(&task_id);
        let new = NewTask {
            task_id: task_id.clone(),
            owner: "bench".to_owned(),
            tool: "noop".to_owned(),
            call: CallRecord {
                wire: "2026-07-28".to_owned(),
                arguments: json!({}),
                poll_interval_ms: 1000,
                ..CallRecord::default()
            },
            ttl_ms: 3_600_000,
            traceparent: None,
            mode: TaskMode::Sync,
            status_message: "Queued: noop".to_owned(),
            created_at_ms: now_ms(),
            graph: None,
            idempotency_key: None,
            queues: Default::default(),
            waiter: Some(self.hub.inbox(shard)),
            index_retention_ms: 86_400_000,
            input_responses: None,
            escalable: false,
            call_key: None,
            max_bytes: 0,
            plan_limits: Default::default(),
            input_rounds: false,
        };
        match self.store.create_task(&new, &Limits::default()).await? {
            Created::Created => Ok((task_id, waiter)),
            other => bail!("task {task_id} was not created: {other:?}"),
        }
    }

    /// One task from create to its terminal status event.
    async fn run_task(&self) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let (task_id, mut waiter) = self.create().await?;
        await_settled(&self.store, &task_id, &mut waiter).await?;
        Ok(started.elapsed())
    }

    /// `tasks` tasks, `in_flight` at a time: the wall time and each task's.
    async fn run_tasks(&self, tasks: u64, in_flight: usize) -> anyhow::Result<(Duration, Vec<Duration>)> {
        let started = Instant::now();
        let latencies: Vec<anyhow::Result<Duration>> = futures::stream::iter(0..tasks)
            .map(|_| self.run_task())
            .buffer_unordered(in_flight)
            .collect()
            .await;
        let elapsed = started.elapsed();
        Ok((elapsed, latencies.into_iter().collect::<anyhow::Result<_>>()?))
    }
}

/// Waits for a task's terminal status event and checks that it completed with the tool's text.
async fn await_settled(store: &Store, task_id: &str, waiter: &mut Waiter) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    let (status, result) = loop {
        let delivery = tokio::time::timeout_at(deadline, waiter.recv())
            .await
            .with_context(|| format!("task {task_id} did not settle within 300 s"))?;
        match delivery {
            Some(Delivery::Event(TaskEvent::Status { status, result, .. })) if status.is_terminal() => {
                break (status, result);
            }
            Some(Delivery::Event(TaskEvent::Expired)) => bail!("task {task_id} expired"),
            Some(Delivery::Event(_)) => {}
            Some(Delivery::Resync) => {
                if let Some(task) = store.get_task(task_id).await?
                    && task.status.is_terminal()
                {
                    break (task.status, task.result);
                }
            }
            None => bail!("the event hub is gone"),
        }
    };
    // A result too big for the event is read back; a no-op's never is.
    let result = match result {
        Some(result) => Some(result),
        None => store.get_task(task_id).await?.and_then(|t| t.result),
    };
    anyhow::ensure!(
        status == TaskStatus::Completed && result.as_ref().is_some_and(|r| r["content"][0]["text"] == "ok"),
        "task {task_id} ended {status} with {result:?}"
    );
    Ok(())
}

/// [`conveyor_worker::run`] with the fixture tools, on a store of its own, in this process.
struct InProcessWorker {
    shutdown: CancellationToken,
    handle: tokio::task::JoinHandle<Result<(), conveyor_shared::StoreError>>,
}

impl InProcessWorker {
    async fn start(url: &str) -> anyhow::Result<Self> {
        let store = deployment_store(url).await?;
        // Like BullMQ's worker on its one queue: the worker serves the measured tool only.
        let registry = Arc::new(
            conveyor_worker::fixtures::registry().only(&["noop".to_owned()]).map_err(anyhow::Error::msg)?,
        );
        let options = conveyor_worker::WorkerOptions::new(WORKER_CONCURRENCY);
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(conveyor_worker::run(store, registry, options, shutdown.clone()));
        Ok(Self { shutdown, handle })
    }

    async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        Ok(self.handle.await??)
    }
}

// ---------------------------------------------------------------------------------------------
// Shared measurements

/// `calls` calls one at a time after a few not counted.
async fn round_trip<F, Fut>(call: F, calls: usize) -> anyhow::Result<Latencies>
where
    F: Fn() -> Fut,
    Fut: Future<Output = anyhow::Result<Duration>>,
{
    for _ in 0..ROUND_TRIP_WARMUP {
        call().await?;
    }
    let mut latencies = Vec::with_capacity(calls);
    for _ in 0..calls {
        latencies.push(call().await?);
    }
    Ok(Latencies::of(latencies))
}

/// Costs per unit of work over one measured run.
struct Cost {
    /// Redis `used_cpu_sys + used_cpu_user`, µs.
    redis_cpu_us: f64,
    /// `INFO commandstats` calls, commands that scripts ran included.
    redis_commands: f64,
    busiest: Vec<(String, f64)>,
    /// `INFO commandstats` µs per command, busiest first (a script's time includes its commands').
    redis_time: Vec<(String, f64)>,
    /// `utime + stime` of the measured Conveyor processes together, µs.
    process_cpu_us: f64,
    /// The same, process by process.
    processes: Vec<(String, f64)>,
}

/// Readings before a measured run, turned into a [`Cost`] after it.
struct Meter<'a> {
    redis: &'a RedisServer,
    processes: Vec<(String, u32, f64)>,
    redis_cpu: f64,
    stats: CommandStats,
}

impl<'a> Meter<'a> {
    /// Starts measuring Redis and the named processes.
    fn start(redis: &'a RedisServer, processes: Vec<(String, u32)>) -> anyhow::Result<Self> {
        let processes =
            processes.into_iter().map(|(name, pid)| (name, pid, process_cpu_seconds(pid))).collect();
        Ok(Self { redis, processes, redis_cpu: redis_cpu_seconds(redis)?, stats: CommandStats::read(redis)? })
    }

    fn stop(self, units: u64) -> anyhow::Result<Cost> {
        let per = |seconds: f64| seconds * 1e6 / units.max(1) as f64;
        let processes: Vec<(String, f64)> = self
            .processes
            .iter()
            .map(|(name, pid, before)| (name.clone(), per(process_cpu_seconds(*pid) - before)))
            .collect();
        let redis_cpu = redis_cpu_seconds(self.redis)?;
        let stats = CommandStats::read(self.redis)?;
        let (redis_commands, busiest) = commands_per(&self.stats.calls, &stats.calls, units as f64);
        let mut redis_time: Vec<(String, f64)> = stats
            .usec
            .iter()
            .map(|(name, usec)| {
                (name.clone(), (usec - self.stats.usec.get(name).unwrap_or(&0.0)) / units.max(1) as f64)
            })
            .filter(|(_, us)| *us > 0.0)
            .collect();
        redis_time.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(Cost {
            redis_cpu_us: per(redis_cpu - self.redis_cpu),
            redis_commands,
            busiest,
            redis_time,
            process_cpu_us: processes.iter().map(|(_, us)| us).sum(),
            processes,
        })
    }
}

/// Calls and time per command from `INFO commandstats` (`info` left out).
struct CommandStats {
    calls: HashMap<String, u64>,
    usec: HashMap<String, f64>,
}

impl CommandStats {
    fn read(redis: &RedisServer) -> anyhow::Result<Self> {
        Self::read_on(&mut redis.connection()?)
    }

    fn read_on(conn: &mut redis::Connection) -> anyhow::Result<Self> {
        let info: String = redis::cmd("INFO").arg("commandstats").query(conn)?;
        let mut stats = Self { calls: HashMap::new(), usec: HashMap::new() };
        for line in info.lines() {
            let Some((name, rest)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else {
                continue;
            };
            if name == "info" {
                continue;
            }
            let field = |key: &str| rest.split(',').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='));
            if let Some(calls) = field("calls").and_then(|c| c.parse().ok()) {
                stats.calls.insert(name.to_owned(), calls);
            }
            if let Some(usec) = field("usec").and_then(|u| u.parse().ok()) {
                stats.usec.insert(name.to_owned(), usec);
            }
        }
        Ok(stats)
    }
}

fn print_cost(label: &str, cost: &Cost, client: Option<(&str, f64)>, cores: usize) {
    let list = |l: &[(String, f64)], n: usize, precision: usize| {
        l.iter().take(n).map(|(name, v)| format!("{name} {v:.precision$}")).collect::<Vec<_>>().join(", ")
    };
    println!(
        "{label} Redis CPU {:.1} µs; Redis commands {:.1} ({})",
        cost.redis_cpu_us,
        cost.redis_commands,
        list(&cost.busiest, 6, 2)
    );
    println!(
        "{label} Redis time in commands (commandstats usec: wall time, scripts include their commands'), µs: {}",
        list(&cost.redis_time, 5, 1)
    );
    let mut total = cost.redis_cpu_us + cost.process_cpu_us;
    let mut parts = format!("Redis {:.0}", cost.redis_cpu_us);
    for (name, us) in &cost.processes {
        parts.push_str(&format!(" + {name} {us:.0}"));
    }
    if let Some((name, us)) = client {
        total += us;
        parts.push_str(&format!(" + {name} {us:.0}"));
    }
    println!(
        "{label} CPU µs of every process: {parts} = {total:.0}; {cores} cores allow at most {:.0}/s",
        cores as f64 * 1e6 / total.max(1.0)
    );
}

/// Commands per call from a `MONITOR` run.
struct PerCall {
    client: f64,
    script: f64,
    busiest_client: Vec<(String, f64)>,
    busiest_script: Vec<(String, f64)>,
}

impl PerCall {
    fn new(counts: MonitorCounts, calls: u64) -> Self {
        let calls = calls.max(1) as f64;
        let per = |by: &std::collections::BTreeMap<String, u64>| {
            let mut list: Vec<(String, f64)> =
                by.iter().map(|(k, &n)| (k.clone(), n as f64 / calls)).collect();
            list.sort_by(|a, b| b.1.total_cmp(&a.1));
            list
        };
        Self {
            client: counts.client_commands as f64 / calls,
            script: counts.script_commands as f64 / calls,
            busiest_client: per(&counts.by_command),
            busiest_script: per(&counts.script_by_command),
        }
    }

    fn describe(&self, in_flight: usize) -> String {
        let list = |l: &[(String, f64)]| {
            l.iter().take(7).map(|(name, n)| format!("{name} {n:.2}")).collect::<Vec<_>>().join(", ")
        };
        format!(
            "separate run, {in_flight} in flight, commands per call: sent by Conveyor {:.2} ({}); run inside scripts {:.2} ({})",
            self.client,
            list(&self.busiest_client),
            self.script,
            list(&self.busiest_script)
        )
    }
}

fn truncated(text: &str) -> String {
    text.chars().take(500).collect()
}

// ---------------------------------------------------------------------------------------------
// 10. Ratios and targets

/// Everything the run measured.
struct Figures {
    bullmq: Option<BullmqFigures>,
    http: Option<HttpFigures>,
    up: Option<UpFigures>,
    /// The idle command rate of a gateway and two worker processes.
    split_idle: Option<IdleRun>,
    takeover: Option<TakeoverFigures>,
    core: CoreFigures,
}

/// How a figure is held against its target.
enum Goal {
    /// Conveyor ÷ BullMQ at least this.
    RatioAtLeast(f64),
    /// Conveyor ÷ BullMQ at most this.
    RatioAtMost(f64),
    /// Conveyor's figure at most this.
    AtMost(f64),
    /// Shown for comparison only.
    None,
}

struct Row {
    what: String,
    conveyor: Option<f64>,
    bullmq: Option<f64>,
    goal: Goal,
}

fn row(what: impl Into<String>, conveyor: Option<f64>, bullmq: Option<f64>, goal: Goal) -> Row {
    Row { what: what.into(), conveyor, bullmq, goal }
}

fn print_ratios(figures: &Figures, options: &Options) {
    let Figures { bullmq, http, up, split_idle, takeover, core } = figures;
    let b = |f: fn(&BullmqFigures) -> f64| bullmq.as_ref().map(f);
    let h = |f: fn(&HttpFigures) -> f64| http.as_ref().map(f);
    let up_sync = up.as_ref().and_then(|u| u.sync.as_ref());
    let up_idle = up.as_ref().and_then(|u| u.idle.as_ref());
    let consume = b(|b| b.consume.jobs_per_sec);
    let cycle_cpu = b(|b| b.cycle.redis_cpu_us_per_job);
    let rows = [
        // The targets, in the order they are set.
        row(
            "sync greet calls/s, conveyor up ÷ consume",
            up_sync.map(SyncRun::per_sec),
            consume,
            Goal::RatioAtLeast(1.0),
        ),
        row(
            "sync noop calls/s, one noop worker ÷ consume",
            h(|h| h.sync.per_sec()),
            consume,
            Goal::RatioAtLeast(0.6),
        ),
        row(
            "queue core create→settle tasks/s ÷ consume",
            Some(core.settle.per_sec()),
            consume,
            Goal::RatioAtLeast(1.5),
        ),
        row(
            format!("{}-node fan-out nodes/s ÷ BullMQ fan-out jobs/s", options.fanout),
            h(|h| h.fanout.nodes as f64 / h.fanout.seconds),
            b(|b| b.fanout.jobs_per_sec),
            Goal::RatioAtLeast(1.0),
        ),
        row(
            "Redis CPU µs per call, conveyor up vs cycle",
            up_sync.map(|s| s.cost.redis_cpu_us),
            cycle_cpu,
            Goal::RatioAtMost(0.5),
        ),
        row(
            "Redis CPU µs per call, one noop worker vs cycle",
            h(|h| h.sync.cost.redis_cpu_us),
            cycle_cpu,
            Goal::RatioAtMost(0.8),
        ),
        row(
            "gateway + worker CPU µs per call (sync noop)",
            h(|h| h.sync.cost.process_cpu_us),
            None,
            Goal::AtMost(45.0),
        ),
        row(
            "idle commands/s beyond blocking reads, up",
            up_idle.map(IdleRun::beyond_blocking),
            None,
            Goal::AtMost(2.0),
        ),
        row(
            format!("idle commands/s beyond blocking, gateway+{UP_WORKERS}w"),
            split_idle.as_ref().map(IdleRun::beyond_blocking),
            None,
            Goal::AtMost(2.0),
        ),
        row(
            format!("takeover delay - lease s, slowest of {TAKEOVER_TRIALS}"),
            takeover.as_ref().and_then(TakeoverFigures::worst_beyond_lease),
            None,
            Goal::AtMost(0.1),
        ),
        // The rest.
        row(
            "queue core consume tasks/s ÷ consume",
            Some(core.consume.per_sec()),
            consume,
            Goal::RatioAtLeast(1.5),
        ),
        row(
            "queue core add tasks/s ÷ BullMQ add jobs/s",
            Some(core.add.per_sec()),
            b(|b| b.add.jobs_per_sec),
            Goal::None,
        ),
        row(
            "round trip p50 ms, sync HTTP vs add→completed",
            h(|h| h.round_trip.p50),
            b(|b| b.latency.p50_ms),
            Goal::RatioAtMost(1.0),
        ),
        row(
            "round trip p50 ms, queue core vs add→completed",
            Some(core.round_trip.p50),
            b(|b| b.latency.p50_ms),
            Goal::RatioAtMost(1.0),
        ),
        row("commands sent per call, sync HTTP (MONITOR)", h(|h| h.counts.client), None, Goal::AtMost(6.0)),
        row(
            "commands sent per task, queue core (MONITOR)",
            Some(core.counts.client),
            None,
            Goal::AtMost(6.0),
        ),
        row(
            "Redis CPU µs per task, queue core vs cycle",
            Some(core.settle.cost.redis_cpu_us),
            cycle_cpu,
            Goal::RatioAtMost(1.0),
        ),
        row(
            "Redis CPU µs per task, core add + consume vs cycle",
            Some(core.add.cost.redis_cpu_us + core.consume.cost.redis_cpu_us),
            cycle_cpu,
            Goal::RatioAtMost(1.0),
        ),
        row(
            "Redis commands per call (INFO), sync noop vs cycle",
            h(|h| h.sync.cost.redis_commands),
            b(|b| b.cycle.redis_commands_per_job),
            Goal::None,
        ),
        row(
            "Redis commands per call (INFO), up greet vs cycle",
            up_sync.map(|s| s.cost.redis_commands),
            b(|b| b.cycle.redis_commands_per_job),
            Goal::None,
        ),
        row(
            "conveyor up CPU µs per call (sync greet)",
            up_sync.map(|s| s.cost.process_cpu_us),
            None,
            Goal::None,
        ),
    ];
    println!();
    println!("== Conveyor against BullMQ {} (targets are reported, not asserted)", bullmq::BULLMQ_VERSION);
    println!("{:<52} {:>10} {:>10} {:>7}  {:<10} met", "figure", "Conveyor", "BullMQ", "ratio", "target");
    let number = |v: Option<f64>| v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.2}"));
    for row in rows {
        let ratio = row.conveyor.zip(row.bullmq).map(|(c, b)| c / b);
        let (target, met) = match row.goal {
            Goal::RatioAtLeast(t) => (format!("≥ {t}×"), ratio.map(|r| r >= t)),
            Goal::None => (String::new(), None),
            Goal::RatioAtMost(t) => (format!("≤ {t}×"), ratio.map(|r| r <= t)),
            Goal::AtMost(t) => (format!("≤ {t}"), row.conveyor.map(|c| c <= t)),
        };
        let met = match met {
            Some(true) => "yes",
            Some(false) => "NO",
            None if target.is_empty() => "",
            None => "n/a",
        };
        println!(
            "{:<52} {:>10} {:>10} {:>7}  {:<10} {}",
            row.what,
            number(row.conveyor),
            number(row.bullmq),
            number(ratio),
            target,
            met
        );
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Options;

    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        Options::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
    }

    #[test]
    fn the_options_are_well_formed() {
        Options::command().debug_assert();
    }

    #[test]
    fn the_documented_invocations_parse() {
        let o = parse(&[]).expect("no options");
        assert_eq!(
            (o.calls, o.concurrency, o.workers, o.in_flight, o.bullmq_jobs, o.fanout),
            (20_000, 64, 1, 256, 20_000, 10_000)
        );
        assert_eq!((o.latency_calls, o.monitor_calls, o.idle_seconds), (500, 2000, 30));
        assert!(!(o.skip_bullmq || o.skip_http || o.skip_up || o.skip_idle || o.skip_takeover));

        let o = parse(&[
            "--calls",
            "20000",
            "--bullmq-jobs",
            "20000",
            "--fanout",
            "10000",
            "--latency-calls",
            "200",
            "--monitor-calls",
            "1000",
            "--idle-seconds",
            "10",
        ])
        .expect("the README's run");
        assert_eq!(
            (o.calls, o.bullmq_jobs, o.fanout, o.latency_calls, o.monitor_calls, o.idle_seconds),
            (20_000, 20_000, 10_000, 200, 1000, 10)
        );

        let o =
            parse(&["--skip-bullmq", "--workers", "2", "--calls", "10000"]).expect("docs/deploy.md's run");
        assert!(o.skip_bullmq && !o.skip_http);
        assert_eq!((o.workers, o.calls), (2, 10_000));

        let o = parse(&["--skip-http", "--skip-up", "--skip-idle", "--skip-takeover", "--in-flight", "8"])
            .expect("every skip");
        assert!(o.skip_http && o.skip_up && o.skip_idle && o.skip_takeover && !o.skip_bullmq);
        assert_eq!((o.in_flight, o.concurrency), (8, 64));

        let o = parse(&["--calls", "5", "--calls", "7"]).expect("a flag given twice");
        assert_eq!(o.calls, 7, "the last one counts");
    }

    #[test]
    fn a_count_below_one_a_word_and_an_unknown_flag_are_refused() {
        for flag in [
            "--calls",
            "--concurrency",
            "--workers",
            "--in-flight",
            "--bullmq-jobs",
            "--fanout",
            "--latency-calls",
            "--monitor-calls",
            "--idle-seconds",
        ] {
            assert!(parse(&[flag, "0"]).is_err(), "{flag} 0");
            assert!(parse(&[flag, "many"]).is_err(), "{flag} many");
            assert!(parse(&[flag]).is_err(), "{flag} without a value");
            assert!(parse(&[flag, "1"]).is_ok(), "{flag} 1");
        }
        assert!(parse(&["--cals", "10"]).is_err());
        assert!(parse(&["10"]).is_err());
    }
}
