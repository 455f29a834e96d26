import type { Pool } from 'pg';
import { ipnRouter, type IpnNotification } from '../../lib/index.js';
import { PostgresStore } from '../../lib/postgres.js';
import { openOrmTransaction } from '../../lib/stores/orm-transaction.js';
import { inboxSql } from '../../lib/stores/postgres/postgres-sql.js';
import { explainPostgres } from '../../lib/stores/postgres/postgres-transaction.js';
import type { Statement } from '../../lib/stores/transactions.js';
import type { OpenedOrm } from './orm-scenarios.js';
import { ledgerSchema } from './ledger-schema.js';
import { ODD_SQL_TEXTS } from './odd-sql-texts.js';
import { uniquePayload } from './payloads.js';
import { quiet } from './quiet-logger.js';
import { recordEvents } from './record-events.js';
import { servedRouters } from './servers.js';
import { eventually } from './services.js';

/** An ORM opened on a schema, as a fixture of test/fixtures/orm/ opens it, with a savepoint of the ORM's. */
export interface ContractOrm<Tx> extends OpenedOrm<Tx> {
  /** Runs `work` in a savepoint of `tx`, the way the ORM nests a transaction. */
  savepoint(tx: Tx, work: (inner: Tx) => Promise<void>): Promise<void>;
}

/**
 * The contract every {@link Transactions} of `ipn-kit/orm` keeps, checked against the real PostgreSQL in a
 * schema of the test file's own: the ORM's transaction commits and rolls back what the listener wrote
 * through the ORM's own API; `query` runs inside it, with the rows and the count the store reads, whatever
 * the placeholders; `execute` runs outside any; a savepoint of the ORM is one; and the core's
 * `openOrmTransaction` commits the `delivered` mark with the writes, or rolls both back when the lease was
 * lost. Call it inside a `describeWithService('PostgreSQL', ...)`.
 */
