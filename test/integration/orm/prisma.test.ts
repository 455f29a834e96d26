import { PrismaPg } from '@prisma/adapter-pg';
import type { Pool } from 'pg';
import { prismaTransactions } from 'ipn-kit/orm';
import { PrismaClient } from '../../fixtures/orm/prisma/generated/client.js';
import { ledgerSchema } from '../../helpers/ledger-schema.js';
import { describeWithService } from '../../helpers/services.js';

/**
 * prismaTransactions against the real PostgreSQL, through Prisma 7 and its pg adapter sharing the test's
 * pool: the contract a store relies on (the ORM's own transaction, statements inside and outside it, rows
 * and counts as pg gives them), checked by what lands in the database.
 */

jest.setTimeout(30_000);

describeWithService('PostgreSQL', 'prismaTransactions (Prisma 7, @prisma/adapter-pg)', () => {
  // The fixture's Ledger model needs an identifier: the harness's ledger gets an `id serial`.
  const ledger = ledgerSchema('ipn_prisma', ['ALTER TABLE ledger ADD COLUMN id serial PRIMARY KEY']);
  let pool: Pool;
  let prisma: PrismaClient;
  beforeAll(() => {
    pool = ledger.pool();
    prisma = new PrismaClient({ adapter: new PrismaPg(pool, { schema: ledger.schema }) });
  });
  afterAll(() => prisma?.$disconnect());

  const unique = (prefix: string) => `${prefix}-${process.pid}-${String(Math.random()).slice(2, 10)}`;
  const ledgerRows = async (transactionId: string) =>
    (
      await pool.query('SELECT order_id FROM ledger WHERE transaction_id = $1 ORDER BY order_id', [
        transactionId,
      ])
    ).rows as Array<{ order_id: string }>;
  const credit = (transactionId: string, orderId: string) => ({
    data: { transactionId, orderId, amount: '5000' },
  });

  test('the transaction commits what the work wrote through tx, and resolves its result', async () => {
    const id = unique('commit');
    const result = await prismaTransactions(prisma).transaction(async (tx) => {
      await tx.ledger.create(credit(id, 'o-1'));
      return 'done';
    });

    expect(result).toBe('done');
    expect(await ledgerRows(id)).toEqual([{ order_id: 'o-1' }]);
  });

  test('a work that throws rolls back what it wrote, and the transaction rejects with its error', async () => {
    const id = unique('rollback');
    const failure = new Error('the listener failed');
    const attempt = prismaTransactions(prisma).transaction(async (tx) => {
      await tx.ledger.create(credit(id, 'o-1'));
      throw failure;
    });

    await expect(attempt).rejects.toBe(failure);
    expect(await ledgerRows(id)).toEqual([]);
  });

  test('query runs inside the transaction: it sees its writes, which others do not see before the commit', async () => {
    const id = unique('inside');
    const transactions = prismaTransactions(prisma);
    const seen = await transactions.transaction(async (tx) => {
      await tx.ledger.create(credit(id, 'o-1'));
      const inside = await transactions.query(tx, {
        text: 'SELECT order_id FROM ledger WHERE transaction_id = $1',
        values: [id],
        returns: 'rows',
      });
      return { inside, outside: await ledgerRows(id) };
    });

    expect(seen.inside).toEqual({ rows: [{ order_id: 'o-1' }], count: 1 });
    expect(seen.outside).toEqual([]);
    expect(await ledgerRows(id)).toEqual([{ order_id: 'o-1' }]);
  });

  test("a statement's count: the rows a write changed, or the rows a query returned", async () => {
    const id = unique('count');
    const transactions = prismaTransactions(prisma);
    const counts = await transactions.transaction(async (tx) => {
      await tx.ledger.createMany({ data: [credit(id, 'o-1').data, credit(id, 'o-2').data] });
      const update = { text: 'UPDATE ledger SET amount = $2 WHERE transaction_id = $1', values: [id, 1] };
      const changed = await transactions.query(tx, { ...update, returns: 'count' });
      const none = await transactions.query(tx, { ...update, values: ['absent', 1], returns: 'count' });
      const returned = await transactions.query(tx, {
        text: 'UPDATE ledger SET amount = $2 WHERE transaction_id = $1 RETURNING order_id',
        values: [id, 2],
        returns: 'rows',
      });
      return { changed, none, returned: returned.count };
    });

    expect(counts).toEqual({ changed: { rows: [], count: 2 }, none: { rows: [], count: 0 }, returned: 2 });
  });

  test('execute runs a statement on its own, outside any transaction', async () => {
    const id = unique('execute');
    const transactions = prismaTransactions(prisma);
    const inserted = await transactions.execute!({
      text: "INSERT INTO ledger (transaction_id, order_id, amount) VALUES ($1, 'o-1', 1), ($1, 'o-2', 2)",
      values: [id],
      returns: 'count',
    });
    const read = await transactions.execute!({
      text: 'SELECT order_id FROM ledger WHERE transaction_id = $1 ORDER BY order_id',
      values: [id],
      returns: 'rows',
    });

    expect(inserted).toEqual({ rows: [], count: 2 });
    expect(read).toEqual({ rows: [{ order_id: 'o-1' }, { order_id: 'o-2' }], count: 2 });
  });

  test('a nested tx.$transaction is a savepoint: its rollback undoes only its own writes', async () => {
    const id = unique('nested');
    await prismaTransactions(prisma).transaction(async (tx) => {
      await tx.ledger.create(credit(id, 'outer'));
      await expect(
        tx.$transaction(async (inner) => {
          await inner.ledger.create(credit(id, 'inner'));
          throw new Error('the inner part fails');
        }),
      ).rejects.toThrow('the inner part fails');
    });

    expect(await ledgerRows(id)).toEqual([{ order_id: 'outer' }]);
  });

  test('rows come as pg gives them: a bigint and a numeric as their exact text, jsonb parsed, timestamptz a Date', async () => {
    const { rows } = await prismaTransactions(prisma).execute!({
      text: `SELECT count(*) AS n, 12345678901234567890.125::numeric AS amount, '{"a":[1]}'::jsonb AS record,
        '2026-01-01T00:00:00.123Z'::timestamptz AS at, 3::integer AS attempts, NULL::text AS last_error`,
      values: [],
      returns: 'rows',
    });

    expect(rows).toEqual([
      {
        n: '1',
        amount: '12345678901234567890.125',
        record: { a: [1] },
        at: new Date('2026-01-01T00:00:00.123Z'),
        attempts: 3,
        last_error: null,
      },
    ]);
  });

  test("a Date parameter keeps its instant when the session's time zone is not UTC", async () => {
    // Prisma's pg adapter sends a Date without its offset (prisma/orm#28629): the adapter sends ISO text.
    const tokyo = ledger.newPool(1);
    await tokyo.query("SET TimeZone = 'Asia/Tokyo'");
    const tokyoPrisma = new PrismaClient({ adapter: new PrismaPg(tokyo, { schema: ledger.schema }) });
    try {
      const at = new Date('2026-01-01T00:00:00.123Z');
      const { rows } = await prismaTransactions(tokyoPrisma).execute!({
        text: 'SELECT to_char($1::timestamptz AT TIME ZONE \'UTC\', \'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"\') AS utc',
        values: [at],
        returns: 'rows',
      });

      expect(rows).toEqual([{ utc: '2026-01-01T00:00:00.123Z' }]);
    } finally {
      await tokyoPrisma.$disconnect();
    }
  });

  test("each transaction gets a 60 s timeout and a 10 s maxWait unless told otherwise, Prisma's own options", async () => {
    const given: unknown[] = [];
    const recording = new Proxy(prisma, {
      get(target, property, receiver) {
        if (property !== '$transaction') return Reflect.get(target, property, receiver) as unknown;
        return (fn: unknown, options: unknown) => {
          given.push(options);
          return target.$transaction(fn as Parameters<PrismaClient['$transaction']>[0], options as never);
        };
      },
    });
    await prismaTransactions(recording).transaction(() => Promise.resolve());
    await prismaTransactions(recording, { timeout: 120_000, isolationLevel: 'Serializable' }).transaction(
      async (tx) => {
        const [level] = await tx.$queryRawUnsafe<Array<{ transaction_isolation: string }>>(
          'SHOW transaction_isolation',
        );
        expect(level?.transaction_isolation).toBe('serializable');
      },
    );

    expect(given).toEqual([
      { timeout: 60_000, maxWait: 10_000 },
      { timeout: 120_000, maxWait: 10_000, isolationLevel: 'Serializable' },
    ]);
  });
});

