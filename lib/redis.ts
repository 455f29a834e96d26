/**
 * `ipn-kit/redis`: a dedupe store in Redis, over your own ioredis or node-redis client. This entry point
 * loads no Redis package itself.
 * @packageDocumentation
 */
export { RedisStore } from './stores/redis/redis-store.js';
export type { RedisStoreOptions } from './stores/redis/redis-store.js';
export { redisGuard } from './status/redis-guard.js';
