import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { Pool } from 'pg';
import request from 'supertest';
import {
  ipnRouter,
  MemoryStore,
  StatusRateLimitError,
  TransactionNotFoundError,
  type IpnRouter,
  type IpnNotification,
  type Store,
} from 'ipn-kit';
import { PostgresStore } from 'ipn-kit/postgres';
import { RedisStore } from 'ipn-kit/redis';
import { ipnNotificationSchema } from '../../lib/notification/schema.js';
import { IN_USE_MARK } from '../../lib/delivery/expectations.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { settle } from '../helpers/servers.js';
import { databaseUrl, describeWithService, redisUrl } from '../helpers/services.js';

const MINUTE = 60_000;
const T0 = Date.parse('2026-11-20T10:00:00.000Z');

/** Only Date is faked: the network, the stores' clients and the timers run as usual. */
function fakeClock(): void {
  jest.useFakeTimers({
    doNotFake: [
      'hrtime',
      'nextTick',
      'performance',
      'queueMicrotask',
      'setImmediate',
      'clearImmediate',
      'setInterval',
      'clearInterval',
      'setTimeout',
      'clearTimeout',
    ],
  });
  jest.setSystemTime(T0);
}
const at = (minutes: number) => jest.setSystemTime(T0 + minutes * MINUTE);

/** One payment service, seen by every instance: its records, and how many status queries it answered. */
function fakeService() {
  const records = new Map<string, IpnNotification>();
  const queried: string[] = [];
  return {
    queried,
    set(payload: Record<string, unknown>) {
      const record = ipnNotificationSchema.parse(payload);
      records.set(record.transaction_id, record);
    },
    client: {
      getStatus: (id: string): Promise<IpnNotification> => {
        queried.push(id);
        const record = records.get(id);
        return record ? Promise.resolve(record) : Promise.reject(new TransactionNotFoundError(id));
      },
    },
  };
}

type Backend = {
  name: string;
  durable: boolean;
  /** A new store object over the same backend (a new instance, or a restarted one). */
  store: () => Promise<Store>;
  setup?: () => Promise<void>;
  teardown?: () => Promise<void>;
};

