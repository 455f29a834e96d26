import {
  distinctName,
  olderClaim,
  schemaMigrations,
  type Migration,
  type MigrationStep,
  type SchemaDialect,
  type SchemaMigration,
  NOT_HERE,
  numberedMigrations,
  statement,
} from '../schema-migrations.js';
import { mysqlLifecycleSql } from './mysql-lifecycle.js';
import {
  EMPTY_RECORD,
  msOf,
  mysqlAuditSql,
  mysqlClaimsName,
  mysqlExpectationsSql,
  mysqlSchemaSql,
  mysqlTableNames,
  NOW,
} from './mysql-sql.js';

/** A table beside the inbox, in its database: its name and database apart, and quoted for SQL. */
interface Beside {
  /** The database, when the inbox's name gives one (`database.name`). */
  database: string | undefined;
  name: string;
  quoted: string;
}

/** The table of `parts` (`[database?, name]`) as a {@link Beside}. */
function besideOf(parts: string[]): Beside {
  const quoted = parts.map((part) => `\`${part}\``).join('.');
  return { database: parts.length > 1 ? parts[0] : undefined, name: parts.at(-1)!, quoted };
}

/** The table `<table><suffix>` beside the inbox (`''`: the inbox itself), within MySQL's 64 characters. */
function beside(table: string, suffix: string): Beside {
  const parts = mysqlTableNames(table).name.split('.');
  const last = parts.pop() as string;
  return besideOf([...parts, suffix === '' ? last : `${last.slice(0, 64 - suffix.length)}${suffix}`]);
}

/** `<table>_claims` beside the inbox: its name cut as {@link mysqlClaimsName} cuts it, never shared by two inboxes. */
const claimsBeside = (table: string): Beside => besideOf(mysqlClaimsName(table));

/** The database of `table` in SQL: the one it names, or the connection's. Names are checked identifiers. */
const databaseOf = (table: Beside): string =>
  table.database === undefined ? 'DATABASE()' : `'${table.database}'`;

/**
 * A nullable column added to a table of the set (`table`: from {@link beside}), in a version of its own.
 * MySQL 8 has no `ADD COLUMN IF NOT EXISTS` (MariaDB has), and its DDL commits by itself: `migrate()` skips
 * the statement when the column is there, so a second run changes nothing. `column` and `type` are ipn-kit's
 * own text, never a user's.
 */
export function addColumn(table: Beside, column: string, type: string): MigrationStep {
  return {
    sql: `ALTER TABLE ${table.quoted} ADD COLUMN ${column} ${type}`,
    done:
      `SELECT 1 FROM information_schema.columns WHERE table_schema = ${databaseOf(table)} ` +
      `AND table_name = '${table.name}' AND column_name = '${column}'`,
  };
}

/**
 * Version 5: the sweep's lock moves from a row of `<table>_expected` (`transaction_id = ''`, its owner in
 * `custom_data`, its end in `due_at`) to the row `sweep` of `<table>_control` (owner in `value`, end in the
 * new `until_ms`), and a CHECK, `<table>_no_sweep_lock` (names of CHECKs are the database's, not the
 * table's, in MySQL), refuses the old row from now on: an instance of an older ipn-kit, still running in a
 * rolling deploy, fails to take its lock there (its sweep does not run; an `error` event) rather than run
 * beside the new instances' one. MySQL before 8.0.16 reads a CHECK and ignores it: there an older instance
 * is not stopped, and is to be stopped before the migration. Each statement can run twice: a lock already
 * moved is kept, the CHECK is added once. An older instance that takes its lock again between the `DELETE`
 * and the CHECK (MySQL's DDL is no transaction) fails the CHECK's `ALTER`: the next `migrate()` completes it.
 */
function sweepLockSteps(table: string): MigrationStep[] {
  const expected = beside(table, '_expected');
  const control = beside(table, '_control').quoted;
  // Cut with a hash, not as `beside` cuts: MySQL 8 names a CHECK within the database, so two inboxes whose
  // names differ after 50 bytes must not share one (the second migrate() would fail at this version).
  const check = { name: distinctName(mysqlTableNames(table).name.split('.').pop()!, '_no_sweep_lock', 64) };
  return [
    addColumn(beside(table, '_control'), 'until_ms', 'BIGINT NULL'),
    statement(`INSERT INTO ${control} (name, value, updated_ms, until_ms)
SELECT 'sweep', COALESCE(custom_data, ''), ${msOf(NOW)}, due_at FROM ${expected.quoted} WHERE transaction_id = ''
ON DUPLICATE KEY UPDATE name = name`),
    statement(`DELETE FROM ${expected.quoted} WHERE transaction_id = ''`),
    {
      sql: `ALTER TABLE ${expected.quoted} ADD CONSTRAINT \`${check.name}\` CHECK (transaction_id <> '')`,
      done:
        `SELECT 1 FROM information_schema.table_constraints WHERE constraint_schema = ${databaseOf(expected)} ` +
        `AND table_name = '${expected.name}' AND constraint_name = '${check.name}'`,
    },
  ];
}

