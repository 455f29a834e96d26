import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { Client, Pool, Query, type PoolClient } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { drizzle } from 'drizzle-orm/node-postgres';
import { sql } from 'drizzle-orm';
import knex from 'knex';
import { rawPg, withKysely } from '../../examples/snippets/exactly-once.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { servedRouters } from '../helpers/servers.js';
import { ledgerSchema } from '../helpers/ledger-schema.js';
import { databaseUrl, describeWithService, eventually } from '../helpers/services.js';
import { CLEANUP_TIMEOUT_MS, dropPostgresInboxes } from '../helpers/drop-inboxes.js';

jest.setTimeout(30_000);

/** Knex with no connection of its own: each transaction below runs on the `connection` it is given. */
const knexOnDb = knex({ client: 'pg' });
afterAll(() => knexOnDb.destroy());

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describeWithService('PostgreSQL', "transactional delivery: PostgresStore, delivery: 'at-least-once'", () => {
  const ledger = ledgerSchema('ipn_tx', [
    'CREATE TABLE orders (id text PRIMARY KEY, transaction_id text NOT NULL, amount numeric NOT NULL, paid_at timestamptz)',
  ]);
  const { keyOf } = ledger;
  let pool: Pool;
  beforeAll(() => {
    pool = ledger.pool();
  });
  const serve = servedRouters();

  /** A router with fast retries and a quiet logger, at least once on the schema's inbox. */
  const router = (options: { leaseMs?: number } = {}) =>
    ipnRouter({
      store: new PostgresStore({ pool }),
      delivery: 'at-least-once',
      logger: quiet,
      retryDelayMs: 20,
      recoveryIntervalMs: 50,
      ...options,
    });
  const statusOf = async (key: string) =>
    ((await pool.query('SELECT status FROM ipn_inbox WHERE key = $1', [key])).rows[0] as { status?: string })
      ?.status;
  const ledgerRows = async (id: unknown) =>
    (await pool.query('SELECT count(*)::int AS n FROM ledger WHERE transaction_id = $1', [id])).rows[0]
      .n as number;
  /** An order initiated as `payload`'s transaction, for `amount` (the payload's, unless told otherwise). */
  const newOrder = async (payload: Record<string, unknown>, amount = payload.amount) =>
    pool.query('INSERT INTO orders (id, transaction_id, amount) VALUES ($1, $2, $3)', [
      payload.custom_data,
      payload.transaction_id,
      amount,
    ]);
  /** The documented exactly-once listener: one ledger row per payment, through `db`. */
  const creditLedger = (ipn: ReturnType<typeof router>) =>
    ipn.on('successful', async (n, { db }) => {
      await db.query('INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)', [
        n.transaction_id,
        'x',
      ]);
    });
  const delivered = (key: string) =>
    eventually(`${key} delivered`, async () => (await statusOf(key)) === 'delivered');

  test.each([
    ['raw pg', rawPg],
    ['Kysely', withKysely],
  ])(
    'the documented %s listener: its writes commit with the delivered mark; a resend writes nothing',
    async (_, make) => {
      const { post } = await serve(make(pool));
      const payload = uniquePayload({ custom_data: `order-${String(Math.random()).slice(2)}` });
      await newOrder(payload);
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      expect(await ledgerRows(payload.transaction_id)).toBe(1);
      const { rows } = await pool.query('SELECT paid_at FROM orders WHERE id = $1', [payload.custom_data]);
      expect(rows[0].paid_at).toBeInstanceOf(Date);
      expect(await (await post(payload)).json()).toEqual({ ok: true, duplicate: true });
      expect(await ledgerRows(payload.transaction_id)).toBe(1);
    },
  );

  test.each([
    ['raw pg', rawPg],
    ['Kysely', withKysely],
  ])(
    'the documented %s listener credits nothing for another amount, another transaction, or an unknown order',
    async (_, make) => {
      const { post } = await serve(make(pool));
      const order = () => uniquePayload({ custom_data: `order-${String(Math.random()).slice(2)}` });
      const wrongAmount = order();
      await newOrder(wrongAmount, 9_999); // initiated for 9999, notified for 5000
      const otherTransaction = order();
      await newOrder({ ...otherTransaction, transaction_id: 'EFB.000000' });
      const unknownOrder = order();
      for (const payload of [wrongAmount, otherTransaction, unknownOrder]) {
        expect((await post(payload)).status).toBe(200);
        await eventually(
          `${keyOf(payload)} failed`,
          async () => (await statusOf(keyOf(payload))) === 'failed',
        );
        expect(await ledgerRows(payload.transaction_id)).toBe(0);
        const { rows } = await pool.query('SELECT paid_at FROM orders WHERE id = $1', [payload.custom_data]);
        expect(rows.map((row: { paid_at: unknown }) => row.paid_at)).toEqual(
          payload === unknownOrder ? [] : [null],
        );
      }
    },
  );

  test('every listener of one attempt shares one transaction, and learns the key and the attempt number', async () => {
    const { ipn, post } = await serve(router());
    const seen: Array<{ event: string; key: string; attempt: number; xid: string }> = [];
    const xid = async (db: { query(text: string): Promise<{ rows: Array<{ xid: string }> }> }) =>
      (await db.query('SELECT txid_current()::text AS xid')).rows[0]!.xid;
    ipn.on('notification', async (n, { db, key, attempt }) => {
      seen.push({ event: 'notification', key, attempt, xid: await xid(db) });
    });
    ipn.on('successful', async (n, { db, key, attempt }) => {
      seen.push({ event: 'successful', key, attempt, xid: await xid(db) });
    });
    const payload = uniquePayload();
    await post(payload);
    await delivered(keyOf(payload));
    expect(seen).toHaveLength(2);
    expect(seen.map(({ key, attempt }) => [key, attempt])).toEqual([
      [keyOf(payload), 1],
      [keyOf(payload), 1],
    ]);
    expect(seen[0]!.xid).toBe(seen[1]!.xid);
  });

  test.each([
    [
      "Drizzle's db.transaction() on drizzle(db)",
      async (db: PoolClient, n: { transaction_id: string }) => {
        await drizzle(db).transaction(async (t) => {
          await t.execute(
            sql`INSERT INTO ledger (transaction_id, order_id) VALUES (${n.transaction_id}, 'd')`,
          );
          await t
            .transaction(async (nested) => {
              await nested.execute(
                sql`INSERT INTO ledger (transaction_id, order_id) VALUES (${n.transaction_id}, 'n')`,
              );
              nested.rollback(); // Drizzle's own savepoint, inside ipn-kit's: this row goes
            })
            .catch(() => {}); // Drizzle's rollback() throws, to leave the callback
        });
      },
    ],
    [
      "Knex's knex.transaction(fn, { connection: db })",
      async (db: PoolClient, n: { transaction_id: string }) => {
        await knexOnDb.transaction(
          async (trx) => {
            await trx.raw('INSERT INTO ledger (transaction_id, order_id) VALUES (?, ?)', [
              n.transaction_id,
              'k',
            ]);
          },
          { connection: db },
        );
      },
    ],
  ])(
    '%s inside a db listener is a savepoint, never an early commit: a failed attempt and its retry, one row',
    async (_, write) => {
      const { ipn, post } = await serve(router());
      const recorder = recordEvents(ipn);
      ipn.on('successful', async (n, { db, attempt }) => {
        await write(db, n);
        // The ORM "committed" above; the attempt fails after it: nothing of it may land.
        if (attempt === 1) throw new Error('the order service is down');
      });
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      expect(await ledgerRows(payload.transaction_id)).toBe(1);
      expect(recorder.of('error').map((event) => event.error.message)).toEqual([
        expect.stringContaining('the order service is down'),
      ]);
    },
  );

  test('a COMMIT sent through db with no BEGIN is refused with an error naming the fix; nothing commits early', async () => {
    const { ipn, post } = await serve(router());
    const recorder = recordEvents(ipn);
    ipn.on('successful', async (n, { db, attempt }) => {
      await db.query('INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)', [
        n.transaction_id,
        'x',
      ]);
      if (attempt === 1) await db.query('COMMIT');
    });
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await delivered(keyOf(payload));
    expect(await ledgerRows(payload.transaction_id)).toBe(1);
    expect(recorder.of('error').map((event) => event.error.message)).toEqual([
      expect.stringMatching(/sent "COMMIT" through db.*ipn-kit begins and commits that transaction itself/),
    ]);
  });

  test("a listener that throws rolls back the other listener's write; the retry writes it once", async () => {
    const { ipn, post } = await serve(router());
    const recorder = recordEvents(ipn);
    let failures = 1;
    const attempts: number[] = [];
    ipn.on('successful', async (n, { db, attempt }) => {
      attempts.push(attempt);
      await db.query('INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)', [
        n.transaction_id,
        'x',
      ]);
    });
    ipn.on('notification', () => {
      if (failures-- > 0) throw new Error('the warehouse is down');
    });
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await delivered(keyOf(payload));
    expect(attempts).toEqual([1, 2]);
    expect(await ledgerRows(payload.transaction_id)).toBe(1);
    const { rows } = await pool.query('SELECT attempts, last_error FROM ipn_inbox WHERE key = $1', [
      keyOf(payload),
    ]);
    // The failed attempt's own message is kept; one failed attempt is one error event.
    expect(rows[0]).toEqual({ attempts: 2, last_error: expect.stringContaining('the warehouse is down') });
    expect(recorder.count('error')).toBe(1);
    expect(recorder.of('error')[0]).toMatchObject({ error: { name: 'DeliveryError' } });
  });

  test('the lease running out rolls back; a late write of that listener is refused, never committed', async () => {
    const { ipn, post } = await serve(router({ leaseMs: 300 }));
    const recorder = recordEvents(ipn);
    let release = () => {};
    const late: unknown[] = [];
    let first = true;
    ipn.on('successful', async (n, { db }) => {
      await db.query('INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)', [
        n.transaction_id,
        'slow',
      ]);
      if (!first) return;
      first = false;
      await new Promise<void>((resolve) => (release = resolve));
      await db
        .query('INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)', [n.transaction_id, 'late'])
        .catch((error: unknown) => late.push(error));
    });
    const payload = uniquePayload();
    await post(payload);
    await delivered(keyOf(payload)); // by the second attempt, after the first one's lease ran out
    expect(recorder.of('error').map(({ error }) => error.message)).toEqual([
      expect.stringContaining('did not settle within 270 ms'),
    ]);
    release();
    await eventually('the late write refused', () => late.length === 1);
    expect(String(late[0])).toMatch(/delivery transaction .* has ended/);
    const { rows } = await pool.query('SELECT order_id FROM ledger WHERE transaction_id = $1', [
      payload.transaction_id,
    ]);
    expect(rows).toEqual([{ order_id: 'slow' }]);
  });

  test('an attempt whose lease was taken meanwhile rolls back: only the holder of the lease writes', async () => {
    const store = new PostgresStore({ pool });
    const commits: string[] = [];
    const begin = store.begin.bind(store);
    store.begin = async (key, leaseId) => {
      const tx = await begin(key, leaseId);
      const commit = tx!.commit;
      return Object.assign(tx!, {
        commit: async () => {
          const committed = await commit();
          commits.push(typeof committed === 'string' ? committed : committed.landed);
          return committed;
        },
      });
    };
    const ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet, recoveryIntervalMs: 60_000 });
    const { post } = await serve(ipn);
    ipn.on('successful', async (n, { db }) => {
      await db.query('INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)', [
        n.transaction_id,
        'x',
      ]);
      // Another instance's attempt took the entry over (as after a lease ran out).
      await pool.query(
        `UPDATE ipn_inbox SET lease_id = 'another', lease_until = now() + interval '1 hour' WHERE key = $1`,
        [`${n.transaction_id}:SUCCESSFUL`],
      );
    });
    const payload = uniquePayload();
    await post(payload);
    await eventually('the attempt ended', () => commits.length === 1);
    expect(commits).toEqual(['lost']);
    expect(await statusOf(keyOf(payload))).toBe('received');
    expect(await ledgerRows(payload.transaction_id)).toBe(0);
  });

  /**
   * The schema's pool, handing out clients that record what runs on them (the first words of each
   * statement), how many of their queries were running at once at most, and that fail `BEGIN` `failBegin`
   * times.
   */
  function watchedPool(failBegin = 0) {
    const watched = { statements: [] as string[], mostAtOnce: 0, failBegin };
    let running = 0;
    const watch = (client: PoolClient): PoolClient =>
      new Proxy(client, {
        get(target, property) {
          if (property !== 'query') return Reflect.get(target, property, target) as unknown;
          return (...args: unknown[]) => {
            const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text: string }).text;
            watched.statements.push(text.trim().split(/\s+/).slice(0, 2).join(' '));
            if (text === 'BEGIN' && watched.failBegin-- > 0) {
              return Promise.reject(new Error('BEGIN refused (injected fault)'));
            }
            const callback = args[args.length - 1];
            if (typeof args[0] === 'object' && 'submit' in (args[0] as object)) {
              // A submittable goes to pg's own queue, which runs it in turn: not counted as running here.
              return Reflect.apply(target.query, target, args) as unknown;
            }
            running += 1;
            watched.mostAtOnce = Math.max(watched.mostAtOnce, running);
            const settled = () => void (running -= 1);
            if (typeof callback === 'function') {
              const counted = (...answer: unknown[]) => {
                settled();
                Reflect.apply(callback, undefined, answer);
              };
              return Reflect.apply(target.query, target, [...args.slice(0, -1), counted]) as unknown;
            }
            const result = Reflect.apply(target.query, target, args) as Promise<unknown>;
            void result.then(settled, settled);
            return result;
          };
        },
      });
    const connecting = {
      query: (text: string, values?: unknown[]) => pool.query(text, values),
      connect: async () => watch(await pool.connect()),
    };
    return { watched, pool: connecting };
  }

  test('listeners that never query db open no transaction: no BEGIN, the delivered mark goes with the batch', async () => {
    const { watched, pool: watchedOne } = watchedPool();
    const ipn = ipnRouter({ store: new PostgresStore({ pool: watchedOne }), delivery: 'at-least-once' });
    const { post } = await serve(ipn);
    const seen: string[] = [];
    ipn.on('successful', (n) => void seen.push(n.transaction_id));
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await delivered(keyOf(payload));
    expect(seen).toEqual([payload.transaction_id]);
    expect(watched.statements).toEqual([]); // the client was taken and given back untouched
  });

  test('db before its first query: no client taken yet, yet it is a client of the pool (instanceof, escapeLiteral)', async () => {
    const { watched, pool: watchedOne } = watchedPool();
    const store = new PostgresStore({ pool: Object.assign(watchedOne, { Client: Client }) });
    const ipn = ipnRouter({ store, delivery: 'at-least-once' });
    const { post } = await serve(ipn);
    const seen: unknown[] = [];
    ipn.on('successful', async (n, { db }) => {
      seen.push(db instanceof Client, db.escapeLiteral("it's"), watched.statements.length);
      await db.query('INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)', [
        n.transaction_id,
        'x',
      ]);
      seen.push(typeof (db as unknown as Record<string, unknown>).processID, watched.statements.length);
    });
    const payload = uniquePayload();
    await post(payload);
    await delivered(keyOf(payload));
    expect(seen).toEqual([true, "'it''s'", 0, 'number', 2]);
  });

  test('a listener that queries db opens the transaction first: BEGIN, its write, then the mark with the COMMIT', async () => {
    const { watched, pool: watchedOne } = watchedPool();
    const ipn = ipnRouter({ store: new PostgresStore({ pool: watchedOne }), delivery: 'at-least-once' });
    const { post } = await serve(ipn);
    creditLedger(ipn);
    const payload = uniquePayload();
    await post(payload);
    await delivered(keyOf(payload));
    // The mark and the COMMIT go as one statement: one round trip; the mark is the function of version 6.
    expect(watched.statements).toEqual([
      'BEGIN',
      'INSERT INTO',
      `SELECT "ipn_inbox_mark"('${keyOf(payload)}',`,
    ]);
    expect(await ledgerRows(payload.transaction_id)).toBe(1);
  });

  test('an inbox named with its schema: the mark function is made and called in that schema', async () => {
    const schema = `ipn_tx_fn_${process.pid}`;
    await pool.query(`CREATE SCHEMA ${schema}`);
    try {
      const { watched, pool: watchedOne } = watchedPool();
      const store = new PostgresStore({ pool: watchedOne, table: `${schema}.inbox` });
      await store.migrate();
      const ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet });
      const { post } = await serve(ipn);
      creditLedger(ipn);
      const payload = uniquePayload();
      await post(payload);
      await eventually('delivered', async () => (await store.get(keyOf(payload)))?.status === 'delivered');
      expect(watched.statements).toEqual([
        'BEGIN',
        'INSERT INTO',
        `SELECT "${schema}"."inbox_mark"('${keyOf(payload)}',`,
      ]);
      expect(await ledgerRows(payload.transaction_id)).toBe(1);
    } finally {
      await pool.query(`DROP SCHEMA ${schema} CASCADE`);
    }
  });

  test('the mark function missing (migrations of your own stopped before version 6): the attempt rolls back, names the fix, and the retry marks as before; migrate() brings it back', async () => {
    const fn = `"ipn_inbox_mark"(text, text)`;
    const { watched, pool: watchedOne } = watchedPool();
    const store = new PostgresStore({ pool: watchedOne });
    const ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet, retryDelayMs: 20 });
    const recorder = recordEvents(ipn);
    const { post } = await serve(ipn);
    creditLedger(ipn);
    await pool.query(`DROP FUNCTION ${fn}`);
    try {
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      expect(await ledgerRows(payload.transaction_id)).toBe(1); // the first attempt's insert rolled back
      expect(recorder.of('error').map((event) => event.error.message)).toEqual([
        expect.stringContaining('the mark function of schema version 6 is missing'),
      ]);
      expect(watched.statements.filter((s) => !s.startsWith('INSERT'))).toEqual([
        'BEGIN',
        `SELECT "ipn_inbox_mark"('${keyOf(payload)}',`,
        'ROLLBACK',
        'BEGIN',
        'DO $ipn_kit$',
      ]);
    } finally {
      await store.migrate(); // the function is back, for this test and the ones after it
    }
    expect((await pool.query(`SELECT to_regprocedure('${fn}') IS NOT NULL AS there`)).rows[0].there).toBe(
      true,
    );
    watched.statements.length = 0;
    const next = uniquePayload();
    await post(next);
    await delivered(keyOf(next));
    expect(watched.statements).toEqual(['BEGIN', 'INSERT INTO', `SELECT "ipn_inbox_mark"('${keyOf(next)}',`]);
  });

  test('a role refused EXECUTE on the mark function (default privileges revoked from PUBLIC): the attempt rolls back, says to GRANT it, and the retry marks without it', async () => {
    const fn = `"ipn_inbox_mark"(text, text)`;
    const role = `ipn_tx_app_${process.pid}`;
    const { schema } = ledger;
    await pool.query(`CREATE ROLE ${role} NOLOGIN`);
    const app = new Pool({
      connectionString: databaseUrl(),
      max: 2,
      options: `-c search_path=${schema} -c role=${role}`,
    });
    app.on('error', () => {});
    try {
      await pool.query(`GRANT USAGE ON SCHEMA ${schema} TO ${role}`);
      await pool.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ${schema} TO ${role}`);
      await pool.query(`REVOKE EXECUTE ON FUNCTION ${fn} FROM PUBLIC`);
      const store = new PostgresStore({ pool: app });
      const ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet, retryDelayMs: 20 });
      const recorder = recordEvents(ipn);
      const { post } = await serve(ipn);
      creditLedger(ipn);
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      expect(await ledgerRows(payload.transaction_id)).toBe(1); // the refused attempt's insert rolled back
      expect(recorder.of('error').map((event) => event.error.message)).toEqual([
        expect.stringMatching(/the mark of schema version 6 was refused \(permission denied .*GRANT EXECUTE/),
      ]);
      expect(await ledger.entryOf(keyOf(payload))).toMatchObject({ status: 'delivered', attempts: 2 });
    } finally {
      await pool.query(`GRANT EXECUTE ON FUNCTION ${fn} TO PUBLIC`);
      await app.end();
      await pool.query(`DROP OWNED BY ${role}`);
      await pool.query(`DROP ROLE ${role}`);
    }
  });

  test("pg's callback and submittable forms run inside the transaction, one query at a time", async () => {
    const { watched, pool: watchedOne } = watchedPool();
    const ipn = ipnRouter({
      store: new PostgresStore({ pool: watchedOne }),
      delivery: 'at-least-once',
      logger: quiet,
      retryDelayMs: 20,
      recoveryIntervalMs: 50,
    });
    const { post } = await serve(ipn);
    const insert = 'INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)';
    ipn.on('successful', async (n, { db }) => {
      await new Promise<void>((resolve, reject) =>
        db.query(insert, [n.transaction_id, 'callback'], (error) => (error ? reject(error) : resolve())),
      );
    });
    ipn.on('successful', async (n, { db }) => {
      const query = db.query(new Query(insert, [n.transaction_id, 'submittable']));
      await new Promise((resolve, reject) => query.once('end', resolve).once('error', reject));
    });
    ipn.on('successful', async (n, { db }) => {
      await db.query(insert, [n.transaction_id, 'promise']);
    });
    let failures = 1;
    ipn.on('notification', async () => {
      await new Promise((resolve) => setTimeout(resolve, 50)); // after the writes above were made
      if (failures-- > 0) throw new Error('the warehouse is down');
    });
    const payload = uniquePayload();
    await post(payload);
    await delivered(keyOf(payload));
    const { rows } = await pool.query(
      'SELECT order_id FROM ledger WHERE transaction_id = $1 ORDER BY order_id',
      [payload.transaction_id],
    );
    // The first attempt's three writes rolled back with it; the second's committed, once each.
    expect(rows).toEqual([{ order_id: 'callback' }, { order_id: 'promise' }, { order_id: 'submittable' }]);
    expect(watched.mostAtOnce).toBe(1); // listeners at once, their queries one at a time on the client
  });

  test("a BEGIN that fails fails the listener's query and the attempt; the retry writes once", async () => {
    const { watched, pool: watchedOne } = watchedPool(1);
    const ipn = ipnRouter({
      store: new PostgresStore({ pool: watchedOne }),
      delivery: 'at-least-once',
      logger: quiet,
      retryDelayMs: 20,
      recoveryIntervalMs: 50,
    });
    const recorder = recordEvents(ipn);
    const { post } = await serve(ipn);
    creditLedger(ipn);
    const payload = uniquePayload();
    await post(payload);
    await delivered(keyOf(payload));
    expect(recorder.of('error').map(({ error }) => error.message)).toEqual([
      expect.stringContaining('BEGIN refused (injected fault)'),
    ]);
    expect(watched.statements.filter((text) => text === 'INSERT INTO')).toHaveLength(1); // never ran unbegun
    expect(await ledgerRows(payload.transaction_id)).toBe(1);
  });

  test.each([
    ['plain characters (mark and COMMIT in one statement)', 'EFB.plain'],
    ['a quote and a backslash (mark, then COMMIT)', "it's\\odd"],
  ])(
    'a key of %s: commit marks it delivered under its lease, and refuses once the lease is lost',
    async (_, id) => {
      const store = new PostgresStore({ pool });
      const key = `${id}-${String(Math.random()).slice(2)}:SUCCESSFUL`;
      const stored = { transaction_id: key.split(':')[0], state: 'SUCCESSFUL' };
      expect(await store.receive(key, stored, { id: 'lease-1', ms: 60_000 })).toBe(true);
      const held = await store.begin(key, 'lease-1');
      await held!.db!.query('INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)', [key, 'held']);
      expect(await held!.commit()).toBe('delivered');
      expect(await statusOf(key)).toBe('delivered');

      await store.replay(key); // due again, as after a replay; then leased to another attempt
      await pool.query(`UPDATE ipn_inbox SET lease_id = 'lease-2' WHERE key = $1`, [key]);
      const lost = await store.begin(key, 'lease-1');
      await lost!.db!.query('INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)', [key, 'lost']);
      expect(await lost!.commit()).toBe('lost');
      expect(await statusOf(key)).toBe('received');
      const { rows } = await pool.query('SELECT order_id FROM ledger WHERE transaction_id = $1', [key]);
      expect(rows).toEqual([{ order_id: 'held' }]);
      await pool.query('DELETE FROM ipn_inbox WHERE key = $1', [key]); // no later test's router takes it up
    },
  );

  test('over a pool without connect() (no transactions), listeners get no db and delivery works as before', async () => {
    const queryOnly = { query: (text: string, values?: unknown[]) => pool.query(text, values) };
    const ipn = ipnRouter({
      store: new PostgresStore({ pool: queryOnly }),
      delivery: 'at-least-once',
      logger: quiet,
    });
    const { post } = await serve(ipn);
    const contexts: unknown[] = [];
    ipn.on('successful', (n, context) => void contexts.push(context));
    const payload = uniquePayload();
    await post(payload);
    await delivered(keyOf(payload));
    expect(contexts).toEqual([
      { key: keyOf(payload), idempotencyKey: expect.stringMatching(/^[0-9a-f]{64}$/), attempt: 1 },
    ]);
  });
});

describe('at most once', () => {
  const serve = servedRouters();
  test('listeners get the key and attempt 1, and no db', async () => {
    const { ipn, post } = await serve(ipnRouter({ logger: quiet }));
    const contexts: unknown[] = [];
    ipn.on('successful', (n, context) => void contexts.push(context));
    ipn.on('notification', (n, context) => void contexts.push(context));
    const payload = uniquePayload();
    await post(payload);
    await eventually('both listeners', () => contexts.length === 2);
    const expected = {
      key: `${String(payload.transaction_id)}:SUCCESSFUL`,
      idempotencyKey: expect.stringMatching(/^[0-9a-f]{64}$/),
      attempt: 1,
    };
    expect(contexts).toEqual([expected, expected]);
  });
});

/**
 * Commit failures of the delivery transaction and its lazy client: pool hygiene when connect() is pending,
 * rejects, or the COMMIT is slow or its answer lost, and what a failed commit does to an entry that was in
 * fact delivered.
 */
describeWithService('PostgreSQL', 'transactional delivery: commit failures and the pool', () => {
  const ledger = ledgerSchema('ipn_txc');
  const { newPool, keyOf } = ledger;
  let pool: Pool;
  beforeAll(() => {
    pool = ledger.pool();
  });
  const served = servedRouters();
  /** Every client back in its pool (or gone), nobody waiting. */
  async function settled(p: Pool) {
    await eventually(
      'every client back in the pool',
      () => p.idleCount === p.totalCount && p.waitingCount === 0,
    );
    return { total: p.totalCount, idle: p.idleCount, waiting: p.waitingCount };
  }

  const serve = (store: PostgresStore<Pool>, extra: Record<string, unknown> = {}) =>
    served(
      ipnRouter({
        store,
        delivery: 'at-least-once',
        logger: quiet,
        retryDelayMs: 20,
        recoveryIntervalMs: 50,
        ...extra,
      }),
    );
  const entryOf = async (key: string) =>
    (await pool.query('SELECT status, attempts, last_error FROM ipn_inbox WHERE key = $1', [key])).rows[0] as
      { status: string; attempts: number; last_error: string | null } | undefined;
  const ledgerOf = async (id: unknown) =>
    (await pool.query('SELECT order_id FROM ledger WHERE transaction_id = $1', [id])).rows;
  const insert = 'INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)';
  const isMarkAndCommit = (text: unknown) => typeof text === 'string' && /;\s*COMMIT\s*$/.test(text);

  /**
   * A pool whose clients handle the first mark-and-COMMIT as told: `lost` (it runs and commits, then the
   * answer is lost), `slow` (it runs and commits; the answer comes `ms` later).
   */
  function commitFaulty(p: Pool, fault: 'lost' | 'slow', ms = 0) {
    let fired = false;
    const wrap = (client: PoolClient) =>
      new Proxy(client, {
        get(target, property) {
          if (property !== 'query') {
            const value = Reflect.get(target, property, target) as unknown;
            return typeof value === 'function' ? (value as () => unknown).bind(target) : value;
          }
          return (...args: unknown[]) => {
            if (fired || !isMarkAndCommit(args[0]))
              return Reflect.apply(target.query, target, args) as unknown;
            fired = true;
            const ran = Reflect.apply(target.query, target, args) as Promise<unknown>;
            return fault === 'lost'
              ? ran.then(() => {
                  throw new Error('connection lost after the COMMIT (injected fault)');
                })
              : ran.then(async (answer) => {
                  await sleep(ms);
                  return answer;
                });
          };
        },
      });
    return {
      query: (text: string, values?: unknown[]) => p.query(text, values),
      connect: async () => wrap(await p.connect()),
      get fired() {
        return fired;
      },
    };
  }

  test.each([['lost'], ['slow']] as const)(
    'a COMMIT that lands but whose answer is %s: delivered once, one ledger row, no client held',
    async (fault) => {
      const p = newPool(3);
      const faulty = commitFaulty(p, fault, 800);
      const { ipn, post } = await serve(new PostgresStore({ pool: faulty as unknown as Pool }), {
        storeTimeout: 200,
      });
      let runs = 0;
      const dead: unknown[] = [];
      ipn.on('dead', (event) => dead.push(event));
      ipn.on('successful', async (n, { db }) => {
        runs += 1;
        await db.query(insert, [n.transaction_id, `run ${runs}`]);
      });
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await eventually('delivered', async () => (await entryOf(keyOf(payload)))?.status === 'delivered');
      await sleep(1_200);
      expect(faulty.fired).toBe(true);
      expect(runs).toBe(1);
      expect(await ledgerOf(payload.transaction_id)).toEqual([{ order_id: 'run 1' }]);
      expect((await entryOf(keyOf(payload)))?.status).toBe('delivered');
      expect(dead).toEqual([]);
      await settled(p);
    },
  );

  test('connect() still pending when the attempt times out: the client it later gets goes back, none held', async () => {
    const p = newPool(1); // the clients for db: its only one is held, so the listener's first query waits
    const blocker = await p.connect();
    const split = {
      query: (text: string, values?: unknown[]) => pool.query(text, values),
      connect: () => p.connect(),
    };
    const { ipn, post } = await serve(new PostgresStore({ pool: split as never }), { leaseMs: 300 });
    let runs = 0;
    let timedOut = false;
    ipn.on('successful', async (n, { db }) => {
      runs += 1;
      const run = runs;
      try {
        await db.query(insert, [n.transaction_id, `run ${run}`]);
      } catch (error) {
        if (run === 1) timedOut = true;
        throw error;
      }
    });
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await sleep(600); // past 0.9 * leaseMs: the first attempt is abandoned with its connect() pending
    expect(p.waitingCount).toBeGreaterThan(0);
    blocker.release();
    await eventually('delivered', async () => (await entryOf(keyOf(payload)))?.status === 'delivered');
    expect(runs).toBeGreaterThan(1);
    expect(timedOut).toBe(true);
    expect((await ledgerOf(payload.transaction_id)).length).toBe(1);
    expect(await settled(p)).toEqual({ total: 1, idle: 1, waiting: 0 });
  });

  test('connect() rejecting (the pool refuses): a failed attempt, retried, delivered once, no client held', async () => {
    const p = newPool(3);
    let refusals = 1;
    const refusing = {
      query: (text: string, values?: unknown[]) => p.query(text, values),
      connect: async () => {
        if (refusals-- > 0) throw new Error('connect ECONNREFUSED (injected fault)');
        return p.connect();
      },
    };
    const { ipn, post } = await serve(new PostgresStore({ pool: refusing as never }));
    let runs = 0;
    ipn.on('successful', async (n, { db }) => {
      runs += 1;
      await db.query(insert, [n.transaction_id, `run ${runs}`]);
    });
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await eventually('delivered', async () => (await entryOf(keyOf(payload)))?.status === 'delivered');
    expect(await ledgerOf(payload.transaction_id)).toEqual([{ order_id: 'run 2' }]);
    await settled(p);
  });

  test.each([[1], [5]])(
    'a listener-less-db attempt whose batched delivered mark is slower than storeTimeout (maxAttempts %i): delivered, never dead nor run again',
    async (maxAttempts) => {
      // The listener succeeded (it credits through the pool, not db): commit() has no client and hands the
      // mark to the store's batch. When that batch answers later than storeTimeout, deliver() now counts the
      // attempt failed and settles it 'failed' (or 'dead' at maxAttempts) with a statement of its own, which
      // overtakes the mark still waiting in the batch: the mark then finds no lease and changes nothing.
      // Before 9720547 this was a store failure left to the lease, and the batched mark landed: delivered.
      const p = newPool(3);
      let delayed = false;
      const slowMark = {
        query: async (text: string, values?: unknown[]) => {
          if (!delayed && /SET status = 'delivered'/.test(text)) {
            delayed = true;
            await sleep(600); // the batch stalls (e.g. behind a slow earlier batch: one in flight at a time)
          }
          return p.query(text, values);
        },
        connect: () => p.connect(),
      };
      const { ipn, post } = await serve(new PostgresStore({ pool: slowMark as never }), {
        storeTimeout: 200,
        maxAttempts,
      });
      const dead: unknown[] = [];
      ipn.on('dead', (event) => dead.push(event));
      let runs = 0;
      ipn.on('successful', async (n) => {
        runs += 1;
        await p.query(insert, [n.transaction_id, `run ${runs}`]);
      });
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await eventually('the mark went out', () => delayed);
      await sleep(1_000);
      expect(runs).toBe(1);
      expect(dead).toEqual([]);
      expect((await entryOf(keyOf(payload)))?.status).toBe('delivered');
      await settled(p);
    },
  );
});

describeWithService('PostgreSQL', 'transactional delivery: what a listener may do with db', () => {
  // A ledger with a unique key, for the idempotent-insert listener.
  const ledger = ledgerSchema('ipn_txr', ['CREATE TABLE credits (transaction_id text PRIMARY KEY)']);
  const { keyOf, entryOf, ledgerOf } = ledger;
  let pool: Pool;
  beforeAll(() => {
    pool = ledger.pool();
  });
  const served = servedRouters();
  const serve = (options: { leaseMs?: number; maxAttempts?: number } = {}) =>
    served(
      ipnRouter({
        store: new PostgresStore({ pool }),
        delivery: 'at-least-once',
        logger: quiet,
        retryDelayMs: 20,
        recoveryIntervalMs: 50,
        ...options,
      }),
    );
  const insert = 'INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)';

  test('a write a listener starts through db without awaiting it lands with the delivered mark, not dropped', async () => {
    // Before the lazy BEGIN this write went to the client at once, inside the open transaction, ahead of
    // the mark. Now it waits for BEGIN; the commit that follows the listener's return sends the mark and
    // COMMIT without waiting for it, and the write is then refused: delivered, with nothing on the ledger.
    const { ipn, post } = await serve();
    ipn.on('successful', (n, { db }) => {
      void db.query(insert, [n.transaction_id, 'not-awaited']);
    });
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await eventually('delivered', async () => (await entryOf(keyOf(payload)))?.status === 'delivered');
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await ledgerOf(payload.transaction_id)).toEqual([{ order_id: 'not-awaited' }]);
  });

  test('a write a listener starts through db that fails, with nothing awaiting it, fails the attempt and says why; one row after the retry', async () => {
    const { ipn, post } = await serve();
    const recorder = recordEvents(ipn);
    let attempts = 0;
    ipn.on('successful', async (n, { db }) => {
      attempts += 1;
      if (attempts === 1)
        void db.query('INSERT INTO no_such_ledger (transaction_id) VALUES ($1)', [n.transaction_id]);
      else await db.query(insert, [n.transaction_id, 'awaited']);
    });
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await eventually('delivered', async () => (await entryOf(keyOf(payload)))?.status === 'delivered');
    expect(await ledgerOf(payload.transaction_id)).toEqual([{ order_id: 'awaited' }]);
    expect(recorder.of('error').map((event) => event.error.message)).toEqual([
      expect.stringMatching(
        /a query a listener made through db failed, and nothing awaited it: .*no_such_ledger/,
      ),
    ]);
  });

  test.each([
    ['callback', 'the callback gets the refusal'],
    ['submittable', "the submittable's error event has the refusal"],
  ])('a %s-form query after the attempt ended is refused, and told so: %s', async (form) => {
    // A promise-form late query is rejected (tested in transactional-delivery.test.ts). The other two
    // forms get a rejected promise they never look at: the callback is never called, the submittable
    // never ends nor errs (a listener awaiting it hangs), and the rejection is unhandled, which crashes
    // a Node process run with the default --unhandled-rejections=throw.
    const { ipn, post } = await serve({ leaseMs: 300 });
    let release = () => {};
    const told: unknown[] = [];
    let first = true;
    ipn.on('successful', async (n, { db }) => {
      if (!first) return;
      first = false;
      await db.query(insert, [n.transaction_id, 'early']);
      await new Promise<void>((resolve) => (release = resolve));
      if (form === 'callback') {
        db.query(insert, [n.transaction_id, 'late'], (error: Error | undefined) => told.push(error));
      } else {
        const late = db.query(new Query(insert, [n.transaction_id, 'late']));
        late.once('error', (error) => told.push(error)).once('end', () => told.push('ran'));
      }
    });
    const payload = uniquePayload();
    await post(payload);
    await eventually('delivered', async () => (await entryOf(keyOf(payload)))?.status === 'delivered');
    release();
    await eventually(`the late ${form} query told of its refusal`, () => told.length === 1);
    expect(String(told[0])).toMatch(/delivery transaction .* has ended/);
    expect(await ledgerOf(payload.transaction_id)).toEqual([]);
  });

  test('a listener that swallows its own SQL error (an idempotent insert) each time: dead after maxAttempts, not retried forever', async () => {
    // The caught unique violation leaves the transaction aborted; the mark then fails (25P02), commit()
    // rejects, and the attempt is reported as a store failure and left to its lease: never counted as a
    // failed attempt, so maxAttempts never applies, no 'dead', last_error stays null, retried every leaseMs.
    const { ipn, post } = await serve({ leaseMs: 300, maxAttempts: 2 });
    const recorder = recordEvents(ipn);
    ipn.on('successful', async (n, { db }) => {
      try {
        await db.query('INSERT INTO credits (transaction_id) VALUES ($1)', [n.transaction_id]);
      } catch (error) {
        if ((error as { code?: string }).code !== '23505') throw error; // credited already: fine
      }
    });
    const payload = uniquePayload();
    await pool.query('INSERT INTO credits (transaction_id) VALUES ($1)', [payload.transaction_id]);
    await post(payload);
    // Dead once its two attempts failed: waited for, not assumed after a fixed time (a loaded machine may
    // take longer); then several leases more, in which it must not be taken up again.
    await eventually('dead', async () => (await entryOf(keyOf(payload)))?.status === 'dead');
    await sleep(1_500);
    const entry = await entryOf(keyOf(payload));
    expect(entry?.attempts).toBeLessThanOrEqual(2);
    expect(entry?.status).toBe('dead');
    expect(entry?.last_error).toEqual(expect.stringContaining('PostgreSQL aborted the transaction'));
    expect(recorder.count('dead')).toBe(1);
  });

  test('a burst larger than the pool, listeners that never touch db but write through the pool: every payment delivered, none dead', async () => {
    // The at-least-once style the docs give for writes outside db (an idempotent insert through your own
    // pool). Each attempt still takes a client of the pool at begin() and holds it while its listeners run,
    // though they never query db: with more attempts than clients, every held client's listener waits for
    // a client of the same pool, nothing moves until 90% of leaseMs, every attempt fails, and the retries
    // come back as a burst too. Payments end dead.
    const small = ledger.newPool(4);
    const { ipn, post } = await served(
      ipnRouter({
        store: new PostgresStore({ pool: small }),
        delivery: 'at-least-once',
        logger: quiet,
        leaseMs: 1_500,
        maxAttempts: 3,
        retryDelayMs: 20,
        recoveryIntervalMs: 50,
      }),
    );
    const recorder = recordEvents(ipn);
    ipn.on('successful', async (n) => {
      await small.query('INSERT INTO credits (transaction_id) VALUES ($1) ON CONFLICT DO NOTHING', [
        n.transaction_id,
      ]);
    });
    const payloads = Array.from({ length: 16 }, () => uniquePayload());
    const answers = await Promise.all(payloads.map(async (payload) => (await post(payload)).status));
    expect(answers.every((status) => status === 200)).toBe(true);
    const keys = payloads.map(keyOf);
    const settled = async () =>
      (
        await pool.query(
          `SELECT count(*)::int AS n FROM ipn_inbox WHERE key = ANY($1) AND status IN ('delivered', 'dead')`,
          [keys],
        )
      ).rows[0].n as number;
    await eventually('every payment delivered or dead', async () => (await settled()) === keys.length);
    const { rows } = await pool.query(
      'SELECT status, count(*)::int AS n FROM ipn_inbox WHERE key = ANY($1) GROUP BY status',
      [keys],
    );
    expect(rows).toEqual([{ status: 'delivered', n: 16 }]);
    expect(recorder.count('dead')).toBe(0);
  });
});

describeWithService('PostgreSQL', 'transactional delivery: a connection lost mid-attempt', () => {
  const suffix = `${process.pid}_${Date.now() % 100_000}`;
  const table = `ipn_txr_term_${suffix}`;
  const ledger = `ledger_txr_term_${suffix}`;
  const pool = new Pool({ connectionString: databaseUrl(), max: 2 });
  pool.on('error', () => {});
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    await new PostgresStore({ pool, table }).migrate();
    await pool.query(`CREATE TABLE ${ledger} (transaction_id text NOT NULL)`);
  });
  afterAll(async () => {
    for (const child of children)
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await dropPostgresInboxes(pool, [table, ledger]);
    await pool.end();
  }, CLEANUP_TIMEOUT_MS);

  test.each([
    ['wrote through db', 'write'],
    ['never touched db', 'none'],
  ] as const)(
    'the server ends the connection of an attempt whose listener %s: the app survives, the payment is delivered once',
    async (_, mode) => {
      // A checked-out pg client has no 'error' listener (pg-pool removes its own while the client is out),
      // and ipn-kit adds none to the client it holds for the attempt: pg emits 'error' on it and the process
      // dies of an unhandled 'error' event. Lazily begun or not, the client is held the whole attempt.
      const child = fork(join(__dirname, '..', 'processes', 'terminated-connection-app.ts'), [], {
        execArgv: ['--import', 'tsx'],
        env: {
          ...process.env,
          DATABASE_URL: databaseUrl(),
          CONFIG: JSON.stringify({ table, ledger, mode }),
        },
        stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      });
      children.push(child);
      let stderr = '';
      child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      const url = await new Promise<string>((resolve, reject) => {
        child.once('exit', (code) =>
          reject(new Error(`the app exited (${code}) before it listened: ${stderr}`)),
        );
        child.on('message', (message: { type: string; url: string }) => {
          if (message.type === 'ready') resolve(message.url);
        });
      });
      const payload = uniquePayload();
      const answer = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(payload),
      });
      expect(answer.status).toBe(200);
      const key = `${String(payload.transaction_id)}:SUCCESSFUL`;
      await eventually(
        'delivered, or the app dead',
        async () =>
          child.exitCode !== null ||
          (await pool.query(`SELECT status FROM ${table} WHERE key = $1`, [key])).rows[0]?.status ===
            'delivered',
      );
      await new Promise((resolve) => setTimeout(resolve, 300));
      const crashed = /Unhandled 'error' event/.test(stderr);
      expect({ exitCode: child.exitCode, crashed }).toEqual({ exitCode: null, crashed: false });
      const { rows } = await pool.query(
        `SELECT count(*)::int AS n FROM ${ledger} WHERE transaction_id = $1`,
        [payload.transaction_id],
      );
      expect(rows[0].n).toBe(mode === 'write' ? 1 : 0);
    },
  );
});
