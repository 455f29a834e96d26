import { runOrmScenarios } from '../../helpers/orm-scenarios.js';
import { drizzle } from 'drizzle-orm/node-postgres';
import { count, eq, sql } from 'drizzle-orm';
import type { Socket } from 'node:net';
import { Client, Pool } from 'pg';
import { PostgresStore } from 'ipn-kit/postgres';
import { drizzleTransactions } from 'ipn-kit/orm';
import type { Statement } from 'ipn-kit/orm';
import { getTableConfig, PgDialect, type PgTable } from 'drizzle-orm/pg-core';
import {
  deadNotifications,
  drizzleRouter,
  ipnInbox,
  ipnInboxAudit,
  ipnInboxClaims,
  ipnInboxControl,
  ipnInboxExpected,
  ipnInboxSchema,
  ipnInboxStates,
  ledger,
} from '../../../examples/snippets/orm/drizzle.js';
import { catalogOf, inboxTablesIn } from '../../helpers/pg-catalog.js';
import { ledgerSchema } from '../../helpers/ledger-schema.js';
import {
  expectNothingCredited,
  insertOrder,
  orderOf,
  orderPayment,
  ORDERS,
} from '../../helpers/refused-payments.js';
import { servedRouters } from '../../helpers/servers.js';
import { databaseUrl, describeWithService, eventually } from '../../helpers/services.js';
import { ODD_SQL_TEXTS } from '../../helpers/odd-sql-texts.js';

jest.setTimeout(30_000);

const rows = (text: string, values: unknown[] = []): Statement => ({ text, values, returns: 'rows' });
const changes = (text: string, values: unknown[] = []): Statement => ({ text, values, returns: 'count' });

class Boom extends Error {}

