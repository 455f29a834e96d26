import type { Pool } from 'pg';
import { Client, Query, type PoolClient } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { rawPg, withKysely } from '../../examples/snippets/exactly-once.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { servedRouters } from '../helpers/servers.js';
import { ledgerSchema } from '../helpers/ledger-schema.js';
import { describeWithService, eventually } from '../helpers/services.js';

jest.setTimeout(30_000);

describeWithService('PostgreSQL', "transactional delivery: PostgresStore, delivery: 'at-least-once'", () => {
  const ledger = ledgerSchema('ipn_tx', ['CREATE TABLE orders (id text PRIMARY KEY, paid_at timestamptz)']);
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
  const newOrder = async (id: string) => pool.query('INSERT INTO orders (id) VALUES ($1)', [id]);
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
      await newOrder(payload.custom_data as string);
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      expect(await ledgerRows(payload.transaction_id)).toBe(1);
      const { rows } = await pool.query('SELECT paid_at FROM orders WHERE id = $1', [payload.custom_data]);
      expect(rows[0].paid_at).toBeInstanceOf(Date);
      expect(await (await post(payload)).json()).toEqual({ ok: true, duplicate: true });
      expect(await ledgerRows(payload.transaction_id)).toBe(1);
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
    const commits: boolean[] = [];
    const begin = store.begin.bind(store);
    store.begin = async (key, leaseId) => {
      const tx = await begin(key, leaseId);
      const commit = tx!.commit;
      return Object.assign(tx!, {
        commit: async () => {
          const committed = await commit();
          commits.push(committed);
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
    expect(commits).toEqual([false]);
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
    ipn.on('successful', async (n, { db }) => {
      await db.query('INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)', [
        n.transaction_id,
        'x',
      ]);
    });
    const payload = uniquePayload();
    await post(payload);
    await delivered(keyOf(payload));
    // The mark and the COMMIT go as one statement: one round trip.
    expect(watched.statements).toEqual(['BEGIN', 'INSERT INTO', 'WITH marked']);
    expect(await ledgerRows(payload.transaction_id)).toBe(1);
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
    ipn.on('successful', async (n, { db }) => {
      await db.query('INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)', [
        n.transaction_id,
        'x',
      ]);
    });
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
      await held!.db.query('INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)', [key, 'held']);
      expect(await held!.commit()).toBe(true);
      expect(await statusOf(key)).toBe('delivered');

      await store.replay(key); // due again, as after a replay; then leased to another attempt
      await pool.query(`UPDATE ipn_inbox SET lease_id = 'lease-2' WHERE key = $1`, [key]);
      const lost = await store.begin(key, 'lease-1');
      await lost!.db.query('INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)', [key, 'lost']);
      expect(await lost!.commit()).toBe(false);
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
    expect(contexts).toEqual([{ key: keyOf(payload), attempt: 1 }]);
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
    const expected = { key: `${String(payload.transaction_id)}:SUCCESSFUL`, attempt: 1 };
    expect(contexts).toEqual([expected, expected]);
  });
});
