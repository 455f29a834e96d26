/**
 * Hostile review of the delivery transaction: texts a listener (or an ORM it runs on `db`) sends that would
 * end ipn-kit's transaction early, so that a write of a failed attempt commits (and its retry credits
 * again); and a hand-written `Transactions` that runs its work again (a retry on a serialization failure),
 * which must never commit the delivered mark without the listeners' writes. Real PostgreSQL, a ledger with
 * no unique key: a second credit shows as a second row, a lost one as none.
 */
import { type Pool, type PoolClient } from 'pg';
import { ipnRouter } from 'ipn-kit';
import type { Transactions } from 'ipn-kit/orm';
import { PostgresStore } from 'ipn-kit/postgres';
import { pgTransactions } from '../fixtures/orm/pg.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { servedRouters } from '../helpers/servers.js';
import { ledgerSchema } from '../helpers/ledger-schema.js';
import { describeWithService, eventually } from '../helpers/services.js';

jest.setTimeout(30_000);

describeWithService(
  'PostgreSQL',
  'transaction escapes: nothing a listener sends ends the delivery early',
  () => {
    const ledger = ledgerSchema('ipn_tx_escape', ['CREATE SEQUENCE flaky_commit']);
    const { keyOf } = ledger;
    let pool: Pool;
    beforeAll(() => {
      pool = ledger.pool();
    });
    const serve = servedRouters();
    const router = (store: PostgresStore<Pool, Transactions<PoolClient> | undefined>) =>
      ipnRouter({
        store,
        delivery: 'at-least-once',
        logger: quiet,
        retryDelayMs: 20,
        recoveryIntervalMs: 50,
      });
    const delivered = (key: string) =>
      eventually(`${key} delivered`, async () => (await ledger.entryOf(key))?.status === 'delivered');
    const insert = 'INSERT INTO ledger (transaction_id, order_id) VALUES ($1, $2)';

    // Each would COMMIT (or ROLLBACK) ipn-kit's transaction as PostgreSQL reads it, while a lexer that skips
    // no comment, reads E'' strings as standard ones, or takes the `$b$` of an identifier for a dollar quote
    // sees no transaction statement in it.
    test.each([
      ['a block comment before COMMIT', '/* flush */ COMMIT'],
      ['a line comment before COMMIT', '-- flush\nCOMMIT'],
      ['a comment between two statements', 'SELECT 1;/**/COMMIT'],
      ['an E string with an escaped quote', "SELECT E'\\'' AS x; COMMIT; SELECT 1 AS y --'"],
      ['an identifier holding $b$', 'SELECT 1 AS a$b$; COMMIT; SELECT 1 AS a$b$'],
      ['a comment before ROLLBACK (the next write autocommits)', '/* undo */ ROLLBACK'],
      ['a nested comment hiding nothing, then END', '/* a /* b */ c */ END'],
    ])('%s: refused, never run; a failed attempt and its retry, one row', async (_, text) => {
      const { ipn, post } = await serve(router(new PostgresStore({ pool })));
      const answers: unknown[] = [];
      ipn.on('successful', async (n, { db, attempt }) => {
        await db.query(insert, [n.transaction_id, `a${attempt}`]);
        if (attempt > 1) return;
        // A listener that catches what its statement did: whatever it was, nothing of this attempt may land.
        await db.query(text).then(
          () => answers.push('ran'),
          (error: unknown) => answers.push(String(error)),
        );
        await db.query(insert, [n.transaction_id, 'after']).catch(() => {});
        throw new Error('the order service is down');
      });
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      expect(await ledger.ledgerOf(payload.transaction_id)).toEqual([{ order_id: 'a2' }]);
      expect(answers).toEqual([expect.stringMatching(/through db, inside the delivery transaction/)]);
    });

    test('with standard_conforming_strings off, a quote escaped by a backslash hides no COMMIT', async () => {
      const { ipn, post } = await serve(router(new PostgresStore({ pool })));
      ipn.on('successful', async (n, { db, attempt }) => {
        await db.query(insert, [n.transaction_id, `a${attempt}`]);
        if (attempt > 1) return;
        await db.query('SET LOCAL standard_conforming_strings = off');
        await db.query("SELECT '\\'' AS x; COMMIT; SELECT 1 AS y --'").catch(() => {});
        await db.query(insert, [n.transaction_id, 'after']).catch(() => {});
        throw new Error('the order service is down');
      });
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      expect(await ledger.ledgerOf(payload.transaction_id)).toEqual([{ order_id: 'a2' }]);
    });

    test("an ORM's BEGIN and COMMIT carrying a trace comment (sqlcommenter) still run as a savepoint", async () => {
      const { ipn, post } = await serve(router(new PostgresStore({ pool })));
      const recorder = recordEvents(ipn);
      ipn.on('successful', async (n, { db }) => {
        await db.query("/* traceparent='00-1' */ BEGIN");
        await db.query(insert, [n.transaction_id, 'nested']);
        await db.query("COMMIT /* traceparent='00-1' */");
      });
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      expect(await ledger.ledgerOf(payload.transaction_id)).toEqual([{ order_id: 'nested' }]);
      expect(await ledger.entryOf(keyOf(payload))).toMatchObject({ attempts: 1 });
      expect(recorder.count('error')).toBe(0);
    });

    test("the hand-written pg Transactions: a listener's write after its failed attempt ended is never committed", async () => {
      const store = new PostgresStore({ pool, transactions: pgTransactions(ledger.newPool(2)) });
      const { ipn, post } = await serve(router(store));
      const late: Array<Promise<unknown>> = [];
      ipn.on('successful', (n, { tx, attempt }) => {
        if (attempt > 1) return tx.query(insert, [n.transaction_id, `a${attempt}`]).then(() => {});
        // Work the listener started and did not wait for (a fire-and-forget chain): it writes once the
        // attempt has failed, through the transaction's client, which went back to the pool.
        late.push(
          new Promise((resolve) => setTimeout(resolve, 100))
            .then(() => tx.query(insert, [n.transaction_id, 'late']))
            .catch((error: unknown) => error),
        );
        return Promise.resolve();
      });
      ipn.on('notification', (n, { attempt }) => {
        if (attempt === 1) throw new Error('the order service is down');
      });
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      await Promise.all(late);
      expect(await ledger.ledgerOf(payload.transaction_id)).toEqual([{ order_id: 'a2' }]);
    });

    test('an ORM whose COMMIT answers after storeTimeoutMs: the entry is read, never credited twice, never dead', async () => {
      const slowPool = ledger.newPool(2);
      const base = pgTransactions(slowPool);
      // The COMMIT is sent after the mark as usual, but its answer comes late (a slow disk, a far replica).
      const slow: Transactions<PoolClient> = {
        ...base,
        name: 'slow commit',
        transaction: (work) =>
          base.transaction(async (client) => {
            const result = await work(client);
            await new Promise((resolve) => setTimeout(resolve, 800));
            return result;
          }),
      };
      const ipn = ipnRouter({
        store: new PostgresStore({ pool, transactions: slow }),
        delivery: 'at-least-once',
        logger: quiet,
        retryDelayMs: 20,
        recoveryIntervalMs: 50,
        storeTimeoutMs: 300,
        leaseMs: 3_000,
        maxAttempts: 1,
      });
      const recorder = recordEvents(ipn);
      ipn.on('successful', async (n, { tx, attempt }) => {
        await tx.query(insert, [n.transaction_id, `a${attempt}`]);
      });
      const { post } = await serve(ipn);
      const payload = uniquePayload();
      expect((await post(payload)).status).toBe(200);
      await delivered(keyOf(payload));
      // The commit timed out: the attempt was read as not delivered (the commit had not landed yet) and
      // reported; its settlement (dead, at maxAttempts 1) waited for the mark's row lock, then found the
      // entry delivered. ipn.close() waits for that attempt to end.
      await eventually('the timed out commit reported', () => recorder.count('error') > 0);
      await ipn.close();
      // The settlement may itself wait on that lock past storeTimeoutMs: reported as such, harmless.
      const errors: string[] = recorder.of('error').map((event) => event.error.message);
      expect(errors[0]).toMatch(/commit for .* did not answer within 300 ms/);
      for (const error of errors) expect(error).toMatch(/did not answer within 300 ms/);
      expect(await ledger.entryOf(keyOf(payload))).toMatchObject({ status: 'delivered', attempts: 1 });
      expect(await ledger.ledgerOf(payload.transaction_id)).toEqual([{ order_id: 'a1' }]);
      expect(recorder.count('dead')).toBe(0);
    });

    /**
     * What a partner writes for SERIALIZABLE isolation: a transaction that runs its work again when the commit
     * fails with a serialization failure (40001). The first COMMIT here fails so, through a deferred trigger
     * on the ledger (a sequence counts, as it is not rolled back).
     */
    function retryingTransactions(): Transactions<PoolClient> {
      return {
        name: 'pg with retries',
        async transaction(work) {
          for (let tries = 1; ; tries += 1) {
            const client = await pool.connect();
            try {
              await client.query('BEGIN');
              const result = await work(client);
              await client.query('COMMIT');
              return result;
            } catch (error) {
              await client.query('ROLLBACK').catch(() => {});
              if ((error as { code?: string }).code !== '40001' || tries >= 3) throw error;
            } finally {
              client.release();
            }
          }
        },
        async query(client, { text, values }) {
          const result = await client.query(text, values);
          return { rows: result.rows as Array<Record<string, unknown>>, count: result.rowCount ?? 0 };
        },
      };
    }

    test('a Transactions that runs the work again after a failed COMMIT: never the mark without the credit', async () => {
      await pool.query(`
      CREATE OR REPLACE FUNCTION flaky_commit() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF nextval('flaky_commit') = 1 THEN
          RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001';
        END IF;
        RETURN NULL;
      END $$;
      CREATE CONSTRAINT TRIGGER flaky_commit AFTER INSERT ON ledger DEFERRABLE INITIALLY DEFERRED
        FOR EACH ROW EXECUTE FUNCTION flaky_commit();`);
      try {
        const { ipn, post } = await serve(
          router(new PostgresStore({ pool, transactions: retryingTransactions() })),
        );
        ipn.on('successful', async (n, { tx, attempt }) => {
          await tx.query(insert, [n.transaction_id, `a${attempt}`]);
        });
        const payload = uniquePayload();
        expect((await post(payload)).status).toBe(200);
        await delivered(keyOf(payload));
        // Delivered means credited: the first attempt's credit went with its failed COMMIT, so the mark must
        // have gone with it, and a later attempt credited.
        expect(await ledger.ledgerOf(payload.transaction_id)).toHaveLength(1);
      } finally {
        await pool.query('DROP TRIGGER flaky_commit ON ledger');
      }
    });
  },
);
