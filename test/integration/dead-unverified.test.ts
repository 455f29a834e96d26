import { createStatusClient, MemoryStore, type Store } from 'ipn-kit';
import Redis from 'ioredis';
import { PostgresStore } from 'ipn-kit/postgres';
import { RedisStore } from 'ipn-kit/redis';
import { postgresTables } from '../helpers/postgres-tables.js';
import { describeWithService, eventually, redisUrl } from '../helpers/services.js';
import { quiet } from '../helpers/quiet-logger.js';
import { until } from '../helpers/until.js';
import { forgedPayments, perTestService, quietRouter, untilFirst } from '../helpers/verified-payments.js';

// At least once with `verify`, a forged copy that took a payment's key first (`transaction_id:state`: the
// next id, or a pending one) and that verification never confirmed goes dead holding that key. A copy of the
// key arriving then (the service's genuine notification), the sweep's record or `ipn.reconcile()` makes the
// entry due again: verification confirms it, or delivers the service's record in its place; the payment is
// credited once, the forgery never. An entry dead because its listener failed is never re-run so. And the
// expectation of a forged copy settled at its claim is due again once the copy ends dead unverified.
// (From the attacker review's test/integration/attack-preempt.test.ts, branch attack-preempt.)

jest.setTimeout(20_000);

const t = perTestService();
const { clientOf, pending, genuine, drained } = forgedPayments(t);

/**
 * At least once with verify over `store`: a forged SUCCESSFUL (amount 1) of a transaction still pending,
 * given up on (dead, not final), then the customer pays and the service's genuine notification comes: it is
 * credited once (5000), and the forgery never.
 */
async function pendingForgedDead(store: Store): Promise<void> {
  const id = pending();
  const { ipn, recorder, url } = await t.serve(
    quietRouter({ store, delivery: 'at-least-once', verify: clientOf(), maxAttempts: 2, retryDelayMs: 5 }),
  );
  ipn.on('successful', () => {});
  expect(await t.provider.forge({ ipnUrl: url, transactionId: id, amount: 1 })).toBe(200);
  await untilFirst(recorder, 'dead', 'the forgery given up on (not final)');
  expect(recorder.count('successful')).toBe(0);

  t.provider.setState(id, 'SUCCESSFUL'); // the customer pays
  expect(await genuine(url, id)).toBe(200); // a duplicate of the key: the dead entry made due again
  await until(() => recorder.count('successful') > 0, 'the payment credited');
  await drained(ipn);
  // On main: no `successful`; the genuine copy was a `duplicate` of the dead forgery, for good.
  expect(recorder.of('successful')).toEqual([expect.objectContaining({ amount: 5000 })]);
  expect(await ipn.inbox.get(`${id}:SUCCESSFUL`)).toEqual(
    expect.objectContaining({ status: 'delivered', record: expect.objectContaining({ amount: 5000 }) }),
  );
}

