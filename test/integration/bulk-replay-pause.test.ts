import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import Redis from 'ioredis';
import { createPool } from 'mysql2/promise';
import { Pool } from 'pg';
import { IpnKitError, ipnRouter, MemoryStore, StoreError, type Options } from '../../lib/index.js';
import { MysqlStore } from '../../lib/mysql.js';
import { PostgresStore } from '../../lib/postgres.js';
import { SqliteStore } from '../../lib/sqlite.js';
import { RedisStore } from '../../lib/redis.js';
import type { DurableStore } from '../../lib/stores/store.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';
import { databaseUrl, describeWithService, eventually, mysqlUrl, redisUrl } from '../helpers/services.js';
import { CLEANUP_TIMEOUT_MS, dropMysqlInboxes, dropPostgresInboxes } from '../helpers/drop-inboxes.js';

/**
 * `ipn.replay(filter)` (the bulk replay, `replayDead()` its special case) and `ipn.pause()` / `resume()`,
 * through the router over each durable store the partners run.
 */

jest.setTimeout(30_000);
const serve = servedRouters();
const keyOf = (payload: Record<string, unknown>) =>
  `${String(payload.transaction_id)}:${String(payload.state)}`;

/**
 * Makes the store's pause switch unwritable: its control table dropped (a database not migrated to version
 * 3), or the store's connection gone. `storeUp`: the inbox itself still works (notifications are delivered).
 */
type BreakSwitch = (store: DurableStore) => Promise<{ storeUp: boolean }>;

