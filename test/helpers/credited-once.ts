import type { Pool, PoolClient } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { fastRetries } from './fast-retries.js';
import { uniquePayload } from './payloads.js';
import { recordEvents } from './record-events.js';
import type { servedRouters } from './servers.js';
import type { ledgerSchema } from './ledger-schema.js';
import { eventually } from './services.js';

/**
 * One payment through an exactly-once router on `pool` (its inbox in `ledger`'s schema): the listener runs
 * `first` through `db`, then credits `ledger`. Asserts that it was delivered (the router's errors in the
 * message when not, within 5 s), credited once, and that no `error` event was emitted.
 */
export async function creditedOnce(
  ledger: ReturnType<typeof ledgerSchema>,
  serve: ReturnType<typeof servedRouters>,
  pool: Pool,
  first: (db: PoolClient) => Promise<unknown>,
): Promise<void> {
  const ipn = ipnRouter({ store: new PostgresStore({ pool }), ...fastRetries });
  const recorder = recordEvents(ipn);
  ipn.on('successful', async (n, { db }) => {
    await first(db);
    await db.query(`INSERT INTO ${ledger.schema}.ledger (transaction_id, order_id) VALUES ($1, 'x')`, [
      n.transaction_id,
    ]);
  });
  const { post } = await serve(ipn);
  const payload = uniquePayload();
  expect((await post(payload)).status).toBe(200);
  const errors = () => recorder.of('error').map((event) => event.error.message);
  await eventually(
    'delivered',
    async () => (await ledger.entryOf(ledger.keyOf(payload)))?.status === 'delivered',
    5_000,
  ).catch((error: unknown) => {
    throw new Error(`${String(error)}: ${JSON.stringify(errors())}`);
  });
  expect(await ledger.ledgerOf(payload.transaction_id)).toEqual([{ order_id: 'x' }]);
  expect(errors()).toEqual([]);
}
