import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PrismaPg } from '@prisma/adapter-pg';
import type { Pool } from 'pg';
import { ipnRouter } from 'ipn-kit';
import { prismaTransactions } from 'ipn-kit/orm';
import { PostgresStore } from 'ipn-kit/postgres';
import { PrismaClient as ExamplePrismaClient } from '../../../examples/prisma/generated/client.js';
import { deadNotifications, prismaIpn } from '../../../examples/snippets/orm/prisma.js';
import { PrismaClient } from '../../fixtures/orm/prisma/generated/client.js';
import { ledgerSchema } from '../../helpers/ledger-schema.js';
import { inboxTablesIn } from '../../helpers/pg-catalog.js';
import { runOrmScenarios } from '../../helpers/orm-scenarios.js';
import { uniquePayload } from '../../helpers/payloads.js';
import { quiet } from '../../helpers/quiet-logger.js';
import { servedRouters } from '../../helpers/servers.js';
import { describeWithService, eventually } from '../../helpers/services.js';

/**
 * prismaTransactions against the real PostgreSQL, through Prisma 7 and its pg adapter sharing the test's
 * pool: the contract a store relies on (the ORM's own transaction, statements inside and outside it, rows
 * and counts as pg gives them), checked by what lands in the database.
 */

jest.setTimeout(30_000);

