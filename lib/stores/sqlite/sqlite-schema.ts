import {
  latestSql,
  schemaMigrations,
  type Migration,
  type MigrationStep,
  type SchemaDialect,
  type SchemaMigration,
  NOT_HERE,
  numberedMigrations,
  statement,
} from '../schema-migrations.js';
import { quoteTable, sqliteAuditSql } from './sqlite-sql.js';

/**
 * A nullable column added to a table of the set (`name`, unquoted), in a version of its own. SQLite has no
 * `ADD COLUMN IF NOT EXISTS`: `migrate()` skips the statement when the column is there. `column` and `type`
 * are ipn-kit's own text, never a user's.
 */
export function addColumn(name: string, column: string, type: string): MigrationStep {
  return {
    sql: `ALTER TABLE "${name}" ADD COLUMN ${column} ${type}`,
    done: `SELECT 1 FROM pragma_table_info('${name}') WHERE name = '${column}'`,
  };
}

/** Now in milliseconds since the epoch, by SQLite's clock (the app's machine's). */
const NOW_MS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)";

/**
 * Version 5: the sweep's lock moves from a row of `<table>_expected` (`transaction_id = ''`, its owner in
 * `custom_data`, its end in `due_at`) to the row `sweep` of `<table>_control` (owner in `value`, end in the
 * new `until_ms`), and two triggers refuse the old row from now on: a process of an older ipn-kit, still
 * running on the file, fails to take its lock there (its sweep does not run; an `error` event) rather than
 * run beside the new processes' one. Each statement can run twice: a lock already moved is kept.
 */
function sweepLockSteps(table: string): MigrationStep[] {
  const expected = `"${table}_expected"`;
  const refuse = (event: 'INSERT' | 'UPDATE'): MigrationStep =>
    statement(`CREATE TRIGGER IF NOT EXISTS "${table}_expected_no_sweep_lock_${event.toLowerCase()}"
BEFORE ${event} ON ${expected} FOR EACH ROW WHEN NEW.transaction_id = ''
BEGIN
  SELECT RAISE(ABORT, 'ipn-kit: the sweep''s lock is in ${table}_control since schema version 5, not in ${table}_expected: an older ipn-kit runs on this file');
END`);
  return [
    addColumn(`${table}_control`, 'until_ms', 'INTEGER'),
    statement(`INSERT OR IGNORE INTO "${table}_control" (name, value, updated_ms, until_ms)
SELECT 'sweep', coalesce(custom_data, ''), ${NOW_MS}, due_at FROM ${expected} WHERE transaction_id = ''`),
    statement(`DELETE FROM ${expected} WHERE transaction_id = ''`),
    refuse('INSERT'),
    refuse('UPDATE'),
  ];
}

/**
 * Version 7: at-most-once claims are rows of `<table>_claims` (key, token, when, until when) from now on, and
 * two triggers refuse a new claim marker (an older ipn-kit's claim: see `olderClaim`) in the inbox (SQLite
 * cannot add a CHECK to a table): a process of an older ipn-kit, still running on the file, fails its claim
 * (a store failure: 503, and the service resends) rather than take a key a newer process claimed in
 * `<table>_claims`, which it does not look at. The markers already there stay, for the older process to
 * delete on release (triggers look at the rows written, not at those there), or to find again by its
 * token. Each statement can run twice.
 */
function claimsSteps(table: string): MigrationStep[] {
  const inbox = quoteTable(table);
  const claims = `"${table}_claims"`;
  // An INSERT of a key the inbox has a row of is let through, to its ON CONFLICT (key) DO NOTHING: an older
  // process asking again about its claim (a lost answer) then finds its own marker by its token.
  const refuse = (event: 'INSERT' | 'UPDATE'): MigrationStep =>
    statement(`CREATE TRIGGER IF NOT EXISTS "${table}_no_claim_marker_${event.toLowerCase()}"
BEFORE ${event} ON ${inbox} FOR EACH ROW
WHEN NEW.record = '{}' AND NEW.status = 'delivered' AND NEW.lease_id IS NOT NULL${
      event === 'INSERT' ? `\n  AND NOT EXISTS (SELECT 1 FROM ${inbox} WHERE key = NEW.key)` : ''
    }
BEGIN
  SELECT RAISE(ABORT, 'ipn-kit: claims are in ${table}_claims since schema version 7, not in ${table}: an older ipn-kit runs on this file');
END`);
  return [
    statement(`CREATE TABLE IF NOT EXISTS ${claims} (
  key TEXT PRIMARY KEY NOT NULL,
  token TEXT NOT NULL,
  claimed_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL
)`),
    statement(`CREATE INDEX IF NOT EXISTS "${table}_claims_at_idx" ON ${claims} (claimed_at)`),
    refuse('INSERT'),
    refuse('UPDATE'),
  ];
}

