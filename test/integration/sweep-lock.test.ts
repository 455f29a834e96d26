import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { createPool } from 'mysql2/promise';
import { Pool } from 'pg';
import { MysqlStore, mysqlMigrations } from '../../lib/mysql.js';
import { PostgresStore, postgresMigrations } from '../../lib/postgres.js';
import { SqliteStore, sqliteMigrations } from '../../lib/sqlite.js';
import type { SqlExpectations } from '../../lib/stores/sql-expectations.js';
import { databaseUrl, describeWithService, mysqlUrl } from '../helpers/services.js';

/**
 * The expectations sweep's lock is the row `sweep` of `<table>_control` since schema version 5, no longer a
 * row `transaction_id = ''` of `<table>_expected`: the migration moves a lock there, and an instance of an
 * older ipn-kit (a rolling deploy) can no longer take its lock in `<table>_expected` (its sweep fails rather
 * than run beside the new ones'). The older ipn-kit's statements are copied here as text, as it ran them.
 */

/** What a dialect's tests need. */
interface Dialect {
  /** A store over the table set of `table`, migrated to the latest version. */
  store(table: string): Promise<{ expectations: SqlExpectations; migrate(): Promise<void> }>;
  /** Rows of `sql`. */
  rows(sql: string, values?: unknown[]): Promise<Array<Record<string, unknown>>>;
  /** Runs `sql` (one statement, or the text of a migration). */
  run(sql: string, values?: unknown[]): Promise<void>;
  /** The text of versions 1 to 4, one statement a string, as a tool of one's own runs them. */
  upToVersion4(table: string): string[];
  /** The older ipn-kit's `lockSweep(owner, ms)`, its exact statements: resolves whether it took the lock. */
  oldLockSweep(table: string, owner: string, ms: number): Promise<boolean>;
  quote(name: string): string;
  drop(table: string): Promise<void>;
}

const SUFFIXES = ['', '_expected', '_states', '_audit', '_control', '_schema'];

/**
 * What the guard's refusal says in each dialect: the CHECK's name (PostgreSQL, MySQL), the trigger's message
 * (SQLite). Matched by message, not by `toThrow()`: better-sqlite3's native module is loaded once per Jest
 * worker, so after another test file its errors come from that file's realm and are no `Error` of this one.
 */
const REFUSED = /no_sweep_lock|an older ipn-kit runs on this file/;

