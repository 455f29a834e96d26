import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { ipnRouter, MemoryStore, type Options } from '../../lib/index.js';
import { PostgresStore } from '../../lib/postgres.js';
import { RedisStore } from '../../lib/redis.js';
import type { DurableStore, InboxEntry } from '../../lib/stores/store.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';
import { databaseUrl, describeWithService, eventually, redisUrl } from '../helpers/services.js';
import { CLEANUP_TIMEOUT_MS, dropPostgresInboxes } from '../helpers/drop-inboxes.js';

/**
 * Recovery's wake-ups and pause: a retry's wake-up that comes while a batch is running (the timers' or a
 * drain's) is never dropped, and pause/resume neither deliver while paused nor leave anything behind. The
 * recovery interval is ten minutes here: only a wake-up can deliver what these tests wait for.
 */

jest.setTimeout(30_000);
const serve = servedRouters();
const keyOf = (payload: Record<string, unknown>) =>
  `${String(payload.transaction_id)}:${String(payload.state)}`;
const TEN_MINUTES = 600_000;

/** A promise and its resolver. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

/**
 * An at-least-once router on `store`, served, retrying after 5 ms and taking up due entries only every ten
 * minutes: what it delivers later, a wake-up delivered.
 */
async function start<S extends DurableStore>(store: S, options: Partial<Options> = {}) {
  const ipn = ipnRouter({
    store,
    delivery: 'at-least-once',
    logger: quiet,
    retryDelayMs: 5,
    recoveryIntervalMs: TEN_MINUTES,
    ...options,
  });
  const { post } = await serve(ipn);
  return { ipn, store, post };
}

function scenarios(fresh: () => Promise<DurableStore> | DurableStore) {
  test("a retry due while a drain's batch runs is taken up once that batch ends (not after recoveryIntervalMs)", async () => {
    const { ipn, store, post } = await start(await fresh());
    const held = gate();
    let entered = false;
    const failedOnce = new Set<string>();
    const credited: string[] = [];
    ipn.on('successful', async (n) => {
      if (n.custom_data === 'held') {
        entered = true;
        await held.opened;
      } else if (!failedOnce.has(n.transaction_id)) {
        failedOnce.add(n.transaction_id);
        throw new Error('ledger busy');
      }
      credited.push(n.transaction_id);
    });
    // The router's first use starts its timers; their first pass finds nothing, and the drain waits for it.
    const warm = uniquePayload({ custom_data: 'warm' });
    expect((await post(warm)).status).toBe(200);
    await eventually('warm delivered', async () => (await store.get(keyOf(warm)))?.status === 'delivered');
    await ipn.drain();

    // An entry due that no wake-up announced (left by another instance whose lease ran out).
    const left = uniquePayload({ custom_data: 'held' });
    const lease = { id: randomUUID(), ms: 1 };
    expect(await store.receive(keyOf(left), { ...left }, lease)).toBe(true);
    await eventually('its lease ran out', async () => {
      const entry = await store.get(keyOf(left));
      return entry?.leaseUntil !== null && entry!.leaseUntil.getTime() < Date.now() - 20;
    });
    const draining = ipn.drain();
    await eventually('the drain delivers it, held', () => entered);

    // Meanwhile a notification fails once: its retry's wake-up comes while the drain's batch runs.
    const retried = uniquePayload({ custom_data: 'retried' });
    expect((await post(retried)).status).toBe(200);
    await eventually(
      'its first attempt failed',
      async () => (await store.get(keyOf(retried)))?.status === 'failed',
    );
    const failedAt = Date.now();
    await eventually('its wake-up came', () => Date.now() > failedAt + 100);

    held.open();
    await draining;
    await eventually(
      'the retry delivered',
      async () => (await store.get(keyOf(retried)))?.status === 'delivered',
      5_000,
    );
    expect(credited).toContain(String(retried.transaction_id));
  });

  test('resume() while a notification is being put back: delivered once, never made due again after', async () => {
    const plain = await fresh();
    const { hooked, open, entered, done, nextLease } = heldReplay(plain);
    const ipn = ipnRouter({
      store: hooked,
      delivery: 'at-least-once',
      logger: quiet,
      retryDelayMs: 5,
      recoveryIntervalMs: TEN_MINUTES,
    });
    const credited: string[] = [];
    ipn.on('successful', (n) => void credited.push(n.transaction_id));
    const { post } = await serve(ipn);
    await ipn.pause();
    const a = uniquePayload();
    expect((await post(a)).status).toBe(200);
    await entered; // being put back in the inbox
    const leased = nextLease();
    await ipn.resume(); // its recovery pass: when it takes the entry up, the put-back lands after the delivery
    if ((await leased).includes(keyOf(a)))
      await eventually('a delivered', async () => (await plain.get(keyOf(a)))?.status === 'delivered');
    open();
    await done;
    await eventually('a delivered', async () => (await plain.get(keyOf(a)))?.status === 'delivered', 5_000);
    await ipn.drain(); // a replay landing after the delivery would have made it due again: taken up here
    expect((await plain.get(keyOf(a)))?.status).toBe('delivered');
    expect(credited).toEqual([String(a.transaction_id)]);
  });

  test("pause, then close(): the pause is the store's: another instance and the next router hold too; resume() on one delivers what was stored, once", async () => {
    const store = await fresh();
    const make = () =>
      ipnRouter({ store, delivery: 'at-least-once', logger: quiet, retryDelayMs: 5, recoveryIntervalMs: 50 });
    const credited: string[] = [];
    const paused = make();
    paused.on('successful', (n) => void credited.push(`paused:${n.transaction_id}`));
    const { post } = await serve(paused);
    await paused.pause();
    const [a, b] = [uniquePayload(), uniquePayload()];
    expect((await post(a)).status).toBe(200);
    await eventually('a put back', async () => (await store.get(keyOf(a)))?.leaseUntil === null);
    // Another instance over the store holds too: what it stores waits as well.
    const other = make();
    other.on('successful', (n) => void credited.push(`other:${n.transaction_id}`));
    const second = await serve(other);
    expect((await second.post(b)).status).toBe(200);
    await eventually('b put back by the other', async () => {
      const entry = await store.get(keyOf(b));
      return entry?.leaseUntil === null && (entry.lastError ?? '').startsWith('delivery paused');
    });
    expect(other.inbox.isPaused()).toBe(true);
    await other.close();
    await paused.close();

    // A restart stays paused: the next router reads the store's flag at its first recovery pass.
    const next = make();
    next.on('successful', (n) => void credited.push(`next:${n.transaction_id}`));
    const third = await serve(next);
    expect((await third.post(uniquePayload())).status).toBe(200); // its first use starts its recovery
    await eventually('the next router paused', () => next.inbox.isPaused());
    expect(credited).toEqual([]);
    await next.resume();
    await eventually('a and b delivered by the next', async () =>
      (await Promise.all([a, b].map(async (p) => (await store.get(keyOf(p)))?.status))).every(
        (status) => status === 'delivered',
      ),
    );
    const ids = [a, b].map((p) => String(p.transaction_id));
    expect(credited.filter((c) => ids.some((id) => c.endsWith(id))).sort()).toEqual(
      ids.map((id) => `next:${id}`).sort(),
    );
  });
}

