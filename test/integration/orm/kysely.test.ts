import { runOrmScenarios } from '../../helpers/orm-scenarios.js';
import {
  CamelCasePlugin,
  Kysely,
  type MigrationProvider,
  PostgresDialect,
  sql,
  type Insertable,
  type Selectable,
} from 'kysely';
import { Pool } from 'pg';
import { PostgresStore } from 'ipn-kit/postgres';
import { kyselyTransactions } from 'ipn-kit/orm';
import type { Statement } from 'ipn-kit/orm';
import {
  deadNotifications,
  ipnKitTables,
  kyselyRouter,
  type Database,
  type IpnInboxExpectedTable,
  type IpnInboxTable,
  type LedgerTable,
  type OrdersTable,
} from '../../../examples/snippets/orm/kysely.js';
import { catalogOf } from '../../helpers/pg-catalog.js';
import { ledgerSchema } from '../../helpers/ledger-schema.js';
import {
  expectNothingCredited,
  insertOrder,
  orderOf,
  orderPayment,
  ORDERS,
} from '../../helpers/refused-payments.js';
import { ODD_SQL_TEXTS } from '../../helpers/odd-sql-texts.js';
import { servedRouters } from '../../helpers/servers.js';
import { databaseUrl, describeWithService, eventually } from '../../helpers/services.js';

jest.setTimeout(30_000);

const rows = (text: string, values: unknown[] = []): Statement => ({ text, values, returns: 'rows' });
const changes = (text: string, values: unknown[] = []): Statement => ({ text, values, returns: 'count' });

class Boom extends Error {}

