/**
 * Hostile review: the ORM pointed at another schema than the store's pool (Prisma's `?schema=` in its URL,
 * a pool without it), where an inbox table of the same name exists too (both migrated). The mark inside the
 * ORM's transaction updates that other table: no row. It was read as a lost lease, and the attempt dropped
 * silently ('lost': another attempt holds the entry): no error, never dead, the listener run again every
 * leaseMs past maxAttempts and its credit rolled back each time, for ever.
 */
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { pgTransactions } from '../fixtures/orm/pg.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { servedRouters } from '../helpers/servers.js';
import { ledgerSchema } from '../helpers/ledger-schema.js';
import { describeWithService, eventually } from '../helpers/services.js';

jest.setTimeout(30_000);

describeWithService('PostgreSQL', 'an ORM on another schema than the store', () => {
  const store = ledgerSchema('ipn_here');
  const orm = ledgerSchema('ipn_elsewhere'); // its own inbox and ledger
  const serve = servedRouters();

  test('the attempt is not dropped silently: an error names the cause, and the entry ends dead', async () => {
    const ormPool = orm.newPool(4);
    const ipn = ipnRouter({
      store: new PostgresStore({ pool: store.pool(), transactions: pgTransactions(ormPool) }),
      delivery: 'at-least-once',
      logger: quiet,
      leaseMs: 2_000, // each attempt fails at its mark, well before: the lease only bounds a slow machine
      retryDelayMs: 20,
      recoveryIntervalMs: 50,
      maxAttempts: 3,
    });
    const recorder = recordEvents(ipn);
    const attempts: number[] = [];
    ipn.on('successful', async (n, { tx, attempt }) => {
      attempts.push(attempt);
      await tx.query('INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)', [
        n.transaction_id,
        'x',
      ]);
    });
    const { post } = await serve(ipn);
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await eventually('an error', () => recorder.count('error') > 0);
    expect(recorder.of('error')[0].error.message).toMatch(
      /does not see the inbox entry .*same database and schema/,
    );
    await eventually('dead', async () => (await store.entryOf(store.keyOf(payload)))?.status === 'dead');
  });
});
