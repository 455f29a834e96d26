import type { Pool as PgPool } from 'pg';
import { createPool, type Pool, type RowDataPacket } from 'mysql2/promise';
import { ipnRouter, type IpnNotification, type Logger } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { MysqlStore } from 'ipn-kit/mysql';
import { fastRetries } from '../helpers/fast-retries.js';
import { ledgerSchema } from '../helpers/ledger-schema.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { servedRouters } from '../helpers/servers.js';
import { describeWithService, eventually, mysqlUrl } from '../helpers/services.js';

jest.setTimeout(30_000);

/** What a listener gets as `db`, as these tests use it. */
interface Db {
  query(sql: string, values: unknown[]): Promise<unknown>;
}

/** One database under the pool seam: its router, and how to write and read its ledger. */
interface Side {
  router(options?: { leaseMs?: number; logger?: Logger }): ReturnType<typeof ipnRouter>;
  /** The ledger's insert of (transaction_id, order_id), and the same into a table that does not exist. */
  credit: string;
  missing: string;
  rowsOf(id: unknown): Promise<number>;
  entryOf(key: string): Promise<{ status: string; attempts: number } | undefined>;
}

/** A listener's `db`, as these tests use it (the router's own type of it depends on the store). */
const asDb = (db: unknown) => db as Db;
const keyOf = (payload: Record<string, unknown>) => `${String(payload.transaction_id)}:SUCCESSFUL`;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const unobserved = /a query a listener made through db failed, and nothing awaited it/;
const lateFor = (key: string) =>
  new RegExp(`after the delivery of ${key.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} ended was not run`);

