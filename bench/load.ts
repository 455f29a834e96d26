/**
 * The load generator, in a process of its own (never the server's): autocannon POSTs notifications to one
 * server, a warm-up first (not measured), then the measurement. Run by bench/run.ts as
 * `node --import tsx bench/load.ts` with BENCH_LOAD (a `LoadConfig`, as JSON); sends
 * `{ type: 'result', result }` (a `LoadResult`) over IPC and exits.
 */
import autocannon from 'autocannon';
import { bodyFor } from './payload.js';

/** What to drive, and how hard. */
export interface LoadConfig {
  url: string;
  connections: number;
  /** Seconds measured. */
  duration: number;
  /** Seconds of load before the measurement, to warm the JIT and the pools up. */
  warmup: number;
  /** Prepended to the counter in every transaction id: unique to the run and the measurement. */
  idPrefix: string;
}

/** One measurement's raw numbers. */
export interface LoadResult {
  /** Completed requests per second: responses over the measured seconds. */
  rps: number;
  /** autocannon's own mean of its per-second samples, for comparison. */
  rpsSampled: number;
  /** Latency percentiles in milliseconds, over every response (autocannon's histogram rounds to whole ms). */
  p50: number;
  p90: number;
  p99: number;
  max: number;
  responses: number;
  /** Responses during the warm-up. */
  warmupResponses: number;
  non2xx: number;
  /** Connection errors and timeouts. */
  errors: number;
  timeouts: number;
  /** Seconds autocannon actually ran. */
  seconds: number;
  bodyBytes: number;
  /** Bodies sent, warm-up included: each carried a transaction id of its own. */
  sent: number;
  /** CPU time (user and system) this load process spent, warm-up included, in microseconds. */
  cpuMicros: number;
}

const config = JSON.parse(process.env.BENCH_LOAD ?? '{}') as LoadConfig;
const body = bodyFor();
let sequence = 0;

function nextBody(): string {
  sequence += 1;
  return body(`${config.idPrefix}${sequence}`);
}

function drive(seconds: number, latencies?: number[]): Promise<autocannon.Result> {
  return new Promise((resolve, reject) => {
    const options: autocannon.Options = {
      url: config.url,
      connections: config.connections,
      duration: seconds,
      requests: [
        {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          // A new body, so a new transaction id, for every request: a resend would take a cheaper path.
          setupRequest: (request) => ({ ...request, body: nextBody() }),
        },
      ],
    };
    const instance = autocannon(options, (error: unknown, result) =>
      error
        ? reject(error instanceof Error ? error : new Error('autocannon failed', { cause: error }))
        : resolve(result),
    );
    if (latencies) instance.on('response', (_client, _status, _bytes, ms) => latencies.push(ms));
  });
}

function percentile(sorted: Float64Array, fraction: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(fraction * sorted.length))]!;
}

async function main(): Promise<void> {
  const started = process.cpuUsage();
  const warmup = config.warmup > 0 ? (await drive(config.warmup)).requests.total : 0;
  const latencies: number[] = [];
  const result = await drive(config.duration, latencies);
  const sorted = Float64Array.from(latencies).sort();
  const loadResult: LoadResult = {
    rps: result.requests.total / result.duration,
    rpsSampled: result.requests.average,
    p50: percentile(sorted, 0.5),
    p90: percentile(sorted, 0.9),
    p99: percentile(sorted, 0.99),
    max: sorted.length > 0 ? sorted[sorted.length - 1]! : Number.NaN,
    responses: result.requests.total,
    warmupResponses: warmup,
    non2xx: result.non2xx,
    errors: result.errors,
    timeouts: result.timeouts,
    seconds: result.duration,
    bodyBytes: Buffer.byteLength(body('PIX_22827809')),
    sent: sequence,
    cpuMicros: ((cpu) => cpu.user + cpu.system)(process.cpuUsage(started)),
  };
  process.send?.({ type: 'result', result: loadResult }, () => process.exit(0));
}

main().catch((error: unknown) => {
  console.error(`bench load: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exit(1);
});
