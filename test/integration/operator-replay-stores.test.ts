import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import Redis from 'ioredis';
import { createPool, type Pool } from 'mysql2/promise';
import { Pool as PgPool } from 'pg';
import { runCli } from '../../lib/cli/run-cli.js';
import { PostgresStore } from '../../lib/postgres.js';
import { MysqlStore } from '../../lib/mysql.js';
import { RedisStore } from '../../lib/redis.js';
import { SqliteStore } from '../../lib/sqlite.js';
import type { DurableStore } from '../../lib/stores/store.js';
import { uniquePayload } from '../helpers/payloads.js';
import { databaseUrl, describeWithService, eventually, mysqlUrl, redisUrl } from '../helpers/services.js';
import { CLEANUP_TIMEOUT_MS, dropMysqlInboxes, dropPostgresInboxes } from '../helpers/drop-inboxes.js';
import { confirmed, keyOf, pageWithEntry } from '../helpers/admin-forms.js';

/** The admin's replay guard (the entry's status and last change, read at the confirmation and at the POST) on each store. */

jest.setTimeout(30_000);

/** The confirmation page of one entry's replay (of a dead entry), then its form posted as the browser does. */
async function confirmAndSend(admin: (request: Request) => Promise<Response>, key: string) {
  const send = await confirmed(admin, `action=replay&key=${encodeURIComponent(key)}`, (form) =>
    expect(form.get('was')).toBe('dead'),
  );
  return send();
}

/** A dead entry replayed from the operator's page over `store`: 200 (never a false 409), and delivered once. */
async function replaysDead(store: DurableStore): Promise<void> {
  const { ipn, admin, payload, key, credited } = await pageWithEntry(store, 'dead');
  try {
    const answer = await confirmAndSend(admin, key);
    expect(answer.status).toBe(200);
    await eventually('delivered', async () => (await store.get(key))?.status === 'delivered');
    expect(credited).toEqual([String(payload.transaction_id)]);
  } finally {
    await ipn.close();
  }
}

describe('SqliteStore', () => {
  test("a dead entry's confirmed replay is done (its last change reads the same at the POST)", async () => {
    const database = new Database(join(mkdtempSync(join(tmpdir(), 'ipn-review-replay-')), 'inbox.db'));
    const store = new SqliteStore({ database });
    await store.migrate();
    try {
      await replaysDead(store);
    } finally {
      database.close();
    }
  });
});

describeWithService('MariaDB', 'MysqlStore', () => {
  let pool: Pool;
  const table = `review_replay_${process.pid}_${Date.now()}`;
  beforeAll(() => void (pool = createPool({ uri: mysqlUrl(), connectionLimit: 4 })));
  afterAll(async () => {
    await dropMysqlInboxes(pool, [table]);
    await pool.end();
  }, CLEANUP_TIMEOUT_MS);

  test("a dead entry's confirmed replay is done (DATETIME(3) reads the same at the POST)", async () => {
    const store = new MysqlStore({ pool, table });
    await store.migrate();
    await replaysDead(store);
  });
});

describeWithService('Redis', 'RedisStore', () => {
  let redis: Redis;
  const prefix = `ipn-kit-test:review-replay:${process.pid}:${randomUUID().slice(0, 8)}:`;
  beforeAll(() => void (redis = new Redis(redisUrl())));
  afterAll(async () => {
    const keys = await redis.keys(`${prefix}*`);
    if (keys.length > 0) await redis.del(...keys);
    redis.disconnect();
  }, CLEANUP_TIMEOUT_MS);

  test("a dead entry's confirmed replay is done", async () => {
    await replaysDead(new RedisStore({ client: redis, prefix: `${prefix}a:` }));
  });

  test('replay(key, 0, []) replays nothing, as every other store (no status is allowed)', async () => {
    const store = new RedisStore({ client: redis, prefix: `${prefix}b:` });
    const payload = uniquePayload();
    const key = keyOf(payload);
    const lease = { id: randomUUID(), ms: 60_000 };
    expect(await store.receive(key, payload, lease)).toBe(true);
    expect(await store.settle(key, lease.id, { status: 'delivered' })).toBe(true);
    expect(await store.replay(key, 0, [])).toBe(false);
    expect((await store.get(key))?.status).toBe('delivered');
  });
});

describeWithService(
  'PostgreSQL',
  'ipn-kit inbox replay <key> of an entry under a live delivery lease',
  () => {
    let pool: PgPool;
    const table = `review_replay_cli_${process.pid}_${Date.now()}`;
    beforeAll(() => void (pool = new PgPool({ connectionString: databaseUrl() })));
    afterAll(async () => {
      await dropPostgresInboxes(pool, [table]);
      await pool.end();
    }, CLEANUP_TIMEOUT_MS);

    test('keeps that lease: the attempt holding it settles it (its hold-ending write changes nothing)', async () => {
      const store = new PostgresStore({ pool, table });
      await store.migrate();
      const payload = uniquePayload();
      const key = keyOf(payload);
      const lease = { id: randomUUID(), ms: 60_000 };
      expect(await store.receive(key, payload, lease)).toBe(true);
      const code = await runCli(['inbox', 'replay', key, '--table', table, '--actor', 'ada'], {
        stdout: () => {},
        stderr: () => {},
        env: { DATABASE_URL: databaseUrl() },
      });
      expect(code).toBe(0);
      const entry = await store.get(key);
      expect(entry?.status).toBe('received');
      expect(entry?.leaseUntil?.getTime()).toBeGreaterThan(Date.now());
      expect(await store.settle(key, lease.id, { status: 'delivered' })).toBe(true);
      expect((await store.get(key))?.status).toBe('delivered');
    });
  },
);
