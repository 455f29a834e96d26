import type { Pool, PoolClient } from 'pg';
import { ipnRouter, type IpnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { servedRouters } from '../helpers/servers.js';
import { ledgerSchema } from '../helpers/ledger-schema.js';
import { describeWithService, eventually } from '../helpers/services.js';

jest.setTimeout(30_000);

/** How many deliveries each test makes due together, in one lane. */
const GROUP = 4;

/** Who a listener runs for: its delivery's place in the group (0 takes the first turn), attempt and run. */
interface Role {
  index: number;
  attempt: number;
  /** 1 for the first run of this delivery, 2 for the next (a retry, or a run alone after its group broke). */
  run: number;
}

type Work = (
  n: { transaction_id: string; custom_data: unknown },
  db: PoolClient,
  role: Role,
) => Promise<void>;

describeWithService('PostgreSQL', 'group transactions against hostile listeners', () => {
  const ledger = ledgerSchema('ipn_grouph');
  const { keyOf, entryOf } = ledger;
  const serve = servedRouters();

  // A rejection nobody handles is a failure of the test it happened in.
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => void unhandled.push(reason);
  beforeAll(() => process.on('unhandledRejection', onUnhandled));
  afterAll(() => process.off('unhandledRejection', onUnhandled));
  afterEach(() => expect(unhandled.splice(0)).toEqual([]));

  /** A router grouping every delivery in one lane of GROUP, over `pool`, with fast retries. */
  const router = (pool: Pool, options: { storeTimeoutMs?: number; leaseMs?: number } = {}) =>
    ipnRouter({
      store: new PostgresStore({ pool, groupDeliveries: { lanes: 1, size: GROUP } }),
      delivery: 'at-least-once',
      logger: quiet,
      retryDelayMs: 20,
      recoveryIntervalMs: 50,
      ...options,
    });

  /**
   * Listeners that start together: each waits until every payment's listener has started, so that their
   * first queries through `db` come due together, in the order they started, and form one group.
   */
  const together = (ipn: IpnRouter<any>, work: Work, size = GROUP) => {
    const order = new Map<string, number>();
    const runs = new Map<string, number>();
    let go: () => void = () => {};
    const all = new Promise<void>((resolve) => {
      go = resolve;
    });
    ipn.on('successful', async (n, { db, attempt }) => {
      if (!order.has(n.transaction_id)) order.set(n.transaction_id, order.size);
      const run = (runs.get(n.transaction_id) ?? 0) + 1;
      runs.set(n.transaction_id, run);
      if (order.size === size) go();
      await all;
      await work(n, db as unknown as PoolClient, { index: order.get(n.transaction_id)!, attempt, run });
    });
    return { runs, idOf: (index: number) => [...order].find(([, i]) => i === index)?.[0] };
  };

  const credit = (n: { transaction_id: string; custom_data: unknown }, db: PoolClient) =>
    db.query('INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)', [
      n.transaction_id,
      n.custom_data,
    ]);

  /** Posts `size` payments; resolves them once each is delivered. */
  const payAll = async (post: (body: unknown) => Promise<Response>, size = GROUP) => {
    const payments = Array.from({ length: size }, (_, i) => uniquePayload({ custom_data: `order-${i}` }));
    const statuses = await Promise.all(payments.map(async (payment) => (await post(payment)).status));
    expect(statuses).toEqual(payments.map(() => 200));
    for (const payment of payments) {
      await eventually(
        `${keyOf(payment)} delivered`,
        async () => (await entryOf(keyOf(payment)))?.status === 'delivered',
      );
    }
    return payments;
  };

  /** Every payment has exactly one ledger row and is delivered: the money invariant. */
  const creditedOnce = async (payments: Array<Record<string, unknown>>) => {
    for (const payment of payments) {
      expect(await ledger.ledgerOf(payment.transaction_id)).toHaveLength(1);
      expect((await entryOf(keyOf(payment)))?.status).toBe('delivered');
    }
  };

  /** Every client of `pool` is back in it (none held by a group that never ended). */
  const allBack = (pool: Pool) =>
    eventually('every client back in the pool', () => pool.totalCount === pool.idleCount);

  // A listener can name the group's savepoint through db: a savepoint of the same name set by it hides the
  // group's (its failure then rolls back only to it, and what it wrote before lands), and one it releases
  // takes its writes out of its savepoint. Its first attempt fails after its credit.
  test.each<[string, string]>([
    ['sets a savepoint of the same name', 'SAVEPOINT ipn_kit_group'],
    ['releases it and sets it again', 'RELEASE SAVEPOINT ipn_kit_group; SAVEPOINT ipn_kit_group'],
    ['releases it', 'RELEASE SAVEPOINT ipn_kit_group'],
    ['rolls back to it (its credit undone), and resolves', 'ROLLBACK TO SAVEPOINT ipn_kit_group'],
  ])(
    "a listener that names the group's savepoint through db (%s): each payment still credited once",
    async (how, statement) => {
      const pool = ledger.newPool(8);
      const ipn = router(pool);
      const resolves = how.endsWith('resolves');
      const { idOf } = together(ipn, async (n, db, { index, attempt }) => {
        await credit(n, db);
        if (index !== 1 || attempt > 1) return;
        await db.query(statement).catch(() => {});
        if (!resolves) throw new Error('the listener failed after its credit');
      });
      const { post } = await serve(ipn);
      const payments = await payAll(post);
      await creditedOnce(payments);
      // The others committed on their first attempt, whatever it did.
      for (const payment of payments.filter((p) => p.transaction_id !== idOf(1)))
        expect((await entryOf(keyOf(payment)))?.attempts).toBe(1);
      await allBack(pool);
    },
  );

  /**
   * A pool whose clients send the first statement matching `pattern` into a network gone silent: never
   * answered, until the connection is closed (then it fails as a dropped connection does).
   */
  const stallingPool = (pattern: RegExp) => {
    const pool = ledger.newPool(8);
    let fired = false;
    pool.on('connect', (client: PoolClient) => {
      const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
      Object.assign(client, {
        query: (...args: unknown[]) => {
          const text = args[0];
          if (fired || typeof text !== 'string' || !pattern.test(text)) return query(...args);
          fired = true;
          return new Promise((_resolve, reject) => {
            client.once('end', () => reject(new Error('Connection terminated (injected: a silent network)')));
          });
        },
      });
    });
    return { pool, fired: () => fired };
  };

  // A statement of the group's own that never answers (a network gone silent, a lock it waits for) must not
  // hold the group for ever: its client, and the row locks of the marks made in it, which keep those
  // deliveries from ever being leased again.
  test.each<[string, RegExp]>([
    ['its opening (BEGIN and the savepoint)', /^BEGIN; SAVEPOINT/],
    ["a member's mark (the savepoint released and set again)", /RELEASE SAVEPOINT \w+; SAVEPOINT \w+$/],
    ['its COMMIT (with the last mark)', /\bCOMMIT$/],
  ])(
    'a statement of the group that never answers (%s): the group is given up, each payment credited once, every client back',
    async (_where, pattern) => {
      const { pool, fired } = stallingPool(pattern);
      const ipn = router(pool, { storeTimeoutMs: 1_000, leaseMs: 3_000 });
      together(ipn, async (n, db) => {
        await credit(n, db);
      });
      const { post } = await serve(ipn);
      const payments = await payAll(post);
      expect(fired()).toBe(true);
      await creditedOnce(payments);
      await allBack(pool);
    },
  );

  // The second delivery of a group misbehaves on its first attempt, after its credit; the others credit.
  // Each row: what it does, and how many attempts it takes (a second run alone is not one).
  const late: Array<Promise<unknown>> = [];
  test.each<[string, (db: PoolClient, n: Parameters<Work>[0]) => Promise<void>, number]>([
    [
      'opens a transaction through db (BEGIN, a savepoint) and leaves it open',
      async (db) => {
        await db.query('BEGIN');
        await db.query('SELECT 1');
      },
      1,
    ],
    [
      'sends a COMMIT with no BEGIN through db (refused before it is sent), catches it, and resolves',
      async (db) => {
        await db.query('COMMIT').catch(() => {});
      },
      1,
    ],
    [
      'makes a statement fail and catches it, then resolves (its transaction is aborted)',
      async (db) => {
        await db.query('SELECT 1/0').catch(() => {});
      },
      2,
    ],
    [
      'rejects with a string',
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the odd value is the point
      () => Promise.reject('the order service is down'),
      2,
    ],
    [
      'rejects with undefined',
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the odd value is the point
      () => Promise.reject(undefined),
      2,
    ],
    [
      "sets the group's transaction read only (its own mark fails first, and rolls it back)",
      async (db) => {
        await db.query('SET TRANSACTION READ ONLY');
      },
      2,
    ],
    [
      "sets a search_path that would send the others' writes elsewhere (its own mark fails first)",
      async (db) => {
        await db.query('SET LOCAL search_path TO pg_catalog');
      },
      2,
    ],
  ])(
    'a listener of a group that %s: each payment credited once, the others on their first attempt',
    async (_what, misbehave, attempts) => {
      const pool = ledger.newPool(8);
      const ipn = router(pool);
      const { idOf } = together(ipn, async (n, db, { index, attempt, run }) => {
        await credit(n, db);
        if (index === 1 && attempt === 1 && run === 1) await misbehave(db, n);
      });
      const { post } = await serve(ipn);
      const payments = await payAll(post);
      await creditedOnce(payments);
      for (const payment of payments) {
        expect((await entryOf(keyOf(payment)))?.attempts).toBe(
          payment.transaction_id === idOf(1) ? attempts : 1,
        );
      }
      await allBack(pool);
    },
  );

  test('a listener that sets its isolation level first, as a transaction of its own allows: in a group, where PostgreSQL refuses it, it runs again alone, and is credited once', async () => {
    const pool = ledger.newPool(8);
    const ipn = router(pool);
    const { idOf, runs } = together(ipn, async (n, db, { index }) => {
      if (index === 1) await db.query('SET TRANSACTION ISOLATION LEVEL SERIALIZABLE');
      await credit(n, db);
    });
    const { post } = await serve(ipn);
    const payments = await payAll(post);
    await creditedOnce(payments);
    for (const payment of payments) expect((await entryOf(keyOf(payment)))?.attempts).toBe(1);
    expect(runs.get(idOf(1)!)).toBe(2);
    await allBack(pool);
  });

  test('a listener that writes through db once it resolved, while its group goes on (the next delivery has the turn) and after the COMMIT: both writes are refused', async () => {
    const pool = ledger.newPool(8);
    const ipn = router(pool);
    let again: (() => Promise<unknown>) | undefined;
    const { idOf } = together(ipn, async (n, db, { index, attempt }) => {
      await credit(n, db);
      if (index === 1 && attempt === 1) again = () => credit(n, db);
      // Its credit answered: this one has the turn, so the second one is marked, waiting for the COMMIT.
      if (index === 2) late.push(again!());
    });
    const { post } = await serve(ipn);
    const payments = await payAll(post);
    late.push(again!());
    const refusals = await Promise.all(late.splice(0).map((write) => write.then(() => 'landed', String)));
    expect(refusals).toEqual([expect.stringMatching(/has ended/), expect.stringMatching(/has ended/)]);
    await creditedOnce(payments);
    expect((await entryOf(keyOf(payments.find((p) => p.transaction_id === idOf(1))!)))?.attempts).toBe(1);
    await allBack(pool);
  });

  test('a listener that runs past its time (90% of leaseMs), then credits again and rejects: the late credit is refused, the group goes on without it, and each payment is credited once', async () => {
    const pool = ledger.newPool(8);
    const ipn = router(pool, { leaseMs: 1_000 });
    const { idOf } = together(ipn, async (n, db, { index, attempt }) => {
      await credit(n, db);
      // The last of its group: the others, marked, wait for it (none waits for a turn behind it, which would
      // run out of its own time too).
      if (index !== GROUP - 1 || attempt > 1) return;
      await new Promise((resolve) => setTimeout(resolve, 1_100));
      late.push(credit(n, db));
      throw new Error('rejected long after the attempt ended');
    });
    const { post } = await serve(ipn);
    const payments = await payAll(post);
    await eventually('the late credit was tried', () => late.length === 1);
    expect(await Promise.all(late.splice(0).map((write) => write.then(() => 'landed', String)))).toEqual([
      expect.stringMatching(/has ended/),
    ]);
    await creditedOnce(payments);
    for (const payment of payments) {
      expect((await entryOf(keyOf(payment)))?.attempts).toBe(
        payment.transaction_id === idOf(GROUP - 1) ? 2 : 1,
      );
    }
    await allBack(pool);
  });

  test('the only delivery of its group leaves a query that never answers running, not awaited: once its commit is given up, its client is closed, and it is credited once', async () => {
    const pool = ledger.newPool(8);
    const ipn = router(pool, { storeTimeoutMs: 1_000 });
    const sleep = `SELECT pg_sleep(30) /* ${ledger.schema} unawaited */`;
    try {
      const { runs } = together(
        ipn,
        async (n, db, { run }) => {
          await credit(n, db);
          if (run === 1) void db.query(sleep).catch(() => {});
        },
        1,
      );
      const { post } = await serve(ipn);
      const payments = await payAll(post, 1);
      await creditedOnce(payments);
      expect([...runs.values()]).toEqual([2]);
      await allBack(pool);
    } finally {
      await ledger
        .pool()
        .query(
          'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1 AND pid <> pg_backend_pid()',
          [sleep],
        );
    }
  });

  // Another instance takes the entry while the delivery is in its group (its lease ran out): the mark finds
  // the lease lost; first in its group (the others after it commit), or last (its mark goes with the COMMIT).
  test.each<[string, number]>([
    ['first', 0],
    ['last', GROUP - 1],
  ])(
    'a delivery whose lease is lost while in its group (%s in it): its credit rolls back, the others commit, and the holder of the lease credits it once',
    async (_where, culprit) => {
      const pool = ledger.newPool(8);
      const ipn = router(pool, { leaseMs: 1_000 });
      const { idOf } = together(ipn, async (n, db, { index, attempt }) => {
        await credit(n, db);
        if (index === culprit && attempt === 1) {
          await ledger
            .pool()
            .query("UPDATE ipn_inbox SET lease_id = 'another-instance' WHERE transaction_id = $1", [
              n.transaction_id,
            ]);
        }
      });
      const { post } = await serve(ipn);
      const payments = await payAll(post);
      await creditedOnce(payments);
      for (const payment of payments) {
        const attempts = payment.transaction_id === idOf(culprit) ? 2 : 1;
        expect((await entryOf(keyOf(payment)))?.attempts).toBe(attempts);
      }
      await allBack(pool);
    },
  );

  // Two instances, each with its groups, hold one key in turn: the first's lease ran out, the second leased
  // it. Both write in a group of their own; whichever commits first, only the holder of the lease lands.
  test.each([['the holder of the lease'], ['the one whose lease ran out']])(
    'one key in two groups of two stores (%s commits first): only the lease holder’s write lands, delivered once',
    async (first) => {
      const stores = [ledger.newPool(2), ledger.newPool(2)].map(
        (pool) => new PostgresStore({ pool, groupDeliveries: { lanes: 1, size: GROUP } }),
      );
      const [stale, holder] = stores as [PostgresStore<Pool>, PostgresStore<Pool>];
      const payment = uniquePayload();
      const key = keyOf(payment);
      await stale.receive(key, payment, { id: 'lease-stale', ms: 1 });
      await eventually('the first lease ran out, and the other store leased the entry', async () =>
        (await holder.lease({ id: 'lease-holder', ms: 60_000 }, 100)).some((entry) => entry.key === key),
      );
      const txs = [
        (await stale.begin(key, 'lease-stale'))!,
        (await holder.begin(key, 'lease-holder'))!,
      ] as const;
      for (const [i, tx] of txs.entries()) {
        await tx.db!.query('INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)', [
          payment.transaction_id,
          i === 0 ? 'stale' : 'holder',
        ]);
      }
      const [staleTx, holderTx] = txs;
      if (first === 'the holder of the lease') {
        expect(await holderTx.commit()).toBe('delivered');
        expect(await staleTx.commit()).toBe('lost');
      } else {
        expect(await staleTx.commit()).toBe('lost');
        expect(await holderTx.commit()).toBe('delivered');
      }
      expect(await ledger.ledgerOf(payment.transaction_id)).toEqual([{ order_id: 'holder' }]);
      expect((await entryOf(key))?.status).toBe('delivered');
    },
  );

  test('a group of 60 deliveries due together: each credited once, on its first attempt, and every client back', async () => {
    const size = 60;
    const pool = ledger.newPool(8);
    const ipn = ipnRouter({
      store: new PostgresStore({ pool, groupDeliveries: { lanes: 1, size } }),
      delivery: 'at-least-once',
      logger: quiet,
      retryDelayMs: 20,
      recoveryIntervalMs: 50,
    });
    together(ipn, async (n, db) => void (await credit(n, db)), size);
    const { post } = await serve(ipn);
    const payments = await payAll(post, size);
    await creditedOnce(payments);
    const { rows } = await pool.query(
      'SELECT count(*)::int AS n FROM ipn_inbox WHERE key = ANY($1) AND attempts = 1',
      [payments.map(keyOf)],
    );
    expect(rows[0].n).toBe(size);
    await allBack(pool);
  });

  test('the router is closed while a group is open: every client goes back, nothing is delivered without its row, and a router started again credits each once', async () => {
    const pool = ledger.newPool(8);
    const ipn = router(pool, { leaseMs: 1_500 });
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let holding = false;
    together(ipn, async (n, db, { index, attempt }) => {
      await credit(n, db);
      if (index === 1 && attempt === 1) {
        holding = true;
        await held; // past close()
      }
    });
    const { post } = await serve(ipn);
    const payments = Array.from({ length: GROUP }, (_, i) => uniquePayload({ custom_data: `order-${i}` }));
    await Promise.all(payments.map((payment) => post(payment)));
    await eventually('the second delivery holds its group', () => holding);
    await ipn.close({ timeoutMs: 50 });
    release();
    await allBack(pool);
    for (const payment of payments) {
      const rows = await ledger.ledgerOf(payment.transaction_id);
      const delivered = (await entryOf(keyOf(payment)))?.status === 'delivered';
      expect(rows).toHaveLength(delivered ? 1 : 0);
    }
    const again = router(pool, { leaseMs: 1_500 });
    again.on('successful', async (n, { db }) => void (await credit(n, db)));
    await serve(again);
    for (const payment of payments) {
      await eventually(
        `${keyOf(payment)} delivered`,
        async () => (await entryOf(keyOf(payment)))?.status === 'delivered',
      );
    }
    await creditedOnce(payments);
    await allBack(pool);
  });
});
