import { join } from 'node:path';
import { knex, type Knex } from 'knex';
import { ledgerRouter } from '../../../examples/snippets/orm/knex.js';
import { knexTransactions } from '../../../lib/orm.js';
import { fixture } from '../../fixtures/orm/knex.js';
import { bareSchema } from '../../helpers/bare-schema.js';
import {
  expectNothingCredited,
  insertOrder,
  orderOf,
  orderPayment,
  ORDERS,
} from '../../helpers/refused-payments.js';
import { servedRouters } from '../../helpers/servers.js';
import { databaseUrl, describeWithService, eventually } from '../../helpers/services.js';
import { runOrmScenarios } from '../../helpers/orm-scenarios.js';
import { transactionsContract } from '../../helpers/transactions-contract.js';

jest.setTimeout(30_000);

const LEDGER = 'CREATE TABLE ledger (transaction_id text NOT NULL, order_id text NOT NULL, amount numeric)';

describeWithService('PostgreSQL', 'knexTransactions against PostgreSQL', () => {
  transactionsContract('ipn_knex', (schema) => fixture.open(schema), { endsRefused: true });
});

runOrmScenarios(require.resolve('../../fixtures/orm/knex.ts'));

describeWithService('PostgreSQL', 'the documented Knex setup (examples/snippets/orm/)', () => {
  const bare = bareSchema('ipn_knex_docs', [ORDERS, LEDGER]);
  let db: Knex;
  beforeAll(() => {
    db = knex({
      client: 'pg',
      connection: databaseUrl(),
      searchPath: [bare.schema],
      pool: { min: 0, max: 4 },
    });
  });
  afterAll(() => db.destroy());
  const serve = servedRouters();
  const migrations = {
    directory: join(__dirname, '../../../examples/snippets/orm/knex-migrations'),
    loadExtensions: ['.ts'],
  };

  test('knex.migrate.latest() with the documented migration creates the inbox the store then uses; rollback drops it', async () => {
    const [, applied] = (await db.migrate.latest(migrations)) as [number, string[]];
    expect(applied).toEqual(['20261125000000_ipn_inbox.ts']);
    expect(await bare.exists('ipn_inbox')).toBe(true);
    expect(await bare.exists('ipn_inbox_expected')).toBe(true);

    const { ipn } = ledgerRouter(db);
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

    await db.migrate.rollback(migrations);
    expect(await bare.exists('ipn_inbox')).toBe(false);
    expect(await bare.exists('ipn_inbox_expected')).toBe(false);
  });
});

describeWithService('PostgreSQL', "Knex's other ways into the transaction", () => {
  const bare = bareSchema('ipn_knex_ways', [LEDGER]);
  let db: Knex;
  beforeAll(() => {
    db = knex({
      client: 'pg',
      connection: databaseUrl(),
      searchPath: [bare.schema],
      pool: { min: 0, max: 2 },
    });
  });
  afterAll(() => db.destroy());

  test('knex(...).transacting(tx) writes inside the transaction, as tx(...) does: both roll back with it', async () => {
    const transactions = knexTransactions(db);
    const id = `ways-${process.pid}`;
    await expect(
      transactions.transaction(async (tx) => {
        await db('ledger').transacting(tx).insert({ transaction_id: id, order_id: 'a' });
        await tx('ledger').insert({ transaction_id: id, order_id: 'b' });
        const seen = await transactions.query(tx, {
          text: 'SELECT count(*)::int AS n FROM ledger WHERE transaction_id = $1',
          values: [id],
          returns: 'rows',
        });
        expect(seen.rows).toEqual([{ n: 2 }]);
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    expect((await bare.pool().query('SELECT 1 FROM ledger WHERE transaction_id = $1', [id])).rowCount).toBe(
      0,
    );
  });
});
