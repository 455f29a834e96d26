import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { ipnRouter, MemoryStore, type Options } from '../../lib/index.js';
import { PostgresStore } from '../../lib/postgres.js';
import { RedisStore } from '../../lib/redis.js';
import type { DurableStore } from '../../lib/stores/store.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';
import { databaseUrl, describeWithService, eventually, redisUrl } from '../helpers/services.js';

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

function scenarios(fresh: () => Promise<DurableStore> | DurableStore) {
  async function start(options: Partial<Options> = {}) {
    const store = await fresh();
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

  test("a retry due while a drain's batch runs is taken up once that batch ends (not after recoveryIntervalMs)", async () => {
    const { ipn, store, post } = await start();
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
}

describe('MemoryStore', () => {
  scenarios(() => new MemoryStore());
});

describeWithService('PostgreSQL', 'PostgresStore', () => {
  const pool = new Pool({ connectionString: databaseUrl(), max: 4, idleTimeoutMillis: 500 });
  pool.on('error', () => {});
  const tables: string[] = [];
  afterAll(async () => {
    for (const table of tables)
      await pool.query(
        `DROP TABLE IF EXISTS "${table}", "${table}_expected", "${table}_states", "${table}_audit"`,
      );
    await pool.end();
  });
  scenarios(async () => {
    const table = `ipn_wakeups_${process.pid}_${tables.length}`;
    tables.push(table);
    const store = new PostgresStore({ pool, table });
    await store.migrate();
    return store;
  });
});

describeWithService('Redis', 'RedisStore', () => {
  const client = new Redis(redisUrl());
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