function suite(backend: Backend): void {
  let service: ReturnType<typeof fakeService>;
  const routers: IpnRouter[] = [];
  const instance = async (options: Record<string, unknown> = {}) => {
    const ipn = ipnRouter({
      store: await backend.store(),
      statusClient: service.client,
      sweepIntervalMs: 2 ** 31 - 1, // the tests sweep by hand
      logger: quiet,
      ...options,
    });
    routers.push(ipn);
    return { ipn, recorder: recordEvents(ipn) };
  };
  const post = (ipn: IpnRouter, body: object) => request(ipn).post('/').send(body);

  beforeAll(async () => backend.setup?.());
  afterAll(async () => backend.teardown?.());
  beforeEach(() => {
    fakeClock();
    service = fakeService();
  });
  afterEach(async () => {
    jest.useRealTimers();
    await Promise.all(routers.splice(0).map((ipn) => ipn.close()));
  });

  test('a notification contradicting its expectation (a forged amount) is rejected with zero status queries', async () => {
    const { ipn, recorder } = await instance();
    const genuine = uniquePayload({ amount: 5000, custom_data: 'order-7' });
    const id = genuine.transaction_id as string;
    await ipn.expect(id, { amount: 5000, customData: 'order-7' });

    const forged = await post(ipn, { ...genuine, amount: 500_000 });
    const otherOrder = await post(ipn, { ...genuine, custom_data: 'order-8' });
    await settle();

    expect(forged.status).toBe(200);
    expect(otherOrder.status).toBe(200);
    expect(recorder.names()).toEqual(['rejected', 'rejected']);
    expect(recorder.of('rejected')[0]).toMatchObject({
      reason: 'mismatch',
      mismatches: ['amount'],
      notification: { transaction_id: id, amount: 500_000 },
    });
    expect(recorder.of('rejected')[1]).toMatchObject({ mismatches: ['custom_data'] });
    expect(service.queried).toEqual([]);

    // The forgeries did not take the key: the genuine notification is still credited, once.
    const real = await post(ipn, genuine);
    await settle();
    expect(real.body).toEqual({ ok: true });
    expect(recorder.count('successful')).toBe(1);
    expect(ipn.metrics().rejected).toBe(2);
    expect(service.queried).toEqual([]);
  });

  test('a final notification settles its expectation: the sweep never asks about it', async () => {
    const { ipn, recorder } = await instance();
    const payload = uniquePayload({ custom_data: '{"orderId":"o-1"}' });
    await ipn.expect(payload.transaction_id as string, { customData: { orderId: 'o-1' } });
    await post(ipn, payload);
    await settle();
    at(16);
    expect(await ipn.sweep()).toMatchObject({ queried: 0, reconciled: 0 });
    expect(service.queried).toEqual([]);
    expect(recorder.count('successful')).toBe(1);
  });

  test('a missing notification is reconciled once after reconcileAfterMs, not before, never twice', async () => {
    const a = await instance();
    const b = await instance();
    const payload = uniquePayload({ amount: 2500 });
    const id = payload.transaction_id as string;
    service.set(payload);
    await a.ipn.expect(id, { amount: 2500 });

    at(14);
    await Promise.all([a.ipn.sweep(), b.ipn.sweep()]);
    expect(service.queried).toEqual([]);

    at(15);
    const results = await Promise.all([a.ipn.sweep(), b.ipn.sweep()]);
    await settle();
    expect(service.queried).toEqual([id]);
    expect(results.reduce((sum, r) => sum + r.reconciled, 0)).toBe(1);
    const credited = [...a.recorder.of('successful'), ...b.recorder.of('successful')];
    expect(credited).toHaveLength(1);
    expect(credited[0]).toMatchObject({ transaction_id: id, state: 'SUCCESSFUL', amount: 2500 });

    at(31);
    await Promise.all([a.ipn.sweep(), b.ipn.sweep()]);
    at(120);
    await Promise.all([a.ipn.sweep(), b.ipn.sweep()]);
    expect(service.queried).toEqual([id]);

    // The notification arriving late is a resend of what the sweep delivered.
    const late = await post(b.ipn, payload);
    expect(late.body).toEqual({ ok: true, duplicate: true });
  });

  test('a record contradicting the expectation is rejected by the sweep, not credited', async () => {
    const { ipn, recorder } = await instance();
    const payload = uniquePayload({ amount: 100 });
    service.set(payload);
    await ipn.expect(payload.transaction_id as string, { amount: 5000 });
    at(15);
    expect(await ipn.sweep()).toMatchObject({ queried: 1, rejected: 1, reconciled: 0 });
    await settle();
    expect(recorder.names()).toEqual(['rejected']);
    expect(recorder.of('rejected')[0]).toMatchObject({ reason: 'mismatch', mismatches: ['amount'] });
  });

  test('a transaction never final is asked at most once per 15 minutes, up to the bound, then stale', async () => {
    const { ipn, recorder } = await instance({ reconcileAttempts: 3 });
    const payload = uniquePayload({ state: 'PENDING1' });
    const id = payload.transaction_id as string;
    service.set(payload);
    await ipn.expect(id);

    for (const minute of [15, 20, 29, 30, 44, 45, 59, 60, 75, 90]) {
      at(minute);
      await ipn.sweep();
    }
    await settle();
    expect(service.queried).toEqual([id, id, id]); // at 15, 30 and 45
    expect(recorder.names()).toEqual(['stale']);
    expect(recorder.of('stale')[0]).toMatchObject({
      transactionId: id,
      reason: 'not_final',
      attempts: 3,
      expectedAt: new Date(T0),
      status: { state: 'PENDING1' },
    });
    expect(ipn.metrics().stale).toBe(1);
  });

  test('a FAILED found by the sweep keeps its expectation: a forged SUCCESSFUL is rejected, a turn to SUCCESSFUL delivered', async () => {
    const { ipn, recorder } = await instance();
    const payload = uniquePayload({ state: 'FAILED', amount: 5000, custom_data: 'order-5' });
    const id = payload.transaction_id as string;
    service.set(payload);
    await ipn.expect(id, { amount: 5000, customData: 'order-5' });

    at(15);
    expect(await ipn.sweep()).toMatchObject({ queried: 1, reconciled: 1 });
    const forged = await post(ipn, { ...payload, state: 'SUCCESSFUL', amount: 1 });
    await settle();
    expect(forged.status).toBe(200);
    expect(recorder.names()).toEqual(['notification', 'failed', 'rejected']);
    expect(recorder.of('rejected')[0]).toMatchObject({ reason: 'mismatch', mismatches: ['amount'] });

    // The service turns it SUCCESSFUL after all, and that notification is lost too: the next query finds it.
    service.set({ ...payload, state: 'SUCCESSFUL' });
    at(30);
    expect(await ipn.sweep()).toMatchObject({ queried: 1, reconciled: 1 });
    at(45);
    expect(await ipn.sweep()).toMatchObject({ queried: 0 }); // settled by the SUCCESSFUL
    await settle();
    expect(recorder.of('successful').map((n) => n.amount)).toEqual([5000]);
    expect(service.queried).toEqual([id, id]);
  });

  test('a transaction still FAILED is asked up to the bound, then its expectation is forgotten, not stale', async () => {
    const { ipn, recorder } = await instance({ reconcileAttempts: 3 });
    const payload = uniquePayload({ state: 'FAILED', amount: 700 });
    const id = payload.transaction_id as string;
    service.set(payload);
    await ipn.expect(id, { amount: 700 });
    // Its notification arrives: the expectation stays (the router's rule), and the sweep asks later on.
    await post(ipn, payload);

    for (const minute of [15, 30, 45, 60, 90]) {
      at(minute);
      await ipn.sweep();
    }
    await settle();
    expect(service.queried).toEqual([id, id, id]); // at 15, 30 and 45
    expect(recorder.names()).toEqual(['notification', 'failed']);
    expect(ipn.metrics().stale).toBe(0);
  });

  test('a query refused by the budget is not an attempt: put back for when the client may send again', async () => {
    let refuse = true;
    const payload = uniquePayload();
    const id = payload.transaction_id as string;
    service.set(payload);
    const budgeted = {
      getStatus: (transactionId: string) =>
        refuse
          ? Promise.reject(new StatusRateLimitError(transactionId, 'budget', 20 * MINUTE))
          : service.client.getStatus(transactionId),
    };
    const { ipn, recorder } = await instance({ statusClient: budgeted, reconcileAttempts: 1 });
    await ipn.expect(id);
    at(15);
    expect(await ipn.sweep()).toMatchObject({ queried: 0, stale: 0 });
    refuse = false;
    at(34);
    expect(await ipn.sweep()).toMatchObject({ queried: 0 }); // due again at 35, and 25 ms (the retry's margin)
    jest.setSystemTime(T0 + 35 * MINUTE + 24);
    expect(await ipn.sweep()).toMatchObject({ queried: 0 });
    jest.setSystemTime(T0 + 35 * MINUTE + 25);
    expect(await ipn.sweep()).toMatchObject({ queried: 1, reconciled: 1 });
    await settle();
    expect(recorder.names()).toEqual(['notification', 'successful']);
  });

  test('without a status client, an expectation overdue is reported stale', async () => {
    const { ipn, recorder } = await instance({ statusClient: undefined });
    const id = uniquePayload().transaction_id as string;
    await ipn.expect(id, { amount: 10 });
    at(15);
    await ipn.sweep();
    await settle();
    expect(recorder.of('stale')).toEqual([
      expect.objectContaining({ transactionId: id, reason: 'no_status_client', amount: 10, attempts: 1 }),
    ]);
  });

  if (backend.durable) {
    test('a restart in between does not lose the expectation', async () => {
      const first = await instance();
      const payload = uniquePayload({ state: 'FAILED', custom_data: 'order-99' });
      const id = payload.transaction_id as string;
      service.set(payload);
      await first.ipn.expect(id, { customData: 'order-99' });
      await first.ipn.close();

      at(15);
      const restarted = await instance();
      expect(await restarted.ipn.sweep()).toMatchObject({ queried: 1, reconciled: 1 });
      await settle();
      expect(restarted.recorder.names()).toEqual(['notification', 'failed']);
      expect(service.queried).toEqual([id]);
    });
  }
}

