import { MemoryStore, type Store } from 'ipn-kit';
import { settle } from '../helpers/servers.js';
import { until } from '../helpers/until.js';
import { latch, paid, perTestService, quietRouter, statusClientOf } from '../helpers/verified-payments.js';

// ipn.close() at most once, the claims the router makes with nobody waiting for them: a sweep started by
// its timer. The host ends its pool once close() resolved: a claim written whose delivery (the lifecycle's
// decision, or its release) runs into the ended pool leaves the key claimed for ttlMs with nothing
// delivered; the service's resend is then a duplicate, and the payment is lost.

const t = perTestService({ unhandled: true });

/** What a test makes of the store's claims: `undefined` claims as the data does. */
type Claim = (key: string, claim: () => boolean) => boolean | Promise<boolean> | undefined;

/**
 * `data` seen through a pool the host ends once `ipn.close()` resolved (the store's `close()` here): every
 * call after it throws, the lifecycle's and the expectations' too. A claim started before that still lands
 * (a query in flight on a checked-out connection); `claim` lets a test hold or lose its answer.
 */
function pooled(data: MemoryStore, claim: Claim = () => undefined): Store {
  let ended = false;
  const use = <T>(call: () => T): T => {
    if (ended) throw new Error('Cannot use a pool after calling end on the pool');
    return call();
  };
  const wrap = (target: object): object =>
    new Proxy(target, {
      get(on, name) {
        const value: unknown = Reflect.get(on, name);
        if (typeof value !== 'function') return value;
        const method = value as (...args: unknown[]) => unknown;
        return (...args: unknown[]) => use(() => method.apply(on, args));
      },
    });
  const expectations = wrap(data.expectations);
  const lifecycle = wrap(data.lifecycle);
  const store = wrap(data);
  return new Proxy(store, {
    get(on, name) {
      if (name === 'expectations') return expectations;
      if (name === 'lifecycle') return lifecycle;
      if (name === 'close') return () => void (ended = true);
      if (name === 'claim')
        return (key: string, ttlMs: number, token?: string) =>
          use(() => {
            const now = () => data.claim(key, ttlMs, token);
            return claim(key, now) ?? now();
          });
      return Reflect.get(on, name);
    },
  }) as Store;
}

test('at-most-once: a sweep its timer started, claiming as close() runs, is waited for: the payment is credited once', async () => {
  const id = await paid(t.provider);
  const data = new MemoryStore();
  const { gate, open } = latch();
  let claiming = false;
  // The sweep's claim is written, and answers once the test opens the gate (a query in flight).
  const store = pooled(data, (key, claim) => {
    if (!key.startsWith(id) || claiming) return undefined;
    claiming = true;
    const claimed = claim();
    return gate.then(() => claimed);
  });
  const settings = { statusClient: statusClientOf(t.provider), reconcileAfterMs: 1, sweepIntervalMs: 20 };
  const { ipn, recorder } = await t.serve(quietRouter({ store, ...settings }));
  await ipn.expect(id, { amount: 100 });
  await until(() => claiming, 'the sweep claiming');
  await t.running?.close();
  t.running = undefined;
  const closed = ipn.close({ timeoutMs: 5_000 });
  setTimeout(open, 50); // the claim answers while close() runs
  await closed;
  t.ipn = undefined;
  await new Promise((resolve) => setTimeout(resolve, 60)); // the sweep, had close() not waited, goes on now
  await settle();
  const credited = recorder.count('successful');
  // The next process over the same data: the service resends; credited once in all.
  const next = await t.serve(quietRouter({ store: pooled(data), ...settings, sweepIntervalMs: 60_000 }));
  expect(await t.provider.forge({ ipnUrl: next.url, transactionId: id })).toBe(200);
  await until(() => next.recorder.count('successful') + next.recorder.count('duplicate') > 0, 'the resend');
  await settle();
  expect(credited + next.recorder.count('successful')).toBe(1);
  const failed = recorder.of('error').map((e: { error: Error }) => e.error.message);
  expect(failed.filter((m: string) => m.includes('the pool'))).toEqual([]);
  expect(t.unhandled).toEqual([]);
});