function scenarios(d: () => Dialect, prefix: string): void {
  const tables: string[] = [];
  const fresh = (): string => {
    const table = `${prefix}_${randomUUID().slice(0, 8)}`;
    tables.push(table);
    return table;
  };
  afterAll(async () => {
    for (const table of tables) await d().drop(table);
  });
  const sweepRows = (table: string) =>
    d().rows(`SELECT name, value, until_ms FROM ${d().quote(`${table}_control`)} WHERE name = 'sweep'`);
  const expectedIds = async (table: string) =>
    (await d().rows(`SELECT transaction_id FROM ${d().quote(`${table}_expected`)}`)).map((row) =>
      String(row.transaction_id),
    );

  test("the lock is the row 'sweep' of _control; _expected holds only expectations", async () => {
    const table = fresh();
    const { expectations } = await d().store(table);
    await expectations.put({ transactionId: 'EFB.1', expectedAt: 0, dueAt: 0, attempts: 0 });
    expect(await expectations.lockSweep('a', 60_000)).toBe(true);
    expect(await sweepRows(table)).toMatchObject([{ name: 'sweep', value: 'a' }]);
    expect(await expectedIds(table)).toEqual(['EFB.1']);
    // Held: another owner is refused, and its unlock frees nothing; the owner renews it.
    expect(await expectations.lockSweep('b', 60_000)).toBe(false);
    await expectations.unlockSweep('b');
    expect(await expectations.lockSweep('a', 60_000)).toBe(true);
    expect(await expectations.lockSweep('b', 60_000)).toBe(false);
    // The due expectations are what takeDue takes, the lock none of them.
    expect(
      (await expectations.takeDue(Date.now() + 60_000, Date.now() + 120_000, 10)).map((e) => e.transactionId),
    ).toEqual(['EFB.1']);
    // Ended (its end moved into the past): another owner takes it over.
    await d().run(`UPDATE ${d().quote(`${table}_control`)} SET until_ms = 0 WHERE name = 'sweep'`);
    expect(await expectations.lockSweep('b', 60_000)).toBe(true);
    expect(await sweepRows(table)).toMatchObject([{ value: 'b' }]);
    await expectations.unlockSweep('b');
    expect(await sweepRows(table)).toEqual([]);
    expect(await expectations.lockSweep('a', 60_000)).toBe(true);
    expect(await expectedIds(table)).toEqual(['EFB.1']);
  });

  test('a lock held in _expected at version 4 is moved to _control, its owner and end kept', async () => {
    const table = fresh();
    for (const sql of d().upToVersion4(table)) await d().run(sql);
    expect(await d().oldLockSweep(table, 'old-instance', 600_000)).toBe(true);
    const [held] = await d().rows(
      `SELECT custom_data, due_at FROM ${d().quote(`${table}_expected`)} WHERE transaction_id = ''`,
    );
    const { expectations } = await d().store(table);
    expect((await sweepRows(table)).map((row) => ({ ...row, until_ms: Number(row.until_ms) }))).toEqual([
      { name: 'sweep', value: 'old-instance', until_ms: Number(held!.due_at) },
    ]);
    expect(await expectedIds(table)).toEqual([]);
    // Still held by its owner: a new instance waits for it to end.
    expect(await expectations.lockSweep('new-instance', 60_000)).toBe(false);
  });

  test("an older ipn-kit's lockSweep fails on a migrated database (a rolling deploy)", async () => {
    const table = fresh();
    const { expectations } = await d().store(table);
    await expect(d().oldLockSweep(table, 'old-instance', 60_000)).rejects.toMatchObject({ message: REFUSED });
    expect(await expectedIds(table)).toEqual([]);
    // Ours is unaffected.
    expect(await expectations.lockSweep('new-instance', 60_000)).toBe(true);
    await expect(d().oldLockSweep(table, 'old-instance', 60_000)).rejects.toMatchObject({ message: REFUSED });
    expect(await expectedIds(table)).toEqual([]);
  });

  test('version 5 run again (its record deleted) changes nothing and keeps the lock', async () => {
    const table = fresh();
    const store = await d().store(table);
    expect(await store.expectations.lockSweep('a', 60_000)).toBe(true);
    await d().run(`DELETE FROM ${d().quote(`${table}_schema`)} WHERE version = 5`);
    await store.migrate();
    expect(await sweepRows(table)).toMatchObject([{ value: 'a' }]);
    await expect(d().oldLockSweep(table, 'old-instance', 60_000)).rejects.toMatchObject({ message: REFUSED });
  });
}

describeWithService('PostgreSQL', 'PostgreSQL: the sweep lock in _control', () => {
  const pool = new Pool({ connectionString: databaseUrl(), max: 4 });
  pool.on('error', () => {});
  const quote = (name: string) => `"${name}"`;
  const dialect: Dialect = {
    async store(table) {
      const store = new PostgresStore({ pool, table });
      await store.migrate();
      return store;
    },
    rows: async (sql, values) => (await pool.query(sql, values)).rows as Array<Record<string, unknown>>,
    run: async (sql, values) => void (await pool.query(sql, values)),
    upToVersion4: (table) =>
      postgresMigrations(table)
        .slice(0, 4)
        .map((m) => m.sql),
    async oldLockSweep(table, owner, ms) {
      const t = quote(`${table}_expected`);
      const until = `(extract(epoch from clock_timestamp()) * 1000)::bigint`;
      const { rowCount } = await pool.query(
        `INSERT INTO ${t} AS e (transaction_id, custom_data, expected_at, due_at)
         VALUES ('', $1, 0, ${until} + $2)
         ON CONFLICT (transaction_id) DO UPDATE SET custom_data = $1, due_at = ${until} + $2
         WHERE e.custom_data = $1 OR e.due_at < ${until}`,
        [owner, Math.ceil(ms)],
      );
      return rowCount === 1;
    },
    quote,
    drop: async (table) =>
      void (await pool.query(
        `DROP TABLE IF EXISTS ${SUFFIXES.map((s) => quote(`${table}${s}`)).join(', ')}`,
      )),
  };
  scenarios(() => dialect, `h_sweeplock_pg_${process.pid}`);
  afterAll(() => pool.end());
});

