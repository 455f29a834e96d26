import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { createPool, type Pool as MysqlPool } from 'mysql2/promise';
import { MysqlStore } from '../../lib/mysql.js';
import { RedisStore } from '../../lib/redis.js';
import { SqliteStore } from '../../lib/sqlite.js';
import type { DurableStore } from '../../lib/stores/store.js';
import { retentionPass } from '../../lib/delivery/retention.js';
import { describeWithService, mysqlUrl, redisUrl } from '../helpers/services.js';
import { suiteSqliteFile } from '../helpers/sqlite-file.js';

// Retention must never blank what is still to deliver. The stores that blank in JavaScript (Redis, MySQL,
// SQLite) read the candidates (delivered and dead entries) first, then write each one "only if unchanged":
// an operator's replay between the two makes a dead entry `received` again, and its record must then stay
// whole (its delivery, and every retry of it, read that record).

const HOUR = 3_600_000;
const customer = { customer_name: 'Ada Lovelace', destination: '0700000000', amount: 2500 };

/** A dead entry of a fresh key, received now. */
async function deadEntry(store: DurableStore): Promise<string> {
  const id = `RACE.${randomUUID().slice(0, 8)}`;
  const key = `${id}:SUCCESSFUL`;
  const lease = { id: randomUUID(), ms: 60_000 };
  expect(await store.receive(key, { transaction_id: id, state: 'SUCCESSFUL', ...customer }, lease)).toBe(
    true,
  );
  expect(await store.settle(key, lease.id, { status: 'dead', error: 'ledger down' })).toBe(true);
  return key;
}

/**
 * The race, made to happen: `hooked` is the store whose write of a blanked record is preceded by `plain`'s
 * replay of `key` (an operator, on another instance). The replayed entry keeps the customer's data.
 */
async function replayDuringRedact(
  hooked: DurableStore,
  plain: DurableStore,
  arm: (before: () => Promise<void>, key: string) => void,
): Promise<void> {
  const key = await deadEntry(plain);
  arm(async () => {
    expect(await plain.replay(key)).toBe(true);
  }, key);
  await hooked.redact!(new Date(Date.now() + HOUR));
  const entry = await plain.get(key);
  expect(entry?.status).toBe('received');
  expect(entry?.record).toMatchObject(customer);
}

/**
 * An age past what a date can say (`Number.MAX_SAFE_INTEGER`, "for ever") deletes nothing, and the rest of
 * the pass (the blanking of the customer's data) still runs.
 */
async function foreverScenario(store: DurableStore): Promise<void> {
  const key = await deadEntry(store);
  const forever = Number.MAX_SAFE_INTEGER;
  const later = Date.now() + 1_000;
  const pass = await retentionPass(store, forever, { deadMs: forever, personalDataMs: 1 }, later);
  expect(pass).toMatchObject({ delivered: 0, dead: 0 });
  expect(pass.redacted).toBeGreaterThanOrEqual(1);
  expect((await store.get(key))?.record).toMatchObject({ customer_name: '', destination: '', amount: 2500 });
  await retentionPass(store, forever, { deadMs: 1, personalDataMs: forever }, later);
  expect(await store.get(key)).toBeUndefined();
}

describeWithService('Redis', 'RedisStore', () => {
  const prefix = `ipn-kit-test:retrace:${process.pid}:${randomUUID().slice(0, 8)}:`;
  const client = new Redis(redisUrl(), { lazyConnect: true });
  client.on('error', () => {});
  afterAll(async () => {
    const keys = await client.keys(`${prefix}*`);
    if (keys.length > 0) await client.del(...keys);
    await client.quit();
  });

  test('redact() never blanks an entry replayed between its read and its write', async () => {
    let before: (() => Promise<void>) | undefined;
    // The client the hooked store sends through: a script call carrying a blanked record (the write of
    // redact) first lets the replay through.
    const hookedClient = new Proxy(client, {
      get(target, property, receiver) {
        if (property !== 'call') return Reflect.get(target, property, receiver) as unknown;
        return async (...args: string[]) => {
          const run = before;
          if (run && args.some((arg) => arg.includes('"destination":""'))) {
            before = undefined;
            await run();
          }
          return target.call(...(args as [string, ...string[]]));
        };
      },
    });
    await replayDuringRedact(
      new RedisStore({ client: hookedClient, prefix }),
      new RedisStore({ client, prefix }),
      (hook) => void (before = hook),
    );
  });

  test('retention ages past the date range ("for ever") delete nothing and block nothing', async () => {
    await foreverScenario(new RedisStore({ client, prefix }));
  });
});

describeWithService('MariaDB', 'MysqlStore', () => {
  const table = `ipn_test_retrace_${process.pid}_${randomUUID().slice(0, 6)}`;
  let pool: MysqlPool;
  beforeAll(async () => {
    pool = createPool({ uri: mysqlUrl(), connectionLimit: 4 });
    await new MysqlStore({ pool, table }).migrate();
  });
  afterAll(async () => {
    await pool.query(
      `DROP TABLE IF EXISTS \`${table}\`, \`${table}_expected\`, \`${table}_states\`, \`${table}_audit\``,
    );
    await pool.end();
  });

  test('redact() never blanks an entry replayed between its read and its write', async () => {
    let before: (() => Promise<void>) | undefined;
    const hookedPool = new Proxy(pool, {
      get(target, property, receiver) {
        if (property !== 'query') return Reflect.get(target, property, receiver) as unknown;
        return async (text: string, values: unknown[]) => {
          const run = before;
          if (run && typeof text === 'string' && /SET record = \?/.test(text)) {
            before = undefined;
            await run();
          }
          return target.query(text, values);
        };
      },
    });
    await replayDuringRedact(
      new MysqlStore({ pool: hookedPool, table }),
      new MysqlStore({ pool, table }),
      (hook) => void (before = hook),
    );
  });

  test('retention ages past the date range ("for ever") delete nothing and block nothing', async () => {
    await foreverScenario(new MysqlStore({ pool, table }));
  });
});

describe('SqliteStore', () => {
  const database = suiteSqliteFile('ipn-kit-retrace-');

  test('redact() never blanks an entry replayed between its read and its write', async () => {
    const plain = new SqliteStore({ database });
    await plain.migrate();
    let replayed: string | undefined;
    // SQLite's statements are synchronous: the replay (another process on the file) is its SQL, run just
    // before redact's write is prepared.
    const hooked = new Proxy(database, {
      get(target, property) {
        const value: unknown = Reflect.get(target, property, target);
        if (property !== 'prepare')
          return typeof value === 'function' ? (value as () => unknown).bind(target) : value;
        return (text: string) => {
          if (replayed !== undefined && /SET record = \?/.test(text)) {
            target
              .prepare(`UPDATE ipn_inbox SET status = 'received', attempts = 0 WHERE key = ?`)
              .run(replayed);
            replayed = undefined;
          }
          return target.prepare(text);
        };
      },
    });
    await replayDuringRedact(new SqliteStore({ database: hooked }), plain, (_, key) => void (replayed = key));
  });
});
