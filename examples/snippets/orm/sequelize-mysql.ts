import type { Pool } from 'mysql2/promise';
import { DataTypes, type Sequelize } from 'sequelize';
import { ipnRouter } from 'ipn-kit';
import { MysqlStore } from 'ipn-kit/mysql';
import { sequelizeTransactions } from 'ipn-kit/orm';

/**
 * `pool`: your mysql2 pool; `sequelize`: your Sequelize instance on the same database,
 * `new Sequelize(process.env.MYSQL_URL, { dialect: 'mysql' })`.
 */
export function sequelizeLedgerRouter(pool: Pool, sequelize: Sequelize) {
  const Ledger = sequelize.define(
    'Ledger',
    {
      transactionId: { type: DataTypes.STRING, field: 'transaction_id', primaryKey: true },
      orderId: { type: DataTypes.STRING, field: 'order_id' },
      amount: { type: DataTypes.DECIMAL(12, 2) },
    },
    { tableName: 'ledger', timestamps: false },
  );
  // Your orders, with what you initiated: the transaction_id the service returned, and the amount.
  const Order = sequelize.define(
    'Order',
    {
      id: { type: DataTypes.STRING, primaryKey: true },
      transactionId: { type: DataTypes.STRING, field: 'transaction_id', allowNull: false },
      amount: { type: DataTypes.DECIMAL(12, 2), allowNull: false },
      paidAt: { type: DataTypes.DATE, field: 'paid_at' },
    },
    { tableName: 'orders', timestamps: false },
  );
  const store = new MysqlStore({ pool, transactions: sequelizeTransactions(sequelize) });
  const ipn = ipnRouter({ store, delivery: 'at-least-once' });
  ipn.on('successful', async (n, { tx }) => {
    // Pass `{ transaction: tx }` to every call: one without it commits whatever happens to the attempt.
    // Only the order this transaction was initiated for (custom_data), for its amount, and only once:
    const orderId = String(n.custom_data);
    const { amount } = n;
    if (amount === null) throw new Error(`${n.transaction_id} carries no amount`);
    const [paid] = await Order.update(
      { paidAt: new Date() },
      { where: { id: orderId, transactionId: n.transaction_id, amount, paidAt: null }, transaction: tx },
    );
    // Otherwise credit nothing: the throw rolls back; after its retries the notification is `dead`.
    if (paid !== 1) throw new Error(`${n.transaction_id} is not the payment of order ${orderId}`);
    await Ledger.create({ transactionId: n.transaction_id, orderId, amount }, { transaction: tx });
  });
  return { ipn, store };
}