describe('expectations and the sweep with MemoryStore', () => {
  // Two routers of one process sharing one MemoryStore: the closest memory comes to two instances.
  let shared = new MemoryStore();
  beforeEach(() => {
    shared = new MemoryStore();
  });
  suite({ name: 'memory', durable: false, store: () => Promise.resolve(shared) });

  test('ipn.expect() checks its arguments', async () => {
    const ipn = ipnRouter({ logger: quiet });
    await expect(ipn.expect('')).rejects.toThrow(TypeError);
    await expect(ipn.expect('EFB.1', { amount: Number.NaN })).rejects.toThrow(/amount must be/);
    await ipn.close();
  });

  // With unexpected: 'accept', a router that had not called ipn.expect() itself never read the store's
  // expectations, so another instance's expectation went unchecked there: a forged copy contradicting it (an
  // amount, a custom_data) was credited. It reads the mark of their use as every other router does.
  test("unexpected: 'accept': another instance's expectation is checked too; a copy contradicting it is rejected, not credited", async () => {
    const store = new MemoryStore();
    const initiating = ipnRouter({ logger: quiet, store, unexpected: 'accept' });
    const receiving = ipnRouter({ logger: quiet, store, unexpected: 'accept' });
    const recorder = recordEvents(receiving);
    const genuine = uniquePayload({ amount: 5000, custom_data: 'order-1' });
    await initiating.expect(String(genuine.transaction_id), { amount: 5000, customData: 'order-1' });
    const forged = { ...genuine, amount: 100 };
    expect((await request(receiving).post('/').send(forged)).status).toBe(200);
    expect((await request(receiving).post('/').send(genuine)).status).toBe(200);
    // A transaction nobody expected is still accepted, as the option says.
    expect((await request(receiving).post('/').send(uniquePayload())).status).toBe(200);
    await settle();
    expect(recorder.of('rejected')).toMatchObject([{ reason: 'mismatch', notification: { amount: 100 } }]);
    expect(recorder.of('successful')).toMatchObject([{ amount: 5000 }, {}]);
    expect(recorder.count('successful')).toBe(2);
    await initiating.close();
    await receiving.close();
  });

  test("unexpected: 'accept', with no expectation anywhere: only the mark of their use is read, once per interval", async () => {
    const store = new MemoryStore();
    const reads = jest.spyOn(store.expectations, 'get');
    const ipn = ipnRouter({ logger: quiet, store, unexpected: 'accept' });
    const recorder = recordEvents(ipn);
    for (let i = 0; i < 3; i += 1)
      expect((await request(ipn).post('/').send(uniquePayload())).status).toBe(200);
    await settle();
    expect(recorder.names()).toEqual(Array(3).fill(['notification', 'successful']).flat());
    expect(reads.mock.calls).toEqual([[IN_USE_MARK]]);
    await ipn.close();
  });

  test('a router that uses no expectations reads only the mark of their use, once per interval', async () => {
    const store = new MemoryStore();
    const reads = jest.spyOn(store.expectations, 'get');
    const ipn = ipnRouter({ logger: quiet, store });
    const recorder = recordEvents(ipn);
    for (let i = 0; i < 3; i += 1)
      expect((await request(ipn).post('/').send(uniquePayload())).status).toBe(200);
    await settle();
    expect(recorder.names()).toEqual(Array(3).fill(['notification', 'successful']).flat());
    expect(reads.mock.calls).toEqual([[IN_USE_MARK]]);
    await ipn.close();
  });

  test('the store failing to read an expectation answers 503 and emits error; the resend goes through', async () => {
    const store = new MemoryStore();
    const ipn = ipnRouter({
      logger: quiet,
      store,
      statusClient: { getStatus: () => Promise.reject(new Error('unused')) },
      sweepIntervalMs: 2 ** 31 - 1,
    });
    const recorder = recordEvents(ipn);
    const payload = uniquePayload();
    const read = jest.spyOn(store.expectations, 'get').mockImplementationOnce(() => {
      throw new Error('connection reset');
    });
    const first = await request(ipn).post('/').send(payload);
    const resend = await request(ipn).post('/').send(payload);
    await settle();
    expect([first.status, resend.status]).toEqual([503, 200]);
    expect(first.body).toMatchObject({ error: 'store_unavailable' });
    expect(recorder.names()).toEqual(['error', 'notification', 'successful']);
    // The mark of their use (the failed read, then again), and the notification's expectation.
    expect(read.mock.calls).toEqual([[IN_USE_MARK], [IN_USE_MARK], [payload.transaction_id]]);
    await ipn.close();
  });

  test('a store without expectations makes ipn.expect() reject with IPN_NO_EXPECTATIONS', async () => {
    const ipn = ipnRouter({ logger: quiet, store: { claim: () => true, release: () => {} } });
    await expect(ipn.expect('EFB.1')).rejects.toMatchObject({ code: 'IPN_NO_EXPECTATIONS' });
    await ipn.close();
  });
});

