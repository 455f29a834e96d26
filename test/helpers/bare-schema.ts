import { Pool } from 'pg';
import { databaseUrl } from './services.js';

/**
 * For one test file of the documented ORM setups: a PostgreSQL schema of its own with no inbox (the file's
 * migrations create it), and the tables of `sql`. `pool()` is on that schema. Dropped at the end.
 */
export function bareSchema(prefix: string, sql: string[] = []) {
  const schema = `${prefix}_${process.pid}_${Date.now() % 100_000}`;
  let pool: Pool | undefined;
  beforeAll(async () => {
    const admin = new Pool({ connectionString: databaseUrl(), max: 1 });
    await admin.query(`CREATE SCHEMA ${schema}`);
    await admin.end();
    pool = new Pool({ connectionString: databaseUrl(), max: 3, options: `-c search_path=${schema}` });
    pool.on('error', () => {});
    for (const statement of sql) await pool.query(statement);
  });
  afterAll(async () => {
    await pool?.query(`DROP SCHEMA ${schema} CASCADE`);
    await pool?.end();
  });
  return {
    schema,
    pool: () => pool!,
    /** Whether `table` exists in the schema. */
    exists: async (table: string) =>
      (await pool!.query('SELECT to_regclass($1) IS NOT NULL AS found', [table])).rows[0].found as boolean,
    /**
     * What an ORM's schema sync could change of `table`: its columns (type, null, default), constraints,
     * indexes, and its rows.
     */
    shapeOf: async (table: string) => ({
      columns: (
        await pool!.query(
          `SELECT column_name, data_type, is_nullable, column_default FROM information_schema.columns
           WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`,
          [table],
        )
      ).rows,
      constraints: (
        await pool!.query(
          `SELECT conname, pg_get_constraintdef(oid) AS definition FROM pg_constraint
           WHERE conrelid = to_regclass($1) ORDER BY conname`,
          [table],
        )
      ).rows,
      indexes: (
        await pool!.query(
          `SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = $1
           ORDER BY indexname`,
          [table],
        )
      ).rows,
      rows: (await pool!.query(`SELECT * FROM ${table} ORDER BY 1`)).rows,
    }),
  };
}
