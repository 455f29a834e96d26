import { AsyncLocalStorage } from 'node:async_hooks';
import { Sequelize } from 'sequelize';
import { ipnRouter } from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { down, up } from '../../../examples/snippets/orm/sequelize-migrations/20261125000000-ipn-inbox.js';
import {
  IpnInboxEntry,
  initIpnInboxEntry,
  Ledger,
  ledgerRouter,
} from '../../../examples/snippets/orm/sequelize.js';
import { sequelizeTransactions, type Statement } from '../../../lib/orm.js';
import { fixture } from '../../fixtures/orm/sequelize.js';
import { bareSchema } from '../../helpers/bare-schema.js';
import {
  expectNothingCredited,
  insertOrder,
  orderOf,
  orderPayment,
  ORDERS,
} from '../../helpers/refused-payments.js';
import { quiet } from '../../helpers/quiet-logger.js';
import { servedRouters } from '../../helpers/servers.js';
import { databaseUrl, describeWithService, eventually } from '../../helpers/services.js';
import { runOrmScenarios } from '../../helpers/orm-scenarios.js';
import { transactionsContract } from '../../helpers/transactions-contract.js';

jest.setTimeout(30_000);

describeWithService('PostgreSQL', 'sequelizeTransactions against PostgreSQL', () => {
  transactionsContract('ipn_sequelize', (schema) => fixture.open(schema), { endsRefused: true });
});

runOrmScenarios(require.resolve('../../fixtures/orm/sequelize.ts'));

describeWithService(
  'PostgreSQL',
  'the documented Sequelize setup (examples/snippets/orm/sequelize.ts)',
  () => {
    // No ledger: the app's `sync()` creates it from the Ledger model, beside the inbox it must not touch.
    const bare = bareSchema('ipn_sequelize_docs', [ORDERS]);
    const serve = servedRouters();
    let sequelize: Sequelize;
    beforeAll(() => {
      sequelize = new Sequelize(databaseUrl(), {
        dialect: 'postgres',
        logging: false,
        pool: { max: 4 },
        dialectOptions: { options: `-c search_path=${bare.schema}` },
      });
    });
    afterAll(() => sequelize.close());
    const ledgerRows = async (id: unknown) =>
      (await bare.pool().query('SELECT count(*)::int AS n FROM ledger WHERE transaction_id = $1', [id]))
        .rows[0].n as number;
    const delivered = (id: unknown) =>
      eventually('delivered', async () => {
        const { rows } = await bare
          .pool()
          .query('SELECT status FROM ipn_inbox WHERE transaction_id = $1', [id]);
        return rows[0]?.status === 'delivered';
      });
    const newOrder = async () => {
      const payload = orderPayment();
      await insertOrder(bare.pool(), orderOf(payload));
      return payload;
    };

    test("the documented migration creates the inbox; sync() with the inbox's model leaves it as it was, and the listener credits once", async () => {
      await up(sequelize.getQueryInterface());
      expect(await bare.exists('ipn_inbox')).toBe(true);
      expect(await bare.exists('ipn_inbox_expected')).toBe(true);
      const { ipn } = ledgerRouter(sequelize);
      initIpnInboxEntry(sequelize);
      const before = await bare.shapeOf('ipn_inbox');
      await sequelize.sync(); // creates the ledger
      expect(await bare.exists('ledger')).toBe(true);
      expect(await bare.shapeOf('ipn_inbox')).toEqual(before);

      const { post } = await serve(ipn);
      const payload = await newOrder();
      expect((await post(payload)).status).toBe(200);
      expect((await post(payload)).status).toBe(200);
      await delivered(payload.transaction_id);
      expect(await ledgerRows(payload.transaction_id)).toBe(1);
      const order = await bare
        .pool()
        .query('SELECT paid_at FROM orders WHERE id = $1', [payload.custom_data]);
      expect(order.rows[0].paid_at).toBeInstanceOf(Date);

      const withEntries = await bare.shapeOf('ipn_inbox');
      await sequelize.sync();
      expect(await bare.shapeOf('ipn_inbox')).toEqual(withEntries);
      expect(await IpnInboxEntry.count({ where: { status: 'delivered' } })).toBe(1);

      await expectNothingCredited(bare.pool(), post);
    });

    test('a write without { transaction: tx } runs outside the delivery transaction, even with CLS on: it survives a failed attempt', async () => {
      // Sequelize's CLS, on AsyncLocalStorage: it hands the transaction to calls made inside the callback of
      // sequelize.transaction(), and listeners run outside it.
      const als = new AsyncLocalStorage<Map<string, unknown>>();
      Sequelize.useCLS({
        run: (fn: (context: object) => unknown) => als.run(new Map(als.getStore()), () => fn({})),
        bind: <F>(fn: F) => fn,
        get: (key: string) => als.getStore()?.get(key),
        set: (key: string, value: unknown) => als.getStore()?.set(key, value),
      });
      try {
        // The namespace works: inside the callback, a call without `transaction` is in the transaction.
        const probe = `probe-${process.pid}`;
        await expect(
          sequelize.transaction(async () => {
            await Ledger.create({ transactionId: probe, orderId: probe });
            throw new Error('roll back');
          }),
        ).rejects.toThrow('roll back');
        expect(await ledgerRows(probe)).toBe(0);

        const ipn = ipnRouter({
          store: new PostgresStore({ transactions: sequelizeTransactions(sequelize) }),
          delivery: 'at-least-once',
          logger: quiet,
          retryDelayMs: 20,
        });
        ipn.on('successful', async (n, { tx, attempt }) => {
          await Ledger.create({ transactionId: n.transaction_id, orderId: n.custom_data, amount: n.amount }); // no tx
          await Ledger.create(
            { transactionId: n.transaction_id, orderId: `${n.custom_data}-in-tx`, amount: n.amount },
            { transaction: tx },
          );
          if (attempt === 1) throw new Error('the order service is down');
        });
        const { post } = await serve(ipn);
        const payload = await newOrder();
        expect((await post(payload)).status).toBe(200);
        await delivered(payload.transaction_id);
        const { rows } = await bare
          .pool()
          .query('SELECT order_id FROM ledger WHERE transaction_id = $1 ORDER BY order_id', [
            payload.transaction_id,
          ]);
        // Two attempts: the write without tx landed twice; the one with tx once, with the delivered mark.
        expect(rows.map((row: { order_id: string }) => row.order_id)).toEqual([
          payload.custom_data,
          payload.custom_data,
          `${String(payload.custom_data)}-in-tx`,
        ]);
      } finally {
        Reflect.set(Sequelize, '_cls', undefined);
      }
    });

    test("the documented migration's down drops the inbox", async () => {
      await down(sequelize.getQueryInterface());
      expect(await bare.exists('ipn_inbox')).toBe(false);
      expect(await bare.exists('ipn_inbox_expected')).toBe(false);
    });
  },
);

describeWithService('PostgreSQL', "sequelizeTransactions under the app's own query defaults", () => {
  test('options.query of { plain: true, raw: false } changes nothing of what a statement gives the store', async () => {
    const sequelize = new Sequelize(databaseUrl(), {
      dialect: 'postgres',
      logging: false,
      query: { plain: true, raw: false },
    });
    try {
      const { execute } = sequelizeTransactions(sequelize);
      const two: Statement = {
        text: 'SELECT n FROM generate_series(1, $1::int) AS n',
        values: [2],
        returns: 'rows',
      };
      expect(await execute!(two)).toEqual({ rows: [{ n: 1 }, { n: 2 }], count: 2 });
    } finally {
      await sequelize.close();
    }
  });
});
