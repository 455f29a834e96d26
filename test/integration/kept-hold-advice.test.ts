import { ipnRouter, MemoryStore, type Store } from 'ipn-kit';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { until } from '../helpers/until.js';

// A kept unexpected copy whose second write (the one that marks it kept, `failed`) failed stays `received`
// under its century-long hold lease. Its `rejected` event advises `ipn.inbox.replay(key, ['failed'])` (since
// the advice stopped being `replay(key)`, so as not to credit a copy another instance's sweep had credited):
// that advice must deliver such a copy too, once, as it delivers one marked kept. It resolved `false` and
// did nothing: the payment, checked by the operator, stayed uncredited for good.

jest.setTimeout(20_000);

/** A MemoryStore whose write marking an unexpected copy kept (`failed`, `unexpected: ...`) fails once. */
function failingMark(inner: MemoryStore): { store: Store; failed: () => number } {
  let failed = 0;
  type Settle = (key: string, leaseId: string, settlement: { status: string; error?: string }) => unknown;
  const store = new Proxy(inner, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (property === 'settle')
        return (key: string, leaseId: string, settlement: { status: string; error?: string }) => {
          if (
            failed === 0 &&
            settlement.status === 'failed' &&
            settlement.error?.startsWith('unexpected: ')
          ) {
            failed += 1;
            return Promise.reject(new Error('connection lost'));
          }
          return (value as Settle).call(target, key, leaseId, settlement);
        };
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { store, failed: () => failed };
}

test("a kept copy left under its hold lease by a failed write is delivered, once, by its rejected event's advice: replay(key, ['failed'])", async () => {
  const { store, failed } = failingMark(new MemoryStore());
  const ipn = ipnRouter({
    store,
    delivery: 'at-least-once',
    unexpected: 'reject',
    logger: quiet,
    backgroundWork: 'drain',
  });
  const recorder = recordEvents(ipn);
  try {
    // Expectations in use: another payment is expected.
    await ipn.expect(`EXP.${Date.now()}`, { amount: 5000, customData: 'x' });
    const payload = uniquePayload({ amount: 7300, custom_data: 'order-held' });
    const key = `${payload.transaction_id as string}:SUCCESSFUL`;
    const response = await ipn.fetch(
      new Request('http://localhost/ipn', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(payload),
      }),
    );
    expect(response.status).toBe(200);
    await until(() => recorder.count('rejected') === 1, 'the rejected event');
    expect(failed()).toBe(1);
    const [rejected] = recorder.of('rejected') as { reason: string; message: string; key: string }[];
    expect(rejected).toEqual(expect.objectContaining({ reason: 'unexpected', key }));
    // The advice the event gives, once the operator checked the payment.
    expect(rejected!.message).toContain("ipn.inbox.replay(key, ['failed'])");
    expect((await ipn.inbox.get(key))?.status).toBe('received'); // under its hold lease
    await ipn.drain({ budgetMs: 1_000 });
    expect(recorder.count('successful')).toBe(0);

    expect(await ipn.inbox.replay(key, ['failed'])).toBe(true);
    await ipn.drain({ budgetMs: 1_000 });
    await until(() => recorder.count('successful') === 1, 'the replayed copy credited');
    expect((await ipn.inbox.get(key))?.status).toBe('delivered');
    // Followed again (the operator's second click): nothing more.
    expect(await ipn.inbox.replay(key, ['failed'])).toBe(false);
    await ipn.drain({ budgetMs: 1_000 });
    expect(recorder.count('successful')).toBe(1);
  } finally {
    await ipn.close();
  }
});
