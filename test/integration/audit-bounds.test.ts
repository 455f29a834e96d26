import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { createPool, type Pool as MysqlPool } from 'mysql2/promise';
import { Pool } from 'pg';
import { listActions, recordAction } from '../../lib/delivery/audit.js';
import { MemoryStore } from '../../lib/index.js';
import { MysqlStore } from '../../lib/mysql.js';
import { PostgresStore } from '../../lib/postgres.js';
import { RedisStore } from '../../lib/redis.js';
import type { DurableStore } from '../../lib/stores/store.js';
import { databaseUrl, describeWithService, mysqlUrl, redisUrl } from '../helpers/services.js';

// The audit trail takes what an operator's tool hands it (authorize's actor, the CLI's --actor, a page
// number): every store keeps or refuses the same input the same way, and a bad page is never a store error.

function scenarios(make: () => DurableStore, ready: () => Promise<void> = async () => {}) {
  test('an actor is kept without control characters (a NUL, a terminal escape), at most 200 characters', async () => {
    await ready();
    const store = make();
    const actor = `ada\u0000\u001b[31m${'é'.repeat(300)}`;
    expect(await recordAction(store, { action: 'pause', actor, detail: { note: 'a\u0000b' } })).toBe(true);
    const [latest] = await listActions(store, { limit: 1 });
    expect(latest?.actor).toBe(`ada[31m${'é'.repeat(193)}`);
    expect(latest?.detail).toEqual({ note: 'a\u0000b' });
  });

  test('an action name is a short word: a long or empty one is the caller TypeError on every store', async () => {
    await ready();
    const store = make();
    await expect(recordAction(store, { action: 'x'.repeat(65), actor: 'ada', detail: {} })).rejects.toThrow(
      TypeError,
    );
    await expect(recordAction(store, { action: '', actor: 'ada', detail: {} })).rejects.toThrow(TypeError);
    await expect(
      recordAction(store, { action: 'pause', actor: 42 as unknown as string, detail: {} }),
    ).rejects.toThrow(/actor must be a string/);
    expect(await recordAction(store, { action: 'x'.repeat(64), actor: 'ada', detail: {} })).toBe(true);
  });

  test('a page that is no whole number (NaN, Infinity, past the integers) is bounded, never a store error', async () => {
    await ready();
    const store = make();
    expect(await recordAction(store, { action: 'resume', actor: 'ada', detail: {} })).toBe(true);
    expect(await listActions(store, { limit: NaN })).not.toHaveLength(0);
    expect(await listActions(store, { limit: 1, offset: NaN })).toHaveLength(1);
    expect(await listActions(store, { limit: Infinity, offset: 0 })).not.toHaveLength(0);
    expect(await listActions(store, { offset: Infinity })).toEqual([]);
    expect(await listActions(store, { offset: 1e21 })).toEqual([]);
  });
}

describe('MemoryStore', () => {
  scenarios(() => new MemoryStore());
});

describeWithService('PostgreSQL', 'PostgresStore', () => {
  const table = `ipn_test_auditb_${process.pid}_${randomUUID().slice(0, 6)}`;
  const pool = new Pool({ connectionString: databaseUrl(), max: 2, idleTimeoutMillis: 500 });
  pool.on('error', () => {});
  afterAll(async () => {
    await pool.query(
      `DROP TABLE IF EXISTS "${table}", "${table}_expected", "${table}_states", "${table}_audit"`,
    );
    await pool.end();
  });
  scenarios(
    () => new PostgresStore({ pool, table }),
    () => new PostgresStore({ pool, table }).migrate(),
  );
});

describeWithService('Redis', 'RedisStore', () => {
  const prefix = `ipn-kit-test:auditb:${process.pid}:${randomUUID().slice(0, 8)}:`;
  const client = new Redis(redisUrl(), { lazyConnect: true });
  client.on('error', () => {});
  afterAll(async () => {
    const keys = await client.keys(`${prefix}*`);
    if (keys.length > 0) await client.del(...keys);
    await client.quit();
  });
  scenarios(() => new RedisStore({ client, prefix }));
});

describeWithService('MariaDB', 'MysqlStore', () => {
  const table = `ipn_test_auditb_${process.pid}_${randomUUID().slice(0, 6)}`;
  let pool: MysqlPool;
  beforeAll(() => {
    pool = createPool({ uri: mysqlUrl(), connectionLimit: 2 });
  });
  afterAll(async () => {
    await pool.query(
      `DROP TABLE IF EXISTS \`${table}\`, \`${table}_expected\`, \`${table}_states\`, \`${table}_audit\``,
    );
    await pool.end();
  });
  scenarios(
    () => new MysqlStore({ pool, table }),
    () => new MysqlStore({ pool, table }).migrate(),
  );
});
