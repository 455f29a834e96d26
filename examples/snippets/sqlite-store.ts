import { app, logger } from './context.js';
// #region sqlite-store
import Database from 'better-sqlite3';
import { ipnRouter } from 'ipn-kit';
import { SqliteStore } from 'ipn-kit/sqlite';

const store = new SqliteStore({ database: new Database('ipn.db') });
const ipn = ipnRouter({ store, delivery: 'at-least-once' });
ipn.on('successful', (n, { db }) => {
  // A second connection to the file, inside the delivery's transaction: this row commits with the mark.
  db.prepare('INSERT INTO ledger (transaction_id, amount) VALUES (?, ?)').run(n.transaction_id, n.amount);
});
app.use('/ipn', ipn);

async function start(): Promise<void> {
  await store.migrate(); // idempotent; or run sqliteSchemaSql() in your migrations
  app.listen(Number(process.env.PORT ?? 3000));
}
start().catch((error: unknown) => {
  logger.error({ error }, 'could not start');
  process.exit(1);
});
// #endregion sqlite-store
