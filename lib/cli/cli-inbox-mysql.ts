import type { CliIo } from './cli-io.js';
import { messageOf } from '../shared/errors.js';
import type { MysqlPool } from '../stores/mysql/mysql-pool.js';
import { MysqlStore } from '../stores/mysql/mysql-store.js';
import type { DurableStore } from '../stores/store.js';

/** A mysql2 promise pool: what the CLI creates and ends. */
interface CliMysqlPool extends MysqlPool {
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
 * dead instead of waited on), and a time limit on connecting, so that a command fails with a message
 * instead of hanging. mysql2's default flags and charset, as `MysqlStore` wants them.
 */
export function cliMysqlPoolConfig(uri: string): CliMysqlPoolConfig {
  return { uri, connectionLimit: 1, enableKeepAlive: true, connectTimeout: 10_000 };
}

/**
 * Runs `run` on the MysqlStore inbox `table` of the MySQL (or MariaDB) at `url`, through a mysql2 pool of
 * its own (ended after). Resolves the exit code.
 */
export async function onMysql(
  url: string,
  table: string,
  run: (store: DurableStore, io: CliIo, where: string) => Promise<number>,
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
    return await run(new MysqlStore({ pool, table }), io, table);
  } catch (error) {
    io.stderr(`ipn-kit inbox ${argv[0] ?? ''}: ${messageOf(error)}`);
    return 1;
  } finally {
    await pool.end().catch(() => {});
  }
}

/** Loads mysql2 only now: ipn-kit does not depend on it, and the rest of the CLI works without it. */
async function loadCreatePool(): Promise<CreatePool> {
  const mysql2 = (await import('mysql2/promise')) as unknown as {
    createPool?: CreatePool;
    default?: { createPool?: CreatePool };
  };
  const createPool = mysql2.createPool ?? mysql2.default?.createPool;
  if (typeof createPool !== 'function') throw new Error('the mysql2/promise module has no createPool');
  return createPool;
}
