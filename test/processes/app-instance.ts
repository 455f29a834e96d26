/**
 * One instance of a partner app, in a process of its own, for the multi-process and crash tests: an IPN
 * router over a shared store, on a random loopback port. Run with `node --import tsx`; configured by the
 * INSTANCE environment variable (JSON); talks to the test over the IPC channel:
 * sends { type: 'ready', url }, { type: 'started', id } when a listener begins, answers 'count' with
 * { type: 'count', successful }.
 */
import { appendFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { createPool } from 'mysql2/promise';
import { createClient } from 'redis';
import { ipnRouter, type Store } from '../../lib/index.js';
import { MysqlStore } from '../../lib/mysql.js';
import { PostgresStore } from '../../lib/postgres.js';
import { RedisStore } from '../../lib/redis.js';

interface InstanceConfig {
  store: 'ioredis' | 'node-redis' | 'postgres' | 'mysql';
  delivery: 'at-most-once' | 'at-least-once';
  /** Redis key prefix, or PostgreSQL or MySQL table. */
  namespace: string;
  /**
   * `count`: count events; `hang`: never settle (the process is to be killed); `credit`: insert a credit row;
   * `ledger`: insert a ledger row through the delivery transaction's `db` (no unique key: exactly once or
   * a visible duplicate). With MySQL: `ledger` through the delivery's connection `db`; `ledger-hang` writes
   * its ledger row so, then never settles (the process is to be killed).
   */
  listener: 'count' | 'hang' | 'credit' | 'ledger' | 'ledger-hang';
  /** `ledger` with MySQL: throw after the write on each notification's first attempt. */
  failFirst?: boolean;
  retryDelayMs?: number;
  creditsTable?: string;
  ledgerTable?: string;
  /** Kill this process (SIGKILL, by itself) the `nth` time it reaches `point`, after appending it to `log`. */
  crash?: { point: CrashPoint; nth: number; log: string };
  leaseMs?: number;
  /** The router's `maxAttempts`: its default (8) when not given. */
  maxAttempts?: number;
  recoveryIntervalMs?: number;
}

/** Where a delivery can be cut: around the listener's write, and around the transaction's COMMIT. */
export type CrashPoint =
  'before-write' | 'during-write' | 'after-write' | 'before-commit' | 'commit-sent' | 'after-commit';

const config = JSON.parse(process.env.INSTANCE ?? '{}') as InstanceConfig;
const send = (message: unknown) => process.send?.(message);

const reached = new Map<CrashPoint, number>();
/** SIGKILL now, when this is the planned point: nothing after it runs, as in a power cut. */
function maybeCrash(point: CrashPoint): void {
  const count = (reached.get(point) ?? 0) + 1;
  reached.set(point, count);
  if (config.crash?.point !== point || config.crash.nth !== count) return;
  appendFileSync(config.crash.log, `${point}\n`);
  process.kill(process.pid, 'SIGKILL');
}

const COMMIT_POINTS: [CrashPoint, CrashPoint, CrashPoint] = ['before-commit', 'commit-sent', 'after-commit'];

/** Sends a statement, killed (as planned) before it is sent, once it is sent, or once it is answered. */
function cutAround<T>(send: () => Promise<T>, [before, sent, after]: [CrashPoint, CrashPoint, CrashPoint]) {
  maybeCrash(before);
  const sending = send();
  setImmediate(() => maybeCrash(sent));
  return sending.then((result) => {
    maybeCrash(after);
    return result;
  });
}

/** An instance over MySQL (MYSQL_URL): its listeners write the ledger through the delivery's `db`. */
function mysqlMain(): void {
  const pool = createPool({ uri: process.env.MYSQL_URL, connectionLimit: 6 });
  if (config.crash) cutMysqlCommits(pool);
  const ipn = ipnRouter({
    store: new MysqlStore({ pool, table: config.namespace }),
    delivery: config.delivery,
    leaseMs: config.leaseMs,
    maxAttempts: config.maxAttempts,
    retryDelayMs: config.retryDelayMs,
    recoveryIntervalMs: config.recoveryIntervalMs,
    logger: { debug() {}, info() {}, warn() {}, error() {} },
  });
  let successful = 0;
  ipn.on('successful', async (n, { db, attempt }) => {
    successful += 1;
    if (config.listener === 'ledger' || config.listener === 'ledger-hang') {
      if (db === undefined) throw new Error('no delivery transaction: the pool should hand out connections');
      const insert = `INSERT INTO ${config.ledgerTable} (transaction_id, amount) VALUES (?, ?)`;
      maybeCrash('before-write');
      const writing = db.query(insert, [n.transaction_id, n.amount]);
      setImmediate(() => maybeCrash('during-write'));
      await writing;
      maybeCrash('after-write');
      if (config.failFirst && attempt === 1) throw new Error('the order service is down');
    }
    send({ type: 'started', id: n.transaction_id });
    if (config.listener === 'hang' || config.listener === 'ledger-hang') await new Promise(() => {});
  });
  process.on('message', (message) => {
    if (message === 'count') send({ type: 'count', successful });
  });
  const server = createServer(ipn).listen(0, '127.0.0.1', () => {
    send({ type: 'ready', url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
  });
}

/**
 * Makes the COMMIT of each delivery transaction that wrote the ledger cuttable: before it is sent, once
 * sent (its answer never read), after it. Other transactions (a lease's) are left alone.
 */
function cutMysqlCommits(pool: ReturnType<typeof createPool>): void {
  const getConnection = pool.getConnection.bind(pool);
  Object.assign(pool, {
    getConnection: async () => {
      const connection = await getConnection();
      const query = connection.query.bind(connection) as (...args: unknown[]) => Promise<unknown>;
      let wrote = false; // the transaction open on this connection wrote the ledger
      Object.assign(connection, {
        query: (...args: unknown[]) => {
          const text = typeof args[0] === 'string' ? args[0] : '';
          if (text.startsWith(`INSERT INTO ${config.ledgerTable}`)) wrote = true;
          if (text === 'ROLLBACK') wrote = false;
          if (text !== 'COMMIT' || !wrote) return query(...args);
          wrote = false;
          return cutAround(() => query(...args), COMMIT_POINTS);
        },
      });
      return connection;
    },
  });
}

async function main(): Promise<void> {
  if (config.store === 'mysql') {
    mysqlMain();
    return;
  }
  const pool = new Pool({ connectionString: process.env.DATABASE_URL, max: 4 });
  pool.on('error', () => {});
  if (config.crash) {
    // Each client's COMMIT can be cut: before it is sent, once sent (its answer never read), after it. The
    // store sends it alone, or at the end of the statement that marks the entry delivered.
    pool.on('connect', (client) => {
      const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
      Object.assign(client, {
        query: (...args: unknown[]) => {
          const text = typeof args[0] === 'string' ? args[0] : '';
          if (!/\bCOMMIT$/.test(text)) return query(...args);
          return cutAround(() => query(...args), COMMIT_POINTS);
        },
      });
    });
  }
  let store: Store | PostgresStore<Pool>;
  if (config.store === 'ioredis') {
    store = new RedisStore({ client: new Redis(process.env.REDIS_URL ?? ''), prefix: config.namespace });
  } else if (config.store === 'node-redis') {
    const client = createClient({ url: process.env.REDIS_URL });
    await client.connect();
    store = new RedisStore({ client, prefix: config.namespace });
  } else {
    store = new PostgresStore({ pool, table: config.namespace });
  }
  const ipn = ipnRouter({
    store,
    delivery: config.delivery,
    leaseMs: config.leaseMs,
    maxAttempts: config.maxAttempts,
    recoveryIntervalMs: config.recoveryIntervalMs,
  });
  let successful = 0;
  if (config.listener === 'ledger') {
    ipn.on('successful', async (n, { db }) => {
      if (db === undefined) throw new Error('no delivery transaction: the pool should hand out clients');
      successful += 1;
      maybeCrash('before-write');
      const insert = `INSERT INTO ${config.ledgerTable} (transaction_id, amount) VALUES ($1, $2)`;
      const writing = db.query(insert, [n.transaction_id, n.amount]);
      setImmediate(() => maybeCrash('during-write'));
      await writing;
      maybeCrash('after-write');
    });
  }
  ipn.on('successful', async (n) => {
    if (config.listener === 'ledger') return;
    successful += 1;
    send({ type: 'started', id: n.transaction_id });
    if (config.listener === 'hang') await new Promise(() => {});
    if (config.listener === 'credit') {
      // Idempotent by design, as an at-least-once listener must be: one credit per transaction.
      await pool.query(
        `INSERT INTO ${config.creditsTable} (transaction_id, order_id, amount) VALUES ($1, $2, $3)
         ON CONFLICT (transaction_id) DO NOTHING`,
        [n.transaction_id, n.custom_data, n.amount],
      );
    }
  });
  process.on('message', (message) => {
    if (message === 'count') send({ type: 'count', successful });
  });
  const server = createServer(ipn).listen(0, '127.0.0.1', () => {
    send({ type: 'ready', url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
  });
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
