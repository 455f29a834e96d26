import { randomUUID } from 'node:crypto';
import { createPool, type Pool, type RowDataPacket } from 'mysql2/promise';
import { ipnRouter, StoreError } from 'ipn-kit';
import { MysqlStore, mysqlMigrations, mysqlSchemaSql } from 'ipn-kit/mysql';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, postCopies, type Running } from '../helpers/servers.js';
import { describeWithService, eventually, mysqlUrl } from '../helpers/services.js';
import { CLEANUP_TIMEOUT_MS, dropMysqlInboxes } from '../helpers/drop-inboxes.js';

const HOUR = 60 * 60 * 1000;
const lease = (ms = 60_000) => ({ id: randomUUID(), ms });

describeWithService('MariaDB', 'MysqlStore', () => {
  // Two pools: two app instances, each with its own connections.
  let poolA: Pool;
  let poolB: Pool;
  const tables: string[] = [];
  const servers: Running[] = [];

  /** A table name no other test (of this file or another, in this process or another) uses. */
  function uniqueTable(): string {
    const table = `ipn_my_${process.pid}_${tables.length}_${randomUUID().slice(0, 8)}`;
    tables.push(table);
    return table;
  }

  async function freshStore(pool = poolA): Promise<MysqlStore<Pool>> {
    const store = new MysqlStore({ pool, table: uniqueTable() });
    await store.migrate();
    return store;
  }

  /** Runs SQL on the store's table: for setting times the store would take real time to reach. */
  const sql = (store: MysqlStore<Pool>, text: string, values: unknown[] = []) =>
    poolA.query(text.replaceAll('$table', `\`${store.table}\``), values);

  /** Ends the lease of `key` as if it had run out. */
  const expireLease = (store: MysqlStore<Pool>, key: string) =>
    sql(store, 'UPDATE $table SET lease_until = UTC_TIMESTAMP(3) - INTERVAL 1 SECOND WHERE `key` = ?', [key]);

  let sequence = 0;
  const uniqueKey = (state = 'SUCCESSFUL') => `TX.${process.pid}.${(sequence += 1)}:${state}`;
  const recordOf = (key: string) => ({
    transaction_id: key.split(':')[0],
    amount: 1000,
    nested: { ok: true },
  });

  beforeAll(() => {
    poolA = createPool({ uri: mysqlUrl(), connectionLimit: 5 });
    poolB = createPool({ uri: mysqlUrl(), connectionLimit: 5 });
  });

  afterEach(async () => {
    await Promise.all(servers.splice(0).map((server) => server.close()));
  });

  afterAll(async () => {
    await dropMysqlInboxes(poolA, tables);
    await Promise.all([poolA.end(), poolB.end()]);
  }, CLEANUP_TIMEOUT_MS);

  describe('migrate', () => {
    test('creates both tables, and running it again changes nothing', async () => {
      const store = new MysqlStore({ pool: poolA, table: uniqueTable() });

      await store.migrate();
      await store.claim(uniqueKey(), 1000);
      await store.migrate();

      const [rows] = await poolA.query<RowDataPacket[]>(
        'SELECT column_name AS name FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? ORDER BY ordinal_position',
        [store.table],
      );
      expect(rows.map((row) => row.name)).toEqual([
        'key',
        'transaction_id',
        'state',
        'record',
        'custom_data',
        'status',
        'attempts',
        'last_error',
        'received_at',
        'updated_at',
        'next_attempt_at',
        'delivered_at',
        'lease_id',
        'lease_until',
      ]);
      // The claim is a row of <table>_claims (schema version 7), not an entry of the inbox.
      expect(await store.list()).toHaveLength(0);
      const [claims] = await poolA.query<RowDataPacket[]>(
        `SELECT COUNT(*) AS n FROM \`${store.table}_claims\``,
      );
      expect(Number(claims[0]?.n)).toBe(1);
      await store.expectations.put({ transactionId: 'T1', expectedAt: 1, dueAt: 2, attempts: 0 });
      expect(await store.expectations.get('T1')).toMatchObject({ transactionId: 'T1', dueAt: 2 });
    });

    test('run from two pools at once on a new table, five times over, succeeds in both', async () => {
      for (let round = 0; round < 5; round += 1) {
        const table = uniqueTable();
        const stores = [new MysqlStore({ pool: poolA, table }), new MysqlStore({ pool: poolB, table })];

        await Promise.all([...stores, ...stores].map((store) => store.migrate()));

        expect(await stores[0]!.claim(uniqueKey(), 1000)).toBe(true);
      }
    });

    test('accepts a database-qualified table', async () => {
      const [rows] = await poolA.query<RowDataPacket[]>('SELECT DATABASE() AS name');
      const table = uniqueTable();
      const store = new MysqlStore({ pool: poolA, table: `${String(rows[0]?.name)}.${table}` });

      await store.migrate();

      const key = uniqueKey();
      expect(await store.claim(key, 1000)).toBe(true);
      expect(await new MysqlStore({ pool: poolA, table }).claim(key, 1000)).toBe(false);
    });

    test('mysqlMigrations(), run by a tool of your own (each version once), is the schema the store needs', async () => {
      const table = uniqueTable();
      for (const { statements } of mysqlMigrations(table)) {
        for (const statement of statements) await poolA.query(statement);
      }
      const store = new MysqlStore({ pool: poolA, table });

      expect(await store.receive(uniqueKey(), { a: 1 }, lease())).toBe(true);
      await store.expectations.put({ transactionId: 'T1', expectedAt: 1, dueAt: 2, attempts: 0 });
    });

    test('the table refuses a key that is not transaction_id:state, and an unknown status', async () => {
      const store = await freshStore();
      const insert = (key: string, status: string) =>
        sql(
          store,
          `INSERT INTO $table (\`key\`, transaction_id, state, record, status, received_at, updated_at, next_attempt_at)
           VALUES (?, 'TX', 'SUCCESSFUL', '{"n":1}', ?, UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3))`,
          [key, status],
        );

      await expect(insert('TX:FAILED', 'received')).rejects.toThrow(/CONSTRAINT/i);
      await expect(insert('TX:SUCCESSFUL', 'lost')).rejects.toThrow(/CONSTRAINT/i);
      await insert('TX:SUCCESSFUL', 'received'); // the row itself is one the table takes
    });

    test('a store on a table that was never created says to migrate, as a StoreError with notMigrated', async () => {
      const store = new MysqlStore({ pool: poolA, table: uniqueTable() });

      const failure = await store.claim(uniqueKey(), 1000).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(StoreError);
      expect(failure).toMatchObject({ notMigrated: true });
      expect((failure as Error).message).toMatch(/does not exist: run `await store\.migrate\(\)`/);
      await expect(store.lease(lease(), 10)).rejects.toMatchObject({ notMigrated: true });
      await expect(store.expectations.takeDue(Date.now(), Date.now(), 5)).rejects.toMatchObject({
        notMigrated: true,
      });
    });

    test('migrate refuses a pool whose sessions have NO_BACKSLASH_ESCAPES, naming it', async () => {
      const pool = createPool({ uri: mysqlUrl(), connectionLimit: 1 });
      pool.on(
        'connection',
        (connection) => void connection.query("SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES'"),
      );
      try {
        await expect(new MysqlStore({ pool, table: uniqueTable() }).migrate()).rejects.toThrow(
          /sql_mode has NO_BACKSLASH_ESCAPES/,
        );
      } finally {
        await pool.end();
      }
    });

    test('a query that finds no table while migrate() runs waits for it, then runs', async () => {
      const store = new MysqlStore({ pool: poolA, table: uniqueTable() });

      const [migrated, leased] = await Promise.all([store.migrate(), store.lease(lease(), 10)]);

      expect(migrated).toBeUndefined();
      expect(leased).toEqual([]);
    });
  });

  describe('as a dedupe store (claim)', () => {
    test('a claim answers true once, then false; its row is in <table>_claims, not in the inbox', async () => {
      const store = await freshStore();
      const key = 'EFB.12:34:SUCCESSFUL'; // the transaction id holds a ':'; the state never does

      expect(await store.claim(key, 1000)).toBe(true);
      expect(await store.claim(key, 1000)).toBe(false);

      expect(await store.get(key)).toBeUndefined();
      const [rows] = await poolA.query<RowDataPacket[]>(
        `SELECT \`key\`, claimed_at IS NOT NULL AS stamped FROM \`${store.table}_claims\``,
      );
      expect(rows.map((row) => ({ ...row, stamped: Number(row.stamped) }))).toEqual([{ key, stamped: 1 }]);
    });

    test('keys differing only in case are different notifications', async () => {
      const store = await freshStore();

      expect(await store.claim('tx.1:SUCCESSFUL', 1000)).toBe(true);
      expect(await store.claim('TX.1:SUCCESSFUL', 1000)).toBe(true);
    });

    test('the same claim asked twice (its answer was lost) answers true again; another claim answers false', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      expect(await store.claim(key, 1000, 'token-1')).toBe(true);
      expect(await store.claim(key, 1000, 'token-1')).toBe(true);
      expect(await store.claim(key, 1000, 'token-2')).toBe(false);
    });

    test('50 concurrent claims of one key from two pools: exactly one answers true', async () => {
      const a = await freshStore();
      const b = new MysqlStore({ pool: poolB, table: a.table });
      const key = uniqueKey();

      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) => (i % 2 ? a : b).claim(key, 1000)),
      );

      expect(results.filter((result) => result === true)).toHaveLength(1);
    });

    test('release deletes the row, so the next claim succeeds', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      await store.claim(key, 1000);

      await store.release(key);

      expect(await store.get(key)).toBeUndefined();
      expect(await store.claim(key, 1000)).toBe(true);
    });

    test('a key without a state, or too long for the table, is refused with a TypeError', async () => {
      const store = await freshStore();

      await expect(store.claim('no-colon', 1000)).rejects.toThrow(TypeError);
      await expect(store.claim(`${'x'.repeat(300)}:SUCCESSFUL`, 1000)).rejects.toThrow(TypeError);
    });
  });

  describe('as a durable inbox', () => {
    test('receive stores the record leased; receiving the key again answers false and changes nothing', async () => {
      const store = await freshStore();
      const key = uniqueKey();

      expect(await store.receive(key, recordOf(key), lease())).toBe(true);
      expect(await store.receive(key, { other: true }, lease())).toBe(false);

      const entry = await store.get(key);
      expect(entry).toMatchObject({
        status: 'received',
        attempts: 1,
        record: recordOf(key),
        lastError: null,
      });
      expect(entry!.leaseUntil!.getTime()).toBeGreaterThan(entry!.receivedAt.getTime());
      expect(await store.lease(lease(), 10)).toEqual([]); // still leased by the receive
    });

    test("times are the database's UTC clock, whatever the session's time zone", async () => {
      const pool = createPool({ uri: mysqlUrl(), connectionLimit: 2, timezone: '+05:00' });
      try {
        await pool.query("SET time_zone = '-07:00'"); // one connection's session, whichever it is
        const store = new MysqlStore({ pool, table: (await freshStore()).table });
        const key = uniqueKey();
        const before = Date.now();
        await store.receive(key, recordOf(key), lease());
        const entry = (await store.get(key))!;
        // Within a minute of this machine's clock (the database's may differ a little), not hours off.
        expect(Math.abs(entry.receivedAt.getTime() - before)).toBeLessThan(60_000);
        const next = new Date(Date.now() + HOUR);
        expect(await store.lease(lease(), 1)).toEqual([]); // leased by its receive, in the database's time
        const held = lease();
        const other = uniqueKey();
        await store.receive(other, recordOf(other), held);
        await store.settle(other, held.id, { status: 'failed', error: 'x', nextAttemptAt: next });
        expect((await store.get(other))!.nextAttemptAt.getTime()).toBe(next.getTime());
        expect((await store.list({ receivedFrom: new Date(before - 60_000) })).length).toBe(2);
      } finally {
        await pool.end();
      }
    });

    test('receives that arrive together go as a few statements (group commit): each key inserted once, only one of its callers told so', async () => {
      const table = (await freshStore()).table;
      let inserts = 0;
      const counting = {
        query: (text: string, values?: unknown[]) => {
          if (text.startsWith('INSERT')) inserts += 1;
          return poolA.query(text, values);
        },
        getConnection: () => poolA.getConnection(),
      };
      const store = new MysqlStore({ pool: counting, table });
      const before = uniqueKey();
      await store.receive(before, recordOf(before), lease());
      inserts = 0;
      const keys = [before, ...Array.from({ length: 9 }, () => uniqueKey())];

      const answers = await Promise.all(
        [...keys, ...keys, ...keys].map((key, index) =>
          store.receive(key, { ...recordOf(key), index }, lease()),
        ),
      );

      expect(inserts).toBeLessThan(30);
      const told = keys.map(
        (key) => answers.filter((answer, index) => answer && keys[index % 10] === key).length,
      );
      expect(told).toEqual([0, 1, 1, 1, 1, 1, 1, 1, 1, 1]); // the first key was there before
      for (const [index, key] of keys.entries()) {
        if (index === 0) continue;
        const entry = await store.get(key);
        // The record stored is the one of the caller told true.
        const winner = answers.findIndex((answer, at) => answer && keys[at % 10] === key);
        expect(entry).toMatchObject({ status: 'received', attempts: 1, record: { index: winner } });
      }
    });

    test('replace swaps the record held by a lease for another in one statement, due and leased anew', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      const forged = lease();
      await store.receive(key, { ...recordOf(key), amount: 1 }, forged);
      await sql(store, "UPDATE $table SET attempts = 3, last_error = 'x' WHERE `key` = ?", [key]);
      const next = lease();

      expect(await store.replace(key, 'another-lease', recordOf(key), next)).toBe(false);
      expect((await store.get(key))?.record).toMatchObject({ amount: 1 });
      expect(await store.replace(key, forged.id, recordOf(key), next)).toBe(true);

      expect(await store.get(key)).toMatchObject({
        record: recordOf(key),
        status: 'received',
        attempts: 1,
        lastError: null,
      });
      expect(await store.settle(key, forged.id, { status: 'delivered' })).toBe(false);
      expect(await store.settle(key, next.id, { status: 'delivered' })).toBe(true);
    });

    test('release with a lease deletes the entry only while that lease holds it', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      const held = lease();
      await store.receive(key, recordOf(key), held);

      await store.release(key, 'a-lost-lease');
      expect(await store.get(key)).toBeDefined();
      await store.release(key, held.id);
      expect(await store.get(key)).toBeUndefined();

      await store.receive(key, recordOf(key), lease());
      await store.release(key);
      expect(await store.get(key)).toBeUndefined();
    });

    test('lease takes due entries whose lease ran out, oldest first, and counts an attempt', async () => {
      const store = await freshStore();
      const keys = [uniqueKey(), uniqueKey(), uniqueKey()];
      for (const key of keys) await store.receive(key, recordOf(key), lease());
      await expireLease(store, keys[0]!);
      await expireLease(store, keys[2]!);

      const entries = await store.lease(lease(), 10);

      expect(entries.map((entry) => entry.key)).toEqual([keys[0], keys[2]]);
      expect(entries.map((entry) => entry.attempts)).toEqual([2, 2]);
      expect(entries[0]!.record).toEqual(recordOf(keys[0]!));
      expect(entries[0]!.leaseUntil).toBeInstanceOf(Date);
      expect(await store.lease(lease(), 10)).toEqual([]);
    });

    test('lease takes at most limit entries', async () => {
      const store = await freshStore();
      for (let i = 0; i < 5; i += 1) {
        const key = uniqueKey();
        await store.receive(key, recordOf(key), lease());
        await expireLease(store, key);
      }

      expect(await store.lease(lease(), 2)).toHaveLength(2);
      expect(await store.lease(lease(), 0)).toEqual([]);
      expect(await store.lease(lease(), 10)).toHaveLength(3);
      await expect(store.lease(lease(), 1.5)).rejects.toThrow(TypeError);
    });

    test('concurrent leases from two pools never return the same key', async () => {
      const a = await freshStore();
      const b = new MysqlStore({ pool: poolB, table: a.table });
      const keys = Array.from({ length: 40 }, () => uniqueKey());
      for (const key of keys) await a.receive(key, recordOf(key), lease());
      await sql(a, 'UPDATE $table SET lease_until = UTC_TIMESTAMP(3) - INTERVAL 1 SECOND');

      const batches = await Promise.all(
        Array.from({ length: 6 }, (_, i) => (i % 2 ? a : b).lease(lease(), 10)),
      );

      const leased = batches.flat().map((entry) => entry.key);
      expect(new Set(leased).size).toBe(leased.length);
      expect(leased.sort()).toEqual([...keys].sort());
    });

    test('a lease that ran out is taken again, with one more attempt', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      await store.receive(key, recordOf(key), lease(1));
      await eventually('the 1 ms lease ran out', async () => (await store.lease(lease(), 10)).length === 1);

      expect(await store.get(key)).toMatchObject({ attempts: 2 });
    });

    test('settle with a lease that was lost answers false and changes nothing', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      const stale = lease();
      await store.receive(key, recordOf(key), stale);
      await expireLease(store, key);
      const [current] = await store.lease(lease(), 10);

      expect(await store.settle(key, stale.id, { status: 'delivered' })).toBe(false);
      expect(await store.get(key)).toMatchObject({ status: 'received', attempts: 2, deliveredAt: null });
      expect(current).toBeDefined();
    });

    test('settle delivered: marked delivered, lease cleared, never leased again', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      const held = lease();
      await store.receive(key, recordOf(key), held);

      expect(await store.settle(key, held.id, { status: 'delivered' })).toBe(true);

      expect(await store.get(key)).toMatchObject({
        status: 'delivered',
        leaseUntil: null,
        deliveredAt: expect.any(Date),
      });
      await expireLease(store, key);
      expect(await store.lease(lease(), 10)).toEqual([]);
      expect(await store.settle(key, held.id, { status: 'delivered' })).toBe(false);
    });

    test('settle failed: kept with its error, and leased again only once it is due', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      const held = lease();
      await store.receive(key, recordOf(key), held);
      const nextAttemptAt = new Date(Date.now() + HOUR);

      expect(
        await store.settle(key, held.id, { status: 'failed', error: 'listener threw', nextAttemptAt }),
      ).toBe(true);

      const entry = await store.get(key);
      expect(entry).toMatchObject({ status: 'failed', lastError: 'listener threw', leaseUntil: null });
      expect(entry!.nextAttemptAt.getTime()).toBe(nextAttemptAt.getTime());
      expect(await store.lease(lease(), 10)).toEqual([]);

      await sql(
        store,
        'UPDATE $table SET next_attempt_at = UTC_TIMESTAMP(3) - INTERVAL 1 SECOND WHERE `key` = ?',
        [key],
      );
      const [due] = await store.lease(lease(), 10);
      expect(due).toMatchObject({ key, status: 'failed', attempts: 2, lastError: 'listener threw' });
    });

    test('settle with a very long error keeps its start, and still settles', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      const held = lease();
      await store.receive(key, recordOf(key), held);

      expect(await store.settle(key, held.id, { status: 'dead', error: `boom ${'x'.repeat(100_000)}` })).toBe(
        true,
      );
      expect((await store.get(key))?.lastError).toMatch(/^boom x+\.\.\.$/);
    });

    test('replayDead makes every dead entry due now, attempts reset, error kept; it counts them', async () => {
      const store = await freshStore();
      const dead = [uniqueKey(), uniqueKey()];
      for (const key of dead) {
        const held = lease();
        await store.receive(key, recordOf(key), held);
        await store.settle(key, held.id, { status: 'dead', error: 'gave up' });
      }
      const alive = uniqueKey();
      await store.receive(alive, recordOf(alive), lease());

      expect(await store.replayDead()).toBe(2);

      const entries = await store.lease(lease(), 10);
      expect(entries.map((entry) => entry.key)).toEqual(dead);
      expect(entries.map((entry) => [entry.status, entry.attempts, entry.lastError])).toEqual([
        ['received', 1, 'gave up'],
        ['received', 1, 'gave up'],
      ]);
      expect(await store.replayDead()).toBe(0);
    });

    test('replay makes one entry of any status due now; keeps a live lease; skips a claim row', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      const held = lease();
      await store.receive(key, recordOf(key), held);
      await store.settle(key, held.id, {
        status: 'failed',
        error: 'boom',
        nextAttemptAt: new Date(Date.now() + HOUR),
      });

      expect(await store.replay(key)).toBe(true);
      expect(await store.replay(uniqueKey())).toBe(false);
      expect(await store.get(key)).toMatchObject({ status: 'received', attempts: 0, lastError: 'boom' });
      const [due] = await store.lease(lease(), 10);
      expect(due).toMatchObject({ key, attempts: 1 });

      const running = uniqueKey();
      const live = lease();
      await store.receive(running, recordOf(running), live);
      expect(await store.replay(running)).toBe(true);
      expect(await store.lease(lease(), 10)).toEqual([]); // the live lease is kept
      expect(await store.settle(running, live.id, { status: 'delivered' })).toBe(true);

      const claimed = uniqueKey();
      await store.claim(claimed, 1000);
      expect(await store.replay(claimed)).toBe(false);
    });

    test('list filters by status, transaction, text in custom_data and dates, pages; countByStatus counts', async () => {
      const store = await freshStore();
      const keys = Array.from({ length: 4 }, () => uniqueKey());
      for (const [index, key] of keys.entries()) {
        const held = lease();
        await store.receive(key, { ...recordOf(key), custom_data: `Order-${index}` }, held);
        if (index === 3) await store.settle(key, held.id, { status: 'dead', error: 'gave up' });
      }
      for (const [index, key] of keys.entries()) {
        await sql(
          store,
          'UPDATE $table SET received_at = UTC_TIMESTAMP(3) - INTERVAL ? HOUR WHERE `key` = ?',
          [3 - index, key],
        );
      }
      const keysOf = (entries: Array<{ key: string }>) => entries.map((entry) => entry.key);
      const idOf = (key: string) => key.split(':')[0] as string;

      expect(keysOf(await store.list())).toEqual(keys);
      expect(keysOf(await store.list({ status: 'dead' }))).toEqual([keys[3]]);
      expect(keysOf(await store.list({ limit: 2, offset: 1 }))).toEqual([keys[1], keys[2]]);
      expect(keysOf(await store.list({ transactionId: idOf(keys[2]!) }))).toEqual([keys[2]]);
      expect(keysOf(await store.list({ customDataContains: 'order-1' }))).toEqual([keys[1]]);
      expect(keysOf(await store.list({ customDataContains: '%' }))).toEqual([]);
      expect(keysOf(await store.list({ order: 'newest' }))).toEqual([...keys].reverse());
      const twoHoursAgo = new Date(Date.now() - 2 * HOUR - 60_000);
      const anHourAgo = new Date(Date.now() - HOUR + 60_000);
      expect(keysOf(await store.list({ receivedFrom: twoHoursAgo, receivedBefore: anHourAgo }))).toEqual([
        keys[1],
        keys[2],
      ]);
      expect(await store.countByStatus()).toEqual({ received: 3, delivered: 0, failed: 0, dead: 1 });
      expect(await store.countByStatus(anHourAgo)).toEqual({ received: 0, delivered: 0, failed: 0, dead: 1 });
      await expect(store.list({ status: 'lost' as never })).rejects.toThrow(TypeError);
      await expect(store.list({ order: 'random' as never })).rejects.toThrow(TypeError);
      await expect(store.list({ limit: -1 })).rejects.toThrow(TypeError);
    });

    test('get returns the whole entry, with dates as Date; undefined when missing', async () => {
      const store = await freshStore();
      const key = uniqueKey('FAILED');
      await store.receive(key, recordOf(key), lease());

      expect(await store.get(key)).toEqual({
        key,
        transactionId: key.split(':')[0],
        state: 'FAILED',
        record: recordOf(key),
        status: 'received',
        attempts: 1,
        lastError: null,
        receivedAt: expect.any(Date),
        updatedAt: expect.any(Date),
        nextAttemptAt: expect.any(Date),
        deliveredAt: null,
        leaseUntil: expect.any(Date),
      });
      expect(await store.get(uniqueKey())).toBeUndefined();
    });

    test('purge deletes delivered entries delivered before the date, and nothing else', async () => {
      const store = await freshStore();
      const [old, recent, pending] = [uniqueKey(), uniqueKey(), uniqueKey()];
      for (const key of [old, recent, pending]) {
        const held = lease();
        await store.receive(key, recordOf(key), held);
        if (key !== pending) await store.settle(key, held.id, { status: 'delivered' });
      }
      await sql(store, 'UPDATE $table SET delivered_at = UTC_TIMESTAMP(3) - INTERVAL 2 DAY WHERE `key` = ?', [
        old,
      ]);

      expect(await store.purge(new Date(Date.now() - 24 * HOUR))).toBe(1);

      expect(await store.get(old)).toBeUndefined();
      expect((await store.list()).map((entry) => entry.key).sort()).toEqual([recent, pending].sort());
      expect(await store.receive(old, recordOf(old), lease())).toBe(true);
      await expect(store.purge(new Date('nope'))).rejects.toThrow(TypeError);
    });
  });

  describe('odd values', () => {
    test.each([
      ['a NUL', 'order\u0000-7'],
      ['a lone surrogate (half an emoji)', 'Awa \ud83d'],
      ['a lone low surrogate and a whole emoji', '\ude00 \ud83d\ude00'],
      ['4-byte characters', '𝄞 🇸🇳 👩🏾‍💻'],
      ['quotes and backslashes', `'"\\n\\\\ \`; DROP TABLE x; --`],
    ])('a record holding %s in a string round-trips exactly, and stays searchable', async (_what, text) => {
      const store = await freshStore();
      const key = uniqueKey();
      const record = { ...recordOf(key), custom_data: `order ${text}`, [`k${text}`]: [text, { text }] };

      expect(await store.receive(key, record, lease())).toBe(true);

      expect((await store.get(key))?.record).toEqual(record);
      expect((await store.list({ customDataContains: 'ORDER' })).map((e) => e.key)).toEqual([key]);
    });

    test("a record written through a pool of MySQL's 3-byte utf8 charset reads exactly through utf8mb4, and SQL's JSON functions read it", async () => {
      const narrow = createPool({ uri: mysqlUrl(), connectionLimit: 1, charset: 'utf8' });
      try {
        const wide = await freshStore();
        const store = new MysqlStore({ pool: narrow, table: wide.table });
        const key = uniqueKey();
        const record = { ...recordOf(key), custom_data: 'Ndèye 😀 \u0000' };

        expect(await store.receive(key, record, lease())).toBe(true);

        expect((await wide.get(key))?.record).toEqual(record);
        expect((await store.get(key))?.record).toEqual(record);
        const [rows] = await poolA.query<RowDataPacket[]>(
          `SELECT JSON_VALUE(record, '$.amount') AS amount, JSON_VALUE(record, '$.custom_data') AS custom_data FROM \`${wide.table}\``,
        );
        expect(rows.map((row) => ({ ...row }))).toEqual([
          { amount: '1000', custom_data: record.custom_data },
        ]);
      } finally {
        await narrow.end();
      }
    });

    test('numbers round-trip as JavaScript read them: above 2^53, tiny, huge, negative zero aside', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      const record = { ...recordOf(key), big: 2 ** 53 + 2, huge: 1e21, tiny: 5e-324, list: [-1.5, 0] };

      await store.receive(key, record, lease());

      expect((await store.get(key))?.record).toEqual(record);
    });

    test('a custom_data of 600,000 characters (2 MB of UTF-8) is stored and read whole', async () => {
      const store = await freshStore();
      const key = uniqueKey();
      const record = { ...recordOf(key), custom_data: 'é😀'.repeat(200_000) };

      expect(await store.receive(key, record, lease())).toBe(true);

      expect((await store.get(key))?.record).toEqual(record);
    });

    test.each([
      ['a NUL', '\\u0000'],
      ['a lone surrogate', '\\ud83d'],
      ['an emoji', '\\ud83d\\ude00'],
    ])(
      'at least once, a notification with %s in its text fields is answered 200 and delivered once with the exact strings',
      async (_what, escape) => {
        const store = await freshStore();
        const ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet });
        const received: Array<Record<string, unknown>> = [];
        ipn.on('successful', (n) => void received.push({ ...n }));
        const running = await listen(ipn);
        servers.push(running);
        const payload = uniquePayload({ custom_data: 'order-1', customer_name: 'Awa' });
        const body = JSON.stringify(payload)
          .replace('"order-1"', `"order${escape}-1"`)
          .replace('"Awa"', `"Awa ${escape}"`);
        const post = () =>
          fetch(running.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });

        expect((await post()).status).toBe(200);
        expect(await (await post()).json()).toEqual({ ok: true, duplicate: true });
        const exact = JSON.parse(body) as Record<string, unknown>;
        const key = `${String(payload.transaction_id)}:SUCCESSFUL`;
        await eventually('delivered', async () => (await store.get(key))?.status === 'delivered');
        expect(received).toHaveLength(1);
        expect(received[0]).toMatchObject({
          custom_data: exact.custom_data,
          customer_name: exact.customer_name,
        });
        await ipn.close();
      },
    );
  });

  describe('expectations', () => {
    test('put, get, delete; put again replaces', async () => {
      const { expectations } = await freshStore();
      const e = {
        transactionId: 'T1',
        customData: 'order 🇸🇳',
        amount: 1500.5,
        expectedAt: 1,
        dueAt: 10,
        attempts: 0,
      };

      await expectations.put(e);
      expect(await expectations.get('T1')).toEqual(e);
      await expectations.put({ ...e, amount: undefined, customData: undefined, attempts: 2 });
      expect(await expectations.get('T1')).toEqual({
        ...e,
        amount: undefined,
        customData: undefined,
        attempts: 2,
      });
      await expectations.delete('T1');
      expect(await expectations.get('T1')).toBeUndefined();
    });

    test('takeDue from two pools at once never takes the same one twice, and moves each', async () => {
      const a = await freshStore();
      const b = new MysqlStore({ pool: poolB, table: a.table });
      const now = Date.now();
      for (let i = 0; i < 30; i += 1) {
        await a.expectations.put({ transactionId: `T${i}`, expectedAt: now, dueAt: now - i, attempts: 0 });
      }
      await a.expectations.put({ transactionId: 'LATER', expectedAt: now, dueAt: now + HOUR, attempts: 0 });

      const batches = await Promise.all(
        Array.from({ length: 6 }, (_, i) => (i % 2 ? a : b).expectations.takeDue(now, now + HOUR, 10)),
      );

      const taken = batches.flat();
      expect(new Set(taken.map((e) => e.transactionId)).size).toBe(30);
      expect(taken.every((e) => e.dueAt === now + HOUR && e.attempts === 1)).toBe(true);
      expect(await a.expectations.get('T3')).toMatchObject({ dueAt: now + HOUR, attempts: 1 });
      expect(await a.expectations.takeDue(now, now + HOUR, 10)).toEqual([]);
    });

    test("the sweep's lock: one owner at a time, extended by its owner, taken over once it ran out", async () => {
      const a = await freshStore();
      const b = new MysqlStore({ pool: poolB, table: a.table });

      const first = await Promise.all([
        a.expectations.lockSweep('A', 60_000),
        b.expectations.lockSweep('B', 60_000),
      ]);
      expect(first.filter(Boolean)).toHaveLength(1);
      const [owner, other] = first[0] ? ['A', 'B'] : ['B', 'A'];
      expect(await a.expectations.lockSweep(owner, 60_000)).toBe(true);
      expect(await a.expectations.lockSweep(other, 60_000)).toBe(false);
      expect(await a.expectations.get('')).toBeUndefined(); // the lock row is no expectation

      await a.expectations.lockSweep(owner, 1);
      await eventually('the 1 ms lock ran out and another owner took it', () =>
        a.expectations.lockSweep(other, 60_000),
      );
      await a.expectations.unlockSweep(owner); // no longer its: changes nothing
      expect(await a.expectations.lockSweep(owner, 60_000)).toBe(false);
      await a.expectations.unlockSweep(other);
      expect(await a.expectations.lockSweep(owner, 60_000)).toBe(true);
    });
  });

  test('two app instances sharing the table deliver 20 concurrent copies exactly once, and record the key', async () => {
    const table = (await freshStore()).table;
    async function instance(pool: Pool) {
      const ipn = ipnRouter({ store: new MysqlStore({ pool, table }), logger: quiet });
      const running = await listen(ipn);
      servers.push(running);
      return { recorder: recordEvents(ipn), url: running.url };
    }
    const a = await instance(poolA);
    const b = await instance(poolB);
    const payload = uniquePayload();

    const statuses = await postCopies([b.url, a.url], payload, 20);

    expect(statuses).toEqual(Array(20).fill(200));
    expect(a.recorder.count('successful') + b.recorder.count('successful')).toBe(1);
    expect(a.recorder.count('duplicate') + b.recorder.count('duplicate')).toBe(19);
    const [rows] = await poolA.query<RowDataPacket[]>(`SELECT \`key\` FROM \`${table}_claims\``);
    expect(rows.map((row) => ({ ...row }))).toEqual([
      { key: `${String(payload.transaction_id)}:SUCCESSFUL` },
    ]);
  });
});

