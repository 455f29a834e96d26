import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import Redis from 'ioredis';
import { createPool, type RowDataPacket } from 'mysql2/promise';
import { Pool } from 'pg';
import { MysqlStore } from '../lib/mysql.js';
import { PostgresStore } from '../lib/postgres.js';
import { SqliteStore } from '../lib/sqlite.js';

/**
 * A service the run uses through a namespace of its own (a Redis key prefix, a PostgreSQL or MariaDB table,
 * a SQLite file in a temp folder), held by
 * the orchestrator so that it can empty it between measurements and remove it at the end even when a server
 * process crashed.
 */
export interface BenchService {
  /** The server's version, for the machine description. */
  version: string;
  /** Empties the namespace, so that every measurement starts from the same state. */
  reset(): Promise<void>;
  /** Removes the namespace and disconnects. Never rejects. */
  cleanup(): Promise<void>;
  /**
   * CPU time (user and system) the service's server has spent so far, in microseconds, or `undefined`
   * when it cannot be read (a PostgreSQL on another machine). Read before and after a measurement.
   */
  cpuMicros(): Promise<number | undefined>;
}

/** Connects to Redis at `url`; rejects with the cause (ECONNREFUSED ...) when it does not answer within 3 s. */
export async function openRedis(url: string, prefix: string): Promise<BenchService> {
  const client = new Redis(url, {
    lazyConnect: true,
    connectTimeout: 3000,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  // connect() rejects with "Connection is closed."; the 'error' event has the cause.
  let cause: Error | undefined;
  client.on('error', (error: Error) => {
    cause ??= error;
  });
  let info: string;
  try {
    await client.connect();
    info = await client.info('server');
  } catch (error) {
    client.disconnect();
    throw cause ?? error;
  }
  const deleteKeys = async (): Promise<void> => {
    // The prefix is letters, digits, '-' and ':' only: nothing in it is a glob character.
    let cursor = '0';
    do {
      const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      if (keys.length > 0) await client.unlink(...keys);
      cursor = next;
    } while (cursor !== '0');
  };
  return {
    version: `Redis ${/redis_version:(\S+)/.exec(info)?.[1] ?? '?'}`,
    reset: deleteKeys,
    // Redis counts its own CPU (all its threads), wherever it runs.
    cpuMicros: async () => {
      const cpu = await client.info('cpu');
      const seconds = (name: string) => Number(new RegExp(`${name}:([\\d.]+)`).exec(cpu)?.[1] ?? Number.NaN);
      const total = (seconds('used_cpu_user') + seconds('used_cpu_sys')) * 1e6;
      return Number.isFinite(total) ? total : undefined;
    },
    cleanup: async () => {
      try {
        await deleteKeys();
      } catch (error) {
        console.error(`bench: could not delete the Redis keys ${prefix}*: ${String(error)}`);
      }
      client.disconnect();
    },
  };
}

/**
 * Connects to PostgreSQL at `url`, migrates `table` (and its `_expected`, `_states` and `_audit` tables beside it) and
 * creates the ledger `<table>_ledger` that the exactly-once variants write, `<table>_handwritten`, the
 * ledger keyed by (transaction_id, state) that `handwritten-ledger`, `by-the-book` and `graphile-worker`
 * write, and `<table>_payloads`, the payloads `by-the-book` keeps; rejects with the cause when it cannot.
 * Dropped at the end with graphile-worker's schema `<table>_gw`.
 */
export async function openPostgres(url: string, table: string): Promise<BenchService> {
  const pool = new Pool({ connectionString: url, max: 2, connectionTimeoutMillis: 3000 });
  pool.on('error', () => {
    // An idle connection dropped: the next query reports it.
  });
  const cleanup = async (report = true): Promise<void> => {
    try {
      await pool.query(
        `DROP TABLE IF EXISTS "${table}", "${table}_expected", "${table}_states", "${table}_ledger", ` +
          `"${table}_handwritten", "${table}_audit", "${table}_payloads", "${table}_control", "${table}_schema", ` +
          `"${table}_claims"; DROP FUNCTION IF EXISTS "${table}_mark"(text, text); ` +
          `DROP FUNCTION IF EXISTS "${table}_older_claim"(); DROP SCHEMA IF EXISTS "${table}_gw" CASCADE`,
      );
    } catch (error) {
      if (report) console.error(`bench: could not drop the table ${table}: ${String(error)}`);
    }
    await pool.end().catch(() => {});
  };
  let version: string;
  let postmaster: number | undefined;
  try {
    await new PostgresStore({ pool, table }).migrate();
    const { rows: backend } = await pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    postmaster = parentOf(backend[0]!.pid);
    // The partner's ledger, as the docs' exactly-once example has it: no unique constraint.
    await pool.query(
      `CREATE TABLE IF NOT EXISTS "${table}_ledger" (transaction_id text NOT NULL, order_id text, amount numeric)`,
    );
    // The ledger a partner writes without ipn-kit: its key is what makes a resend a no-op.
    await pool.query(
      `CREATE TABLE IF NOT EXISTS "${table}_handwritten" (transaction_id text NOT NULL, state text NOT NULL, ` +
        'order_id text, amount numeric, PRIMARY KEY (transaction_id, state))',
    );
    // The payloads the by-the-book handler keeps for audit (bench/e2e.ts); `_audit` is the store's own log.
    await pool.query(
      `CREATE TABLE IF NOT EXISTS "${table}_payloads" (id bigserial PRIMARY KEY, transaction_id text NOT NULL, ` +
        'payload jsonb NOT NULL, received_at timestamptz NOT NULL DEFAULT now())',
    );
    const { rows } = await pool.query<{ server_version: string }>('SHOW server_version');
    version = `PostgreSQL ${rows[0]?.server_version ?? '?'}`;
  } catch (error) {
    await cleanup(false); // the cause is what the caller reports
    throw error;
  }
  return {
    version,
    reset: async () => {
      // graphile-worker's schema too: its server migrates it anew, so no job of an earlier measurement is left.
      await pool.query(
        `TRUNCATE "${table}", "${table}_states", "${table}_ledger", "${table}_handwritten", "${table}_audit", ` +
          `"${table}_payloads"; ` +
          `DROP SCHEMA IF EXISTS "${table}_gw" CASCADE`,
      );
    },
    cpuMicros: () => Promise.resolve(postmaster === undefined ? undefined : postgresCpu(postmaster)),
    cleanup: () => cleanup(),
  };
}

/**
 * Connects to MariaDB (or MySQL) at `url`, migrates `table` with {@link MysqlStore} and creates the ledger
 * `<table>_ledger` that `mysql-ledger` writes; rejects with the cause when it cannot.
 */
export async function openMysql(url: string, table: string): Promise<BenchService> {
  const pool = createPool({ uri: url, connectionLimit: 2, connectTimeout: 3000 });
  const cleanup = async (report = true): Promise<void> => {
    try {
      await pool.query(`DROP TABLE IF EXISTS \`${table}\`, \`${table}_expected\`, \`${table}_ledger\``);
    } catch (error) {
      if (report) console.error(`bench: could not drop the MariaDB table ${table}: ${String(error)}`);
    }
    await pool.end().catch(() => {});
  };
  let version: string;
  let server: number | undefined;
  try {
    // First, so that a server that does not answer says so, not as a failed migration.
    await pool.query('SELECT 1');
    await new MysqlStore({ pool, table }).migrate();
    await pool.query(
      `CREATE TABLE IF NOT EXISTS \`${table}_ledger\` (transaction_id VARCHAR(255) NOT NULL, order_id TEXT, ` +
        'amount DECIMAL(20, 2))',
    );
    const [rows] = await pool.query<RowDataPacket[]>('SELECT VERSION() AS version, @@pid_file AS pidFile');
    version = `MariaDB ${String(rows[0]?.version ?? '?')}`;
    server = serverPid(String(rows[0]?.pidFile ?? ''));
  } catch (error) {
    await cleanup(false);
    throw error;
  }
  return {
    version,
    reset: async () => {
      await pool.query(`TRUNCATE TABLE \`${table}\``);
      await pool.query(`TRUNCATE TABLE \`${table}_ledger\``);
    },
    cpuMicros: () => Promise.resolve(server === undefined ? undefined : processCpu(server)),
    cleanup: () => cleanup(),
  };
}

/**
 * The pid in MariaDB's pid file when it names a `mariadbd` or `mysqld` process of this machine (a server
 * elsewhere has a pid file here only by chance), else undefined: its CPU is then not counted.
 */
function serverPid(pidFile: string): number | undefined {
  try {
    const pid = Number(readFileSync(pidFile, 'utf8').trim());
    const command = readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
    return command === 'mariadbd' || command === 'mysqld' ? pid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Makes a temp folder for the run's SQLite file, migrates `table` in it with {@link SqliteStore} and creates
 * the ledger `<table>_ledger` that `sqlite-ledger` writes. The folder is removed at the end. Its CPU is the
 * server process's own: SQLite runs inside it.
 */
export async function openSqlite(table: string): Promise<BenchService & { file: string }> {
  const folder = await mkdtemp(join(tmpdir(), 'ipn-kit-bench-'));
  const file = join(folder, 'ipn.db');
  const migrate = async (): Promise<void> => {
    const database = new Database(file);
    try {
      await new SqliteStore({ database, table }).migrate();
      database.exec(
        `CREATE TABLE IF NOT EXISTS "${table}_ledger" (transaction_id TEXT NOT NULL, order_id TEXT, amount NUMERIC)`,
      );
    } finally {
      database.close();
    }
  };
  let version: string;
  try {
    await migrate();
    const memory = new Database(':memory:');
    version = `SQLite ${String(memory.prepare('SELECT sqlite_version()').pluck().get())}`;
    memory.close();
  } catch (error) {
    await rm(folder, { recursive: true, force: true });
    throw error;
  }
  return {
    file,
    version,
    // A fresh file for each measurement: no rows, and no WAL left by the last one.
    reset: async () => {
      for (const suffix of ['', '-wal', '-shm']) await rm(`${file}${suffix}`, { force: true });
      await migrate();
    },
    cpuMicros: () => Promise.resolve(undefined),
    cleanup: async () => {
      try {
        await rm(folder, { recursive: true, force: true });
      } catch (error) {
        console.error(`bench: could not remove ${folder}: ${String(error)}`);
      }
    },
  };
}

/** CPU time (user and system, all threads) of the process `pid` so far, in microseconds, or undefined. */
function processCpu(pid: number): number | undefined {
  const stat = statOf(pid);
  return stat ? ((Number(stat[11]) + Number(stat[12])) / TICKS) * 1e6 : undefined;
}

/** Clock ticks per second of /proc's CPU times: 100 on every Linux this runs on. */
const TICKS = 100;

/** The fields of /proc/PID/stat after the command (which may hold spaces), or undefined. */
function statOf(pid: number): string[] | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return text.slice(text.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/** The parent of `pid` when it is a process of this machine (PostgreSQL's postmaster for a backend). */
function parentOf(pid: number): number | undefined {
  const parent = Number(statOf(pid)?.[1]);
  return Number.isInteger(parent) && parent > 1 ? parent : undefined;
}

/**
 * PostgreSQL's CPU time in microseconds: the postmaster's own and its ended children's (the backends of
 * connections closed since, which it has reaped), plus every live child's (backends, WAL writer,
 * checkpointer). Undefined when the postmaster is not a process of this machine (a server elsewhere
 * that happens to have a backend pid of the same number has no such parent here).
 */
function postgresCpu(postmaster: number): number | undefined {
  const own = statOf(postmaster);
  if (!own) return undefined;
  // Fields after the command: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
  let ticks = [11, 12, 13, 14].reduce((sum, field) => sum + Number(own[field]), 0);
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const child = statOf(Number(entry));
    if (child?.[1] === String(postmaster)) ticks += Number(child[11]) + Number(child[12]);
  }
  return (ticks / TICKS) * 1e6;
}
