import { Pool } from 'pg';
import { ipnRouter, MemoryStore } from '../../lib/index.js';
import { PostgresStore } from '../../lib/postgres.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { servedRouters } from '../helpers/servers.js';
import { databaseUrl, describeWithService, eventually } from '../helpers/services.js';

/**
 * An entry whose attempts never settle (their process died each time, as a crash loop or a hosted role's
 * timeout ending the connection makes it) ends dead after maxAttempts, never leased again without end; and
 * a listener slower than the role's timeout ends dead with an error naming that timeout and its fix.
 */

jest.setTimeout(60_000);
const serve = servedRouters();
const keyOf = (payload: Record<string, unknown>) =>
  `${String(payload.transaction_id)}:${String(payload.state)}`;

test('an entry taken up 3 times, no attempt ever settling, is dead at the 4th lease: no listener runs', async () => {
  const store = new MemoryStore();
  const payload = uniquePayload();
  const key = keyOf(payload);
  // Three attempts whose process died before settling: received, then leased twice more, each lease expired.
  await store.receive(key, payload, { id: 'died-1', ms: 1 });
  for (const id of ['died-2', 'died-3']) {
    await eventually(`leased by ${id}`, async () => (await store.lease({ id, ms: 1 }, 10)).length === 1);
  }
  expect(await store.get(key)).toMatchObject({ status: 'received', attempts: 3 });
  const ipn = ipnRouter({
    store,
    delivery: 'at-least-once',
    maxAttempts: 3,
    recoveryIntervalMs: 20,
    logger: quiet,
  });
  const recorder = recordEvents(ipn);
  const ran: number[] = [];
  ipn.on('successful', ({ transaction_id }, { attempt }) => void ran.push(attempt, Number(transaction_id)));
  await serve(ipn);
  // The event, not only the row: the store settles the entry dead, then the router emits `dead`.
  await eventually('dead', () => recorder.of('dead').length > 0);
  expect((await store.get(key))?.status).toBe('dead');
  expect(ran).toEqual([]);
  expect(recorder.of('dead')).toEqual([expect.objectContaining({ key, attempts: 3 })]);
  expect(recorder.of('dead')[0].lastError).toMatch(
    /no attempt recorded how it ended.*idle_in_transaction_session_timeout/,
  );
});

describeWithService('PostgreSQL', 'a listener slower than the role timeout', () => {
  const table = `ipn_unsettled_${process.pid}_${Date.now() % 100_000}`;
  // The role's timeout as hosted PostgreSQL sets it, for this pool's sessions only (a startup parameter).
  const pool = new Pool({
    connectionString: databaseUrl(),
    options: '-c idle_in_transaction_session_timeout=200',
    max: 3,
  });
  pool.on('error', () => {});
  beforeAll(() => new PostgresStore({ pool, table }).migrate());
  afterAll(async () => {
    await pool.query(`DROP TABLE IF EXISTS ${table}, ${table}_expected`);
    await pool.end();
  });

  test('ends dead after maxAttempts, its error naming idle_in_transaction_session_timeout and the fix', async () => {
    const store = new PostgresStore({ pool, table });
    const ipn = ipnRouter({
      store,
      delivery: 'at-least-once',
      maxAttempts: 2,
      retryDelayMs: 10,
      logger: quiet,
    });
    const recorder = recordEvents(ipn);
    ipn.on('successful', async (_n, { db }) => {
      await db.query('SELECT 1');
      await new Promise((resolve) => setTimeout(resolve, 600)); // an HTTP call inside the transaction
    });
    const { post } = await serve(ipn);
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    // The event, not only the row: the store settles the entry dead, then the router emits `dead` (read at
    // once, the row could be dead before the event came: seen in a loaded CI run).
    await eventually('dead', () => recorder.of('dead').length > 0);
    expect((await store.get(keyOf(payload)))?.status).toBe('dead');
    const [dead] = recorder.of('dead');
    expect(dead).toMatchObject({ attempts: 2 });
    expect(dead.lastError).toMatch(/idle-in-transaction timeout.*raise idle_in_transaction_session_timeout/);
  });
});
