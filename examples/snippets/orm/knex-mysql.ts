import type { Knex } from 'knex';
import type { Pool } from 'mysql2/promise';
import { ipnRouter } from 'ipn-kit';
import { MysqlStore } from 'ipn-kit/mysql';
import { knexTransactions } from 'ipn-kit/orm';

/**
 * `pool`: your mysql2 pool (`createPool` from `mysql2/promise`); `db`: your Knex instance on the same
 * database, `knex({ client: 'mysql2', connection: process.env.MYSQL_URL })`.
 */
export function knexLedgerRouter(pool: Pool, db: Knex) {
  // MysqlStore runs its own statements on the pool; each delivery attempt runs in a Knex transaction.
  const store = new MysqlStore({ pool, transactions: knexTransactions(db) });
  const ipn = ipnRouter({ store, delivery: 'at-least-once' });
  ipn.on('successful', async (n, { tx }) => {
    // `tx` is this attempt's Knex.Transaction: what goes through it commits with the delivered mark.
    // Only the order this transaction was initiated for (custom_data), for its amount, and only once:
    const orderId = String(n.custom_data);
    const { amount } = n;
    if (amount === null) throw new Error(`${n.transaction_id} carries no amount`);
    const paid = await tx('orders')
      .where({ id: orderId, transaction_id: n.transaction_id, amount })
      .whereNull('paid_at')
      .update({ paid_at: tx.fn.now() });
    // Otherwise credit nothing: the throw rolls back; after its retries the notification is `dead`.
    if (paid !== 1) throw new Error(`${n.transaction_id} is not the payment of order ${orderId}`);
    await tx('ledger').insert({ transaction_id: n.transaction_id, order_id: orderId, amount });
  });
  return { ipn, store };
}
