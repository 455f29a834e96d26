import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import type { Store } from 'ipn-kit';
import { runStoreConformance } from 'ipn-kit/testing';

// #region store
/** "Set if absent, or already this claim's": one script, which Redis runs atomically. */
const CLAIM = `if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end
return 0`;

/** Dedupe in a Redis of your own: what `claim` and `release` need, and nothing else. */
export class MyStore implements Store {
  constructor(
    private readonly redis: Redis,
    private readonly prefix = 'my-app:ipn:',
  ) {}

  async claim(key: string, ttlMs: number, token: string): Promise<boolean> {
    return (await this.redis.eval(CLAIM, 1, this.prefix + key, token, Math.ceil(ttlMs))) === 1;
  }

  async release(key: string): Promise<void> {
    await this.redis.del(this.prefix + key);
  }
}
// #endregion store

// #region conformance
test('MyStore keeps every rule the router relies on', async () => {
  const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
  try {
    // A new, empty store for each rule: keys of their own (they expire by themselves).
    const { failures } = await runStoreConformance(() => new MyStore(redis, `test:${randomUUID()}:`));
    expect(failures).toEqual([]);
  } finally {
    redis.disconnect();
  }
});
// #endregion conformance
