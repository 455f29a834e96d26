import { app } from './context.js';
// #region custom-store
import { Redis } from 'ioredis';
import { ipnRouter, type Store } from 'ipn-kit';

const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
// Without an 'error' listener, ioredis throws each failed reconnect as an unhandled 'error' event.
redis.on('error', (error) => console.error(`redis: ${error.message}`));
const store: Store = {
  // SET NX answers 'OK' only to the one caller that set it: atomic across instances. The token tells a
  // claim asked again after a lost answer from another instance's claim.
  claim: async (key, ttlMs, token) =>
    (await redis.set(`ipn:${key}`, token, 'PX', ttlMs, 'NX')) === 'OK' ||
    (await redis.get(`ipn:${key}`)) === token,
  release: async (key) => void (await redis.del(`ipn:${key}`)),
};
app.use('/ipn', ipnRouter({ store }));
// #endregion custom-store
export { redis };
