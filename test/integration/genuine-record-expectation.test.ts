import { createStatusClient, ipnRouter, MemoryStore, type IpnRouter } from 'ipn-kit';
import { createFakeProvider, type FakeProvider } from '../../lib/testing.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, settle, type Running } from '../helpers/servers.js';
import { until } from '../helpers/until.js';

// A copy the service contradicts in amount only is a forgery of a real payment, and the service's own record
// is delivered in its place (genuineRecord). That record is not checked against the transaction's
// expectation, which the sweep does ("contradicts its expectation: not credited"), and which rejects the
// genuine copy itself, with no query. So a forged copy that matches the expectation gets a record that
// contradicts it credited. Found while reviewing the several-keys change (merge f79dd63), where a record
// found under another account than the one named reaches the same path; older than it, and not fixed here:
// the expectation checked before the claim is not at hand where verification ends (at least once, on
// another instance maybe), so the fix is to read it again there, larger than this review's time.

let provider: FakeProvider;
let running: Running | undefined;
let ipn: IpnRouter | undefined;
beforeEach(async () => {
  provider = await createFakeProvider({ apiKey: 'k' });
});
afterEach(async () => {
  await running?.close();
  await ipn?.close();
  await provider.close();
});

for (const delivery of ['at-most-once', 'at-least-once'] as const) {
  test.failing(
    `${delivery}: a forged copy matching its expectation never gets a service record contradicting that expectation credited`,
    async () => {
      // The service's record says 100; the partner expects 5000 for this order.
      const { transactionId: id } = provider.initiate({
        amount: 100,
        ipnUrl: 'http://127.0.0.1:9/unused',
        customData: 'order-a',
        outcome: 'SUCCESSFUL',
        deliver: false,
      });
      await until(() => provider.transaction(id)?.state === 'SUCCESSFUL', 'processing');
      const verify = createStatusClient({ baseUrl: provider.statusBaseUrl, apiKey: 'k', logger: quiet });
      ipn = ipnRouter({
        store: new MemoryStore(),
        delivery,
        verify,
        logger: quiet,
        verifyRetryDelayMs: 5,
        sweepIntervalMs: 2 ** 31 - 1,
      });
      const recorder = recordEvents(ipn);
      running = await listen(ipn);
      await ipn.expect(id, { amount: 5000, customData: 'order-a' });
      await provider.forge({ ipnUrl: `${running.url}/`, transactionId: id, amount: 5000 });
      await until(() => recorder.count('rejected') > 0, 'the forgery rejected');
      await settle();
      await until(() => verify.stats.queries > 0 && recorder.count('notification') > 0, 'its outcome');
      expect(recorder.count('successful')).toBe(0);
    },
  );
}
