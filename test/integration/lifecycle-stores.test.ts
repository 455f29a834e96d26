import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { createPool, type Pool as MysqlPool } from 'mysql2/promise';
import { MysqlStore } from '../../lib/mysql.js';
import { PostgresStore } from '../../lib/postgres.js';
import { RedisStore } from '../../lib/redis.js';
import { SqliteStore } from '../../lib/sqlite.js';
import { CLEANUP_TIMEOUT_MS, dropMysqlInboxes, dropPostgresInboxes } from '../helpers/drop-inboxes.js';
import {
  lifecycleBatchScenarios,
  lifecycleScenarios,
  type CountedLifecycle,
} from '../helpers/lifecycle-scenarios.js';
import { databaseUrl, describeWithService, mysqlUrl, redisUrl } from '../helpers/services.js';

/**
 * The lifecycle's rules on every networked store, each "instance" a store object of its own over its own
 * client (or pool) on the one database: what two app instances are.
 */
const table = `ipn_test_lfc_${process.pid}_${randomUUID().slice(0, 6)}`;
/** The inbox of the batch whose statement fails: its states table is renamed away and back. */
const breakable = `${table}_b`;

/** Calls `seen` with the first argument of each call of `target[method]`, through a wrapper put in its place. */
function watch(target: object, method: string, seen: (first: unknown) => void): void {
  const original = Reflect.get(target, method) as (...args: unknown[]) => unknown;
  Reflect.set(target, method, (...args: unknown[]) => {
    seen(args[0]);
    return Reflect.apply(original, target, args);
  });
}

/**
 * The group-commit scenarios of a SQL store: `counted(on)` counts the writes of a store over the inbox
 * `on`; the failing batch's table is `breakable`, made by `migrate`, its states table renamed away and back.
 */
function sqlBatchScenarios(
  counted: (on?: string) => CountedLifecycle,
  migrate: (on: string) => Promise<unknown>,
  rename: (from: string, to: string) => Promise<unknown>,
): void {
  lifecycleBatchScenarios({
    counted: () => counted(),
    breakable: async () => {
      await migrate(breakable);
      return {
        ...counted(breakable),
        fail: () => rename(`${breakable}_states`, `${breakable}_away`).then(() => {}),
        mend: () => rename(`${breakable}_away`, `${breakable}_states`).then(() => {}),
      };
    },
  });
}

describeWithService('Redis', 'RedisStore', () => {
  const prefix = `ipn-kit-test:lifecycle:${process.pid}:${randomUUID().slice(0, 8)}:`;
  const clients: Redis[] = [];
  lifecycleScenarios({
    store: () => {
      const client = new Redis(redisUrl());
      client.on('error', () => {});
      clients.push(client);
      return new RedisStore({ client, prefix });
    },
    close: async () => {
      const [first] = clients;
      const keys = first ? await first.keys(`${prefix}*`) : [];
      if (first && keys.length > 0) await first.del(...keys);
      await Promise.all(clients.map((client) => client.quit()));
    },
  });
  describe('group commit', () => {
    /** A store over a client of its own whose lifecycle scripts (those with a state key) are counted. */
    const counted = (under: string, refused: () => Error | undefined = () => undefined) => {
      const client = new Redis(redisUrl());
      client.on('error', () => {});
      clients.push(client);
      let writes = 0;
      const call = (...args: [string, ...string[]]): Promise<unknown> => {
        const decides = args.some((arg) => arg.startsWith(`${under}state:`));
        writes += Number(decides);
        const error = decides ? refused() : undefined;
        return error ? Promise.reject(error) : client.call(...args);
      };
      return {
        lifecycle: new RedisStore({ client: { call }, prefix: under }).lifecycle,
        writes: () => writes,
      };
    };
    lifecycleBatchScenarios({
      counted: () => counted(prefix),
      breakable: () => {
        let failing = false;
        const refused = () =>
          failing ? new Error("READONLY You can't write against a read only replica.") : undefined;
        return Promise.resolve({
          ...counted(`${prefix}b:`, refused),
          fail: () => Promise.resolve(void (failing = true)),
          mend: () => Promise.resolve(void (failing = false)),
        });
      },
    });
  });
});

