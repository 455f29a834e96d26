import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import { createServer } from 'node:net';
import path from 'node:path';
import { Pool } from 'pg';
import {
  runCrashRecovery,
  type CrashRecoverySummary,
  type SceneQuery,
} from '../../examples/crash-recovery.js';
import { runDemo, type DemoSummary } from '../../examples/demo.js';
import { formatCrashRecovery } from '../../examples/format-crash-recovery.js';
import { PAYMENTS } from '../../examples/payment-service.js';
import { runServiceRules, type RulesSummary } from '../../examples/service-rules.js';
import { databaseUrl, describeWithService } from '../helpers/services.js';

// The crash scene starts two app processes, a second or two each on a busy machine, and `npm start` runs it
// again.
jest.setTimeout(60_000);

const root = path.resolve(__dirname, '../..');

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the demo as `npm start` does (`tsx examples/demo.ts`), with `env` added to the environment. */
function npmStart(env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    const tsx = path.join(root, 'node_modules', '.bin', 'tsx');
    const options = { cwd: root, env: { ...process.env, ...env } };
    const child = execFile(tsx, ['examples/demo.ts'], options, (_error, stdout, stderr) =>
      resolve({ code: child.exitCode, stdout, stderr }),
    );
  });
}

/** One `npm start` run, shared by the tests that read its output: each run plays every scene. */
let started: Promise<Run> | undefined;
const npmStartOnce = (): Promise<Run> => (started ??= npmStart());