describeWithService('PostgreSQL', 'kyselyTransactions: the contract, over PostgresDialect', () => {
  const schema = ledgerSchema('orm_kysely');
  let pool: Pool;
  let db: Kysely<Database>;
  let transactions: ReturnType<typeof kyselyTransactions<Kysely<Database>>>;
  beforeAll(() => {
    pool = schema.pool();
    // Not destroyed: that would end the pool, which ledgerSchema ends.
    db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
    transactions = kyselyTransactions(db);
  });
  const id = () => `tx-${String(Math.random()).slice(2)}`;
  const ledgerCount = async (transactionId: string) =>
    (await pool.query('SELECT count(*)::int AS n FROM ledger WHERE transaction_id = $1', [transactionId]))
      .rows[0].n as number;

  test('what a listener writes through tx commits when the work resolves, and the work’s value comes back', async () => {
    const t = id();
    const value = await transactions.transaction(async (tx) => {
      await tx.insertInto('ledger').values({ transaction_id: t, order_id: 'o', amount: 10 }).execute();
      return 'done';
    });
    expect(value).toBe('done');
    expect(await ledgerCount(t)).toBe(1);
  });

  test('a work that throws rolls back what tx wrote, and rejects with its error', async () => {
    const t = id();
    const thrown = transactions.transaction(async (tx) => {
      await tx.insertInto('ledger').values({ transaction_id: t, order_id: 'o', amount: 10 }).execute();
      await transactions.query(tx, changes('INSERT INTO ledger VALUES ($1, $2, 1)', [t, 'p']));
      throw new Boom('listener failed');
    });
    await expect(thrown).rejects.toBeInstanceOf(Boom);
    expect(await ledgerCount(t)).toBe(0);
  });

  test('query runs inside tx: it sees the transaction’s writes, which another connection does not', async () => {
    const t = id();
    await transactions.transaction(async (tx) => {
      await tx.insertInto('ledger').values({ transaction_id: t, order_id: 'o', amount: 10 }).execute();
      const inside = await transactions.query(
        tx,
        rows('SELECT order_id, amount FROM ledger WHERE transaction_id = $1', [t]),
      );
      expect(inside).toEqual({ rows: [{ order_id: 'o', amount: '10' }], count: 1 });
      expect(await ledgerCount(t)).toBe(0);
    });
    expect(await ledgerCount(t)).toBe(1);
  });

  test('count is the rows a statement changed (a number, not Kysely’s bigint); rows what it returned', async () => {
    const t = id();
    await transactions.transaction(async (tx) => {
      const inserted = await transactions.query(
        tx,
        rows("INSERT INTO ledger VALUES ($1, 'a', 1), ($1, 'b', 2), ($1, 'c', 3) RETURNING order_id", [t]),
      );
      expect(inserted.count).toBe(3);
      expect(inserted.rows.map((row) => row.order_id).sort()).toEqual(['a', 'b', 'c']);
      const updated = await transactions.query(
        tx,
        changes("UPDATE ledger SET amount = 0 WHERE transaction_id = $1 AND order_id <> 'a'", [t]),
      );
      expect(updated).toEqual({ rows: [], count: 2 });
      const none = await transactions.query(
        tx,
        changes('DELETE FROM ledger WHERE transaction_id = $1', ['x']),
      );
      expect(none.count).toBe(0);
      const selected = await transactions.query(tx, rows('SELECT 1 AS one WHERE false'));
      expect(selected).toEqual({ rows: [], count: 0 });
    });
  });

  test.each(ODD_SQL_TEXTS)(
    'a value is bound as a parameter, never spliced into the text: %j',
    async (value) => {
      const { rows: back } = await transactions.transaction((tx) =>
        transactions.query(
          tx,
          rows('SELECT $1::text AS v, $2::text[] AS a, length($1) AS n', [value, [value]]),
        ),
      );
      expect(back).toEqual([{ v: value, a: [value], n: [...value].length }]);
      const t = id();
      await transactions.execute!(changes('INSERT INTO ledger VALUES ($1, $2, NULL)', [t, value]));
      const stored = await db
        .selectFrom('ledger')
        .select('order_id')
        .where('transaction_id', '=', t)
        .execute();
      expect(stored).toEqual([{ order_id: value }]);
    },
  );

  test('execute runs on its own, outside any transaction: its write is visible at once', async () => {
    const t = id();
    const result = await transactions.execute!(changes('INSERT INTO ledger VALUES ($1, $2, 5)', [t, 'o']));
    expect(result.count).toBe(1);
    expect(await ledgerCount(t)).toBe(1);
  });

  test('Kysely has no nested transaction: tx.transaction() throws, as in any Kysely transaction', async () => {
    const t = id();
    const thrown = transactions.transaction(async (tx) => {
      await tx.insertInto('ledger').values({ transaction_id: t, order_id: 'o', amount: 1 }).execute();
      (tx as unknown as Kysely<Database>).transaction();
    });
    await expect(thrown).rejects.toThrow(/transaction method for a Transaction is not supported/);
    expect(await ledgerCount(t)).toBe(0);
  });

  // Kysely 0.28 gives a Transaction its instance's startTransaction(): a controlled transaction on the
  // delivery's connection (its BEGIN only warns there), whose commit() committed the listener's writes without
  // the delivered mark, and whose writes after it landed on their own: the retry credited again.
  test('tx.startTransaction() is refused, saying what to do instead; the listener’s writes roll back', async () => {
    const t = id();
    const thrown = transactions.transaction(async (tx) => {
      await tx.insertInto('ledger').values({ transaction_id: t, order_id: 'o', amount: 1 }).execute();
      const controlled = await tx.startTransaction().execute();
      await controlled.commit().execute();
    });
    await expect(thrown).rejects.toThrow(TypeError);
    await expect(thrown).rejects.toThrow(
      /kyselyTransactions: a listener cannot begin a transaction of its own on the delivery's transaction \(tx\.startTransaction\(\)\).*Write through tx itself.*throw from the listener/s,
    );
    expect(await ledgerCount(t)).toBe(0);
  });

  test('tx.connection() is refused in the same words', async () => {
    const thrown = transactions.transaction(async (tx) => {
      await tx.selectNoFrom((eb) => eb.val(1).as('one')).execute();
      tx.connection();
    });
    await expect(thrown).rejects.toThrow(
      /kyselyTransactions: a listener cannot take the delivery's connection out of its transaction \(tx\.connection\(\)\).*Write through tx itself/s,
    );
  });

  // Kysely's withPlugin, withoutPlugins, withSchema and withTables each make a new Transaction object.
  test('a Transaction made of tx (withoutPlugins, withPlugin, withSchema, withTables, and of those) refuses too, and writes in the delivery', async () => {
    const t = id();
    const refusals: string[] = [];
    await transactions.transaction(async (tx) => {
      const derived = [
        tx.withoutPlugins(),
        tx.withPlugin(new CamelCasePlugin()),
        tx.withSchema('public'),
        tx.withTables<{ other: { id: string } }>(),
        tx.withoutPlugins().withPlugin(new CamelCasePlugin()).withSchema('public').withoutPlugins(),
      ];
      for (const instance of derived) {
        for (const take of [() => instance.startTransaction(), () => instance.connection()]) {
          try {
            take();
          } catch (error) {
            refusals.push(error instanceof TypeError ? error.message.split(':')[0]! : String(error));
          }
        }
      }
      await tx
        .withoutPlugins()
        .withPlugin(new CamelCasePlugin())
        .insertInto('ledger')
        .values({ transaction_id: t, order_id: 'o', amount: 1 })
        .execute();
      expect(await ledgerCount(t)).toBe(0); // in the delivery's transaction, not committed on its own
    });
    expect(refusals).toEqual(Array(10).fill('kyselyTransactions'));
    expect(await ledgerCount(t)).toBe(1);
  });

  test('ipn-kit’s statements skip the instance’s plugins: a CamelCasePlugin renames the listener’s columns, not the store’s', async () => {
    const camel = db.withPlugin(new CamelCasePlugin());
    const withCamel = kyselyTransactions(camel);
    const t = id();
    await withCamel.execute!(changes("INSERT INTO ledger VALUES ($1, 'o', 1)", [t]));
    await withCamel.transaction(async (tx) => {
      const mine = await withCamel.query(
        tx,
        rows('SELECT order_id FROM ledger WHERE transaction_id = $1', [t]),
      );
      expect(mine.rows).toEqual([{ order_id: 'o' }]);
      const theirs = await sql<{
        orderId: string;
      }>`SELECT order_id FROM ledger WHERE transaction_id = ${t}`.execute(tx);
      expect(theirs.rows).toEqual([{ orderId: 'o' }]);
    });
    const outside = await withCamel.execute!(
      rows('SELECT order_id FROM ledger WHERE transaction_id = $1', [t]),
    );
    expect(outside.rows).toEqual([{ order_id: 'o' }]);
  });

  test('a statement that fails rejects with PostgreSQL’s own error; a failed statement aborts the transaction', async () => {
    await expect(
      transactions.execute!(changes('INSERT INTO no_such_table VALUES ($1)', ['x'])),
    ).rejects.toMatchObject({ code: '42P01' });
    const t = id();
    const thrown = transactions.transaction(async (tx) => {
      await tx.insertInto('ledger').values({ transaction_id: t, order_id: 'o', amount: 1 }).execute();
      await transactions.query(tx, changes('SELECT 1/0')).catch(() => {});
      return transactions.query(tx, changes('UPDATE ledger SET amount = 2 WHERE transaction_id = $1', [t]));
    });
    await expect(thrown).rejects.toMatchObject({ code: '25P02' });
    expect(await ledgerCount(t)).toBe(0);
  });

  test('a Kysely query of the inbox reads the rows ipn-kit wrote, with the Database interface’s types', async () => {
    const t = id();
    await transactions.execute!(
      changes(
        "INSERT INTO ipn_inbox (key, transaction_id, state, record, status) VALUES ($1, $2, 'SUCCESSFUL', $3::jsonb, 'received')",
        [`${t}:SUCCESSFUL`, t, JSON.stringify({ amount: 10 })],
      ),
    );
    const found = await transactions.transaction((tx) =>
      tx.selectFrom('ipn_inbox').selectAll().where('transaction_id', '=', t).execute(),
    );
    expect(found).toEqual([
      expect.objectContaining({
        key: `${t}:SUCCESSFUL`,
        record: { amount: 10 },
        status: 'received',
        attempts: 0,
        received_at: expect.any(Date),
        delivered_at: null,
      }),
    ]);
  });

  test.each([null, undefined, 'db', {}, { transaction: () => {} }, new Map()])(
    'kyselyTransactions(%p) throws a TypeError that says what it expected',
    (value) => {
      expect(() => kyselyTransactions(value as never)).toThrow(
        /^kyselyTransactions: expected a Kysely instance \(new Kysely\(\{ dialect \}\)\)/,
      );
    },
  );
});

