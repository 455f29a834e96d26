/**
 * `ipn-kit/redis`: a dedupe store in Redis, over your own ioredis or node-redis client. This entry point
 * loads no Redis package itself.
 * @packageDocumentation
 */
export { RedisStore } from './stores/redis-store.js';
export type { RedisStoreOptions, IoRedisClient, NodeRedisClient } from './stores/redis-store.js';
export { redisGuard } from './status/redis-guard.js';
export type { RedisGuardOptions } from './status/redis-guard.js';
export type { SharedGuard, SharedPermit } from './status/shared-guard.js';
export type { RedisExpectations } from './stores/redis-expectations.js';