function scenarios(fresh: () => Promise<DurableStore> | DurableStore, breakSwitch?: BreakSwitch) {
  async function start(options: Partial<Options> = {}) {
    const store = await fresh();
    const ipn = ipnRouter({
      store,
      delivery: 'at-least-once',
      logger: quiet,
      maxAttempts: 1,
      retryDelayMs: 5,
      recoveryIntervalMs: 20,
      replayRate: 1000,
      ...options,
    });
    const credited: string[] = [];
    let healthy = false;
    ipn.on('successful', (n) => {
      if (!healthy) return Promise.reject(new Error('ledger down'));
      credited.push(n.transaction_id);
    });
    const { post } = await serve(ipn);
    const heal = () => void (healthy = true);
    const setHealthy = (value: boolean) => void (healthy = value);
    const status = async (key: string) => (await store.get(key))?.status;
    return { ipn, store, post, credited, heal, setHealthy, status };
  }

  test('replay({ status, transactionIds, dryRun }) counts first, then delivers only what matches', async () => {
    const { ipn, post, credited, heal, status } = await start();
    const [a, b, c] = [uniquePayload(), uniquePayload(), uniquePayload()];
    for (const payload of [a, b, c]) expect((await post(payload)).status).toBe(200);
    await eventually('three dead entries', async () => {
      const statuses = await Promise.all([a, b, c].map((p) => status(keyOf(p))));
      return statuses.every((s) => s === 'dead');
    });
    const ids = [a, b].map((p) => String(p.transaction_id));

    expect(await ipn.replay({ status: 'dead', transactionIds: ids, dryRun: true })).toMatchObject({
      matched: 2,
      replayed: 0,
    });
    expect(await status(keyOf(a))).toBe('dead'); // a dry run changes nothing
    expect(await ipn.replay({ status: 'delivered', transactionIds: ids })).toMatchObject({
      matched: 0,
      replayed: 0,
    });

    heal();
    const replayed = await ipn.replay({ status: 'dead', transactionIds: ids });
    expect(replayed).toMatchObject({ matched: 2, replayed: 2 });
    expect([...replayed.keys].sort()).toEqual([a, b].map(keyOf).sort());
    await eventually('a and b delivered', async () =>
      (await Promise.all([a, b].map((p) => status(keyOf(p))))).every((s) => s === 'delivered'),
    );
    expect(await ipn.replayProgress([...replayed.keys, 'NEVER.1:SUCCESSFUL'])).toEqual({
      total: 3,
      delivered: 2,
      waiting: 0,
      dead: 0,
      gone: 1,
    });
    expect(credited.sort()).toEqual([...ids].sort());
    expect(await status(keyOf(c))).toBe('dead');

    // replayDead() is the filter { status: 'dead' }.
    expect(await ipn.inbox.replayDead()).toBe(1);
    await eventually('c delivered', async () => (await status(keyOf(c))) === 'delivered');
    expect(await ipn.replay({ status: 'dead', dryRun: true })).toMatchObject({ matched: 0, replayed: 0 });
  });

  test('replay() without a status never runs a delivered payment again; status delivered must be asked for', async () => {
    const { ipn, post, credited, heal, setHealthy: healthy, status } = await start();
    const [paid, stuck] = [uniquePayload(), uniquePayload()];
    heal();
    expect((await post(paid)).status).toBe(200);
    await eventually('paid delivered', async () => (await status(keyOf(paid))) === 'delivered');
    expect(credited).toEqual([String(paid.transaction_id)]);
    healthy(false);
    expect((await post(stuck)).status).toBe(200);
    await eventually('stuck dead', async () => (await status(keyOf(stuck))) === 'dead');
    heal();
    const ids = [paid, stuck].map((p) => String(p.transaction_id));

    expect(await ipn.replay({ transactionIds: ids, dryRun: true })).toMatchObject({
      matched: 1,
      replayed: 0,
    });
    expect(await ipn.replay({ transactionIds: ids })).toMatchObject({ matched: 1, replayed: 1 });
    await eventually('stuck delivered', async () => (await status(keyOf(stuck))) === 'delivered');
    expect(credited.sort()).toEqual([...ids].sort()); // the paid one once, not twice

    expect(await ipn.replay({ status: 'delivered', transactionIds: ids, dryRun: true })).toMatchObject({
      matched: 2,
      replayed: 0,
    });
  });

  test('replay() in bulk never credits a kept unexpected notification; a replay of its key does', async () => {
    const { ipn, post, credited, heal } = await start({ unexpected: 'reject' });
    heal();
    await ipn.expect(`EXP.${randomUUID().slice(0, 8)}`, { amount: 5000, customData: 'order-expected' });
    const stranger = uniquePayload();
    expect((await post(stranger)).status).toBe(200);
    const ids = [String(stranger.transaction_id)];
    await eventually('kept', async () => (await ipn.inbox.get(keyOf(stranger)))?.status === 'failed');
    for (const filter of [{}, { status: 'failed' as const }, { status: 'received' as const }])
      expect(await ipn.replay({ ...filter, transactionIds: ids })).toMatchObject({ matched: 0, replayed: 0 });
    expect(await ipn.drain()).toMatchObject({ delivered: 0 });
    expect(credited).toEqual([]);
    expect(await ipn.inbox.replay(keyOf(stranger))).toBe(true);
    await eventually('credited after its own replay', () => credited.length === 1);
    expect(credited).toEqual(ids);
  });

  test('replay({ since, until }) selects by receipt time; replayRate paces the entries by a second each', async () => {
    const { ipn, store, post, status } = await start({ replayRate: 1 });
    const [a, b] = [uniquePayload(), uniquePayload()];
    for (const payload of [a, b]) expect((await post(payload)).status).toBe(200);
    await eventually('two dead entries', async () =>
      (await Promise.all([a, b].map((p) => status(keyOf(p))))).every((s) => s === 'dead'),
    );
    const received = (await store.get(keyOf(a)))!.receivedAt;
    const ids = [a, b].map((p) => String(p.transaction_id));
    const future = new Date(received.getTime() + 3_600_000);
    expect(await ipn.replay({ transactionIds: ids, since: future, dryRun: true })).toMatchObject({
      matched: 0,
      replayed: 0,
    });
    expect(await ipn.replay({ transactionIds: ids, until: future, dryRun: true })).toMatchObject({
      matched: 2,
      replayed: 0,
    });
    await ipn.pause(); // the paced entries stay in the inbox, where their due times can be read
    const { keys } = await ipn.replay({ transactionIds: ids });
    expect(keys).toHaveLength(2);
    expect(await ipn.replayProgress(keys)).toEqual({ total: 2, delivered: 0, waiting: 2, dead: 0, gone: 0 });
    const due = await Promise.all(
      [a, b].map(async (p) => (await store.get(keyOf(p)))!.nextAttemptAt.getTime()),
    );
    expect(Math.abs(due[1]! - due[0]!)).toBeGreaterThanOrEqual(900);
    await expect(ipn.replay({ status: 'gone' as never })).rejects.toThrow(TypeError);
  });

  test('paused: answered 200 and stored, nothing delivered; resume() delivers what arrived', async () => {
    const { ipn, post, credited, heal, status, store } = await start();
    heal();
    await ipn.pause();
    expect(ipn.inbox.isPaused()).toBe(true);
    const [a, b] = [uniquePayload(), uniquePayload()];
    for (const payload of [a, b]) expect((await post(payload)).status).toBe(200);
    // Each is put back in the inbox, failed, attempts 0, saying why, and no recovery pass takes it up.
    await eventually('both parked', async () =>
      (await Promise.all([a, b].map((p) => store.get(keyOf(p))))).every(
        (entry) =>
          entry?.status === 'failed' &&
          entry.attempts === 0 &&
          entry.leaseUntil === null &&
          entry.lastError === 'delivery paused (ipn.pause()): delivered on resume',
      ),
    );
    expect(await ipn.drain()).toMatchObject({ delivered: 0 });
    expect(credited).toEqual([]);
    expect(await ipn.replay({ transactionIds: [String(a.transaction_id)] })).toMatchObject({
      matched: 1,
      replayed: 1,
    });
    expect(credited).toEqual([]); // a replay while paused waits too

    await ipn.resume();
    expect(ipn.inbox.isPaused()).toBe(false);
    await eventually('both delivered', async () =>
      (await Promise.all([a, b].map((p) => status(keyOf(p))))).every((s) => s === 'delivered'),
    );
    expect(credited.sort()).toEqual([a, b].map((p) => String(p.transaction_id)).sort());
    const c = uniquePayload();
    expect((await post(c)).status).toBe(200);
    await eventually('c delivered at once', async () => (await status(keyOf(c))) === 'delivered');
  });

  if (breakSwitch !== undefined) {
    test('pause() whose switch cannot be written rejects with a StoreError, and this instance does not claim paused', async () => {
      const { ipn, store, post, heal, status } = await start();
      heal();
      const { storeUp } = await breakSwitch(store);
      const refused = ipn.pause();
      await expect(refused).rejects.toBeInstanceOf(StoreError);
      await expect(refused).rejects.toThrow(/failed to keep the pause for every instance: nothing paused/);
      expect(ipn.inbox.isPaused()).toBe(false);
      if (!storeUp) return;
      // The table missing is named, with what makes it.
      await expect(refused).rejects.toThrow(
        /the table \S+_control\b.* does not exist: run `await store.migrate\(\)`/,
      );
      // The fleet is not paused, nor is this instance: a notification is delivered, not parked.
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await eventually('delivered', async () => (await status(keyOf(payload))) === 'delivered');
      expect(ipn.inbox.isPaused()).toBe(false);
    });
  }

  test('pause() holds every instance over the store; resume() on another delivers what waited, once', async () => {
    const { ipn: a, store, credited, heal, status } = await start();
    heal();
    const b = ipnRouter({
      store,
      delivery: 'at-least-once',
      logger: quiet,
      maxAttempts: 1,
      retryDelayMs: 5,
      recoveryIntervalMs: 20,
    });
    const creditedByB: string[] = [];
    b.on('successful', (n) => void creditedByB.push(n.transaction_id));
    const { post: postToB } = await serve(b);

    await a.pause();
    // b reads the store's flag at its next recovery pass (or before a delivery, once its reading is a
    // second old): until then it may still deliver, as the docs say.
    await eventually('b sees the pause', () => b.inbox.isPaused());
    const late = uniquePayload();
    expect((await postToB(late)).status).toBe(200);
    await eventually('parked by b', async () =>
      ((await store.get(keyOf(late)))?.lastError ?? '').startsWith('delivery paused'),
    );
    expect(b.inbox.isPaused()).toBe(true);
    expect(await b.drain()).toMatchObject({ delivered: 0, left: 1 });
    expect([...credited, ...creditedByB]).toEqual([]);

    await b.resume(); // every instance resumes: a reads the switch at its next pass
    await eventually('late delivered', async () => (await status(keyOf(late))) === 'delivered');
    await eventually('a resumed too', () => !a.inbox.isPaused());
    expect([...credited, ...creditedByB]).toEqual([String(late.transaction_id)]);
  });
}