describe('MysqlStore construction', () => {
  const pool = {
    query: () => Promise.resolve([[], []] as [unknown, unknown]),
    getConnection: () => Promise.reject(new Error('no')),
  };

  test.each([
    'bad-name',
    'a.b.c',
    '`quoted`',
    '',
    '1table',
    'inbox; DROP TABLE users',
    'db.',
    'x'.repeat(65),
  ])('throws a TypeError for the table name %j', (table) => {
    expect(() => new MysqlStore({ pool, table })).toThrow(TypeError);
    expect(() => mysqlSchemaSql(table)).toThrow(TypeError);
  });

  test("the table defaults to 'ipn_inbox', and the store says it is durable", () => {
    const store = new MysqlStore({ pool });
    expect(store.table).toBe('ipn_inbox');
    expect(store.durable).toBe(true);
  });

  test.each([
    ['no options', undefined],
    ['no pool', {}],
    ['a pool without getConnection()', { pool: { query: () => {} } }],
    ['a connection string instead of a pool', { pool: 'mysql://localhost/db' }],
  ])('throws a TypeError for %s', (_case, options) => {
    expect(() => new MysqlStore(options as never)).toThrow(/pool must be a mysql2 promise pool/);
  });

  test('a pool of the callback API is refused with the fix', () => {
    const callbackPool = { ...pool, promise: () => pool };
    expect(() => new MysqlStore({ pool: callbackPool })).toThrow(/pass pool\.promise\(\)/);
  });

  test('transactions that are not a Transactions are refused', () => {
    expect(() => new MysqlStore({ pool, transactions: {} as never })).toThrow(/transactions must come from/);
  });
});
