import type { Pool, PoolClient } from 'pg';
import { ipnRouter, type IpnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { servedRouters } from '../helpers/servers.js';
import { ledgerSchema } from '../helpers/ledger-schema.js';
import { describeWithService, eventually } from '../helpers/services.js';

jest.setTimeout(30_000);

/** How many deliveries each test makes due together. */
const GROUP = 4;

/** A fault on the client's next `COMMIT` (alone, or at the end of the last member's mark). */
type CommitFault = 'answer-lost' | 'never-sent';

describeWithService('PostgreSQL', 'group transactions: PostgresStore groupDeliveries', () => {
  const ledger = ledgerSchema('ipn_group', [
    // Deferred: a second row of one key fails the COMMIT, not the statement (a failure outside any savepoint).
    'CREATE TABLE once (k text UNIQUE DEFERRABLE INITIALLY DEFERRED)',
  ]);
  const { keyOf, entryOf } = ledger;
  const serve = servedRouters();

  /**
   * A pool whose clients' next group COMMIT fails once, as `fault` says (none: no fault): `answer-lost` runs
   * it, then fails as a dropped connection does; `never-sent` fails before sending it.
   */
  const faultyPool = (fault?: CommitFault): { pool: Pool; fired: () => boolean } => {
    const pool = ledger.newPool(8);
    let fired = false;
    pool.on('connect', (client: PoolClient) => {
      const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
      Object.assign(client, {
        query: async (...args: unknown[]) => {
          const text = args[0];
          if (fault === undefined || fired || typeof text !== 'string' || !/\bCOMMIT$/.test(text)) {
            return query(...args);
          }
          fired = true;
          if (fault === 'answer-lost') await query(...args);
          throw new Error(`COMMIT: connection reset (injected fault: ${fault})`);
        },
      });
    });
    return { pool, fired: () => fired };
  };

  /** A router over `pool` grouping every delivery in one lane, with fast retries and a quiet logger. */
  const router = (pool: Pool, options: { storeTimeoutMs?: number; leaseMs?: number } = {}) =>
    ipnRouter({
      store: new PostgresStore({ pool, groupDeliveries: { lanes: 1, size: GROUP } }),
      delivery: 'at-least-once',
      logger: quiet,
      retryDelayMs: 20,
      recoveryIntervalMs: 50,
      ...options,
    });

  /**
   * Listeners that start together: each waits until every payment's listener has started, so that their
   * first queries through `db` come due together and form one group; then `work` runs for each.
   */
  const together = (
    ipn: IpnRouter<any>,
    work: (
      n: { transaction_id: string; custom_data: unknown },
      db: PoolClient,
      attempt: number,
    ) => Promise<void>,
  ) => {
    let started = 0;
    let go: () => void = () => {};
    const all = new Promise<void>((resolve) => {
      go = resolve;
    });
    const xids = new Map<string, string>();
    ipn.on('successful', async (n, { db, attempt }) => {
      started += 1;
      if (started === GROUP) go();
      await all;
      const client = db as unknown as PoolClient;
      const { rows } = await client.query<{ xid: string }>('SELECT txid_current()::text AS xid');
      if (!xids.has(n.transaction_id)) xids.set(n.transaction_id, rows[0]!.xid);
      await work(n, client, attempt);
    });
    return xids;
  };

  const credit = (n: { transaction_id: string; custom_data: unknown }, db: PoolClient) =>
    db.query('INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)', [
      n.transaction_id,
      n.custom_data,
    ]);

  /** Posts GROUP payments; resolves them once each is delivered. */
  const payAll = async (post: (body: unknown) => Promise<Response>) => {
    const payments = Array.from({ length: GROUP }, (_, i) => uniquePayload({ custom_data: `order-${i}` }));
    const statuses = await Promise.all(payments.map(async (payment) => (await post(payment)).status));
    expect(statuses).toEqual(payments.map(() => 200));
    for (const payment of payments) {
      await eventually(
        `${keyOf(payment)} delivered`,
        async () => (await entryOf(keyOf(payment)))?.status === 'delivered',
      );
    }
    return payments;
  };

  /** Every payment has exactly one ledger row and is delivered: the money invariant. */
  const creditedOnce = async (payments: Array<Record<string, unknown>>) => {
    for (const payment of payments) {
      expect(await ledger.ledgerOf(payment.transaction_id)).toHaveLength(1);
      expect((await entryOf(keyOf(payment)))?.status).toBe('delivered');
    }
  };

  test('groupDeliveries is checked when the store is made: a size or lanes that is not a whole number of 1 or more is a TypeError', () => {
    const pool = ledger.pool();
    for (const bad of [{ size: 0 }, { lanes: 1.5 }, { size: '4' }, 'yes']) {
      expect(() => new PostgresStore({ pool, groupDeliveries: bad as never })).toThrow(TypeError);
    }
    expect(() => new PostgresStore({ pool, groupDeliveries: { size: 1, lanes: 8 } })).not.toThrow();
  });

  test('deliveries due together share one transaction and one commit, each credited once', async () => {
    const { pool } = faultyPool();
    const ipn = router(pool);
    const xids = together(ipn, async (n, db) => {
      await credit(n, db);
    });
    const { post } = await serve(ipn);
    const payments = await payAll(post);
    await creditedOnce(payments);
    expect(new Set(xids.values()).size).toBe(1);
    for (const payment of payments) expect((await entryOf(keyOf(payment)))?.attempts).toBe(1);
  });

  test('one listener of a group throws: its write rolls back to its savepoint, the others commit; it is credited once on its retry', async () => {
    const { pool } = faultyPool();
    const ipn = router(pool);
    const events = recordEvents(ipn);
    let thrower: string | undefined;
    const xids = together(ipn, async (n, db, attempt) => {
      await credit(n, db);
      thrower ??= n.transaction_id;
      if (n.transaction_id === thrower && attempt === 1)
        throw new Error('the listener failed after its write');
    });
    const { post } = await serve(ipn);
    const payments = await payAll(post);
    await creditedOnce(payments);
    // The others committed in the group, on their first attempt; only the thrower took a second.
    const others = payments.filter((payment) => payment.transaction_id !== thrower);
    expect(new Set(others.map((payment) => xids.get(String(payment.transaction_id)))).size).toBe(1);
    for (const payment of others) expect((await entryOf(keyOf(payment)))?.attempts).toBe(1);
    expect((await entryOf(`${thrower}:SUCCESSFUL`))?.attempts).toBe(2);
    expect(events.of('error').map((event: { error: Error }) => event.error.message)).toEqual([
      expect.stringContaining('the listener failed after its write'),
    ]);
  });

  test("a failure outside any savepoint (a deferred constraint fails the group's COMMIT): the group rolls back and each delivery runs again alone", async () => {
    const { pool } = faultyPool();
    const ipn = router(pool);
    let culprit: string | undefined;
    let runs = 0;
    together(ipn, async (n, db) => {
      await credit(n, db);
      culprit ??= n.transaction_id;
      if (n.transaction_id === culprit && (runs += 1) === 1) {
        // Twice the same key: accepted now, refused at COMMIT, which rolls back the whole group.
        await db.query("INSERT INTO once (k) VALUES ('dup'), ('dup')");
      }
    });
    const { post } = await serve(ipn);
    const payments = await payAll(post);
    await creditedOnce(payments);
    // Run again at once, alone: not a failed attempt.
    for (const payment of payments) expect((await entryOf(keyOf(payment)))?.attempts).toBe(1);
    expect((await pool.query('SELECT count(*)::int AS n FROM once')).rows[0].n).toBe(0);
  });

  test.each<[CommitFault, string]>([
    ['answer-lost', 'landed: each member reads its entry, delivered, and nothing runs twice'],
    ['never-sent', 'did not land: each member reads its entry, not delivered, and runs again alone'],
  ])("the group's COMMIT fails (%s): it %s", async (fault) => {
    const { pool, fired } = faultyPool(fault);
    const ipn = router(pool);
    let runs = 0;
    together(ipn, async (n, db) => {
      runs += 1;
      await credit(n, db);
    });
    const { post } = await serve(ipn);
    const payments = await payAll(post);
    expect(fired()).toBe(true);
    await creditedOnce(payments);
    for (const payment of payments) expect((await entryOf(keyOf(payment)))?.attempts).toBe(1);
    expect(runs).toBe(fault === 'answer-lost' ? GROUP : 2 * GROUP);
  });

  test("the group's connection is killed between its statements: nothing of it lands, and each delivery runs again alone", async () => {
    const { pool } = faultyPool();
    const ipn = router(pool);
    const admin = ledger.pool();
    let runs = 0;
    together(ipn, async (n, db) => {
      await credit(n, db);
      if ((runs += 1) === 2) {
        // The second member's turn: the group's backend is terminated under it (a crash of the server's
        // process, a network cut), after one member was marked and this one wrote.
        const { rows } = await db.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
        await admin.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid]);
      }
    });
    const { post } = await serve(ipn);
    const payments = await payAll(post);
    await creditedOnce(payments);
  });

  test('a query that does not answer (pg_sleep) does not hold its group: past half of storeTimeoutMs its backend is ended, the others run again alone, and so does it', async () => {
    const { pool } = faultyPool();
    // Half of it (the hold) well above a turn on a busy machine: only the sleeping member passes it.
    const ipn = router(pool, { storeTimeoutMs: 4_000 });
    const sleep = `SELECT pg_sleep(20) /* ${ledger.schema} */`;
    let runs = 0;
    together(ipn, async (n, db) => {
      runs += 1;
      await credit(n, db);
      if (runs === 2) await db.query(sleep); // far past the hold: only ending its backend frees the group
    });
    const { post } = await serve(ipn);
    try {
      const payments = await payAll(post);
      await creditedOnce(payments);
      for (const payment of payments) expect((await entryOf(keyOf(payment)))?.attempts).toBe(1);
      // The sleeping member ran again alone: its group did not wait for it.
      expect(runs).toBeGreaterThan(GROUP);
    } finally {
      // Whatever happened, no sleeping backend of this test outlives it (the schema is dropped after).
      await ledger
        .pool()
        .query(
          'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1 AND pid <> pg_backend_pid()',
          [sleep],
        );
    }
  });

  test('a slow listener does not hold its group: past half of storeTimeoutMs it is taken out, the others commit, and it runs again alone', async () => {
    const { pool } = faultyPool();
    const ipn = router(pool, { storeTimeoutMs: 4_000 });
    let slow: string | undefined;
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let runs = 0;
    together(ipn, async (n, db) => {
      runs += 1;
      await credit(n, db);
      if (runs === 2) {
        slow = n.transaction_id;
        await held; // until the test has seen the others delivered
      }
    });
    const { post } = await serve(ipn);
    const payments = Array.from({ length: GROUP }, (_, i) => uniquePayload({ custom_data: `order-${i}` }));
    await Promise.all(payments.map((payment) => post(payment)));
    // The first member commits while the slow one is still in its listener.
    await eventually('a member delivered while the slow one runs', async () => {
      const { rows } = await pool.query(
        "SELECT count(*)::int AS n FROM ipn_inbox WHERE status = 'delivered' AND key = ANY($1)",
        [payments.map(keyOf)],
      );
      return rows[0].n >= 1;
    });
    expect(slow).toBeDefined();
    expect((await entryOf(`${slow}:SUCCESSFUL`))?.status).not.toBe('delivered');
    release();
    for (const payment of payments) {
      await eventually(
        `${keyOf(payment)} delivered`,
        async () => (await entryOf(keyOf(payment)))?.status === 'delivered',
      );
    }
    await creditedOnce(payments);
    expect((await entryOf(`${slow}:SUCCESSFUL`))?.attempts).toBe(1);
    expect(runs).toBe(GROUP + 1); // the slow one ran again alone, not as a failed attempt
  });
});
