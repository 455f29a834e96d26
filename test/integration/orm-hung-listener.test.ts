/**
 * Hostile review: a listener that hangs (an HTTP call with no timeout) after it credited, with a ledger that
 * has a unique key (the idempotent ledger partners are told to keep). Over `db`, the abandoned attempt's
 * connection is closed, which rolls its credit back and frees the key's lock: the retry credits. Through an
 * ORM's transaction, the abandoned attempt is rolled back at once too (it used to wait for that listener,
 * holding the lock and a connection: every retry blocked on the same key, and the payment ended dead).
 */
import type { Pool } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { pgTransactions } from '../fixtures/orm/pg.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';
import { ledgerSchema } from '../helpers/ledger-schema.js';
import { describeWithService, eventually } from '../helpers/services.js';

jest.setTimeout(40_000);

describeWithService('PostgreSQL', 'a listener that hangs after its credit, unique ledger key', () => {
  const ledger = ledgerSchema('ipn_hung', ['CREATE TABLE credits (transaction_id text PRIMARY KEY)']);
  const { keyOf } = ledger;
  const serve = servedRouters();
  const hung: Array<() => void> = [];
  afterEach(() => {
    for (const release of hung.splice(0)) release(); // whatever the outcome, no listener stays hung
  });
  const options = {
    delivery: 'at-least-once',
    logger: quiet,
    leaseMs: 1_000,
    retryDelayMs: 20,
    recoveryIntervalMs: 50,
    maxAttempts: 4,
  } as const;
  const hang = () => new Promise<void>((resolve) => hung.push(resolve));
  const credits = async (id: unknown) =>
    (await ledger.pool().query('SELECT 1 FROM credits WHERE transaction_id = $1', [id])).rowCount;
  const delivered = (key: string) =>
    eventually(`${key} delivered`, async () => (await ledger.entryOf(key))?.status === 'delivered');

  test('over db: the abandoned attempt is rolled back at once; the retry credits once', async () => {
    const ipn = ipnRouter({ store: new PostgresStore({ pool: ledger.newPool(4) }), ...options });
    ipn.on('successful', async (n, { db, attempt }) => {
      await db.query('INSERT INTO credits VALUES ($1)', [n.transaction_id]);
      if (attempt === 1) await hang();
    });
    const { post } = await serve(ipn);
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await delivered(keyOf(payload));
    expect(await credits(payload.transaction_id)).toBe(1);
  });

  // An abandoned ORM transaction is rolled back at once, not when the listener settles: the ORM refuses the
  // hung listener's later queries, and its lock and connection are free for the retry.
  test('through an ORM transaction: the retry credits once, no connection held for good', async () => {
    const pool: Pool = ledger.newPool(4);
    const store = new PostgresStore({ pool: ledger.pool(), transactions: pgTransactions(pool) });
    const ipn = ipnRouter({ store, ...options });
    ipn.on('successful', async (n, { tx, attempt }) => {
      await tx.query('INSERT INTO credits VALUES ($1)', [n.transaction_id]);
      if (attempt === 1) await hang();
    });
    const { post } = await serve(ipn);
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await delivered(keyOf(payload));
    expect(await credits(payload.transaction_id)).toBe(1);
    expect(pool.totalCount - pool.idleCount).toBe(0);
  });
});