/**
 * A table interface's columns as TypeScript sees them: whether a selected value may be null, and whether an
 * insert may leave it out. Written out below for each table, this type makes tsc check each literal, so the
 * test compares the interface itself (not a copy) with PostgreSQL's catalog.
 */
type Shape<T> = {
  [K in keyof Selectable<T>]-?: {
    nullable: null extends Selectable<T>[K] ? true : false;
    optional: object extends Pick<Insertable<T>, K & keyof Insertable<T>> ? true : false;
  };
};
const required = { nullable: false, optional: false } as const;
const generated = { nullable: false, optional: true } as const;
const nullable = { nullable: true, optional: true } as const;

const inbox: Shape<IpnInboxTable> = {
  key: required,
  transaction_id: required,
  state: required,
  record: required,
  status: required,
  attempts: generated,
  last_error: nullable,
  received_at: generated,
  updated_at: generated,
  next_attempt_at: generated,
  delivered_at: nullable,
  lease_id: nullable,
  lease_until: nullable,
};
const expected: Shape<IpnInboxExpectedTable> = {
  transaction_id: required,
  custom_data: nullable,
  amount: nullable,
  expected_at: required,
  due_at: required,
  attempts: generated,
  account: nullable,
};
const ledger: Shape<LedgerTable> = { transaction_id: required, order_id: required, amount: nullable };
const orders: Shape<OrdersTable> = {
  id: required,
  transaction_id: required,
  amount: required,
  paid_at: nullable,
};