describeWithService('MariaDB', 'MySQL: the sweep lock in _control', () => {
  const pool = createPool({ uri: mysqlUrl(), connectionLimit: 4 });
  const quote = (name: string) => `\`${name}\``;
  const dialect: Dialect = {
    async store(table) {
      const store = new MysqlStore({ pool, table });
      await store.migrate();
      return store;
    },
    rows: async (sql, values) => (await pool.query(sql, values))[0] as Array<Record<string, unknown>>,
    run: async (sql, values) => void (await pool.query(sql, values)),
    upToVersion4: (table) =>
      mysqlMigrations(table)
        .slice(0, 4)
        .flatMap((m) => m.statements),
    async oldLockSweep(table, owner, ms) {
      const t = quote(`${table}_expected`);
      const NOW_MS =
        "(TIMESTAMPDIFF(MICROSECOND, TIMESTAMP'1970-01-01 00:00:00', UTC_TIMESTAMP(3)) DIV 1000)";
      const extra = Math.ceil(ms);
      const [updated] = await pool.query(
        `UPDATE ${t} SET custom_data = ?, due_at = ${NOW_MS} + ?
         WHERE transaction_id = '' AND (custom_data = ? OR due_at < ${NOW_MS})`,
        [owner, extra, owner],
      );
      if ((updated as { affectedRows: number }).affectedRows === 1) return true;
      try {
        await pool.query(
          `INSERT INTO ${t} (transaction_id, custom_data, expected_at, due_at, attempts)
           VALUES ('', ?, 0, ${NOW_MS} + ?, 0)`,
          [owner, extra],
        );
        return true;
      } catch (error) {
        if ((error as { errno?: number }).errno === 1062) return false;
        throw error;
      }
    },
    quote,
    drop: async (table) =>
      void (await pool.query(
        `DROP TABLE IF EXISTS ${SUFFIXES.map((s) => quote(`${table}${s}`)).join(', ')}`,
      )),
  };
  scenarios(() => dialect, `h_sweeplock_my_${process.pid}`);
  afterAll(() => pool.end());
});

describe('SQLite: the sweep lock in _control', () => {
  const folder = mkdtempSync(join(tmpdir(), 'ipn-kit-sweeplock-'));
  const path = join(folder, 'ipn.db');
  const database = new Database(path);
  const opened: Database.Database[] = [database];
  const quote = (name: string) => `"${name}"`;
  const dialect: Dialect = {
    async store(table) {
      const own = new Database(path);
      opened.push(own);
      const store = new SqliteStore({ database: own, table });
      await store.migrate();
      return store;
    },
    rows: (sql, values = []) =>
      Promise.resolve(database.prepare(sql).all(...values) as Array<Record<string, unknown>>),
    run: (sql, values = []) =>
      Promise.resolve(void (values.length === 0 ? database.exec(sql) : database.prepare(sql).run(...values))),
    upToVersion4: (table) =>
      sqliteMigrations(table)
        .slice(0, 4)
        .map((m) => m.sql),
    // In a promise: a statement that throws rejects it, as the older store's lockSweep did.
    oldLockSweep: (table, owner, ms) =>
      new Promise((resolve) => {
        const t = quote(`${table}_expected`);
        const now = Date.now();
        const changed = database
          .prepare(
            `INSERT INTO ${t} (transaction_id, custom_data, expected_at, due_at) VALUES ('', ?, 0, ?)
         ON CONFLICT (transaction_id) DO UPDATE SET custom_data = excluded.custom_data, due_at = excluded.due_at
         WHERE custom_data = ? OR due_at < ?`,
          )
          .run(owner, now + Math.ceil(ms), owner, now).changes;
        resolve(changed === 1);
      }),
    quote,
    drop: (table) => {
      for (const s of SUFFIXES) database.exec(`DROP TABLE IF EXISTS ${quote(`${table}${s}`)}`);
      return Promise.resolve();
    },
  };
  scenarios(() => dialect, 'h_sweeplock_lite');
  afterAll(() => {
    for (const made of opened) made.close();
    rmSync(folder, { recursive: true, force: true });
  });
});