describeWithService('PostgreSQL', 'drizzleTransactions: the contract, over node-postgres', () => {
  const schema = ledgerSchema('orm_drizzle');
  let pool: Pool;
  let db: ReturnType<typeof drizzle>;
  let transactions: ReturnType<typeof drizzleTransactions<typeof db>>;
  beforeAll(() => {
    pool = schema.pool();
    db = drizzle(pool);
    transactions = drizzleTransactions(db);
  });
  const id = () => `tx-${String(Math.random()).slice(2)}`;
  const ledgerCount = async (transactionId: string) =>
    (await pool.query('SELECT count(*)::int AS n FROM ledger WHERE transaction_id = $1', [transactionId]))
      .rows[0].n as number;

  test('what a listener writes through tx commits when the work resolves, and the work’s value comes back', async () => {
    const t = id();
    const value = await transactions.transaction(async (tx) => {
      await tx.insert(ledger).values({ transactionId: t, orderId: 'o', amount: '10' });
      return 'done';
    });
    expect(value).toBe('done');
    expect(await ledgerCount(t)).toBe(1);
  });

  test('a work that throws rolls back what tx wrote, and rejects with its error', async () => {
    const t = id();
    const thrown = transactions.transaction(async (tx) => {
      await tx.insert(ledger).values({ transactionId: t, orderId: 'o', amount: '10' });
      await transactions.query(tx, changes('INSERT INTO ledger VALUES ($1, $2, 1)', [t, 'p']));
      throw new Boom('listener failed');
    });
    await expect(thrown).rejects.toBeInstanceOf(Boom);
    expect(await ledgerCount(t)).toBe(0);
  });

  test('query runs inside tx: it sees the transaction’s writes, which another connection does not', async () => {
    const t = id();
    await transactions.transaction(async (tx) => {
      await tx.insert(ledger).values({ transactionId: t, orderId: 'o', amount: '10' });
      const inside = await transactions.query(
        tx,
        rows('SELECT order_id, amount FROM ledger WHERE transaction_id = $1', [t]),
      );
      expect(inside).toEqual({ rows: [{ order_id: 'o', amount: '10' }], count: 1 });
      expect(await ledgerCount(t)).toBe(0);
    });
    expect(await ledgerCount(t)).toBe(1);
  });

  test('count is the rows a statement changed; rows what it returned', async () => {
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
      const [stored] = await db
        .select({ orderId: ledger.orderId })
        .from(ledger)
        .where(eq(ledger.transactionId, t));
      expect(stored?.orderId).toBe(value);
    },
  );

  test('values of other types bind as pg binds them: numbers, null, dates, JSON text', async () => {
    const at = new Date('2026-01-02T03:04:05.678Z');
    const { rows: back } = await transactions.execute!(
      rows('SELECT $1::int AS i, $2::text AS z, $3::timestamptz = $4::timestamptz AS same, $5::jsonb AS j', [
        42,
        null,
        at,
        '2026-01-02T03:04:05.678Z',
        JSON.stringify({ a: "it's" }),
      ]),
    );
    expect(back).toEqual([{ i: 42, z: null, same: true, j: { a: "it's" } }]);
  });

  test('execute runs on its own, outside any transaction: its write is visible at once', async () => {
    const t = id();
    const result = await transactions.execute!(changes('INSERT INTO ledger VALUES ($1, $2, 5)', [t, 'o']));
    expect(result.count).toBe(1);
    expect(await ledgerCount(t)).toBe(1);
  });

  test('a tx.transaction inside is a savepoint: its rollback keeps the outer writes, which commit', async () => {
    const t = id();
    await transactions.transaction(async (tx) => {
      await tx.insert(ledger).values({ transactionId: t, orderId: 'outer', amount: '1' });
      await expect(
        tx.transaction(async (nested) => {
          await nested.insert(ledger).values({ transactionId: t, orderId: 'nested', amount: '2' });
          throw new Boom('nested failed');
        }),
      ).rejects.toBeInstanceOf(Boom);
      const seen = await transactions.query(
        tx,
        rows('SELECT order_id FROM ledger WHERE transaction_id = $1', [t]),
      );
      expect(seen.rows).toEqual([{ order_id: 'outer' }]);
    });
    expect(await schema.ledgerOf(t)).toEqual([{ order_id: 'outer' }]);
  });

  test('a statement that fails rejects with PostgreSQL’s own error (its code), without the values in the message', async () => {
    const secret = 'customer-phone-0700000000';
    const failed = transactions.execute!(changes('INSERT INTO no_such_table VALUES ($1)', [secret]));
    await expect(failed).rejects.toMatchObject({ code: '42P01' });
    await expect(failed).rejects.not.toThrow(secret);
  });

  test('a failed statement leaves the transaction aborted: the work rejects, Drizzle rolls back', async () => {
    const t = id();
    const thrown = transactions.transaction(async (tx) => {
      await tx.insert(ledger).values({ transactionId: t, orderId: 'o', amount: '1' });
      await transactions.query(tx, changes('SELECT 1/0')).catch(() => {});
      return transactions.query(tx, changes('UPDATE ledger SET amount = 2 WHERE transaction_id = $1', [t]));
    });
    await expect(thrown).rejects.toMatchObject({ code: '25P02' });
    expect(await ledgerCount(t)).toBe(0);
  });

  test('options.config is the config of each db.transaction: the isolation level', async () => {
    const serializable = drizzleTransactions(db, { config: { isolationLevel: 'serializable' } });
    const level = await serializable.transaction((tx) =>
      serializable.query(tx, rows('SELECT current_setting($1) AS level', ['transaction_isolation'])),
    );
    expect(level.rows).toEqual([{ level: 'serializable' }]);
    const plain = await transactions.transaction((tx) =>
      transactions.query(tx, rows('SELECT current_setting($1) AS level', ['transaction_isolation'])),
    );
    expect(plain.rows).toEqual([{ level: 'read committed' }]);
  });

  test('a Drizzle query of the inbox through tx reads the rows ipn-kit wrote', async () => {
    const t = id();
    await transactions.execute!(
      changes(
        "INSERT INTO ipn_inbox (key, transaction_id, state, record, status) VALUES ($1, $2, 'SUCCESSFUL', $3::jsonb, 'received')",
        [`${t}:SUCCESSFUL`, t, JSON.stringify({ amount: 10 })],
      ),
    );
    const found = await transactions.transaction((tx) =>
      tx.select().from(ipnInbox).where(eq(ipnInbox.transactionId, t)),
    );
    expect(found).toEqual([
      expect.objectContaining({
        key: `${t}:SUCCESSFUL`,
        state: 'SUCCESSFUL',
        record: { amount: 10 },
        status: 'received',
        attempts: 0,
        receivedAt: expect.any(Date),
        deliveredAt: null,
      }),
    ]);
    const [{ n }] = (await db
      .select({ n: count() })
      .from(ipnInbox)
      .where(sql`${ipnInbox.key} = ${`${t}:SUCCESSFUL`}`)) as [{ n: number }];
    expect(n).toBe(1);
  });

  // Drizzle (node-postgres, neon-serverless) sends its BEGIN outside the try whose finally releases the
  // client it took from the pool: when that BEGIN fails, the client stays checked out for good. Behind a
  // transaction-mode pooler a connection dropped at that moment (a restart, a pooler's disconnect) leaked
  // one per occurrence, until the pool was exhausted and pool.end() never resolved.
  test.each([
    [
      'the connection breaks before the BEGIN',
      (pool: Pool) =>
        pool.once('acquire', (client) =>
          (client as unknown as { connection: { stream: Socket } }).connection.stream.destroy(),
        ),
      undefined,
    ],
    [
      'the BEGIN fails on a live connection (an invalid isolation level)',
      () => undefined,
      { isolationLevel: 'no such level' },
    ],
  ] as const)(
    '%s: the work never runs, the transaction rejects, and no client stays checked out',
    async (_, breakIt, config) => {
      const own = new Pool({ connectionString: databaseUrl(), max: 1 });
      own.on('error', () => {});
      const onOwn = drizzle(own);
      const failing = drizzleTransactions(onOwn, { config: config as never });
      breakIt(own);
      const work = jest.fn(() => Promise.resolve('ran'));
      await expect(failing.transaction(work)).rejects.toBeInstanceOf(Error);
      expect(work).not.toHaveBeenCalled();
      expect({ checkedOut: own.totalCount - own.idleCount, waiting: own.waitingCount }).toEqual({
        checkedOut: 0,
        waiting: 0,
      });
      // The pool still serves (one client at most: a leaked one would make this wait for ever), and ends.
      const fine = drizzleTransactions(onOwn);
      await expect(fine.transaction((tx) => fine.query(tx, rows('SELECT 1 AS one')))).resolves.toMatchObject({
        rows: [{ one: 1 }],
      });
      await own.end();
    },
  );

  test('a Drizzle database on one connection (a pg Client, or a pool’s client) is refused: deliveries at once would share its transaction', async () => {
    const client = new Client({ connectionString: databaseUrl() });
    expect(() => drizzleTransactions(drizzle(client))).toThrow(
      /^drizzleTransactions: this Drizzle database runs on one connection \(a pg Client\).*drizzle\(new Pool\(\.\.\.\)\)$/,
    );
    const pooled = await pool.connect();
    try {
      expect(() => drizzleTransactions(drizzle(pooled))).toThrow(/runs on one connection/);
    } finally {
      pooled.release();
    }
    expect(() => drizzleTransactions(drizzle({ client: pool }))).not.toThrow();
  });

  test.each([null, undefined, 'db', {}, { transaction: () => {} }, new Map()])(
    'drizzleTransactions(%p) throws a TypeError that says what it expected',
    (value) => {
      expect(() => drizzleTransactions(value as never)).toThrow(
        /^drizzleTransactions: expected a Drizzle database \(drizzle\(pool\)/,
      );
    },
  );
});

describeWithService(
  'PostgreSQL',
  'the Drizzle tables of the inbox: what store.migrate() made, as drizzle-kit reads it',
  () => {
    const schema = ledgerSchema('orm_drizzle_tables');
    const dialect = new PgDialect();
    const toSql = (value: Parameters<PgDialect['sqlToQuery']>[0]) => dialect.sqlToQuery(value).sql;

    /** A column's default as PostgreSQL prints it: SQL (`defaultNow()`) as Drizzle writes it, a number as is. */
    const defaultOf = (value: unknown): string | null => {
      if (value === undefined) return null;
      if (typeof value === 'number') return String(value);
      return toSql(value as never);
    };

    /** The table as the Drizzle declaration describes it, in the catalog's terms. */
    const declared = (table: PgTable) => {
      const config = getTableConfig(table);
      return {
        // A serial column is, in the catalog, an integer whose default takes the next value of its sequence
        // (drizzle-kit reads it back as serial the same way).
        columns: config.columns.map((column) => {
          const serial = { serial: 'integer', bigserial: 'bigint' }[column.getSQLType()];
          return {
            name: column.name,
            type: serial ?? column.getSQLType(),
            notNull: column.notNull,
            default: serial
              ? `nextval('${config.name}_${column.name}_seq'::regclass)`
              : defaultOf(column.default),
          };
        }),
        primaryKey: [
          ...config.columns.filter((column) => column.primary).map((column) => column.name),
          ...config.primaryKeys.flatMap((key) => key.columns.map((column) => column.name)),
        ],
        checks: config.checks,
        indexes: config.indexes.map(({ config: index }) => ({
          name: index.name!,
          unique: index.unique,
          method: index.method,
          columns: index.columns.map((column) => (column as { name: string }).name),
        })),
      };
    };

    const DECLARED = [
      ['ipn_inbox', ipnInbox],
      ['ipn_inbox_expected', ipnInboxExpected],
      ['ipn_inbox_states', ipnInboxStates],
      ['ipn_inbox_audit', ipnInboxAudit],
      ['ipn_inbox_control', ipnInboxControl],
      ['ipn_inbox_claims', ipnInboxClaims],
      ['ipn_inbox_schema', ipnInboxSchema],
    ] as const;

    // drizzle-kit push drops a table the schema does not declare: losing <table>_states would let a FAILED
    // after a SUCCESSFUL through as `failed`, and <table>_control the fleet's pause.
    test('every table migrate() made is declared', async () => {
      expect(await inboxTablesIn(schema.pool(), schema.schema)).toEqual(
        DECLARED.map(([name]) => name).sort(),
      );
    });

    test.each(DECLARED)(
      '%s: the same columns (types, NOT NULL, defaults), primary key, check constraints and indexes',
      async (name, table) => {
        const client = await schema.pool().connect();
        try {
          const actual = await catalogOf(client, name);
          const drizzle = declared(table);
          expect(getTableConfig(table).name).toBe(name);
          expect(drizzle.columns).toEqual(actual.columns);
          expect(drizzle.primaryKey).toEqual(actual.primaryKey);
          // drizzle-kit matches checks and indexes by name; their definitions are compared by adding Drizzle's
          // beside PostgreSQL's, in a transaction rolled back, and reading both back as PostgreSQL prints them.
          expect(drizzle.checks.map((check) => check.name).sort()).toEqual(
            actual.checks.map((check) => check.name),
          );
          expect(drizzle.indexes.map((index) => index.name).sort()).toEqual(
            actual.indexes.map((index) => index.name),
          );
          await client.query('BEGIN');
          for (const check of drizzle.checks) {
            await client.query(
              `ALTER TABLE ${name} ADD CONSTRAINT "drizzle_${check.name}" CHECK (${toSql(check.value)})`,
            );
          }
          for (const index of drizzle.indexes) {
            const columns = index.columns.map((column) => `"${column}"`).join(', ');
            await client.query(
              `CREATE ${index.unique ? 'UNIQUE ' : ''}INDEX "drizzle_${index.name}" ON ${name} USING ${index.method ?? 'btree'} (${columns})`,
            );
          }
          const both = await catalogOf(client, name);
          const definitionOf = (list: Array<{ name: string; definition: string }>, wanted: string) =>
            list.find((item) => item.name === wanted)?.definition.replace(`drizzle_${wanted}`, wanted);
          // (Schema version 5 adds its check NOT VALID, not to read the rows again; Drizzle has no way to say so,
          // and a check drizzle-kit made again would be a valid one of the same condition.)
          for (const { name: check } of actual.checks) {
            expect(definitionOf(both.checks, `drizzle_${check}`)).toBe(
              definitionOf(both.checks, check)?.replace(/ NOT VALID$/, ''),
            );
          }
          for (const { name: index } of actual.indexes) {
            expect(definitionOf(both.indexes, `drizzle_${index}`)?.replace(`drizzle_${index}`, index)).toBe(
              definitionOf(both.indexes, index),
            );
          }
        } finally {
          await client.query('ROLLBACK');
          client.release();
        }
      },
    );
  },
);

describeWithService(
  'PostgreSQL',
  'the documented Drizzle snippets (examples/snippets/orm/drizzle.ts)',
  () => {
    const schema = ledgerSchema('orm_drizzle_snippet', [ORDERS]);
    const serve = servedRouters();

    test('drizzleRouter: a notification posted twice is credited once, through tx', async () => {
      const { post } = await serve(drizzleRouter(schema.pool()));
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
      const dead = await deadNotifications(drizzle(schema.pool()), new Date(Date.now() - 60_000));
      expect(dead).toContainEqual({ key: `${t}:SUCCESSFUL`, attempts: 8, lastError: 'gave up' });
      expect(await deadNotifications(drizzle(schema.pool()), new Date(Date.now() + 60_000))).toEqual([]);
    });
  },
);

describeWithService('PostgreSQL', 'a store through Drizzle alone (no pool): migrate()', () => {
  const schema = `orm_drizzle_alone_${process.pid}_${Date.now() % 100_000}`;
  const reference = ledgerSchema('orm_drizzle_reference');
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

  test('makes the tables a pool-run migrate() makes (its several statements, one by one through Drizzle)', async () => {
    const store = new PostgresStore({ transactions: drizzleTransactions(drizzle(pool)) });
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

runOrmScenarios(require.resolve('../../fixtures/orm/drizzle.ts'));
