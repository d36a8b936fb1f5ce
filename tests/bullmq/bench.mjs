// BullMQ side of Conveyor's comparison benchmark: BullMQ 6.7.0 on the same machine and the same
// redis-server as Conveyor, in one run.
//
//   node bench.mjs --redis redis://127.0.0.1:PORT --jobs N --concurrency C --latency-jobs M --fanout F
//
// Phases, each measured on its own (fresh queue names per run, deleted at the end):
//
// - add:      N no-op jobs added with addBulk in chunks of 1000 (removeOnComplete/removeOnFail set).
// - consume:  one Worker (concurrency C, processor `async () => {}`) drains those N jobs; timed
//             from worker start to its last `completed` event.
// - cycle:    add + consume per job: Redis CPU microseconds and Redis commands.
// - latency:  M jobs added one at a time by one producer, each awaited with
//             job.waitUntilFinished(queueEvents) before the next, one worker of concurrency 1;
//             p50/p90/p99 of add -> completed in ms. The first 10 jobs warm up (scripts loaded)
//             and are not counted. These jobs are kept on completion (and deleted with the queue):
//             with removeOnComplete, waitUntilFinished can find the job already gone and reject.
// - fanout:   F jobs added with addBulk and drained like `consume`; jobs/s over add + drain, the
//             figure to set against a Conveyor task that fans out to F nodes.
//
// For add, consume and each fanout step: Redis CPU seconds (used_cpu_sys + used_cpu_user from
// INFO cpu, before/after) and Redis commands (total `calls` from INFO commandstats, before/after,
// `info` itself left out). Commands run inside Lua scripts count too, as do the EVALSHAs that ran
// them. The INFO readings use a separate ioredis connection.
//
// Progress goes to stderr; one JSON object goes to stdout at the end.

import { createRequire } from 'node:module';
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

import { Queue, QueueEvents, Worker } from 'bullmq';
import IORedis from 'ioredis';

