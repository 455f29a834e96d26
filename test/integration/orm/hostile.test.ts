/**
 * A hostile review of the ORM adapters (ipn-kit/orm) against the real PostgreSQL: each ORM's store through
 * the ORM alone under a burst, a listener that ends the ORM's transaction with a raw COMMIT, and a Prisma
 * interactive transaction whose timeout runs out while a listener is still running.
 */
import { ipnRouter, type IpnNotification } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { prismaTransactions } from 'ipn-kit/orm';
import { sql as drizzleSql } from 'drizzle-orm';
import { sql as kyselySql, type Transaction as KyselyTransaction } from 'kysely';
import type { Knex } from 'knex';
import type { Transaction as SequelizeTransaction } from 'sequelize';
import type { EntityManager } from 'typeorm';
import type { OpenedOrm, OrmFixture } from '../../helpers/orm-scenarios.js';
import { ledgerSchema } from '../../helpers/ledger-schema.js';
import { uniquePayload } from '../../helpers/payloads.js';
import { quiet } from '../../helpers/quiet-logger.js';
import { servedRouters } from '../../helpers/servers.js';
import { describeWithService, eventually } from '../../helpers/services.js';

jest.setTimeout(120_000);

type Any = any;

/** Each ORM, with a raw `COMMIT` sent through its transaction object the way a listener could send it. */
const ORMS: Array<[string, string, (tx: Any, statement?: string) => Promise<unknown>]> = [
  ['Knex', '../../fixtures/orm/knex.js', (tx: Knex.Transaction, statement = 'COMMIT') => tx.raw(statement)],
  [
    'Sequelize',
    '../../fixtures/orm/sequelize.js',
    (tx: SequelizeTransaction, statement = 'COMMIT') =>
      (tx as Any).sequelize.query(statement, { transaction: tx }) as Promise<unknown>,
  ],
  [
    'TypeORM',
    '../../fixtures/orm/typeorm.js',
    (tx: EntityManager, statement = 'COMMIT') => tx.query(statement),
  ],
  [
    'Drizzle',
    '../../fixtures/orm/drizzle.js',
    (tx: Any, statement = 'COMMIT') => tx.execute(drizzleSql.raw(statement)),
  ],
  [
    'Kysely',
    '../../fixtures/orm/kysely.js',
    (tx: KyselyTransaction<Any>, statement = 'COMMIT') => kyselySql.raw(statement).execute(tx),
  ],
  [
    'Prisma',
    '../../fixtures/orm/prisma.js',
    (tx: Any, statement = 'COMMIT') => tx.$executeRawUnsafe(statement) as Promise<unknown>,
  ],
];

