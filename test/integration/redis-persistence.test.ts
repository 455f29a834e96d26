import { Redis } from 'ioredis';
import { ipnRouter, type Logger } from '../../lib/index.js';
import { RedisStore } from '../../lib/redis.js';
import { describeWithService, eventually, redisUrl } from '../helpers/services.js';

function recordingLogger(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  return {
    warnings,
    debug: () => {},
    info: () => {},
    warn: (_object, message) => void warnings.push(message),
    error: () => {},
  };
}

describeWithService('Redis', "RedisStore's persistence warning", () => {
  let redis: Redis;
  beforeAll(() => {
    redis = new Redis(redisUrl());
  });
  afterAll(() => redis.quit());

  test('at least once on this Redis (no AOF, no save point): one warning at start', async () => {
    const save = (await redis.call('CONFIG', 'GET', 'save')) as string[];
    const info = (await redis.call('INFO', 'persistence')) as string;
    if (!/aof_enabled:0/.test(info) || save[1] !== '') {
      throw new Error(`this test needs a Redis without persistence (--save "" --appendonly no): ${save[1]}`);
    }
    const logger = recordingLogger();
    const ipn = ipnRouter({
      store: new RedisStore({ client: redis, prefix: `persist-${process.pid}-${Date.now()}:` }),
      delivery: 'at-least-once',
      logger,
    });
    ipn.on('successful', () => {});
    await ipn.drain();
    await eventually('the warning is logged', () => logger.warnings.length > 0);
    await ipn.drain();

    expect(logger.warnings).toEqual([expect.stringContaining('a Redis restart loses the whole inbox')]);
    await ipn.close();
  });

  test('a Redis that refuses CONFIG (hosted) is not warned about', async () => {
    const refusing = {
      call: (command: string, ...args: Array<string | number>): Promise<unknown> =>
        command.toUpperCase() === 'CONFIG'
          ? Promise.reject(new Error("ERR unknown command 'CONFIG'"))
          : redis.call(command, ...args),
    };
    const store = new RedisStore({ client: refusing, prefix: `persist-${process.pid}-${Date.now()}-h:` });
    await expect(store.durabilityWarning()).resolves.toBeUndefined();
  });

  test('at most once, nothing is said: the inbox is not kept there', async () => {
    const logger = recordingLogger();
    const ipn = ipnRouter({
      store: new RedisStore({ client: redis, prefix: `persist-${process.pid}-m:` }),
      logger,
    });
    ipn.on('successful', () => {});
    await ipn.drain();
    await ipn.sweep();
    expect(logger.warnings).toEqual([]);
    await ipn.close();
  });
});