/**
 * What version 7 writes in `last_error` of an older ipn-kit's claim it leaves in the inbox (see
 * {@link olderClaim}), for the CHECK to let it be: MySQL has no `NOT VALID`, and checks every row as it adds
 * a CHECK. An older ipn-kit's claim leaves `last_error` empty, which no version of it reads for a claim.
 */
const LEFT_FOR_RELEASE = "ipn-kit: an older instance's claim, left for it to release (schema version 7)";

/**
 * Version 7: at-most-once claims are rows of `<table>_claims` (key, token, when, until when) from now on,
 * and a CHECK, `<table>_no_claim_marker` (named within the database, as {@link sweepLockSteps}'), refuses a
 * new claim marker in the inbox: an instance of an older ipn-kit, still running in a rolling deploy, fails
 * its claim (a store failure: 503, and the service resends) rather than take a key a newer instance
 * claimed in `<table>_claims`, which it does not look at. The markers already there stay (see
 * {@link olderClaim}), for the older instance to delete on release; they are marked first (`last_error`),
 * and the CHECK lets a marked one be. An older instance's claim between the two is not marked, and fails the
 * CHECK's `ALTER` (MySQL's DDL is no transaction): the next `migrate()` marks it and completes the version.
 * MySQL before 8.0.16 reads a CHECK and ignores it. Adding the CHECK rebuilds the inbox table (writes to it
 * wait meanwhile). Each statement can run twice.
 */
function claimsSteps(table: string): MigrationStep[] {
  const inbox = beside(table, '');
  const claims = claimsBeside(table).quoted;
  const check = { name: distinctName(inbox.name, '_no_claim_marker', 64) };
  const marker = olderClaim(EMPTY_RECORD);
  return [
    statement(`CREATE TABLE IF NOT EXISTS ${claims} (
  \`key\` VARCHAR(255) NOT NULL,
  token VARCHAR(255) NOT NULL,
  claimed_at DATETIME(3) NOT NULL,
  expires_at DATETIME(3) NOT NULL,
  PRIMARY KEY (\`key\`),
  KEY ipn_kit_claimed (claimed_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`),
    statement(
      `UPDATE ${inbox.quoted} SET last_error = '${LEFT_FOR_RELEASE.replaceAll("'", "''")}' ` +
        `WHERE ${marker} AND last_error IS NULL`,
    ),
    {
      sql: `ALTER TABLE ${inbox.quoted} ADD CONSTRAINT \`${check.name}\` CHECK (NOT (${marker} AND last_error IS NULL))`,
      done:
        `SELECT 1 FROM information_schema.table_constraints WHERE constraint_schema = ${databaseOf(inbox)} ` +
        `AND table_name = '${inbox.name}' AND constraint_name = '${check.name}'`,
    },
  ];
}

/**
 * Every version of the MySQL schema of the table set of inbox `table`, in order. A released version never
 * changes; a change of the schema is one more line at the end (`addColumn(...)` in a version of its own),
 * with the same number in every dialect, and its name in `VERSION_NAMES` (`numberedMigrations`).
 */
export function mysqlMigrationList(table: string): readonly Migration[] {
  return numberedMigrations([
    // version 1
    { tables: [beside(table, '').name], steps: [statement(mysqlSchemaSql(table))] },
    // version 2
    {
      tables: ['_expected', '_states', '_audit'].map((suffix) => beside(table, suffix).name),
      steps: [mysqlExpectationsSql(table), mysqlLifecycleSql(table), mysqlAuditSql(table)].map(statement),
    },
    // version 3
    {
      tables: [beside(table, '_control').name],
      steps: [
        statement(`CREATE TABLE IF NOT EXISTS ${mysqlControlTable(table)} (
  name VARCHAR(64) NOT NULL PRIMARY KEY,
  value VARCHAR(255) NOT NULL,
  updated_ms BIGINT NOT NULL
) DEFAULT CHARSET = utf8mb4`),
      ],
    },
    // version 4
    { tables: [], steps: [addColumn(beside(table, '_expected'), 'account', 'VARCHAR(255) NULL')] },
    // version 5
    { tables: [], steps: sweepLockSteps(table) },
    // version 6, PostgreSQL's alone: here the number is kept, so that a version means the same in every dialect
    NOT_HERE,
    // version 7
    { tables: [claimsBeside(table).name], steps: claimsSteps(table) },
  ]);
}

