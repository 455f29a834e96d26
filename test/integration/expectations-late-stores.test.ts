import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { createPool } from 'mysql2/promise';
import type { Store } from 'ipn-kit';
import { MysqlStore } from 'ipn-kit/mysql';
import { PostgresStore } from 'ipn-kit/postgres';
import { RedisStore } from 'ipn-kit/redis';
import { SqliteStore } from 'ipn-kit/sqlite';
import { SETTLED_ATTEMPTS } from '../../lib/delivery/expectations.js';
import { settle } from '../helpers/servers.js';
import {
  databaseUrl,
  describeWithService,
  eventually,
  mysqlUrl,
  redisUrl,
  type Service,
} from '../helpers/services.js';
import { CLEANUP_TIMEOUT_MS, dropMysqlInboxes, dropPostgresInboxes } from '../helpers/drop-inboxes.js';
import {
  gatedVerify,
  givingUpRouter,
  paid,
  perTestService,
  quietRouter,
  statusClientOf,
  timedOut,
  untilFirst,
} from '../helpers/verified-payments.js';

// The late settle and reopen of an expectation (at most once with `verify`) compare and rewrite what the
// store holds then: its time and fields as the store gives them back (numbers, text, an absent account), on
// each built-in store that answers over a connection or a file, not only on MemoryStore.

jest.setTimeout(30_000);

const t = perTestService({ unhandled: true });
const run = `${process.pid}_${randomUUID().slice(0, 6)}`;

/** A store of a kind, fresh for each test, and what ends it all after the file. */
interface Kind {
  service: Service | undefined;
  name: string;
  make(): Promise<Store>;
  end(): Promise<void>;
}

const made: number[] = [0];
const next = () => (made[0]! += 1);

/**
 * A SQL store's kind: its pool opened on first use, a migrated table `ipn_rl_<run>_<n>` a test; after the
 * file, its tables dropped and its pool ended.
 */
function sqlKind<P extends { end(): Promise<void> }>(
  service: Service,
  name: string,
  open: () => P,
  storeOf: (pool: P, table: string) => PostgresStore | MysqlStore,
  drop: (pool: P, tables: string[]) => Promise<void>,
): Kind {
  let pool: P | undefined;
  const tables: string[] = [];
  return {
    service,
    name,
    async make() {
      pool ??= open();
      const table = `ipn_rl_${run}_${next()}`;
      tables.push(table);
      const store = storeOf(pool, table);
      await store.migrate();
      return store;
    },
    async end() {
      if (!pool) return;
      await drop(pool, tables);
      await pool.end();
    },
  };
}

const kinds: Kind[] = [
  sqlKind(
    'PostgreSQL',
    'PostgresStore',
    () => new Pool({ connectionString: databaseUrl(), max: 4 }),
    (pool, table) => new PostgresStore({ pool, table }),
    dropPostgresInboxes,
  ),
  sqlKind(
    'MariaDB',
    'MysqlStore',
    () => createPool({ uri: mysqlUrl(), connectionLimit: 4 }),
    (pool, table) => new MysqlStore({ pool, table }),
    dropMysqlInboxes,
  ),
  (() => {
    let redis: Redis | undefined;
    const prefix = `ipn-kit-test:late-expect:${run}:`;
    return {
      service: 'Redis' as const,
      name: 'RedisStore',
      make() {
        redis ??= new Redis(redisUrl());
        return Promise.resolve(new RedisStore({ client: redis, prefix: `${prefix}${next()}:` }));
      },
      async end() {
        if (!redis) return;
        const keys = await redis.keys(`${prefix}*`);
        if (keys.length > 0) await redis.del(...keys);
        await redis.quit();
      },
    };
  })(),
  (() => {
    const folder = mkdtempSync(join(tmpdir(), 'ipn-sqlite-late-'));
    const opened: Database.Database[] = [];
    return {
      service: undefined,
      name: 'SqliteStore',
      async make() {
        const database = new Database(join(folder, `${next()}.db`));
        opened.push(database);
        const store = new SqliteStore({ database });
        await store.migrate();
        return store;
      },
      end() {
        for (const database of opened) database.close();
        rmSync(folder, { recursive: true, force: true });
        return Promise.resolve();
      },
    };
  })(),
];

const held = async (store: Store, id: string) => store.expectations!.get(id);
const settledIn = async (store: Store, id: string) =>
  ((await held(store, id))?.attempts ?? 0) >= SETTLED_ATTEMPTS;

