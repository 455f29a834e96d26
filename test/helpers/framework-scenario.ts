import { createStatusClient, ipnRouter, type IpnRouter } from '../../lib/index.js';
import { createFakeProvider, type FakeProvider } from '../../lib/testing.js';
import { quiet } from './quiet-logger.js';
import { recordEvents } from './record-events.js';
import { until } from './until.js';

/** A framework app serving a router through a real HTTP server: the IPN address, and how to stop it. */
export interface Mounted {
  ipnUrl: string;
  close: () => Promise<void>;
}

/**
 * What every framework's suite checks, through the framework's real server and the fake payment service:
 * a payment notified and resent is credited once, a forged one under `verify` is rejected, bad input gets
 * the documented answer and event, and a JSON object is read whatever its label.
 */
export function describeFramework(name: string, mount: (ipn: IpnRouter) => Promise<Mounted>): void {
  // The tests wait on events, never on a timer; a loaded CI machine may take its time to deliver them.
  jest.setTimeout(30_000);
  describe(`${name}: the IPN route through a real server`, () => {
    let provider: FakeProvider;
    let ipn: IpnRouter;
    let recorder: ReturnType<typeof recordEvents>;
    let mounted: Mounted;
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);

    beforeAll(async () => {
      process.on('unhandledRejection', onUnhandled);
      provider = await createFakeProvider({ apiKey: 'framework-key', resendIntervalMs: 10 });
    });
    afterAll(async () => {
      process.off('unhandledRejection', onUnhandled);
      await provider.close();
    });
    beforeEach(async () => {
      // A made-up id is believed forged once the service says "not found" twice, minIntervalMs apart: short
      // waits here, as in a partner's own tests.
      const verify = createStatusClient({
        baseUrl: provider.statusBaseUrl,
        apiKey: 'framework-key',
        minIntervalMs: 50,
      });
      ipn = ipnRouter({ verify, logger: quiet, verifyRetryDelayMs: 20 });
      recorder = recordEvents(ipn);
      mounted = await mount(ipn);
    });
    afterEach(async () => {
      await mounted.close();
      await ipn.close();
      expect(unhandled).toEqual([]);
    });

    const post = (body: string, type = 'application/json') =>
      fetch(mounted.ipnUrl, { method: 'POST', headers: { 'content-type': type }, body });

    test('a payment notified, then resent twice, answers 200 each time and is credited once', async () => {
      const paid = provider.initiate({
        amount: 5000,
        ipnUrl: mounted.ipnUrl,
        customData: 'order-1',
        outcome: 'SUCCESSFUL',
        duplicates: 2,
      });
      const { transactionId, delivered } = paid;
      const report = await delivered;
      await until(() => recorder.count('successful') === 1, 'the verified payment', 20_000);
      await until(() => recorder.count('duplicate') === 2, 'both resends', 20_000);

      // A resend that comes while the first copy is still being verified is answered 503, and sent again
      // until it is answered 200, as a duplicate.
      expect(report.statuses.join()).toMatch(/^200(,(503,)*200){2}$/);
      expect(recorder.of('successful')).toEqual([
        expect.objectContaining({ transaction_id: transactionId, custom_data: 'order-1', amount: 5000 }),
      ]);
      expect(recorder.count('notification')).toBe(1);
      expect(provider.statusQueriesFor(transactionId)).toBe(1);
    });

    test('a forged notification under verify answers 200 and emits rejected, never successful', async () => {
      const status = await provider.forge({ ipnUrl: mounted.ipnUrl, customData: 'order-2' });
      await until(() => recorder.count('rejected') === 1, 'the rejection', 20_000);

      expect(status).toBe(200);
      expect(recorder.of('rejected')[0]).toMatchObject({
        reason: 'not_found',
        notification: expect.objectContaining({ custom_data: 'order-2' }),
      });
      expect(recorder.count('successful')).toBe(0);
    });

    test('malformed JSON answers 400 malformed_body in JSON and emits invalid', async () => {
      const response = await post('{"transaction_id":');

      expect(response.status).toBe(400);
      expect(response.headers.get('content-type')).toMatch(/^application\/json/);
      expect(await response.json()).toMatchObject({ error: 'malformed_body' });
      expect(recorder.names()).toEqual(['invalid']);
    });

    test('a body that cannot carry the record (multipart) answers 415 and emits invalid', async () => {
      const response = await post('--x--', 'multipart/form-data; boundary=x');

      expect(response.status).toBe(415);
      expect(await response.json()).toMatchObject({ error: 'unsupported_media_type' });
      expect(recorder.of('invalid')).toEqual([expect.objectContaining({ status: 415 })]);
    });

    test('a JSON object labelled text/plain is read: the forgery is caught by verify, not by a 415', async () => {
      const body = JSON.stringify({ transaction_id: 'TXT.1', state: 'SUCCESSFUL', custom_data: 'o' });

      const response = await post(body, 'text/plain');
      await until(() => recorder.count('rejected') === 1, 'the rejection', 20_000);

      expect(response.status).toBe(200);
      expect(recorder.count('invalid')).toBe(0);
    });

    test('GET answers 200 {"ok":true}; PUT answers 405 with Allow; neither emits', async () => {
      const get = await fetch(mounted.ipnUrl);
      const put = await fetch(mounted.ipnUrl, { method: 'PUT', body: '{}' });

      expect([get.status, put.status]).toEqual([200, 405]);
      expect(await get.json()).toEqual({ ok: true });
      expect(put.headers.get('allow')).toBe('GET, HEAD, POST');
      expect(recorder.names()).toEqual([]);
    });
  });
}
