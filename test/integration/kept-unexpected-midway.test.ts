import { PostgresStore, type PgQueryable } from 'ipn-kit/postgres';
import { expectAnother, keptRouter, resendingService } from '../helpers/kept-unexpected.js';
import { postgresTables } from '../helpers/postgres-tables.js';
import { describeWithService, eventually } from '../helpers/services.js';

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
  // A forgery (amount 50) kept under the key of a payment of 5000: the service's record takes its place in
  // one write (replayWith), after the hold, if any, is ended into a kept copy, never due. That write failing
  // once, the forgery is never delivered meanwhile; asked again, the record is credited once.
  for (const [name, markFails] of [
    ['marked kept', false],
    ['still under its hold lease', true],
  ] as const) {
    test(`a forgery ${name}: the record's write in its place failing, the forgery is never delivered, the record once`, async () => {
      const table = await migrated();
      const failing = { mark: markFails, replayWith: false };
      const queryable: PgQueryable = {
        query(text: string, values?: unknown[]): ReturnType<PgQueryable['query']> {
          if (
            failing.mark &&
            (values ?? []).some((v) => typeof v === 'string' && v.startsWith('unexpected: the notification'))
          ) {
            failing.mark = false;
            return Promise.reject(new Error('connection reset (mark)'));
          }
          if (failing.replayWith && /SET record = \$2::jsonb, status = 'received', attempts = 0/.test(text)) {
            failing.replayWith = false;
            return Promise.reject(new Error('connection reset (replayWith)'));
          }
          return admin.query(text, values);
        },
      };
      const { ipn, events, url } = await instance(queryable, table);
      const paid = service.provider.initiate({
        amount: 5000,
        ipnUrl: url,
        customData: 'order-11',
        outcome: 'SUCCESSFUL',
        deliver: false,
      });
      const forged = { ipnUrl: url, transactionId: paid.transactionId, customData: 'order-11', amount: 50 };
      expect(await service.provider.forge(forged)).toBe(200);
      const key = `${paid.transactionId}:SUCCESSFUL`;
      await eventually('the forgery is kept', async () => (await ipn.inbox.get(key)) !== undefined);
      await eventually('the forgery is rejected', () => events.count('rejected') > 0);
      expect(await ipn.inbox.get(key)).toMatchObject({ status: markFails ? 'received' : 'failed' });
      await ipn.expect(paid.transactionId, { amount: 5000, customData: 'order-11' });

      failing.replayWith = true;
      const first = await ipn.reconcile(paid.transactionId).then(
        (r) => r.emitted,
        (e: unknown) => e,
      );
      expect(String(first)).toMatch(/connection reset \(replayWith\)/);
      // Asked again (drain's sweep pass, or this reconcile): the record takes the copy's place, credited once.
      await ipn.drain({ budgetMs: 500 });
      await ipn.reconcile(paid.transactionId);
      await eventually('the record is delivered', async () => {
        await ipn.drain({ budgetMs: 100 });
        return (await ipn.inbox.get(key))?.status === 'delivered';
      });
      expect(await ipn.reconcile(paid.transactionId)).toMatchObject({ emitted: false });
      await ipn.drain({ budgetMs: 500 });
      // Never the forgery: its 50 was never delivered, between the two writes or after the failed one.
      expect(events.of('successful')).toEqual([expect.objectContaining({ amount: 5000 })]);
      expect(await ipn.inbox.get(key)).toMatchObject({
        status: 'delivered',
        record: expect.objectContaining({ amount: 5000 }),
      });
    });
  }

  // The comparison is the router's own (mismatchesOf): a copy spelled otherwise but naming the same payment
  // (amount "5000.00", custom_data re-serialised, SUCCESS) is credited once, with those values; one whose
  // custom_data names another value (a string for a number) is contradicted: the service's record takes its
  // place, and is credited once with the record's values, never the copy's.
  test("a kept copy spelled otherwise is credited once as the payment the record names; another value is replaced by the record's", async () => {
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
    expect(await ipn.reconcile(other.transactionId)).toMatchObject({ emitted: true });
    await ipn.drain({ budgetMs: 500 });
    expect(await ipn.reconcile(spelled.transactionId)).toMatchObject({ emitted: false });
    expect(await ipn.reconcile(other.transactionId)).toMatchObject({ emitted: false });
    await ipn.drain({ budgetMs: 500 });
    const credited = events.of('successful') as Array<{ transaction_id: string }>;
    expect(credited).toHaveLength(2);
    expect(credited).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ transaction_id: spelled.transactionId, amount: 5000 }),
        expect.objectContaining({ transaction_id: other.transactionId, custom_data: '{"order":10}' }),
      ]),
    );
    expect(await ipn.inbox.get(`${other.transactionId}:SUCCESSFUL`)).toMatchObject({
      status: 'delivered',
      record: expect.objectContaining({ custom_data: '{"order":10}' }),
    });
  });
});
