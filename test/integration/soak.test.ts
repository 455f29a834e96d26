import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Worker } from 'node:worker_threads';
import { ipnRouter, MemoryStore, type IpnRouter } from '../../lib/index.js';
import { successfulPayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { listen, settle, type Running } from '../helpers/servers.js';

/**
 * 20,000 notifications through a real server, 100 at a time over keep-alive connections: 14,000 distinct
 * (id, state) and 6,000 resends, shuffled, so that some resends arrive before their first copy and some at
 * the same moment. Nothing may be lost, nothing emitted twice, and the heap must come back near where it
 * started once the store's own keys are accounted for.
 */

jest.setTimeout(60_000);

const TRANSACTIONS = 12_000;
/** Transactions that FAILED first, then SUCCEEDED (a retry by the customer): two keys each. */
const FAILED_THEN_SUCCESSFUL = 2_000;
const DISTINCT = TRANSACTIONS + FAILED_THEN_SUCCESSFUL; // 14,000
const RESENDS = 6_000; // 30% of 20,000
const CONCURRENCY = 100;
/** A generous bound on one request: a request that needs it has hung. Not a timing assertion. */
const REQUEST_BOUND_MS = 30_000;
/** What one MemoryStore key may hold: twice the README's figure (about 14 MB per 100,000 keys). */
const BYTES_PER_STORE_KEY = 280;
/**
 * Slack for what the runtime and the test itself keep (JIT code, jest, the test's own map of keys): under
 * 2 MB of growth is seen in all, store included. Loose on purpose, yet a leak of 1 KB per request (a request
 * or a socket kept alive is several) exceeds it.
 */
const HEAP_SLACK = 8 * 1024 * 1024;

/**
 * The service's side, on a worker thread: it posts every body, `concurrency` at a time through a keep-alive
 * agent, and reports the statuses and how many answers said `duplicate`. On a thread of its own it uses the
 * other core, and its garbage stays out of the heap measured here. Plain JavaScript: a worker given code
 * runs it as it is.
 */
const SERVICE = `
const { parentPort, workerData } = require('node:worker_threads');
const { Agent, request } = require('node:http');
const { url, bodies, concurrency, boundMs } = workerData;
const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
const post = (body) =>
  new Promise((resolve, reject) => {
    const headers = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) };
    const req = request(url, { method: 'POST', agent, headers, signal: AbortSignal.timeout(boundMs) }, (res) => {
      const chunks = [];
      res.on('data', (chunk) => chunks.push(chunk));
      res.on('error', reject);
      res.on('end', () => resolve({ status: res.statusCode, text: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end(body);
  });
const statuses = {};
let duplicates = 0;
let next = 0;
const worker = async () => {
  while (next < bodies.length) {
    const { status, text } = await post(bodies[next++]);
    statuses[status] = (statuses[status] || 0) + 1;
    if (JSON.parse(text).duplicate === true) duplicates += 1;
  }
};
Promise.all(Array.from({ length: concurrency }, worker)).then(
  () => parentPort.postMessage({ statuses, duplicates }),
  (error) => parentPort.postMessage({ error: String(error && error.stack || error) }),
).finally(() => agent.destroy());
`;

interface ServiceReport {
  statuses: Record<string, number>;
  duplicates: number;
}

/** Runs the service's side on a worker thread and resolves what it saw. */
function postAll(worker: Worker): Promise<ServiceReport> {
  return new Promise((resolve, reject) => {
    worker.once('error', reject);
    worker.once('message', (message: ServiceReport | { error: string }) =>
      'error' in message ? reject(new Error(message.error)) : resolve(message),
    );
  });
}

/** A seeded generator (mulberry32), so that a failing order replays exactly. */
function seeded(seed: number): () => number {
  let t = seed >>> 0;
  return () => {
    t = (t + 0x6d2b79f5) >>> 0;
    let r = Math.imul(t ^ (t >>> 15), 1 | t);
    r = (r + Math.imul(r ^ (r >>> 7), 61 | r)) ^ r;
    return ((r ^ (r >>> 14)) >>> 0) / 4294967296;
  };
}

/** `global.gc` when node runs with --expose-gc; otherwise V8's flag set at run time, in a fresh context. */
function findGc(): { gc: () => void } | { reason: string } {
  const exposed = (globalThis as { gc?: () => void }).gc;
  if (typeof exposed === 'function') return { gc: exposed };
  try {
    setFlagsFromString('--expose-gc');
    const gc: unknown = runInNewContext('gc');
    if (typeof gc === 'function') return { gc: gc as () => void };
    return { reason: 'node runs without --expose-gc and V8 did not expose gc at run time' };
  } catch (error) {
    return { reason: `node runs without --expose-gc and exposing it failed: ${String(error)}` };
  }
}

async function heapAfterGc(gc: () => void): Promise<number> {
  for (let i = 0; i < 3; i += 1) {
    await settle();
    gc();
  }
  return process.memoryUsage().heapUsed;
}

describe('soak: 20,000 notifications, 30% of them resends, 100 at a time', () => {
  let running: Running | undefined;
  let ipn: IpnRouter | undefined;
  let service: Worker | undefined;
  afterAll(async () => {
    await service?.terminate();
    await running?.close();
    await ipn?.close();
  });

  test('every one is answered 200, each (id, state) is emitted exactly once, and the heap comes back', async () => {
    const random = seeded(20_000);
    const firsts: Array<{ id: string; state: 'SUCCESSFUL' | 'FAILED' }> = [];
    for (let n = 0; n < TRANSACTIONS; n += 1) {
      const id = `PIX_${String(n).padStart(8, '0')}`;
      if (n < FAILED_THEN_SUCCESSFUL) firsts.push({ id, state: 'FAILED' });
      firsts.push({ id, state: 'SUCCESSFUL' });
    }
    const copies = [...firsts];
    for (let n = 0; n < RESENDS; n += 1) copies.push(firsts[Math.floor(random() * firsts.length)]!);
    for (let i = copies.length - 1; i > 0; i -= 1) {
      const j = Math.floor(random() * (i + 1));
      [copies[i], copies[j]] = [copies[j]!, copies[i]!];
    }
    const bodies = copies.map(({ id, state }) =>
      JSON.stringify(successfulPayload({ transaction_id: id, state, custom_data: `order-${id}` })),
    );

    const store = new MemoryStore();
    ipn = ipnRouter({ store, logger: quiet });
    const emitted = new Map<string, number>();
    const counts = { notification: 0, successful: 0, failed: 0, duplicate: 0, invalid: 0, error: 0 };
    ipn.on('notification', (n) => {
      counts.notification += 1;
      const key = `${n.transaction_id}:${n.state}`;
      emitted.set(key, (emitted.get(key) ?? 0) + 1);
    });
    ipn.on('successful', () => void (counts.successful += 1));
    ipn.on('failed', () => void (counts.failed += 1));
    ipn.on('duplicate', () => void (counts.duplicate += 1));
    ipn.on('invalid', () => void (counts.invalid += 1));
    ipn.on('error', () => void (counts.error += 1));
    // A FAILED whose SUCCESSFUL was accepted first (copies race) is a conflict, never `failed` (issue 33).
    let conflicts = 0;
    ipn.on('conflict', ({ notification: n }) => {
      conflicts += 1;
      const key = `${n.transaction_id}:${n.state}`;
      emitted.set(key, (emitted.get(key) ?? 0) + 1);
    });
    running = await listen(ipn);

    const gcFound = findGc();
    const before = 'gc' in gcFound ? await heapAfterGc(gcFound.gc) : 0;

    service = new Worker(SERVICE, {
      eval: true,
      workerData: { url: running.url, bodies, concurrency: CONCURRENCY, boundMs: REQUEST_BOUND_MS },
    });
    const report = await postAll(service);
    await service.terminate();
    await settle();

    expect(report).toEqual({ statuses: { 200: copies.length }, duplicates: RESENDS });
    expect(counts).toEqual({
      notification: DISTINCT - conflicts,
      successful: TRANSACTIONS,
      failed: FAILED_THEN_SUCCESSFUL - conflicts,
      duplicate: RESENDS,
      invalid: 0,
      error: 0,
    });
    // Nothing lost, nothing twice: every distinct key exactly once.
    expect(emitted.size).toBe(DISTINCT);
    expect([...emitted.values()].every((times) => times === 1)).toBe(true);
    for (const { id, state } of firsts) expect(emitted.has(`${id}:${state}`)).toBe(true);
    expect(store.size).toBe(DISTINCT);
    expect(store.evictions).toBe(0);

    if (!('gc' in gcFound)) {
      console.warn(`soak: heap assertion skipped: ${gcFound.reason}`);
      return;
    }
    // The router and its store stay alive (the store's keys are expected); connections are closed.
    running.server.closeAllConnections();
    const after = await heapAfterGc(gcFound.gc);
    expect(after - before).toBeLessThan(store.size * BYTES_PER_STORE_KEY + HEAP_SLACK);
  });
});