describe('prismaTransactions refuses what is not a PrismaClient, at construction', () => {
  test.each([
    [undefined, /expected a PrismaClient \(new PrismaClient\(\{ adapter \}\)\), got undefined/],
    [{ query: () => {} }, /got an object without \$transaction, \$queryRawUnsafe, \$executeRawUnsafe/],
    [PrismaClient, /got a function: pass an instance, new PrismaClient\(\{ adapter \}\), not the class/],
  ])('%p', (value, message) => {
    expect(() => prismaTransactions(value as never)).toThrow(TypeError);
    expect(() => prismaTransactions(value as never)).toThrow(message);
  });

  const client = { $transaction() {}, $queryRawUnsafe() {}, $executeRawUnsafe() {} } as never;
  test.each([
    [{ timeout: 0 }, 'timeout must be a positive number of milliseconds, got 0'],
    [{ maxWait: Number.NaN }, 'maxWait must be a positive number of milliseconds, got NaN'],
    [{ isolationLevel: 'SERIALIZABLE' }, 'isolationLevel must be one of ReadUncommitted, ReadCommitted'],
    [null, 'options must be an object, got null'],
  ])('options %p', (options, message) => {
    expect(() => prismaTransactions(client, options as never)).toThrow(TypeError);
    expect(() => prismaTransactions(client, options as never)).toThrow(message);
  });
});
