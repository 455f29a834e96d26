import { Redis } from 'ioredis';
import { createStatusClient, ipnRouter } from 'ipn-kit';
import { RedisStore, redisGuard } from 'ipn-kit/redis';

// #region fleet
const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
// Without an 'error' listener, ioredis throws each failed reconnect as an unhandled 'error' event.
redis.on('error', (error) => console.error(`redis: ${error.message}`));
const verify = createStatusClient({
  baseUrl: process.env.PAYMENT_API_URL ?? 'https://payments.example/api_v1/transaction',
  apiKey: process.env.PAYMENT_API_KEY ?? '',
  // One budget, one cool-down and one query per transaction for all your instances.
  shared: redisGuard({ client: redis, fallbackInstances: 3 }),
});
export const ipn = ipnRouter({ store: new RedisStore({ client: redis }), verify });
// #endregion fleet
export { redis };
