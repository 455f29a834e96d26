/**
 * Exactly once on your own ledger, with PostgresStore at least once: the listener writes through `db`, the
 * client inside the transaction that marks the notification delivered. Raw `pg`, then Kysely on that same
 * client. test/integration/transactional-delivery.test.ts runs both against a real PostgreSQL.
 */
import type { Pool } from 'pg';
import { PostgresStore } from 'ipn-kit/postgres';
import { ipnRouter } from 'ipn-kit';

/** A router over `pool`, at least once (the tests give each run its own schema through `search_path`). */
export function exactlyOnceRouter(pool: Pool) {
  const ipn = ipnRouter({ store: new PostgresStore({ pool }), delivery: 'at-least-once' });
  return ipn;
}

export function rawPg(pool: Pool) {
  const ipn = exactlyOnceRouter(pool);
  // #region exactly-once-pg
  ipn.on('successful', async (n, { db }) => {
    // `db` is a client of your pool inside the delivery's transaction: these writes commit together with
    // the inbox's `delivered` mark, or roll back with a failed attempt. No unique key needed.
    // Only the order this transaction was initiated for (custom_data), for its amount, and only once:
    const paid = await db.query(
      'UPDATE orders SET paid_at = now() WHERE id = $1 AND transaction_id = $2 AND amount = $3 AND paid_at IS NULL',
      [n.custom_data, n.transaction_id, n.amount],
    );
    // Otherwise credit nothing: the throw rolls back; after its retries the notification is `dead` in the
    // inbox, for a person to look at (ipn.inbox, the operator's page).
    if (paid.rowCount !== 1)
      throw new Error(`${n.transaction_id} is not the payment of order ${n.custom_data}`);
    await db.query('INSERT INTO ledger (transaction_id, order_id, amount) VALUES ($1, $2, $3)', [
      n.transaction_id,
      n.custom_data,
      n.amount,
    ]);
    // Never run BEGIN, COMMIT or ROLLBACK on it, nor release it: ipn-kit does.
  });
  // #endregion exactly-once-pg
  return ipn;
}

// #region exactly-once-kysely
import { Kysely, PostgresDialect } from 'kysely';
import type { PoolClient } from 'pg';

interface Database {
  ledger: { transaction_id: string; order_id: string; amount: number | null };
  orders: { id: string; transaction_id: string; amount: number; paid_at: Date | null };
}

/** A Kysely whose every query runs on `db`, the delivery's client: inside its transaction. */
const kyselyOn = (db: PoolClient) =>
  new Kysely<Database>({
    // Kysely "releases" the client after each query: ipn-kit's `db` ignores that, and releases it itself.
    dialect: new PostgresDialect({
      pool: { connect: () => Promise.resolve(db), end: () => Promise.resolve() },
    }),
  });
// #endregion exactly-once-kysely

export function withKysely(pool: Pool) {
  const ipn = exactlyOnceRouter(pool);
  // #region exactly-once-kysely-listener
  ipn.on('successful', async (n, { db }) => {
    const trx = kyselyOn(db); // every query of `trx` runs inside the delivery's transaction
    const paid = await trx
      .updateTable('orders')
      .set({ paid_at: new Date() })
      .where('id', '=', n.custom_data)
      .where('transaction_id', '=', n.transaction_id) // the transaction this order was initiated with
      .where('amount', '=', n.amount ?? Number.NaN) // and its amount
      .where('paid_at', 'is', null) // once
      .executeTakeFirst();
    if (Number(paid.numUpdatedRows) !== 1)
      throw new Error(`${n.transaction_id} is not the payment of ${n.custom_data}`);
    await trx
      .insertInto('ledger')
      .values({ transaction_id: n.transaction_id, order_id: n.custom_data, amount: n.amount })
      .execute();
  });
  // #endregion exactly-once-kysely-listener
  return ipn;
}
