import { Pool } from 'pg';
import { PostgresStore } from '../../lib/postgres.js';
import { describeCrashLedger, type CrashDatabase } from '../helpers/crash-ledger.js';
import { databaseUrl } from '../helpers/services.js';

// Each process start costs a second or two of CPU on a shared 2-core machine: a dozen kills in all.
jest.setTimeout(180_000);

const backend = {
  service: 'PostgreSQL',
  store: 'postgres',
  async open(table: string, ledger: string): Promise<CrashDatabase> {
    const pool = new Pool({ connectionString: databaseUrl(), max: 2 });
    await new PostgresStore({ pool, table }).migrate();
    await pool.query(`CREATE TABLE ${ledger} (transaction_id text NOT NULL, amount numeric)`);
    return {
      async delivered(keys) {
        const { rows } = await pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM ${table} WHERE key = ANY($1) AND status = 'delivered'`,
          [keys],
        );
        return rows[0]!.n;
      },
      async ledgerCounts() {
        const { rows } = await pool.query<{ transaction_id: unknown; n: number }>(
          `SELECT transaction_id, count(*)::int AS n FROM ${ledger} GROUP BY transaction_id ORDER BY transaction_id`,
        );
        return rows;
      },
      async close() {
        await pool.query(`DROP TABLE IF EXISTS ${table}, ${ledger}`);
        await pool.end();
      },
    };
  },
} as const;

describeCrashLedger({ ...backend, name: 'exactly once on the ledger across SIGKILLs', prefix: 'crash' });
