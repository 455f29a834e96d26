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
/** Your orders, with what you initiated: the transaction_id the service returned, and the amount. */
export class Order extends Model {}

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
  Order.init(
    {
      id: { type: DataTypes.TEXT, primaryKey: true },
      transactionId: { type: DataTypes.TEXT, field: 'transaction_id', allowNull: false },
      amount: { type: DataTypes.DECIMAL, allowNull: false },
      paidAt: { type: DataTypes.DATE, field: 'paid_at' },
    },
    { sequelize, tableName: 'orders', timestamps: false },
  );
  // The store runs its own statements through Sequelize too (give it `pool` as well to run them on a pg pool).
  const store = new PostgresStore({ transactions: sequelizeTransactions(sequelize) });
  const ipn = ipnRouter({ store, delivery: 'at-least-once' });
  ipn.on('successful', async (n, { tx }) => {
    // `tx` is this attempt's Transaction: pass it to every call. A call without `{ transaction: tx }` runs
    // outside the transaction, and commits even when the attempt fails and is retried.
    // Only the order this transaction was initiated for (custom_data), for its amount, and only once:
    const orderId = String(n.custom_data);
    const { amount } = n;
    if (amount === null) throw new Error(`${n.transaction_id} carries no amount`);
    const [paid] = await Order.update(
      { paidAt: new Date() },
      { where: { id: orderId, transactionId: n.transaction_id, amount, paidAt: null }, transaction: tx },
    );
    // Otherwise credit nothing: the throw rolls back; after its retries the notification is `dead` in the
    // inbox, for a person to look at (ipn.inbox, the operator's page).
    if (paid !== 1) throw new Error(`${n.transaction_id} is not the payment of order ${orderId}`);
    await Ledger.create({ transactionId: n.transaction_id, orderId, amount }, { transaction: tx });
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
