// #region serverless-store
import { Redis } from 'ioredis';
import { ipnRouter } from 'ipn-kit';
import { RedisStore } from 'ipn-kit/redis';

// Module scope: one client and one router per function instance, reused by its invocations. The store
// is what every instance shares, so a resend that reaches another instance is still a duplicate.
const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { lazyConnect: true });
// Without an 'error' listener, ioredis throws each failed reconnect as an unhandled 'error' event.
redis.on('error', (error) => console.error(`redis: ${error.message}`));
export const ipn = ipnRouter({ store: new RedisStore({ client: redis }) });
// #endregion serverless-store