describe.each(ORMS)('hostile: %s', (name, path, raw) => {
  describeWithService('PostgreSQL', `${name} under attack`, () => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { fixture } = require(path) as { fixture: OrmFixture<unknown> };
    const ledger = ledgerSchema(`ipn_hostile_${name.toLowerCase()}`, [
      'CREATE TABLE orders (id text PRIMARY KEY, paid integer NOT NULL DEFAULT 0)',
      // A COMMIT that takes the seconds inserted (a deferred trigger, as an audit or outbox trigger may be):
      // in flight when an attempt is abandoned at 90% of leaseMs.
      'CREATE TABLE slow_commit (seconds numeric)',
      `CREATE FUNCTION slow_commit_wait() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN PERFORM pg_sleep(NEW.seconds); RETURN NULL; END $$`,
      `CREATE CONSTRAINT TRIGGER slow_commit_wait AFTER INSERT ON slow_commit DEFERRABLE INITIALLY DEFERRED
        FOR EACH ROW EXECUTE FUNCTION slow_commit_wait()`,
    ]);
    let orm: OpenedOrm<unknown>;
    beforeAll(async () => {
      orm = await fixture.open(ledger.schema);
    });
    afterAll(async () => {
      await orm?.close();
    });
    const serve = servedRouters();
    const rows = async (id: unknown): Promise<number> => (await ledger.ledgerOf(id)).length;
    /** Waits until the entry `key` is dead or delivered (`ms`: how long it may take). */
    const settled = (key: string, ms?: number) =>
      eventually(
        'settled',
        async () => ['dead', 'delivered'].includes(String((await ledger.entryOf(key))?.status)),
        ms,
      );
    /** A promise a listener awaits to hang past leaseMs, and its release (for the test's `finally`). */
    const gate = () => {
      let release!: () => void;
      const hung = new Promise<void>((resolve) => (release = resolve));
      return { hung, release };
    };
    /**
     * Every attempt credits; `payload`'s first attempt then runs `first` (through its `tx`): how a listener
     * ends or outlives its transaction after its credit.
     */
    const onFirstAttempt = (
      ipn: ReturnType<typeof ipnRouter>,
      payload: Record<string, unknown>,
      first: (n: IpnNotification, tx: Any) => Promise<void>,
    ) =>
      ipn.on('successful', async (n: IpnNotification, { tx, attempt }) => {
        await orm.credit(tx, n);
        if (attempt > 1 || n.transaction_id !== payload.transaction_id) return;
        await first(n, tx);
      });
    const router = (withoutPool: boolean, times: { leaseMs?: number; storeTimeoutMs?: number } = {}) =>
      ipnRouter({
        store: withoutPool
          ? new PostgresStore({ transactions: orm.transactions })
          : new PostgresStore({ pool: ledger.pool(), transactions: orm.transactions }),
        delivery: 'at-least-once',
        logger: quiet,
        retryDelayMs: 20,
        recoveryIntervalMs: 50,
        ...times,
      });

    test('through the ORM alone: 50 notifications at once, each posted twice, a fifth failing once: one row each, all delivered', async () => {
      const ipn = router(true);
      ipn.on('successful', async (n: IpnNotification, { tx, attempt }) => {
        await orm.credit(tx, n);
        if (attempt === 1 && Number(n.amount) % 5 === 0) throw new Error('not yet');
      });
      const { post } = await serve(ipn);
      const payloads = Array.from({ length: 50 }, (_, i) => uniquePayload({ amount: 100 + i }));
      const answers = await Promise.all([...payloads, ...payloads].map((payload) => post(payload)));
      expect(answers.map((answer) => answer.status)).toEqual(answers.map(() => 200));
      await eventually('all delivered', async () => {
        const { rows: statuses } = await ledger
          .pool()
          .query(
            "SELECT count(*)::int AS n FROM ipn_inbox WHERE status = 'delivered' AND transaction_id = ANY($1)",
            [payloads.map((payload) => payload.transaction_id)],
          );
        return statuses[0].n === 50;
      });
      for (const payload of payloads) expect(await rows(payload.transaction_id)).toBe(1);
    });

    test('through the ORM alone, the operator API and the expectations read what they read through pg', async () => {
      const viaOrm = new PostgresStore({ transactions: orm.transactions });
      const viaPg = new PostgresStore({ pool: ledger.pool() });
      await viaOrm.migrate();
      const ipn = router(true);
      ipn.on('successful', async (n: IpnNotification, { tx }) => orm.credit(tx, n));
      const { post } = await serve(ipn);
      const payload = uniquePayload({ custom_data: 'Ordre $1 ?| $$ 50% ' });
      expect((await post(payload)).status).toBe(200);
      const key = ledger.keyOf(payload);
      await eventually('delivered', async () => (await ledger.entryOf(key))?.status === 'delivered');
      await ipn.close();

      const since = new Date(Date.now() - 60_000);
      const listing = {
        transactionId: String(payload.transaction_id),
        customDataContains: 'ordre $1 ?|',
        receivedFrom: since,
        receivedBefore: new Date(Date.now() + 60_000),
        status: 'delivered' as const,
      };
      expect(await viaOrm.get(key)).toEqual(await viaPg.get(key));
      expect(await viaOrm.list(listing)).toEqual(await viaPg.list(listing));
      expect(await viaOrm.list(listing)).toHaveLength(1);
      expect(await viaOrm.countByStatus(since)).toEqual(await viaPg.countByStatus(since));
      expect(await viaOrm.purge(new Date(0))).toBe(0);
      expect(await viaOrm.replay(key)).toBe(true);
      expect((await viaPg.get(key))?.status).toBe('received');

      const now = Date.now();
      const expectation = {
        transactionId: `exp-${now}-${name}`,
        customData: "c'$1?",
        amount: 1234.5,
        expectedAt: now,
        dueAt: now - 1,
        attempts: 0,
      };
      await viaOrm.expectations.put(expectation);
      expect(await viaOrm.expectations.get(expectation.transactionId)).toEqual(expectation);
      expect(await viaOrm.expectations.get(expectation.transactionId)).toEqual(
        await viaPg.expectations.get(expectation.transactionId),
      );
      const due = await viaOrm.expectations.takeDue(now, now + 60_000, 10);
      expect(due).toEqual([{ ...expectation, dueAt: now + 60_000, attempts: 1 }]);
      expect(await viaOrm.expectations.lockSweep('a', 60_000)).toBe(true);
      expect(await viaOrm.expectations.lockSweep('b', 60_000)).toBe(false);
      await viaOrm.expectations.unlockSweep('a');
      expect(await viaOrm.expectations.lockSweep('b', 60_000)).toBe(true);
      await viaOrm.expectations.unlockSweep('b');
      await viaOrm.expectations.delete(expectation.transactionId);
      expect(await viaPg.expectations.get(expectation.transactionId)).toBeUndefined();
    });

    // The pg path closes an abandoned attempt's connection at once (rolling back); the ORM path waits for its
    // listeners to settle first. A listener that waits on a lock its own transaction holds (an update through
    // the app's other connection of a row it updated through tx) never settles: the transaction, its locks
    // and its connection are held for good, and every later payment of that order waits behind them.
    // Opt-in (IPN_HOSTILE_HANG=1): run alone with -t "abandoned attempt"; in the whole file, the attempt it
    // leaves hung kept the suite from ending (not yet understood).
    (process.env.IPN_HOSTILE_HANG ? test.failing : test.skip)(
      "an abandoned attempt whose listener waits on its own transaction's lock: the transaction still ends",
      async () => {
        const order = `order-${name}`;
        await ledger.pool().query('INSERT INTO orders (id) VALUES ($1)', [order]);
        const other = ledger.newPool(1);
        let outerSettled = false;
        const ipn = router(false, { leaseMs: 1_000 });
        ipn.on('successful', async (n: IpnNotification, { tx, attempt }) => {
          await orm.credit(tx, n);
          if (attempt === 1) {
            await raw(tx, `UPDATE orders SET paid = paid + 1 WHERE id = '${order}'`);
            // Through another connection: waits for the delivery transaction's row lock.
            await other.query('UPDATE orders SET paid = paid + 1 WHERE id = $1', [order]);
            outerSettled = true;
          }
        });
        const { post } = await serve(ipn);
        const payload = uniquePayload();
        try {
          expect((await post(payload)).status).toBe(200);
          await eventually(
            'the abandoned transaction rolled back, so the other update went through',
            () => outerSettled,
          );
          await eventually(
            'delivered',
            async () => (await ledger.entryOf(ledger.keyOf(payload)))?.status === 'delivered',
          );
          expect(await rows(payload.transaction_id)).toBe(1);
        } finally {
          // Frees what the hung attempt holds, so that the schema can be dropped.
          await ledger.pool().query(
            `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE state LIKE 'idle in transaction%' AND query LIKE '%UPDATE orders SET paid%' AND pid <> pg_backend_pid()`,
          );
        }
      },
    );

    // A raw COMMIT through the ORM's transaction ends it early: the listener's credit commits on its own,
    // then the listener fails. The pg path refuses such a statement (postgres-transaction.ts, CONTROL); the
    // ORM paths cannot, so the failed attempt's rollback asks PostgreSQL where the transaction stands
    // (txid_status): committed, the entry is kept dead at once. Retried, it was credited a second time.
    /**
     * Posts one payment whose listener is `listener` (for this payment; an entry an earlier test left due is
     * taken up by this router too): kept dead after its one attempt, with `credited` ledger rows (one unless
     * said). Resolves its last error.
     */
    const deadAtOnce = async (listener: (n: IpnNotification, tx: Any) => Promise<void>, credited = 1) => {
      const ipn = router(false);
      const payload = uniquePayload();
      const key = ledger.keyOf(payload);
      const dead: Array<{ attempts: number; lastError: string }> = [];
      ipn.on('dead', (event) => void (event.key === key && dead.push(event)));
      let attempts = 0;
      ipn.on('successful', async (n: IpnNotification, { tx }) => {
        if (n.transaction_id === payload.transaction_id) attempts += 1;
        await listener(n, tx);
      });
      const { post } = await serve(ipn);
      expect((await post(payload)).status).toBe(200);
      await eventually('dead', () => dead.length > 0); // emitted once the entry is dead
      expect(await rows(payload.transaction_id)).toBe(credited);
      expect(attempts).toBe(1);
      const entry = await ledger.entryOf(key);
      expect(entry).toMatchObject({ status: 'dead', attempts: 1 });
      expect(dead).toEqual([expect.objectContaining({ attempts: 1, lastError: entry?.last_error })]);
      return entry?.last_error;
    };

    test('a listener that sends a raw COMMIT through tx, then throws: its credit landed, so it is dead, never credited twice', async () => {
      const lastError = await deadAtOnce(async (n, tx) => {
        await orm.credit(tx, n);
        await raw(tx).catch(() => {});
        throw new Error('the order service is down');
      });
      expect(lastError).toMatch(
        /^a listener of 'successful' failed: the order service is down; a listener ended the delivery transaction of .+ itself through tx \(a raw COMMIT, in \w+\), so its writes landed, or may have, outside it: neither retried/,
      );
    });

    // The same credit committed by a raw COMMIT, then a raw BEGIN (the session is in a transaction again),
    // whose next statement fails: the listener throws that error. The status could not be asked in that
    // aborted transaction, so the attempt was taken for a plain failure and retried: a second credit.
    test('a raw COMMIT, a raw BEGIN, then a statement that fails and the listener throws its error: dead, never credited twice', async () => {
      const lastError = await deadAtOnce(async (n, tx) => {
        await orm.credit(tx, n);
        await raw(tx);
        await raw(tx, 'BEGIN');
        await raw(tx, 'SELECT 1 / 0');
      });
      expect(lastError).toMatch(
        /a listener ended the delivery transaction of .+ itself through tx \(a raw COMMIT/,
      );
    });

    // The check for a landed commit keeps no plain failure dead, and misses no COMMIT a BEGIN followed.
    test.each<[string, 'retried' | 'dead', string[]]>([
      ['a raw ROLLBACK', 'retried', ['ROLLBACK']],
      ['a savepoint rolled back to', 'retried', ['SAVEPOINT mine', 'ROLLBACK TO SAVEPOINT mine']],
      ['a raw ROLLBACK, a raw BEGIN', 'retried', ['ROLLBACK', 'BEGIN']],
      ['a raw COMMIT, a raw BEGIN', 'dead', ['COMMIT', 'BEGIN']],
      ['COMMIT AND CHAIN', 'dead', ['COMMIT AND CHAIN']],
    ])(
      'a listener that credits, sends %s through tx, then throws: %s, one row',
      async (_what, expected, statements) => {
        const ipn = router(false);
        const payload = uniquePayload();
        onFirstAttempt(ipn, payload, async (_n, tx) => {
          for (const statement of statements) await raw(tx, statement);
          throw new Error('the order service is down');
        });
        const { post } = await serve(ipn);
        expect((await post(payload)).status).toBe(200);
        const status = expected === 'dead' ? 'dead' : 'delivered';
        const key = ledger.keyOf(payload);
        await eventually(status, async () => (await ledger.entryOf(key))?.status === status);
        expect(await ledger.entryOf(key)).toMatchObject({ attempts: expected === 'dead' ? 1 : 2 });
        expect(await rows(payload.transaction_id)).toBe(1);
      },
    );

    // After a raw ROLLBACK the session is in autocommit, so a credit written after it lands at once. A
    // listener that then resolves (it retried its credit, say) was retried, and credited a second time: now
    // the mark, which runs only outside the transaction after a ROLLBACK, keeps the entry dead.
    test('a raw ROLLBACK, then the credit, then the listener resolves: dead, never credited twice', async () => {
      const lastError = await deadAtOnce(async (n, tx) => {
        await raw(tx, 'ROLLBACK');
        await orm.credit(tx, n);
      });
      expect(lastError).toMatch(
        /^a listener ended the delivery transaction of .+ itself through tx \(a raw ROLLBACK, then resolved \(or a COMMIT after a statement that failed, which PostgreSQL makes a ROLLBACK\): anything it wrote after it outside a transaction committed on its own, in \w+\), so its writes landed, or may have/,
      );
    });

    // Open (found in review, not fixed): a raw ROLLBACK, the credit (it lands at once), then a transaction of
    // the listener's own (a raw BEGIN) in which a statement fails that it catches, and the listener resolves:
    // the mark, its RESET first, fails in that aborted transaction, so the commit fails as a plain failure and
    // the attempt is retried: the credit again on every attempt (8 rows), though the listener resolved after
    // its ROLLBACK. Once the ORM has rolled back, the delivery's transaction stands aborted either way; only
    // another connection, asked while the ORM's transaction is still open, could tell (txid_status: 'aborted'
    // already, or 'in progress'), and the pool it would wait on may be the one the ORM holds.
    (name === 'Knex' ? test.failing : test.skip)(
      'a raw ROLLBACK, the credit, a raw BEGIN, a statement that fails and is caught, then the listener resolves: dead, never credited twice',
      async () => {
        const lastError = await deadAtOnce(async (n, tx) => {
          await raw(tx, 'ROLLBACK');
          await orm.credit(tx, n);
          await raw(tx, 'BEGIN');
          await raw(tx, 'SELECT 1 / 0').catch(() => {});
        });
        expect(lastError).toMatch(/\(a raw ROLLBACK, then resolved/);
      },
    );

    // The same with a raw COMMIT after the credit: a listener that throws its error instead is kept dead (the
    // failed attempt's rollback asks txid_status once the ORM's transaction has ended, test above); one that
    // resolves took the commit path, which never asked: retried, the credit again on every attempt.
    test('the credit, a raw COMMIT, a raw BEGIN, a statement that fails and is caught, then the listener resolves: dead, never credited twice', async () => {
      const lastError = await deadAtOnce(async (n, tx) => {
        await orm.credit(tx, n);
        await raw(tx);
        await raw(tx, 'BEGIN');
        await raw(tx, 'SELECT 1 / 0').catch(() => {});
      });
      expect(lastError).toMatch(/itself through tx \(a raw COMMIT, in \w+\)/);
    });

    // Open (found in review, not fixed): the same credit after a raw ROLLBACK, then a throw, is retried, and
    // credited a second time. Kept: a listener that rolls back in its own error handling, then throws, is a
    // common pattern whose retry is right; nothing about the transaction's id tells whether a write followed.
    (name === 'Knex' ? test.failing : test.skip)(
      'a raw ROLLBACK, then the credit, then the listener throws: one row',
      async () => {
        const ipn = router(false);
        const payload = uniquePayload();
        const key = ledger.keyOf(payload);
        ipn.on('successful', async (n: IpnNotification, { tx, attempt }) => {
          if (attempt === 1 && n.transaction_id === payload.transaction_id) {
            await raw(tx, 'ROLLBACK');
            await orm.credit(tx, n);
            throw new Error('the order service is down');
          }
          await orm.credit(tx, n);
        });
        const { post } = await serve(ipn);
        expect((await post(payload)).status).toBe(200);
        await settled(key);
        expect(await rows(payload.transaction_id)).toBe(1);
      },
    );

    // The check cannot go through tx once its connection is gone: asked on the store's own connection after.
    (name === 'Knex' ? test : test.skip)(
      "a raw COMMIT, then the transaction's connection is lost, then a throw: dead, one row",
      async () => {
        const ipn = router(false);
        const payload = uniquePayload();
        const key = ledger.keyOf(payload);
        onFirstAttempt(ipn, payload, async (_n, tx) => {
          await raw(tx);
          const { rows: pids } = (await raw(tx, 'SELECT pg_backend_pid() AS pid')) as Any;
          await ledger.pool().query('SELECT pg_terminate_backend($1)', [pids[0].pid]);
          throw new Error('the order service is down');
        });
        const { post } = await serve(ipn);
        expect((await post(payload)).status).toBe(200);
        await settled(key);
        expect(await rows(payload.transaction_id)).toBe(1);
        expect(await ledger.entryOf(key)).toMatchObject({ status: 'dead', attempts: 1 });
      },
    );

    // The check queues behind a query the listener left running on tx, and the rollback outruns
    // storeTimeoutMs: the attempt ends as the store's failure. Its { landed }, come too late to be read, left
    // the entry to be taken up again once its lease ran out: a second credit. Now settled dead when it comes.
    (name === 'Knex' ? test : test.skip)(
      'a raw COMMIT, a query left running on tx, then a throw: the rollback outruns storeTimeoutMs, still dead, one row',
      async () => {
        const ipn = router(false, { leaseMs: 3_000, storeTimeoutMs: 300 });
        const payload = uniquePayload();
        const key = ledger.keyOf(payload);
        onFirstAttempt(ipn, payload, async (_n, tx) => {
          await raw(tx);
          void raw(tx, 'SELECT pg_sleep(1)').catch(() => {});
          throw new Error('the order service is down');
        });
        const { post } = await serve(ipn);
        expect((await post(payload)).status).toBe(200);
        await settled(key, 10_000);
        expect(await rows(payload.transaction_id)).toBe(1);
        expect(await ledger.entryOf(key)).toMatchObject({ status: 'dead' });
      },
    );

    // A raw COMMIT, then the listener outlives leaseMs: the attempt is abandoned while it still runs, and
    // was retried without asking whether the transaction had committed: a second credit. Now the
    // transaction's status is asked on the store's pool at once (the listener's later uses of tx refused).
    // The guard beside it: without the COMMIT the transaction is still open when asked, and the abandoned
    // attempt is retried as before.
    test.each([
      ['a raw COMMIT, then the listener hangs past leaseMs: abandoned, dead, never credited twice', true],
      ['the listener hangs past leaseMs: abandoned, rolled back and retried, one row', false],
    ])('%s', async (_title, commits) => {
      const ipn = router(false, { leaseMs: 1_000 });
      const payload = uniquePayload();
      const key = ledger.keyOf(payload);
      const { hung, release } = gate();
      onFirstAttempt(ipn, payload, async (_n, tx) => {
        if (commits) await raw(tx);
        await hung;
      });
      const { post } = await serve(ipn);
      try {
        expect((await post(payload)).status).toBe(200);
        await settled(key, 10_000);
        const entry = await ledger.entryOf(key);
        expect(entry).toMatchObject(
          commits ? { status: 'dead', attempts: 1 } : { status: 'delivered', attempts: 2 },
        );
        if (commits) {
          expect(entry?.last_error).toMatch(
            /did not settle within 900 ms \(leaseMs\); a listener ended the delivery transaction of .+ itself through tx \(a raw COMMIT/,
          );
        }
        expect(await rows(payload.transaction_id)).toBe(1);
      } finally {
        release();
      }
    });

    // Found in review of the abandoned attempt's check (f7212a4): the COMMIT a listener sent through tx
    // before the attempt was abandoned, still running when txid_status is asked (a deferred trigger; a
    // COMMIT queued in the driver behind a slow query of the listener's), read 'in progress': the attempt
    // was retried, and the COMMIT then landed: a second credit. Now the ORM's transaction's end is waited
    // for, and the status asked again. `seconds`: how long the COMMIT runs; sent 800 ms before the
    // abandonment at 90% of leaseMs.
    const slowCommit = async (leaseMs: number, seconds: number) => {
      const ipn = router(false, { leaseMs });
      const payload = uniquePayload();
      const key = ledger.keyOf(payload);
      const { hung, release } = gate();
      let committed = false;
      onFirstAttempt(ipn, payload, async (_n, tx) => {
        await raw(tx, `INSERT INTO slow_commit VALUES (${seconds})`);
        await new Promise((resolve) => setTimeout(resolve, leaseMs * 0.9 - 800));
        await raw(tx); // still running at the abandonment
        committed = true;
        await hung;
      });
      const { post } = await serve(ipn);
      try {
        expect((await post(payload)).status).toBe(200);
        await eventually(
          'settled, and the COMMIT ended',
          async () =>
            committed && ['dead', 'delivered'].includes(String((await ledger.entryOf(key))?.status)),
          leaseMs + 10_000,
        );
        await new Promise((resolve) => setTimeout(resolve, 500)); // a retry under way ends
        expect(await rows(payload.transaction_id)).toBe(1);
        return await ledger.entryOf(key);
      } finally {
        release();
      }
    };

    test('a raw COMMIT still running when the attempt is abandoned at leaseMs, ending before the lease does: dead, never credited twice', async () => {
      const entry = await slowCommit(8_000, 1.2);
      expect(entry).toMatchObject({ status: 'dead', attempts: 1 });
      expect(entry?.last_error).toMatch(
        /\(leaseMs\); a listener ended the delivery transaction .+ \(a raw COMMIT/,
      );
    });

    // The guard beside it: a listener hung in its own query on tx (a lock wait) past leaseMs. The ORM's
    // ROLLBACK waits behind that query, and so does the abandoned attempt's second ask; the entry is taken
    // up again once its lease runs out, and credited once.
    test('a listener hung in a query on tx past leaseMs: retried, one row', async () => {
      const ipn = router(false, { leaseMs: 1_000, storeTimeoutMs: 3_000 });
      const payload = uniquePayload();
      const key = ledger.keyOf(payload);
      onFirstAttempt(ipn, payload, async (_n, tx) => {
        await raw(tx, 'SELECT pg_sleep(2)');
      });
      const { post } = await serve(ipn);
      expect((await post(payload)).status).toBe(200);
      await eventually('delivered', async () => (await ledger.entryOf(key))?.status === 'delivered', 10_000);
      await new Promise((resolve) => setTimeout(resolve, 1_500)); // the first attempt's query ends
      expect(await rows(payload.transaction_id)).toBe(1);
      expect(await ledger.entryOf(key)).toMatchObject({ status: 'delivered' });
    });

    // Open (found in review, not fixed): the same COMMIT still running when the lease runs out. The entry is
    // taken up again and credited, and the first COMMIT lands as well; its `{ landed }` comes after another
    // attempt holds the entry. Nothing asked before the lease's end can tell; the next attempt would have to
    // ask about this one's transaction before its listeners run.
    (name === 'Knex' ? test.failing : test.skip)(
      'a raw COMMIT still running when the attempt is abandoned at leaseMs, ending after the lease does: never credited twice',
      async () => {
        await slowCommit(1_000, 1.5);
      },
    );

    // Open (found in review, not fixed): a raw COMMIT, then the listener hangs past leaseMs holding the
    // store's pool (its only client, as a partner's other work on a shared pool may): the abandoned
    // attempt's txid_status waits for a client past storeTimeoutMs, and its `{ landed }` (the late path)
    // comes after the lease ran out, behind recovery's lease() in the pool's queue: the entry is taken up
    // again and credited a second time. Only 10% of leaseMs is left after the abandonment.
    (name === 'Knex' ? test.failing : test.skip)(
      'a raw COMMIT, then the listener hangs past leaseMs holding the store pool: never credited twice',
      async () => {
        const pool = ledger.newPool(1);
        const ipn = ipnRouter({
          store: new PostgresStore({ pool, transactions: orm.transactions }),
          delivery: 'at-least-once',
          logger: quiet,
          retryDelayMs: 20,
          recoveryIntervalMs: 50,
          leaseMs: 1_000,
          storeTimeoutMs: 300,
        });
        const payload = uniquePayload();
        const key = ledger.keyOf(payload);
        const { hung, release } = gate();
        onFirstAttempt(ipn, payload, async (_n, tx) => {
          await raw(tx);
          void pool.query('SELECT pg_sleep(2)').catch(() => {}); // the pool's only client, for 2 s
          await hung;
        });
        const { post } = await serve(ipn);
        try {
          expect((await post(payload)).status).toBe(200);
          await settled(key, 10_000);
          await new Promise((resolve) => setTimeout(resolve, 500)); // a retry under way ends
          expect(await rows(payload.transaction_id)).toBe(1);
        } finally {
          release();
        }
      },
    );

    // Open (found in review, not fixed): a raw ROLLBACK (e51917e keeps it dead when the listener resolves),
    // then the credit, committed on its own (autocommit), then the listener hangs past leaseMs. The
    // abandoned attempt reads 'aborted', which the ORM's own ROLLBACK reads as well, and is retried: a
    // second credit. As with a throw after the same ROLLBACK (above), the transaction's id cannot tell.
    (name === 'Knex' ? test.failing : test.skip)(
      'a raw ROLLBACK, then the credit, then the listener hangs past leaseMs: never credited twice',
      async () => {
        const ipn = router(false, { leaseMs: 1_000 });
        const payload = uniquePayload();
        const key = ledger.keyOf(payload);
        const { hung, release } = gate();
        ipn.on('successful', async (n: IpnNotification, { tx, attempt }) => {
          if (attempt > 1 || n.transaction_id !== payload.transaction_id) return orm.credit(tx, n);
          await raw(tx, 'ROLLBACK');
          await orm.credit(tx, n); // autocommit: landed at once
          await hung;
        });
        const { post } = await serve(ipn);
        try {
          expect((await post(payload)).status).toBe(200);
          await settled(key, 10_000);
          expect(await rows(payload.transaction_id)).toBe(1);
        } finally {
          release();
        }
      },
    );

    // Found in review: a write prepared through tx before the attempt is abandoned at leaseMs (a query
    // builder, lazy until awaited), run after it. The guard refuses every use of tx once the attempt ended,
    // but the builder no longer goes through it: Knex, Prisma (and Sequelize, whose calls read tx) refuse
    // it; Kysely and TypeORM ran it when the ORM's ROLLBACK was queued behind the listener's own query (it
    // landed after the ROLLBACK, committed on its own): the retry credited again, 2 rows. Drizzle ran it
    // either way, on the connection once back in the pool. Now each adapter refuses it: Drizzle's client,
    // Kysely's transaction (a plugin), TypeORM's query runner (drizzle.ts, kysely.ts, typeorm.ts).
    /**
     * A first attempt that runs `first` and is abandoned at leaseMs (1 s) while it does; later attempts
     * credit. Resolves once the entry is delivered, a second after it (the late write made, or refused),
     * having found one ledger row.
     */
    const oneRowAfterAbandoned = async (first: (tx: Any, n: IpnNotification) => Promise<void>) => {
      const ipn = router(false, { leaseMs: 1_000 });
      const payload = uniquePayload();
      const key = ledger.keyOf(payload);
      ipn.on('successful', async (n: IpnNotification, { tx, attempt }) => {
        if (attempt > 1 || n.transaction_id !== payload.transaction_id) return orm.credit(tx, n);
        await first(tx, n);
      });
      const { post } = await serve(ipn);
      expect((await post(payload)).status).toBe(200);
      await eventually('delivered', async () => (await ledger.entryOf(key))?.status === 'delivered', 10_000);
      await new Promise((resolve) => setTimeout(resolve, 1_000)); // the late write made, or refused
      expect(await rows(payload.transaction_id)).toBe(1);
    };
    const prepared = (tx: Any, n: IpnNotification): (() => PromiseLike<unknown>) => {
      const values = { transaction_id: n.transaction_id, order_id: String(n.custom_data), amount: n.amount };
      const camel = {
        transactionId: n.transaction_id,
        orderId: String(n.custom_data),
        amount: String(n.amount),
      };
      if (name === 'Knex') {
        const builder = tx('ledger').insert(values);
        return () => builder;
      }
      if (name === 'Kysely') {
        const builder = tx.insertInto('ledger').values(values);
        return () => builder.execute();
      }
      if (name === 'Drizzle') {
        // eslint-disable-next-line @typescript-eslint/no-require-imports
        const { ledger: table } = require('../../../examples/snippets/orm/drizzle.js');
        const builder = tx.insert(table).values(camel);
        return () => builder;
      }
      if (name === 'Prisma') {
        const lazy = tx.ledger.create({ data: camel });
        return () => lazy;
      }
      if (name === 'TypeORM') {
        const builder = tx.createQueryBuilder().insert().into('Ledger').values(camel);
        return () => builder.execute();
      }
      const { sequelize } = tx;
      return () =>
        sequelize.query('INSERT INTO ledger VALUES ($1, $2, $3)', {
          bind: [values.transaction_id, values.order_id, values.amount],
          transaction: tx,
        });
    };
    for (const inFlight of [true, false]) {
      test(`a write prepared through tx, run once the attempt was abandoned at leaseMs (${inFlight ? "the ORM's ROLLBACK queued behind the listener's query" : 'the transaction ended'}): refused, one row`, () =>
        oneRowAfterAbandoned(async (tx, n) => {
          const later = prepared(tx, n);
          if (inFlight) await raw(tx, 'SELECT pg_sleep(1.2)');
          else await new Promise((resolve) => setTimeout(resolve, 1_200));
          await later();
        }));
    }

    // A write a listener sends in time, alongside a slow query of its own, rather than after it: Kysely runs
    // a transaction's queries one at a time, so the write waited behind the slow one, while Kysely's
    // ROLLBACK at leaseMs went to the connection directly, ahead of it: the write ran after the ROLLBACK,
    // committed on its own, and the retry credited again (2 rows). Refused now (kysely.ts), or rolled back.
    test("a write sent through tx in time, waiting behind the listener's slow query when the attempt is abandoned at leaseMs: one row", () =>
      oneRowAfterAbandoned(async (tx, n) => {
        await Promise.all([raw(tx, 'SELECT pg_sleep(1.2)'), prepared(tx, n)()]);
      }));

    // Kysely: a builder of tx.withoutPlugins() (taken in time) runs without the plugin that refuses a late
    // builder: its connection refuses it (kysely.ts).
    (name === 'Kysely' ? test : test.skip)(
      "a write prepared through tx.withoutPlugins(), run once the attempt was abandoned at leaseMs (the ORM's ROLLBACK queued behind the listener's query): refused, one row",
      () =>
        oneRowAfterAbandoned(async (tx, n) => {
          const values = {
            transaction_id: n.transaction_id,
            order_id: String(n.custom_data),
            amount: n.amount,
          };
          const builder = (tx as KyselyTransaction<Any>).withoutPlugins().insertInto('ledger').values(values);
          await raw(tx, 'SELECT pg_sleep(1.2)');
          await builder.execute();
        }),
    );

    // The same prepared write, run once the attempt ended the ordinary way: delivered (run once the entry is),
    // or failed (run once the retry has begun, on whatever connection the failed attempt's went back to). It
    // is refused (Kysely, TypeORM and Drizzle in ipn-kit's words) and lands nowhere: one row.
    for (const how of ['delivered', 'failed'] as const) {
      test(`a write prepared through tx, run once the attempt was ${how}: refused, one row`, async () => {
        const ipn = router(false);
        const payload = uniquePayload();
        const key = ledger.keyOf(payload);
        let retried!: () => void;
        const retry = new Promise<void>((resolve) => (retried = resolve));
        let late: Promise<unknown> | undefined;
        ipn.on('successful', async (n: IpnNotification, { tx, attempt }) => {
          if (n.transaction_id !== payload.transaction_id) return orm.credit(tx, n);
          if (attempt > 1) {
            retried();
            await late?.catch(() => {});
            return orm.credit(tx, n);
          }
          await orm.credit(tx, n);
          const later = prepared(tx, n);
          if (how === 'failed') {
            late = retry.then(() => later());
            late.catch(() => {}); // read below
            throw new Error('not yet');
          }
          late = eventually(
            'delivered',
            async () => (await ledger.entryOf(key))?.status === 'delivered',
          ).then(() => later());
          late.catch(() => {}); // read below
        });
        const { post } = await serve(ipn);
        expect((await post(payload)).status).toBe(200);
        await eventually('delivered', async () => (await ledger.entryOf(key))?.status === 'delivered');
        // Drizzle (0.44 and later) wraps the refusal as a failed query's cause.
        const error = (await late!.then(
          () => undefined,
          (refusal: unknown) => refusal,
        )) as { message?: string; cause?: { message?: string } } | undefined;
        expect(error).toBeDefined();
        if (['Kysely', 'TypeORM', 'Drizzle'].includes(name)) {
          expect(`${error?.message} ${error?.cause?.message}`).toMatch(
            /a query through a delivery's transaction once it has ended/,
          );
        }
        expect(await rows(payload.transaction_id)).toBe(1);
      });
    }

    // A listener that fails after its own statement failed (the transaction aborted) is retried as before:
    // the status cannot be asked in an aborted transaction, and nothing of it landed.
    test('a listener whose statement fails, then throws: rolled back and retried, one row', async () => {
      const ipn = router(false);
      ipn.on('successful', async (n: IpnNotification, { tx, attempt }) => {
        await orm.credit(tx, n);
        if (attempt === 1) {
          await raw(tx, 'SELECT 1 / 0').catch(() => {});
          throw new Error('not yet');
        }
      });
      const { post } = await serve(ipn);
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await eventually(
        'delivered',
        async () => (await ledger.entryOf(ledger.keyOf(payload)))?.status === 'delivered',
      );
      expect(await rows(payload.transaction_id)).toBe(1);
    });

    // On PostgreSQL a COMMIT of a transaction that a failed statement aborted is a ROLLBACK: the mark finds the
    // delivery's transaction aborted, and the entry is dead as after a raw ROLLBACK (a write after it would
    // have committed on its own). Its last error said "a raw ROLLBACK" only, sending the listener's author
    // looking for a statement the listener never sent.
    test('a statement that fails and is caught, then a raw COMMIT, and the listener resolves: dead, its last error naming the COMMIT', async () => {
      const lastError = await deadAtOnce(async (n, tx) => {
        await orm.credit(tx, n);
        await raw(tx, 'SELECT 1 / 0').catch(() => {});
        await raw(tx).catch(() => {});
      }, 0);
      expect(lastError).toMatch(
        /\(a raw ROLLBACK, then resolved \(or a COMMIT after a statement that failed/,
      );
    });

    // Worse, before the mark checked its transaction: a raw ROLLBACK (a listener's own error handling)
    // undid the credit, then the `delivered` mark ran outside any transaction, committed on its own, and the
    // entry was delivered with no ledger row. Then it was retried (a write after the ROLLBACK would have been
    // credited twice); now it is dead, for a person to check and replay.
    test('a listener that credits, sends a raw ROLLBACK through tx, and resolves: dead, never delivered without its row', async () => {
      const lastError = await deadAtOnce(async (n, tx) => {
        await orm.credit(tx, n);
        await raw(tx, 'ROLLBACK').catch(() => {});
      }, 0);
      expect(lastError).toMatch(/\(a raw ROLLBACK, then resolved/);
    });
  });
});

describeWithService('PostgreSQL', 'hostile: a Prisma transaction timeout shorter than a listener', () => {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { fixture } = require('../../fixtures/orm/prisma.js') as { fixture: OrmFixture<Any> };
  const ledger = ledgerSchema('ipn_hostile_prisma_timeout');
  const serve = servedRouters();
  const unhandled: unknown[] = [];
  const record = (reason: unknown) => unhandled.push(reason);
  beforeAll(() => process.on('unhandledRejection', record));
  afterAll(() => process.off('unhandledRejection', record));

  test('the timeout rolls the slow attempt back, with no unhandled rejection; the retry credits once', async () => {
    const orm = await fixture.open(ledger.schema);
    try {
      // The documented mistake: leaseMs raised, the Prisma timeout not.
      const { PrismaPg } = await import('@prisma/adapter-pg');
      const { Pool } = await import('pg');
      const { PrismaClient } = await import('../../fixtures/orm/prisma/generated/client.js');
      const pool = new Pool({
        connectionString: ledger.pool().options.connectionString,
        options: `-c search_path=${ledger.schema}`,
      });
      const prisma = new PrismaClient({ adapter: new PrismaPg(pool, { schema: ledger.schema }) });
      try {
        const ipn = ipnRouter({
          store: new PostgresStore({
            pool: ledger.pool(),
            transactions: prismaTransactions(prisma, { timeout: 500 }),
          }),
          delivery: 'at-least-once',
          logger: quiet,
          retryDelayMs: 20,
          recoveryIntervalMs: 50,
          leaseMs: 10_000,
        });
        ipn.on('successful', async (n: IpnNotification, { tx, attempt }) => {
          await orm.credit(tx, n);
          if (attempt === 1) await new Promise((resolve) => setTimeout(resolve, 1_000));
        });
        const { post } = await serve(ipn);
        const payload = uniquePayload();
        expect((await post(payload)).status).toBe(200);
        await eventually(
          'delivered',
          async () => (await ledger.entryOf(ledger.keyOf(payload)))?.status === 'delivered',
        );
        expect(await ledger.ledgerOf(payload.transaction_id)).toHaveLength(1);
        await new Promise((resolve) => setImmediate(resolve));
        expect(unhandled).toEqual([]);
      } finally {
        await prisma.$disconnect();
        await pool.end();
      }
    } finally {
      await orm.close();
    }
  });
});

describeWithService('PostgreSQL', 'hostile: a raw COMMIT, then a Prisma transaction timeout', () => {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { fixture } = require('../../fixtures/orm/prisma.js') as { fixture: OrmFixture<Any> };
  const ledger = ledgerSchema('ipn_hostile_prisma_timeout_commit');
  const serve = servedRouters();

  // Prisma refuses every query of a transaction whose timeout ran out, the check's too: it could not tell
  // that the listener's raw COMMIT had landed, and the retry credited a second time.
  // And one that commits nothing is still retried: the transaction stands aborted.
  // One that resolves after its COMMIT took the commit path, where Prisma refuses the mark: that failed mark
  // asked nothing, and the retry credited a second time (found in review of e51917e).
  test.each([
    [true, 'throws', false, 'dead'],
    [true, 'throws', true, 'dead'],
    [false, 'throws', false, 'delivered'],
    [true, 'resolves', false, 'dead'],
    [true, 'resolves', true, 'dead'],
    [false, 'resolves', true, 'delivered'],
  ])(
    'a listener that sends a raw COMMIT: %s, outlives the timeout, then %s (store with a pool: %s): %s, one row',
    async (commit, then, withPool, expected) => {
      const orm = await fixture.open(ledger.schema);
      const { PrismaPg } = await import('@prisma/adapter-pg');
      const { Pool } = await import('pg');
      const { PrismaClient } = await import('../../fixtures/orm/prisma/generated/client.js');
      const pool = new Pool({
        connectionString: ledger.pool().options.connectionString,
        options: `-c search_path=${ledger.schema}`,
      });
      const prisma = new PrismaClient({ adapter: new PrismaPg(pool, { schema: ledger.schema }) });
      try {
        const transactions = prismaTransactions(prisma, { timeout: 500 });
        const ipn = ipnRouter({
          store: new PostgresStore(withPool ? { pool: ledger.pool(), transactions } : { transactions }),
          delivery: 'at-least-once',
          logger: quiet,
          retryDelayMs: 20,
          recoveryIntervalMs: 50,
          leaseMs: 10_000,
        });
        const payload = uniquePayload();
        const key = ledger.keyOf(payload);
        ipn.on('successful', async (n: IpnNotification, { tx, attempt }) => {
          await orm.credit(tx, n);
          if (attempt > 1 || n.transaction_id !== payload.transaction_id) return;
          if (commit) await tx.$executeRawUnsafe('COMMIT');
          await new Promise((resolve) => setTimeout(resolve, 1_000));
          if (then === 'throws') throw new Error('the order service is down');
        });
        const { post } = await serve(ipn);
        expect((await post(payload)).status).toBe(200);
        await eventually('settled', async () =>
          ['dead', 'delivered'].includes(String((await ledger.entryOf(key))?.status)),
        );
        expect(await ledger.ledgerOf(payload.transaction_id)).toHaveLength(1);
        const attempts = expected === 'dead' ? 1 : 2;
        expect(await ledger.entryOf(key)).toMatchObject({ status: expected, attempts });
        await ipn.close();
      } finally {
        await prisma.$disconnect();
        await pool.end();
        await orm.close();
      }
    },
  );
});

describeWithService(
  'PostgreSQL',
  'hostile: the store through an ORM alone whose pool has one connection',
  () => {
    const ledger = ledgerSchema('ipn_hostile_one_connection');
    const serve = servedRouters();

    test.each([1, 2])(
      'Knex, pool max %i: 20 notifications at once are each credited once and delivered, no hang',
      async (max) => {
        const { knex } = await import('knex');
        const { knexTransactions } = await import('ipn-kit/orm');
        const { databaseUrl } = await import('../../helpers/services.js');
        const db = knex({
          client: 'pg',
          connection: databaseUrl(),
          searchPath: [ledger.schema],
          pool: { min: 0, max },
        });
        try {
          const ipn = ipnRouter({
            store: new PostgresStore({ transactions: knexTransactions(db) }),
            delivery: 'at-least-once',
            logger: quiet,
            retryDelayMs: 20,
            recoveryIntervalMs: 50,
          });
          ipn.on('successful', async (n: IpnNotification, { tx, attempt }) => {
            await tx('ledger').insert({ transaction_id: n.transaction_id, order_id: 'x', amount: n.amount });
            if (attempt === 1 && Number(n.amount) % 3 === 0) throw new Error('not yet');
          });
          const { post } = await serve(ipn);
          const payloads = Array.from({ length: 20 }, (_, i) => uniquePayload({ amount: 10 + i }));
          const answers = await Promise.all([...payloads, ...payloads].map((payload) => post(payload)));
          expect(answers.map((answer) => answer.status)).toEqual(answers.map(() => 200));
          for (const payload of payloads) {
            await eventually(
              'delivered',
              async () => (await ledger.entryOf(ledger.keyOf(payload)))?.status === 'delivered',
            );
            expect(await ledger.ledgerOf(payload.transaction_id)).toHaveLength(1);
          }
          await ipn.close();
        } finally {
          await db.destroy();
        }
      },
    );
  },
);

describeWithService('PostgreSQL', "hostile: TypeORM's query runner ends the delivery's transaction", () => {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { fixture } = require('../../fixtures/orm/typeorm.js') as { fixture: OrmFixture<EntityManager> };
  const ledger = ledgerSchema('ipn_hostile_typeorm_runner');
  let orm: OpenedOrm<EntityManager>;
  beforeAll(async () => {
    orm = await fixture.open(ledger.schema);
  });
  afterAll(async () => {
    await orm?.close();
  });
  const serve = servedRouters();
  const router = () =>
    ipnRouter({
      store: new PostgresStore({ pool: ledger.pool(), transactions: orm.transactions }),
      delivery: 'at-least-once',
      logger: quiet,
      retryDelayMs: 20,
      recoveryIntervalMs: 50,
    });
  const deliveredOnce = async (payload: Record<string, unknown>) => {
    await eventually(
      'delivered',
      async () => (await ledger.entryOf(ledger.keyOf(payload)))?.status === 'delivered',
    );
    expect(await ledger.ledgerOf(payload.transaction_id)).toHaveLength(1);
  };

  // Knex's and Sequelize's tx.commit()/tx.rollback() throw (refuse-end.ts); TypeORM's EntityManager hands
  // out its query runner, whose rollbackTransaction() ended the transaction: the mark then committed alone,
  // and the entry was delivered with no ledger row.
  test('tx.queryRunner.rollbackTransaction() in a listener that resolves anyway: refused, never delivered without its row', async () => {
    const ipn = router();
    const refusals: unknown[] = [];
    ipn.on('successful', async (n: IpnNotification, { tx, attempt }) => {
      await orm.credit(tx, n);
      if (attempt === 1) await tx.queryRunner!.rollbackTransaction().catch((error) => refusals.push(error));
    });
    const { post } = await serve(ipn);
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await deliveredOnce(payload);
    expect(refusals).toEqual([expect.objectContaining({ name: 'TypeError' })]);
    expect(String(refusals[0])).toContain('tx.queryRunner.rollbackTransaction()');
  });

  test('tx.queryRunner.commitTransaction() then a throw: refused, the credit rolls back with the attempt, one row after the retry', async () => {
    const ipn = router();
    ipn.on('successful', async (n: IpnNotification, { tx, attempt }) => {
      await orm.credit(tx, n);
      if (attempt === 1) {
        await tx.queryRunner!.commitTransaction().catch(() => {});
        throw new Error('the order service is down');
      }
    });
    const { post } = await serve(ipn);
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await deliveredOnce(payload);
  });

  /** Sessions with a transaction left open on this schema's ledger (other test files' ledgers are not it). */
  const openOnLedger = async (): Promise<number> => {
    const { rows } = await ledger.pool().query(
      `SELECT count(DISTINCT a.pid)::int AS n FROM pg_locks l JOIN pg_stat_activity a USING (pid)
        WHERE l.relation = to_regclass($1) AND a.state LIKE 'idle in transaction%'`,
      [`${ledger.schema}.ledger`],
    );
    return rows[0].n as number;
  };

  // A released runner hands its connection back to the pool mid-transaction: the credit stayed in an open
  // transaction there, which the next user of that connection committed with its own work (here the retry's
  // transaction: two rows). Refused now, through whichever way the listener reached the runner.
  test('tx.queryRunner.release() in a listener: refused, the credit stays in the delivery transaction', async () => {
    const ipn = router();
    const refusals: unknown[] = [];
    ipn.on('successful', async (n: IpnNotification, { tx, attempt }) => {
      await orm.credit(tx, n);
      if (attempt === 1) {
        const refused = (error: unknown) => void refusals.push(error);
        await tx.queryRunner!.release().catch(refused);
        await tx.release().catch(refused);
        await tx.transaction((inner) => inner.queryRunner!.release().catch(refused));
      }
    });
    const { post } = await serve(ipn);
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await deliveredOnce(payload);
    const refusal = expect.objectContaining({ name: 'TypeError' });
    expect(refusals).toEqual([refusal, refusal, refusal]);
    expect(String(refusals[0])).toContain('tx.queryRunner.release()');
    expect(await openOnLedger()).toBe(0);
  });

  // The Proxy put as tx.queryRunner (guardRunner) must leave alone what a listener legitimately does with
  // the runner and what TypeORM does through it, and refuse release() however the listener reaches it.
  test('what a listener does with tx.queryRunner, its repositories and query builders still works; release() is refused by each of them', async () => {
    const { Ledger } = await import('../../fixtures/orm/typeorm.js');
    const { PostgresQueryRunner } = await import('typeorm/driver/postgres/PostgresQueryRunner.js');
    const ipn = router();
    const checks: Record<string, unknown> = {};
    const refusals: string[] = [];
    ipn.on('successful', async (n: IpnNotification, { tx }) => {
      const runner = tx.queryRunner!;
      const repository = tx.getRepository(Ledger);
      checks.instanceOf = runner instanceof PostgresQueryRunner;
      checks.manager = runner.manager.queryRunner === runner; // tx itself is guarded (refuseLateWrites)
      checks.connection = runner.connection === tx.connection;
      checks.sameRunner = repository.queryRunner === runner && tx.queryRunner === runner;
      checks.active = runner.isTransactionActive && !runner.isReleased;
      runner.data = { tenant: 'a' };
      (runner as Any).mine = 'set';
      checks.set = runner.data.tenant === 'a' && (runner as Any).mine === 'set';
      await repository.insert({ transactionId: n.transaction_id, orderId: String(n.custom_data) });
      const qb = repository.createQueryBuilder('l').where('l.transactionId = :id', { id: n.transaction_id });
      checks.queryBuilder = await qb.getCount();
      checks.raw = await runner.query('SELECT count(*)::int AS n FROM ledger WHERE transaction_id = $1', [
        n.transaction_id,
      ]);
      checks.nested = await tx.transaction(async (inner) => {
        await inner.getRepository(Ledger).insert({ transactionId: `${n.transaction_id}-x`, orderId: 'x' });
        return inner.createQueryBuilder(Ledger, 'l').where('l.orderId = :o', { o: 'x' }).getCount();
      });
      await tx.createQueryBuilder().delete().from(Ledger).where('order_id = :o', { o: 'x' }).execute();
      const refused = (error: unknown) => void refusals.push((error as Error).name);
      await repository.queryRunner!.release().catch(refused);
      await (qb as Any).queryRunner.release().catch(refused);
      await runner.manager.release().catch(refused);
      await runner.manager.queryRunner!.release().catch(refused);
    });
    const { post } = await serve(ipn);
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await deliveredOnce(payload);
    expect(checks).toEqual({
      instanceOf: true,
      manager: true,
      connection: true,
      sameRunner: true,
      active: true,
      set: true,
      queryBuilder: 1,
      raw: [{ n: 1 }],
      nested: 1,
    });
    expect(refusals).toEqual(['TypeError', 'TypeError', 'TypeError', 'TypeError']);
    expect(await openOnLedger()).toBe(0);
  });

  // destroy() releases every runner the driver holds, the attempt's too (PostgresDriver.closePool): the
  // refusal is the listener's alone, so a shutdown while a listener hangs ends, and the closing pool's end of
  // that connection rolls the attempt's credit back on the server.
  test('dataSource.destroy() while a listener hangs: it ends, and the credit rolls back', async () => {
    const own = await fixture.open(ledger.schema);
    const ipn = ipnRouter({
      store: new PostgresStore({ pool: ledger.pool(), transactions: own.transactions }),
      delivery: 'at-least-once',
      logger: quiet,
      retryDelayMs: 20,
      recoveryIntervalMs: 50,
    });
    let credited = false;
    let unhang!: () => void;
    const hang = new Promise<void>((resolve) => (unhang = resolve));
    ipn.on('successful', async (n: IpnNotification, { tx }) => {
      await own.credit(tx, n);
      credited = true;
      await hang;
      throw new Error('the DataSource is gone');
    });
    const { post } = await serve(ipn);
    const payload = uniquePayload();
    try {
      expect((await post(payload)).status).toBe(200);
      await eventually('the listener credited, then hangs', () => credited);
      await eventually('its credit is in the open transaction', async () => (await openOnLedger()) === 1);
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        own.close(),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error('dataSource.destroy() did not end')), 5_000);
        }),
      ]).finally(() => clearTimeout(timer));
      await eventually('the attempt rolled back', async () => (await openOnLedger()) === 0, 5_000);
      expect(await ledger.ledgerOf(payload.transaction_id)).toEqual([]);
    } finally {
      unhang();
    }
  });

  test("a nested transaction's own commit and rollback through the query runner still work (savepoints)", async () => {
    const ipn = router();
    ipn.on('successful', async (n: IpnNotification, { tx }) => {
      await tx.transaction(async (inner) => {
        await orm.credit(inner, { ...n, custom_data: 'undone' });
        await inner.queryRunner!.rollbackTransaction(); // ROLLBACK TO SAVEPOINT
        await inner.queryRunner!.startTransaction(); // a new savepoint, which TypeORM then releases
      });
      await orm.credit(tx, n);
    });
    const { post } = await serve(ipn);
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await deliveredOnce(payload);
    expect(await ledger.ledgerOf(payload.transaction_id)).toEqual([
      { order_id: String(payload.custom_data) },
    ]);
  });
});

