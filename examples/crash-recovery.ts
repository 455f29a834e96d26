import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { Pool } from 'pg';
import type { InboxEntry } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { SqliteStore } from 'ipn-kit/sqlite';
import { createFakeProvider } from 'ipn-kit/testing';
import { startLedgerApp, stopProcess, type LedgerAppConfig } from './start-ledger-app.js';

/** One row of the scene's ledger, as read back from the database. */
export interface LedgerRow {
  transaction_id: string;
  order_id: string;
  amount: string;
}

/** What the crash scene ends with. Every count and status in it is read from the database. */
export interface CrashRecoverySummary {
  /** Where the inbox and the ledger were: PostgreSQL when it answers, else a SQLite file. */
  database: 'PostgreSQL' | 'SQLite';
  /** Why the scene ran on SQLite: PostgreSQL was unreachable. Absent on PostgreSQL. */
  fallback?: string;
  /** The SQLite file, in a temporary folder removed when the scene ends. Absent on PostgreSQL. */
  file?: string;
  /** The partner app that was killed and restarted: `examples/ledger-app.ts` or `examples/sqlite-ledger-app.ts`. */
  app: string;
  transactionId: string;
  orderId: string;
  amount: number;
  /** What the first app answered the service: 200, once the notification was stored, before its listener ran. */
  answered: number | undefined;
  /** How the first app ended: `SIGKILL`, sent once its listener had written its ledger row. */
  killedBy: NodeJS.Signals | null;
  /** The payment's ledger rows right after the kill: 0, as the row was never committed. */
  rowsAfterKill: number;
  /** The inbox entry right after the kill: still `received`, after 1 attempt. */
  afterKill: { status: InboxEntry['status']; attempts: number };
  /** The attempt the restarted app's listener ran: 2. */
  restartAttempt: number;
  /** The inbox entry at the end: `delivered`. */
  final: { status: InboxEntry['status']; attempts: number };
  leaseMs: number;
  /** The ledger table, made for the run: dropped when the scene ends on PostgreSQL, removed with the file on SQLite. */
  ledgerTable: string;
  /** The inbox table, made for the run (with `<inboxTable>_expected`), gone as the ledger table is. */
  inboxTable: string;
  /** The orders table, made for the run with the payment's order in it, gone as the ledger table is. */
  ordersTable: string;
  /** The whole ledger, read back at the end. */
  ledger: LedgerRow[];
}

/** The scene did not run: PostgreSQL could not be reached, and no SQLite file could be opened. */
export interface CrashRecoverySkipped {
  skipped: string;
}

/** Runs one SQL statement on the scene's own connection to its database: the rows of a query, at once on SQLite. */
export type SceneQuery = (sql: string) => Promise<Record<string, unknown>[]> | Record<string, unknown>[];

export interface CrashRecoveryOptions {
  /** @default `DATABASE_URL`, or `postgres://postgres@127.0.0.1:5432/test` */
  databaseUrl: string;
  /**
   * For tests: runs on the ledger once the payment is delivered, just before the scene reads it back,
   * with SQL that PostgreSQL and SQLite both take.
   */
  beforeLedgerRead: (query: SceneQuery, ledgerTable: string) => Promise<void>;
}

/**
 * Where the scene keeps its inbox and ledger, and how it reads them: the same steps on PostgreSQL and on
 * SQLite, in each one's SQL. PostgreSQL answers with a promise, SQLite (better-sqlite3) at once.
 */
interface SceneDatabase {
  name: CrashRecoverySummary['database'];
  store: PostgresStore | SqliteStore;
  ledgerTable: string;
  inboxTable: string;
  ordersTable: string;
  /** How the ledger app reaches the same database. */
  app: LedgerAppConfig['database'];
  /** Makes the ledger, and the orders with `order` in it, initiated with its transaction and amount. */
  createLedger(order: typeof PAYMENT): Promise<void> | void;
  rowsOf(transactionId: string): Promise<number> | number;
  readLedger(): Promise<LedgerRow[]> | LedgerRow[];
  query: SceneQuery;
  /** Drops or removes what the run made, and closes the scene's connection. */
  end(): Promise<void>;
}

const LEASE_MS = 2_000;
const PAYMENT = { transactionId: 'EFB.004301', orderId: 'order-3001', amount: 2500 } as const;

/**
 * A crash in the middle of a delivery, survived with one credit: a partner app in a child process (at
 * least once, the credit written through the listener's `db`) receives a SUCCESSFUL from the fake payment
 * service, writes its ledger row, and is killed with SIGKILL before the delivery's COMMIT. A new app on the
 * same database takes the notification up once its lease runs out and delivers it again. The ledger, with
 * no unique constraint, ends with one row.
 *
 * On PostgreSQL when it answers at `databaseUrl` (`examples/ledger-app.ts`, `PostgresStore`, tables made for
 * the run and dropped at the end); else on SQLite, with no database server (`examples/sqlite-ledger-app.ts`,
 * `SqliteStore`, the inbox and the ledger in one file of a temporary folder, removed at the end). Skipped
 * only when neither can be opened.
 *
 * @example
 * const scene = await runCrashRecovery();
 * if (!('skipped' in scene)) console.log(scene.database, scene.ledger.length); // SQLite 1, with no PostgreSQL
 */
