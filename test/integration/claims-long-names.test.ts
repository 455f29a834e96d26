import { randomUUID } from 'node:crypto';
import { createPool, type Pool as MysqlPool } from 'mysql2/promise';
import { Pool } from 'pg';
import { MysqlStore } from '../../lib/mysql.js';
import { PostgresStore } from '../../lib/postgres.js';
import type { DurableStore } from '../../lib/index.js';
import { successfulPayload } from '../helpers/payloads.js';
import { databaseUrl, describeWithService, mysqlUrl } from '../helpers/services.js';

/**
 * Two inboxes in one database whose long names share their start (one per merchant account, say) keep
 * claims apart: a key claimed at most once in one is neither a duplicate claim nor a refused receive in the
 * other. Before version 7 a claim was a row of its own inbox; `<table>_claims` cut to the database's limit
 * as the older side tables are would be one table for both, and the second inbox would drop the payment
 * as a resend.
 */

type Store = DurableStore & { migrate(): Promise<void> };

const newKey = (): string => `EFB.${randomUUID().slice(0, 12)}:SUCCESSFUL`;
const lease = () => ({ id: randomUUID(), ms: 60_000 });

/** Two names of `length` characters that differ only in their last one. */
function twins(prefix: string, length: number): [string, string] {
  const stem = `${prefix}_${randomUUID().replaceAll('-', '')}`.padEnd(length - 1, 'x').slice(0, length - 1);
  return [`${stem}a`, `${stem}b`];
}

function scenarios(store: (table: string) => Store, names: () => [string, string]): void {
  test('a key claimed in one inbox is still claimed, or received, in the other', async () => {
    const [first, second] = names().map(store) as [Store, Store];
    await first.migrate();
    await second.migrate();
    const key = newKey();
    expect(await first.claim(key, 60_000, randomUUID())).toBe(true);
    expect(await second.claim(key, 60_000, randomUUID())).toBe(true);
    const other = newKey();
    expect(await first.claim(other, 60_000, randomUUID())).toBe(true);
    const record = successfulPayload({ transaction_id: other.slice(0, other.lastIndexOf(':')) });
    expect(await second.receive(other, record, lease())).toBe(true);
    // A purge of one inbox leaves the other's claims.
    expect(
      await second.purge(new Date(Date.now() + 3_600_000), 'delivered', { insideDedupeWindow: true }),
    ).toBe(1);
    expect(await first.claim(key, 60_000, randomUUID())).toBe(false);
  });
}

describeWithService('PostgreSQL', 'PostgreSQL: long inbox names keep their claims apart', () => {
  const pool = new Pool({ connectionString: databaseUrl(), max: 4 });
  let tables: [string, string];
  beforeAll(() => {
    tables = twins(`ipn_test_long_${process.pid}`, 63);
  });
  afterAll(async () => {
    // The side tables' names are cut: found by the inbox names' common start.
    const { rows } = await pool.query<{ name: string; kind: string }>(
      `SELECT format('%I', c.relname) AS name, 'TABLE' AS kind FROM pg_class c
        WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace AND starts_with(c.relname, $1)
       UNION ALL SELECT p.oid::regprocedure::text, 'FUNCTION' FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace AND starts_with(p.proname, $1)`,
      [tables[0].slice(0, 40)],
    );
    for (const row of rows) await pool.query(`DROP ${row.kind} IF EXISTS ${row.name} CASCADE`);
    await pool.end();
  });
  scenarios(
    (table) => new PostgresStore({ pool, table }),
    () => tables,
  );
});

describeWithService('MariaDB', 'MySQL: long inbox names keep their claims apart', () => {
  let pool: MysqlPool;
  let tables: [string, string];
  beforeAll(() => {
    pool = createPool({ uri: mysqlUrl(), connectionLimit: 4 });
    tables = twins(`ipn_test_long_${process.pid}`, 64);
  });
  afterAll(async () => {
    const [rows] = (await pool.query(
      'SELECT table_name AS name FROM information_schema.tables WHERE table_schema = DATABASE() AND LEFT(table_name, 40) = ?',
      [tables[0].slice(0, 40)],
    )) as unknown as [Array<{ name: string }>];
    for (const row of rows) await pool.query(`DROP TABLE IF EXISTS \`${row.name}\``);
    await pool.end();
  });
  scenarios(
    (table) => new MysqlStore({ pool, table }),
    () => tables,
  );
});