describeWithService('PostgreSQL', 'hostile: the same abandoned attempt on the pg path (the control)', () => {
  const ledger = ledgerSchema('ipn_hostile_pg_control', [
    'CREATE TABLE orders (id text PRIMARY KEY, paid integer NOT NULL DEFAULT 0)',
  ]);
  const serve = servedRouters();

  test("an abandoned attempt whose listener waits on its own transaction's lock: the connection is closed, the lock freed", async () => {
    const order = 'order-pg';
    await ledger.pool().query('INSERT INTO orders (id) VALUES ($1)', [order]);
    const other = ledger.newPool(1);
    let outerSettled = false;
    const ipn = ipnRouter({
      store: new PostgresStore({ pool: ledger.pool() }),
      delivery: 'at-least-once',
      logger: quiet,
      retryDelayMs: 20,
      recoveryIntervalMs: 50,
      leaseMs: 1_000,
    });
    ipn.on('successful', async (n: IpnNotification, { db, attempt }) => {
      await db.query('INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)', [
        n.transaction_id,
        order,
      ]);
      if (attempt === 1) {
        await db.query('UPDATE orders SET paid = paid + 1 WHERE id = $1', [order]);
        await other.query('UPDATE orders SET paid = paid + 1 WHERE id = $1', [order]);
        outerSettled = true;
      }
    });
    const { post } = await serve(ipn);
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    await eventually(
      'the abandoned transaction rolled back, so the other update went through',
      () => outerSettled,
    );
    await eventually(
      'delivered',
      async () => (await ledger.entryOf(ledger.keyOf(payload)))?.status === 'delivered',
    );
    expect(await ledger.ledgerOf(payload.transaction_id)).toHaveLength(1);
  });
});