describeWithService('PostgreSQL', 'the Kysely Database interface: what store.migrate() made', () => {
  const schema = ledgerSchema('orm_kysely_tables', [ORDERS]);

  test.each([
    ['ipn_inbox', inbox],
    ['ipn_inbox_expected', expected],
    ['ledger', ledger],
    ['orders', orders],
  ] as const)(
    '%s: the same columns, nullable where the table’s are, optional on insert where they have a default',
    async (table, shape) => {
      const { columns } = await catalogOf(schema.pool(), table);
      expect(columns.map((column) => column.name)).toEqual(Object.keys(shape));
      for (const column of columns) {
        expect({ [column.name]: shape[column.name as keyof typeof shape] }).toEqual({
          [column.name]: { nullable: !column.notNull, optional: !column.notNull || column.default !== null },
        });
      }
    },
  );
});

describeWithService('PostgreSQL', 'the documented Kysely snippets (examples/snippets/orm/kysely.ts)', () => {
  const schema = ledgerSchema('orm_kysely_snippet', [ORDERS]);
  const serve = servedRouters();

  test('kyselyRouter: a notification posted twice is credited once, through tx', async () => {
    const { post } = await serve(kyselyRouter(schema.pool()));
    const payload = orderPayment();
    await insertOrder(schema.pool(), orderOf(payload));
    expect((await post(payload)).status).toBe(200);
    expect((await post(payload)).status).toBe(200);
    await eventually(
      'delivered',
      async () => (await schema.entryOf(schema.keyOf(payload)))?.status === 'delivered',
    );
    expect(await schema.ledgerOf(payload.transaction_id)).toEqual([{ order_id: payload.custom_data }]);
    await expectNothingCredited(schema.pool(), post);
  });

  test("deadNotifications: the dead entries received since a date, through the inbox's declaration", async () => {
    const t = `dead-${String(Math.random()).slice(2)}`;
    await schema
      .pool()
      .query(
        "INSERT INTO ipn_inbox (key, transaction_id, state, record, status, attempts, last_error) VALUES ($1, $2, 'SUCCESSFUL', '{\"n\":1}', 'dead', 8, 'gave up')",
        [`${t}:SUCCESSFUL`, t],
      );
    const dead = await deadNotifications(
      new Kysely<Database>({ dialect: new PostgresDialect({ pool: schema.pool() }) }),
      new Date(Date.now() - 60_000),
    );
    expect(dead).toContainEqual({ key: `${t}:SUCCESSFUL`, attempts: 8, last_error: 'gave up' });
    expect(
      await deadNotifications(
        new Kysely<Database>({ dialect: new PostgresDialect({ pool: schema.pool() }) }),
        new Date(Date.now() + 60_000),
      ),
    ).toEqual([]);
  });
});