/** The scenarios, for either database; `mysql`: a failed statement leaves the transaction going. */
function scenarios(side: () => Side, mysql: boolean): void {
  const serve = servedRouters();
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => void unhandled.push(reason);
  beforeAll(() => process.on('unhandledRejection', onUnhandled));
  afterAll(() => process.off('unhandledRejection', onUnhandled));
  afterEach(async () => {
    await sleep(50); // a rejection left unhandled is told a turn later
    expect(unhandled).toEqual([]);
  });

  /** Attempt 1 runs `first` (its credit failing, not awaited); later ones credit, awaited. */
  async function failsFirst(first: (db: Db, n: IpnNotification, missing: string) => void) {
    const { router, credit, missing, rowsOf, entryOf } = side();
    const { ipn, post } = await serve(router());
    const recorder = recordEvents(ipn);
    ipn.on('successful', async (n, { db, attempt }) => {
      if (attempt === 1) first(asDb(db), n, missing);
      else await asDb(db).query(credit, [n.transaction_id, 'credited']);
    });
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await eventually('delivered', async () => (await entryOf(keyOf(payload)))?.status === 'delivered');
    expect(await rowsOf(payload.transaction_id)).toBe(1);
    expect(await entryOf(keyOf(payload))).toMatchObject({ attempts: 2 });
    expect(recorder.of('error').map((event) => event.error.message)).toEqual([
      expect.stringMatching(unobserved),
    ]);
  }

  test('a failed credit chained with .then(f) and never awaited fails the attempt: one row after the retry', () =>
    failsFirst((db, n, missing) => {
      void db.query(missing, [n.transaction_id, 'lost']).then(() => 'credited');
    }));

  test('a failed credit chained with .finally(f) and never awaited fails the attempt: one row after the retry', () =>
    failsFirst((db, n, missing) => {
      void db.query(missing, [n.transaction_id, 'lost']).finally(() => {});
    }));

  test('a failed credit whose .finally callback never settles fails the attempt; the mark does not wait for it', () =>
    failsFirst((db, n, missing) => {
      void db.query(missing, [n.transaction_id, 'lost']).finally(() => new Promise(() => {}));
    }));

  if (mysql)
    test("a failed write awaited through .then(f) or .finally(f) and caught goes on in the transaction (MySQL's choice): delivered on the first attempt", async () => {
      const { router, credit, missing, rowsOf, entryOf } = side();
      const { ipn, post } = await serve(router());
      const recorder = recordEvents(ipn);
      ipn.on('successful', async (n, { db }) => {
        const on = asDb(db);
        try {
          await on.query(missing, [n.transaction_id, 'x']).then(() => 'done');
        } catch {
          // a write the listener may skip
        }
        await on
          .query(missing, [n.transaction_id, 'y'])
          .finally(() => {})
          .catch(() => {});
        await on.query(credit, [n.transaction_id, 'credited']);
      });
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await eventually('delivered', async () => (await entryOf(keyOf(payload)))?.status === 'delivered');
      expect(await rowsOf(payload.transaction_id)).toBe(1);
      expect(await entryOf(keyOf(payload))).toMatchObject({ attempts: 1 });
      expect(recorder.of('error')).toEqual([]);
    });

  test("a write through db after the delivery that nothing awaits is reported through 'error', naming the key; an awaited one is the listener's to hear", async () => {
    const { router, credit, rowsOf, entryOf } = side();
    const logged: string[] = [];
    // With an 'error' listener (recordEvents), the router logs what it reports at debug: both levels count.
    const log = (_: object, message: string) => void logged.push(message);
    const logger = { ...quiet, debug: log, error: log };
    const { ipn, post } = await serve(router({ logger }));
    const recorder = recordEvents(ipn);
    let kept: Db | undefined;
    ipn.on('successful', async (n, { db }) => {
      kept = asDb(db);
      await kept.query(credit, [n.transaction_id, 'credited']);
    });
    const payload = uniquePayload();
    const key = keyOf(payload);
    expect((await post(payload)).status).toBe(200);
    await eventually('delivered', async () => (await entryOf(key))?.status === 'delivered');

    // As a listener's setTimeout(() => db.query(...)) would, once its attempt was over.
    void kept!.query(credit, [payload.transaction_id, 'late']);
    void kept!.query(credit, [payload.transaction_id, 'late, then']).then(() => 'credited');
    await expect(kept!.query(credit, [payload.transaction_id, 'late, awaited'])).rejects.toThrow(/has ended/);

    await eventually('both unawaited late writes reported', () => recorder.count('error') >= 2);
    await sleep(50);
    expect(recorder.of('error').map((event) => event.error.message)).toEqual([
      expect.stringMatching(lateFor(key)),
      expect.stringMatching(lateFor(key)),
    ]);
    const lines = logged.filter((line) => !line.startsWith('stack:') && lateFor(key).test(line));
    expect(lines).toHaveLength(2);
    expect(await rowsOf(payload.transaction_id)).toBe(1);
  });

  // The second write is made once the first has answered: the mark is on its way, and refuses it. Its
  // refusal goes into what .then(...) derived, which settles after the mark looked for unobserved failures
  // and which nothing awaits: it was dropped with nothing said, the attempt delivered without it.
  test("a write chained as .then(() => db.query(...)) and never awaited, refused as the mark runs, is reported through 'error'", async () => {
    const { router, credit, rowsOf, entryOf } = side();
    const { ipn, post } = await serve(router());
    const recorder = recordEvents(ipn);
    ipn.on('successful', (n, { db }) => {
      const on = asDb(db);
      void on
        .query(credit, [n.transaction_id, 'first'])
        .then(() => on.query(credit, [n.transaction_id, 'second']));
    });
    const payload = uniquePayload();
    const key = keyOf(payload);
    expect((await post(payload)).status).toBe(200);
    await eventually('delivered', async () => (await entryOf(key))?.status === 'delivered');
    const messages = () => recorder.of('error').map((event) => String(event.error.message));
    await eventually('the refused write reported', () => messages().some((m) => lateFor(key).test(m)));
    await sleep(50);
    expect(messages()).toEqual([expect.stringMatching(lateFor(key))]);
    expect(await rowsOf(payload.transaction_id)).toBe(1);
  });

  // What .then(f) derives is watched (its failure marked handled, so no unhandled rejection): one that fails
  // once the mark looked, nothing awaiting it, was swallowed with nothing said, where without ipn-kit the
  // process would have heard of it.
  test("a .then(f) on a query, never awaited, whose f throws once the attempt was marked is reported through 'error'", async () => {
    const { router, credit, rowsOf, entryOf } = side();
    const { ipn, post } = await serve(router());
    const recorder = recordEvents(ipn);
    let release = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    ipn.on('successful', (n, { db }) => {
      void asDb(db)
        .query(credit, [n.transaction_id, 'credited'])
        .then(async () => {
          await released;
          throw new Error('a check of the listener failed');
        });
    });
    const payload = uniquePayload();
    const key = keyOf(payload);
    expect((await post(payload)).status).toBe(200);
    await eventually('delivered', async () => (await entryOf(key))?.status === 'delivered');
    release();
    await eventually('the failure reported', () => recorder.count('error') > 0);
    await sleep(50);
    expect(recorder.of('error').map((event) => String(event.error.message))).toEqual([
      expect.stringMatching(/a check of the listener failed/),
    ]);
    expect(await rowsOf(payload.transaction_id)).toBe(1);
  });

  test("a write through db that an abandoned attempt's listener makes once it was abandoned is reported through 'error'", async () => {
    const { router, credit, rowsOf, entryOf } = side();
    const { ipn, post } = await serve(router({ leaseMs: 500 }));
    const recorder = recordEvents(ipn);
    let release = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    ipn.on('successful', async (n, { db, attempt }) => {
      if (attempt === 1) {
        await released; // past leaseMs: the attempt is abandoned meanwhile
        void asDb(db).query(credit, [n.transaction_id, 'late']);
      } else await asDb(db).query(credit, [n.transaction_id, 'credited']);
    });
    const payload = uniquePayload();
    const key = keyOf(payload);
    expect((await post(payload)).status).toBe(200);
    await eventually('delivered', async () => (await entryOf(key))?.status === 'delivered');
    release();
    const messages = () => recorder.of('error').map((event) => String(event.error.message));
    await eventually('the late write reported', () => messages().some((m) => lateFor(key).test(m)));
    expect(await rowsOf(payload.transaction_id)).toBe(1);
  });
}

