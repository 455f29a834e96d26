import request from 'supertest';
import type { Redis } from 'ioredis';
import type { Express } from 'express';
import type { IpnRouter } from 'ipn-kit';
import { createFakeProvider } from 'ipn-kit/testing';
import { uniquePayload } from '../helpers/payloads.js';
import { listen, type Running } from '../helpers/servers.js';
import { canStartRedis, throwawayRedis, type ThrowawayRedis } from '../helpers/throwaway-redis.js';
import { until } from '../helpers/until.js';

// The documentation's snippets that open a Redis connection when they load, run against a Redis of the
// test's own (their keys have the default prefixes, so the shared test Redis is left alone): the Redis
// store, a store of your own, and the fleet guard. Each is loaded in a module registry of its own, so each
// gets its own `app` from examples/snippets/context.ts.

const describeWithRedisServer = canStartRedis() || process.env.CI === 'true' ? describe : describe.skip;
if (!canStartRedis()) console.warn('redis-server is not installed: skipping the Redis snippets.');

describeWithRedisServer('the Redis snippets of the docs, run', () => {
  let server: ThrowawayRedis;
  const saved = { ...process.env };
  beforeAll(async () => {
    server = await throwawayRedis();
    process.env.REDIS_URL = server.url;
  });
  afterAll(async () => {
    process.env = saved;
    await server?.stop();
  });

  async function load<T>(path: string): Promise<T & { redis: Redis }> {
    let loaded: (T & { redis: Redis }) | undefined;
    await jest.isolateModulesAsync(async () => {
      loaded = (await import(path)) as T & { redis: Redis };
    });
    return loaded!;
  }

  test.each([['../../examples/snippets/redis-store.js'], ['../../examples/snippets/custom-store.js']])(
    '%s: the first copy of a notification is answered 200, a resend is dropped as a duplicate',
    async (path) => {
      let app: Express | undefined;
      let snippet: { redis: Redis } | undefined;
      await jest.isolateModulesAsync(async () => {
        app = ((await import('../../examples/snippets/context.js')) as { app: Express }).app;
        snippet = (await import(path)) as { redis: Redis };
      });
      const payload = uniquePayload();
      try {
        expect((await request(app!).post('/ipn').send(payload).expect(200)).body).toEqual({ ok: true });
        expect((await request(app!).post('/ipn').send(payload).expect(200)).body).toEqual({
          ok: true,
          duplicate: true,
        });
      } finally {
        snippet!.redis.disconnect();
      }
    },
  );

  test('examples/fleet-guard.ts: verifies through the shared guard; the fleet budget and the answer live in Redis', async () => {
    const provider = await createFakeProvider({ apiKey: 'fleet-snippet-key' });
    process.env.PAYMENT_API_URL = provider.statusBaseUrl;
    process.env.PAYMENT_API_KEY = 'fleet-snippet-key';
    const { ipn, redis } = await load<{ ipn: IpnRouter }>('../../examples/fleet-guard.js');
    let running: Running | undefined;
    try {
      const paid: string[] = [];
      ipn.on('successful', (n) => paid.push(n.transaction_id));
      running = await listen(ipn);
      const tx = provider.initiate({
        amount: 5000,
        ipnUrl: `${running.url}/`,
        customData: 'order-1',
        outcome: 'SUCCESSFUL',
      });
      await tx.delivered;
      await until(() => paid.length === 1, 'the verified payment');
      expect(paid).toEqual([tx.transactionId]);
      expect(provider.statusQueriesFor(tx.transactionId)).toBe(1);
      expect(await redis.exists(`{ipn-kit:guard}:answer:${tx.transactionId}`)).toBe(1);
      expect(await redis.zcard('{ipn-kit:guard}:window')).toBe(1);
    } finally {
      await running?.close();
      await ipn.close();
      redis.disconnect();
      await provider.close();
    }
  });
});
