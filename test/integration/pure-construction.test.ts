import nodeCrypto from 'node:crypto';
import timersPromises from 'node:timers/promises';
import { Redis } from 'ioredis';
import { Pool } from 'pg';
import { adminFetchHandler, adminRouter } from '../../lib/admin.js';
import { createStatusClient, ipnRouter, MemoryStore, type IpnRouter, type Store } from '../../lib/index.js';
import { PostgresStore } from '../../lib/postgres.js';
import { RedisStore, redisGuard } from '../../lib/redis.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { until } from '../helpers/until.js';

// Cloudflare Workers evaluates the module, where partners build the router, outside any request: there,
// asynchronous I/O, timers and random values throw ("Disallowed operation called within global scope").
// So building any documented object must use none of them; ids and timers are made on first use.

type Spied = [object, string];
/** What construction must not call: randomness, timers, the network (every spelling a module may reach). */
const FORBIDDEN: Spied[] = [
  [nodeCrypto, 'randomUUID'],
  [nodeCrypto, 'randomBytes'],
  [nodeCrypto, 'randomInt'],
  [nodeCrypto, 'randomFillSync'],
  // node:crypto's own getRandomValues is a fixed getter (not patchable) over Web Crypto's, patched below.
  [globalThis.crypto, 'randomUUID'],
  [globalThis.crypto, 'getRandomValues'],
  [Math, 'random'],
  [globalThis, 'setTimeout'],
  [globalThis, 'setInterval'],
  [globalThis, 'fetch'],
  [timersPromises, 'setTimeout'],
  [timersPromises, 'setInterval'],
];

/** Replaces every forbidden call by one that throws and is recorded; `restore` puts them back. */
function forbid() {
  const called: string[] = [];
  const spies = FORBIDDEN.map(([owner, name]) =>
    jest.spyOn(owner as Record<string, () => unknown>, name).mockImplementation(() => {
      called.push(name);
      throw new Error(`${name} is not allowed within global scope`);
    }),
  );
  return { called, restore: () => spies.forEach((spy) => spy.mockRestore()) };
}

/** Runs `build` (synchronous, as a module's evaluation is) with the forbidden calls throwing. */
function inGlobalScope<T>(build: () => T): { built: T; called: string[] } {
  const { called, restore } = forbid();
  try {
    return { built: build(), called };
  } finally {
    restore();
  }
}

// The users' own clients, made before: ipn-kit takes them, and must not use them while it is built.
const pool = new Pool({ connectionString: 'postgres://nobody@127.0.0.1:1/none' });
// Nothing listens on port 1: the recovery that starts after construction fails at once (quietly), and
// neither client retries, so no handle outlives the test.
const redis = new Redis({ lazyConnect: true, port: 1, retryStrategy: () => null, maxRetriesPerRequest: 0 });
afterAll(async () => {
  await pool.end();
  redis.disconnect();
});

const stores = (): Record<string, Store> => ({
  MemoryStore: new MemoryStore(),
  RedisStore: new RedisStore({ client: redis }),
  PostgresStore: new PostgresStore({ pool }),
});

/** Every documented object: the stores, the status client and its guards, routers of every kind, the admin. */
function buildEverything() {
  const built: unknown[] = [];
  const shared = redisGuard({ client: redis });
  const statusClient = createStatusClient({
    baseUrl: 'https://status.example',
    apiKey: 'k'.repeat(24),
    shared,
  });
  built.push(
    shared,
    statusClient,
    createStatusClient({ baseUrl: 'https://status.example', apiKey: 'k'.repeat(24) }),
  );
  for (const store of Object.values(stores())) {
    for (const delivery of ['at-most-once', 'at-least-once'] as const) {
      built.push(ipnRouter({ store, delivery, logger: quiet }));
      const ipn = ipnRouter({ store, delivery, verify: statusClient, statusClient, logger: quiet });
      built.push(ipn);
      built.push(
        adminRouter({ ipn, authorize: () => true }),
        adminFetchHandler({ ipn, authorize: () => true }),
      );
    }
  }
  return built;
}

