import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import { createPool, type Pool as MysqlPool } from 'mysql2/promise';
import { Pool } from 'pg';
import { runMigrations, type Migration, type SchemaDialect } from '../../lib/stores/schema-migrations.js';
import { addColumn as mysqlAddColumn, mysqlSchemaDialect } from '../../lib/stores/mysql/mysql-schema.js';
import {
  addColumn as postgresAddColumn,
  postgresSchemaDialect,
} from '../../lib/stores/postgres/postgres-schema.js';
import { addColumn as sqliteAddColumn, sqliteSchemaDialect } from '../../lib/stores/sqlite/sqlite-schema.js';
import { databaseUrl, describeWithService, mysqlUrl } from '../helpers/services.js';
import { postgresMigrations } from '../../lib/postgres.js';

/** The version after the latest: the one each dialect's list gets here. */
const NEXT = postgresMigrations().length + 1;

/**
 * The next schema change is one line: a version that adds a nullable column with the dialect's
 * `addColumn`. Here the next version, of that kind, added to each dialect's real list: it runs once, records
 * itself, and runs again harmlessly when its record is missing (two processes at once, a version whose
 * DDL committed before its record, as MySQL's does), where MySQL 8 and SQLite have no `ADD COLUMN IF NOT
 * EXISTS`.
 */
function withNextVersion(dialect: SchemaDialect, step: Migration['steps'][number]): SchemaDialect {
  const next: Migration = { version: NEXT, name: 'a note on each entry', tables: [], steps: [step] };
  return { ...dialect, migrations: [...dialect.migrations, next] };
}

function scenario(
  make: (table: string) => SchemaDialect,
  columns: (table: string) => Promise<string[]>,
  forget: (table: string) => Promise<void>,
  drop: (table: string) => Promise<void>,
) {
  const table = `ipn_test_addcol_${process.pid}_${randomUUID().slice(0, 6)}`;
  afterAll(() => drop(table));

  test('a version that adds a column runs once, and again harmlessly when its record is missing', async () => {
    expect(await runMigrations(make(table))).toMatchObject({ from: 0, to: NEXT });
    expect(await columns(table)).toContain('note');
    expect(await runMigrations(make(table))).toEqual({ from: NEXT, to: NEXT, migrations: [] });
    await forget(table); // the column is there, its version not recorded
    const again = await runMigrations(make(table));
    expect(again).toMatchObject({ from: NEXT - 1, to: NEXT });
    expect(again.migrations.map((m) => m.version)).toEqual([NEXT]);
    expect((await columns(table)).filter((c) => c === 'note')).toHaveLength(1);
  });
}

describeWithService('PostgreSQL', 'PostgreSQL: a version that adds a column', () => {
  const pool = new Pool({ connectionString: databaseUrl(), max: 2 });
  pool.on('error', () => {});
  scenario(
    (table) =>
      withNextVersion(
        postgresSchemaDialect(table, (text) => pool.query(text)),
        postgresAddColumn(`"${table}"`, 'note', 'text'),
      ),
    async (table) =>
      (
        await pool.query('SELECT column_name FROM information_schema.columns WHERE table_name = $1', [table])
      ).rows.map((row: { column_name: string }) => row.column_name),
    async (table) => void (await pool.query(`DELETE FROM "${table}_schema" WHERE version = ${NEXT}`)),
    async (table) => {
      const all = ['', '_expected', '_states', '_audit', '_schema'].map((s) => `"${table}${s}"`).join(', ');
      await pool.query(`DROP TABLE IF EXISTS ${all}`);
      await pool.end();
    },
  );
});

describeWithService('MariaDB', 'MySQL: a version that adds a column', () => {
  let pool: MysqlPool;
  beforeAll(() => {
    pool = createPool({ uri: mysqlUrl(), connectionLimit: 2 });
  });
  scenario(
    (table) =>
      withNextVersion(
        mysqlSchemaDialect(table, async (work) => {
          const connection = await pool.getConnection();
          try {
            return await work({
              rows: async (sql, values) =>
                (await connection.query(sql, values))[0] as Array<Record<string, unknown>>,
            });
          } finally {
            connection.release();
          }
        }),
        mysqlAddColumn({ database: undefined, name: table, quoted: `\`${table}\`` }, 'note', 'TEXT NULL'),
      ),
    async (table) =>
      (
        (
          await pool.query(
            'SELECT column_name AS c FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ?',
            [table],
          )
        )[0] as Array<{ c: string }>
      ).map((row) => row.c),
    async (table) => void (await pool.query(`DELETE FROM \`${table}_schema\` WHERE version = ${NEXT}`)),
    async (table) => {
      const all = ['', '_expected', '_states', '_audit', '_schema'].map((s) => `\`${table}${s}\``).join(', ');
      await pool.query(`DROP TABLE IF EXISTS ${all}`);
      await pool.end();
    },
  );
});

describe('SQLite: a version that adds a column', () => {
  const database = new Database(':memory:');
  scenario(
    (table) =>
      withNextVersion(
        sqliteSchemaDialect(
          table,
          {
            exec: (sql) => Promise.resolve(database.exec(sql)),
            rows: (sql) => database.prepare(sql).all(),
          },
          (work) => work(),
        ),
        sqliteAddColumn(table, 'note', 'TEXT'),
      ),
    (table) =>
      Promise.resolve(
        (
          database.prepare(`SELECT name FROM pragma_table_info('${table}')`).all() as Array<{ name: string }>
        ).map((row) => row.name),
      ),
    (table) => Promise.resolve(void database.exec(`DELETE FROM "${table}_schema" WHERE version = ${NEXT}`)),
    () => Promise.resolve(void database.close()),
  );
});