/**
 * `store` with its `replay` held (each call enters, then waits for `open()`): `entered` resolves at the first
 * call, `done` once that call has landed. `nextLease()` resolves the keys of the next `lease()` that answers.
 */
function heldReplay(store: DurableStore) {
  const held = gate();
  const entered = gate();
  const done = gate();
  let leased: ((keys: string[]) => void) | undefined;
  const hooked = new Proxy(store, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== 'function') return value;
      const call = (...args: unknown[]) => (value as (...a: unknown[]) => unknown).apply(target, args);
      if (property === 'lease') {
        return async (...args: unknown[]) => {
          const entries = (await call(...args)) as InboxEntry[];
          leased?.(entries.map((entry) => entry.key));
          return entries;
        };
      }
      if (property !== 'replay') return call;
      return async (...args: unknown[]) => {
        entered.open();
        await held.opened;
        try {
          return (await call(...args)) as boolean;
        } finally {
          done.open();
        }
      };
    },
  });
  const nextLease = () => new Promise<string[]>((resolve) => (leased = resolve));
  return { hooked, open: held.open, entered: entered.opened, done: done.opened, nextLease };
}

describe('MemoryStore', () => {
  scenarios(() => new MemoryStore());
});

describe("a retry's wake-up that comes before its entry is due by the store's clock", () => {
  // The wake-up's timer may fire up to an event-loop turn early, and PostgreSQL, MySQL and Redis judge the
  // retry's time by their own clock, which may be behind the app's: the pass it starts finds nothing due.
  test.each([
    ['the store clock 400 ms behind', 400],
    ['the store clock 3 s behind', 3_000],
  ])('the retry is still delivered long before recoveryIntervalMs (%s)', async (_, behindMs) => {
    const { ipn, store, post } = await start(new MemoryStore({ now: () => Date.now() - behindMs }));
    const credited: string[] = [];
    let failures = 0;
    ipn.on('successful', (n) => {
      if (failures === 0) {
        failures += 1;
        throw new Error('ledger busy');
      }
      credited.push(n.transaction_id);
    });
    const payment = uniquePayload();
    expect((await post(payment)).status).toBe(200);
    await eventually(
      'the retry delivered',
      async () => (await store.get(keyOf(payment)))?.status === 'delivered',
    );
    expect(credited).toEqual([String(payment.transaction_id)]);
    expect((await store.get(keyOf(payment)))?.attempts).toBe(2);
  });
});

describeWithService('PostgreSQL', 'PostgresStore', () => {
  const pool = new Pool({ connectionString: databaseUrl(), max: 4, idleTimeoutMillis: 500 });
  pool.on('error', () => {});
  const tables: string[] = [];
  afterAll(async () => {
    await dropPostgresInboxes(pool, tables);
    await pool.end();
  }, CLEANUP_TIMEOUT_MS);
  scenarios(async () => {
    const table = `ipn_wakeups_${process.pid}_${tables.length}`;
    tables.push(table);
    const store = new PostgresStore({ pool, table });
    await store.migrate();
    return store;
  });
});

describeWithService('Redis', 'RedisStore', () => {
  const client = new Redis(redisUrl(), { lazyConnect: true });
  client.on('error', () => {});
  const prefixes: string[] = [];
  afterAll(async () => {
    for (const prefix of prefixes) {
      const keys = await client.keys(`${prefix}*`);
      if (keys.length > 0) await client.del(...keys);
    }
    client.disconnect();
  });
  scenarios(() => {
    const prefix = `ipn-kit-test:wakeups:${process.pid}:${prefixes.length}:`;
    prefixes.push(prefix);
    return new RedisStore({ client, prefix });
  });
});
