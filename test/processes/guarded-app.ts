/**
 * One instance of a partner app with `verify` and the fleet guard, in a process of its own: an IPN router
 * over a shared RedisStore, verifying through a status client whose guard is shared in Redis. Run with
 * `node --import tsx`; configured by GUARDED (JSON); reports each `successful`/`failed`/`rejected` event to
 * the test over IPC, and answers 'stats' with the client's stats.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import Redis from 'ioredis';
import { createStatusClient, ipnRouter } from '../../lib/index.js';
import { RedisStore, redisGuard } from '../../lib/redis.js';

interface GuardedConfig {
  baseUrl: string;
  apiKey: string;
  prefix: string;
  maxQueriesPerMinute: number;
  /** The guard's own Redis (a throwaway one the test may kill), when not REDIS_URL. */
  guardRedisUrl?: string;
  fallbackInstances?: number;
  guardTimeoutMs?: number;
  /** Short waits for a test (a FAILED answer to a SUCCESSFUL notification is asked again after it). */
  minIntervalMs?: number;
  verifyRetryDelayMs?: number;
}

const config = JSON.parse(process.env.GUARDED ?? '{}') as GuardedConfig;
const send = (message: unknown) => process.send?.(message);
const quiet = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} };

const redis = new Redis(process.env.REDIS_URL ?? '');
const guardRedis = config.guardRedisUrl
  ? new Redis(config.guardRedisUrl, { retryStrategy: () => 50 }).on('error', () => {})
  : redis;
const client = createStatusClient({
  baseUrl: config.baseUrl,
  apiKey: config.apiKey,
  maxQueriesPerMinute: config.maxQueriesPerMinute,
  minIntervalMs: config.minIntervalMs,
  logger: quiet,
  shared: redisGuard({
    client: guardRedis,
    prefix: `${config.prefix}guard:`,
    fallbackInstances: config.fallbackInstances,
    timeoutMs: config.guardTimeoutMs,
  }),
});
const ipn = ipnRouter({
  store: new RedisStore({ client: redis, prefix: `${config.prefix}dedupe:` }),
  verify: client,
  logger: quiet,
  verifyRetryDelayMs: config.verifyRetryDelayMs,
});
ipn.on('successful', (n) =>
  send({ type: 'event', event: 'successful', id: n.transaction_id, amount: n.amount }),
);
ipn.on('failed', (n) => send({ type: 'event', event: 'failed', id: n.transaction_id, amount: n.amount }));
ipn.on('rejected', (r) => send({ type: 'event', event: 'rejected', id: r.notification.transaction_id }));
ipn.on('conflict', (c) => send({ type: 'event', event: 'conflict', id: c.notification.transaction_id }));
process.on('message', (message) => {
  if (message === 'stats')
    send({
      type: 'stats',
      stats: {
        ...client.stats,
        budgetLeft: client.stats.budgetLeft,
        guard: client.stats.guard,
        guardFailures: client.stats.guardFailures,
      },
    });
});
const server = createServer(ipn).listen(0, '127.0.0.1', () => {
  send({ type: 'ready', url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
});
