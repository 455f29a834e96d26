import { Pool } from 'pg';
import { ipnRouter, type IpnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { rawPg, withKysely } from '../../examples/snippets/exactly-once.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, type Running } from '../helpers/servers.js';
import { databaseUrl, describeWithService, eventually } from '../helpers/services.js';

jest.setTimeout(30_000);

describeWithService('PostgreSQL', "transactional delivery: PostgresStore, delivery: 'at-least-once'", () => {
  // A schema of its own (other engineers run tests on the same server): the snippets use plain table names.
  const schema = `ipn_tx_${process.pid}_${Date.now() % 100_000}`;
  let pool: Pool;
  const routers: IpnRouter<unknown, unknown>[] = [];
  const servers: Running[] = [];

  beforeAll(async () => {
    const admin = new Pool({ connectionString: databaseUrl(), max: 1 });
    await admin.query(`CREATE SCHEMA ${schema}`);
    await admin.end();
    pool = new Pool({ connectionString: databaseUrl(), max: 6, options: `-c search_path=${schema}` });
    pool.on('error', () => {});
    await new PostgresStore({ pool }).migrate();
    // The partner's ledger: deliberately no unique constraint, so a second credit would show as a row.
    await pool.query(
      'CREATE TABLE ledger (transaction_id text NOT NULL, order_id text NOT NULL, amount numeric)',
    );
    await pool.query('CREATE TABLE orders (id text PRIMARY KEY, paid_at timestamptz)');
  });
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((server) => server.close()));
    await Promise.all(routers.splice(0).map((router) => router.close()));
  });
  afterAll(async () => {
    await pool.query(`DROP SCHEMA ${schema} CASCADE`);
    await pool.end();
  });

  async function serve<R extends IpnRouter<unknown, unknown>>(ipn: R) {
    routers.push(ipn);
    const running = await listen(ipn);
    servers.push(running);
    const post = (body: unknown) =>
      fetch(running.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    return { ipn, post };
  }
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
  const keyOf = (payload: Record<string, unknown>) => `${String(payload.transaction_id)}:SUCCESSFUL`;
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

test('at most once, listeners get the key and attempt 1, and no db', async () => {
  const ipn = ipnRouter({ logger: quiet });
  const contexts: unknown[] = [];
  ipn.on('successful', (n, context) => void contexts.push(context));
  ipn.on('notification', (n, context) => void contexts.push(context));
  const running = await listen(ipn);
  const payload = uniquePayload();
  await fetch(running.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(payload),
  });
  await eventually('both listeners', () => contexts.length === 2);
  const expected = { key: `${String(payload.transaction_id)}:SUCCESSFUL`, attempt: 1 };
  expect(contexts).toEqual([expected, expected]);
  await running.close();
  await ipn.close();
});
