import request from 'supertest';
import { Pool } from 'pg';
import Redis from 'ioredis';
import { ipnRouter, MemoryStore, StoreError, type IpnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { RedisStore } from 'ipn-kit/redis';
import { exactlyOnceRouter } from '../../examples/snippets/exactly-once.js';
import { databaseUrl, describeWithService, redisUrl } from '../helpers/services.js';
import { uniquePayload } from '../helpers/payloads.js';
import { settle } from '../helpers/servers.js';
import { until } from '../helpers/until.js';

// A newcomer's first start, as the documentation's snippets that build a router over a store do it, on an
// empty database: the router is made, then `await store.migrate()` runs before listening. The first
// recovery pass runs as the router starts; it must wait for that migrate() instead of logging an ERROR
// with a stack about a missing table. The router's default logger writes its warn and error lines to
// console.error, which is watched (as is the `error` event) through the start, the first recovery pass and
// a first notification.

let printed: unknown[][] = [];
let spy: jest.SpyInstance | undefined;
beforeEach(() => {
  printed = [];
  spy = jest.spyOn(console, 'error').mockImplementation((...args: unknown[]) => void printed.push(args));
});
afterEach(() => spy?.mockRestore());

/** The `error` events of `ipn`. */
function errorsOf(ipn: IpnRouter): unknown[] {
  const errors: unknown[] = [];
  ipn.on('error', ({ error }) => void errors.push(error));
  return errors;
}

/** Records the store's `lease` calls (the recovery pass's first call), so that a test can await the first. */
function watchLeases<S extends { lease: (...args: never[]) => Promise<unknown> }>(
  store: S,
): Promise<unknown>[] {
  const leases: Promise<unknown>[] = [];
  const lease = store.lease.bind(store) as (...args: unknown[]) => Promise<unknown>;
  Reflect.set(store, 'lease', (...args: unknown[]) => {
    const pending = lease(...args);
    leases.push(pending.catch((error: unknown) => error));
    return pending;
  });
  return leases;
}

/** Waits for the first recovery pass to have leased (or failed to) and reported what it would. */
async function firstRecoveryPass(leases: Promise<unknown>[]): Promise<unknown> {
  await until(() => leases.length > 0, 'the first recovery pass');
  const outcome = await leases[0];
  await settle(); // the pass's own handlers (the report of a failure) run after the lease settles
  await settle();
  return outcome;
}

/**
 * The first lease query that answered: one sent while the migrate() ran finds no table (42P01), waits for the
 * migrate and is sent again.
 */
async function answeredLease(leases: Promise<unknown>[]): Promise<unknown> {
  for (let index = 0; ; index += 1) {
    await until(() => leases.length > index, 'a lease query');
    const outcome = await leases[index];
    if (!(outcome instanceof Error)) return outcome;
  }
}

describeWithService('PostgreSQL', 'the first start on an empty PostgreSQL schema', () => {
  const schemas: string[] = [];
  const pools: Pool[] = [];
  let admin: Pool;
  beforeAll(() => {
    admin = new Pool({ connectionString: databaseUrl(), max: 1 });
  });
  afterAll(async () => {
    for (const schema of schemas) await admin.query(`DROP SCHEMA ${schema} CASCADE`);
    await Promise.all(pools.map((pool) => pool.end()));
    await admin.end();
  });

  /** A pool of the settings of examples/snippets/postgres-store.ts, on a schema of its own, still empty. */
  async function emptySchemaPool(name: string): Promise<Pool> {
    const schema = `first_start_${name}_${process.pid}_${Date.now() % 100_000}`;
    await admin.query(`CREATE SCHEMA ${schema}`);
    schemas.push(schema);
    const pool = new Pool({
      connectionString: databaseUrl(),
      options: `-c search_path=${schema}`,
      keepAlive: true,
      query_timeout: 10_000,
      connectionTimeoutMillis: 5_000,
    });
    pool.on('error', (error) => console.error('idle PostgreSQL connection lost', error));
    pools.push(pool);
    return pool;
  }

  /** The lease queries the pool runs (the recovery pass's), whoever made the store. */
  function watchLeaseQueries(pool: Pool): Promise<unknown>[] {
    const leases: Promise<unknown>[] = [];
    const query = pool.query.bind(pool) as (...args: unknown[]) => unknown;
    Reflect.set(pool, 'query', (...args: unknown[]) => {
      const pending = query(...args);
      if (typeof args[0] === 'string' && args[0].includes('SKIP LOCKED') && pending instanceof Promise) {
        leases.push(pending.catch((error: unknown) => error));
      }
      return pending;
    });
    return leases;
  }

  test('examples/snippets/postgres-store.ts: no error line and no error event, and the table is made', async () => {
    const pool = await emptySchemaPool('pg_snippet');
    const leases = watchLeaseQueries(pool);
    // The snippet, in its order: the router over the store, then migrate() before listening.
    const store = new PostgresStore({ pool });
    const ipn = ipnRouter({ store, delivery: 'at-least-once', acknowledgeUnprotected: true });
    const errors = errorsOf(ipn);
    const delivered: string[] = [];
    ipn.on('successful', (n) => void delivered.push(n.transaction_id));
    try {
      await store.migrate();
      await firstRecoveryPass(leases);
      const leased = await answeredLease(leases);
      expect(printed).toEqual([]);
      expect(errors).toEqual([]);
      expect(leased).toMatchObject({ rows: [] });
      // The first notification goes through too, quietly.
      const payload = uniquePayload();
      await request(ipn).post('/').send(payload).expect(200);
      await until(() => delivered.length === 1, 'the first delivery');
      expect(delivered).toEqual([payload.transaction_id]);
      expect(printed).toEqual([]);
      expect(errors).toEqual([]);
    } finally {
      await ipn.close();
    }
  });

  test('examples/snippets/exactly-once.ts: a migrate() of another store on the pool is waited for too', async () => {
    const pool = await emptySchemaPool('exactly_once');
    const leases = watchLeaseQueries(pool);
    const ipn = exactlyOnceRouter(pool);
    const errors = errorsOf(ipn);
    try {
      await new PostgresStore({ pool }).migrate(); // as docs/stores-and-delivery.md says, before listening
      await firstRecoveryPass(leases);
      const leased = await answeredLease(leases);
      expect(printed).toEqual([]);
      expect(errors).toEqual([]);
      expect(leased).toMatchObject({ rows: [] });
    } finally {
      await ipn.close();
    }
  });

  test('a migrate() that starts after the first pass (after an await): one warn line saying what to do, no error', async () => {
    const pool = await emptySchemaPool('late_migrate');
    const store = new PostgresStore({ pool });
    const leases = watchLeases(store);
    const lines: Array<[string, string]> = [];
    const record =
      (level: string) =>
      (_object: unknown, message?: string): void =>
        void lines.push([level, String(message)]);
    const logger = { debug() {}, info() {}, warn: record('warn'), error: record('error') };
    const ipn = ipnRouter({
      store,
      delivery: 'at-least-once',
      logger,
      recoveryIntervalMs: 50,
      acknowledgeUnprotected: true,
    });
    const errors = errorsOf(ipn);
    const delivered: string[] = [];
    ipn.on('successful', (n) => void delivered.push(n.transaction_id));
    try {
      expect(await firstRecoveryPass(leases)).toMatchObject({ code: 'IPN_STORE_FAILED' });
      await until(() => leases.length > 1, 'a second recovery pass');
      await leases[1];
      await settle();
      expect(lines).toEqual([
        ['warn', expect.stringMatching(/table ipn_inbox does not exist: run `await store\.migrate\(\)`/)],
      ]);
      expect(errors).toEqual([]);
      await store.migrate();
      const payload = uniquePayload();
      await request(ipn).post('/').send(payload).expect(200);
      await until(() => delivered.length === 1, 'the first delivery');
      expect(lines).toHaveLength(1);
      expect(errors).toEqual([]);
    } finally {
      await ipn.close();
    }
  });

  test('once a pass has leased, a missing table is an error again (the calm line is for the start only)', async () => {
    const pool = await emptySchemaPool('dropped_later');
    const store = new PostgresStore({ pool });
    await store.migrate();
    const leases = watchLeases(store);
    const ipn = ipnRouter({
      store,
      delivery: 'at-least-once',
      recoveryIntervalMs: 50,
      acknowledgeUnprotected: true,
    });
    const errors = errorsOf(ipn);
    try {
      expect(await firstRecoveryPass(leases)).toEqual([]);
      await pool.query('DROP TABLE ipn_inbox');
      await until(() => errors.length > 0, 'the error event of a later pass');
      expect(errors[0]).toBeInstanceOf(StoreError);
      expect(errors[0]).toMatchObject({
        code: 'IPN_STORE_FAILED',
        message: expect.stringMatching(
          /failed to hand out undelivered notifications: .*does not exist/,
        ) as unknown,
        cause: expect.objectContaining({ code: '42P01' }) as unknown,
      });
      // An error event, not the calm line (its ERROR line goes to debug: the app listens for errors).
      expect(printed.join('\n')).not.toMatch(/recovery starts once it exists/);
    } finally {
      await ipn.close();
    }
  });

  test('a migrate() held up behind another instance (its lock held) holds up no notification on a table that exists', async () => {
    // Every instance runs migrate() on its start, and its CREATE INDEX IF NOT EXISTS waits for the writes
    // of the moment: one instance's migrate() waiting must not make the store's queries wait too.
    const pool = await emptySchemaPool('held_up');
    const store = new PostgresStore({ pool });
    await store.migrate(); // made long ago
    const other = await pool.connect(); // another instance, migrating: it holds the migration's lock
    await other.query('BEGIN');
    await other.query(`SELECT pg_advisory_xact_lock(${0x69706e6b}, hashtext('"ipn_inbox"'))`);
    const migrating = store.migrate(); // this instance's start: it waits for the lock
    const ipn = ipnRouter({
      store,
      delivery: 'at-least-once',
      storeTimeoutMs: 2_000,
      acknowledgeUnprotected: true,
    });
    const delivered: string[] = [];
    ipn.on('successful', (n) => void delivered.push(n.transaction_id));
    try {
      const payload = uniquePayload();
      await request(ipn).post('/').send(payload).expect(200);
      await until(() => delivered.length === 1, 'the delivery');
      const id = String(payload.transaction_id);
      const entry = await store.get(`${id}:SUCCESSFUL`); // a read, answered too
      expect(entry?.transactionId).toBe(id);
    } finally {
      await other.query('COMMIT');
      other.release();
      await migrating;
      await ipn.close();
    }
  });

  test('a store whose table was never made still says what to do (the check this waits on is not lost)', async () => {
    const pool = await emptySchemaPool('never_migrated');
    const store = new PostgresStore({ pool });
    await expect(store.lease({ id: 'lease-1', ms: 1000 }, 1)).rejects.toMatchObject({
      name: 'StoreError',
      code: 'IPN_STORE_FAILED',
      message: expect.stringMatching(/does not exist: run `await store.migrate\(\)`/) as unknown,
      cause: expect.objectContaining({ code: '42P01' }) as unknown,
    });
  });
});

describeWithService('Redis', 'the first start on an empty Redis prefix', () => {
  let redis: Redis;
  beforeAll(() => {
    redis = new Redis(redisUrl());
  });
  afterAll(() => redis.disconnect());

  test.each([['at-most-once' as const], ['at-least-once' as const]])(
    'examples/snippets/redis-store.ts (%s): no error line and no error event',
    async (delivery) => {
      const prefix = `ipn-kit-test:first-start:${process.pid}:${delivery}:${Date.now()}:`;
      const store = new RedisStore({ client: redis, prefix });
      const leases = watchLeases(store);
      const ipn = ipnRouter({ store, delivery, acknowledgeUnprotected: true });
      const errors = errorsOf(ipn);
      const delivered: string[] = [];
      ipn.on('successful', (n) => void delivered.push(n.transaction_id));
      try {
        if (delivery === 'at-least-once') expect(await firstRecoveryPass(leases)).toEqual([]);
        const payload = uniquePayload();
        await request(ipn).post('/').send(payload).expect(200);
        await until(() => delivered.length === 1, 'the first delivery');
        // The one warning this Redis earns (it keeps nothing on disk: --save "" --appendonly no) is not an error.
        const persistence = (line: unknown[]) => String(line[0]).includes('a Redis without persistence');
        expect(printed.filter((line) => !persistence(line))).toEqual([]);
        expect(errors).toEqual([]);
      } finally {
        await ipn.close();
        const keys = await redis.keys(`${prefix}*`);
        if (keys.length > 0) await redis.del(...keys);
      }
    },
  );
});

test.each([['at-most-once' as const], ['at-least-once' as const]])(
  'MemoryStore (%s): no error line and no error event on the first start',
  async (delivery) => {
    const store = new MemoryStore();
    const leases = watchLeases(store);
    const ipn = ipnRouter({ store, delivery, acknowledgeUnprotected: true });
    const errors = errorsOf(ipn);
    const delivered: string[] = [];
    ipn.on('successful', (n) => void delivered.push(n.transaction_id));
    try {
      if (delivery === 'at-least-once') expect(await firstRecoveryPass(leases)).toEqual([]);
      await request(ipn).post('/').send(uniquePayload()).expect(200);
      await until(() => delivered.length === 1, 'the first delivery');
      expect(printed).toEqual([]);
      expect(errors).toEqual([]);
    } finally {
      await ipn.close();
    }
  },
);