describeWithService('Redis', 'expectations and the sweep with RedisStore, two instances', () => {
  const prefix = `ipn-kit-test:expectations:${process.pid}:${randomUUID().slice(0, 8)}:`;
  const clients: Redis[] = [];
  suite({
    name: 'redis',
    durable: true,
    store: async () => {
      const client = new Redis(redisUrl(), { lazyConnect: true });
      client.on('error', () => {});
      await client.connect();
      clients.push(client);
      return new RedisStore({ client, prefix });
    },
    teardown: async () => {
      const [client] = clients;
      if (client) {
        const keys = await client.keys(`${prefix}*`);
        if (keys.length > 0) await client.del(...keys);
      }
      await Promise.all(clients.map((c) => c.quit()));
    },
  });
});

describeWithService('PostgreSQL', 'expectations and the sweep with PostgresStore, two instances', () => {
  const table = `ipn_test_exp_${process.pid}_${randomUUID().slice(0, 8)}`;
  let pool: Pool;
  suite({
    name: 'postgres',
    durable: true,
    setup: async () => {
      pool = new Pool({ connectionString: databaseUrl(), max: 6 });
      pool.on('error', () => {});
      await new PostgresStore({ pool, table }).migrate();
    },
    store: () => Promise.resolve(new PostgresStore({ pool, table })),
    teardown: async () => {
      await pool.query(`DROP TABLE IF EXISTS "${table}", "${table}_expected"`);
      await pool.end();
    },
  });
});