describe('MemoryStore', () => {
  scenarios(() => new MemoryStore());

  test('pause() and replay() at most once are refused: IPN_NOT_DURABLE', async () => {
    const ipn = ipnRouter({ store: new MemoryStore(), logger: quiet });
    await serve(ipn);
    await expect(ipn.pause()).rejects.toMatchObject({ code: 'IPN_NOT_DURABLE' });
    await expect(ipn.pause()).rejects.toBeInstanceOf(IpnKitError);
    await expect(ipn.replay({ status: 'dead' })).rejects.toMatchObject({ code: 'IPN_NOT_DURABLE' });
    expect(ipn.inbox.isPaused()).toBe(false);
  });
});

describe('the pause read cache', () => {
  test("a slow read of the switch is as old as when it was asked: an instance never trusts a reading taken before another's pause() for a second more", async () => {
    const store = new MemoryStore();
    // The other instance's view of the store: its reads of the switch answer what the flag was when asked,
    // as late as the gate says (a store answering slowly).
    let gate: (() => void) | undefined;
    const slowSwitch = {
      read: async () => {
        const value = await store.pauseSwitch.read();
        await new Promise<void>((resolve) => (gate = resolve));
        return value;
      },
      write: (paused: boolean) => store.pauseSwitch.write(paused),
    };
    const slowStore = new Proxy(store, {
      get(target, name) {
        if (name === 'pauseSwitch') return slowSwitch;
        const value: unknown = Reflect.get(target, name, target);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
    const options = {
      delivery: 'at-least-once' as const,
      logger: quiet,
      recoveryIntervalMs: 2 ** 31 - 1,
      storeTimeoutMs: 10_000,
    };
    const pausing = ipnRouter({ ...options, store });
    const other = ipnRouter({ ...options, store: slowStore });
    const credited: string[] = [];
    other.on('successful', (n) => void credited.push(n.transaction_id));
    await serve(pausing);
    const { post } = await serve(other);
    // The other instance's first pass asks for the switch (not paused yet); the answer comes late.
    await eventually('the read asked', () => gate !== undefined);
    await pausing.pause();
    await new Promise((resolve) => setTimeout(resolve, 1_100)); // the reading is now over a second old
    const late = gate!;
    gate = undefined;
    late();
    await new Promise((resolve) => setImmediate(resolve));
    // A notification now: the reading was asked before the pause, over a second ago: read again, paused.
    const payload = uniquePayload();
    const answered = post(payload);
    await eventually('read again, or delivered', () => gate !== undefined || credited.length > 0);
    expect(credited).toEqual([]);
    gate!();
    expect((await answered).status).toBe(200);
    await eventually('parked', async () =>
      ((await store.get(keyOf(payload)))?.lastError ?? '').startsWith('delivery paused'),
    );
    expect(credited).toEqual([]);
    expect(other.inbox.isPaused()).toBe(true);
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
  scenarios(
    async () => {
      const table = `ipn_pause_${process.pid}_${tables.length}`;
      tables.push(table);
      const store = new PostgresStore({ pool, table });
      await store.migrate();
      return store;
    },
    async (store) => {
      await pool.query(`DROP TABLE "${(store as PostgresStore).table}_control"`);
      return { storeUp: true };
    },
  );
});

describeWithService('Redis', 'RedisStore', () => {
  const client = new Redis(redisUrl(), { lazyConnect: true });
  const prefixes: string[] = [];
  afterAll(async () => {
    for (const prefix of prefixes) {
      const keys = await client.keys(`${prefix}*`);
      if (keys.length > 0) await client.del(...keys);
    }
    client.disconnect();
  });
  // Each store over a connection of its own: closing it takes the switch's store down.
  const connections = new Map<DurableStore, Redis>();
  afterAll(() => {
    for (const connection of connections.values()) connection.disconnect();
  });
  scenarios(
    () => {
      const prefix = `ipn-kit-test:pause:${process.pid}:${prefixes.length}:`;
      prefixes.push(prefix);
      const own = new Redis(redisUrl());
      own.on('error', () => {});
      const store = new RedisStore({ client: own, prefix });
      connections.set(store, own);
      return store;
    },
    (store) => {
      connections.get(store)!.disconnect();
      return Promise.resolve({ storeUp: false });
    },
  );
});

describeWithService('MariaDB', 'MysqlStore', () => {
  const pool = createPool({ uri: mysqlUrl(), connectionLimit: 4 });
  const tables: string[] = [];
  afterAll(async () => {
    await dropMysqlInboxes(pool, tables);
    await pool.end();
  }, CLEANUP_TIMEOUT_MS);
  scenarios(
    async () => {
      const table = `ipn_pause_${process.pid}_${tables.length}`;
      tables.push(table);
      const store = new MysqlStore({ pool, table });
      await store.migrate();
      return store;
    },
    async (store) => {
      await pool.query(`DROP TABLE \`${(store as MysqlStore).table}_control\``);
      return { storeUp: true };
    },
  );
});

describe('SqliteStore', () => {
  const folder = mkdtempSync(join(tmpdir(), 'ipn-sqlite-pause-'));
  const opened: Database.Database[] = [];
  afterAll(() => {
    for (const database of opened) database.close();
    rmSync(folder, { recursive: true, force: true });
  });
  scenarios(
    async () => {
      const database = new Database(join(folder, `${opened.length}.db`));
      opened.push(database);
      const store = new SqliteStore({ database });
      await store.migrate();
      return store;
    },
    (store) => {
      opened.at(-1)!.exec(`DROP TABLE "${(store as SqliteStore).table}_control"`);
      return Promise.resolve({ storeUp: true });
    },
  );
});