const { values: args } = parseArgs({
  options: {
    redis: { type: 'string', default: 'redis://127.0.0.1:6379' },
    jobs: { type: 'string', default: '20000' },
    concurrency: { type: 'string', default: '64' },
    'latency-jobs': { type: 'string', default: '500' },
    fanout: { type: 'string', default: '10000' },
  },
});
const count = (name) => {
  const n = Number(args[name]);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer, got ${args[name]}`);
  return n;
};
const JOBS = count('jobs');
const CONCURRENCY = count('concurrency');
const LATENCY_JOBS = count('latency-jobs');
const FANOUT = count('fanout');
const CHUNK = 1000;
const WARMUP = 10;
const NOOP = { removeOnComplete: true, removeOnFail: true };

const url = new URL(args.redis);
const connection = {
  host: url.hostname || '127.0.0.1',
  port: Number(url.port || 6379),
  username: url.username ? decodeURIComponent(url.username) : undefined,
  password: url.password ? decodeURIComponent(url.password) : undefined,
  db: Number(url.pathname.slice(1) || 0),
};
const stats = new IORedis(args.redis);
const run = `bench-${randomUUID().slice(0, 8)}`;
const queues = [];
const log = (message) => process.stderr.write(`bullmq: ${message}\n`);
const round = (x, digits = 3) => Number(x.toFixed(digits));

/** Redis CPU seconds so far and commands so far (without `info`). */
async function redisCounters() {
  const cpu = await stats.info('cpu');
  const field = (name) => Number(cpu.match(new RegExp(`^${name}:([0-9.]+)`, 'm'))?.[1] ?? NaN);
  let calls = 0;
  for (const [, name, n] of (await stats.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (name !== 'info') calls += Number(n);
  }
  return { cpu: field('used_cpu_sys') + field('used_cpu_user'), calls };
}

/** Runs `body` and returns its wall time and the Redis CPU and commands it caused. */
async function measure(jobs, body) {
  const before = await redisCounters();
  const start = performance.now();
  await body();
  const seconds = (performance.now() - start) / 1000;
  const after = await redisCounters();
  return {
    jobs,
    seconds: round(seconds),
    jobs_per_sec: round(jobs / seconds, 1),
    redis_cpu_seconds: round(after.cpu - before.cpu, 6),
    redis_commands: after.calls - before.calls,
  };
}

async function openQueue(suffix) {
  const queue = new Queue(`${run}-${suffix}`, { connection });
  queues.push(queue);
  await queue.waitUntilReady();
  return queue;
}

/** Adds `n` no-op jobs with addBulk, CHUNK at a time. */
function addAll(queue, n) {
  return measure(n, async () => {
    for (let done = 0; done < n; done += CHUNK) {
      const size = Math.min(CHUNK, n - done);
      await queue.addBulk(Array.from({ length: size }, () => ({ name: 'noop', data: {}, opts: NOOP })));
    }
  });
}

/** Starts a worker of `concurrency` on `queue` and waits until it has completed `n` jobs. */
async function drain(queue, n, concurrency) {
  let completed = 0;
  let settle;
  const finished = new Promise((resolve, reject) => (settle = { resolve, reject }));
  const worker = new Worker(queue.name, async () => {}, { connection, concurrency, autorun: false });
  worker.on('completed', () => ++completed === n && settle.resolve());
  worker.on('failed', (job, err) => settle.reject(new Error(`job ${job?.id} failed: ${err.message}`)));
  worker.on('error', (err) => settle.reject(err));
  await worker.waitUntilReady();
  const figures = await measure(n, async () => {
    worker.run().catch(settle.reject);
    await finished;
  });
  await worker.close();
  return figures;
}

function percentile(sorted, q) {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}

async function latency(m) {
  const queue = await openQueue('latency');
  const events = new QueueEvents(queue.name, { connection });
  const worker = new Worker(queue.name, async () => {}, { connection, concurrency: 1 });
  await Promise.all([events.waitUntilReady(), worker.waitUntilReady()]);
  const samples = [];
  for (let i = 0; i < WARMUP + m; i++) {
    const start = performance.now();
    const job = await queue.add('noop', {}, { removeOnComplete: false, removeOnFail: false });
    await job.waitUntilFinished(events);
    if (i >= WARMUP) samples.push(performance.now() - start);
  }
  await worker.close();
  await events.close();
  samples.sort((a, b) => a - b);
  return {
    jobs: m,
    warmup: WARMUP,
    p50_ms: round(percentile(samples, 0.5)),
    p90_ms: round(percentile(samples, 0.9)),
    p99_ms: round(percentile(samples, 0.99)),
    mean_ms: round(samples.reduce((a, b) => a + b, 0) / samples.length),
    max_ms: round(samples[samples.length - 1]),
  };
}

async function main() {
  const require = createRequire(import.meta.url);
  const server = await stats.info('server');
  const result = {
    bullmq: require('bullmq/package.json').version,
    ioredis: require('ioredis/package.json').version,
    node: process.version,
    redis: server.match(/^redis_version:(\S+)/m)?.[1] ?? 'unknown',
    queue_prefix: run,
    concurrency: CONCURRENCY,
  };

  const queue = await openQueue('main');
  log(`adding ${JOBS} jobs`);
  result.add = await addAll(queue, JOBS);
  log(`add: ${result.add.jobs_per_sec} jobs/s; draining with concurrency ${CONCURRENCY}`);
  result.consume = await drain(queue, JOBS, CONCURRENCY);
  log(`consume: ${result.consume.jobs_per_sec} jobs/s`);
  result.cycle = {
    redis_cpu_us_per_job: round(((result.add.redis_cpu_seconds + result.consume.redis_cpu_seconds) * 1e6) / JOBS, 2),
    redis_commands_per_job: round((result.add.redis_commands + result.consume.redis_commands) / JOBS, 2),
  };

  log(`latency: ${LATENCY_JOBS} sequential jobs`);
  result.latency = await latency(LATENCY_JOBS);
  log(`latency: p50 ${result.latency.p50_ms} ms, p99 ${result.latency.p99_ms} ms`);

  log(`fanout: ${FANOUT} jobs`);
  const fan = await openQueue('fanout');
  const add = await addAll(fan, FANOUT);
  const consume = await drain(fan, FANOUT, CONCURRENCY);
  const seconds = add.seconds + consume.seconds;
  result.fanout = { jobs: FANOUT, seconds: round(seconds), jobs_per_sec: round(FANOUT / seconds, 1), add, consume };
  log(`fanout: ${result.fanout.jobs_per_sec} jobs/s`);

  return result;
}

let status = 0;
try {
  process.stdout.write(`${JSON.stringify(await main())}\n`);
} catch (err) {
  log(`failed: ${err?.stack ?? err}`);
  status = 1;
} finally {
  for (const queue of queues) {
    await queue.obliterate({ force: true }).catch((err) => log(`cannot delete ${queue.name}: ${err.message}`));
    await queue.close();
  }
  await stats.quit();
}
// After a failure a worker may still hold connections open; do not wait for it.
if (status !== 0) process.exit(status);
