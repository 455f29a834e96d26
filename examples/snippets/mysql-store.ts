import { app, logger } from './context.js';
// #region mysql-store
import { createPool } from 'mysql2/promise';
import { ipnRouter } from 'ipn-kit';
import { MysqlStore } from 'ipn-kit/mysql';

// mysql2's defaults are what the store needs: keep the FOUND_ROWS flag, and no NO_BACKSLASH_ESCAPES.
const pool = createPool({ uri: process.env.MYSQL_URL, connectionLimit: 10 });
const store = new MysqlStore({ pool });
const ipn = ipnRouter({ store, delivery: 'at-least-once' });
ipn.on('successful', async (n, { db }) => {
  // A connection of your pool inside the delivery's transaction: this write commits with the delivered mark.
  await db.query('INSERT INTO ledger (transaction_id, order_id, amount) VALUES (?, ?, ?)', [
    n.transaction_id,
    n.custom_data,
    n.amount,
  ]);
});
app.use('/ipn', ipn);

async function start(): Promise<void> {
  await store.migrate(); // once, before listening (safe from several instances at once)
  app.listen(Number(process.env.PORT ?? 3000));
}
start().catch((error: unknown) => {
  logger.error({ error }, 'could not start');
  process.exit(1);
});
// #endregion mysql-store
