import express from 'express';
import { Redis } from 'ioredis';
import { mongo } from 'mongoose';
import request from 'supertest';
import { paymentsIpn, purgeDaily } from '../../examples/express-mongoose/app.js';
import { Order, Payment, type PaymentModels } from '../../examples/express-mongoose/payments.js';
import { uniquePayload } from '../helpers/payloads.js';
import { describeWithService, eventually, redisUrl } from '../helpers/services.js';

/**
 * The Express + Mongoose recipe (docs/recipes.md): its router on the test Redis (at least once), its
 * listener run against an in-memory stand-in of the two collections. No MongoDB server runs here: the
 * stand-in enforces the unique index on `transactionId` by throwing the driver's own MongoServerError with
 * code 11000, as MongoDB does. What this does not test against a real MongoDB: Mongoose's casting and
 * validation, `syncIndexes()` building the index, the driver's connection handling.
 */

type PaymentDoc = { transactionId: string; orderId: string; amount: number };

/** Two collections in memory, with the unique index on payments.transactionId, and writes that can fail. */
function standIn() {
  const payments: PaymentDoc[] = [];
  const orders = new Map<string, { status: 'pending' | 'paid'; paidBy?: string }>();
  /** The next call of each write throws this instead (a crash or an outage at that point). */
  const failNext: { create?: Error; updateOne?: Error } = {};
  const models: PaymentModels = {
    Payment: {
      create: (doc) =>
        Promise.resolve().then(() => {
          const failure = failNext.create;
          failNext.create = undefined;
          if (failure) throw failure;
          if (payments.some((p) => p.transactionId === doc.transactionId)) {
            throw new mongo.MongoServerError({
              message: `E11000 duplicate key error collection: shop.payments index: transactionId_1 dup key: { transactionId: "${doc.transactionId}" }`,
              code: 11000,
            });
          }
          payments.push({ ...doc });
          return doc;
        }),
    },
    Order: {
      updateOne: (filter, update) =>
        Promise.resolve().then(() => {
          const failure = failNext.updateOne;
          failNext.updateOne = undefined;
          if (failure) throw failure;
          const order = orders.get(filter._id);
          if (!order || order.status !== filter.status) return { matchedCount: 0, modifiedCount: 0 };
          Object.assign(order, update.$set);
          return { matchedCount: 1, modifiedCount: 1 };
        }),
    },
  };
  return { models, payments, orders, failNext };
}