describeWithService('PostgreSQL', 'PostgresStore', () => {
  const pools: Pool[] = [];
  const pool = () => {
    const made = new Pool({ connectionString: databaseUrl(), max: 4 });
    made.on('error', () => {});
    pools.push(made);
    return made;
  };
  lifecycleScenarios({
    store: () => new PostgresStore({ pool: pool(), table }),
    ready: () => new PostgresStore({ pool: pool(), table }).migrate(),
  });
  describe('group commit', () => {
    /** A store over a pool of its own, counting its statements on the states table. */
    const counted = (on = table) => {
      const made = pool();
      let writes = 0;
      watch(made, 'query', (text) => void (writes += Number(String(text).includes(`"${on}_states"`))));
      return { lifecycle: new PostgresStore({ pool: made, table: on }).lifecycle, writes: () => writes };
    };
    sqlBatchScenarios(
      counted,
      (on) => new PostgresStore({ pool: pool(), table: on }).migrate(),
      (from, to) => pools[0]!.query(`ALTER TABLE "${from}" RENAME TO "${to}"`),
    );
  });
  afterAll(async () => {
    await dropPostgresInboxes(pools[0]!, [table, breakable]);
    await Promise.all(pools.map((made) => made.end()));
  }, CLEANUP_TIMEOUT_MS);
});

describeWithService('MariaDB', 'MysqlStore', () => {
  const pools: MysqlPool[] = [];
  const pool = () => {
    const made = createPool({ uri: mysqlUrl(), connectionLimit: 4 });
    pools.push(made);
    return made;
  };
  lifecycleScenarios({
    store: () => new MysqlStore({ pool: pool(), table }),
    ready: () => new MysqlStore({ pool: pool(), table }).migrate(),
  });
  describe('group commit', () => {
    /** A store over a pool of its own, counting its INSERTs into the states table, on each connection. */
    const counted = (on = table) => {
      const made = pool();
      let writes = 0;
      const watched = new WeakSet<object>();
      const getConnection = made.getConnection.bind(made);
      Reflect.set(made, 'getConnection', async () => {
        const connection = await getConnection();
        if (!watched.has(connection)) {
          watched.add(connection);
          watch(connection, 'query', (sql) => {
            const text = String(sql);
            if (text.trimStart().startsWith('INSERT') && text.includes(`\`${on}_states\``)) writes += 1;
          });
        }
        return connection;
      });
      return { lifecycle: new MysqlStore({ pool: made, table: on }).lifecycle, writes: () => writes };
    };
    sqlBatchScenarios(
      counted,
      (on) => new MysqlStore({ pool: pool(), table: on }).migrate(),
      (from, to) => pools[0]!.query(`RENAME TABLE \`${from}\` TO \`${to}\``),
    );
    test('an id its states table cannot keep apart (a trailing space, over 255 characters) fails its own decision, not the ones batched with it', async () => {
      const { lifecycle } = counted();
      const id = `T${randomUUID()}`;
      const first = lifecycle.decide(`${id}-0`, 'SUCCESSFUL', 60_000);
      const batch = [
        lifecycle.decide(id, 'SUCCESSFUL', 60_000),
        lifecycle.decide(`${id} `, 'FAILED', 60_000),
        lifecycle.decide(`${id}${'x'.repeat(255)}`, 'FAILED', 60_000),
        lifecycle.decide(`${id}-1`, 'FAILED', 60_000),
      ];
      const allSettled = Promise.allSettled(batch); // handled at once: two of them reject
      await expect(first).resolves.toBe('accepted');
      const settled = await allSettled;
      expect(settled.map((result) => (result.status === 'fulfilled' ? result.value : result.reason))).toEqual(
        [
          'accepted',
          expect.objectContaining({
            name: 'TypeError',
            message: expect.stringContaining('end with a space'),
          }),
          expect.objectContaining({ name: 'TypeError', message: expect.stringContaining('at most 255') }),
          'accepted',
        ],
      );
      // The trailing-space FAILED was never sent: it would have been read as the SUCCESSFUL's row.
      await expect(lifecycle.decide(`${id}-1`, 'FAILED', 60_000)).resolves.toBe('accepted');
    });
  });
  afterAll(async () => {
    await dropMysqlInboxes(pools[0]!, [table, breakable]);
    await Promise.all(pools.map((made) => made.end()));
  }, CLEANUP_TIMEOUT_MS);
});

describe('SqliteStore', () => {
  const folder = mkdtempSync(join(tmpdir(), 'ipn-lifecycle-'));
  const path = join(folder, 'ipn.db');
  const opened: Database.Database[] = [];
  const store = () => {
    const database = new Database(path);
    opened.push(database);
    return new SqliteStore({ database });
  };
  lifecycleScenarios({
    store,
    ready: () => store().migrate(),
    close: () => {
      for (const database of opened) database.close();
      rmSync(folder, { recursive: true, force: true });
      return Promise.resolve();
    },
  });
});
