import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createPool, type RowDataPacket } from 'mysql2/promise';
import { MysqlStore } from '../../lib/mysql.js';
import type { CrashPoint } from '../processes/app-instance.js';
import { startInstance, type Instance } from '../helpers/instances.js';
import { uniquePayload } from '../helpers/payloads.js';
import { describeWithService, mysqlUrl } from '../helpers/services.js';

// Each process start costs a second or two of CPU on a shared 2-core machine: a dozen kills in all.
jest.setTimeout(180_000);

const POINTS: CrashPoint[] = [
  'before-write',
  'during-write',
  'after-write',
  'before-commit',
  'commit-sent',
  'after-commit',
];
/** Every point twice, each time at the first or the second time the process reaches it. */
const PLAN = [...POINTS, ...POINTS].map((point, index) => ({ point, nth: 1 + (index % 2) }));
/** Payments keep coming until every planned kill happened, up to this many. */
const MAX_PAYMENTS = 60;

describeWithService('MariaDB', 'exactly once on the ledger across SIGKILLs, with MysqlStore', () => {
  const suffix = `${process.pid}_${Date.now() % 100_000}`;
  const table = `ipn_mycrash_${suffix}`;
  const ledger = `ledger_mycrash_${suffix}`;
  const pool = createPool({ uri: mysqlUrl(), connectionLimit: 2 });
  const folder = mkdtempSync(join(tmpdir(), 'ipn-crash-'));
  const log = join(folder, 'crashes.log');
  const running = new Set<Instance>();
  let finished = false; // no more restarts
  const launches: Array<Promise<Instance>> = []; // every start, also one still starting at the end

  beforeAll(async () => {
    await new MysqlStore({ pool, table }).migrate();
    // No unique key: a second credit of a payment would be a second row.
    await pool.query(`CREATE TABLE ${ledger} (transaction_id VARCHAR(255) NOT NULL, amount DOUBLE)`);
  });
  afterAll(async () => {
    finished = true;
    const started = await Promise.allSettled(launches);
    for (const start of started) if (start.status === 'fulfilled') await start.value.kill('SIGKILL');
    await pool.query(`DROP TABLE IF EXISTS ${table}, ${table}_expected, ${ledger}`);
    await pool.end();
    rmSync(folder, { recursive: true, force: true });
  });

  test('two processes killed at every point of delivery, again and again: one ledger row per payment', async () => {
    const plan = [...PLAN];
    let kills = 0;
    /** Starts an instance with the next crash of the plan (none once it is spent), restarted when killed. */
    const launch = async (): Promise<Instance> => {
      const crash = plan.shift();
      const starting = startInstance({
        store: 'mysql',
        delivery: 'at-least-once',
        namespace: table,
        listener: 'ledger',
        ledgerTable: ledger,
        leaseMs: 1_000,
        recoveryIntervalMs: 100,
        crash: crash && { ...crash, log },
      });
      launches.push(starting);
      const instance = await starting;
      running.add(instance);
      instance.child.once('exit', (code, signal) => {
        running.delete(instance);
        if (signal === 'SIGKILL') kills += 1;
        if (!finished) void launch();
      });
      return instance;
    };
    await Promise.all([launch(), launch()]);

    // The service: posts each payment until it gets a 200 (a connection cut by a kill is resent). New
    // payments keep coming until every planned kill has happened.
    const payments: Array<Record<string, unknown>> = [];
    const deadline = Date.now() + 150_000;
    const post = async (payment: Record<string, unknown>): Promise<void> => {
      for (let answered = false; !answered;) {
        if (Date.now() > deadline) throw new Error(`no 200 for ${String(payment.transaction_id)}`);
        const targets = [...running];
        const target = targets[payments.length % Math.max(targets.length, 1)];
        if (target === undefined) {
          await new Promise((resolve) => setTimeout(resolve, 50));
          continue;
        }
        answered = await fetch(target.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(payment),
        }).then(
          (response) => response.status === 200,
          () => false,
        );
      }
    };
    while (kills < PLAN.length && payments.length < MAX_PAYMENTS) {
      const payment = uniquePayload();
      await post(payment);
      payments.push(payment);
      await new Promise((resolve) => setTimeout(resolve, 150));
    }

    const keys = payments.map((payment) => `${String(payment.transaction_id)}:SUCCESSFUL`);
    for (;;) {
      const [rows] = await pool.query<RowDataPacket[]>(
        `SELECT COUNT(*) AS n FROM ${table} WHERE \`key\` IN (?) AND status = 'delivered'`,
        [keys],
      );
      const delivered = Number(rows[0]?.n);
      if (delivered === payments.length) break;
      if (Date.now() > deadline)
        throw new Error(`${delivered} of ${payments.length} delivered, ${kills} kills`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    finished = true;

    const [rows] = await pool.query<RowDataPacket[]>(
      `SELECT transaction_id, COUNT(*) AS n FROM ${ledger} GROUP BY transaction_id ORDER BY transaction_id`,
    );
    expect(rows.map((row) => ({ transaction_id: row.transaction_id as unknown, n: Number(row.n) }))).toEqual(
      payments
        .map((payment) => ({ transaction_id: payment.transaction_id, n: 1 }))
        .sort((a, b) => String(a.transaction_id).localeCompare(String(b.transaction_id))),
    );
    // Every planned kill happened, at every point: the plan is only spent when its processes reached it.
    const crashed = readFileSync(log, 'utf8').trim().split('\n');
    expect([...new Set(crashed)].sort()).toEqual([...POINTS].sort());
    expect(crashed).toHaveLength(PLAN.length);
    expect(kills).toBe(PLAN.length);
  });
});