describeWithService(
  'Redis',
  'the Express + Mongoose recipe: at least once on Redis, idempotent writes',
  () => {
    let redis: Redis;
    let round = 0;
    const prefixes: string[] = [];
    const closers: Array<() => Promise<void>> = [];

    beforeAll(() => {
      redis = new Redis(redisUrl());
      redis.on('error', () => {});
    });
    afterAll(async () => {
      for (const close of closers) await close();
      for (const prefix of prefixes) {
        const keys = await redis.keys(`${prefix}*`);
        if (keys.length > 0) await redis.del(...keys);
      }
      await redis.quit();
    });

    /** The recipe's router on keys of its own, mounted in an Express app, with its `error` events recorded. */
    function setUp() {
      const data = standIn();
      const prefix = `ipn-kit-test:mongoose:${process.pid}:${(round += 1)}:`;
      prefixes.push(prefix);
      const ipn = paymentsIpn(redis, data.models, prefix);
      const errors: string[] = [];
      ipn.on('error', ({ error }) => void errors.push(error.message));
      closers.push(() => ipn.close());
      const app = express();
      app.use('/ipn', ipn);
      const post = (payload: Record<string, unknown>) => request(app).post('/ipn').send(payload).expect(200);
      return { ...data, ipn, errors, post };
    }

    test('the real Mongoose models fit the listener, with the unique index on transactionId', () => {
      const models: PaymentModels = { Payment, Order };
      expect(models.Payment).toBe(Payment);
      expect(Payment.schema.indexes()).toEqual([
        [{ transactionId: 1 }, expect.objectContaining({ unique: true })],
      ]);
    });

    test('a payment and two resends: one payment document, the order paid', async () => {
      const { orders, payments, post } = setUp();
      orders.set('order-m-1', { status: 'pending' });
      const payload = uniquePayload({ custom_data: 'order-m-1', amount: 5000 });

      await post(payload);
      await post(payload);
      await post(payload);
      await eventually('the order paid', () => orders.get('order-m-1')?.status === 'paid');

      expect(payments).toEqual([
        { transactionId: payload.transaction_id, orderId: 'order-m-1', amount: 5000 },
      ]);
      expect(orders.get('order-m-1')).toEqual({ status: 'paid', paidBy: payload.transaction_id });
    });

    test('a crash between the two writes: the retry meets E11000, goes on, and pays the order', async () => {
      const { orders, payments, post, failNext, ipn, errors } = setUp();
      orders.set('order-m-2', { status: 'pending' });
      const payload = uniquePayload({ custom_data: 'order-m-2', amount: 700 });
      const key = `${String(payload.transaction_id)}:SUCCESSFUL`;
      // The payment is written, then the process dies (here: the order's write fails) before the order's.
      failNext.updateOne = new Error('connection 3 to 127.0.0.1:27017 closed');

      await post(payload);
      await eventually('the failed attempt', () => errors.some((message) => /27017 closed/.test(message)));
      expect(payments).toHaveLength(1);
      expect(orders.get('order-m-2')?.status).toBe('pending');
      expect((await ipn.inbox.get(key))?.status).not.toBe('delivered');

      // The retry, now rather than after its backoff (after a real crash: once the lease runs out).
      expect(await ipn.inbox.replay(key)).toBe(true);
      await ipn.drain();
      await eventually('the order paid', () => orders.get('order-m-2')?.status === 'paid');

      expect(payments).toHaveLength(1);
      expect(orders.get('order-m-2')).toEqual({ status: 'paid', paidBy: payload.transaction_id });
      expect((await ipn.inbox.get(key))?.status).toBe('delivered');
    });

    test('a failure of the payment write is no duplicate: the attempt fails, the retry credits', async () => {
      const { orders, payments, post, failNext, ipn, errors } = setUp();
      orders.set('order-m-3', { status: 'pending' });
      const payload = uniquePayload({ custom_data: 'order-m-3', amount: 10 });
      const key = `${String(payload.transaction_id)}:SUCCESSFUL`;
      failNext.create = new mongo.MongoServerError({ message: 'not primary', code: 10107 });

      await post(payload);
      await eventually('the failed attempt', () => errors.some((message) => /not primary/.test(message)));
      expect(payments).toEqual([]);
      expect(orders.get('order-m-3')?.status).toBe('pending');

      await ipn.inbox.replay(key);
      await ipn.drain();
      await eventually('the order paid', () => orders.get('order-m-3')?.status === 'paid');
      expect(payments).toHaveLength(1);
    });

    test('after a purge, a late resend is delivered again and changes nothing', async () => {
      const { orders, payments, post, ipn } = setUp();
      orders.set('order-m-4', { status: 'pending' });
      const payload = uniquePayload({ custom_data: 'order-m-4', amount: 90 });
      const key = `${String(payload.transaction_id)}:SUCCESSFUL`;
      await post(payload);
      await eventually('delivered', async () => (await ipn.inbox.get(key))?.status === 'delivered');

      expect(
        await ipn.inbox.purge(new Date(Date.now() + 60_000), 'delivered', { insideDedupeWindow: true }),
      ).toBe(1);
      expect(await ipn.inbox.get(key)).toBeUndefined();
      await post(payload); // new again for the inbox: the listener runs a second time
      await eventually('delivered again', async () => (await ipn.inbox.get(key))?.status === 'delivered');

      expect(payments).toHaveLength(1);
      expect(orders.get('order-m-4')).toEqual({ status: 'paid', paidBy: payload.transaction_id });
    });

    test('purgeDaily purges what was delivered more than 30 days ago, once a day, and logs a failure', async () => {
      const { ipn } = setUp();
      const purge = jest.spyOn(ipn.inbox, 'purge').mockRejectedValueOnce(new Error('redis down'));
      const logged = jest.spyOn(console, 'error').mockImplementation(() => {});
      jest.useFakeTimers({ now: new Date('2026-03-31T00:00:00Z') });
      try {
        const timer = purgeDaily(ipn);
        jest.advanceTimersByTime(24 * 60 * 60 * 1000);
        clearInterval(timer);
      } finally {
        jest.useRealTimers();
      }
      await eventually('the failure logged', () => logged.mock.calls.length > 0);

      expect(purge.mock.calls).toEqual([[new Date('2026-03-02T00:00:00Z')]]);
      // This Redis keeps nothing on disk: its one persistence warning is not the purge's line.
      const own = logged.mock.calls.filter((call) => !String(call[0]).includes('without persistence'));
      expect(own).toEqual([['purge failed: redis down']]);
      logged.mockRestore();
    });
  },
);