test('building every documented object calls no random source, no timer and no fetch', async () => {
  const { built, called } = inGlobalScope(buildEverything);
  expect(called).toEqual([]);
  expect(built).toHaveLength(3 + 3 * 2 * 4);
  const routers = built.filter((object) => typeof object === 'function' && 'drain' in object) as IpnRouter[];
  expect(routers).toHaveLength(3 * 2 * 2);
  await Promise.all(routers.map((router) => router.close()));
});

/** A store holding an entry a crashed process left, its lease run out: due for recovery. */
async function crashedEntry() {
  let now = Date.now();
  const store = new MemoryStore({ now: () => now });
  const payment = uniquePayload();
  const key = `${String(payment.transaction_id)}:SUCCESSFUL`;
  await store.receive(key, payment, { id: 'crashed', ms: 1_000 });
  now += 2_000;
  return { store, key };
}

test('a router built in that context works after: a crashed entry is recovered by its timer, with no request, and a request is answered', async () => {
  const { store, key } = await crashedEntry();
  const { built: ipn, called } = inGlobalScope(() =>
    ipnRouter({ store, delivery: 'at-least-once', logger: quiet, recoveryIntervalMs: 3_600_000 }),
  );
  expect(called).toEqual([]);
  const delivered: string[] = [];
  ipn.on('successful', (n) => void delivered.push(n.transaction_id));
  // Outside Workers the timers start right after the synchronous code that built the router: no request.
  await until(() => delivered.length === 1, 'the recovery at start');
  expect((await store.get(key))?.status).toBe('delivered');
  const response = await ipn.fetch(
    new Request('http://app.example/ipn', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(uniquePayload()),
    }),
  );
  expect(response.status).toBe(200);
  await until(() => delivered.length === 2, 'the request delivered');
  await ipn.close();
});

test('where timers throw in the microtask too (a runtime not recognised as Workers), the first use still starts the sweep', async () => {
  const queried: string[] = [];
  const statusClient = {
    getStatus: (id: string) => {
      queried.push(id);
      return Promise.reject(new Error('the status service is down'));
    },
  };
  const { called, restore } = forbid();
  let ipn: IpnRouter;
  try {
    ipn = ipnRouter({
      store: new MemoryStore(),
      statusClient,
      sweepIntervalMs: 20,
      reconcileAfterMs: 1,
      logger: quiet,
    });
    ipn.on('successful', () => {});
    await new Promise((resolve) => setImmediate(resolve)); // the microtask ran, its timers refused
  } finally {
    restore();
  }
  expect(called).toContain('setInterval');
  const id = String(uniquePayload().transaction_id);
  await ipn.expect(id); // a first use: the sweep starts now
  await until(() => queried.includes(id), 'the sweep started by the first use');
  await ipn.close();
});

describe('on Cloudflare Workers (navigator.userAgent)', () => {
  const had = Object.getOwnPropertyDescriptor(globalThis, 'navigator');
  beforeAll(() => {
    Object.defineProperty(globalThis, 'navigator', {
      value: { userAgent: 'Cloudflare-Workers' },
      configurable: true,
    });
  });
  afterAll(() => {
    if (had) Object.defineProperty(globalThis, 'navigator', had);
    else Reflect.deleteProperty(globalThis, 'navigator');
  });

  test('no timer starts from the microtask either (it still runs at global scope): the first request starts them', async () => {
    const { store, key } = await crashedEntry();
    const delivered: string[] = [];
    // Global scope lasts past the microtasks queued during it: here, up to the next turn of the event loop.
    const { called, restore } = forbid();
    let ipn: IpnRouter;
    try {
      ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet, recoveryIntervalMs: 3_600_000 });
      ipn.on('successful', (n) => void delivered.push(n.transaction_id));
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      restore();
    }
    expect(called).toEqual([]);
    expect(delivered).toEqual([]);
    expect((await store.get(key))?.status).toBe('received');
    // The first request (a health check will do) is a first use: recovery starts, and takes the entry up.
    expect((await ipn.fetch(new Request('http://app.example/ipn'))).status).toBe(200);
    await until(() => delivered.length === 1, 'the recovery started by the first request');
    expect((await store.get(key))?.status).toBe('delivered');
    await ipn.close();
  });
});