/**
 * Every version of the SQLite schema of the table set of inbox `table`, in order. A released version never
 * changes; a change of the schema is one more line at the end (`addColumn(...)` in a version of its own),
 * with the same number in every dialect, and its name in `VERSION_NAMES` (`numberedMigrations`).
 */
export function sqliteMigrationList(table: string): readonly Migration[] {
  const t = quoteTable(table);
  return numberedMigrations([
    // version 1
    {
      tables: [table],
      steps: [
        statement(`CREATE TABLE IF NOT EXISTS ${t} (
  key TEXT PRIMARY KEY NOT NULL,
  transaction_id TEXT NOT NULL,
  state TEXT NOT NULL,
  record TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('received', 'delivered', 'failed', 'dead')),
  attempts INTEGER NOT NULL DEFAULT 0,
  last_error TEXT,
  received_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  next_attempt_at INTEGER NOT NULL,
  delivered_at INTEGER,
  lease_id TEXT,
  lease_until INTEGER
)`),
        statement(`CREATE INDEX IF NOT EXISTS "${table}_due_idx" ON ${t} (status, next_attempt_at)`),
      ],
    },
    // version 2
    {
      tables: [`${table}_expected`, `${table}_states`, `${table}_audit`],
      steps: [
        statement(`CREATE TABLE IF NOT EXISTS "${table}_expected" (
  transaction_id TEXT PRIMARY KEY NOT NULL,
  custom_data TEXT,
  amount REAL,
  expected_at INTEGER NOT NULL,
  due_at INTEGER NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0
)`),
        statement(`CREATE TABLE IF NOT EXISTS "${table}_states" (
  transaction_id TEXT PRIMARY KEY NOT NULL,
  state TEXT NOT NULL,
  decided_at INTEGER NOT NULL
)`),
        statement(sqliteAuditSql(table)),
      ],
    },
    // version 3
    {
      tables: [`${table}_control`],
      steps: [
        statement(`CREATE TABLE IF NOT EXISTS "${table}_control" (
  name TEXT PRIMARY KEY NOT NULL,
  value TEXT NOT NULL,
  updated_ms INTEGER NOT NULL
)`),
      ],
    },
    // version 4
    { tables: [], steps: [addColumn(`${table}_expected`, 'account', 'TEXT')] },
    // version 5
    { tables: [], steps: sweepLockSteps(table) },
    // version 6, PostgreSQL's alone: here the number is kept, so that a version means the same in every dialect
    NOT_HERE,
    // version 7
    { tables: [`${table}_claims`], steps: claimsSteps(table) },
  ]);
}

/** The statements that record `migration` in the version table beside inbox `table`, `<table>_schema`. */
function recordSql(table: string, migration: Migration): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS "${table}_schema" (
  version INTEGER PRIMARY KEY NOT NULL,
  name TEXT NOT NULL,
  applied_at INTEGER NOT NULL
)`,
    `INSERT OR IGNORE INTO "${table}_schema" (version, name, applied_at) VALUES (${migration.version}, ` +
      `'${migration.name.replaceAll("'", "''")}', ${NOW_MS})`,
  ];
}

/**
 * Each version of the SQLite schema of the table set of inbox `table` (the inbox, `<table>_expected`,
 * `<table>_states`, `<table>_audit`, `<table>_control`, `<table>_claims`), as SQL for a migration tool of your own: run those above the version
 * your file is at (`SELECT max(version) FROM <table>_schema`; none: 0), each once, in order.
 * `SqliteStore.migrate()` and `ipn-kit migrate` run the same statements.
 *
 * @param table letters, digits and underscores. @default 'ipn_inbox'
 * @throws TypeError when `table` is not such a name.
 * @example
 * import { sqliteMigrations } from 'ipn-kit/sqlite';
 * for (const { version, sql } of sqliteMigrations('ipn_inbox')) {
 *   if (version > current) database.exec(sql);
 * }
 */