describe('at least once, with verify: a forgery dead unverified', () => {
  test('a forged SUCCESSFUL of a pending transaction, dead as not final, does not make the genuine one a duplicate', () =>
    pendingForgedDead(new MemoryStore()));

  test('made due again, the forgery is verified on an answer newer than the PENDING cached before', async () => {
    const id = pending();
    // A PENDING answer reused for 300 ms (production: 15 minutes); retries far quicker than that.
    const verify = createStatusClient({
      baseUrl: t.provider.statusBaseUrl,
      apiKey: 'k',
      minIntervalMs: 300,
      logger: quiet,
    });
    const { ipn, recorder, url } = await t.serve(
      quietRouter({
        store: new MemoryStore(),
        delivery: 'at-least-once',
        verify,
        maxAttempts: 2,
        retryDelayMs: 5,
      }),
    );
    ipn.on('successful', () => {});
    expect(await t.provider.forge({ ipnUrl: url, transactionId: id, amount: 1 })).toBe(200);
    await untilFirst(recorder, 'dead', 'the forgery given up on (not final)');

    t.provider.setState(id, 'SUCCESSFUL'); // the customer pays
    expect(await genuine(url, id)).toBe(200);
    // Without a newer answer: both attempts made due again read the cached PENDING, dead again, not credited.
    await until(() => recorder.count('successful') > 0, 'the payment credited');
    await drained(ipn);
    expect(recorder.of('successful')).toEqual([expect.objectContaining({ amount: 5000 })]);
  });

  test('a copy arriving while the forgery is retried gives it its attempts again', async () => {
    const id = pending();
    const client = clientOf();
    let down = false; // the service's status API unreachable
    let calls = 0;
    const verify = {
      getStatus: (...args: Parameters<typeof client.getStatus>) => {
        calls += 1;
        if (down) throw new Error('the status API is unreachable');
        return client.getStatus(...args);
      },
    };
    const store = new MemoryStore();
    const { ipn, recorder, url } = await t.serve(
      quietRouter({ store, delivery: 'at-least-once', verify, maxAttempts: 3, retryDelayMs: 100 }),
    );
    ipn.on('successful', () => {});
    const key = `${id}:SUCCESSFUL`;
    const settledAfter = (attempts: number) => async () => {
      const entry = await store.get(key);
      return entry !== undefined && entry.attempts >= attempts && entry.status !== 'received';
    };
    expect(await t.provider.forge({ ipnUrl: url, transactionId: id, amount: 1 })).toBe(200);
    await eventually('the first attempt (PENDING)', settledAfter(1));
    down = true;
    await eventually('the second attempt (unreachable): one left', settledAfter(2));

    t.provider.setState(id, 'SUCCESSFUL'); // the customer pays; the service notifies
    expect(await genuine(url, id)).toBe(200);
    const before = calls;
    await until(() => calls > before, 'the next attempt, still unreachable');
    await eventually('that attempt settled', async () => (await store.get(key))?.status !== 'received');
    down = false;
    // Without it: that attempt was the last, dead, and the genuine copy (answered as a duplicate) lost.
    await until(() => recorder.count('successful') > 0, 'the payment credited');
    await drained(ipn);
    expect(recorder.of('successful')).toEqual([expect.objectContaining({ amount: 5000 })]);
    expect(recorder.count('dead')).toBe(0);
  });

  test('ipn.reconcile() of a transaction whose forged copy is dead unverified credits the payment', async () => {
    const id = pending();
    const { ipn, recorder, url } = await t.serve(
      quietRouter({
        store: new MemoryStore(),
        delivery: 'at-least-once',
        verify: clientOf(),
        maxAttempts: 2,
        retryDelayMs: 5,
      }),
    );
    ipn.on('successful', () => {});
    expect(await t.provider.forge({ ipnUrl: url, transactionId: id, amount: 1 })).toBe(200);
    await untilFirst(recorder, 'dead', 'the forgery given up on (not final)');

    t.provider.setState(id, 'SUCCESSFUL'); // paid; the service's notification never arrives
    await new Promise((resolve) => setTimeout(resolve, 20)); // past the client's 10 ms between two queries
    // On main: { emitted: false }, the key the dead forgery's.
    expect(await ipn.reconcile(id)).toEqual(expect.objectContaining({ emitted: true }));
    await until(() => recorder.count('successful') > 0, 'the payment credited');
    await drained(ipn);
    expect(recorder.of('successful')).toEqual([expect.objectContaining({ amount: 5000 })]);
  });

  test('a forged SUCCESSFUL of the next id is not given up on while its not-found cannot be asked again', async () => {
    // The status client as in production: a not-found is asked again only after 15 minutes (minIntervalMs).
    const verify = createStatusClient({ baseUrl: t.provider.statusBaseUrl, apiKey: 'k', logger: quiet });
    const store = new MemoryStore();
    const { ipn, recorder, url } = await t.serve(
      quietRouter({ store, delivery: 'at-least-once', verify, maxAttempts: 3, retryDelayMs: 5 }),
    );
    ipn.on('successful', () => {});
    const id = 'EFB.900004'; // the next id the service will give
    expect(await t.provider.forge({ ipnUrl: url, transactionId: id, amount: 1 })).toBe(200);
    const key = `${id}:SUCCESSFUL`;
    // Its second attempt: the not-found asked again too soon, refused by the client's guard (nothing sent).
    await eventually('the second attempt, refused', async () => {
      const entry = await store.get(key);
      return entry !== undefined && entry.attempts >= 2 && entry.status !== 'received';
    });
    await drained(ipn);
    await drained(ipn);
    // On main: dead after its third attempt, 10 ms later (the verdict's retryAfterMs ignored), holding the key.
    const entry = await store.get(key);
    expect(entry).toEqual(expect.objectContaining({ status: 'failed', attempts: 2 }));
    expect(entry?.lastError).toMatch(/minIntervalMs|interval|too soon/i);
    // Its next attempt no sooner than the guard allows (15 minutes), not retryDelayMs's 10 ms.
    expect(entry!.nextAttemptAt.getTime() - Date.now()).toBeGreaterThan(10 * 60_000);
    expect(recorder.count('dead')).toBe(0);
  });

  test('a forged SUCCESSFUL of the next id, then its genuine notification: credited once, when the guard allows', async () => {
    // A not-found asked again no sooner than 300 ms (production: 15 minutes).
    const verify = createStatusClient({
      baseUrl: t.provider.statusBaseUrl,
      apiKey: 'k',
      minIntervalMs: 300,
      logger: quiet,
    });
    const store = new MemoryStore();
    const { ipn, recorder, url } = await t.serve(
      quietRouter({ store, delivery: 'at-least-once', verify, maxAttempts: 3, retryDelayMs: 5 }),
    );
    ipn.on('successful', () => {});
    const id = 'EFB.900005';
    expect(await t.provider.forge({ ipnUrl: url, transactionId: id, amount: 1 })).toBe(200);
    // Its second attempt, the not-found asked again too soon, refused by the guard; then the service issues it.
    await eventually('the second attempt, refused', async () => {
      const entry = await store.get(`${id}:SUCCESSFUL`);
      return entry !== undefined && entry.attempts >= 2 && entry.status !== 'received';
    });
    t.provider.initiate({
      transactionId: id,
      amount: 5000,
      ipnUrl: url,
      customData: 'order-5',
      outcome: 'SUCCESSFUL',
      deliver: false,
    });
    await until(() => t.provider.transaction(id)?.state === 'SUCCESSFUL', 'processing');
    expect(await genuine(url, id)).toBe(200);
    // On main: dead within 15 ms (three attempts, two refused by the guard), the genuine copy its duplicate.
    await until(() => recorder.count('successful') > 0, 'the payment credited');
    await drained(ipn);
    expect(recorder.of('successful')).toEqual([expect.objectContaining({ amount: 5000 })]);
    expect(recorder.count('dead')).toBe(0);
  });
});

