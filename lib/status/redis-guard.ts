import { createHash } from 'node:crypto';
import {
  senderOf,
  type IoRedisClient,
  type NodeRedisClient,
  type Send,
} from '../stores/redis/redis-store.js';
import type { SharedGuard, SharedPermit } from './shared-guard.js';

/**
 * Options of {@link redisGuard}.
 * @inline
 */
export interface RedisGuardOptions {
  /** Your connected client: ioredis or node-redis (the same one as your `RedisStore`, if you like). Required. */
  client: IoRedisClient | NodeRedisClient;
  /** Prepended to every key the guard writes; its braces keep every key in one Redis Cluster slot. @default '{ipn-kit:guard}:' */
  prefix: string;
  /**
   * While Redis is unreachable, each instance uses a local budget of `maxQueriesPerMinute / fallbackInstances`
   * (so set it to how many instances you run); `undefined` sends no status query at all until Redis answers.
   * @default undefined (refuse rather than risk a block)
   */
  fallbackInstances: number | undefined;
  /** Time limit of each Redis call, in ms; a slower answer counts as Redis being unreachable. @default 1_000 */
  timeoutMs: number;
  /** How long a final answer stays cached in Redis, in ms. @default 86_400_000 (a day) */
  finalTtlMs: number;
}

// One sliding 60 s window by Redis's own clock (the instances' clocks may disagree), and the cool-down
// checked in the same step: two instances can never both take the last request. replicate_commands lets a
// Redis older than 5 write after TIME (newer ones always do; there it is a no-op).
const TAKE = `pcall(redis.replicate_commands)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max = tonumber(ARGV[1])
local blocked = tonumber(redis.call('GET', KEYS[2]) or '0')
if now < blocked then return {0, blocked - now, 0} end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 60000)
local used = redis.call('ZCARD', KEYS[1])
if used >= max then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {1, math.max(1, tonumber(oldest[2]) + 60000 - now), 0}
end
local seq = redis.call('INCR', KEYS[3])
redis.call('PEXPIRE', KEYS[3], 120000)
redis.call('ZADD', KEYS[1], now, now .. ':' .. seq)
redis.call('PEXPIRE', KEYS[1], 61000)
return {2, 0, max - used - 1}`;
const BLOCK = `pcall(redis.replicate_commands)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local until_ = now + tonumber(ARGV[1])
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if until_ > current then redis.call('SET', KEYS[1], until_, 'PX', ARGV[1]) end
return 1`;
const UNLOCK = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`;

const sha = (script: string) => createHash('sha1').update(script).digest('hex');

/**
 * A status-query guard shared through Redis by every instance of your app: one budget of
 * `maxQueriesPerMinute` for the whole fleet, one cool-down after any instance sees a 429 or 403, final
 * answers cached for all, and one request per transaction id at a time. Give it to `createStatusClient`.
 * It needs EVALSHA, EVAL, GET, SET and DEL.
 *
 * @example
 * import { createStatusClient } from 'ipn-kit';
 * import { redisGuard } from 'ipn-kit/redis';
 *
 * const client = createStatusClient({ baseUrl, apiKey, shared: redisGuard({ client: redis, fallbackInstances: 3 }) });
 */
export function redisGuard(
  options: Partial<RedisGuardOptions> & Pick<RedisGuardOptions, 'client'>,
): SharedGuard {
  const {
    client,
    prefix = '{ipn-kit:guard}:',
    fallbackInstances,
    timeoutMs = 1_000,
    finalTtlMs = 86_400_000,
  } = (options ?? {}) as Partial<RedisGuardOptions>;
  const send: Send = senderOf(client);
  if (typeof prefix !== 'string')
    throw new TypeError(`redisGuard: prefix must be a string, got ${typeof prefix}`);
  if (fallbackInstances !== undefined && (!Number.isInteger(fallbackInstances) || fallbackInstances < 1)) {
    throw new TypeError(
      `redisGuard: fallbackInstances must be a positive integer, got ${String(fallbackInstances)}`,
    );
  }
  for (const [name, value] of [
    ['timeoutMs', timeoutMs],
    ['finalTtlMs', finalTtlMs],
  ] as const) {
    if (!Number.isFinite(value) || value <= 0) {
      throw new TypeError(`redisGuard: ${name} must be a positive number of ms, got ${String(value)}`);
    }
  }
  const key = (name: string) => prefix + name;
  const script = async (body: string, keys: string[], args: string[]): Promise<unknown> => {
    const tail = [String(keys.length), ...keys, ...args];
    return send(['EVALSHA', sha(body), ...tail]).catch((error: unknown) => {
      if (!String((error as Error | undefined)?.message).startsWith('NOSCRIPT')) throw error;
      return send(['EVAL', body, ...tail]);
    });
  };
  const ms = (value: number) => String(Math.max(1, Math.ceil(value)));

  return {
    fallbackInstances,
    timeoutMs,
    finalTtlMs,
    // Under the same prefix (so in the same Cluster slot), apart from every other account's keys.
    scoped: (account) =>
      redisGuard({ ...options, prefix: `${prefix}account:${encodeURIComponent(account)}:` }),
    async take(maxPerMinute) {
      const reply = await script(TAKE, [key('window'), key('blocked'), key('seq')], [String(maxPerMinute)]);
      const [kind, wait, left] = (Array.isArray(reply) ? reply : []).map(Number);
      if (kind === 2) return { granted: true, retryAfterMs: 0, left: left ?? 0 } satisfies SharedPermit;
      if (kind === 0 || kind === 1) {
        return {
          granted: false,
          reason: kind === 0 ? 'blocked' : 'budget',
          retryAfterMs: wait ?? 60_000,
          left: 0,
        };
      }
      throw new Error(`redisGuard: unexpected reply to the budget script: ${JSON.stringify(reply)}`);
    },
    async block(blockMs) {
      await script(BLOCK, [key('blocked')], [ms(blockMs)]);
    },
    async read(id) {
      const value = await send(['GET', key(`answer:${id}`)]);
      return typeof value === 'string' ? value : undefined;
    },
    async write(id, value, ttlMs) {
      await send(['SET', key(`answer:${id}`), value, 'PX', ms(ttlMs)]);
    },
    async lock(id, token, lockMs) {
      return (await send(['SET', key(`lock:${id}`), token, 'NX', 'PX', ms(lockMs)])) === 'OK';
    },
    async unlock(id, token) {
      await script(UNLOCK, [key(`lock:${id}`)], [token]);
    },
  };
}