describeWithService('PostgreSQL', 'a store through Kysely alone (no pool): migrate()', () => {
  const schema = `orm_kysely_alone_${process.pid}_${Date.now() % 100_000}`;
  const reference = ledgerSchema('orm_kysely_reference');
  let pool: Pool;
  beforeAll(async () => {
    pool = new Pool({ connectionString: databaseUrl(), max: 2, options: `-c search_path=${schema}` });
    pool.on('error', () => {});
    await pool.query(`CREATE SCHEMA ${schema}`);
  });
  afterAll(async () => {
    await pool.query(`DROP SCHEMA ${schema} CASCADE`);
    await pool.end();
  });

  test('the documented Kysely migration makes the same tables, and its down drops them', async () => {
    const other = `${schema}_migrator`;
    const migrating = new Pool({
      connectionString: databaseUrl(),
      max: 1,
      options: `-c search_path=${other}`,
    });
    migrating.on('error', () => {});
    const db = new Kysely<unknown>({ dialect: new PostgresDialect({ pool: migrating }) });
    try {
      await sql.raw(`CREATE SCHEMA ${other}`).execute(db);
      // The migration's up and down as Kysely's Migrator runs them, each in a transaction. Not through the
      // Migrator itself: it reads every table of the database first (its introspector's
      // pg_get_serial_sequence on each), which fails with "relation ... does not exist" when another test
      // drops a table of its own at that moment (seen in a parallel run). The Migrator taking the object is
      // checked by the types (provider below).
      const provider: MigrationProvider = {
        getMigrations: () => Promise.resolve({ '2026_11_25_ipn_kit': ipnKitTables }),
      };
      const [migration] = Object.values(await provider.getMigrations());
      await db.transaction().execute((trx) => migration!.up(trx));
      for (const table of ['ipn_inbox', 'ipn_inbox_expected']) {
        const made = await catalogOf(migrating, table);
        const expected = await catalogOf(reference.pool(), table);
        const unqualified = (catalog: typeof made, name: string) =>
          JSON.parse(JSON.stringify(catalog).replaceAll(`${name}.`, '')) as typeof made;
        expect(unqualified(made, other)).toEqual(unqualified(expected, reference.schema));
      }
      await new PostgresStore({ pool: migrating }).migrate(); // finds them: nothing to do
      await db.transaction().execute((trx) => migration!.down!(trx));
      const { rows } = await migrating.query(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_name LIKE 'ipn_inbox%'",
        [other],
      );
      expect(rows).toEqual([]);
    } finally {
      await sql.raw(`DROP SCHEMA IF EXISTS ${other} CASCADE`).execute(db);
      await db.destroy();
    }
  });

  test('makes the tables a pool-run migrate() makes (its several statements, one by one through Kysely)', async () => {
    const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
    const store = new PostgresStore({ transactions: kyselyTransactions(db) });
    await store.migrate();
    await store.migrate(); // idempotent
    for (const table of ['ipn_inbox', 'ipn_inbox_expected']) {
      const made = await catalogOf(pool, table);
      const expected = await catalogOf(reference.pool(), table);
      const unqualified = (catalog: typeof made, name: string) =>
        JSON.parse(JSON.stringify(catalog).replaceAll(`${name}.`, '')) as typeof made;
      expect(unqualified(made, schema)).toEqual(unqualified(expected, reference.schema));
    }
  });
});

runOrmScenarios(require.resolve('../../fixtures/orm/kysely.ts'));
