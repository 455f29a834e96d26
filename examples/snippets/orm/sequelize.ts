/**
 * Exactly once with Sequelize: each delivery attempt runs in a Sequelize transaction, and the listener
 * passes it (`tx`) to every call. The inbox is created by a Sequelize migration (sequelize-migrations/); a
 * model of it that `sequelize.sync()` leaves alone. test/integration/orm/sequelize.test.ts runs them against
 * a real PostgreSQL.
 */
// #region sequelize
import { DataTypes, Model, type Sequelize } from 'sequelize';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { sequelizeTransactions } from 'ipn-kit/orm';

export class Ledger extends Model {}

/** `sequelize`: your Sequelize instance, `new Sequelize(process.env.DATABASE_URL, { dialect: 'postgres' })`. */
export function ledgerRouter(sequelize: Sequelize) {
  Ledger.init(
    {
      transactionId: { type: DataTypes.TEXT, field: 'transaction_id' },
      orderId: { type: DataTypes.TEXT, field: 'order_id' },
      amount: { type: DataTypes.DECIMAL },
    },
    { sequelize, tableName: 'ledger', timestamps: false },
  );
  // The store runs its own statements through Sequelize too (give it `pool` as well to run them on a pg pool).
  const store = new PostgresStore({ transactions: sequelizeTransactions(sequelize) });
  const ipn = ipnRouter({ store, delivery: 'at-least-once' });
  ipn.on('successful', async (n, { tx }) => {
    // `tx` is this attempt's Transaction: pass it to every call. A call without `{ transaction: tx }` runs
    // outside the transaction, and commits even when the attempt fails and is retried.
    await Ledger.create(
      { transactionId: n.transaction_id, orderId: n.custom_data, amount: n.amount },
      { transaction: tx },
    );
    await sequelize.query('UPDATE orders SET paid_at = now() WHERE id = $1', {
      bind: [n.custom_data],
      transaction: tx,
    });
  });
  return { ipn, store };
}
// #endregion sequelize

// #region sequelize-inbox-model
/**
 * The inbox, to read it through Sequelize. `sequelize.sync()` creates only the tables that do not exist, so
 * it leaves this one as ipn-kit created it; never `sync({ alter: true })` or `sync({ force: true })` it.
 */
export class IpnInboxEntry extends Model {}

export function initIpnInboxEntry(sequelize: Sequelize) {
  IpnInboxEntry.init(
    {
      key: { type: DataTypes.TEXT, primaryKey: true },
      transactionId: { type: DataTypes.TEXT, field: 'transaction_id', allowNull: false },
      state: { type: DataTypes.TEXT, allowNull: false },
      record: { type: DataTypes.JSONB, allowNull: false },
      status: { type: DataTypes.TEXT, allowNull: false },
      attempts: { type: DataTypes.INTEGER, allowNull: false, defaultValue: 0 },
      lastError: { type: DataTypes.TEXT, field: 'last_error' },
      receivedAt: { type: DataTypes.DATE, field: 'received_at', allowNull: false },
      updatedAt: { type: DataTypes.DATE, field: 'updated_at', allowNull: false },
      nextAttemptAt: { type: DataTypes.DATE, field: 'next_attempt_at', allowNull: false },
      deliveredAt: { type: DataTypes.DATE, field: 'delivered_at' },
      leaseId: { type: DataTypes.TEXT, field: 'lease_id' },
      leaseUntil: { type: DataTypes.DATE, field: 'lease_until' },
    },
    { sequelize, tableName: 'ipn_inbox', timestamps: false },
  );
  return IpnInboxEntry;
}
// #endregion sequelize-inbox-model
