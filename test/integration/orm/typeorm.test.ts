import { DataSource, EntitySchema } from 'typeorm';
import {
  IpnInbox1764028800000,
  IpnInboxEntry,
  Ledger,
  ledgerRouter,
  Order,
} from '../../../examples/snippets/orm/typeorm.js';
import { typeormTransactions } from '../../../lib/orm.js';
import { fixture, Ledger as FixtureLedger } from '../../fixtures/orm/typeorm.js';
import { bareSchema } from '../../helpers/bare-schema.js';
import { expectNothingCredited, insertOrder, orderOf, orderPayment } from '../../helpers/refused-payments.js';
import { servedRouters } from '../../helpers/servers.js';
import { databaseUrl, describeWithService, eventually } from '../../helpers/services.js';
import { runOrmScenarios } from '../../helpers/orm-scenarios.js';
import { transactionsContract } from '../../helpers/transactions-contract.js';

jest.setTimeout(30_000);

describeWithService('PostgreSQL', 'typeormTransactions against PostgreSQL', () => {
  transactionsContract('ipn_typeorm', (schema) => fixture.open(schema));
});

runOrmScenarios(require.resolve('../../fixtures/orm/typeorm.ts'));

describeWithService('PostgreSQL', 'the documented TypeORM setup (examples/snippets/orm/typeorm.ts)', () => {
  // No ledger and no orders: the app's `synchronize` creates them from the Ledger and Order entities, beside
  // the inbox it must not touch.
  const bare = bareSchema('ipn_typeorm_docs');
  const serve = servedRouters();
  const opened: DataSource[] = [];
  afterAll(() => Promise.all(opened.map((dataSource) => dataSource.destroy())));
  const open = async (entities: EntitySchema[]) => {
    const dataSource = new DataSource({
      type: 'postgres',
      url: databaseUrl(),
      entities,
      migrations: [IpnInbox1764028800000],
      extra: { max: 4, options: `-c search_path=${bare.schema}` },
    });
    opened.push(await dataSource.initialize());
    return dataSource;
  };
  /** What `synchronize()` would run on the inbox's tables. */
  const syncOfInbox = async (dataSource: DataSource) =>
    (await dataSource.driver.createSchemaBuilder().log()).upQueries
      .map((query) => query.query)
      .filter((query) => query.includes('ipn_inbox'));

  /**
   * Posts a notification twice through the documented router; resolves once it is delivered, credited once.
   * Then the payments it must not credit: nothing credited.
   */
  const creditOnce = async (dataSource: DataSource) => {
    const { ipn } = ledgerRouter(dataSource);
    const { post } = await serve(ipn);
    const payload = orderPayment();
    await insertOrder(bare.pool(), orderOf(payload));
    expect((await post(payload)).status).toBe(200);
    expect((await post(payload)).status).toBe(200);
    await eventually('delivered', async () => {
      const { rows } = await bare
        .pool()
        .query('SELECT status FROM ipn_inbox WHERE transaction_id = $1', [payload.transaction_id]);
      return rows[0]?.status === 'delivered';
    });
    const credited = await bare
      .pool()
      .query('SELECT count(*)::int AS n FROM ledger WHERE transaction_id = $1', [payload.transaction_id]);
    expect(credited.rows[0].n).toBe(1);
    const order = await bare.pool().query('SELECT paid_at FROM orders WHERE id = $1', [payload.custom_data]);
    expect(order.rows[0].paid_at).toBeInstanceOf(Date);
    await expectNothingCredited(bare.pool(), post);
    await ipn.close();
  };

  test('runMigrations() with the documented migration creates the inbox; synchronize with the documented entity leaves it as it was, and the listener credits once', async () => {
    const dataSource = await open([Ledger, Order, IpnInboxEntry]);
    expect((await dataSource.runMigrations()).map((migration) => migration.name)).toEqual([
      'IpnInbox1764028800000',
    ]);
    const before = await bare.shapeOf('ipn_inbox');
    expect(await syncOfInbox(dataSource)).toEqual([]);
    await dataSource.synchronize(); // creates the ledger and the orders
    expect(await bare.exists('ledger')).toBe(true);
    expect(await bare.exists('orders')).toBe(true);
    expect(await bare.shapeOf('ipn_inbox')).toEqual(before);
    await creditOnce(dataSource);
  });

  test('synchronize again, with entries in the inbox: not a row or a constraint changes, and the store still delivers', async () => {
    const dataSource = await open([Ledger, Order, IpnInboxEntry]);
    const before = await bare.shapeOf('ipn_inbox');
    expect(before.rows.length).toBeGreaterThan(0);
    await dataSource.synchronize();
    expect(await bare.shapeOf('ipn_inbox')).toEqual(before);
    await creditOnce(dataSource);
  });

  test('without an entity of the inbox, synchronize leaves it alone; an entity that differs would change it', async () => {
    expect(await syncOfInbox(await open([Ledger]))).toEqual([]);
    const withoutChecks = new EntitySchema({ ...IpnInboxEntry.options, name: 'LooseInboxEntry', checks: [] });
    expect((await syncOfInbox(await open([Ledger, withoutChecks]))).sort()).toEqual([
      'ALTER TABLE "ipn_inbox" DROP CONSTRAINT "ipn_inbox_check"',
      'ALTER TABLE "ipn_inbox" DROP CONSTRAINT "ipn_inbox_status_check"',
      'ALTER TABLE "ipn_inbox" DROP CONSTRAINT "ipn_kit_no_claim_marker"',
    ]);
  });

  test("the documented migration's down drops the inbox", async () => {
    const dataSource = await open([Ledger]);
    await dataSource.undoLastMigration();
    expect(await bare.exists('ipn_inbox')).toBe(false);
    expect(await bare.exists('ipn_inbox_expected')).toBe(false);
  });
});

describeWithService('PostgreSQL', "TypeORM's other ways into the transaction", () => {
  const bare = bareSchema('ipn_typeorm_ways', [
    'CREATE TABLE ledger (transaction_id text NOT NULL, order_id text NOT NULL, amount numeric)',
  ]);
  let dataSource: DataSource;
  beforeAll(async () => {
    dataSource = new DataSource({
      type: 'postgres',
      url: databaseUrl(),
      entities: [FixtureLedger],
      extra: { max: 2, options: `-c search_path=${bare.schema}` },
    });
    await dataSource.initialize();
  });
  afterAll(() => dataSource.destroy());

  test('tx.withRepository(repository) and tx.getRepository(entity) write inside the transaction: both roll back with it', async () => {
    const transactions = typeormTransactions(dataSource);
    const repository = dataSource.getRepository(FixtureLedger); // as injected elsewhere: outside any transaction
    const id = `ways-${process.pid}`;
    await expect(
      transactions.transaction(async (tx) => {
        await tx.withRepository(repository).insert({ transactionId: id, orderId: 'a' });
        await tx.getRepository(FixtureLedger).insert({ transactionId: id, orderId: 'b' });
        expect(await tx.getRepository(FixtureLedger).countBy({ transactionId: id })).toBe(2);
        expect(await repository.countBy({ transactionId: id })).toBe(0);
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    expect((await bare.pool().query('SELECT 1 FROM ledger WHERE transaction_id = $1', [id])).rowCount).toBe(
      0,
    );
  });
});
