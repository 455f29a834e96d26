/**
 * drizzleTransactions checks the client out itself (onOwnCheckout): what it must keep of Drizzle's own
 * transaction, found holding in a hostile review — a failed COMMIT gives the client back and rejects with
 * PostgreSQL's error, deliveries at once on a pool of one wait their turn, a pool whose connect() rejects
 * rejects, and a db made with schema, casing and a logger keeps them inside the transaction.
 */
import { drizzle } from 'drizzle-orm/node-postgres';
import { sql } from 'drizzle-orm';
import { integer, pgTable, text } from 'drizzle-orm/pg-core';
import { Pool } from 'pg';
import { drizzleTransactions } from 'ipn-kit/orm';
import { databaseUrl, describeWithService } from '../../helpers/services.js';

jest.setTimeout(30_000);

const table = `own_checkout_${Math.random().toString(36).slice(2, 8)}`;
const items = pgTable(table, { id: integer('id').primaryKey(), someName: text(), ref: integer() });

describeWithService('PostgreSQL', 'drizzleTransactions on its own checkout', () => {
  let pool: Pool;
  const checkedOut = () => ({ checkedOut: pool.totalCount - pool.idleCount, waiting: pool.waitingCount });
  beforeAll(async () => {
    pool = new Pool({ connectionString: databaseUrl(), max: 1 });
    await pool.query(
      `CREATE TABLE ${table} (id int PRIMARY KEY, some_name text,
         ref int REFERENCES ${table}(id) DEFERRABLE INITIALLY DEFERRED)`,
    );
  });
  afterAll(async () => {
    await pool.query(`DROP TABLE IF EXISTS ${table}`);
    await pool.end();
  });

  test('a COMMIT refused (a deferred constraint) rejects with PostgreSQL’s error and gives the client back', async () => {
    const transactions = drizzleTransactions(drizzle({ client: pool }));
    const failed = await transactions
      .transaction(async (tx) => {
        await tx.execute(sql.raw(`INSERT INTO ${table} VALUES (1, 'a', 99)`));
      })
      .catch((error: unknown) => error);
    expect(failed).toMatchObject({ code: '23503' });
    expect(checkedOut()).toEqual({ checkedOut: 0, waiting: 0 });
    expect((await pool.query(`SELECT count(*)::int AS n FROM ${table}`)).rows).toEqual([{ n: 0 }]);
  });

  test('transactions at once on a pool of one each run, in turn', async () => {
    const transactions = drizzleTransactions(drizzle({ client: pool }));
    const done = await Promise.all(
      [10, 11, 12].map((id) =>
        transactions.transaction(async (tx) => {
          await tx.execute(sql.raw(`INSERT INTO ${table} (id) VALUES (${id})`));
          return id;
        }),
      ),
    );
    expect(done).toEqual([10, 11, 12]);
    expect(checkedOut()).toEqual({ checkedOut: 0, waiting: 0 });
    await pool.query(`DELETE FROM ${table}`);
  });

  test('schema, casing and logger of the db hold inside: relational queries, savepoints, tx.rollback()', async () => {
    const logged: string[] = [];
    const db = drizzle({
      client: pool,
      schema: { items },
      casing: 'snake_case',
      logger: { logQuery: (query) => logged.push(query) },
    });
    const transactions = drizzleTransactions(db);
    const found = await transactions.transaction(async (tx) => {
      await tx.insert(items).values({ id: 1, someName: 'kept' });
      await expect(
        tx.transaction(async (savepoint) => {
          await savepoint.insert(items).values({ id: 2, someName: 'undone' });
          savepoint.rollback();
        }),
      ).rejects.toThrow();
      return tx.query.items.findMany({ columns: { id: true, someName: true } });
    });
    expect(found).toEqual([{ id: 1, someName: 'kept' }]);
    expect(logged.some((query) => query.includes('"some_name"'))).toBe(true);
    await expect(
      transactions.transaction(async (tx) => {
        await tx.insert(items).values({ id: 3 });
        tx.rollback();
      }),
    ).rejects.toThrow();
    expect((await pool.query(`SELECT id FROM ${table} ORDER BY id`)).rows).toEqual([{ id: 1 }]);
    expect(checkedOut()).toEqual({ checkedOut: 0, waiting: 0 });
  });

  test('a pool whose connect() rejects: the transaction rejects with its error, the work never runs', async () => {
    const unreachable = new Pool({ connectionString: 'postgres://nobody@127.0.0.1:1/test', max: 1 });
    const work = jest.fn(() => Promise.resolve('ran'));
    await expect(
      drizzleTransactions(drizzle({ client: unreachable })).transaction(work),
    ).rejects.toMatchObject({
      code: 'ECONNREFUSED',
    });
    expect(work).not.toHaveBeenCalled();
    await unreachable.end();
  });
});
