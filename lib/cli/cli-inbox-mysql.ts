import { liveClaimsOf, type CliIo, type InboxDatabase } from './cli-io.js';
import { messageOf } from '../shared/errors.js';
import {
  rowsOf,
  type MysqlPool,
  type MysqlPoolConnection,
  type MysqlQueryResult,
} from '../stores/mysql/mysql-pool.js';
import { msOf, mysqlInboxSql, NOW } from '../stores/mysql/mysql-sql.js';
import { MysqlStore } from '../stores/mysql/mysql-store.js';
import type { DurableStore } from '../stores/store.js';

/** A mysql2 promise connection, through mysql2's options object (with its `timeout`). */
interface CliMysqlConnection {
  query(options: { sql: string; values?: unknown; timeout: number }): Promise<MysqlQueryResult>;
  release(): void;
  destroy(): void;
}
/** A mysql2 promise pool: what the CLI creates and ends. */
interface CliMysqlPool {
  /** A {@link CliMysqlConnection} (mysql2's types of it are generic overloads that no plain type matches). */
  getConnection(): Promise<object>;
  end(): Promise<void>;
}
type CreatePool = (config: CliMysqlPoolConfig) => CliMysqlPool;

/** The mysql2 pool options the CLI uses: mysql2's own names. */
export interface CliMysqlPoolConfig {
  uri: string;
  connectionLimit: number;
  enableKeepAlive: boolean;
  connectTimeout: number;
}

/**
 * The CLI's own mysql2 pool: one connection, TCP keep-alive (a connection behind a dropped network is found
 * dead instead of waited on), and a time limit on connecting (each query has its own: {@link boundedPool}),
 * so that a command fails with a message instead of hanging. mysql2's default flags and charset, as
 * `MysqlStore` wants them.
 */
export function cliMysqlPoolConfig(uri: string): CliMysqlPoolConfig {
  return { uri, connectionLimit: 1, enableKeepAlive: true, connectTimeout: 10_000 };
}

/** How long one query of a command may take, as the PostgreSQL commands' `query_timeout`. */
const QUERY_TIMEOUT_MS = 30_000;

/**
 * `pool` as the store sees it, each query bounded to `timeoutMs`: on the client (mysql2's `timeout`: a
 * connection behind a dropped network), and on the server for a wait on a row lock (the session's
 * `innodb_lock_wait_timeout`, set before each query: the statement gives up there too, rather than run
 * once the lock is free). A query that fails takes its connection with it (destroyed, where a released one
 * would still wait for the statement, and hold `pool.end()` up until the server answers).
 */
export function boundedPool(pool: Pick<CliMysqlPool, 'getConnection'>, timeoutMs: number): MysqlPool {
  const lockWaitSeconds = Math.max(1, Math.ceil(timeoutMs / 1000));
  return {
    async query(sql, values) {
      const connection = (await pool.getConnection()) as CliMysqlConnection;
      let result: MysqlQueryResult;
      try {
        const lockWait = 'SET SESSION innodb_lock_wait_timeout = ?';
        await connection.query({ sql: lockWait, values: [lockWaitSeconds], timeout: timeoutMs });
        result = await connection.query({ sql, values, timeout: timeoutMs });
      } catch (error) {
        connection.destroy();
        throw error;
      }
      connection.release();
      return result;
    },
    // The store takes a connection for a transaction only to lease, which no command does.
    getConnection: () => pool.getConnection() as Promise<MysqlPoolConnection>,
  };
}

/**
 * Runs `run` on the MysqlStore inbox `table` of the MySQL (or MariaDB) at `url`, through a mysql2 pool of
 * its own (ended after). Resolves the exit code.
 */
export async function onMysql(
  url: string,
  table: string,
  run: (store: DurableStore, io: CliIo, where: string, database: InboxDatabase) => Promise<number>,
  argv: string[],
  io: CliIo,
): Promise<number> {
  let createPool: CreatePool;
  try {
    createPool = await loadCreatePool();
  } catch (error) {
    io.stderr(
      `ipn-kit inbox: could not load the mysql2 package: install mysql2 (npm install mysql2): ${messageOf(error)}`,
    );
    return 1;
  }
  let pool: CliMysqlPool;
  try {
    pool = createPool(cliMysqlPoolConfig(url));
  } catch (error) {
    // mysql2 parses the URL here: a malformed one throws before any connection.
    io.stderr(
      `ipn-kit inbox: --mysql-url is not a MySQL URL (mysql://user:password@host:3306/db): ${messageOf(error)}`,
    );
    return 2;
  }
  try {
    const bounded = boundedPool(pool, QUERY_TIMEOUT_MS);
    const database: InboxDatabase = {
      // The database's clock, which stamps the deliveries: a purge's dedupe window is measured by it.
      clock: async () => Number(rowsOf(await bounded.query(`SELECT ${msOf(NOW)} AS ms`))[0]?.ms),
      liveClaims: async (before) => {
        const [row] = rowsOf(await bounded.query(mysqlInboxSql(table).liveClaims, [before.getTime()]));
        return liveClaimsOf(row?.count, row?.last_expires, table);
      },
    };
    return await run(new MysqlStore({ pool: bounded, table }), io, table, database);
  } catch (error) {
    io.stderr(`ipn-kit inbox ${argv[0] ?? ''}: ${messageOf(error)}`);
    return 1;
  } finally {
    await pool.end().catch(() => {});
  }
}

/** Loads mysql2 only now: ipn-kit does not depend on it, and the rest of the CLI works without it. */
export async function loadCreatePool(): Promise<CreatePool> {
  const mysql2 = (await import('mysql2/promise')) as unknown as {
    createPool?: CreatePool;
    default?: { createPool?: CreatePool };
  };
  const createPool = mysql2.createPool ?? mysql2.default?.createPool;
  if (typeof createPool !== 'function') throw new Error('the mysql2/promise module has no createPool');
  return createPool;
}
