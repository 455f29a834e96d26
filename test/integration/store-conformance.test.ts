import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import Redis from 'ioredis';
import { createClient } from 'redis';
import { Pool, type PoolClient } from 'pg';
import { createPool, type Pool as MysqlPool, type PoolConnection } from 'mysql2/promise';
import { MemoryStore, type Store } from 'ipn-kit';
import { MysqlStore } from 'ipn-kit/mysql';
import { PostgresStore } from 'ipn-kit/postgres';
import { RedisStore } from 'ipn-kit/redis';
import { SqliteStore } from 'ipn-kit/sqlite';
import { runStoreConformance, type Lease, type Settlement } from 'ipn-kit/testing';
import { databaseUrl, describeWithService, mysqlUrl, redisUrl } from '../helpers/services.js';
import { CLEANUP_TIMEOUT_MS, dropMysqlInboxes, dropPostgresInboxes } from '../helpers/drop-inboxes.js';

/** The rule names of the failures, sorted. */
const rulesOf = (failures: Array<{ rule: string }>) =>
  [...new Set(failures.map((failure) => failure.rule))].sort();

/** How a store without transactional delivery skips the late-write rule. */
const NO_BEGIN = {
  rule: 'late-write',
  reason: 'the store has no begin() (optional: no transactional delivery)',
};

/** The ledger a late-write probe credits: one table of this run, `id text PRIMARY KEY`. */
const ledgerTable = () => `ipn_test_late_${process.pid}_${randomUUID().slice(0, 6)}`;

describe('runStoreConformance on the built-in stores', () => {
  test('MemoryStore conforms, no rule skipped but late-write (no transactional delivery)', async () => {
    const result = await runStoreConformance(() => new MemoryStore());
    expect(result.failures).toEqual([]);
    expect(result.skipped).toEqual([NO_BEGIN]);
    expect(result.passed).toContain('claim-token-idempotent');
  }, 60_000);

  test('MemoryStore conforms on a fake clock, the expiry rules waiting for nothing', async () => {
    let now = Date.now();
    const result = await runStoreConformance(() => new MemoryStore({ now: () => now }), {
      advance: (ms) => void (now += ms),
    });
    expect(result.failures).toEqual([]);
  }, 60_000);

  test('a MemoryStore taken as not durable runs the claim rules only', async () => {
    const result = await runStoreConformance(() => new MemoryStore(), { durable: false });
    expect(result.failures).toEqual([]);
    expect(result.passed).toEqual([
      'interface',
      'claim-atomic',
      'claim-held',
      'claim-ttl',
      'claim-token-idempotent',
      'release',
      'lifecycle-decide',
      'lifecycle-atomic',
    ]);
    expect(result.skipped).toContainEqual({
      rule: 'lease-disjoint',
      reason: 'the store is not durable (at most once only)',
    });
  }, 60_000);
});

describeWithService('Redis', 'runStoreConformance on RedisStore', () => {
  // Two clients: two app instances, each with its own connection to the one Redis.
  let redis: Redis;
  let other: Redis;
  const prefix = `ipn-kit-test:conformance:${process.pid}:${randomUUID().slice(0, 8)}:`;
  let round = 0;
  const createStore = () => new RedisStore({ client: redis, prefix: `${prefix}${(round += 1)}:` });
  beforeAll(() => {
    [redis, other] = [new Redis(redisUrl()), new Redis(redisUrl())];
    for (const client of [redis, other]) client.on('error', () => {});
  });
  afterAll(async () => {
    const keys = await redis.keys(`${prefix}*`);
    if (keys.length > 0) await redis.del(...keys);
    await Promise.all([redis.quit(), other.quit()]);
  });

  test('RedisStore conforms', async () => {
    const result = await runStoreConformance(createStore);
    expect(result.failures).toEqual([]);
    expect(result.skipped).toEqual([NO_BEGIN]);
  }, 120_000);

  test('RedisStore conforms over a node-redis client', async () => {
    const client = createClient({ url: redisUrl() });
    client.on('error', () => {});
    await client.connect();
    try {
      const result = await runStoreConformance(
        () => new RedisStore({ client, prefix: `${prefix}${(round += 1)}:` }),
      );
      expect(result.failures).toEqual([]);
    } finally {
      await client.close();
    }
  }, 120_000);

  test('RedisStore conforms across two instances, each with its own client', async () => {
    const result = await runStoreConformance(createStore, {
      openPeer: (store) => new RedisStore({ client: other, prefix: (store as RedisStore).prefix }),
    });
    expect(result.failures).toEqual([]);
  }, 120_000);
});

