/**
 * Exactly once with TypeORM: each delivery attempt runs in a TypeORM transaction, and the listener writes
 * through its EntityManager (`tx`). The inbox is created by a TypeORM migration; an entity of it that
 * matches the table exactly, for apps that run `synchronize`. test/integration/orm/typeorm.test.ts runs them
 * against a real PostgreSQL.
 */
// #region typeorm
import { EntitySchema, IsNull, type DataSource } from 'typeorm';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { typeormTransactions } from 'ipn-kit/orm';

export const Ledger = new EntitySchema<{
  id: number;
  transactionId: string;
  orderId: string;
  amount: number | null;
}>({
  name: 'Ledger',
  tableName: 'ledger',
  columns: {
    id: { type: 'integer', primary: true, generated: 'increment' },
    transactionId: { name: 'transaction_id', type: 'text' },
    orderId: { name: 'order_id', type: 'text' },
    amount: { type: 'numeric', nullable: true },
  },
});

/** Your orders, with what you initiated: the transaction_id the service returned, and the amount. */
export const Order = new EntitySchema<{
  id: string;
  transactionId: string;
  amount: number;
  paidAt: Date | null;
}>({
  name: 'Order',
  tableName: 'orders',
  columns: {
    id: { type: 'text', primary: true },
    transactionId: { name: 'transaction_id', type: 'text' },
    amount: { type: 'numeric' },
    paidAt: { name: 'paid_at', type: 'timestamptz', nullable: true },
  },
});

/** `dataSource`: your DataSource (`type: 'postgres'`, `Ledger` and `Order` among its entities), ready. */
export function ledgerRouter(dataSource: DataSource) {
  // The store runs its own statements through TypeORM too (give it `pool` as well to run them on a pg pool).
  const store = new PostgresStore({ transactions: typeormTransactions(dataSource) });
  const ipn = ipnRouter({ store, delivery: 'at-least-once' });
  ipn.on('successful', async (n, { tx }) => {
    // `tx` is this attempt's EntityManager: what goes through it commits with the delivered mark, or not at
    // all. `dataSource.manager` or a repository of `dataSource` would write outside it.
    // Only the order this transaction was initiated for (custom_data), for its amount, and only once:
    const orderId = String(n.custom_data);
    const { amount } = n;
    if (amount === null) throw new Error(`${n.transaction_id} carries no amount`);
    const paid = await tx.update(
      Order,
      { id: orderId, transactionId: n.transaction_id, amount, paidAt: IsNull() },
      { paidAt: new Date() },
    );
    // Otherwise credit nothing: the throw rolls back; after its retries the notification is `dead` in the
    // inbox, for a person to look at (ipn.inbox, the operator's page).
    if (paid.affected !== 1) throw new Error(`${n.transaction_id} is not the payment of order ${orderId}`);
    await tx.insert(Ledger, { transactionId: n.transaction_id, orderId, amount });
  });
  return { ipn, store };
}
// #endregion typeorm

// #region typeorm-migration
import type { MigrationInterface, QueryRunner } from 'typeorm';
import { postgresExpectationsSql, postgresSchemaSql } from 'ipn-kit/postgres';

/** ipn-kit's inbox, and the table of `ipn.expect()`: what `store.migrate()` would create. */
export class IpnInbox1764028800000 implements MigrationInterface {
  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(postgresSchemaSql());
    await queryRunner.query(postgresExpectationsSql());
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      'DROP TABLE IF EXISTS ipn_inbox_schema, ipn_inbox_control, ipn_inbox_claims, ipn_inbox_audit, ipn_inbox_states, ipn_inbox_expected, ipn_inbox; ' +
        'DROP FUNCTION IF EXISTS ipn_inbox_mark(text, text)',
    );
  }
}
// #endregion typeorm-migration

// #region typeorm-inbox-entity
/**
 * The inbox as ipn-kit creates it, to the name of each constraint and index: `synchronize` compares an
 * entity with its table and makes the table match (it drops a check or an index the entity lacks, and a
 * column whose type differs, with its data). An app that never reads the inbox through TypeORM needs no
 * entity: `synchronize` leaves the tables of no entity alone.
 */
export const IpnInboxEntry = new EntitySchema<Record<string, unknown>>({
  name: 'IpnInboxEntry',
  tableName: 'ipn_inbox',
  columns: {
    key: { type: 'text', primary: true, primaryKeyConstraintName: 'ipn_inbox_pkey' },
    transactionId: { name: 'transaction_id', type: 'text' },
    state: { type: 'text' },
    record: { type: 'jsonb' },
    status: { type: 'text' },
    attempts: { type: 'integer', default: 0 },
    lastError: { name: 'last_error', type: 'text', nullable: true },
    receivedAt: { name: 'received_at', type: 'timestamptz', default: () => 'now()' },
    updatedAt: { name: 'updated_at', type: 'timestamptz', default: () => 'now()' },
    nextAttemptAt: { name: 'next_attempt_at', type: 'timestamptz', default: () => 'now()' },
    deliveredAt: { name: 'delivered_at', type: 'timestamptz', nullable: true },
    leaseId: { name: 'lease_id', type: 'text', nullable: true },
    leaseUntil: { name: 'lease_until', type: 'timestamptz', nullable: true },
  },
  indices: [{ name: 'ipn_inbox_due_idx', columns: ['status', 'nextAttemptAt'] }],
  checks: [
    { name: 'ipn_inbox_status_check', expression: `status IN ('received', 'delivered', 'failed', 'dead')` },
    { name: 'ipn_inbox_check', expression: `key = transaction_id || ':' || state` },
    // Schema version 7: no claim of an older ipn-kit (delivered, the record {}, a token) in a rolling deploy.
    {
      name: 'ipn_kit_no_claim_marker',
      expression: `NOT (record = '{}'::jsonb AND status = 'delivered' AND lease_id IS NOT NULL)`,
    },
  ],
});
// #endregion typeorm-inbox-entity