runOrmScenarios(require.resolve('../../fixtures/orm/prisma.ts'));

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

  test('Prisma runs on the pool it is given (one pool for the store and Prisma), and leaves it open', async () => {
    const own = ledger.newPool(2);
    const onOwn = new PrismaClient({ adapter: new PrismaPg(own, { schema: ledger.schema }) });
    const busy = await prismaTransactions(onOwn).transaction(async (tx) => {
      await tx.ledger.count();
      return own.totalCount - own.idleCount; // the transaction's connection, taken from `own`
    });
    await onOwn.$disconnect();

    expect(busy).toBe(1);
    expect((await own.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
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

describeWithService('PostgreSQL', 'a PostgresStore on Prisma: what the store tells a partner', () => {
  const ledger = ledgerSchema('ipn_prisma_store', [
    'ALTER TABLE ledger ADD COLUMN id serial PRIMARY KEY',
    // examples/prisma/schema.prisma's Order: what the partner initiated.
    'CREATE TABLE orders (id text PRIMARY KEY, transaction_id text NOT NULL, amount numeric NOT NULL, paid_at timestamptz)',
  ]);
  /** An order initiated as `payload`'s transaction, for `amount` (the payload's, unless told otherwise). */
  const newOrder = (payload: Record<string, unknown>, amount = payload.amount) =>
    ledger
      .pool()
      .query('INSERT INTO orders (id, transaction_id, amount) VALUES ($1, $2, $3)', [
        payload.custom_data,
        payload.transaction_id,
        amount,
      ]);
  let prisma: PrismaClient;
  beforeAll(() => {
    prisma = new PrismaClient({ adapter: new PrismaPg(ledger.pool(), { schema: ledger.schema }) });
  });
  afterAll(() => prisma?.$disconnect());
  const serve = servedRouters();

  test('the documented setup and listener: a notification posted twice credits the ledger once', async () => {
    const { ipn, prisma: documented } = prismaIpn(ledger.pool(), ledger.schema);
    try {
      const { post } = await serve(ipn);
      const payload = uniquePayload({ custom_data: 'order-7' });
      await newOrder(payload);
      expect((await post(payload)).status).toBe(200);
      expect((await post(payload)).status).toBe(200);
      await eventually(
        'delivered',
        async () => (await ledger.entryOf(ledger.keyOf(payload)))?.status === 'delivered',
      );

      expect(await ledger.ledgerOf(payload.transaction_id)).toEqual([{ order_id: 'order-7' }]);
    } finally {
      await documented.$disconnect();
    }
    expect((await ledger.pool().query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]); // the pool still open
  });

  test('the documented listener credits nothing for another amount, another transaction, or an unknown order', async () => {
    const { ipn, prisma: documented } = prismaIpn(ledger.pool(), ledger.schema);
    try {
      const { post } = await serve(ipn);
      const wrongAmount = uniquePayload({ custom_data: 'order-8' });
      await newOrder(wrongAmount, 9_999);
      const otherTransaction = uniquePayload({ custom_data: 'order-9' });
      await newOrder({ ...otherTransaction, transaction_id: 'EFB.000000' });
      const unknownOrder = uniquePayload({ custom_data: 'order-10' });
      for (const payload of [wrongAmount, otherTransaction, unknownOrder]) {
        expect((await post(payload)).status).toBe(200);
        const key = ledger.keyOf(payload);
        await eventually(`${key} failed`, async () => (await ledger.entryOf(key))?.status === 'failed');
        expect(await ledger.ledgerOf(payload.transaction_id)).toEqual([]);
      }
      const { rows } = await ledger
        .pool()
        .query("SELECT paid_at FROM orders WHERE id IN ('order-8', 'order-9')");
      expect(rows).toEqual([{ paid_at: null }, { paid_at: null }]);
    } finally {
      await documented.$disconnect();
    }
  });

  test('through Prisma alone, on an inbox never migrated: the store says to migrate', async () => {
    const store = new PostgresStore({ transactions: prismaTransactions(prisma), table: 'never_migrated' });

    await expect(store.get('TX-1:SUCCESSFUL')).rejects.toThrow(
      /does not exist: run `await store.migrate\(\)`/,
    );
  });

  test('a listener that swallows a SQL error in tx: the aborted transaction is named, and the entry ends dead', async () => {
    const store = new PostgresStore({ pool: ledger.pool(), transactions: prismaTransactions(prisma) });
    const ipn = ipnRouter({
      store,
      delivery: 'at-least-once',
      logger: quiet,
      leaseMs: 300,
      maxAttempts: 2,
      retryDelayMs: 20,
      recoveryIntervalMs: 50,
    });
    ipn.on('successful', async (n, { tx }) => {
      await tx.ledger.create({ data: { transactionId: n.transaction_id, orderId: 'o-1', amount: '1' } });
      await tx.$executeRawUnsafe('SELECT 1 / 0').catch(() => {}); // caught: PostgreSQL aborts the transaction
    });
    const { post } = await serve(ipn);
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);

    await eventually(
      'the entry dead',
      async () => (await ledger.entryOf(ledger.keyOf(payload)))?.status === 'dead',
    );
    expect((await ledger.entryOf(ledger.keyOf(payload)))?.last_error).toEqual(
      expect.stringContaining('PostgreSQL aborted the transaction'),
    );
    expect(await ledger.ledgerOf(payload.transaction_id)).toEqual([]);
  });
});

/**
 * The inbox models of examples/prisma/schema.prisma, which docs/orm.md gives partners who keep their
 * migrations in Prisma: `prisma migrate dev` diffs the database against them, so any column, type,
 * nullability, key or index they do not state as `migrate()` made it would become an ALTER or a DROP.
 * Migrate needs the schema engine, which this machine cannot download: the models are compared with the
 * tables themselves, as PostgreSQL describes them.
 */
describeWithService('PostgreSQL', 'the inbox models of examples/prisma/schema.prisma', () => {
  const ledger = ledgerSchema('ipn_prisma_model', ['ALTER TABLE ledger ADD COLUMN id serial PRIMARY KEY']);
  let prisma: ExamplePrismaClient;
  beforeAll(() => {
    prisma = new ExamplePrismaClient({ adapter: new PrismaPg(ledger.pool(), { schema: ledger.schema }) });
  });
  afterAll(() => prisma?.$disconnect());
  const serve = servedRouters();
  const schemaFile = readFileSync(join(__dirname, '../../../examples/prisma/schema.prisma'), 'utf8');

  /** PostgreSQL's name of each Prisma type the models use (with its `@db` attribute). */
  const TYPES: Record<string, string> = {
    String: 'text',
    Int: 'integer',
    BigInt: 'bigint',
    Float: 'double precision',
    Json: 'jsonb',
    'Json@db.Json': 'json',
    'DateTime@db.Timestamptz(6)': 'timestamp with time zone',
  };

  /** A model's fields as `column: 'type NULL|NOT NULL'`, read from the schema file. */
  function modelColumns(model: string): Record<string, string> {
    const body = new RegExp(`model ${model} \\{([^}]*)\\}`).exec(schemaFile)![1]!;
    const columns: Record<string, string> = {};
    for (const line of body.split('\n').map((text) => text.trim())) {
      const field = /^(\w+)\s+(\w+)(\?)?(.*)$/.exec(line);
      if (!field) continue;
      const [, name, type, optional, attributes] = field;
      const column = /@map\("(\w+)"\)/.exec(attributes!)?.[1] ?? name!;
      const native = /@db\.\w+(\(\d+\))?/.exec(attributes!)?.[0] ?? '';
      columns[column] = `${TYPES[type! + native] ?? type! + native}${optional ? ' NULL' : ' NOT NULL'}`;
    }
    return columns;
  }

  /** A table's columns as PostgreSQL describes them, in the same form. */
  async function tableColumns(table: string): Promise<Record<string, string>> {
    const { rows } = await ledger.pool().query(
      `SELECT column_name, data_type, is_nullable FROM information_schema.columns
        WHERE table_schema = $1 AND table_name = $2`,
      [ledger.schema, table],
    );
    return Object.fromEntries(
      (rows as Array<{ column_name: string; data_type: string; is_nullable: string }>).map((row) => [
        row.column_name,
        `${row.data_type}${row.is_nullable === 'YES' ? ' NULL' : ' NOT NULL'}`,
      ]),
    );
  }

  /** A table's indexes (its primary key's included) as `name: 'columns'`. */
  async function tableIndexes(table: string): Promise<Record<string, string>> {
    const { rows } = await ledger
      .pool()
      .query('SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = $2', [
        ledger.schema,
        table,
      ]);
    return Object.fromEntries(
      (rows as Array<{ indexname: string; indexdef: string }>).map((row) => [
        row.indexname,
        /\((.*)\)$/.exec(row.indexdef)![1]!,
      ]),
    );
  }

  const DECLARED = [
    ['IpnInbox', 'ipn_inbox'],
    ['IpnInboxExpected', 'ipn_inbox_expected'],
    ['IpnInboxStates', 'ipn_inbox_states'],
    ['IpnInboxAudit', 'ipn_inbox_audit'],
    ['IpnInboxControl', 'ipn_inbox_control'],
    ['IpnInboxClaims', 'ipn_inbox_claims'],
    ['IpnInboxSchema', 'ipn_inbox_schema'],
  ] as const;

  // Migrate writes a DROP for a table its migrations made and the schema does not declare: losing
  // <table>_states would let a FAILED after a SUCCESSFUL through as `failed`, and <table>_control the pause.
  test('every table migrate() made is declared', async () => {
    expect(await inboxTablesIn(ledger.pool(), ledger.schema)).toEqual(
      DECLARED.map(([, table]) => table).sort(),
    );
  });

  test.each(DECLARED)(
    '%s states every column of %s as migrate() made it, and no other',
    async (model, table) => {
      expect(schemaFile).toContain(`@@map("${table}")`);
      expect(modelColumns(model)).toEqual(await tableColumns(table));
    },
  );

  test('their keys and the index are named as migrate() named them, so Migrate renames nothing', async () => {
    expect(await tableIndexes('ipn_inbox')).toEqual({
      ipn_inbox_pkey: 'key', // Prisma's default name for the key of @@map("ipn_inbox")
      ipn_inbox_due_idx: 'status, next_attempt_at',
    });
    expect(await tableIndexes('ipn_inbox_expected')).toEqual({ ipn_inbox_expected_pkey: 'transaction_id' });
    expect(schemaFile).toMatch(/^\s+key\s+String\s+@id$/m);
    expect(schemaFile).toMatch(/^\s+transactionId\s+String\s+@id @map\("transaction_id"\)$/m);
    expect(schemaFile).toContain('@@index([status, nextAttemptAt], map: "ipn_inbox_due_idx")');
  });

  test('reads the inbox through the generated client: the delivered count, an entry as the store has it', async () => {
    const store = new PostgresStore({ pool: ledger.pool(), transactions: prismaTransactions(prisma) });
    const ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet });
    ipn.on('successful', async (n, { tx }) => {
      await tx.ledger.create({
        data: { transactionId: n.transaction_id, orderId: 'o-1', amount: n.amount ?? 0 },
      });
    });
    const { post } = await serve(ipn);
    const payloads = [uniquePayload(), uniquePayload()];
    for (const payload of payloads) expect((await post(payload)).status).toBe(200);
    await eventually(
      'both delivered',
      async () => (await prisma.ipnInbox.count({ where: { status: 'delivered' } })) === 2,
    );

    const key = ledger.keyOf(payloads[0]!);
    const row = await prisma.ipnInbox.findUniqueOrThrow({ where: { key } });
    const entry = (await store.get(key))!;
    expect(row).toMatchObject({
      key,
      transactionId: entry.transactionId,
      status: 'delivered',
      attempts: entry.attempts,
      record: entry.record,
      deliveredAt: entry.deliveredAt,
      receivedAt: entry.receivedAt,
    });
    expect(await prisma.ledger.count({ where: { transactionId: entry.transactionId } })).toBe(1);
  });

  test('the documented dead letters: what gave up, read through the inbox model', async () => {
    const store = new PostgresStore({ pool: ledger.pool(), transactions: prismaTransactions(prisma) });
    const ipn = ipnRouter({ store, delivery: 'at-least-once', logger: quiet, maxAttempts: 1 });
    ipn.on('successful', () => {
      throw new Error('the order is unknown');
    });
    const { post } = await serve(ipn);
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(200);
    const key = ledger.keyOf(payload);
    await eventually('the entry dead', async () => (await ledger.entryOf(key))?.status === 'dead');

    expect(await deadNotifications(prisma, new Date(Date.now() - 60_000))).toEqual([
      { key, attempts: 1, lastError: expect.stringContaining('the order is unknown') },
    ]);
  });
});

describe('prismaTransactions refuses what is not a PrismaClient, at construction', () => {
  test.each([
    ['nothing', undefined, /expected a PrismaClient \(new PrismaClient\(\{ adapter \}\)\), got undefined/],
    [
      'a pg pool',
      { query: () => {} },
      /got an object without \$transaction, \$queryRawUnsafe, \$executeRawUnsafe/,
    ],
    [
      'the class',
      PrismaClient,
      /got a function: pass an instance, new PrismaClient\(\{ adapter \}\), not the class/,
    ],
  ])('%s', (_, value, message) => {
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