export function transactionsContract<Tx>(
  prefix: string,
  open: (schema: string) => Promise<ContractOrm<Tx>>,
  options: { endsRefused?: boolean } = {},
) {
  const ledger = ledgerSchema(prefix);
  let orm: ContractOrm<Tx>;
  let pool: Pool;
  beforeAll(async () => {
    pool = ledger.pool();
    orm = await open(ledger.schema);
  });
  afterAll(() => orm?.close());

  const notification = (overrides: Record<string, unknown> = {}) =>
    uniquePayload({
      custom_data: `order-${String(Math.random()).slice(2, 10)}`,
      ...overrides,
    }) as unknown as IpnNotification;
  const rows = (text: string, ...values: unknown[]): Statement => ({ text, values, returns: 'rows' });
  const count = (text: string, ...values: unknown[]): Statement => ({ text, values, returns: 'count' });
  const ledgerCount = async (id: string) => (await ledger.ledgerOf(id)).length;

  test('a transaction commits what the listener wrote through the ORM, and resolves what the work did', async () => {
    const n = notification();
    const result = await orm.transactions.transaction(async (tx) => {
      await orm.credit(tx, n);
      return 'done';
    });
    expect(result).toBe('done');
    expect(await ledgerCount(n.transaction_id)).toBe(1);
  });

  test('a throw rolls the transaction back, and it rejects with the very error', async () => {
    const n = notification();
    const boom = new Error('listener failed');
    await expect(
      orm.transactions.transaction(async (tx) => {
        await orm.credit(tx, n);
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(await ledgerCount(n.transaction_id)).toBe(0);
  });

  test('query runs inside the transaction: it sees its writes, which no other connection sees before the commit', async () => {
    const n = notification();
    await orm.transactions.transaction(async (tx) => {
      await orm.credit(tx, n);
      const seen = await orm.transactions.query(
        tx,
        rows('SELECT order_id FROM ledger WHERE transaction_id = $1', n.transaction_id),
      );
      expect(seen).toEqual({ rows: [{ order_id: n.custom_data }], count: 1 });
      expect(await ledgerCount(n.transaction_id)).toBe(0);
    });
    expect(await ledgerCount(n.transaction_id)).toBe(1);
  });

  test('count is how many rows a statement changed; a rows statement gives its rows and how many', async () => {
    const id = notification().transaction_id;
    await orm.transactions.transaction(async (tx) => {
      const { query } = orm.transactions;
      const insert =
        'INSERT INTO ledger (transaction_id, order_id) SELECT $1, o FROM unnest($2::text[]) AS o';
      expect((await query(tx, count(insert, id, ['a', 'b', 'c']))).count).toBe(3);
      expect(
        (
          await query(
            tx,
            count("UPDATE ledger SET amount = 1 WHERE transaction_id = $1 AND order_id <> 'c'", id),
          )
        ).count,
      ).toBe(2);
      expect(
        (await query(tx, count('UPDATE ledger SET amount = 1 WHERE transaction_id = $1 AND false', id)))
          .count,
      ).toBe(0);
      expect(
        (await query(tx, count("DELETE FROM ledger WHERE transaction_id = $1 AND order_id = 'c'", id))).count,
      ).toBe(1);
      const returned = await query(
        tx,
        rows('UPDATE ledger SET amount = 2 WHERE transaction_id = $1 RETURNING order_id', id),
      );
      expect(returned.count).toBe(2);
      expect(returned.rows.map((row) => row.order_id).sort()).toEqual(['a', 'b']);
      expect(await query(tx, rows('SELECT 1 AS one WHERE false'))).toEqual({ rows: [], count: 0 });
    });
    expect(await ledger.ledgerOf(id)).toEqual([{ order_id: 'a' }, { order_id: 'b' }]);
  });

  test('placeholders: a value used twice, $10 beside $1, a ? of the SQL itself, undefined as NULL', async () => {
    const values = Array.from({ length: 10 }, (_, i) => `v${i + 1}`);
    values[2] = 'k';
    const statement = rows(
      `SELECT $1::text AS a, $2::text AS b, $1::text AS again, $10::text AS tenth, '?' AS mark,
        '{"k": 1}'::jsonb ? $3 AS has, $4::text || $5 || $6 || $7 || $8 || $9 AS rest`,
      ...values,
    );
    const expected = {
      a: 'v1',
      b: 'v2',
      again: 'v1',
      tenth: 'v10',
      mark: '?',
      has: true,
      rest: 'v4v5v6v7v8v9',
    };
    await orm.transactions.transaction(async (tx) => {
      expect((await orm.transactions.query(tx, statement)).rows).toEqual([expected]);
      // With no values at all, a `?` is the SQL's own too.
      const own = await orm.transactions.query(
        tx,
        rows(`SELECT '{"k": 1}'::jsonb ? 'k' AS has, '??' AS marks`),
      );
      expect(own.rows).toEqual([{ has: true, marks: '??' }]);
      const missing = await orm.transactions.query(tx, rows('SELECT $1::text IS NULL AS missing', undefined));
      expect(missing.rows).toEqual([{ missing: true }]);
    });
  });

  test('values come back exactly as sent, whatever they hold: quotes, placeholders, ?, $$, backslashes', async () => {
    const statement = rows(
      'SELECT v, $1::text AS again FROM unnest($2::text[]) WITH ORDINALITY AS t(v, i) ORDER BY i',
      '$2 ?',
      ODD_SQL_TEXTS,
    );
    const expected = ODD_SQL_TEXTS.map((v) => ({ v, again: '$2 ?' }));
    await orm.transactions.transaction(async (tx) => {
      expect((await orm.transactions.query(tx, statement)).rows).toEqual(expected);
    });
    expect((await orm.transactions.execute!(statement)).rows).toEqual(expected);
  });

  test('execute runs a statement on its own, outside any transaction', async () => {
    const { execute } = orm.transactions;
    expect(execute).toBeDefined();
    const id = notification().transaction_id;
    const insert = count("INSERT INTO ledger (transaction_id, order_id) VALUES ($1, 'x'), ($1, 'y')", id);
    expect(await execute!(insert)).toEqual({ rows: [], count: 2 });
    expect(await ledgerCount(id)).toBe(2);
    const read = await execute!(
      rows('SELECT order_id FROM ledger WHERE transaction_id = $1 ORDER BY order_id', id),
    );
    expect(read).toEqual({ rows: [{ order_id: 'x' }, { order_id: 'y' }], count: 2 });
  });

  test('a nested transaction of the ORM is a savepoint: its failure undoes only its own writes', async () => {
    const [outer, inner] = [notification(), notification()];
    await orm.transactions.transaction(async (tx) => {
      await orm.credit(tx, outer);
      await expect(
        orm.savepoint(tx, async (nested) => {
          await orm.credit(nested, inner);
          throw new Error('inner failed');
        }),
      ).rejects.toThrow('inner failed');
      // The outer transaction is still usable after the savepoint rolled back.
      const seen = await orm.transactions.query(
        tx,
        rows('SELECT 1 FROM ledger WHERE transaction_id = $1', outer.transaction_id),
      );
      expect(seen.count).toBe(1);
    });
    expect(await ledgerCount(outer.transaction_id)).toBe(1);
    expect(await ledgerCount(inner.transaction_id)).toBe(0);
  });

  test('a failing statement rejects, and the transaction around it rolls back', async () => {
    const n = notification();
    await expect(
      orm.transactions.transaction(async (tx) => {
        await orm.credit(tx, n);
        await orm.transactions.query(tx, rows('SELECT 1 / $1::int AS never', 0));
      }),
    ).rejects.toThrow(/division by zero/);
    expect(await ledgerCount(n.transaction_id)).toBe(0);
  });

  test("a failing statement's error carries PostgreSQL's code, where the store reads it", async () => {
    const missing = rows('SELECT * FROM no_such_table WHERE id = $1', 1);
    await expect(orm.transactions.execute!(missing)).rejects.toMatchObject({ code: '42P01' });
    await expect(
      orm.transactions.transaction((tx) => orm.transactions.query(tx, missing)),
    ).rejects.toMatchObject({
      code: '42P01',
    });
  });

  test('a listener that caught its own SQL error: the commit fails, with the reason in words', async () => {
    const n = notification();
    const key = `${n.transaction_id}:SUCCESSFUL`;
    await pool.query(
      `INSERT INTO ipn_inbox (key, transaction_id, state, record, status, attempts, lease_id, lease_until)
       VALUES ($1, $2, 'SUCCESSFUL', '{"n":1}'::jsonb, 'received', 1, 'lease-1', now() + interval '1 minute')`,
      [key, n.transaction_id],
    );
    const mark: Statement = {
      text: inboxSql('ipn_inbox').delivered,
      values: [key, 'lease-1'],
      returns: 'count',
    };
    const transaction = await openOrmTransaction(orm.transactions, key, mark, { explain: explainPostgres });
    await orm.credit(transaction.tx, n);
    await orm.transactions.query(transaction.tx, rows('SELECT 1 / 0')).catch(() => {}); // caught, and ignored
    await expect(transaction.commit()).rejects.toThrow(/PostgreSQL aborted the transaction/);
    expect(await ledgerCount(n.transaction_id)).toBe(0);
  });

  if (options.endsRefused) {
    const serve = servedRouters();
    test.each(['commit', 'rollback'] as const)(
      "a listener's tx.%s() is refused, with the fix in words: the attempt rolls back, is retried, and credits once",
      async (method) => {
        const ipn = ipnRouter({
          store: new PostgresStore({ pool, transactions: orm.transactions }),
          delivery: 'at-least-once',
          logger: quiet,
          retryDelayMs: 20,
          recoveryIntervalMs: 50,
        });
        const recorder = recordEvents(ipn);
        ipn.on('successful', async (n, { tx, attempt }) => {
          await orm.credit(tx as Tx, n);
          if (attempt === 1) await (tx as unknown as Record<typeof method, () => Promise<void>>)[method]();
        });
        const { post } = await serve(ipn);
        const n = notification();
        expect((await post(n)).status).toBe(200);
        await eventually(
          'delivered',
          async () => (await ledger.entryOf(`${n.transaction_id}:SUCCESSFUL`))?.status === 'delivered',
        );
        expect(await ledgerCount(n.transaction_id)).toBe(1);
        expect(recorder.of('error').map((event) => event.error.message)).toEqual([
          expect.stringMatching(
            new RegExp(`a listener cannot .* \\(tx\\.${method}\\(\\)\\).*throw from the listener`),
          ),
        ]);
      },
    );
  }

  describe("with the core's openOrmTransaction", () => {
    const sql = inboxSql('ipn_inbox');
    /** A received entry of `n`, leased by `leaseId`. */
    const leased = async (n: IpnNotification, leaseId: string) => {
      const key = `${n.transaction_id}:SUCCESSFUL`;
      await pool.query(
        `INSERT INTO ipn_inbox (key, transaction_id, state, record, status, attempts, lease_id, lease_until)
         VALUES ($1, $2, 'SUCCESSFUL', $3::jsonb, 'received', 1, $4, now() + interval '1 minute')`,
        [key, n.transaction_id, JSON.stringify(n), leaseId],
      );
      return key;
    };
    const mark = (key: string, leaseId: string): Statement => ({
      text: sql.delivered,
      values: [key, leaseId],
      returns: 'count',
    });

    test('the delivered mark commits together with what the listener wrote', async () => {
      const n = notification();
      const key = await leased(n, 'lease-1');
      const transaction = await openOrmTransaction(orm.transactions, key, mark(key, 'lease-1'));
      await orm.credit(transaction.tx, n);
      expect(await transaction.commit()).toBe('delivered');
      expect(await ledgerCount(n.transaction_id)).toBe(1);
      expect((await ledger.entryOf(key))?.status).toBe('delivered');
    });

    test("a lost lease: the mark changes no row, and the listener's write rolls back with it", async () => {
      const n = notification();
      const key = await leased(n, 'lease-of-another-attempt');
      const transaction = await openOrmTransaction(orm.transactions, key, mark(key, 'lease-1'));
      await orm.credit(transaction.tx, n);
      expect(await transaction.commit()).toBe('lost');
      expect(await ledgerCount(n.transaction_id)).toBe(0);
      expect((await ledger.entryOf(key))?.status).toBe('received');
    });

    test('a rolled back attempt: nothing the listener wrote lands, and the entry stays as it was', async () => {
      const n = notification();
      const key = await leased(n, 'lease-1');
      const transaction = await openOrmTransaction(orm.transactions, key, mark(key, 'lease-1'));
      await orm.credit(transaction.tx, n);
      await transaction.rollback();
      expect(await ledgerCount(n.transaction_id)).toBe(0);
      expect((await ledger.entryOf(key))?.status).toBe('received');
    });
  });

  return ledger;
}