/** The warnings the demo's first two scenes stage, in any order: the four requests they make to be refused. */
const STAGED_WARNINGS = [
  expect.stringMatching(/^\[ipn-kit\] WARN rejected an IPN request: malformed_body /),
  expect.stringMatching(/^\[ipn-kit\] WARN the notification of \S+ contradicts its expectation in amount/),
  expect.stringMatching(/^\[ipn-kit\] WARN the notification of \S+ differs from the service's record /),
  expect.stringMatching(/^\[ipn-kit\] WARN the payment service does not know transaction \S+, twice: /),
];

describe('the demo (npm start)', () => {
  let summary: DemoSummary;
  beforeAll(async () => {
    summary = await runDemo();
  });

  const order = (orderId: string) => {
    const found = summary.orders.find((candidate) => candidate.orderId === orderId);
    if (!found) throw new Error(`the partner has no order ${orderId}`);
    return found;
  };

  it('plays about twenty payments with sequential and concurrent resends and a FAILED then SUCCESSFUL', () => {
    expect(PAYMENTS.length).toBeGreaterThanOrEqual(18);
    expect(PAYMENTS.some((p) => p.copies > 1 && !p.concurrent)).toBe(true);
    expect(PAYMENTS.some((p) => p.copies > 1 && p.concurrent)).toBe(true);
    expect(PAYMENTS.some((p) => p.states.join() === 'FAILED,SUCCESSFUL')).toBe(true);
  });

  it('credits every paid order exactly once, however many copies of its SUCCESSFUL arrived', () => {
    const paid = PAYMENTS.filter((p) => p.states.includes('SUCCESSFUL'));
    for (const payment of paid) {
      expect(order(payment.orderId)).toMatchObject({
        status: 'paid',
        credits: 1,
        transactionId: payment.transactionId,
      });
    }
  });

  it('marks orders whose only notification is FAILED as failed, with no credit', () => {
    const failed = PAYMENTS.filter((p) => !p.states.includes('SUCCESSFUL'));
    expect(failed.length).toBeGreaterThan(0);
    for (const payment of failed) {
      expect(order(payment.orderId)).toMatchObject({ status: 'failed', credits: 0 });
    }
  });

  it('ends a FAILED then SUCCESSFUL transaction paid with one credit', () => {
    const retried = PAYMENTS.find((p) => p.states.join() === 'FAILED,SUCCESSFUL');
    expect(order(retried?.orderId ?? '')).toMatchObject({ status: 'paid', credits: 1 });
  });

  // With `verify`, a copy that comes while the first copy of its notification is still being verified is
  // answered 503 (verification_pending), not as a duplicate; the service sends it again until answered 200,
  // except a copy sent at once with one that was answered 200 (that ends the delivery).
  it('counts each resend answered 200 as a duplicate, each verified notification once, and the malformed request as invalid', () => {
    const resends = PAYMENTS.reduce((sum, p) => sum + p.states.length * (p.copies - 1), 0);
    const notifications = PAYMENTS.reduce((sum, p) => sum + p.states.length, 0);
    const reversed = PAYMENTS.filter((p) => p.states.length > 1).length;
    const sentAtOnce = PAYMENTS.reduce(
      (sum, p) => sum + (p.concurrent ? p.states.length * (p.copies - 1) : 0),
      0,
    );
    const { posts, putOff } = summary.service;
    // Each POST beyond the planned copies resent a copy answered 503; the other 503 answers were copies sent
    // at once (the copies sent one after another were all acknowledged, else playPaymentService throws).
    const sentAgain = posts - notifications - resends;
    const notSentAgain = putOff - sentAgain;
    expect(summary.service).toMatchObject({ notifications, resends, malformedStatus: 400, otherAnswers: [] });
    expect(sentAgain).toBeGreaterThanOrEqual(0);
    expect(notSentAgain).toBeGreaterThanOrEqual(0);
    expect(notSentAgain).toBeLessThanOrEqual(sentAtOnce);
    expect(summary.counts).toEqual({
      received: notifications - reversed,
      // Every 200 after a notification's first is a duplicate: every resend but those answered 503 and not
      // sent again.
      duplicates: resends - notSentAgain,
      invalid: 1,
      rejected: reversed + 1,
    });
    expect(summary.review).toEqual([]);
  });

  it('rejects the forged SUCCESSFUL: answered 200, the order stays failed, nothing credited', () => {
    expect(summary.service.forgedStatus).toBe(200);
    expect(order(summary.service.forgedOrderId)).toMatchObject({ status: 'failed', credits: 0 });
  });

  it('verifies with at most one status query per transaction, however many copies arrived', () => {
    // Plus one for the forged id (a not-found is believed once the service repeats it), and one for each
    // transaction notified in two states, whose second may need an answer newer than the first one's.
    const reversed = PAYMENTS.filter((p) => p.states.length > 1).length;
    expect(summary.statusQueries).toBeLessThanOrEqual(PAYMENTS.length + 2 + reversed);
  });

  it('runs as `npm start`: exits 0 and prints the orders and the counts', async () => {
    const { code, stdout, stderr } = await npmStartOnce();
    expect(code).toBe(0);
    // The default logger is loud: the four requests the demo stages to be refused are warned about, no more
    // (the second scene's forged copy, rejected by its expectation, is the fourth); the crash scene's app
    // processes share this stderr, and warn about nothing.
    expect(stderr.trimEnd().split('\n').sort()).toEqual(STAGED_WARNINGS);
    expect(stdout).toMatch(/^order-1001\s+5,000\s+paid\s+1\s+EFB\.001158/m);
    expect(stdout).toMatch(/^order-1008\s+4,000\s+paid\s+1\s+PIX_22827811/m);
    expect(stdout).toMatch(new RegExp(`^Received\\s+${summary.counts.received}\\b`, 'm'));
    // The answers 503 differ from run to run (a copy sent at once may come after the first one's verification):
    // the printed counts must agree with each other, and with the resends the service planned.
    const { resends } = summary.service;
    const putOff =
      /^(\d+) of their POSTs came while the first copy of their notification was still being verified, and were\nanswered 503 \(verification_pending\): (\d+) of them were sent again \(the service resends until answered 200\),\n(\d+) not \(copies sent at once, one of which was answered 200\); (\d+) POSTs in all\.$/m.exec(
        stdout,
      );
    const [answered503, sentAgain, notSentAgain] = (putOff?.slice(1, 4) ?? ['0', '0', '0']).map(Number);
    expect(answered503).toBe((sentAgain ?? 0) + (notSentAgain ?? 0));
    expect(stdout).toMatch(
      new RegExp(
        `^Duplicates\\s+${resends - (notSentAgain ?? 0)}\\s+resends dropped, concurrent copies included`,
        'm',
      ),
    );
    if (putOff !== null) {
      expect(Number(putOff[4])).toBe(summary.service.notifications + resends + (sentAgain ?? 0));
    }
    expect(stdout).toMatch(/^Invalid\s+1\b/m);
    expect(stdout).toMatch(/^Rejected\s+2\b/m);
    expect(stdout).toMatch(
      /^order-2001\s+1000\s+SUCCESS notification\s+1\s+credited \(state received: SUCCESS\)$/m,
    );
    expect(stdout).toMatch(/^Rejected by their expectation: 1, with 0 status queries$/m);
    expect(stdout).toMatch(/^order-2003\s+3000\s+notification lost\s+1\s+credited by the sweep/m);
  });
});

describe("the demo's second scene: the service's own rules", () => {
  let rules: RulesSummary;
  beforeAll(async () => {
    rules = await runServiceRules();
  });
  const order = (orderId: string) => rules.orders.find((candidate) => candidate.orderId === orderId);

  it('credits a SUCCESS notification (written with reponse) once', () => {
    expect(order('order-2001')).toMatchObject({ credits: 1, outcome: 'credited (state received: SUCCESS)' });
  });

  it('rejects the forged copy by its expectation, with no status query', () => {
    expect(rules.rejected).toBe(1);
    expect(rules.queriesBeforeSweep).toBe(0);
    expect(order('order-2002')?.credits).toBe(1); // the genuine payment, from the sweep
  });

  it('reconciles the lost notification through the sweep: one status query per missing notification', () => {
    expect(order('order-2003')).toMatchObject({
      credits: 1,
      outcome: 'credited by the sweep (status query)',
    });
    expect(rules.reconciled).toBe(2);
    expect(rules.statusQueries).toBe(2);
  });
});

describeWithService('PostgreSQL', "the demo's third scene: a crash survived with one credit", () => {
  let scene: CrashRecoverySummary;
  /** The payment's ledger rows, as this test counts them itself just before the scene reads the ledger. */
  let countedByTest: number | undefined;
  beforeAll(async () => {
    const result = await runCrashRecovery({
      databaseUrl: databaseUrl(),
      beforeLedgerRead: async (query, ledgerTable) => {
        countedByTest = await countAndPlantDuplicate(query, ledgerTable);
      },
    });
    if ('skipped' in result) throw new Error(`PostgreSQL answered the probe, yet: ${result.skipped}`);
    scene = result;
  });

  it('runs on PostgreSQL, with the PostgreSQL app', () => {
    expect(scene).toMatchObject({ database: 'PostgreSQL', app: 'examples/ledger-app.ts' });
    expect(scene.fallback).toBeUndefined();
  });

  it('kills the app with SIGKILL once its listener wrote the ledger row, before COMMIT: nothing committed', () => {
    expect(scene.answered).toBe(200);
    expect(scene.killedBy).toBe('SIGKILL');
    expect(scene.rowsAfterKill).toBe(0);
    expect(scene.afterKill).toEqual({ status: 'received', attempts: 1 });
  });

  it('delivers the payment from the restarted app, in a second attempt, on the same database', () => {
    expect(scene.restartAttempt).toBe(2);
    expect(scene.final).toEqual({ status: 'delivered', attempts: 2 });
  });

  it('leaves one ledger row, and reads the ledger from PostgreSQL: a row planted before the read shows', () => {
    expect(countedByTest).toBe(1);
    expect(scene.ledger).toEqual([
      { transaction_id: 'EFB.004301', order_id: 'order-3001', amount: '2500' },
      { transaction_id: 'EFB.004301', order_id: 'order-3001', amount: '2500' },
    ]);
    const text = formatCrashRecovery(scene);
    expect(text).toMatch(/^2 rows for EFB\.004301: credited 2 times, not exactly once\.$/m);
    expect(text).not.toMatch(/exactly once\. /);
  });

  it('drops its tables when it ends', async () => {
    const tables = [scene.ledgerTable, scene.ordersTable, scene.inboxTable, `${scene.inboxTable}_expected`];
    expect(await existing(tables)).toEqual([]);
  });

  it('prints, as `npm start`, the kill, the restart and a ledger of exactly one row, its tables then dropped', async () => {
    const { code, stdout } = await npmStartOnce();
    expect(code).toBe(0);
    expect(stdout).toMatch(
      /^Attempt 1: the listener wrote the ledger row, then the app was killed \(SIGKILL\) before its COMMIT\.$/m,
    );
    expect(stdout).toMatch(/^ {2}Right after the kill: 0 rows for EFB\.004301 in the ledger; /m);
    expect(stdout).toMatch(/^Attempt 2: the app, restarted on the same database, took the entry up /m);
    expect(stdout).toMatch(/the inbox entry is delivered\.$/m);
    // The ledger as printed: its header, then every row until the blank line.
    const ledger = /^The ledger \((\w+), .*\n(transaction_id.*)\n((?:.+\n)*)\n/m.exec(stdout);
    expect(ledger?.[2]).toMatch(/^transaction_id\s+order_id\s+amount$/);
    expect(ledger?.[3]?.trimEnd().split('\n')).toEqual([
      expect.stringMatching(/^EFB\.004301\s+order-3001\s+2500$/),
    ]);
    expect(stdout).toMatch(/^1 row for EFB\.004301: credited exactly once\. /m);
    expect(stdout).toMatch(/^A crash mid-delivery: PostgreSQL inbox, /m);
    expect(stdout).not.toMatch(/SQLite/);
    expect(await existing([ledger?.[1] ?? ''])).toEqual([]);
  });
});

describe("the demo's third scene without PostgreSQL: the same crash on SQLite, with no database server", () => {
  let scene: CrashRecoverySummary;
  let port: number;
  /** The payment's ledger rows, as this test counts them itself just before the scene reads the ledger. */
  let countedByTest: number | undefined;
  beforeAll(async () => {
    port = await closedPort();
    const result = await runCrashRecovery({
      databaseUrl: `postgres://postgres:s3cret@127.0.0.1:${port}/test`,
      beforeLedgerRead: async (query, ledgerTable) => {
        countedByTest = await countAndPlantDuplicate(query, ledgerTable);
      },
    });
    if ('skipped' in result) throw new Error(`the scene did not run on SQLite: ${result.skipped}`);
    scene = result;
  });

  it('runs on SQLite in a temporary file, with the SQLite app, saying why', () => {
    expect(scene).toMatchObject({ database: 'SQLite', app: 'examples/sqlite-ledger-app.ts' });
    expect(scene.file?.startsWith(path.join(os.tmpdir(), 'ipn-demo-'))).toBe(true);
    expect(scene.fallback).toBe(
      `PostgreSQL at postgres://postgres:***@127.0.0.1:${port}/test is unreachable ` +
        `(connect ECONNREFUSED 127.0.0.1:${port})`,
    );
  });

  it('kills the app with SIGKILL once its listener wrote the ledger row, before COMMIT: nothing committed', () => {
    expect(scene.answered).toBe(200);
    expect(scene.killedBy).toBe('SIGKILL');
    expect(scene.rowsAfterKill).toBe(0);
    expect(scene.afterKill).toEqual({ status: 'received', attempts: 1 });
  });

  it('delivers the payment from the restarted app, in a second attempt, on the same file', () => {
    expect(scene.restartAttempt).toBe(2);
    expect(scene.final).toEqual({ status: 'delivered', attempts: 2 });
  });

  it('leaves one ledger row, and reads the ledger from the file: a row planted before the read shows', () => {
    expect(countedByTest).toBe(1);
    expect(scene.ledger).toEqual([
      { transaction_id: 'EFB.004301', order_id: 'order-3001', amount: '2500' },
      { transaction_id: 'EFB.004301', order_id: 'order-3001', amount: '2500' },
    ]);
    expect(formatCrashRecovery(scene)).toMatch(
      /^2 rows for EFB\.004301: credited 2 times, not exactly once\.$/m,
    );
  });

  it('removes its temporary folder when it ends', () => {
    expect(fs.existsSync(path.dirname(scene.file ?? ''))).toBe(false);
  });

  it('prints, as `npm start` with PostgreSQL unreachable, why SQLite, the kill, the restart and a ledger of one row', async () => {
    const { code, stdout, stderr } = await npmStart({
      DATABASE_URL: `postgres://postgres:s3cret@127.0.0.1:${port}/test`,
    });
    expect(code).toBe(0);
    // The SQLite app processes share this stderr, and warn about nothing.
    expect(stderr.trimEnd().split('\n').sort()).toEqual(STAGED_WARNINGS);
    expect(stdout).toMatch(/^order-1001\s+5,000\s+paid\s+1\s+EFB\.001158/m);
    expect(stdout).toMatch(/^Reconciled by the sweep: 2, with 2 status queries in all$/m);
    expect(stdout).toMatch(/^A crash mid-delivery: SQLite inbox, at least once, /m);
    expect(stdout).toContain(
      `PostgreSQL at postgres://postgres:***@127.0.0.1:${port}/test is unreachable ` +
        `(connect ECONNREFUSED 127.0.0.1:${port}),\nso the scene runs on SQLite, no server needed`,
    );
    expect(stdout).not.toContain('s3cret');
    expect(stdout).toMatch(
      /^Attempt 1: the listener wrote the ledger row, then the app was killed \(SIGKILL\) before its COMMIT\.$/m,
    );
    expect(stdout).toMatch(/^ {2}Right after the kill: 0 rows for EFB\.004301 in the ledger; /m);
    expect(stdout).toMatch(/^Attempt 2: the app, restarted on the same file, took the entry up /m);
    expect(stdout).toMatch(/the inbox entry is delivered\.$/m);
    // The ledger as printed: its header, then every row until the blank line.
    const ledger =
      /^The ledger \((\w+), in (\S+), .*read back from SQLite:\n(transaction_id.*)\n((?:.+\n)*)\n/m.exec(
        stdout,
      );
    expect(ledger?.[3]).toMatch(/^transaction_id\s+order_id\s+amount$/);
    expect(ledger?.[4]?.trimEnd().split('\n')).toEqual([
      expect.stringMatching(/^EFB\.004301\s+order-3001\s+2500$/),
    ]);
    expect(stdout).toMatch(/^1 row for EFB\.004301: credited exactly once\. /m);
    expect(stdout).not.toMatch(/skipped/);
    expect(fs.existsSync(path.dirname(ledger?.[2] ?? ''))).toBe(false);
  });
});

describe('the crash scene, when it cannot run at all', () => {
  it('is one line saying why and how to run it', () => {
    expect(
      formatCrashRecovery({ skipped: 'PostgreSQL at postgres://x is unreachable (refused), and ...' }),
    ).toBe(
      'The crash scene (a partner app killed mid-delivery, its payment credited once) was skipped: PostgreSQL at ' +
        'postgres://x is unreachable (refused), and .... To run it, start PostgreSQL or set DATABASE_URL ' +
        '(postgres://user@host:5432/db), or install better-sqlite3.',
    );
  });
});

/**
 * The test's own look at the ledger before the scene reads it (SQL both databases take): counts the
 * payment's rows, then plants a copy of each row, which the scene's count must show.
 */
async function countAndPlantDuplicate(query: SceneQuery, ledgerTable: string): Promise<number | undefined> {
  const [counted] = await query(
    `SELECT CAST(count(*) AS integer) AS n FROM ${ledgerTable} WHERE transaction_id = 'EFB.004301'`,
  );
  await query(`INSERT INTO ${ledgerTable} SELECT * FROM ${ledgerTable}`);
  return counted?.n as number | undefined;
}

/** Which of `tables` exist in the test database. */
async function existing(tables: string[]): Promise<string[]> {
  const pool = new Pool({ connectionString: databaseUrl(), max: 1 });
  try {
    const { rows } = await pool.query<{ name: string }>(
      'SELECT relname AS name FROM pg_class WHERE relname = ANY($1)',
      [tables],
    );
    return rows.map((row) => row.name);
  } finally {
    await pool.end();
  }
}

/** A loopback port nothing listens on: one the system just handed out and took back. */
function closedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port')),
      );
    });
  });
}
