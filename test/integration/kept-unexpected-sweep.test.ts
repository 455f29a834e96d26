import { PostgresStore } from 'ipn-kit/postgres';
import { expectAnother, keptRouter, resendingService, type Kept } from '../helpers/kept-unexpected.js';
import { postgresTables } from '../helpers/postgres-tables.js';
import { until } from '../helpers/until.js';
import { describeWithService, eventually } from '../helpers/services.js';

jest.setTimeout(30_000);

/**
 * At least once, with a status client: a genuine notification that arrives before its `ipn.expect()` (the
 * service notified at once, or the expect() write was slow) is unexpected; when its one status query is
 * refused (the client over its budget, a block), it is kept and not credited. Once expected, the sweep (or
 * `ipn.reconcile()`) asks the service, finds the record matching, "delivers" it through the dedupe, finds
 * the key held by that kept copy and settled the expectation: the payment stayed kept, never credited,
 * never `stale`, though the guarantee says an expected transaction's payment is reconciled or reported. The
 * kept copy the record confirms is now made due, as an operator's replay of its key would; one the record
 * contradicts (a forgery) is replaced by the record, which is made due in the same write: the genuine
 * payment is credited once, never the forgery.
 */
describeWithService('PostgreSQL', 'a kept unexpected notification of a transaction expected later', () => {
  const service = resendingService();
  const { admin, table: migrated } = postgresTables('kus');

  async function instance() {
    const table = await migrated();
    const { ipn, events, url } = await service.serve(
      keptRouter(
        new PostgresStore({ pool: admin, table }),
        // Short waits for a test: the client's silence after the block, the sweep's first query.
        { baseUrl: service.provider.statusBaseUrl, blockCooldownMs: 20, minIntervalMs: 10 },
        { recoveryIntervalMs: 50 },
      ),
    );
    // Expectations in use: this instance initiated a payment before.
    await expectAnother(ipn);
    return { ipn, events, url };
  }

  /** Its one status query refused (a block): kept, `rejected` (reason `unexpected`), not credited. */
  async function keptWhileBlocked(events: Kept['events'], post: () => Promise<unknown>) {
    service.provider.block();
    await post();
    await until(() => events.count('rejected') > 0, 'the kept notification');
    expect(events.of('rejected')).toEqual([expect.objectContaining({ reason: 'unexpected' })]);
    service.provider.unblock();
    await new Promise((resolve) => setTimeout(resolve, 50)); // past the client's silence after the block
  }

  test('the sweep that finds the record matching a kept copy delivers it, once', async () => {
    const { ipn, events, url } = await instance();
    const paid = service.provider.initiate({
      amount: 5000,
      ipnUrl: url,
      customData: 'order-1',
      outcome: 'SUCCESSFUL',
    });
    await keptWhileBlocked(events, () => paid.delivered);
    const key = `${paid.transactionId}:SUCCESSFUL`;
    expect(await ipn.inbox.get(key)).toMatchObject({ status: 'failed' });

    await ipn.expect(paid.transactionId, { amount: 5000, customData: 'order-1' });
    await new Promise((resolve) => setTimeout(resolve, 20)); // due (reconcileAfterMs)
    expect(await ipn.sweep()).toMatchObject({ reconciled: 1, stale: 0 });
    await until(() => events.count('successful') > 0, 'the credit');
    let entry = await ipn.inbox.get(key);
    for (let tries = 0; entry?.status !== 'delivered' && tries < 200; tries += 1) {
      await new Promise((resolve) => setTimeout(resolve, 10)); // the attempt commits its mark after the event
      entry = await ipn.inbox.get(key);
    }
    expect(entry).toMatchObject({ status: 'delivered' });

    // Asked again, nothing more is credited.
    expect(await ipn.sweep()).toMatchObject({ reconciled: 0 });
    expect(await ipn.reconcile(paid.transactionId)).toMatchObject({ emitted: false });
    await ipn.drain({ budgetMs: 500 });
    expect(events.of('successful').map((n: { custom_data: string }) => n.custom_data)).toEqual(['order-1']);
  });

  // A forged copy kept under a genuine payment's key before that payment exists or is expected (transaction
  // ids are a prefix and a sequence: the next ones are easy to guess) held the key for good: the genuine
  // notification was answered as its duplicate, and the sweep found the key held and settled the expectation.
  // The service's record now takes the kept forgery's place (`replayWith`) and is credited, once.
  test('a forged copy kept before its transaction exists does not make the genuine payment a duplicate', async () => {
    const { ipn, events, url } = await instance();
    const id = `EFB.${Date.now()}`; // the next id the service will give
    expect(
      await service.provider.forge({ ipnUrl: url, transactionId: id, customData: 'order-3', amount: 1 }),
    ).toBe(200);
    await until(() => events.count('rejected') > 0, 'the kept forgery'); // the service: not found
    const paid = service.provider.initiate({
      transactionId: id,
      amount: 5000,
      ipnUrl: url,
      customData: 'order-3',
      outcome: 'SUCCESSFUL',
      deliver: false,
    });
    await ipn.expect(paid.transactionId, { amount: 5000, customData: 'order-3' });
    // The service's notification of it, expected and matching: it takes the kept forgery's place on
    // arrival (answered 200, not as a duplicate), its expectation settled, so the sweep has nothing to do.
    const genuine = { transaction_id: id, state: 'SUCCESSFUL', amount: 5000, custom_data: 'order-3' };
    const answer = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(genuine),
    });
    expect(await answer.json()).toEqual({ ok: true });
    await new Promise((resolve) => setTimeout(resolve, 20)); // due (reconcileAfterMs)
    expect(await ipn.sweep()).toMatchObject({ reconciled: 0, stale: 0 });
    await until(() => events.count('successful') > 0, 'the credit');
    await ipn.drain({ budgetMs: 500 });
    expect(events.of('successful')).toEqual([expect.objectContaining({ amount: 5000 })]);
    expect(await ipn.inbox.get(`${id}:SUCCESSFUL`)).toMatchObject({
      status: 'delivered',
      record: expect.objectContaining({ amount: 5000, custom_data: 'order-3' }),
    });
  });

  test("a kept copy the record contradicts (another amount) is replaced by the service's record, credited once", async () => {
    const { ipn, events, url } = await instance();
    const paid = service.provider.initiate({
      amount: 5000,
      ipnUrl: url,
      customData: 'order-2',
      outcome: 'SUCCESSFUL',
      deliver: false,
    });
    await keptWhileBlocked(events, () =>
      service.provider.forge({
        ipnUrl: url,
        transactionId: paid.transactionId,
        customData: 'order-2',
        amount: 50,
      }),
    );
    const key = `${paid.transactionId}:SUCCESSFUL`;
    await ipn.expect(paid.transactionId, { amount: 5000, customData: 'order-2' });
    await new Promise((resolve) => setTimeout(resolve, 20)); // due (reconcileAfterMs)
    expect(await ipn.sweep()).toMatchObject({ reconciled: 1, stale: 0 });
    await until(() => events.count('successful') > 0, 'the credit');
    // The attempt commits its mark after the event.
    await eventually(
      'the entry is delivered',
      async () => (await ipn.inbox.get(key))?.status === 'delivered',
    );
    // The service's record, never the forged 50.
    expect(await ipn.inbox.get(key)).toMatchObject({
      status: 'delivered',
      record: expect.objectContaining({ amount: 5000, custom_data: 'order-2' }),
    });

    // Asked again, nothing more is credited.
    expect(await ipn.sweep()).toMatchObject({ reconciled: 0 });
    expect(await ipn.reconcile(paid.transactionId)).toMatchObject({ emitted: false });
    await ipn.drain({ budgetMs: 500 });
    expect(events.of('successful')).toEqual([
      expect.objectContaining({ amount: 5000, custom_data: 'order-2' }),
    ]);
  });
});
