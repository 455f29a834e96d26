import { Pool } from 'pg';
import { PostgresStore } from 'ipn-kit/postgres';
import { databaseUrl } from './services.js';

/**
 * For one test file of exactly-once delivery: a PostgreSQL schema of its own (other engineers run tests on
 * the same server, and the snippets use plain table names), with the inbox migrated and a `ledger` that has
 * no unique constraint, so a missing or a second credit shows as a row count; `sql` adds tables of the
 * file's own. `pool()` is on that schema; `newPool(max)` makes another, ended with it. Dropped at the end.
 */
export function ledgerSchema(prefix: string, sql: string[] = []) {
  const schema = `${prefix}_${process.pid}_${Date.now() % 100_000}`;
  const pools: Pool[] = [];
  const newPool = (max = 6): Pool => {
    const pool = new Pool({
      connectionString: databaseUrl(),
      max,
      idleTimeoutMillis: 500,
      options: `-c search_path=${schema}`,
    });
    pool.on('error', () => {});
    pools.push(pool);
    return pool;
  };
  let main: Pool | undefined;
  beforeAll(async () => {
    const admin = new Pool({ connectionString: databaseUrl(), max: 1 });
    await admin.query(`CREATE SCHEMA ${schema}`);
    await admin.end();
    main = newPool();
    await new PostgresStore({ pool: main }).migrate();
    await main.query(
      'CREATE TABLE ledger (transaction_id text NOT NULL, order_id text NOT NULL, amount numeric)',
    );
    for (const statement of sql) await main.query(statement);
  });
  afterAll(async () => {
    await main?.query(`DROP SCHEMA ${schema} CASCADE`);
    await Promise.all(pools.map((pool) => pool.end()));
  });
  const pool = (): Pool => main!;
  return {
    schema,
    pool,
    newPool,
    /** The inbox key of a SUCCESSFUL notification. */
    keyOf: (payload: Record<string, unknown>) => `${String(payload.transaction_id)}:SUCCESSFUL`,
    /** The inbox entry of `key` as stored. */
    entryOf: async (key: string) =>
      (await pool().query('SELECT status, attempts, last_error FROM ipn_inbox WHERE key = $1', [key]))
        .rows[0] as { status: string; attempts: number; last_error: string | null } | undefined,
    /** The ledger rows of a transaction. */
    ledgerOf: async (id: unknown) =>
      (await pool().query('SELECT order_id FROM ledger WHERE transaction_id = $1 ORDER BY order_id', [id]))
        .rows as Array<{ order_id: string }>,
  };
}
