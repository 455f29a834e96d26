import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { CliIo } from './cli-io.js';
import { messageOf } from '../shared/errors.js';
import { cliPoolConfig, loadPool } from './cli-inbox.js';
import { boundedPool, cliMysqlPoolConfig, loadCreatePool } from './cli-inbox-mysql.js';
import { UsageError } from './cli-inbox-text.js';
import { MysqlStore } from '../stores/mysql/mysql-store.js';
import { PostgresStore } from '../stores/postgres/postgres-store.js';
import type { MigrateOptions, MigrationReport } from '../stores/schema-migrations.js';
import { SqliteStore } from '../stores/sqlite/sqlite-store.js';
import type { SqliteDatabase } from '../stores/sqlite/sqlite-connection.js';

const USAGE = `usage:
  ipn-kit migrate [--table NAME] [--dry-run] [--mysql-url URL | --sqlite FILE]

Brings the tables of an inbox (PostgresStore, MysqlStore or SqliteStore) to the schema version of this
ipn-kit, as store.migrate() does: prints the version before and after, and each version it runs. Safe to
run while the app runs, and from several places at once (they take turns). A database at a newer version
than this ipn-kit's is left as it is (exit code 1).
  --table NAME      the inbox table, name or schema.name (database.name on MySQL; default ipn_inbox)
  --dry-run         print the SQL of each version that would run, run nothing
  --mysql-url URL   the MySQL or MariaDB that holds the inbox (mysql://user:password@host:3306/db) instead
                    of DATABASE_URL's PostgreSQL
  --sqlite FILE     the SQLite file that holds the inbox instead of DATABASE_URL's PostgreSQL
The database is DATABASE_URL (postgres://user:password@host:5432/db) unless --mysql-url or --sqlite says.`;

/** A store that migrates and says what it did. */
interface Migrating {
  migrateSchema(options?: MigrateOptions): Promise<MigrationReport>;
}

/** Where the command runs: a store over a connection of its own, and how to close that connection. */
interface Target {
  store: Migrating;
  close(): Promise<void>;
}

interface Plan {
  table: string;
  dryRun: boolean;
  mysqlUrl: string | undefined;
  sqlite: string | undefined;
}

function plan(argv: string[]): Plan | 'help' {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      table: { type: 'string' },
      'dry-run': { type: 'boolean' },
      'mysql-url': { type: 'string' },
      sqlite: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help === true || positionals[0] === 'help') return 'help';
  if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`);
  if (values['mysql-url'] !== undefined && values.sqlite !== undefined) {
    throw new UsageError('--mysql-url and --sqlite: give one database');
  }
  return {
    table: values.table ?? 'ipn_inbox',
    dryRun: values['dry-run'] === true,
    mysqlUrl: values['mysql-url'],
    sqlite: values.sqlite,
  };
}

/** The version as a person reads it. */
function described(version: number, latest: number): string {
  if (version === 0) return '0 (none recorded: tables made before schema versions, or none yet)';
  return version === latest ? `${version} (the latest)` : String(version);
}

/**
 * `ipn-kit migrate`: brings an inbox's tables to this ipn-kit's schema version, or with `--dry-run` prints
 * the SQL that would. Resolves the exit code: 0 done, 1 failed (a newer database, a statement refused, no
 * connection), 2 a wrong command line.
 */
export async function migrateCommand(argv: string[], io: CliIo): Promise<number> {
  let planned: Plan;
  try {
    const parsed = plan(argv);
    if (parsed === 'help') {
      io.stdout(USAGE);
      return 0;
    }
    planned = parsed;
  } catch (error) {
    io.stderr(`ipn-kit migrate: ${messageOf(error)}\n${USAGE}`);
    return 2;
  }
  let target: Target | number;
  try {
    target = await connect(planned, io);
  } catch (error) {
    // A name that is not a table's (the store's constructor checks it) or a driver that will not start.
    io.stderr(`ipn-kit migrate: ${messageOf(error)}`);
    return error instanceof TypeError ? 2 : 1;
  }
  if (typeof target === 'number') return target;
  try {
    const report = await target.store.migrateSchema({ dryRun: planned.dryRun });
    const latest = Math.max(report.to, ...report.migrations.map((m) => m.version));
    io.stdout(`${planned.table}: schema version ${described(report.from, latest)}`);
    for (const migration of report.migrations) {
      if (planned.dryRun) {
        io.stdout(`-- version ${migration.version}: ${migration.name}\n${migration.sql.trimEnd()}`);
      } else {
        io.stdout(`ran version ${migration.version}: ${migration.name}`);
      }
    }
    if (planned.dryRun) {
      io.stdout(
        report.migrations.length === 0
          ? 'nothing to run (dry run)'
          : `would bring it to version ${latest} (dry run: nothing was run)`,
      );
    } else {
      io.stdout(`${planned.table}: schema version ${described(report.to, report.to)}`);
    }
    return 0;
  } catch (error) {
    io.stderr(`ipn-kit migrate: ${messageOf(error)}`);
    return 1;
  } finally {
    await target.close().catch(() => {});
  }
}

/** The store of the database the command line names, over a connection of the command's own. */
async function connect(planned: Plan, io: CliIo): Promise<Target | number> {
  const { table } = planned;
  if (planned.mysqlUrl !== undefined) {
    const createPool = await loadCreatePool();
    const pool = createPool(cliMysqlPoolConfig(planned.mysqlUrl));
    try {
      return { store: new MysqlStore({ pool: boundedPool(pool, 30_000), table }), close: () => pool.end() };
    } catch (error) {
      await pool.end().catch(() => {});
      throw error;
    }
  }
  if (planned.sqlite !== undefined) {
    const loaded = (await import('better-sqlite3')) as unknown as {
      default?: new (file: string, options: { fileMustExist: boolean }) => SqliteDatabase;
    };
    const Database =
      loaded.default ?? (loaded as unknown as new (file: string, options: object) => SqliteDatabase);
    // A file that is not there is a typing slip, not a new inbox: migrate() of the app makes a new one.
    if (!existsSync(planned.sqlite)) {
      io.stderr(`ipn-kit migrate: ${planned.sqlite} does not exist (--sqlite names the app's SQLite file)`);
      return 2;
    }
    const database = new Database(planned.sqlite, { fileMustExist: true });
    try {
      return {
        store: new SqliteStore({ database, table }),
        close: () => Promise.resolve(void database.close()),
      };
    } catch (error) {
      database.close();
      throw error;
    }
  }
  const url = io.env.DATABASE_URL;
  if (url === undefined || url === '') {
    io.stderr(
      'ipn-kit migrate: DATABASE_URL is not set: set it to the connection string of the database that holds ' +
        'the inbox (postgres://user:password@host:5432/db), or give --mysql-url URL or --sqlite FILE',
    );
    return 2;
  }
  const Pool = await loadPool();
  const pool = new Pool(cliPoolConfig(url));
  pool.on('error', () => {
    // A dropped idle connection: the query in flight reports it; without a listener it would crash the CLI.
  });
  try {
    return { store: new PostgresStore({ pool, table }), close: () => pool.end() };
  } catch (error) {
    await pool.end().catch(() => {});
    throw error;
  }
}