/** The quoted control table beside inbox `table`: `<table>_control` (the rows `paused` and `sweep`). */
export const mysqlControlTable = (table: string): string => beside(table, '_control').quoted;

/** The statements that record `migration` in the version table beside inbox `table`, `<table>_schema`. */
function recordSql(table: string, migration: Migration): string[] {
  const versions = beside(table, '_schema').quoted;
  return [
    `CREATE TABLE IF NOT EXISTS ${versions} (
  version INT NOT NULL,
  name VARCHAR(255) NOT NULL,
  applied_at DATETIME(3) NOT NULL,
  PRIMARY KEY (version)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4`,
    `INSERT IGNORE INTO ${versions} (version, name, applied_at) VALUES (${migration.version}, ` +
      `'${migration.name.replaceAll("'", "''")}', UTC_TIMESTAMP(3))`,
  ];
}

/**
 * Each version of the MySQL schema of the table set of inbox `table` (the inbox, `<table>_expected`,
 * `<table>_states`, `<table>_audit`, `<table>_control`, `<table>_claims`), as SQL for a migration tool of your own: run those above the version
 * your database is at (`SELECT max(version) FROM <table>_schema`; none: 0), each once, in order, each of
 * its `statements` as a query of its own (no `multipleStatements` needed). `MysqlStore.migrate()` and
 * `ipn-kit migrate --mysql-url` run the same statements.
 *
 * @param table `name` or `database.name`. @default 'ipn_inbox'
 * @throws TypeError when `table` is not such a name.
 * @example
 * import { mysqlMigrations } from 'ipn-kit/mysql';
 * for (const { version, statements } of mysqlMigrations('ipn_inbox')) {
 *   if (version > current) for (const statement of statements) await pool.query(statement);
 * }
 */
export function mysqlMigrations(table = 'ipn_inbox'): SchemaMigration[] {
  mysqlTableNames(table, 'mysqlMigrations');
  return schemaMigrations(mysqlMigrationList(table), (migration) => recordSql(table, migration));
}

/** One connection of the pool, the one that holds the lock: its statements, without values or with `?`. */
interface Connection {
  rows(sql: string, values?: unknown[]): Promise<Array<Record<string, unknown>>>;
}

/**
 * The MySQL part of `migrate()`, on the one connection that holds the migration's named lock (`GET_LOCK`,
 * taken by `lock` before the version is read): a second process migrating at once waits for it, then finds
 * the versions recorded. MySQL's DDL commits by itself, so a version is no transaction: each of its steps is
 * idempotent (`IF NOT EXISTS`, or a `done` check), and a version interrupted half way is run again whole by
 * the next `migrate()`, which completes it.
 */
export function mysqlSchemaDialect(
  table: string,
  lock: <T>(work: (connection: Connection) => Promise<T>) => Promise<T>,
): SchemaDialect {
  const inbox = beside(table, '');
  const exists = async (connection: Connection, tables: readonly string[]): Promise<boolean> => {
    if (tables.length === 0) return true;
    const [row] = await connection.rows(
      `SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_schema = ${databaseOf(inbox)} ` +
        `AND table_name IN (${tables.map(() => '?').join(', ')})`,
      [...tables],
    );
    return Number(row?.n) === tables.length;
  };
  return {
    owner: 'MysqlStore',
    table,
    migrations: mysqlMigrationList(table),
    record: (migration) => recordSql(table, migration),
    locked: (work) =>
      lock((connection) =>
        work({
          exists: (tables) => exists(connection, tables),
          async version() {
            const versions = beside(table, '_schema');
            if (!(await exists(connection, [versions.name]))) return 0;
            const [row] = await connection.rows(
              `SELECT COALESCE(MAX(version), 0) AS version FROM ${versions.quoted}`,
            );
            return Number(row?.version ?? 0);
          },
          async apply(steps) {
            for (const step of steps) {
              if (step.done !== undefined && (await connection.rows(step.done)).length > 0) continue;
              await connection.rows(step.sql);
            }
          },
        }),
      ),
  };
}
