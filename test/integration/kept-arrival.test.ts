import { randomUUID } from 'node:crypto';
import {
  ipnNotificationSchema,
  ipnRouter,
  MemoryStore,
  TransactionNotFoundError,
  type IpnNotification,
  type IpnRouter,
  type StatusSource,
  type Store,
} from 'ipn-kit';
import Redis from 'ioredis';
import { PostgresStore } from 'ipn-kit/postgres';
import { RedisStore } from 'ipn-kit/redis';
import { postgresTables } from '../helpers/postgres-tables.js';
import { describeWithService, redisUrl } from '../helpers/services.js';
import { quiet } from '../helpers/quiet-logger.js';
import { settle } from '../helpers/servers.js';
import { until } from '../helpers/until.js';
import {
  NO_SWEEP,
  forgedPayments,
  perTestService,
  quietRouter,
  untilFirst,
} from '../helpers/verified-payments.js';
import { expectAnother, keptServer } from '../helpers/kept-unexpected.js';

// A copy arriving for a key held by a kept unexpected copy (a forgery kept under a pending or the next id)
// whose record differs is screened anew, not dropped as a plain duplicate: expected and matching its
// expectation, it takes the kept copy's place; with no expectation, the one status query confirms it (the
// service's record then takes that place) or it is answered 503, never kept, so that the service resends it.
// The first two tests are attack-preempt.test.ts's, pinned there as `test.failing` until this fix.

jest.setTimeout(20_000);

const t = perTestService();
const { clientOf, pending, genuine, drained } = forgedPayments(t);

/**
 * Status client, no expectation for the payment: a forged copy (amount 1) of a pending transaction kept as
 * unexpected; the customer pays; the genuine notification, unexpected too, is confirmed by its status query
 * and the service's record takes the forgery's place. No reconcile(), no sweep: the arrival alone credits it.
 */
async function unexpectedPending(store: Store): Promise<void> {
  const id = pending('order-5');
  const { ipn, recorder, url } = await t.serve(
    quietRouter({ store, delivery: 'at-least-once', statusClient: clientOf() }),
  );
  ipn.on('successful', () => {});
  await expectAnother(ipn);
  expect(await t.provider.forge({ ipnUrl: url, transactionId: id, amount: 1 })).toBe(200);
  await untilFirst(recorder, 'rejected', 'the kept forgery (the service reports PENDING)');

  t.provider.setState(id, 'SUCCESSFUL'); // the customer pays
  await new Promise((resolve) => setTimeout(resolve, 20)); // past the client's 10 ms between two queries
  expect(await genuine(url, id)).toBe(200);
  await drained(ipn);
  // Without the fix: no `successful`; the genuine copy was a `duplicate` of the kept forgery.
  expect(recorder.count('duplicate')).toBe(0);
  expect(recorder.of('successful')).toEqual([
    expect.objectContaining({ amount: 5000, custom_data: 'order-5' }),
  ]);
  expect((await ipn.inbox.get(`${id}:SUCCESSFUL`))?.status).toBe('delivered');
}

/**
 * No status client, expectations in use: a forged copy of the next id kept; then ipn.expect() of it; the
 * genuine notification matching the expectation takes the forgery's place, credited, its expectation settled.
 */
async function expectedNext(store: Store, id: string): Promise<void> {
  const { ipn, recorder, url } = await t.serve(
    quietRouter({ store, delivery: 'at-least-once', reconcileAfterMs: 1 }),
  );
  ipn.on('successful', () => {});
  await expectAnother(ipn);
  expect(await t.provider.forge({ ipnUrl: url, transactionId: id, customData: 'order-9', amount: 1 })).toBe(
    200,
  );
  await untilFirst(recorder, 'rejected', 'the kept forgery');
  expect(recorder.of('rejected')).toEqual([expect.objectContaining({ reason: 'unexpected' })]);

  t.provider.initiate({
    transactionId: id,
    amount: 5000,
    ipnUrl: url,
    customData: 'order-9',
    outcome: 'SUCCESSFUL',
    deliver: false,
  });
  await ipn.expect(id, { amount: 5000, customData: 'order-9' });
  await until(() => t.provider.transaction(id)?.state === 'SUCCESSFUL', 'processing');
  expect(await genuine(url, id)).toBe(200);
  await drained(ipn);
  await drained(ipn);
  // Without the fix: no `successful`, and the sweep reports the payment `stale` (no_status_client).
  expect(recorder.of('successful')).toEqual([
    expect.objectContaining({ amount: 5000, custom_data: 'order-9' }),
  ]);
  const stale = recorder.of('stale') as { transactionId: string }[];
  expect(stale.filter((event) => event.transactionId === id)).toHaveLength(0);
  expect(recorder.count('duplicate')).toBe(0);
}

