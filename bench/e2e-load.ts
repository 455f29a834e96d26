/**
 * The end-to-end load generator (bench/e2e.ts), in a process of its own: sends `count` notifications, each
 * with a transaction id of its own, with `concurrency` requests in flight, as the payment service does when
 * it sends and resends (several at a time, each until it gets a 2xx). Run as `node --import tsx
 * bench/e2e-load.ts` with BENCH_E2E_LOAD (an `EndToEndLoadConfig`, as JSON). Sends `{ type: 'ready' }`,
 * starts on the message `'go'`, and sends `{ type: 'result', result }` (an `EndToEndLoadResult`) once every
 * notification got a 2xx.
 */
import { Agent, request } from 'node:http';
import { bodyFor } from './payload.js';

export interface EndToEndLoadConfig {
  url: string;
  /** Notifications to send, ids `${idPrefix}1` to `${idPrefix}${count}`. */
  count: number;
  /** Requests in flight at once, each on a kept-alive connection of its own. */
  concurrency: number;
  idPrefix: string;
}

export interface EndToEndLoadResult {
  /** Notifications answered with a 2xx (each once): `count` when the load completed. */
  accepted: number;
  /** Requests sent again after a non-2xx answer or a failed request, as the service resends. */
  resends: number;
  /** Seconds from 'go' to the last 2xx. */
  seconds: number;
  /** Response times of the accepted requests, in milliseconds. */
  p50: number;
  p99: number;
  bodyBytes: number;
  /** CPU time (user and system) this process spent from 'go' to the last 2xx, in microseconds. */
  cpuMicros: number;
}

const config = JSON.parse(process.env.BENCH_E2E_LOAD ?? '{}') as EndToEndLoadConfig;
const body = bodyFor();
const target = new URL(config.url);
const agent = new Agent({ keepAlive: true, maxSockets: config.concurrency });

/** One POST: its status, or 0 when the request failed (a reset connection). */
function post(payload: string): Promise<number> {
  return new Promise((resolve) => {
    const req = request(
      {
        agent,
        host: target.hostname,
        port: target.port,
        path: target.pathname,
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
      },
      (res) => {
        res.resume();
        res.once('end', () => resolve(res.statusCode ?? 0));
        res.once('error', () => resolve(0));
      },
    );
    req.once('error', () => resolve(0));
    req.end(payload);
  });
}

const pause = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function drive(): Promise<EndToEndLoadResult> {
  const started = process.cpuUsage();
  const start = performance.now();
  const latencies: number[] = [];
  let next = 0;
  let resends = 0;
  const sender = async (): Promise<void> => {
    while (next < config.count) {
      next += 1;
      const payload = body(`${config.idPrefix}${next}`);
      for (;;) {
        const sent = performance.now();
        const status = await post(payload);
        if (status >= 200 && status < 300) {
          latencies.push(performance.now() - sent);
          break;
        }
        // The service resends what was not acknowledged; a short pause here, minutes there.
        if (resends === 0) {
          console.error(
            `bench e2e load: ${status === 0 ? 'a request failed' : `a ${status} answer`}; resending`,
          );
        }
        resends += 1;
        await pause(50);
      }
    }
  };
  await Promise.all(Array.from({ length: config.concurrency }, sender));
  const seconds = (performance.now() - start) / 1000;
  const cpu = process.cpuUsage(started);
  const sorted = Float64Array.from(latencies).sort();
  const at = (fraction: number): number =>
    sorted[Math.min(sorted.length - 1, Math.floor(fraction * sorted.length))]!;
  return {
    accepted: latencies.length,
    resends,
    seconds,
    p50: at(0.5),
    p99: at(0.99),
    bodyBytes: Buffer.byteLength(body('PIX_22827809')),
    cpuMicros: cpu.user + cpu.system,
  };
}

process.on('disconnect', () => process.exit(1));
process.on('message', (message) => {
  if (message !== 'go') return;
  drive().then(
    (result) => process.send?.({ type: 'result', result }, () => process.exit(0)),
    (error: unknown) => {
      console.error(
        `bench e2e load: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`,
      );
      process.exit(1);
    },
  );
});
process.send?.({ type: 'ready' });
