import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { MemoryStore } from 'ipn-kit';
import { keptRouter, keptServer } from '../helpers/kept-unexpected.js';
import { until } from '../helpers/until.js';

jest.setTimeout(30_000);

/**
 * At least once, a genuine notification that came before its `ipn.expect()` is kept as unexpected. The
 * sweep then asks the service, whose answer may be partial (it lacks `custom_data`, or the amount): the
 * router's own verification takes such a record as neither confirming nor contradicting a notification.
 * The kept copy's check compared it all the same: `custom_data` "order-1" against the record's missing
 * one (`""`) is a mismatch, so the copy stayed kept while the sweep settled the expectation on its held
 * key: the payment never credited, never `stale`, no event after its `rejected`.
 */
describe('a kept unexpected copy and a partial record of its transaction', () => {
  const serve = keptServer();
  let service: Server;
  let baseUrl: string;
  /** The fields the status answer leaves out. */
  let omit: string[] = [];
  const record = { transaction_id: 'EFB.424242', state: 'SUCCESSFUL', amount: 5000, custom_data: 'order-1' };
  beforeAll(async () => {
    service = createServer((request, response) => {
      request.resume();
      request.on('end', () => {
        const data = Object.fromEntries(Object.entries(record).filter(([field]) => !omit.includes(field)));
        response.setHeader('content-type', 'application/json');
        response.end(JSON.stringify({ statut_code: 200, message: 'ok', data }));
      });
    });
    await new Promise<void>((resolve) => service.listen(0, '127.0.0.1', resolve));
    baseUrl = `http://127.0.0.1:${(service.address() as AddressInfo).port}/api_v1/transaction`;
  });
  afterAll(async () => {
    await new Promise((resolve) => service.close(resolve));
  });

  test.each([
    ['custom_data', { amount: 5000 }],
    ['amount', { customData: 'order-1' }],
  ])(
    'a record lacking %s neither credits nor drops it: stale at the last query, never settled on the kept key',
    async (lacking, expectation) => {
      omit = [lacking];
      const { ipn, events, post } = await serve(
        keptRouter(
          new MemoryStore(),
          { baseUrl, minIntervalMs: 0 },
          { unexpected: 'reject', reconcileAttempts: 1 },
        ),
      );
      await ipn.expect('EXP.1', { amount: 1, customData: 'order-0' });
      const answer = await post(record);
      expect(answer.status).toBe(200);
      await until(() => events.count('rejected') > 0, 'the kept copy');
      await ipn.expect(record.transaction_id, expectation);
      await new Promise((resolve) => setTimeout(resolve, 20));
      await ipn.sweep();
      await ipn.drain({ budgetMs: 300 });
      // Not credited on a partial record, but reported: the expectation's last query could not decide it.
      expect(events.count('successful')).toBe(0);
      const stale = events.of('stale') as Array<{ transactionId: string; reason: string }>;
      expect(stale.filter((e) => e.transactionId === record.transaction_id)).toEqual([
        expect.objectContaining({ reason: 'unavailable', message: expect.stringContaining(lacking) }),
      ]);
    },
  );

  test('reconcile() on a partial record leaves the expectation; the whole record then credits the kept copy once', async () => {
    omit = ['custom_data'];
    const { ipn, events, post } = await serve(
      keptRouter(new MemoryStore(), { baseUrl, minIntervalMs: 0 }, { unexpected: 'reject' }),
    );
    await ipn.expect('EXP.1', { amount: 1, customData: 'order-0' });
    await post(record);
    await until(() => events.count('rejected') > 0, 'the kept copy');
    await ipn.expect(record.transaction_id, { amount: 5000 });
    expect(await ipn.reconcile(record.transaction_id)).toMatchObject({ emitted: false, rejected: false });
    omit = [];
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await ipn.reconcile(record.transaction_id)).toMatchObject({ emitted: true });
    await until(() => events.count('successful') > 0, 'the credit');
    expect(events.of('successful')).toEqual([expect.objectContaining({ custom_data: 'order-1' })]);
  });
});
