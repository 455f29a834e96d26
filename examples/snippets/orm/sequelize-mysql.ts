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
  const store = new MysqlStore({ pool, transactions: sequelizeTransactions(sequelize) });
  const ipn = ipnRouter({ store, delivery: 'at-least-once' });
  ipn.on('successful', async (n, { tx }) => {
    // Pass `{ transaction: tx }` to every call: one without it commits whatever happens to the attempt.
    await Ledger.create(
      { transactionId: n.transaction_id, orderId: n.custom_data, amount: n.amount },
      { transaction: tx },
    );
  });
  return { ipn, store };
}
