import { app, logger } from './context.js';
// #region postgres-store
import { Pool } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';

const pool = new Pool({
  connectionString: process.env.DATABASE_URL,
  // A connection behind a dropped network is found dead (keepAlive), and a query stuck on it gives its
  // connection back instead of holding it forever (query_timeout, in ms): the router recovers once the
  // network heals. pg's defaults are neither.
  keepAlive: true,
  query_timeout: 10_000,
  connectionTimeoutMillis: 5_000,
});
// Without an error listener, pg crashes the process when an idle connection drops.
pool.on('error', (error) => logger.error({ error }, 'idle PostgreSQL connection lost'));
const store = new PostgresStore({ pool });
app.use('/ipn', ipnRouter({ store, delivery: 'at-least-once' }));

async function start(): Promise<void> {
  await store.migrate(); // once, before listening (safe from several instances at once)
  app.listen(Number(process.env.PORT ?? 3000));
}
start().catch((error: unknown) => {
  logger.error({ error }, 'could not start');
  process.exit(1);
});
// #endregion postgres-store