describe('at least once, with verify: an entry dead because its listener failed', () => {
  // Not re-run by a copy that arrives: its listener may have credited (its writes outside the transaction).
  for (const said of ['the ledger is down', 'could not verify the notification of it after 2 attempts']) {
    test(`is not made due again by a resend (the listener said: ${said})`, async () => {
      const id = pending();
      t.provider.setState(id, 'SUCCESSFUL');
      const { ipn, recorder, url } = await t.serve(
        quietRouter({
          store: new MemoryStore(),
          delivery: 'at-least-once',
          verify: clientOf(),
          maxAttempts: 2,
          retryDelayMs: 5,
        }),
      );
      ipn.on('error', () => {});
      let calls = 0;
      ipn.on('successful', () => {
        calls += 1;
        throw new Error(said);
      });
      expect(await genuine(url, id)).toBe(200);
      await untilFirst(recorder, 'dead', 'the listener given up on');
      expect(calls).toBe(2);

      expect(await genuine(url, id)).toBe(200); // the service's resend
      await drained(ipn);
      await drained(ipn);
      expect(recorder.count('duplicate')).toBe(1);
      expect(calls).toBe(2);
      expect(await ipn.inbox.get(`${id}:SUCCESSFUL`)).toEqual(expect.objectContaining({ status: 'dead' }));
    });
  }
});