export async function runCrashRecovery(
  options: Partial<CrashRecoveryOptions> = {},
): Promise<CrashRecoverySummary | CrashRecoverySkipped> {
  const databaseUrl =
    options.databaseUrl || process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
  let fallback: string | undefined;
  let database = await openPostgres(databaseUrl).catch((error: unknown) => {
    fallback = `PostgreSQL at ${redact(databaseUrl)} is unreachable (${reasonOf(error)})`;
    return undefined;
  });
  if (database === undefined) {
    try {
      database = openSqlite();
    } catch (error) {
      return { skipped: `${fallback}, and SQLite could not open a file (${reasonOf(error)})` };
    }
  }
  try {
    const ran = await playCrash(database, options.beforeLedgerRead);
    return fallback === undefined ? ran : { ...ran, fallback };
  } finally {
    await database.end();
  }
}

/** The scene itself, on `database`: two app processes, one killed mid-delivery, and the ledger read back. */
async function playCrash(
  database: SceneDatabase,
  beforeLedgerRead: CrashRecoveryOptions['beforeLedgerRead'] | undefined,
): Promise<CrashRecoverySummary> {
  const { store, ledgerTable, inboxTable, ordersTable } = database;
  const provider = await createFakeProvider({ apiKey: 'demo-api-key' });
  const running = new Set<ChildProcess>();
  const start = (holdAfterWrite: boolean) =>
    startLedgerApp(
      { database: database.app, inboxTable, ledgerTable, ordersTable, leaseMs: LEASE_MS, holdAfterWrite },
      running,
    );
  const key = `${PAYMENT.transactionId}:SUCCESSFUL`;
  const entry = async () => {
    const found = await store.get(key);
    if (!found) throw new Error(`the inbox has no entry ${key}`);
    return { status: found.status, attempts: found.attempts };
  };
  try {
    await store.migrate();
    await database.createLedger(PAYMENT);

    const first = await start(true);
    const written = first.written();
    const payment = provider.initiate({
      transactionId: PAYMENT.transactionId,
      amount: PAYMENT.amount,
      customData: PAYMENT.orderId,
      outcome: 'SUCCESSFUL',
      ipnUrl: first.url,
    });
    const [delivered] = await Promise.all([payment.delivered, written]);
    // The listener wrote its row and holds the transaction open: the power cut.
    const killedBy = await first.kill('SIGKILL');
    const rowsAfterKill = await database.rowsOf(PAYMENT.transactionId);
    const afterKill = await entry();
    if (afterKill.status !== 'received' || afterKill.attempts !== 1) {
      throw new Error(
        `after the kill the inbox entry is ${afterKill.status} after ${afterKill.attempts} attempts, not received ` +
          `after 1: the machine was too slow, and the attempt ended by its lease (${LEASE_MS} ms) before the kill`,
      );
    }

    const second = await start(false);
    const { attempt: restartAttempt } = await second.written();
    let final = await entry();
    for (let wait = 0; wait < 100 && final.status !== 'delivered'; wait += 1) {
      await sleep(50);
      final = await entry();
    }

    await beforeLedgerRead?.(database.query, ledgerTable);
    return {
      database: database.name,
      ...('sqliteFile' in database.app ? { file: database.app.sqliteFile } : {}),
      app: 'url' in database.app ? 'examples/ledger-app.ts' : 'examples/sqlite-ledger-app.ts',
      ...PAYMENT,
      answered: delivered.statuses[0],
      killedBy,
      rowsAfterKill,
      afterKill,
      restartAttempt,
      final,
      leaseMs: LEASE_MS,
      ledgerTable,
      inboxTable,
      ordersTable,
      ledger: await database.readLedger(),
    };
  } finally {
    await Promise.all([...running].map((child) => stopProcess(child, 'SIGTERM')));
    await provider.close();
  }
}

