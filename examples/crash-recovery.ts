import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'pg';
import type { InboxEntry } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { createFakeProvider } from 'ipn-kit/testing';
import { startLedgerApp, stopProcess } from './start-ledger-app.js';

/** One row of the scene's ledger, as read back from PostgreSQL. */
export interface LedgerRow {
  transaction_id: string;
  order_id: string;
  amount: string;
}

/** What the crash scene ends with. Every count and status in it is read from PostgreSQL. */
export interface CrashRecoverySummary {
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
  /** The throwaway ledger table, dropped when the scene ends. */
  ledgerTable: string;
  /** The throwaway inbox table, dropped (with `<inboxTable>_expected`) when the scene ends. */
  inboxTable: string;
  /** The whole ledger, read back at the end. */
  ledger: LedgerRow[];
}

/** The scene did not run: PostgreSQL could not be reached. */
export interface CrashRecoverySkipped {
  skipped: string;
}

export interface CrashRecoveryOptions {
  /** @default `DATABASE_URL`, or `postgres://postgres@127.0.0.1:5432/test` */
  databaseUrl: string;
  /** For tests: runs on the ledger once the payment is delivered, just before the scene reads it back. */
  beforeLedgerRead: (pool: Pool, ledgerTable: string) => Promise<void>;
}

const LEASE_MS = 2_000;
const PAYMENT = { transactionId: 'EFB.004301', orderId: 'order-3001', amount: 2500 } as const;

/**
 * A crash in the middle of a delivery, survived with one credit: a partner app in a child process
 * (`examples/ledger-app.ts`: `PostgresStore`, at-least-once, the credit written through `db`) receives a
 * SUCCESSFUL from the fake payment service, writes its ledger row, and is killed with SIGKILL before the
 * delivery's COMMIT. A new app on the same database takes the notification up once its lease runs out and
 * delivers it again. The ledger, with no unique constraint, ends with one row. Its tables are made for the
 * run and dropped at the end; without PostgreSQL the scene is skipped.
 *
 * @example
 * const scene = await runCrashRecovery();
 * if (!('skipped' in scene)) console.log(scene.ledger.length); // 1
 */
export async function runCrashRecovery(
  options: Partial<CrashRecoveryOptions> = {},
): Promise<CrashRecoverySummary | CrashRecoverySkipped> {
  const databaseUrl =
    options.databaseUrl || process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
  const pool = new Pool({ connectionString: databaseUrl, max: 2, connectionTimeoutMillis: 3_000 });
  pool.on('error', () => {}); // an idle client's error: the next query reports it
  try {
    await pool.query('SELECT 1');
  } catch (error) {
    await pool.end();
    return { skipped: `PostgreSQL at ${redact(databaseUrl)} is unreachable (${reasonOf(error)})` };
  }

  const suffix = `${process.pid}_${randomBytes(3).toString('hex')}`;
  const inboxTable = `ipn_demo_inbox_${suffix}`;
  const ledgerTable = `ipn_demo_ledger_${suffix}`;
  const store = new PostgresStore({ pool, table: inboxTable });
  const provider = await createFakeProvider({ apiKey: 'demo-api-key' });
  const running = new Set<ChildProcess>();
  const start = (holdAfterWrite: boolean) =>
    startLedgerApp({ databaseUrl, inboxTable, ledgerTable, leaseMs: LEASE_MS, holdAfterWrite }, running);
  const key = `${PAYMENT.transactionId}:SUCCESSFUL`;
  const entry = async () => {
    const found = await store.get(key);
    if (!found) throw new Error(`the inbox has no entry ${key}`);
    return { status: found.status, attempts: found.attempts };
  };
  const rowsOfPayment = async () => {
    const sql = `SELECT count(*)::int AS n FROM ${ledgerTable} WHERE transaction_id = $1`;
    const { rows } = await pool.query<{ n: number }>(sql, [PAYMENT.transactionId]);
    return rows[0]?.n ?? 0;
  };
  try {
    await store.migrate();
    // No unique constraint: a second credit of the payment would be a second row, for all to see.
    await pool.query(
      `CREATE TABLE ${ledgerTable} (transaction_id text NOT NULL, order_id text NOT NULL, amount numeric)`,
    );

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
    const rowsAfterKill = await rowsOfPayment();
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

    await options.beforeLedgerRead?.(pool, ledgerTable);
    const { rows: ledger } = await pool.query<LedgerRow>(
      `SELECT transaction_id, order_id, amount::text FROM ${ledgerTable} ORDER BY transaction_id`,
    );
    return {
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
      ledger,
    };
  } finally {
    await Promise.all([...running].map((child) => stopProcess(child, 'SIGTERM')));
    await provider.close();
    const tables = `${ledgerTable}, ${inboxTable}, ${inboxTable}_expected`;
    await pool
      .query(`DROP TABLE IF EXISTS ${tables}`)
      .catch((error: unknown) => console.error(`could not drop ${tables}: ${reasonOf(error)}`));
    await pool.end();
  }
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
