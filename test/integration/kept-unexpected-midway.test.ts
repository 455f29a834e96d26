import { randomUUID } from 'node:crypto';
import { Pool } from 'pg';
import { createStatusClient, ipnRouter, type IpnRouter } from 'ipn-kit';
import { PostgresStore, type PgQueryable } from 'ipn-kit/postgres';
import { createFakeProvider, type FakeProvider } from 'ipn-kit/testing';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, type Running } from '../helpers/servers.js';
import { databaseUrl, describeWithService } from '../helpers/services.js';
import { CLEANUP_TIMEOUT_MS, dropPostgresInboxes } from '../helpers/drop-inboxes.js';

jest.setTimeout(60_000);

describeWithService('PostgreSQL', 'a kept unexpected copy made due, the store failing mid-way', () => {
  const admin = new Pool({ connectionString: databaseUrl() });
  const tables: string[] = [];
  const servers: Running[] = [];
  const routers: IpnRouter[] = [];
  let provider: FakeProvider;
  beforeAll(async () => {
    provider = await createFakeProvider({ apiKey: 'test-key', resendIntervalMs: 30, resends: 3 });
  });
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((server) => server.close()));
    await Promise.all(routers.splice(0).map((ipn) => ipn.close()));
  });
  afterAll(async () => {
    await provider.close();
    await dropPostgresInboxes(admin, tables);
    await admin.end();
  }, CLEANUP_TIMEOUT_MS);

  for (const [name, markFails] of [
    ['marked kept', false],
    ['still under its hold lease', true],
  ] as const) {
    test(`${name}: its replay failing, it is delivered once all the same`, async () => {
      const table = `kum_${process.pid}_${randomUUID().slice(0, 8)}`;
      tables.push(table);
      await new PostgresStore({ pool: admin, table }).migrate();
      const failing = { mark: markFails, replay: false };
      const queryable: PgQueryable = {
        query(text: string, values?: unknown[]): ReturnType<PgQueryable['query']> {
          if (
            failing.mark &&
            (values ?? []).some((v) => typeof v === 'string' && v.startsWith('unexpected: the notification'))
          ) {
            failing.mark = false;
            return Promise.reject(new Error('connection reset (mark)'));
          }
          if (failing.replay && /SET status = 'received', attempts = 0/.test(text)) {
            failing.replay = false;
            return Promise.reject(new Error('connection reset (replay)'));
          }
          return admin.query(text, values);
        },
      };
      const ipn = ipnRouter({
        store: new PostgresStore({ pool: queryable, table }),
        delivery: 'at-least-once',
        logger: quiet,
        unexpected: 'reject',
        statusClient: createStatusClient({
          baseUrl: provider.statusBaseUrl,
          apiKey: 'test-key',
          minIntervalMs: 0,
        }),
        reconcileAfterMs: 10,
        recoveryIntervalMs: 50,
        sweepIntervalMs: 2 ** 31 - 1,
      });
      routers.push(ipn);
      const events = recordEvents(ipn);
      const served = await listen(ipn);
      servers.push(served);
      await ipn.expect(`EXP.${randomUUID().slice(0, 8)}`, { amount: 1, customData: 'order-0' });
      const paid = provider.initiate({
        amount: 5000,
        ipnUrl: `${served.url}/`,
        customData: 'order-9',
        outcome: 'SUCCESSFUL',
      });
      await paid.delivered;
      const key = `${paid.transactionId}:SUCCESSFUL`;
      for (let i = 0; i < 100 && (await ipn.inbox.get(key)) === undefined; i += 1)
        await new Promise((resolve) => setTimeout(resolve, 10));
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(events.count('successful')).toBe(0);
      const before = await ipn.inbox.get(key);
      expect(before).toMatchObject({ status: markFails ? 'received' : 'failed' });

      failing.replay = true;
      const first = await ipn.reconcile(paid.transactionId).then(
        (r) => r.emitted,
        (e: unknown) => e,
      );
      expect(String(first)).toMatch(/connection reset \(replay\)/);
      await ipn.drain({ budgetMs: 500 });
      const second = await ipn.reconcile(paid.transactionId);
      await ipn.drain({ budgetMs: 500 });
      await ipn.drain({ budgetMs: 500 });
      const after = await ipn.inbox.get(key);
      expect({ first: String(first), second: second.emitted, status: after?.status }).toMatchObject({
        status: 'delivered',
      });
      expect(events.count('successful')).toBe(1);
    });
  }
  // The comparison is the router's own (mismatchesOf): a copy spelled otherwise but naming the same payment
  // (amount "5000.00", custom_data re-serialised, SUCCESS) is credited once, with those values; one whose
  // custom_data names another value (a string for a number) stays kept.
  test('a kept copy spelled otherwise is credited once as the payment the record names; another value stays kept', async () => {
    const table = `kum_${process.pid}_${randomUUID().slice(0, 8)}`;
    tables.push(table);
    await new PostgresStore({ pool: admin, table }).migrate();
    const ipn = ipnRouter({
      store: new PostgresStore({ pool: admin, table }),
      delivery: 'at-least-once',
      logger: quiet,
      unexpected: 'reject',
      statusClient: createStatusClient({
        baseUrl: provider.statusBaseUrl,
        apiKey: 'test-key',
        minIntervalMs: 0,
      }),
      reconcileAfterMs: 10,
      recoveryIntervalMs: 50,
      sweepIntervalMs: 2 ** 31 - 1,
    });
    routers.push(ipn);
    const events = recordEvents(ipn);
    const served = await listen(ipn);
    servers.push(served);
    const url = `${served.url}/`;
    await ipn.expect(`EXP.${randomUUID().slice(0, 8)}`, { amount: 1, customData: 'order-0' });
    const spelled = provider.initiate({
      amount: 5000,
      ipnUrl: url,
      customData: '{"order":9,"sku":"x"}',
      outcome: 'SUCCESSFUL',
      deliver: false,
    });
    const other = provider.initiate({
      amount: 5000,
      ipnUrl: url,
      customData: '{"order":10}',
      outcome: 'SUCCESSFUL',
      deliver: false,
    });
    expect(
      await provider.forge({
        ipnUrl: url,
        transactionId: spelled.transactionId,
        state: 'SUCCESS',
        amount: '5000.00' as unknown as number,
        customData: '{ "sku": "x", "order": 9.0 }',
      }),
    ).toBe(200);
    expect(
      await provider.forge({ ipnUrl: url, transactionId: other.transactionId, customData: '{"order":"10"}' }),
    ).toBe(200);
    for (let i = 0; i < 200 && events.count('rejected') < 2; i += 1)
      await new Promise((resolve) => setTimeout(resolve, 10));
    expect(events.count('rejected')).toBe(2);
    expect(await ipn.reconcile(spelled.transactionId)).toMatchObject({ emitted: true });
    expect(await ipn.reconcile(other.transactionId)).toMatchObject({ emitted: false });
    await ipn.drain({ budgetMs: 500 });
    expect(await ipn.reconcile(spelled.transactionId)).toMatchObject({ emitted: false });
    await ipn.drain({ budgetMs: 500 });
    expect(events.of('successful')).toEqual([
      expect.objectContaining({ transaction_id: spelled.transactionId, amount: 5000 }),
    ]);
    expect(await ipn.inbox.get(`${other.transactionId}:SUCCESSFUL`)).toMatchObject({ status: 'failed' });
  });
});
