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
    // Only the order this transaction was initiated for (custom_data), for its amount, and only once:
    const orderId = String(n.custom_data);
    const { amount } = n;
    if (amount === null) throw new Error(`${n.transaction_id} carries no amount`);
    const paid = await tx('orders')
      .where({ id: orderId, transaction_id: n.transaction_id, amount })
      .whereNull('paid_at')
      .update({ paid_at: tx.fn.now() });
    // Otherwise credit nothing: the throw rolls back; after its retries the notification is `dead` in the
    // inbox, for a person to look at (ipn.inbox, the operator's page).
    if (paid !== 1) throw new Error(`${n.transaction_id} is not the payment of order ${orderId}`);
    await tx('ledger').insert({ transaction_id: n.transaction_id, order_id: orderId, amount });
  });
  return { ipn, store };
}
// #endregion knex