describeWithService('PostgreSQL', 'runStoreConformance on PostgresStore', () => {
  // Two pools: two app instances, each with its own connections.
  let pool: Pool;
  let other: Pool;
  const tables: string[] = [];
  /** A store on a new, migrated table of this run. */
  async function createStore(): Promise<PostgresStore> {
    const table = `ipn_test_conf_${process.pid}_${tables.length}_${randomUUID().slice(0, 6)}`;
    tables.push(table);
    const store = new PostgresStore({ pool, table });
    await store.migrate();
    return store;
  }
  const ledger = ledgerTable();
  /** A listener's credit through the attempt's client (its `tx` and `db`), read back through the pool. */
  const lateWrite = {
    write: (through: unknown, id: string) =>
      (through as PoolClient).query(`INSERT INTO "${ledger}" (id) VALUES ($1)`, [id]),
    landed: async (id: string) =>
      (await pool.query(`SELECT 1 FROM "${ledger}" WHERE id = $1`, [id])).rowCount === 1,
  };
  beforeAll(async () => {
    pool = new Pool({ connectionString: databaseUrl(), max: 10 });
    other = new Pool({ connectionString: databaseUrl(), max: 10 });
    for (const client of [pool, other]) client.on('error', () => {});
    await pool.query(`CREATE TABLE "${ledger}" (id text PRIMARY KEY)`);
  });
  afterAll(async () => {
    await dropPostgresInboxes(pool, [...tables, ledger]);
    await Promise.all([pool.end(), other.end()]);
  }, CLEANUP_TIMEOUT_MS);

  test('PostgresStore conforms, late writes through its pool client refused', async () => {
    const result = await runStoreConformance(createStore, { lateWrite });
    expect(result.failures).toEqual([]);
    expect(result.passed).toContain('late-write');
  }, 120_000);

  test('PostgresStore conforms across two instances, each with its own pool', async () => {
    const result = await runStoreConformance(createStore, {
      openPeer: (store) => new PostgresStore({ pool: other, table: (store as PostgresStore).table }),
    });
    expect(result.failures).toEqual([]);
  }, 120_000);
});

describeWithService('MariaDB', 'runStoreConformance on MysqlStore', () => {
  // Two pools: two app instances, each with its own connections.
  let pool: MysqlPool;
  let other: MysqlPool;
  const tables: string[] = [];
  /** A store on a new, migrated table of this run. */
  async function createStore(): Promise<MysqlStore<MysqlPool>> {
    const table = `ipn_test_conf_${process.pid}_${tables.length}_${randomUUID().slice(0, 6)}`;
    tables.push(table);
    const store = new MysqlStore({ pool, table });
    await store.migrate();
    return store;
  }
  const ledger = ledgerTable();
  /** A listener's credit through the attempt's connection (its `tx` and `db`), read back through the pool. */
  const lateWrite = {
    write: (through: unknown, id: string) =>
      (through as PoolConnection).query(`INSERT INTO \`${ledger}\` (id) VALUES (?)`, [id]),
    landed: async (id: string) => {
      const [rows] = await pool.query(`SELECT 1 FROM \`${ledger}\` WHERE id = ?`, [id]);
      return (rows as unknown[]).length === 1;
    },
  };
  beforeAll(async () => {
    pool = createPool({ uri: mysqlUrl(), connectionLimit: 10 });
    other = createPool({ uri: mysqlUrl(), connectionLimit: 10 });
    await pool.query(`CREATE TABLE \`${ledger}\` (id varchar(64) PRIMARY KEY) ENGINE=InnoDB`);
  });
  afterAll(async () => {
    await dropMysqlInboxes(pool, [...tables, ledger]);
    await Promise.all([pool.end(), other.end()]);
  }, CLEANUP_TIMEOUT_MS);

  test('MysqlStore conforms, late writes through its pool connection refused', async () => {
    const result = await runStoreConformance(createStore, { lateWrite });
    expect(result.failures).toEqual([]);
    // Every rule ran, claim-ttl too: the inbox's, countByStatus's and the expectations'.
    expect(result.skipped).toEqual([]);
  }, 120_000);

  test('MysqlStore conforms across two instances, each with its own pool', async () => {
    const result = await runStoreConformance(createStore, {
      openPeer: (store) => new MysqlStore({ pool: other, table: (store as MysqlStore<MysqlPool>).table }),
    });
    expect(result.failures).toEqual([]);
  }, 120_000);
});

