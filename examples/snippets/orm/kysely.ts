/**
 * Exactly once with Kysely: ipn-kit's tables in your `Database` interface (for the queries you make of the
 * inbox), and a router whose listeners credit the ledger through Kysely's transaction.
 * test/integration/orm/kysely.test.ts checks the interface against the real tables and runs the router
 * against a real PostgreSQL.
 */
// #region tables
import type { ColumnType, Generated, JSONColumnType } from 'kysely';

/** ipn-kit's inbox, as `store.migrate()` (or `postgresSchemaSql()`) creates it. */
export interface IpnInboxTable {
  key: string;
  transaction_id: string;
  state: string;
  record: JSONColumnType<Record<string, unknown>>;
  status: 'received' | 'delivered' | 'failed' | 'dead';
  attempts: Generated<number>;
  last_error: string | null;
  received_at: Generated<Date>;
  updated_at: Generated<Date>;
  next_attempt_at: Generated<Date>;
  delivered_at: Date | null;
  lease_id: string | null;
  lease_until: Date | null;
}

/** The expectations beside it (`expect()`), which `store.migrate()` creates too. */
export interface IpnInboxExpectedTable {
  transaction_id: string;
  custom_data: string | null;
  amount: number | null;
  // bigint: pg reads it as a string (milliseconds since the epoch)
  expected_at: ColumnType<string, number | string, number | string>;
  due_at: ColumnType<string, number | string, number | string>;
  attempts: Generated<number>;
  account: string | null; // the API key's account (several keys): schema version 4
}
// #endregion tables

// #region ledger
/** Your ledger: no unique key needed, as ipn-kit delivers each notification once. */
export interface LedgerTable {
  transaction_id: string;
  order_id: string;
  // numeric: pg reads it as a string, to keep every digit
  amount: ColumnType<string | null, number | string | null, number | string | null>;
}

/** Your orders, with what you initiated: the transaction_id the service returned, and the amount. */
export interface OrdersTable {
  id: string;
  transaction_id: string;
  amount: ColumnType<string, number | string, number | string>;
  paid_at: Date | null;
}

export interface Database {
  ipn_inbox: IpnInboxTable;
  ipn_inbox_expected: IpnInboxExpectedTable;
  ledger: LedgerTable;
  orders: OrdersTable;
}
// #endregion ledger

// #region router
import { Kysely, PostgresDialect } from 'kysely';
import type { Pool } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { kyselyTransactions } from 'ipn-kit/orm';

export function kyselyRouter(pool: Pool) {
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  const store = new PostgresStore({ pool, transactions: kyselyTransactions(db) });
  const ipn = ipnRouter({ store, delivery: 'at-least-once' });
  ipn.on('successful', async (n, { tx }) => {
    // `tx` is Kysely's transaction: what goes through it commits with the inbox's `delivered` mark,
    // or not at all (a failed attempt rolls it back, and the retry writes it again). No unique key needed.
    // Only the order this transaction was initiated for (custom_data), for its amount, and only once:
    const orderId = String(n.custom_data);
    const { amount } = n;
    if (amount === null) throw new Error(`${n.transaction_id} carries no amount`);
    const { numUpdatedRows } = await tx
      .updateTable('orders')
      .set({ paid_at: new Date() })
      .where('id', '=', orderId)
      .where('transaction_id', '=', n.transaction_id)
      .where('amount', '=', String(amount))
      .where('paid_at', 'is', null)
      .executeTakeFirst();
    // Otherwise credit nothing: the throw rolls back; after its retries the notification is `dead` in the
    // inbox, for a person to look at (ipn.inbox, the operator's page).
    if (numUpdatedRows !== 1n) throw new Error(`${n.transaction_id} is not the payment of order ${orderId}`);
    await tx
      .insertInto('ledger')
      .values({ transaction_id: n.transaction_id, order_id: orderId, amount })
      .execute();
  });
  return ipn;
}
// #endregion router

// #region dead-letters
/** The notifications whose delivery gave up, newest first: for an operator's page of your own. */
export function deadNotifications(db: Kysely<Database>, since: Date) {
  return db
    .selectFrom('ipn_inbox')
    .select(['key', 'attempts', 'last_error'])
    .where('status', '=', 'dead')
    .where('received_at', '>=', since)
    .orderBy('received_at', 'desc')
    .execute();
}
// #endregion dead-letters

// #region migration
import { sql } from 'kysely';
import { postgresAuditSql, postgresExpectationsSql, postgresSchemaSql } from 'ipn-kit/postgres';

/** A migration for Kysely's `Migrator`: ipn-kit's tables (`IF NOT EXISTS`: `store.migrate()` may run too). */
export const ipnKitTables = {
  async up(db: Kysely<unknown>): Promise<void> {
    await sql.raw(postgresSchemaSql('ipn_inbox') + postgresExpectationsSql('ipn_inbox')).execute(db);
    await sql.raw(postgresAuditSql('ipn_inbox')).execute(db); // the operators' audit trail
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.dropTable('ipn_inbox_schema').ifExists().execute(); // the schema versions run
    await db.schema.dropTable('ipn_inbox_control').ifExists().execute();
    await db.schema.dropTable('ipn_inbox_claims').ifExists().execute();
    await db.schema.dropTable('ipn_inbox_audit').ifExists().execute();
    await db.schema.dropTable('ipn_inbox_states').ifExists().execute();
    await db.schema.dropTable('ipn_inbox_expected').ifExists().execute();
    await db.schema.dropTable('ipn_inbox').ifExists().execute();
  },
};
// #endregion migration