describeWithService('PostgreSQL', "hostile: an ORM's transaction given where its client belongs", () => {
  test('knexTransactions, drizzleTransactions and kyselyTransactions refuse a transaction of their ORM', async () => {
    const { knex } = await import('knex');
    const { drizzle } = await import('drizzle-orm/node-postgres');
    const { Kysely, PostgresDialect } = await import('kysely');
    const { Pool } = await import('pg');
    const { databaseUrl } = await import('../../helpers/services.js');
    const orm = await import('ipn-kit/orm');
    const pool = new Pool({ connectionString: databaseUrl(), max: 2 });
    const db = knex({ client: 'pg', connection: databaseUrl(), pool: { min: 0, max: 1 } });
    try {
      await db.transaction((trx) => {
        expect(() => orm.knexTransactions(trx)).toThrow(
          new TypeError(
            "knexTransactions: expected a Knex instance (knex({ client: 'pg', connection })), got a Knex transaction: " +
              'every delivery would run in it, as a savepoint, and commit only when it does. Pass the instance',
          ),
        );
        return Promise.resolve();
      });
      await drizzle(pool).transaction((tx) => {
        expect(() => orm.drizzleTransactions(tx)).toThrow(/got a Drizzle transaction/);
        return Promise.resolve();
      });
      await new Kysely<Any>({ dialect: new PostgresDialect({ pool }) }).transaction().execute((tx) => {
        expect(() => orm.kyselyTransactions(tx)).toThrow(/got a Kysely Transaction/);
        return Promise.resolve();
      });
      // Their clients are still taken.
      expect(orm.knexTransactions(db).name).toBe('Knex');
      expect(orm.drizzleTransactions(drizzle(pool)).name).toBe('Drizzle');
    } finally {
      await db.destroy();
      await pool.end();
    }
  });
});