describe('at least once, status client, a transaction nobody expected', () => {
  test('a forged copy kept under a pending id does not make its genuine notification a duplicate', () =>
    unexpectedPending(new MemoryStore()));

  test('copies the status query cannot confirm are answered 503, never kept; the queries stay bounded; an identical resend is a duplicate', async () => {
    const id = pending('order-6');
    // A PENDING answer is reused for a minute: every later copy gets it, no query more.
    const { ipn, recorder, url } = await t.serve(
      quietRouter({ store: new MemoryStore(), delivery: 'at-least-once', statusClient: clientOf(60_000) }),
    );
    ipn.on('successful', () => {});
    await expectAnother(ipn);
    expect(await t.provider.forge({ ipnUrl: url, transactionId: id, amount: 1 })).toBe(200);
    await untilFirst(recorder, 'rejected', 'the kept forgery');
    const queries = t.provider.statusQueriesFor(id);
    // The kept copy's resend: a duplicate, nothing asked.
    expect(await t.provider.forge({ ipnUrl: url, transactionId: id, amount: 1 })).toBe(200);
    expect(recorder.count('duplicate')).toBe(1);
    // A flood of other forged copies of the key: each 503, its `rejected` said, no query more.
    const answers = await Promise.all(
      [2, 3, 4, 5, 6].map((amount) => t.provider.forge({ ipnUrl: url, transactionId: id, amount })),
    );
    expect(answers).toEqual([503, 503, 503, 503, 503]);
    // The customer pays; the genuine copy arrives while the service's answer (PENDING) is still the cached
    // one: undecided, it is answered 503 (the service resends it), not dropped as a duplicate.
    t.provider.setState(id, 'SUCCESSFUL');
    expect(await genuine(url, id)).toBe(503);
    await drained(ipn);
    expect(t.provider.statusQueriesFor(id)).toBe(queries);
    expect(recorder.count('duplicate')).toBe(1);
    expect(recorder.count('successful')).toBe(0);
    expect(recorder.of('rejected')).toHaveLength(7);
    const entry = await ipn.inbox.get(`${id}:SUCCESSFUL`);
    expect(entry?.record).toEqual(expect.objectContaining({ amount: 1 })); // still the kept forgery
    // Once an operator expects it, the service's resend is credited (it matches the expectation).
    await ipn.expect(id, { amount: 5000, customData: 'order-6' });
    expect(await genuine(url, id)).toBe(200);
    await drained(ipn);
    expect(recorder.of('successful')).toEqual([expect.objectContaining({ amount: 5000 })]);
  });
});

describe('at least once, expectations in use, no status client', () => {
  test('a forged copy kept under the next id does not make the genuine payment a duplicate', () =>
    expectedNext(new MemoryStore(), 'EFB.900001'));

  test('an expected copy identical to the kept one is its resend: left kept', async () => {
    const { ipn, recorder, url } = await t.serve(
      quietRouter({ store: new MemoryStore(), delivery: 'at-least-once', reconcileAfterMs: 1 }),
    );
    ipn.on('successful', () => {});
    await expectAnother(ipn);
    const id = 'EFB.900001';
    const copy = { ipnUrl: url, transactionId: id, customData: 'order-9', amount: 5000 };
    expect(await t.provider.forge(copy)).toBe(200);
    await untilFirst(recorder, 'rejected', 'the kept copy');
    await ipn.expect(id, { amount: 5000, customData: 'order-9' });
    // The same record again, as the service's resend of it.
    const kept = await ipn.inbox.get(`${id}:SUCCESSFUL`);
    const resend = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(kept?.record),
    });
    expect(resend.status).toBe(200);
    await drained(ipn);
    expect(recorder.count('duplicate')).toBe(1);
    expect(recorder.count('successful')).toBe(0);
  });

  test('a store without replayWith answers the expected copy 503, never a duplicate', async () => {
    const store = new MemoryStore();
    Object.defineProperty(store, 'replayWith', { value: undefined });
    const { ipn, recorder, url } = await t.serve(
      quietRouter({ store, delivery: 'at-least-once', reconcileAfterMs: 1 }),
    );
    ipn.on('successful', () => {});
    ipn.on('error', () => {});
    await expectAnother(ipn);
    const id = 'EFB.900001';
    expect(await t.provider.forge({ ipnUrl: url, transactionId: id, customData: 'order-9', amount: 1 })).toBe(
      200,
    );
    await untilFirst(recorder, 'rejected', 'the kept forgery');
    await ipn.expect(id, { amount: 5000, customData: 'order-9' });
    const genuineCopy = { ipnUrl: url, transactionId: id, customData: 'order-9', amount: 5000 };
    expect(await t.provider.forge(genuineCopy)).toBe(503);
    await settle();
    expect(recorder.count('error')).toBe(1);
    expect(recorder.count('duplicate') + recorder.count('successful')).toBe(0);
  });
});

describeWithService('PostgreSQL', 'a kept copy holding the key, on PostgreSQL', () => {
  const { admin, table } = postgresTables('karr');
  test('a forged copy kept under a pending id does not make its genuine notification a duplicate', async () =>
    unexpectedPending(new PostgresStore({ pool: admin, table: await table() })));
  test('a forged copy kept under the next id does not make the genuine payment a duplicate', async () =>
    expectedNext(new PostgresStore({ pool: admin, table: await table() }), `EFB.${Date.now()}`));
});

