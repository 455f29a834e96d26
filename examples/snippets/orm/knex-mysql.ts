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
    await tx('ledger').insert({
      transaction_id: n.transaction_id,
      order_id: n.custom_data,
      amount: n.amount,
    });
  });
  return { ipn, store };
}