describeWithService('PostgreSQL', 'unobserved queries through db: PostgresStore', () => {
  const ledger = ledgerSchema('ipn_unobs');
  let pool: PgPool;
  beforeAll(() => {
    pool = ledger.pool();
  });
  scenarios(
    () => ({
      router: (options = {}) => ipnRouter({ store: new PostgresStore({ pool }), ...fastRetries, ...options }),
      credit: 'INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)',
      missing: 'INSERT INTO no_such_ledger (transaction_id, order_id) VALUES ($1, $2)',
      rowsOf: async (id) => (await ledger.ledgerOf(id)).length,
      entryOf: ledger.entryOf,
    }),
    false,
  );
});

describeWithService('MariaDB', 'unobserved queries through db: MysqlStore', () => {
  const suffix = `${process.pid}_${Date.now() % 100_000}`;
  const table = `ipn_unobs_${suffix}`;
  const ledger = `ledger_unobs_${suffix}`;
  let pool: Pool;
  beforeAll(async () => {
    pool = createPool({ uri: mysqlUrl(), connectionLimit: 6 });
    await new MysqlStore({ pool, table }).migrate();
    await pool.query(`CREATE TABLE ${ledger} (transaction_id VARCHAR(255) NOT NULL, order_id VARCHAR(255))`);
  });
  afterAll(async () => {
    await pool.query(`DROP TABLE IF EXISTS ${table}, ${table}_expected, ${ledger}`);
    await pool.end();
  });
  scenarios(
    () => ({
      router: (options = {}) =>
        ipnRouter({ store: new MysqlStore({ pool, table }), ...fastRetries, ...options }),
      credit: `INSERT INTO ${ledger} (transaction_id, order_id) VALUES (?, ?)`,
      missing: `INSERT INTO ${ledger}_missing (transaction_id, order_id) VALUES (?, ?)`,
      rowsOf: async (id) => {
        const [rows] = await pool.query<RowDataPacket[]>(
          `SELECT COUNT(*) AS n FROM ${ledger} WHERE transaction_id = ?`,
          [id],
        );
        return Number(rows[0]?.n);
      },
      entryOf: async (key) => {
        const [rows] = await pool.query<RowDataPacket[]>(
          `SELECT status, attempts FROM ${table} WHERE \`key\` = ?`,
          [key],
        );
        return rows[0] as { status: string; attempts: number } | undefined;
      },
    }),
    true,
  );
});
