import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CrashPoint } from '../processes/app-instance.js';
import { startInstance, type Instance } from './instances.js';
import { uniquePayload } from './payloads.js';
import { describeWithService, type Service } from './services.js';

/** What the crash scenario needs of a database: the inbox and a ledger, and two counts. */
export interface CrashDatabase {
  /** How many of `keys` the inbox holds as delivered. */
  delivered(keys: string[]): Promise<number>;
  /** The ledger's rows per payment, in transaction id order. */
  ledgerCounts(): Promise<Array<{ transaction_id: unknown; n: number }>>;
  /** Drops the tables and ends the pool. */
  close(): Promise<void>;
}

/** One backend of the crash scenario. */
export interface CrashBackend {
  service: Service;
  /** The describe block's name. */
  name: string;
  /** The store the child processes open (test/processes/app-instance.ts). */
  store: 'postgres' | 'mysql';
  /** A prefix of the table names, distinct per backend. */
  prefix: string;
  /** Opens a pool of 2, makes the inbox `table` and the ledger `ledger` (no unique key: a second credit of a payment is a second row). */
  open(table: string, ledger: string): Promise<CrashDatabase>;
}

const POINTS: CrashPoint[] = [
  'before-write',
  'during-write',
  'after-write',
  'before-commit',
  'commit-sent',
  'after-commit',
];
/** Every point twice, each time at the first or the second time the process reaches it. */
const PLAN = [...POINTS, ...POINTS].map((point, index) => ({
  point,
  nth: 1 + (index % 2),
}));
/** Payments keep coming until every planned kill happened, up to this many. */
const MAX_PAYMENTS = 60;

/**
 * Two app processes over `backend`'s store, killed at every point of a delivery (around the ledger write
 * and the COMMIT), twice each, restarted each time, while a service posts payments until each gets a 200:
 * in the end, one ledger row per payment.
 */
export function describeCrashLedger(backend: CrashBackend): void {
  describeWithService(backend.service, backend.name, () => {
    const suffix = `${process.pid}_${Date.now() % 100_000}`;
    const table = `ipn_${backend.prefix}_${suffix}`;
    const ledger = `ledger_${backend.prefix}_${suffix}`;
    let database: CrashDatabase | undefined;
    const folder = mkdtempSync(join(tmpdir(), 'ipn-crash-'));
    const log = join(folder, 'crashes.log');
    const running = new Set<Instance>();
    let finished = false; // no more restarts
    const launches: Array<Promise<Instance>> = []; // every start, also one still starting at the end

    beforeAll(async () => {
      database = await backend.open(table, ledger);
    });
    afterAll(async () => {
      finished = true;
      const started = await Promise.allSettled(launches);
      for (const start of started) if (start.status === 'fulfilled') await start.value.kill('SIGKILL');
      await database?.close();
      rmSync(folder, { recursive: true, force: true });
    });

    test('two processes killed at every point of delivery, again and again: one ledger row per payment', async () => {
      const plan = [...PLAN];
      let kills = 0;
      /** Starts an instance with the next crash of the plan (none once it is spent), restarted when killed. */
      const launch = async (): Promise<Instance> => {
        const crash = plan.shift();
        const starting = startInstance({
          store: backend.store,
          delivery: 'at-least-once',
          namespace: table,
          listener: 'ledger',
          ledgerTable: ledger,
          leaseMs: 1_000,
          // A lease of 1 s runs out under a slow start on a loaded machine, and each lease taken again is an
          // attempt: the default 8 could send a payment `dead` before it is credited, which is not what this
          // test is about (one ledger row per payment across kills). Failing entries still fail it.
          maxAttempts: 1_000,
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
        const delivered = await database!.delivered(keys);
        if (delivered === payments.length) break;
        if (Date.now() > deadline)
          throw new Error(`${delivered} of ${payments.length} delivered, ${kills} kills`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      finished = true;

      expect(await database!.ledgerCounts()).toEqual(
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
}
