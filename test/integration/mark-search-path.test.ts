import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { uniquePayload } from '../helpers/payloads.js';
import { fastRetries } from '../helpers/fast-retries.js';
import { recordEvents } from '../helpers/record-events.js';
import { servedRouters } from '../helpers/servers.js';
import { ledgerSchema } from '../helpers/ledger-schema.js';
import { describeWithService, eventually } from '../helpers/services.js';

jest.setTimeout(30_000);

// The exactly-once mark (schema version 6: `<table>_mark`, named without a schema for an inbox named
// without one) runs in the delivery's transaction, after the listeners: a `SET LOCAL search_path` a listener
// sent through `db` is still in force there, and the inbox and its function are not found under it.
describeWithService('PostgreSQL', 'the mark after a listener set search_path for its transaction', () => {
  const ledger = ledgerSchema('ipn_rv_path');
  const serve = servedRouters();

  test.each([
    ['SET LOCAL search_path', 'SET LOCAL search_path TO pg_catalog'],
    // A quoted name is the same setting to PostgreSQL.
    ['SET LOCAL "search_path"', 'SET LOCAL "search_path" TO pg_catalog'],
    ["set_config('search_path', ..., true)", "SELECT set_config('search_path', 'pg_catalog', true)"],
  ])('%s: the payment is credited once, and the store keeps the function', async (_, setPath) => {
    const pool = ledger.pool();
    const store = new PostgresStore({ pool });
    const ipn = ipnRouter({
      store,
      ...fastRetries,
    });
    const recorder = recordEvents(ipn);
    ipn.on('successful', async (n, { db }) => {
      await db.query(setPath);
      await db.query(`INSERT INTO ${ledger.schema}.ledger (transaction_id, order_id) VALUES ($1, 'x')`, [
        n.transaction_id,
      ]);
    });
    const { post } = await serve(ipn);
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await eventually(
      'delivered',
      async () => (await ledger.entryOf(ledger.keyOf(payload)))?.status === 'delivered',
      5_000,
    ).catch((error: unknown) => {
      throw new Error(
        `${String(error)}: ${JSON.stringify(recorder.of('error').map((e) => e.error.message))}`,
      );
    });
    expect(await ledger.ledgerOf(payload.transaction_id)).toEqual([{ order_id: 'x' }]);
    expect(recorder.of('error').map((event) => event.error.message)).toEqual([]);
  });
});
