import { fork, type ChildProcess } from 'node:child_process';
import { Agent, request } from 'node:http';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { uniquePayload } from '../helpers/payloads.js';

const FORGED = 20_000;
const BODY_BYTES = 90 * 1024;
const CONCURRENCY = 16;
/**
 * The documented bound: maxPendingVerifications (500) times the default `limit` (100 KB) plus 64 KB (the
 * status request in flight for it), plus 16 MB. Without the bound the flood holds 20,000 bodies: 1.8 GB.
 */
const HEAP_BOUND = 500 * (100 + 64) * 1024 + 16 * 1024 * 1024;
/** Each status answer takes this long: forged ids stay pending, so the bound is reached and holds. */
const SERVICE_DELAY_MS = 3_000;

interface Counts {
  successful: number;
  rejected: number;
  errors: number;
  shed: number;
}

/** Starts test/processes/flood-app.ts and resolves its port, and a way to ask it things over IPC. */
function startApp(genuine: Record<string, unknown>) {
  const child: ChildProcess = fork(join(__dirname, '..', 'processes', 'flood-app.ts'), [], {
    execArgv: ['--expose-gc', '--import', 'tsx'],
    env: { ...process.env, FLOOD: JSON.stringify({ genuine, serviceDelayMs: SERVICE_DELAY_MS }) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const ask = <T>(question: string, type: string): Promise<T> =>
    new Promise((resolve) => {
      const listener = (message: { type: string }) => {
        if (message.type !== type) return;
        child.off('message', listener);
        resolve(message as T);
      };
      child.on('message', listener);
      child.send(question);
    });
  const ready = new Promise<number>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the flooded app exited (${code})`)));
    child.on('message', (message: { type: string; port?: number }) => {
      if (message.type === 'ready' && message.port !== undefined) resolve(message.port);
    });
  });
  return {
    child,
    ready,
    heap: async () => (await ask<{ heapUsed: number }>('heap', 'heap')).heapUsed,
    counts: async () => (await ask<{ counts: Counts; shed: number }>('counts', 'counts')).counts,
    shedMetric: async () => (await ask<{ counts: Counts; shed: number }>('counts', 'counts')).shed,
  };
}

/** POSTs `body` and resolves the status; the answer body is drained. */
function post(agent: Agent, port: number, body: Buffer): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        agent,
        host: '127.0.0.1',
        port,
        path: '/',
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': body.length },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** Polls the app until `condition` holds on its counts (a signal, not a timing assertion). */
async function untilCounts(app: ReturnType<typeof startApp>, condition: (c: Counts) => boolean) {
  for (let tries = 0; tries < 1_200; tries += 1) {
    if (condition(await app.counts())) return;
    await sleep(50);
  }
  throw new Error('the flooded app never reached the expected counts');
}

test(`a flood of ${FORGED} forged 90 KB notifications: bounded heap, a genuine one delivered once, no crash`, async () => {
  const genuine = uniquePayload();
  const app = startApp(genuine);
  const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  try {
    const port = await app.ready;
    // One body, copied with its id's digits written in: the flood costs the app, not the sender.
    const template = Buffer.from(
      JSON.stringify({
        ...genuine,
        transaction_id: 'FRG.000000',
        custom_data: 'x'.repeat(BODY_BYTES),
        amount: 1,
      }),
    );
    const at = template.indexOf('FRG.') + 4;
    const forged = (i: number): Buffer => {
      const body = Buffer.from(template);
      body.write(String(i).padStart(6, '0'), at, 'latin1');
      return body;
    };
    const genuineBody = Buffer.from(JSON.stringify(genuine));
    const statuses = new Map<number, number>();
    const before = await app.heap();
    let peak = 0;
    let next = 0;
    let genuineStatus = 0;
    const worker = async (): Promise<void> => {
      while (next < FORGED) {
        const i = next;
        next += 1;
        if (i === FORGED / 2) genuineStatus = await post(agent, port, genuineBody);
        const status = await post(agent, port, forged(i));
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
        if (i % 4_000 === 0) peak = Math.max(peak, (await app.heap()) - before);
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    peak = Math.max(peak, (await app.heap()) - before);

    expect(peak).toBeLessThan(HEAP_BOUND);
    expect([...statuses.keys()].every((status) => status === 200 || status === 503)).toBe(true);
    const counts = await app.counts();
    expect(counts.shed).toBeGreaterThan(0);
    expect(await app.shedMetric()).toBe(counts.shed);
    // No forgery is credited. The genuine copy, posted mid-flood, is shed with a 503 while the verify queue is
    // full; on a slower machine the queue may not be full yet when it arrives, and it is accepted (200).
    expect(counts.successful).toBeLessThanOrEqual(genuineStatus === 200 ? 1 : 0);

    // The service resends what was answered 503 until it gets a 200.
    while (genuineStatus !== 200) {
      const settled = (await app.counts()).rejected;
      await untilCounts(app, (c) => c.rejected > settled);
      genuineStatus = await post(agent, port, genuineBody);
    }
    await untilCounts(app, (c) => c.successful === 1);
    await sleep(200);
    expect((await app.counts()).successful).toBe(1);
    expect(app.child.exitCode).toBeNull(); // never crashed
    console.log(
      `flood: ${FORGED} forged posts, answers ${JSON.stringify(Object.fromEntries(statuses))}, ` +
        `peak heap growth ${Math.round(peak / 1024 / 1024)} MB (bound ${Math.round(HEAP_BOUND / 1024 / 1024)} MB)`,
    );
  } finally {
    agent.destroy();
    app.child.kill();
  }
}, 600_000);