/** PostgreSQL at `url`, with tables named for this run; rejects when it does not answer. */
async function openPostgres(url: string): Promise<SceneDatabase> {
  const pool = new Pool({ connectionString: url, max: 2, connectionTimeoutMillis: 3_000 });
  pool.on('error', () => {}); // an idle client's error: the next query reports it
  try {
    await pool.query('SELECT 1');
  } catch (error) {
    await pool.end();
    throw error;
  }
  const suffix = `${process.pid}_${randomBytes(3).toString('hex')}`;
  const inboxTable = `ipn_demo_inbox_${suffix}`;
  const ledgerTable = `ipn_demo_ledger_${suffix}`;
  const ordersTable = `ipn_demo_orders_${suffix}`;
  return {
    name: 'PostgreSQL',
    store: new PostgresStore({ pool, table: inboxTable }),
    ledgerTable,
    inboxTable,
    ordersTable,
    app: { url },
    // No unique constraint: a second credit of the payment would be a second row, for all to see.
    createLedger: async (order) => {
      await pool.query(
        `CREATE TABLE ${ledgerTable} (transaction_id text NOT NULL, order_id text NOT NULL, amount numeric)`,
      );
      await pool.query(
        `CREATE TABLE ${ordersTable} (id text PRIMARY KEY, transaction_id text NOT NULL, amount numeric NOT NULL, paid_at timestamptz)`,
      );
      await pool.query(`INSERT INTO ${ordersTable} (id, transaction_id, amount) VALUES ($1, $2, $3)`, [
        order.orderId,
        order.transactionId,
        order.amount,
      ]);
    },
    rowsOf: async (transactionId) => {
      const sql = `SELECT count(*)::int AS n FROM ${ledgerTable} WHERE transaction_id = $1`;
      const { rows } = await pool.query<{ n: number }>(sql, [transactionId]);
      return rows[0]?.n ?? 0;
    },
    readLedger: async () => {
      const sql = `SELECT transaction_id, order_id, amount::text FROM ${ledgerTable} ORDER BY transaction_id`;
      return (await pool.query<LedgerRow>(sql)).rows;
    },
    query: async (sql) => (await pool.query<Record<string, unknown>>(sql)).rows,
    end: async () => {
      const tables = `${ledgerTable}, ${ordersTable}, ${inboxTable}, ${inboxTable}_expected`;
      await pool
        .query(`DROP TABLE IF EXISTS ${tables}`)
        .catch((error: unknown) => console.error(`could not drop ${tables}: ${reasonOf(error)}`));
      await pool.end();
    },
  };
}

/** A new SQLite file in a temporary folder, for the inbox and the ledger alike; the folder goes at the end. */
function openSqlite(): SceneDatabase {
  const folder = mkdtempSync(join(tmpdir(), 'ipn-demo-'));
  const file = join(folder, 'partner-app.db');
  let db: Database.Database | undefined;
  let store: SqliteStore<Database.Database>;
  try {
    db = new Database(file); // better-sqlite3 loads its native binding here: a failed build throws now
    store = new SqliteStore({ database: db });
  } catch (error) {
    db?.close();
    rmSync(folder, { recursive: true, force: true });
    throw error;
  }
  const ledgerTable = 'ledger';
  const ordersTable = 'orders';
  return {
    name: 'SQLite',
    store,
    ledgerTable,
    inboxTable: store.table,
    ordersTable,
    app: { sqliteFile: file },
    // In the inbox's file, with no unique constraint, as on PostgreSQL.
    createLedger: (order) => {
      db.exec(
        `CREATE TABLE ${ledgerTable} (transaction_id text NOT NULL, order_id text NOT NULL, amount integer)`,
      );
      db.exec(
        `CREATE TABLE ${ordersTable} (id text PRIMARY KEY, transaction_id text NOT NULL, amount integer NOT NULL, paid_at text)`,
      );
      db.prepare(`INSERT INTO ${ordersTable} (id, transaction_id, amount) VALUES (?, ?, ?)`).run(
        order.orderId,
        order.transactionId,
        order.amount,
      );
    },
    rowsOf: (transactionId) => {
      const sql = `SELECT count(*) AS n FROM ${ledgerTable} WHERE transaction_id = ?`;
      return (db.prepare(sql).get(transactionId) as { n: number }).n;
    },
    readLedger: () => {
      const sql = `SELECT transaction_id, order_id, CAST(amount AS text) AS amount FROM ${ledgerTable} ORDER BY transaction_id`;
      return db.prepare(sql).all() as LedgerRow[];
    },
    query: (sql) => {
      const statement = db.prepare(sql);
      if (statement.reader) return statement.all() as Record<string, unknown>[];
      statement.run();
      return [];
    },
    end: async () => {
      await store.close();
      db.close();
      rmSync(folder, { recursive: true, force: true });
    },
  };
}

/** Why a connection failed: pg's message, or the first cause of an AggregateError (whose message is empty). */
function reasonOf(error: unknown): string {
  const { message, code, errors } = error as { message?: string; code?: string; errors?: unknown[] };
  return message || (errors?.[0] === undefined ? undefined : reasonOf(errors[0])) || code || String(error);
}

/** The URL without its password, for messages. */
function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    return parsed.toString();
  } catch {
    return '(an unparsable URL)';
  }
}
