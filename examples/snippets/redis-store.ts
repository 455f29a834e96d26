import { app } from './context.js';
// #region redis-store
import { Redis } from 'ioredis';
import { ipnRouter } from 'ipn-kit';
import { RedisStore } from 'ipn-kit/redis';

const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
// Without an 'error' listener, ioredis throws each failed reconnect as an unhandled 'error' event.
redis.on('error', (error) => console.error(`redis: ${error.message}`));
app.use('/ipn', ipnRouter({ store: new RedisStore({ client: redis }) }));
// #endregion redis-store
export { redis };
