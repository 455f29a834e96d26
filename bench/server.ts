/**
 * One server variant, alone in its process, on a random loopback port. Run by bench/run.ts as
 * `node --import tsx bench/server.ts` with BENCH_SERVER (a `ServerConfig`, as JSON). ipn-kit is loaded
 * from the run's build of lib/ (`config.lib`), as JavaScript that tsx leaves as it is: what a partner's
 * server runs, without the wrappers tsx adds to TypeScript sources. Talks over IPC: sends
 * `{ type: 'ready', port }` once listening; on `'stop'` sends `{ type: 'stats', stats }`, closes everything
 * and exits (exiting, not being killed, is what lets `--cpu-prof` write its profile).
 */
import { createServer, type RequestListener, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { getRequestListener } from '@hono/node-server';
import Database from 'better-sqlite3';
import { drizzle } from 'drizzle-orm/node-postgres';
import { numeric, pgTable, text } from 'drizzle-orm/pg-core';
import express from 'express';
import { Logger, run as runWorker } from 'graphile-worker';
import Redis from 'ioredis';
import { createPool } from 'mysql2/promise';
import { Pool } from 'pg';
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';
import type * as Index from '../lib/index.js';
import type { IpnRouter } from '../lib/index.js';
import type * as Mysql from '../lib/mysql.js';
import type * as Orm from '../lib/orm.js';
import type * as Postgres from '../lib/postgres.js';
import type * as Redis_ from '../lib/redis.js';
import type * as Sqlite from '../lib/sqlite.js';
import { rawJson } from './raw-json.js';
import type { ServerConfig, ServerStats } from './variants.js';

const config = JSON.parse(process.env.BENCH_SERVER ?? '{}') as ServerConfig;

/** ipn-kit as a partner's server runs it: the entry points of the build in `config.lib` (see build-lib.ts). */
type Lib = typeof Index & typeof Mysql & typeof Orm & typeof Postgres & typeof Redis_ & typeof Sqlite;
let lib: Lib;

async function loadLib(dir: string): Promise<Lib> {
  const entries = ['index', 'mysql', 'orm', 'postgres', 'redis', 'sqlite'];
  const modules = await Promise.all(
    entries.map((entry) => import(pathToFileURL(join(dir, `${entry}.js`)).href) as Promise<object>),
  );
  return Object.assign({}, ...modules) as Lib;
}
const stats: ServerStats = { cpuMicros: 0, successful: 0, duplicate: 0, invalid: 0, error: 0 };
/** CPU time when listening began: loading the modules is not the requests' cost. */
let listening: NodeJS.CpuUsage | undefined;
/** Closes what the variant opened (router, client, pool). */
const closers: Array<() => Promise<unknown> | void> = [];

/**
 * Counts events; the `successful` counter is the only listener a delivered notification runs (with the
 * ledger write beside it in the `-ledger` and `-drizzle` variants).
 */
function counted(ipn: IpnRouter): IpnRouter {
  ipn.on('successful', () => {
    stats.successful += 1;
  });
  ipn.on('duplicate', () => {
    stats.duplicate += 1;
  });
  ipn.on('invalid', () => {
    stats.invalid += 1;
  });
  ipn.on('error', () => {
    stats.error += 1;
  });
  closers.push(() => ipn.close());
  return ipn;
}

/** An Express 5 app with the router mounted where the load generator posts. */
function mounted(ipn: IpnRouter): RequestListener {
  const app = express();
  app.use('/ipn', ipn);
  return app;
}

function handlerOf(variant: ServerConfig['variant']): RequestListener | Promise<RequestListener> {
  switch (variant) {
    case 'baseline': {
      const app = express();
      app.use(express.json());
      app.post('/ipn', (_req, res) => {
        res.status(200).json({ ok: true });
      });
      return app;
    }
    case 'memory':
    case 'memory-otel-api':
      // The second: the app loaded @opentelemetry/api (main() did) but registered no tracer provider.
      return mounted(counted(lib.ipnRouter()));
    case 'redis': {
      const client = new Redis(config.redisUrl, { lazyConnect: false });
      client.on('error', (error: Error) => console.error(`bench server: Redis: ${error.message}`));
      closers.push(() => client.quit());
      return mounted(
        counted(lib.ipnRouter({ store: new lib.RedisStore({ client, prefix: config.prefix }) })),
      );
    }
    case 'node-raw':
      return rawJson(() => {
        stats.successful += 1;
      });
    case 'postgres':
    case 'postgres-ledger':
    case 'postgres-drizzle': {
      const pool = postgresPool();
      if (variant === 'postgres-drizzle') return mounted(counted(drizzleLedger(pool)));
      const store = new lib.PostgresStore({ pool, table: config.table });
      const ipn = lib.ipnRouter({ store, delivery: 'at-least-once' });
      if (variant === 'postgres-ledger') {
        // The documented exactly-once listener: its write commits with the delivered mark.
        const insert = `INSERT INTO "${config.table}_ledger" (transaction_id, order_id, amount) VALUES ($1, $2, $3)`;
        ipn.on('successful', async (n, { db }) => {
          await db.query(insert, [n.transaction_id, n.custom_data, n.amount]);
        });
      }
      return mounted(counted(ipn));
    }
    case 'handwritten-ledger':
      return handwrittenLedger(postgresPool());
    case 'by-the-book':
      return byTheBook(postgresPool());
    case 'graphile-worker':
      return jobQueue(postgresPool());
    case 'mysql':
    case 'mysql-ledger': {
      const pool = createPool({ uri: config.mysqlUrl });
      // After the router's close (closers run in reverse): deliveries still settling need the pool.
      closers.push(() => pool.end());
      const ipn = lib.ipnRouter({
        store: new lib.MysqlStore({ pool, table: config.table }),
        delivery: 'at-least-once',
      });
      if (variant === 'mysql-ledger') {
        // MysqlStore's documented exactly-once listener, as postgres-ledger's.
        const insert = `INSERT INTO \`${config.table}_ledger\` (transaction_id, order_id, amount) VALUES (?, ?, ?)`;
        ipn.on('successful', async (n, { db }) => {
          await db.query(insert, [n.transaction_id, n.custom_data, n.amount]);
        });
      }
      return mounted(counted(ipn));
    }
    case 'sqlite':
    case 'sqlite-ledger': {
      const database = new Database(config.sqliteFile);
      closers.push(() => {
        database.close();
      });
      const store = new lib.SqliteStore({ database, table: config.table });
      const ipn = lib.ipnRouter({ store, delivery: 'at-least-once' });
      if (variant === 'sqlite-ledger') {
        // SqliteStore's documented exactly-once listener: `db` is the delivery transaction's connection.
        const insert = `INSERT INTO "${config.table}_ledger" (transaction_id, order_id, amount) VALUES (?, ?, ?)`;
        ipn.on('successful', (n, { db }) => {
          db.prepare(insert).run(n.transaction_id, n.custom_data, n.amount);
        });
      }
      return mounted(counted(ipn));
    }
    case 'node-http':
      return counted(lib.ipnRouter());
    case 'fetch': {
      // The Web-standard handler as fetch-style servers on Node run it: a Request made from the
      // IncomingMessage, the Response written back (@hono/node-server's listener, what Hono uses).
      const ipn = counted(lib.ipnRouter());
      const listener = getRequestListener((request) => ipn.fetch(request));
      return (req, res) => void listener(req, res);
    }
    default:
      // A variant added to VARIANTS without a server here fails at once, not as a server that never answers.
      throw new Error(`bench server: no server for the variant ${String(variant satisfies never)}`);
  }
}

/**
 * The reference for the exactly-once variants (issue 27): what a partner writes without ipn-kit to credit a
 * notification once. One statement, one commit: the ledger's key (transaction_id, state) makes a resend a
 * no-op, and the answer comes after the commit, so a crash before it means a resend, never a lost credit.
 */
function handwrittenLedger(pool: Pool): RequestListener {
  const insert = creditSql();
  const app = express();
  app.use(express.json());
  app.post('/ipn', async (req, res) => {
    const n = req.body as Record<string, unknown>;
    const { rowCount } = await pool.query(insert, [n.transaction_id, n.state, n.custom_data, n.amount]);
    // Counted as the router counts: a resend is a duplicate (the run's ids are new: it prints any).
    if (rowCount === 1) stats.successful += 1;
    else stats.duplicate += 1;
    res.status(200).json({ ok: true });
  });
  return app;
}

/** The hand-written credit: one row per (transaction_id, state), a resend a no-op. */
const creditSql = (): string =>
  `INSERT INTO "${config.table}_handwritten" (transaction_id, state, order_id, amount) ` +
  'VALUES ($1, $2, $3, $4) ON CONFLICT (transaction_id, state) DO NOTHING';

/**
 * The handler as the payment service's own integration guide has it (issue 34's "by the book"): keep the
 * payload for audit and credit, in one transaction, then answer 200. A crash before the `COMMIT` keeps
 * neither and the service resends; after it, the resend finds the ledger row and credits nothing.
 */
function byTheBook(pool: Pool): RequestListener {
  const audit = `INSERT INTO "${config.table}_payloads" (transaction_id, payload) VALUES ($1, $2)`;
  const credit = creditSql();
  const app = express();
  app.use(express.json());
  app.post('/ipn', async (req, res) => {
    const n = req.body as Record<string, unknown>;
    const client = await pool.connect();
    let rowCount: number | null;
    try {
      await client.query('BEGIN');
      await client.query(audit, [n.transaction_id, n]);
      ({ rowCount } = await client.query(credit, [n.transaction_id, n.state, n.custom_data, n.amount]));
      await client.query('COMMIT');
      client.release();
    } catch (error) {
      console.error(`bench server: by-the-book: ${String(error)}`);
      // The connection's state is unknown: it leaves the pool. The service resends on the 500.
      client.release(error instanceof Error ? error : true);
      res.status(500).json({ ok: false });
      return;
    }
    if (rowCount === 1) stats.successful += 1;
    else stats.duplicate += 1;
    res.status(200).json({ ok: true });
  });
  return app;
}

/**
 * A job queue (graphile-worker, issue 34's comparator): the handler enqueues a job with `add_job` and
 * answers 200; a worker of concurrency 10 in the same process runs the jobs, each crediting the ledger
 * as the hand-written handler does (a job can run twice, so the credit is idempotent). The queue lives in
 * the schema `<table>_gw`, which the worker migrates on start.
 */
async function jobQueue(pool: Pool): Promise<RequestListener> {
  const schema = `${config.table}_gw`;
  const credit = creditSql();
  // The worker's own pool, as graphile-worker makes it from a connection string (its default size, 10),
  // beside the handler's: one of its clients holds the LISTEN that wakes the workers.
  const runner = await runWorker({
    connectionString: config.databaseUrl,
    schema,
    concurrency: 10,
    noHandleSignals: true,
    // Its errors only: the info lines (a job done, the worker's start) would flood the run's output.
    logger: new Logger(() => (level, message) => {
      if (String(level) === 'error') console.error(`bench server: graphile-worker: ${message}`);
    }),
    taskList: {
      credit: async (payload, helpers) => {
        const n = payload as Record<string, unknown>;
        const { rowCount } = await helpers.query(credit, [
          n.transaction_id,
          n.state,
          n.custom_data,
          n.amount,
        ]);
        if (rowCount === 1) stats.successful += 1;
        else stats.duplicate += 1;
      },
    },
  });
  // Before the handler's pool ends (closers run in reverse); stop() also ends the worker's pool.
  closers.push(() => runner.stop());
  const add = `SELECT "${schema}".add_job('credit', $1::json)`;
  const app = express();
  app.use(express.json());
  app.post('/ipn', async (req, res) => {
    await pool.query(add, [req.body]);
    res.status(200).json({ ok: true });
  });
  return app;
}

/** A `pg` Pool on the run's database, ended after the router's close, once its queries are done. */
function postgresPool(): Pool {
  const pool = new Pool({ connectionString: config.databaseUrl });
  pool.on('error', (error) => console.error(`bench server: PostgreSQL: ${error.message}`));
  closers.push(async () => {
    await drained(pool);
    await pool.end();
  });
  return pool;
}

/**
 * The exactly-once listener through Drizzle: each delivery in a Drizzle transaction, the same ledger row
 * written with `tx.insert`, the mark run by ipn-kit through Drizzle's `execute`.
 */
function drizzleLedger(pool: Pool): IpnRouter {
  const ledger = pgTable(`${config.table}_ledger`, {
    transactionId: text('transaction_id').notNull(),
    orderId: text('order_id'),
    amount: numeric('amount'),
  });
  const store = new lib.PostgresStore({
    pool,
    table: config.table,
    transactions: lib.drizzleTransactions(drizzle(pool)),
  });
  const ipn = lib.ipnRouter({ store, delivery: 'at-least-once' });
  ipn.on('successful', async (n, { tx }) => {
    await tx
      .insert(ledger)
      .values({ transactionId: n.transaction_id, orderId: n.custom_data, amount: String(n.amount) });
  });
  return ipn;
}

/** Resolves once no query is running or waiting in `pool`, or after 5 s. */
async function drained(pool: Pool): Promise<void> {
  for (
    let tries = 0;
    tries < 500 && (pool.waitingCount > 0 || pool.idleCount < pool.totalCount);
    tries += 1
  ) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

async function stop(server: Server): Promise<void> {
  const cpu = process.cpuUsage(listening);
  stats.cpuMicros = cpu.user + cpu.system;
  process.send?.({ type: 'stats', stats });
  server.closeAllConnections();
  server.close();
  // Reverse order: the router before the client or pool it uses.
  for (const close of closers.reverse()) {
    try {
      await close();
    } catch (error) {
      console.error(`bench server: closing failed: ${String(error)}`);
    }
  }
  process.exit(0);
}

async function main(): Promise<void> {
  lib = await loadLib(config.lib);
  if (config.variant === 'memory-otel-api') {
    // The API in the app, its global registry in use (a diag logger), and no tracer provider: the router's
    // one check per request finds none, and makes no span.
    const { diag } = await import('@opentelemetry/api');
    diag.setLogger({ error() {}, warn() {}, info() {}, debug() {}, verbose() {} });
  }
  const server = createServer(await handlerOf(config.variant));
  // Without the orchestrator, nobody is left to stop this process.
  process.on('disconnect', () => process.exit(1));
  process.on('message', (message) => {
    if (message === 'stop') void stop(server);
  });
  server.listen(0, '127.0.0.1', () => {
    listening = process.cpuUsage();
    process.send?.({ type: 'ready', port: (server.address() as AddressInfo).port });
  });
}

main().catch((error: unknown) => {
  console.error(`bench server: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exit(1);
});
