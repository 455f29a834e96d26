import { createStatusClient, MemoryStore } from 'ipn-kit';
import { quiet } from '../helpers/quiet-logger.js';
import { until } from '../helpers/until.js';
import { perTestService, quietRouter } from '../helpers/verified-payments.js';

// Review of branch dead-forged: the duplicate path's read of the entry (at least once, verify) on a store
// that fails or never answers: the copy is answered 503 (the service resends it), never 500 nor a hang.

jest.setTimeout(20_000);

const t = perTestService();

for (const how of ['fails', 'hangs'] as const) {
  test(`a duplicate whose entry read ${how} is answered 503`, async () => {
    const { transactionId: id } = t.provider.initiate({
      amount: 5000,
      ipnUrl: 'http://127.0.0.1:9/unused',
      customData: 'order-1',
      outcome: 'SUCCESSFUL',
      deliver: false,
    });
    await until(() => t.provider.transaction(id)?.state === 'SUCCESSFUL', 'processing');
    const store = new MemoryStore();
    const verify = createStatusClient({ baseUrl: t.provider.statusBaseUrl, apiKey: 'k', logger: quiet });
    const { ipn, recorder, url } = await t.serve(
      quietRouter({ store, delivery: 'at-least-once', verify, storeTimeoutMs: 200 }),
    );
    ipn.on('successful', () => {});
    ipn.on('error', () => {});
    expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(200);
    await until(() => recorder.count('successful') > 0, 'delivered');
    store.get = () => (how === 'fails' ? Promise.reject(new Error('down')) : new Promise(() => {}));
    expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(503);
  });
}
