import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createStatusClient, ipnRouter, MemoryStore, type IpnRouter } from 'ipn-kit';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, type Running } from '../helpers/servers.js';
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
  const servers: Running[] = [];
  const routers: IpnRouter[] = [];
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
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((server) => server.close()));
    await Promise.all(routers.splice(0).map((ipn) => ipn.close()));
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
      const ipn = ipnRouter({
        store: new MemoryStore(),
        delivery: 'at-least-once',
        logger: quiet,
        unexpected: 'reject',
        statusClient: createStatusClient({ baseUrl, apiKey: 'test-key', minIntervalMs: 0 }),
        reconcileAfterMs: 10,
        reconcileAttempts: 1,
        sweepIntervalMs: 2 ** 31 - 1,
      });
      routers.push(ipn);
      const events = recordEvents(ipn);
      const served = await listen(ipn);
      servers.push(served);
      await ipn.expect('EXP.1', { amount: 1, customData: 'order-0' });
      const answer = await fetch(served.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(record),
      });
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
    const ipn = ipnRouter({
      store: new MemoryStore(),
      delivery: 'at-least-once',
      logger: quiet,
      unexpected: 'reject',
      statusClient: createStatusClient({ baseUrl, apiKey: 'test-key', minIntervalMs: 0 }),
      reconcileAfterMs: 10,
      sweepIntervalMs: 2 ** 31 - 1,
    });
    routers.push(ipn);
    const events = recordEvents(ipn);
    const served = await listen(ipn);
    servers.push(served);
    await ipn.expect('EXP.1', { amount: 1, customData: 'order-0' });
    await fetch(served.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(record),
    });
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
