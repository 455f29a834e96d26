import { randomUUID } from 'node:crypto';
import { MemoryStore, type IpnRouter, type Store } from 'ipn-kit';
import {
  closeServed,
  closeWhileOpening,
  firstClaimHeld,
  pooled,
  postgresConnections,
  redisConnections,
  type Connected,
} from '../helpers/ended-pool.js';
import { settle } from '../helpers/servers.js';
import { describeWithService } from '../helpers/services.js';
import { until } from '../helpers/until.js';
import { latch, paid, perTestService, quietRouter, statusClientOf } from '../helpers/verified-payments.js';

// ipn.close() at most once, the claims the router makes with nobody waiting for them: a sweep started by
// its timer, and a claim whose answer was lost, to be asked again later. The host ends its pool once
// close() resolved: a claim written whose delivery (the lifecycle's decision, or its release) runs into the
// ended pool, or that nobody asks about again, leaves the key claimed for ttlMs with nothing delivered; the
// service's resend is then a duplicate, and the payment is lost.

const t = perTestService({ unhandled: true });

test('at-most-once: a sweep its timer started, claiming as close() runs, is waited for: the payment is credited once', async () => {
  const id = await paid(t.provider);
  const data = new MemoryStore();
  // The sweep's claim is written, and answers once the test opens the gate (a query in flight).
  const held = firstClaimHeld(data, id);
  const { store, open } = held;
  const settings = { statusClient: statusClientOf(t.provider), reconcileAfterMs: 1, sweepIntervalMs: 20 };
  const { ipn, recorder } = await t.serve(quietRouter({ store, ...settings }));
  await ipn.expect(id, { amount: 100 });
  await until(() => held.claiming, 'the sweep claiming');
  await closeWhileOpening(t, ipn, open); // the claim answers while close() runs
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

test('at-most-once: a claim whose answer was lost, still to be asked again as close() runs, is not left claimed: the resend is credited once', async () => {
  const id = await paid(t.provider);
  const data = new MemoryStore();
  let lost = false;
  // The claim is written, and its answer lost (a connection reset after the commit): answered 503.
  const store = pooled(data, (key, claim) => {
    if (!key.startsWith(id) || lost) return undefined;
    lost = true;
    claim();
    return Promise.reject(new Error('Connection terminated unexpectedly'));
  });
  const { ipn, recorder, url } = await t.serve(quietRouter({ store }));
  expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(503);
  await t.running?.close();
  t.running = undefined;
  await ipn.close({ timeoutMs: 5_000 }); // before the claim is asked again (after 500 ms)
  t.ipn = undefined;
  await settle();
  const credited = recorder.count('successful');
  // The next process over the same data: the service's resend, after the 503.
  const next = await t.serve(quietRouter({ store: pooled(data) }));
  expect(await t.provider.forge({ ipnUrl: next.url, transactionId: id })).toBe(200);
  await until(() => next.recorder.count('successful') + next.recorder.count('duplicate') > 0, 'the resend');
  await settle();
  expect(credited + next.recorder.count('successful')).toBe(1);
  expect(t.unhandled).toEqual([]);
});

/**
 * `store`, whose first claim of `id` goes through `hold` (the store's own claim, bound, as `claim`); at least
 * once (`method` 'receive'), its first receive of `id`.
 */
function claimsOf(
  store: Store,
  id: string,
  hold: (claim: () => Promise<boolean>) => Promise<boolean>,
  method: 'claim' | 'receive' = 'claim',
): Store {
  const target = store as unknown as Record<string, (key: string, ...rest: unknown[]) => Promise<boolean>>;
  const own = (target[method] as (typeof target)[string]).bind(store);
  let first = true;
  target[method] = (key: string, ...rest: unknown[]) => {
    const claim = async () => own(key, ...rest);
    if (!key.startsWith(id) || !first) return claim();
    first = false;
    return hold(claim);
  };
  return store;
}

/**
 * The scenarios above, over a real store whose connection the host ends once close() resolved; `connect`
 * opens the store of one test (`space`: its own table or prefix, as the fake service's ids start over).
 */
function overRealStore(connectTo: (space: string) => Promise<Connected>) {
  let connect: () => Promise<Connected>;
  beforeEach(() => {
    const space = randomUUID().slice(0, 6);
    connect = () => connectTo(space);
  });

  test('a sweep claiming as close() runs is waited for: credited once in all', async () => {
    const id = await paid(t.provider);
    const { gate, open } = latch();
    let claiming = false;
    const first = await connect();
    // The sweep's claim is written, and its answer held until the test opens the gate.
    const store = claimsOf(first.store, id, async (claim) => {
      claiming = true;
      const claimed = await claim();
      await gate;
      return claimed;
    });
    const settings = { statusClient: statusClientOf(t.provider), reconcileAfterMs: 1, sweepIntervalMs: 20 };
    const { ipn, recorder } = await t.serve(quietRouter({ store, ...settings }));
    await ipn.expect(id, { amount: 100 });
    await until(() => claiming, 'the sweep claiming');
    await closeWhileOpening(t, ipn, open);
    await first.end(); // the host's shutdown: its connection, once the router closed
    await new Promise((resolve) => setTimeout(resolve, 60));
    await settle();
    const credited = recorder.count('successful');
    const again = await connect();
    const next = await t.serve(quietRouter({ store: again.store, ...settings, sweepIntervalMs: 60_000 }));
    expect(await t.provider.forge({ ipnUrl: next.url, transactionId: id })).toBe(200);
    await until(() => next.recorder.count('successful') + next.recorder.count('duplicate') > 0, 'the resend');
    await settle();
    expect(credited + next.recorder.count('successful')).toBe(1);
    await closeServed(t);
    await again.end();
    expect(t.unhandled).toEqual([]);
  });

  test('a claim whose answer was lost, still to be asked again as close() runs, is let go: the resend is credited once', async () => {
    const id = await paid(t.provider);
    const first = await connect();
    // Written, and its answer lost (a connection reset after the commit): answered 503.
    const store = claimsOf(first.store, id, async (claim) => {
      await claim();
      throw new Error('Connection terminated unexpectedly');
    });
    const { ipn, recorder, url } = await t.serve(quietRouter({ store }));
    expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(503);
    await t.running?.close();
    t.running = undefined;
    await ipn.close({ timeoutMs: 5_000 });
    t.ipn = undefined;
    await first.end();
    await settle();
    const credited = recorder.count('successful');
    const again = await connect();
    const next = await t.serve(quietRouter({ store: again.store }));
    expect(await t.provider.forge({ ipnUrl: next.url, transactionId: id })).toBe(200);
    await until(() => next.recorder.count('successful') + next.recorder.count('duplicate') > 0, 'the resend');
    await settle();
    expect(credited + next.recorder.count('successful')).toBe(1);
    await closeServed(t);
    await again.end();
    expect(t.unhandled).toEqual([]);
  });
  // A claim that commits but answers after storeTimeoutMs (answered 503) is delivered late, with no request
  // whose answered work close() waits for: decided (verified first, with verify), then credited by the host's listener. close() must wait
  // for that listener as for any notification it delivered in the background: cut short by the host's
  // shutdown, the credit is lost, and the key stays claimed: the service's resend is a duplicate.
  test.each(['at-most-once verify', 'at-most-once'])(
    '%s: a claim landing after storeTimeoutMs, being credited as close() runs, is waited for: credited once in all',
    async (mode) => {
      const id = await paid(t.provider);
      const answered = latch();
      const first = await connect();
      // The claim is written, and its answer held until the test opens the gate (after the 503).
      const store = claimsOf(first.store, id, async (claim) => {
        const claimed = await claim();
        await answered.gate;
        return claimed;
      });
      const verify = mode === 'at-most-once verify' ? { verify: statusClientOf(t.provider) } : {};
      const settings = { ...verify, storeTimeoutMs: 300 };
      const { ipn, url } = await t.serve(quietRouter({ store, ...settings }));
      const { db, open } = creditedInHostDatabase(ipn);
      expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(503);
      answered.open(); // the claim lands late: verified, then credited
      await until(() => db.crediting, 'the late claim crediting');
      await closeWhileOpening(t, ipn, open); // the credit's write answers while close() runs
      db.ended = true; // the host's shutdown: its database and the store's pool, once the router closed
      await first.end();
      open();
      await settle();
      // The next process over the same table: the service's resend, after the 503.
      const again = await connect();
      const next = await t.serve(quietRouter({ store: again.store, ...settings }));
      expect(await t.provider.forge({ ipnUrl: next.url, transactionId: id })).toBe(200);
      await until(
        () => next.recorder.count('successful') + next.recorder.count('duplicate') > 0,
        'the resend',
      );
      await settle();
      expect(db.credited + next.recorder.count('successful')).toBe(1);
      await closeServed(t);
      await again.end();
      expect(t.unhandled).toEqual([]);
    },
  );

  // At least once the entry stays in the inbox, so nothing is lost; but its listener, cut short by the
  // host's shutdown, is run again by the next process (a second credit for a listener that is not
  // idempotent): close() waits for it as for a notification answered 200.
  test('at-least-once: a receive landing after storeTimeoutMs, being credited as close() runs, is waited for', async () => {
    const id = await paid(t.provider);
    const answered = latch();
    const first = await connect();
    // The entry is written, and its answer held until the test opens the gate (after the 503).
    const store = claimsOf(
      first.store,
      id,
      async (receive) => {
        const received = await receive();
        await answered.gate;
        return received;
      },
      'receive',
    );
    const settings = { delivery: 'at-least-once' as const, storeTimeoutMs: 300 };
    const { ipn, recorder, url } = await t.serve(quietRouter({ store, ...settings }));
    const { db, open } = creditedInHostDatabase(ipn);
    expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(503);
    answered.open(); // the entry's receive lands late: delivered now
    await until(() => db.crediting, 'the late entry crediting');
    await closeWhileOpening(t, ipn, open); // the credit's write answers while close() runs
    db.ended = true; // the host's shutdown: its database and the store's pool, once the router closed
    await first.end();
    open();
    await settle();
    expect(db.credited).toBe(1);
    const failed = recorder.of('error').map((e: { error: Error }) => e.error.message);
    expect(failed.filter((m: string) => m.includes('pool'))).toEqual([]);
    expect(t.unhandled).toEqual([]);
  });
}

describeWithService('PostgreSQL', 'PostgresStore over a pg Pool ended once close() resolved', () => {
  overRealStore(postgresConnections('cbc'));
});

describeWithService('Redis', 'RedisStore over an ioredis client quit once close() resolved', () => {
  overRealStore(redisConnections('cbc'));
});

/**
 * The host's listener of `successful` on `ipn`: `crediting` once it runs, its credit's own write (in the host's
 * database, `db`) held until `open()`, and failing once `db.ended` (the host's shutdown).
 */
function creditedInHostDatabase(ipn: IpnRouter) {
  const db = { ended: false, credited: 0, crediting: false };
  const { gate, open } = latch();
  ipn.on('successful', async () => {
    db.crediting = true;
    await gate; // the credit's own write, in the host's database
    if (db.ended) throw new Error('Cannot use a pool after calling end on the pool');
    db.credited += 1;
  });
  return { db, open };
}

// The listeners of a notification answered 200 and delivered by a verification retry (its timer's, after the
// first attempt gave up): close() waits for them as for any notification answered 200; the service never
// resends it, so a listener cut short by the host's shutdown (its database ended) loses the payment.
test('at-most-once verify: the listeners of a copy delivered by a verification retry are waited for by close()', async () => {
  const id = await paid(t.provider);
  const client = statusClientOf(t.provider);
  let asked = 0;
  // The first verification never answers (given up after verifyTimeoutMs); the retry is answered.
  const verify = {
    getStatus: (...args: Parameters<typeof client.getStatus>) =>
      (asked += 1) === 1 ? new Promise<never>(() => {}) : client.getStatus(...args),
  };
  const settings = { verify, verifyTimeoutMs: 20, verifyRetryDelayMs: 30 };
  const { ipn, url } = await t.serve(quietRouter({ store: new MemoryStore(), ...settings }));
  const { db, open } = creditedInHostDatabase(ipn);
  expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(200);
  await until(() => db.crediting, 'the retry crediting');
  await closeWhileOpening(t, ipn, open); // the credit's write answers while close() runs
  db.ended = true; // the host's shutdown: its database, once the router closed
  open();
  await settle();
  expect(db.credited).toBe(1);
  expect(t.unhandled).toEqual([]);
});

test('at-most-once: the listeners of a payment the sweep delivered are waited for by close()', async () => {
  const id = await paid(t.provider);
  const settings = { statusClient: statusClientOf(t.provider), reconcileAfterMs: 1, sweepIntervalMs: 20 };
  const { ipn } = await t.serve(quietRouter({ store: new MemoryStore(), ...settings }));
  const { db, open } = creditedInHostDatabase(ipn);
  await ipn.expect(id, { amount: 100 });
  await until(() => db.crediting, 'the sweep crediting');
  await closeWhileOpening(t, ipn, open); // the credit's write answers while close() runs
  db.ended = true; // the host's shutdown: its database, once the router closed
  open();
  await settle();
  expect(db.credited).toBe(1);
  expect(t.unhandled).toEqual([]);
});