export function sqliteMigrations(table = 'ipn_inbox'): SchemaMigration[] {
  quoteTable(table, 'sqliteMigrations');
  return schemaMigrations(sqliteMigrationList(table), (migration) => recordSql(table, migration));
}

/**
 * The SQL that creates the latest schema of the table set of inbox `table`: the inbox and its index, the
 * expectations (`<table>_expected`), lifecycle (`<table>_states`), audit (`<table>_audit`), control
 * (`<table>_control`) and claims (`<table>_claims`: at-most-once claims, apart from the inbox) tables, and
 * the version table (`<table>_schema`) with every version recorded: the statements of every
 * {@link sqliteMigrations} version, in order. Idempotent while every version is (`IF NOT EXISTS`: versions
 * 1 and 2); run on a file of an earlier version, it brings it to the latest, rows kept.
 *
 * Times are milliseconds since the epoch, from the app's clock (`Date.now()`): every process using the
 * file runs on the same machine, so they share it. The record is JSON text.
 *
 * @param table letters, digits and underscores. @default 'ipn_inbox'
 * @throws TypeError when `table` is not such a name.
 * @example
 * import { sqliteSchemaSql } from 'ipn-kit/sqlite';
 * database.exec(sqliteSchemaSql('ipn_inbox'));
 */
export function sqliteSchemaSql(table = 'ipn_inbox'): string {
  quoteTable(table, 'sqliteSchemaSql');
  return latestSql(sqliteMigrations(table));
}

/** What the SQLite dialect runs its statements through: the store's connection. */
interface Connection {
  /** Runs one or more statements without values (again while the file is busy, up to the busy timeout). */
  exec(sql: string): Promise<unknown>;
  /** The rows of one statement without values. */
  rows(sql: string): unknown[];
}

/**
 * The SQLite part of `migrate()`: every pending version in one `BEGIN IMMEDIATE` transaction, which takes
 * the file's write lock before it reads the version, so that a second process migrating at once waits for
 * it (its busy timeout) and then finds the versions recorded. SQLite's DDL is transactional: a failure
 * rolls every version of the run back. `lock` runs its work once no write of the store's is under way.
 */
export function sqliteSchemaDialect(
  table: string,
  connection: Connection,
  lock: <T>(work: () => Promise<T>) => Promise<T>,
): SchemaDialect {
  const exists = (tables: readonly string[]): Promise<boolean> => {
    if (tables.length === 0) return Promise.resolve(true);
    const names = tables.map((name) => `'${name}'`).join(', ');
    const [row] = connection.rows(
      `SELECT count(*) AS n FROM sqlite_master WHERE type = 'table' AND name IN (${names})`,
    ) as Array<{ n?: unknown }>;
    return Promise.resolve(Number(row?.n) === tables.length);
  };
  const session = {
    exists,
    async version(): Promise<number> {
      if (!(await exists([`${table}_schema`]))) return 0;
      const [row] = connection.rows(
        `SELECT coalesce(max(version), 0) AS version FROM "${table}_schema"`,
      ) as Array<{ version?: unknown }>;
      return Number(row?.version ?? 0);
    },
    async apply(steps: readonly MigrationStep[]): Promise<void> {
      for (const step of steps) {
        if (step.done !== undefined && connection.rows(step.done).length > 0) continue;
        await connection.exec(step.sql);
      }
    },
  };
  return {
    owner: 'SqliteStore',
    table,
    migrations: sqliteMigrationList(table),
    record: (migration) => recordSql(table, migration),
    locked: (work, { dryRun }) =>
      lock(async () => {
        await connection.exec(dryRun ? 'BEGIN' : 'BEGIN IMMEDIATE');
        try {
          const result = await work(session);
          await connection.exec('COMMIT');
          return result;
        } catch (error) {
          try {
            await connection.exec('ROLLBACK');
          } catch {
            // No transaction left to roll back (SQLite rolled it back itself): the error says what failed.
          }
          throw error;
        }
      }),
  };
}
