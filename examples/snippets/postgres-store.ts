import { app, logger } from './context.js';
// #region postgres-store
import { Pool } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';

const pool = new Pool({ connectionString: process.env.DATABASE_URL });
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
