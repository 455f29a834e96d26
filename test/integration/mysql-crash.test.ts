import { createPool, type RowDataPacket } from 'mysql2/promise';
import { MysqlStore } from '../../lib/mysql.js';
import { describeCrashLedger } from '../helpers/crash-ledger.js';
import { mysqlUrl } from '../helpers/services.js';

// Each process start costs a second or two of CPU on a shared 2-core machine: a dozen kills in all.
jest.setTimeout(180_000);

describeCrashLedger({
  service: 'MariaDB',
  name: 'exactly once on the ledger across SIGKILLs, with MysqlStore',
  store: 'mysql',
  prefix: 'mycrash',
  async open(table, ledger) {
    const pool = createPool({ uri: mysqlUrl(), connectionLimit: 2 });
    await new MysqlStore({ pool, table }).migrate();
    await pool.query(`CREATE TABLE ${ledger} (transaction_id VARCHAR(255) NOT NULL, amount DOUBLE)`);
    return {
      async delivered(keys) {
        const [rows] = await pool.query<RowDataPacket[]>(
          `SELECT COUNT(*) AS n FROM ${table} WHERE \`key\` IN (?) AND status = 'delivered'`,
          [keys],
        );
        return Number(rows[0]?.n);
      },
      async ledgerCounts() {
        const [rows] = await pool.query<RowDataPacket[]>(
          `SELECT transaction_id, COUNT(*) AS n FROM ${ledger} GROUP BY transaction_id ORDER BY transaction_id`,
        );
        return rows.map((row) => ({ transaction_id: row.transaction_id as unknown, n: Number(row.n) }));
      },
      async close() {
        await pool.query(`DROP TABLE IF EXISTS ${table}, ${table}_expected, ${ledger}`);
        await pool.end();
      },
    };
  },
});
