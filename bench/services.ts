import Redis from 'ioredis';
import { Pool } from 'pg';
import { PostgresStore } from '../lib/postgres.js';

/**
 * A service the run uses through a namespace of its own (a Redis key prefix, a PostgreSQL table), held by
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
 * Connects to PostgreSQL at `url`, migrates `table` (and its `_expected` table beside it) and creates the
 * ledger `<table>_ledger` that the exactly-once variant writes; rejects with the cause when it cannot.
 */
export async function openPostgres(url: string, table: string): Promise<BenchService> {
  const pool = new Pool({ connectionString: url, max: 2, connectionTimeoutMillis: 3000 });
  pool.on('error', () => {
    // An idle connection dropped: the next query reports it.
  });
  const cleanup = async (report = true): Promise<void> => {
    try {
      await pool.query(`DROP TABLE IF EXISTS "${table}", "${table}_expected", "${table}_ledger"`);
    } catch (error) {
      if (report) console.error(`bench: could not drop the table ${table}: ${String(error)}`);
    }
    await pool.end().catch(() => {});
  };
  let version: string;
  try {
    await new PostgresStore({ pool, table }).migrate();
    // The partner's ledger, as the docs' exactly-once example has it: no unique constraint.
    await pool.query(
      `CREATE TABLE IF NOT EXISTS "${table}_ledger" (transaction_id text NOT NULL, order_id text, amount numeric)`,
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
      await pool.query(`TRUNCATE "${table}", "${table}_ledger"`);
    },
    cleanup: () => cleanup(),
  };
}