describe('at least once, with verify: the expectation of a forged copy dead unverified', () => {
  /** A router with expectations due at once, and a forged copy matching the expectation given up on. */
  async function expectedForgedDead(reconcileAttempts?: number) {
    const id = pending();
    const { ipn, recorder, url } = await t.serve(
      quietRouter({
        store: new MemoryStore(),
        delivery: 'at-least-once',
        verify: clientOf(),
        maxAttempts: 2,
        retryDelayMs: 5,
        reconcileAfterMs: 1,
        ...(reconcileAttempts === undefined ? {} : { reconcileAttempts }),
      }),
    );
    ipn.on('successful', () => {});
    ipn.on('stale', () => {});
    await ipn.expect(id, { amount: 5000, customData: 'order-1' });
    expect(await t.provider.forge({ ipnUrl: url, transactionId: id })).toBe(200); // matches: 5000, order-1
    await untilFirst(recorder, 'dead', 'the forgery given up on (not final)');
    return { id, ipn, recorder, url };
  }

  test('the genuine notification then is credited', async () => {
    const { id, ipn, recorder, url } = await expectedForgedDead();
    t.provider.setState(id, 'SUCCESSFUL');
    expect(await genuine(url, id)).toBe(200);
    await until(() => recorder.count('successful') > 0, 'the payment credited');
    await drained(ipn);
    // On main: neither; only the dead forgery and a duplicate.
    expect(recorder.of('successful')).toEqual([expect.objectContaining({ amount: 5000 })]);
  });

  test('its notification never arriving, the sweep asks and credits the payment', async () => {
    const { id, ipn, recorder } = await expectedForgedDead();
    t.provider.setState(id, 'SUCCESSFUL'); // paid; the service's notification is lost
    await new Promise((resolve) => setTimeout(resolve, 20)); // past the client's 10 ms between two queries
    await drained(ipn);
    await until(() => recorder.count('successful') > 0, 'the payment credited');
    await drained(ipn);
    // On main: the expectation was settled at the forgery's claim: the sweep never asks.
    expect(recorder.of('successful')).toEqual([expect.objectContaining({ amount: 5000 })]);
  });

  test('never paid, the sweep reports it stale', async () => {
    const { id, ipn, recorder } = await expectedForgedDead(1);
    await new Promise((resolve) => setTimeout(resolve, 20)); // past the client's 10 ms between two queries
    await drained(ipn);
    // On main: nothing; the expectation was settled at the forgery's claim.
    expect(recorder.of('stale')).toEqual([expect.objectContaining({ transactionId: id })]);
    expect(recorder.count('successful')).toBe(0);
  });
});

describeWithService(
  'PostgreSQL',
  'at least once, with verify, on PostgreSQL: a forgery dead unverified',
  () => {
    const { admin, table } = postgresTables('dunv');
    test('a forged SUCCESSFUL of a pending transaction, dead, does not make the genuine one a duplicate', async () =>
      pendingForgedDead(new PostgresStore({ pool: admin, table: await table() })));
  },
);

describeWithService('Redis', 'at least once, with verify, on Redis: a forgery dead unverified', () => {
  let client: Redis;
  const prefix = `ipn-kit-test:dead-unverified:${process.pid}:${Date.now()}:`;
  beforeAll(() => {
    client = new Redis(redisUrl());
    client.on('error', () => {});
  });
  afterAll(async () => {
    const keys = await client.keys(`${prefix}*`);
    if (keys.length > 0) await client.del(...keys);
    await client.quit();
  });
  test('a forged SUCCESSFUL of a pending transaction, dead, does not make the genuine one a duplicate', () =>
    pendingForgedDead(new RedisStore({ client, prefix })));
});