describe('runStoreConformance on SqliteStore', () => {
  // Files in a folder of this run; each store its own file, each peer a second connection to it.
  const folder = mkdtempSync(join(tmpdir(), 'ipn-sqlite-conf-'));
  const opened: Database.Database[] = [];
  const open = (path: string) => {
    const database = new Database(path);
    opened.push(database);
    return database;
  };
  const fileOf = new Map<SqliteStore, string>();
  const databaseOf = new Map<SqliteStore, Database.Database>();
  let latest: SqliteStore | undefined;
  /** A store on a new, migrated file, with a ledger table for the late-write rule. */
  async function createStore(): Promise<SqliteStore> {
    const path = join(folder, `${opened.length}.db`);
    const database = open(path);
    database.exec('CREATE TABLE ledger (id text PRIMARY KEY)');
    const store = new SqliteStore({ database });
    fileOf.set(store, path);
    databaseOf.set(store, database);
    latest = store;
    await store.migrate();
    return store;
  }
  /** A listener's credit through the attempt's connection, read back through the store's own file. */
  const lateWrite = (store: () => SqliteStore) => ({
    write: (through: unknown, id: string) =>
      Promise.resolve().then(() =>
        (through as Database.Database).prepare('INSERT INTO ledger (id) VALUES (?)').run(id),
      ),
    landed: (id: string) =>
      Promise.resolve(
        databaseOf.get(store())!.prepare('SELECT 1 FROM ledger WHERE id = ?').get(id) !== undefined,
      ),
  });
  afterAll(() => {
    for (const database of opened) database.close();
    rmSync(folder, { recursive: true, force: true });
  });

  test('SqliteStore conforms, late writes through its delivery connection refused', async () => {
    const result = await runStoreConformance(createStore, { lateWrite: lateWrite(() => latest!) });
    expect(result.failures).toEqual([]);
    expect(result.skipped).toEqual([]);
  }, 120_000);

  test('SqliteStore conforms across two connections to one file (two processes of an app)', async () => {
    const result = await runStoreConformance(createStore, {
      openPeer: (store) => new SqliteStore({ database: open(fileOf.get(store as SqliteStore)!) }),
    });
    expect(result.failures).toEqual([]);
  }, 120_000);
});