for (const kind of kinds) {
  const suite = () => {
    afterAll(() => kind.end(), CLEANUP_TIMEOUT_MS);

    test(`${kind.name}: expect() again during verification (custom_data added) is settled with its own fields`, async () => {
      const id = await paid(t.provider);
      const store = await kind.make();
      const { verify, open } = gatedVerify(statusClientOf(t.provider));
      const { ipn, recorder, url } = await t.serve(quietRouter({ store, verify, reconcileAfterMs: 1 }));
      await ipn.expect(id, { amount: 100 });
      await t.provider.forge({ ipnUrl: url, transactionId: id });
      await ipn.expect(id, { amount: 100, customData: { order: 'a', total: 12.5 } });
      open();
      await untilFirst(recorder, 'successful', 'credited');
      await eventually('the newer expectation is settled', () => settledIn(store, id));
      expect(await held(store, id)).toMatchObject({ amount: 100, customData: '{"order":"a","total":12.5}' });
      expect(await ipn.sweep()).toMatchObject({ queried: 0, reconciled: 0 });
      expect(recorder.count('successful')).toBe(1);
      expect(recorder.count('error')).toBe(0);
      expect(t.unhandled).toEqual([]);
    });

    test(`${kind.name}: a forgery given up on after a sweep settled its expectation on the held key: the sweep credits the record once`, async () => {
      const id = await paid(t.provider);
      const store = await kind.make();
      const client = statusClientOf(t.provider);
      const { verify, open } = gatedVerify(client, { answer: timedOut });
      const { ipn, recorder, url } = await t.serve(givingUpRouter(store as never, verify, client));
      await ipn.expect(id, { amount: 100, customData: 'order-a' });
      // Two status queries made of it already (the service had no final state then): what the check reads.
      await store.expectations!.put({ ...(await held(store, id))!, attempts: 2 });
      await t.provider.forge({ ipnUrl: url, transactionId: id, customData: 'order-a', amount: 100 });
      // The genuine copy, while the forgery is being verified: 503 (the service would resend it).
      expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(503);
      expect(await ipn.sweep()).toMatchObject({ queried: 1, reconciled: 0 }); // the key is held
      expect(await settledIn(store, id)).toBe(true);
      const before = await held(store, id);
      open();
      await untilFirst(recorder, 'error', 'verification given up');
      await eventually('the expectation is made due again', async () => !(await settledIn(store, id)));
      // The same expectation (its time and fields as the store gives them back: the comparison holds), due,
      // with the count it had when checked (a newer one would start at 0).
      expect(await held(store, id)).toMatchObject({ expectedAt: before!.expectedAt, attempts: 2 });
      expect(await ipn.sweep()).toMatchObject({ reconciled: 1, rejected: 0 });
      await settle();
      expect(recorder.of('successful')).toMatchObject([{ transaction_id: id, amount: 100 }]);
      expect(await ipn.sweep()).toMatchObject({ queried: 0 });
      expect((await ipn.reconcile(id)).emitted).toBe(false);
      await settle();
      expect(recorder.count('successful')).toBe(1);
      expect(t.unhandled).toEqual([]);
    });

    test(`${kind.name}: expect() again during verification contradicting the copy credited: one rejected, settled, no second credit`, async () => {
      const id = await paid(t.provider);
      const store = await kind.make();
      const { verify, open } = gatedVerify(statusClientOf(t.provider));
      const { ipn, recorder, url } = await t.serve(quietRouter({ store, verify, reconcileAfterMs: 1 }));
      await ipn.expect(id, { amount: 100 });
      await t.provider.forge({ ipnUrl: url, transactionId: id });
      await ipn.expect(id, { amount: 50 });
      open();
      await untilFirst(recorder, 'rejected', 'the contradiction said');
      await eventually('the newer expectation is settled', () => settledIn(store, id));
      expect(await held(store, id)).toMatchObject({ amount: 50 });
      expect(await ipn.sweep()).toMatchObject({ queried: 0 });
      await settle();
      expect(recorder.of('rejected')).toMatchObject([{ reason: 'mismatch', mismatches: ['amount'] }]);
      expect(recorder.count('successful')).toBe(1);
      expect(t.unhandled).toEqual([]);
    });

    test(`${kind.name}: the sweep rejects the record while a matching forgery holds the key, the forgery given up on: it stays settled, one rejected`, async () => {
      const id = await paid(t.provider); // the record: custom_data 'order-a'
      const store = await kind.make();
      const client = statusClientOf(t.provider);
      const { verify, open } = gatedVerify(client, { answer: timedOut });
      const { ipn, recorder, url } = await t.serve(givingUpRouter(store as never, verify, client));
      await ipn.expect(id, { amount: 100, customData: 'order-x' });
      await t.provider.forge({ ipnUrl: url, transactionId: id, customData: 'order-x' });
      expect(await ipn.sweep()).toMatchObject({ queried: 1, rejected: 1 });
      open();
      await untilFirst(recorder, 'error', 'verification given up');
      await settle();
      expect(await settledIn(store, id)).toBe(true);
      expect(await ipn.sweep()).toMatchObject({ queried: 0, rejected: 0 });
      expect(recorder.count('rejected')).toBe(1);
      expect(recorder.count('successful')).toBe(0);
      expect(t.unhandled).toEqual([]);
    });
  };
  if (kind.service === undefined) describe(kind.name, suite);
  else describeWithService(kind.service, kind.name, suite);
}
