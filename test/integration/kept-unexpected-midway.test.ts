import { PostgresStore, type PgQueryable } from 'ipn-kit/postgres';
import { expectAnother, keptRouter, resendingService } from '../helpers/kept-unexpected.js';
import { postgresTables } from '../helpers/postgres-tables.js';
import { describeWithService } from '../helpers/services.js';

jest.setTimeout(60_000);

describeWithService('PostgreSQL', 'a kept unexpected copy made due, the store failing mid-way', () => {
  const service = resendingService();
  const { admin, table: migrated } = postgresTables('kum');

  /** A router over `pool` (table `table`) that refuses what nobody expected, served; expectations in use. */
  async function instance(pool: PgQueryable, table: string) {
    const served = await service.serve(
      keptRouter(
        new PostgresStore({ pool, table }),
        { baseUrl: service.provider.statusBaseUrl, minIntervalMs: 0 },
        { unexpected: 'reject', recoveryIntervalMs: 50 },
      ),
    );
    await expectAnother(served.ipn);
    return served;
  }

  for (const [name, markFails] of [
    ['marked kept', false],
    ['still under its hold lease', true],
  ] as const) {
    test(`${name}: its replay failing, it is delivered once all the same`, async () => {
      const table = await migrated();
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
      const { ipn, events, url } = await instance(queryable, table);
      const paid = service.provider.initiate({
        amount: 5000,
        ipnUrl: url,
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
    const table = await migrated();
    const { ipn, events, url } = await instance(admin, table);
    const spelled = service.provider.initiate({
      amount: 5000,
      ipnUrl: url,
      customData: '{"order":9,"sku":"x"}',
      outcome: 'SUCCESSFUL',
      deliver: false,
    });
    const other = service.provider.initiate({
      amount: 5000,
      ipnUrl: url,
      customData: '{"order":10}',
      outcome: 'SUCCESSFUL',
      deliver: false,
    });
    expect(
      await service.provider.forge({
        ipnUrl: url,
        transactionId: spelled.transactionId,
        state: 'SUCCESS',
        amount: '5000.00' as unknown as number,
        customData: '{ "sku": "x", "order": 9.0 }',
      }),
    ).toBe(200);
    expect(
      await service.provider.forge({
        ipnUrl: url,
        transactionId: other.transactionId,
        customData: '{"order":"10"}',
      }),
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