describe('runStoreConformance on broken stores', () => {
  /** A claim that reads, waits for its backend, then writes: two racing claims both see the key free. */
  class CheckThenSetStore implements Store {
    constructor(readonly keys = new Map<string, number>()) {}
    async claim(key: string, ttlMs: number): Promise<boolean> {
      const expiry = this.keys.get(key);
      if (expiry !== undefined && expiry > Date.now()) return false;
      await Promise.resolve(); // a round trip between the read and the write
      this.keys.set(key, Date.now() + ttlMs);
      return true;
    }
    release(key: string): void {
      this.keys.delete(key);
    }
  }

  /**
   * Claims taken one at a time within an instance (a lock of its own), over a map the instances share: each
   * instance alone is atomic, two are not. Only a check across instances (`openPeer`) finds it.
   */
  class LockedInOneProcessStore extends CheckThenSetStore {
    #queue: Promise<unknown> = Promise.resolve();
    override claim(key: string, ttlMs: number): Promise<boolean> {
      const claimed = this.#queue.then(() => super.claim(key, ttlMs));
      this.#queue = claimed.catch(() => undefined);
      return claimed;
    }
  }

  test('claims atomic within one instance only fail claim-atomic across two', async () => {
    const alone = await runStoreConformance(() => new LockedInOneProcessStore(), {
      skip: ['claim-token-idempotent'],
    });
    expect(alone.failures).toEqual([]);
    const { failures } = await runStoreConformance(() => new LockedInOneProcessStore(), {
      skip: ['claim-token-idempotent'],
      openPeer: (store) => new LockedInOneProcessStore((store as LockedInOneProcessStore).keys),
    });
    expect(rulesOf(failures)).toEqual(['claim-atomic']);
  }, 60_000);

  test('a check-then-set claim fails claim-atomic', async () => {
    const { failures } = await runStoreConformance(() => new CheckThenSetStore());
    expect(rulesOf(failures)).toEqual(['claim-atomic', 'claim-token-idempotent']);
    expect(failures.find((failure) => failure.rule === 'claim-atomic')?.message).toMatch(
      /50 concurrent claims of .*: 50 resolved true, expected exactly 1/,
    );
  }, 60_000);

  /**
   * A durable store whose settle and release ignore the lease they are given: they act for whichever
   * lease holds the entry now, so a late call of an attempt that lost its lease overwrites the new one's.
   */
  class LeaseBlindStore extends MemoryStore {
    readonly #holders = new Map<string, string>();
    override async receive(key: string, record: Record<string, unknown>, lease: Lease): Promise<boolean> {
      const received = await super.receive(key, record, lease);
      if (received) this.#holders.set(key, lease.id);
      return received;
    }
    override async lease(lease: Lease, limit: number) {
      const taken = await super.lease(lease, limit);
      for (const entry of taken) this.#holders.set(entry.key, lease.id);
      return taken;
    }
    override async replace(key: string, leaseId: string, record: Record<string, unknown>, lease: Lease) {
      const replaced = await super.replace(key, leaseId, record, lease);
      if (replaced) this.#holders.set(key, lease.id);
      return replaced;
    }
    override settle(key: string, _leaseId: string, settlement: Settlement): Promise<boolean> {
      return super.settle(key, this.#holders.get(key) ?? '', settlement);
    }
    override release(key: string): void {
      super.release(key);
    }
  }

  test('a settle and a release that ignore the lease fail the lease-guarded rules', async () => {
    const { failures, passed } = await runStoreConformance(() => new LeaseBlindStore(), {
      skip: ['claim-token-idempotent'],
    });
    expect(rulesOf(failures)).toEqual(
      expect.arrayContaining([
        'settle-lease-guarded',
        'release-lease-guarded',
        'crash-lost-lease-changes-nothing',
      ]),
    );
    expect(failures.find((failure) => failure.rule === 'settle-lease-guarded')?.message).toMatch(
      /by a lease that never held it resolved true/,
    );
    expect(passed).toEqual(expect.arrayContaining(['claim-atomic', 'lease-disjoint', 'list-filters']));
  }, 60_000);

  /** A replace written as a delete, then an insert: in between, the entry is nowhere (a crash there loses it). */
  class DeleteThenInsertStore extends MemoryStore {
    override async replace(key: string, leaseId: string, record: Record<string, unknown>, lease: Lease) {
      if ((await this.get(key)) === undefined) return false;
      this.release(key, leaseId);
      await new Promise((resolve) => setImmediate(resolve)); // the insert's round trip
      return this.receive(key, record, lease);
    }
  }

  test('a replace that deletes, then inserts, fails replace-atomic', async () => {
    const { failures } = await runStoreConformance(() => new DeleteThenInsertStore(), {
      skip: ['claim-token-idempotent'],
    });
    expect(rulesOf(failures)).toContain('replace-atomic');
    expect(failures.find((failure) => failure.rule === 'replace-atomic')?.message).toMatch(
      /found no entry \d+ times while replace\(\) ran: it must never pass through absent/,
    );
  }, 60_000);
});