describeWithService('Redis', 'a kept copy holding the key, on Redis', () => {
  let client: Redis;
  const prefix = `ipn-kit-test:kept-arrival:${process.pid}:${Date.now()}:`;
  beforeAll(() => {
    client = new Redis(redisUrl());
    client.on('error', () => {});
  });
  afterAll(async () => {
    const keys = await client.keys(`${prefix}*`);
    if (keys.length > 0) await client.del(...keys);
    await client.quit();
  });
  test('a forged copy kept under a pending id does not make its genuine notification a duplicate', () =>
    unexpectedPending(new RedisStore({ client, prefix: `${prefix}a:` })));
  test('a forged copy kept under the next id does not make the genuine payment a duplicate', () =>
    expectedNext(new RedisStore({ client, prefix: `${prefix}b:` }), `EFB.${Date.now()}`));
});

describe('a copy arriving while the kept forgery is under its hold lease, and two instances', () => {
  const serve = keptServer();

  test("status client, nobody expecting it: the genuine copy's query confirms it while the forgery's runs; credited once", async () => {
    const id = `EFH.${randomUUID().slice(0, 8)}`;
    const record = (amount: number): IpnNotification =>
      ipnNotificationSchema.parse({
        transaction_id: id,
        state: 'SUCCESSFUL',
        amount,
        custom_data: 'order-8',
      });
    let release: (answer: IpnNotification) => void = () => {};
    const forgeryQuery = new Promise<IpnNotification>((resolve) => (release = resolve));
    let queries = 0;
    const source: StatusSource = {
      async getStatus(transactionId) {
        if (transactionId !== id) throw new TransactionNotFoundError(transactionId);
        queries += 1;
        return queries === 1 ? forgeryQuery : record(5000); // the forgery's query: the service is slow
      },
    };
    const store = new MemoryStore();
    const router = () =>
      ipnRouter({
        store,
        delivery: 'at-least-once',
        logger: quiet,
        statusClient: source,
        sweepIntervalMs: NO_SWEEP,
        recoveryIntervalMs: 50,
      });
    const a = await serve(router());
    const b = await serve(router());
    a.ipn.on('successful', () => {});
    b.ipn.on('successful', () => {});
    await expectAnother(a.ipn);
    const forged = { transaction_id: id, state: 'SUCCESSFUL', amount: 1, custom_data: 'order-8' };
    expect((await a.post(forged)).status).toBe(200);
    await until(() => queries === 1, "the forgery's status query");
    // The genuine notification, at both instances at once (the service's resend): confirmed, the service's
    // record takes the forgery's place, still under its hold lease.
    const genuineCopy = { ...forged, amount: 5000 };
    const answers = await Promise.all([a.post(genuineCopy), b.post(genuineCopy)]);
    expect(answers.map((answer) => answer.status)).toEqual([200, 200]);
    release(record(5000)); // the forgery's query answers at last: its hold was ended meanwhile
    await until(() => a.events.count('rejected') > 0, "the forgery's rejection");
    await eventuallyDelivered([a.ipn, b.ipn], `${id}:SUCCESSFUL`);
    const credited = [...a.events.of('successful'), ...b.events.of('successful')];
    expect(credited).toEqual([expect.objectContaining({ amount: 5000, custom_data: 'order-8' })]);
    expect(a.events.of('rejected')).toEqual([
      expect.objectContaining({ reason: 'unexpected', notification: expect.objectContaining({ amount: 1 }) }),
    ]);
    expect(a.events.count('error') + b.events.count('error')).toBe(0);
  });
});

/** Drains `routers` until the entry `key` is delivered. */
async function eventuallyDelivered(routers: IpnRouter[], key: string): Promise<void> {
  for (let tries = 0; tries < 100; tries += 1) {
    await Promise.all(routers.map((router) => router.drain({ budgetMs: 100 })));
    if ((await routers[0]?.inbox.get(key))?.status === 'delivered') return;
  }
  throw new Error(`${key} was never delivered`);
}

describe("unexpected: 'reject', a copy differing from the kept one", () => {
  test('in amount: answered 503, never kept; in an informational field only: a duplicate', async () => {
    const store = new MemoryStore();
    const { ipn, recorder, url } = await t.serve(
      quietRouter({ store, delivery: 'at-least-once', unexpected: 'reject' }),
    );
    await expectAnother(ipn);
    const id = 'EFR.900001';
    const kept = { transaction_id: id, state: 'SUCCESSFUL', amount: 1, custom_data: 'order-4' };
    const post = (body: unknown) =>
      fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    expect((await post(kept)).status).toBe(200);
    await untilFirst(recorder, 'rejected', 'the kept copy');
    expect((await post({ ...kept, customer_name: 'Another Name' })).status).toBe(200);
    expect(recorder.count('duplicate')).toBe(1);
    const other = await post({ ...kept, amount: 5000 });
    expect(other.status).toBe(503);
    expect(await other.json()).toMatchObject({ error: 'unexpected' });
    await settle();
    expect(recorder.of('rejected')).toHaveLength(2);
    expect((await ipn.inbox.get(`${id}:SUCCESSFUL`))?.record).toEqual(expect.objectContaining({ amount: 1 }));
  });
});
