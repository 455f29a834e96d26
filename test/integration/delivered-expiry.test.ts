import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { createPool, type Pool as MysqlPool } from 'mysql2/promise';
import { MemoryStore, type DurableStore } from '../../lib/index.js';
import { MysqlStore } from '../../lib/mysql.js';
import { PostgresStore } from '../../lib/postgres.js';
import { RedisStore } from '../../lib/redis.js';
import { SqliteStore } from '../../lib/sqlite.js';
import { uniquePayload } from '../helpers/payloads.js';
import { postTo, refusingRouter } from '../helpers/refusing-router.js';
import { databaseUrl, describeWithService, eventually, mysqlUrl, redisUrl } from '../helpers/services.js';
import { suiteSqliteFile } from '../helpers/sqlite-file.js';

// Delivered inbox entries expire in every store: a recovery pass (or a drain) deletes those delivered more
// than ttlMs ago, at most once an hour per instance; undelivered and dead ones stay.

const TTL_MS = 300;

const router = (store: DurableStore) => refusingRouter(store, { ttlMs: TTL_MS });
const post = postTo;

function expiryScenario(make: () => DurableStore, ready: () => Promise<void> = async () => {}): void {
  test('a delivered entry older than ttlMs is deleted by the next instance that recovers; a dead one stays', async () => {
    await ready();
    const store = make();
    const first = router(store);
    const paid = uniquePayload();
    const refused = uniquePayload({ custom_data: 'refuse' });
    expect(await post(first, paid)).toBe(200);
    expect(await post(first, refused)).toBe(200);
    const paidKey = `${String(paid.transaction_id)}:SUCCESSFUL`;
    const refusedKey = `${String(refused.transaction_id)}:SUCCESSFUL`;
    await eventually(
      'the first is delivered',
      async () => (await store.get(paidKey))?.status === 'delivered',
    );
    await eventually('the second is dead', async () => (await store.get(refusedKey))?.status === 'dead');
    const deliveredAt = (await store.get(paidKey))?.deliveredAt?.getTime() ?? Date.now();
    await first.close();

    await eventually('ttlMs has passed', () => Date.now() > deliveredAt + TTL_MS + 50);
    // A new instance (a restart): its first recovery pass deletes what expired.
    const second = router(make());
    await second.drain();
    await eventually('the delivered entry is gone', async () => (await store.get(paidKey)) === undefined);
    expect((await store.get(refusedKey))?.status).toBe('dead');
    await second.close();
  });
}

describe('MemoryStore', () => {
  const store = new MemoryStore();
  expiryScenario(() => store);
});

describeWithService('PostgreSQL', 'PostgresStore', () => {
  const table = `ipn_test_exp_${process.pid}_${randomUUID().slice(0, 6)}`;
  const pool = new Pool({ connectionString: databaseUrl(), max: 4 });
  pool.on('error', () => {});
  afterAll(async () => {
    await pool.query(`DROP TABLE IF EXISTS "${table}", "${table}_expected", "${table}_states"`);
    await pool.end();
  });
  expiryScenario(
    () => new PostgresStore({ pool, table }),
    () => new PostgresStore({ pool, table }).migrate(),
  );
});

describeWithService('Redis', 'RedisStore', () => {
  const prefix = `ipn-kit-test:expiry:${process.pid}:${randomUUID().slice(0, 8)}:`;
  const client = new Redis(redisUrl(), { lazyConnect: true });
  client.on('error', () => {});
  afterAll(async () => {
    const keys = await client.keys(`${prefix}*`);
    if (keys.length > 0) await client.del(...keys);
    await client.quit();
  });
  expiryScenario(() => new RedisStore({ client, prefix }));
});

describeWithService('MariaDB', 'MysqlStore', () => {
  const table = `ipn_test_exp_${process.pid}_${randomUUID().slice(0, 6)}`;
  let pool: MysqlPool;
  beforeAll(() => {
    pool = createPool({ uri: mysqlUrl(), connectionLimit: 4 });
  });
  afterAll(async () => {
    await pool.query(`DROP TABLE IF EXISTS \`${table}\`, \`${table}_expected\`, \`${table}_states\``);
    await pool.end();
  });
  expiryScenario(
    () => new MysqlStore({ pool, table }),
    () => new MysqlStore({ pool, table }).migrate(),
  );
});

describe('SqliteStore', () => {
  const database = suiteSqliteFile('ipn-kit-expiry-');
  expiryScenario(
    () => new SqliteStore({ database }),
    () => new SqliteStore({ database }).migrate(),
  );
});
