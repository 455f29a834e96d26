/**
 * Hostile review of 9720547 (commit failures of the delivery transaction, lazy client): pool hygiene when
 * connect() is pending, rejects, or the COMMIT is slow or its answer lost, and what the commit-failure branch
 * of deliver() does to an entry that was in fact delivered. Real router, PostgreSQL, HTTP; own schema.
 */
import type { Pool } from 'pg';
import { type PoolClient } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';
import { ledgerSchema } from '../helpers/ledger-schema.js';
import { describeWithService, eventually } from '../helpers/services.js';

jest.setTimeout(30_000);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describeWithService('PostgreSQL', 'transactional delivery under review: commit failures and the pool', () => {
  const ledger = ledgerSchema('ipn_txc');
  const { newPool, keyOf } = ledger;
  let pool: Pool;
  beforeAll(() => {
    pool = ledger.pool();
  });
  const served = servedRouters();
  /** Every client back in its pool (or gone), nobody waiting. */
  async function settled(p: Pool) {
    await eventually(
      'every client back in the pool',
      () => p.idleCount === p.totalCount && p.waitingCount === 0,
    );
    return { total: p.totalCount, idle: p.idleCount, waiting: p.waitingCount };
  }

  const serve = (store: PostgresStore<Pool>, extra: Record<string, unknown> = {}) =>
    served(
      ipnRouter({
        store,
        delivery: 'at-least-once',
        logger: quiet,
        retryDelayMs: 20,
        recoveryIntervalMs: 50,
        ...extra,
      }),
    );
  const entryOf = async (key: string) =>
    (await pool.query('SELECT status, attempts, last_error FROM ipn_inbox WHERE key = $1', [key])).rows[0] as
      { status: string; attempts: number; last_error: string | null } | undefined;
  const ledgerOf = async (id: unknown) =>
    (await pool.query('SELECT order_id FROM ledger WHERE transaction_id = $1', [id])).rows;
  const insert = 'INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)';
  const isMarkAndCommit = (text: unknown) => typeof text === 'string' && /;\s*COMMIT\s*$/.test(text);

  /**
   * A pool whose clients handle the first mark-and-COMMIT as told: `lost` (it runs and commits, then the
   * answer is lost), `slow` (it runs and commits; the answer comes `ms` later).
   */
  function commitFaulty(p: Pool, fault: 'lost' | 'slow', ms = 0) {
    let fired = false;
    const wrap = (client: PoolClient) =>
      new Proxy(client, {
        get(target, property) {
          if (property !== 'query') {
            const value = Reflect.get(target, property, target) as unknown;
            return typeof value === 'function' ? (value as () => unknown).bind(target) : value;
          }
          return (...args: unknown[]) => {
            if (fired || !isMarkAndCommit(args[0]))
              return Reflect.apply(target.query, target, args) as unknown;
            fired = true;
            const ran = Reflect.apply(target.query, target, args) as Promise<unknown>;
            return fault === 'lost'
              ? ran.then(() => {
                  throw new Error('connection lost after the COMMIT (injected fault)');
                })
              : ran.then(async (answer) => {
                  await sleep(ms);
                  return answer;
                });
          };
        },
      });
    return {
      query: (text: string, values?: unknown[]) => p.query(text, values),
      connect: async () => wrap(await p.connect()),
      get fired() {
        return fired;
      },
    };
  }

  test.each([['lost'], ['slow']] as const)(
    'a COMMIT that lands but whose answer is %s: delivered once, one ledger row, no client held',
    async (fault) => {
      const p = newPool(3);
      const faulty = commitFaulty(p, fault, 800);
      const { ipn, post } = await serve(new PostgresStore({ pool: faulty as unknown as Pool }), {
        storeTimeout: 200,
      });
      let runs = 0;
      const dead: unknown[] = [];
      ipn.on('dead', (event) => dead.push(event));
      ipn.on('successful', async (n, { db }) => {
        runs += 1;
        await db.query(insert, [n.transaction_id, `run ${runs}`]);
      });
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await eventually('delivered', async () => (await entryOf(keyOf(payload)))?.status === 'delivered');
      await sleep(1_200);
      expect(faulty.fired).toBe(true);
      expect(runs).toBe(1);
      expect(await ledgerOf(payload.transaction_id)).toEqual([{ order_id: 'run 1' }]);
      expect((await entryOf(keyOf(payload)))?.status).toBe('delivered');
      expect(dead).toEqual([]);
      await settled(p);
    },
  );

  test('connect() still pending when the attempt times out: the client it later gets goes back, none held', async () => {
    const p = newPool(1); // the clients for db: its only one is held, so the listener's first query waits
    const blocker = await p.connect();
    const split = {
      query: (text: string, values?: unknown[]) => pool.query(text, values),
      connect: () => p.connect(),
    };
    const { ipn, post } = await serve(new PostgresStore({ pool: split as never }), { leaseMs: 300 });
    let runs = 0;
    let timedOut = false;
    ipn.on('successful', async (n, { db }) => {
      runs += 1;
      const run = runs;
      try {
        await db.query(insert, [n.transaction_id, `run ${run}`]);
      } catch (error) {
        if (run === 1) timedOut = true;
        throw error;
      }
    });
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await sleep(600); // past 0.9 * leaseMs: the first attempt is abandoned with its connect() pending
    expect(p.waitingCount).toBeGreaterThan(0);
    blocker.release();
    await eventually('delivered', async () => (await entryOf(keyOf(payload)))?.status === 'delivered');
    expect(runs).toBeGreaterThan(1);
    expect(timedOut).toBe(true);
    expect((await ledgerOf(payload.transaction_id)).length).toBe(1);
    expect(await settled(p)).toEqual({ total: 1, idle: 1, waiting: 0 });
  });

  test('connect() rejecting (the pool refuses): a failed attempt, retried, delivered once, no client held', async () => {
    const p = newPool(3);
    let refusals = 1;
    const refusing = {
      query: (text: string, values?: unknown[]) => p.query(text, values),
      connect: async () => {
        if (refusals-- > 0) throw new Error('connect ECONNREFUSED (injected fault)');
        return p.connect();
      },
    };
    const { ipn, post } = await serve(new PostgresStore({ pool: refusing as never }));
    let runs = 0;
    ipn.on('successful', async (n, { db }) => {
      runs += 1;
      await db.query(insert, [n.transaction_id, `run ${runs}`]);
    });
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await eventually('delivered', async () => (await entryOf(keyOf(payload)))?.status === 'delivered');
    expect(await ledgerOf(payload.transaction_id)).toEqual([{ order_id: 'run 2' }]);
    await settled(p);
  });

  test.each([[1], [5]])(
    'a listener-less-db attempt whose batched delivered mark is slower than storeTimeout (maxAttempts %i): delivered, never dead nor run again',
    async (maxAttempts) => {
      // The listener succeeded (it credits through the pool, not db): commit() has no client and hands the
      // mark to the store's batch. When that batch answers later than storeTimeout, deliver() now counts the
      // attempt failed and settles it 'failed' (or 'dead' at maxAttempts) with a statement of its own, which
      // overtakes the mark still waiting in the batch: the mark then finds no lease and changes nothing.
      // Before 9720547 this was a store failure left to the lease, and the batched mark landed: delivered.
      const p = newPool(3);
      let delayed = false;
      const slowMark = {
        query: async (text: string, values?: unknown[]) => {
          if (!delayed && /SET status = 'delivered'/.test(text)) {
            delayed = true;
            await sleep(600); // the batch stalls (e.g. behind a slow earlier batch: one in flight at a time)
          }
          return p.query(text, values);
        },
        connect: () => p.connect(),
      };
      const { ipn, post } = await serve(new PostgresStore({ pool: slowMark as never }), {
        storeTimeout: 200,
        maxAttempts,
      });
      const dead: unknown[] = [];
      ipn.on('dead', (event) => dead.push(event));
      let runs = 0;
      ipn.on('successful', async (n) => {
        runs += 1;
        await p.query(insert, [n.transaction_id, `run ${runs}`]);
      });
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await eventually('the mark went out', () => delayed);
      await sleep(1_000);
      expect(runs).toBe(1);
      expect(dead).toEqual([]);
      expect((await entryOf(keyOf(payload)))?.status).toBe('delivered');
      await settled(p);
    },
  );
});
