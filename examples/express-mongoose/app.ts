/**
 * Express + Mongoose (docs/recipes.md, "Express and Mongoose"): the router on a Redis inbox, crediting
 * through the models of ./payments. test/integration/express-mongoose.test.ts builds `paymentsIpn` on the
 * test Redis with an in-memory stand-in of the models; `main()` is what your server runs.
 */
// #region mongoose-app
import express from 'express';
import mongoose from 'mongoose';
import { Redis } from 'ioredis';
import { ipnRouter } from 'ipn-kit';
import { RedisStore } from 'ipn-kit/redis';
import { creditPayment, Order, Payment, type PaymentModels } from './payments.js';

/** The IPN router: at least once, from an inbox in Redis. */
export function paymentsIpn(redis: Redis, models: PaymentModels, prefix = 'ipn-kit:') {
  const ipn = ipnRouter({ store: new RedisStore({ client: redis, prefix }), delivery: 'at-least-once' });
  ipn.on('successful', (n) => creditPayment(models, n));
  ipn.on('error', ({ error, notification }) =>
    console.error(`ipn error ${notification?.transaction_id}: ${error.message}`),
  );
  return ipn;
}

/** Deletes inbox entries delivered more than 30 days ago (they are the dedupe keys: keep them a while). */
export function purgeDaily(ipn: ReturnType<typeof paymentsIpn>) {
  const day = 24 * 60 * 60 * 1000;
  const timer = setInterval(() => {
    ipn.inbox
      .purge(new Date(Date.now() - 30 * day))
      .catch((error: Error) => console.error(`purge failed: ${error.message}`));
  }, day);
  timer.unref();
  return timer;
}

export async function main() {
  await mongoose.connect(process.env.MONGODB_URL ?? 'mongodb://127.0.0.1:27017/shop');
  await Payment.syncIndexes(); // the unique index, before the first credit
  const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
  redis.on('error', (error) => console.error(`redis: ${error.message}`)); // ioredis reconnects by itself
  const ipn = paymentsIpn(redis, { Payment, Order });
  purgeDaily(ipn);

  const app = express();
  app.use('/ipn', ipn); // before express.json()
  app.use(express.json());
  app.listen(Number(process.env.PORT ?? 3000));
}
// #endregion mongoose-app
