/**
 * Exactly once with Knex: each delivery attempt runs in a Knex transaction, and the listener writes through
 * it (`tx`). The inbox is created by a Knex migration (knex-migrations/). test/integration/orm/knex.test.ts
 * runs both against a real PostgreSQL.
 */
// #region knex
import type { Knex } from 'knex';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { knexTransactions } from 'ipn-kit/orm';

/** `db`: your Knex instance, `knex({ client: 'pg', connection: process.env.DATABASE_URL })`. */
export function ledgerRouter(db: Knex) {
  // The store runs its own statements through Knex too (give it `pool` as well to run them on a pg pool).
  const store = new PostgresStore({ transactions: knexTransactions(db) });
  const ipn = ipnRouter({ store, delivery: 'at-least-once' });
  ipn.on('successful', async (n, { tx }) => {
    // `tx` is this attempt's Knex.Transaction: what goes through it commits with the delivered mark, or not
    // at all. A query through `db` instead would run outside it, and commit whatever happens to the attempt.
    await tx('ledger').insert({
      transaction_id: n.transaction_id,
      order_id: n.custom_data,
      amount: n.amount,
    });
    await tx('orders').where({ id: n.custom_data }).update({ paid_at: tx.fn.now() });
  });
  return { ipn, store };
}
// #endregion knex
