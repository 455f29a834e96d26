import type { ChildProcess } from 'node:child_process';
import { startLedgerApp, stopProcess } from '../../examples/start-ledger-app.js';
import { ledgerSchema } from '../helpers/ledger-schema.js';
import {
  expectNothingCredited,
  insertOrder,
  orderOf,
  orderPayment,
  ORDERS,
} from '../helpers/refused-payments.js';
import { databaseUrl, describeWithService, eventually } from '../helpers/services.js';

// A process start costs a second or two on a busy machine.
jest.setTimeout(60_000);

/**
 * examples/ledger-app.ts (the demo's crash scene app, run there with its one genuine payment) on its own:
 * it credits an order it initiated once, and nothing for another amount, another transaction, an unknown
 * order or an order already paid.
 */
describeWithService('PostgreSQL', 'examples/ledger-app.ts: only the payment of an order it initiated', () => {
  const tables = ledgerSchema('ipn_ledger_app', [ORDERS]);
  const running = new Set<ChildProcess>();
  afterAll(() => Promise.all([...running].map((child) => stopProcess(child, 'SIGTERM'))));

  test('credits its order once; another amount, transaction, an unknown or a paid order: nothing', async () => {
    const url = new URL(databaseUrl());
    url.searchParams.set('options', `-c search_path=${tables.schema}`);
    const app = await startLedgerApp(
      {
        database: { url: url.toString() },
        inboxTable: 'ipn_inbox',
        ledgerTable: 'ledger',
        ordersTable: 'orders',
        leaseMs: 60_000,
        holdAfterWrite: false,
      },
      running,
    );
    const post = (body: unknown) =>
      fetch(app.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const payload = orderPayment();
    await insertOrder(tables.pool(), orderOf(payload));
    expect((await post(payload)).status).toBe(200);
    expect((await post(payload)).status).toBe(200);
    await eventually(
      'delivered',
      async () => (await tables.entryOf(tables.keyOf(payload)))?.status === 'delivered',
    );
    expect(await tables.ledgerOf(payload.transaction_id)).toEqual([{ order_id: payload.custom_data }]);

    await expectNothingCredited(tables.pool(), post);
  });
});
