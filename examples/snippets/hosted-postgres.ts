// #region pools
import { Pool } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';

/**
 * Supabase or Neon: the app on the pooled URL (PgBouncer or Supavisor in transaction mode), the
 * migration on the direct one. `table` is the inbox's name (`ipn_inbox` unless you choose another).
 */
export async function hostedStore(pooledUrl: string, directUrl: string, table = 'ipn_inbox') {
  const direct = new Pool({ connectionString: directUrl, max: 1 });
  try {
    await new PostgresStore({ pool: direct, table }).migrate(); // DDL and its advisory lock: a session of its own
  } finally {
    await direct.end();
  }
  // No `options: '-c ...'` and no `statement_timeout` here: a transaction-mode pooler refuses the
  // connection for a startup parameter. Set such settings for the role instead (ALTER ROLE ... SET).
  const pool = new Pool({ connectionString: pooledUrl, max: 10, keepAlive: true, query_timeout: 10_000 });
  pool.on('error', (error) => console.error('idle PostgreSQL connection lost', error));
  return { pool, store: new PostgresStore({ pool, table }) };
}
// #endregion pools

/** A router whose listener needs a setting for its own statements, crediting `ledger`. */
export function hostedRouter(store: PostgresStore<Pool>, ledger: string) {
  const ipn = ipnRouter({ store, delivery: 'at-least-once' });
  // #region set-local
  ipn.on('successful', async (n, { db }) => {
    // SET LOCAL ends with the delivery's transaction (ipn-kit also undoes a plain SET, at a small cost).
    await db.query("SET LOCAL lock_timeout = '2s'");
    await db.query(`INSERT INTO ${ledger} (transaction_id) VALUES ($1)`, [n.transaction_id]);
  });
  // #endregion set-local
  return ipn;
}
