import Redis from 'ioredis';
import { createClient } from 'redis';
import { createStatusClient, StatusRateLimitError, type StatusClient } from '../../lib/index.js';
import { redisGuard } from '../../lib/redis.js';
import { createFakeProvider, type FakeProvider } from '../../lib/testing.js';
import { quiet } from '../helpers/quiet-logger.js';
import { describeWithService, redisUrl } from '../helpers/services.js';
import { canStartRedis, throwawayRedis } from '../helpers/throwaway-redis.js';

const API_KEY = 'fleet-key';
let sequence = 0;
const uniquePrefix = () => `{ipn-kit-test-guard-${process.pid}-${(sequence += 1)}}:`;

describeWithService('Redis', 'createStatusClient({ shared: redisGuard() }): one guard for the fleet', () => {
  let redis: Redis;
  let provider: FakeProvider;
  beforeAll(() => {
    redis = new Redis(redisUrl());
  });
  afterAll(async () => {
    await redis.quit();
  });
  beforeEach(async () => {
    provider = await createFakeProvider({ apiKey: API_KEY });
  });
  afterEach(async () => {
    await provider.close();
  });

  /** `count` clients, like `count` instances of an app, sharing one guard's keys. */
  function fleet(
    count: number,
    options: { maxQueriesPerMinute?: number; prefix?: string; minIntervalMs?: number } = {},
  ): StatusClient[] {
    const prefix = options.prefix ?? uniquePrefix();
    return Array.from({ length: count }, () =>
      createStatusClient({
        baseUrl: provider.statusBaseUrl,
        apiKey: API_KEY,
        logger: quiet,
        retries: 0,
        maxQueriesPerMinute: options.maxQueriesPerMinute ?? 30,
        ...(options.minIntervalMs === undefined ? {} : { minIntervalMs: options.minIntervalMs }),
        shared: redisGuard({ client: redis, prefix }),
      }),
    );
  }
  const settled = (id: string, outcome: 'SUCCESSFUL' | 'FAILED' = 'SUCCESSFUL') =>
    provider.initiate({
      amount: 100,
      ipnUrl: 'http://127.0.0.1:9/ipn',
      customData: id,
      outcome,
      deliver: false,
    }).transactionId;

  test('the per-minute budget is one budget: three instances of 4 a minute send 4 in all', async () => {
    const clients = fleet(3, { maxQueriesPerMinute: 4 });
    const ids = Array.from({ length: 9 }, () => settled('x'));
    await new Promise((resolve) => setTimeout(resolve, 5));
    const results = await Promise.allSettled(ids.map((id, index) => clients[index % 3]!.getStatus(id)));
    expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(4);
    const refused = results.filter((result) => result.status === 'rejected');
    expect(refused).toHaveLength(5);
    for (const result of refused) {
      expect(result.reason).toBeInstanceOf(StatusRateLimitError);
      expect(result.reason.reason).toBe('budget');
    }
    expect(provider.stats.statusQueries).toBe(4);
    expect(clients[0]!.stats.budgetLeft).toBe(0);
  });

  test('a 429 seen by one instance starts one cool-down that every instance honours', async () => {
    const [a, b] = fleet(2);
    const first = settled('x');
    const second = settled('y');
    await new Promise((resolve) => setTimeout(resolve, 5));
    provider.block();
    await expect(a!.getStatus(first)).rejects.toMatchObject({ blocked: true });
    expect(provider.stats.statusQueries).toBe(1);
    await expect(b!.getStatus(second)).rejects.toMatchObject({ reason: 'blocked' });
    expect(provider.stats.statusQueries).toBe(1);
  });

  test.each([
    ['ioredis', () => Promise.resolve(redis)],
    [
      'node-redis',
      async () => {
        const client = createClient({ url: redisUrl() });
        await client.connect();
        return client;
      },
    ],
  ])(
    'a final answer is cached for the fleet: one query for the transaction, whichever instance asks (%s)',
    async (_, connect) => {
      const client = await connect();
      const prefix = uniquePrefix();
      const make = () =>
        createStatusClient({
          baseUrl: provider.statusBaseUrl,
          apiKey: API_KEY,
          logger: quiet,
          shared: redisGuard({ client, prefix }),
        });
      const id = settled('order-1');
      await new Promise((resolve) => setTimeout(resolve, 5));
      const [a, b, c] = [make(), make(), make()];
      expect((await a.getStatus(id)).state).toBe('SUCCESSFUL');
      expect((await b.getStatus(id)).custom_data).toBe('order-1');
      expect((await c.getStatus(id)).state).toBe('SUCCESSFUL');
      expect(provider.statusQueriesFor(id)).toBe(1);
      if (client !== redis) await (client as { quit(): Promise<unknown> }).quit();
    },
  );

  test('since: an answer another instance cached before it is not used; the id is asked again after minIntervalMs', async () => {
    const [a, b] = fleet(2, { minIntervalMs: 50 });
    const id = settled('x', 'FAILED');
    await new Promise((resolve) => setTimeout(resolve, 5));
    expect((await a!.getStatus(id)).state).toBe('FAILED');
    const since = performance.timeOrigin + performance.now();
    provider.setState(id, 'SUCCESSFUL'); // a late confirmation
    await expect(b!.getStatus(id)).resolves.toMatchObject({ state: 'FAILED' }); // the fleet's cached final
    await expect(b!.getStatus(id, { since })).rejects.toMatchObject({ reason: 'interval' });
    expect(provider.stats.statusQueries).toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 60));
    await expect(b!.getStatus(id, { since })).resolves.toMatchObject({ state: 'SUCCESSFUL' });
    expect(provider.stats.statusQueries).toBe(2);
    // Another instance needing an answer newer than `since` takes the one just shared.
    await expect(a!.getStatus(id, { since })).resolves.toMatchObject({ state: 'SUCCESSFUL' });
    expect(provider.stats.statusQueries).toBe(2);
  });

  test('concurrent asks for one id from several instances lead to one request', async () => {
    await provider.close();
    provider = await createFakeProvider({ apiKey: API_KEY, statusDelayMs: 150 });
    const clients = fleet(3);
    const id = settled('order-2');
    await new Promise((resolve) => setTimeout(resolve, 5));
    const records = await Promise.all(
      clients.flatMap((client) => [client.getStatus(id), client.getStatus(id)]),
    );
    expect(records.map((record) => record.state)).toEqual(Array(6).fill('SUCCESSFUL'));
    expect(provider.statusQueriesFor(id)).toBe(1);
  });

  test('a cached entry that names another transaction is never taken for this one', async () => {
    const prefix = uniquePrefix();
    const [client] = fleet(1, { prefix });
    const id = settled('order-3', 'FAILED');
    const other = settled('order-4');
    await new Promise((resolve) => setTimeout(resolve, 5));
    const forged = await createStatusClient({
      baseUrl: provider.statusBaseUrl,
      apiKey: API_KEY,
      logger: quiet,
    }).getStatus(other);
    await redis.set(`${prefix}answer:${id}`, JSON.stringify({ record: forged }), 'PX', 60_000);
    const record = await client!.getStatus(id);
    expect(record.transaction_id).toBe(id);
    expect(record.state).toBe('FAILED');
    expect(provider.statusQueriesFor(id)).toBe(1);
  });
});

const describeWithRedisServer = canStartRedis() || process.env.CI === 'true' ? describe : describe.skip;
if (!canStartRedis())
  console.warn('redis-server is not installed: skipping the suite that kills a Redis of its own.');

describeWithRedisServer("when the shared guard's Redis dies mid-burst", () => {
  let provider: FakeProvider;
  beforeEach(async () => {
    provider = await createFakeProvider({ apiKey: API_KEY });
  });
  afterEach(async () => {
    await provider.close();
  });

  async function setUp(fallbackInstances?: number) {
    const server = await throwawayRedis();
    const client = new Redis(server.url, { maxRetriesPerRequest: 1, retryStrategy: () => 50 });
    client.on('error', () => {});
    const make = () =>
      createStatusClient({
        baseUrl: provider.statusBaseUrl,
        apiKey: API_KEY,
        logger: quiet,
        retries: 0,
        maxQueriesPerMinute: 6,
        shared: redisGuard({ client, fallbackInstances, timeoutMs: 300 }),
      });
    const ids = Array.from(
      { length: 12 },
      () =>
        provider.initiate({
          amount: 1,
          ipnUrl: 'http://127.0.0.1:9/ipn',
          customData: 'x',
          outcome: 'SUCCESSFUL',
          deliver: false,
        }).transactionId,
    );
    await new Promise((resolve) => setTimeout(resolve, 5));
    return { server, client, clients: [make(), make()], ids };
  }

  test('by default nothing is sent while it is down, nothing crashes, and the fleet budget returns with it', async () => {
    const { server, client, clients, ids } = await setUp();
    const [a, b] = clients as [StatusClient, StatusClient];
    await a.getStatus(ids[0]!);
    expect(provider.stats.statusQueries).toBe(1);
    await server.stop();
    const during = await Promise.allSettled(
      ids.slice(1, 7).map((id, index) => (index % 2 ? a : b).getStatus(id)),
    );
    expect(during.every((result) => result.status === 'rejected')).toBe(true);
    expect((during[0] as PromiseRejectedResult).reason).toMatchObject({ reason: 'guard_unavailable' });
    expect(provider.stats.statusQueries).toBe(1);
    expect(a.stats.guard).toBe('fallback');
    await server.start();
    let record;
    for (let tries = 0; tries < 100 && record === undefined; tries += 1) {
      record = await b.getStatus(ids[7]!).catch(() => undefined);
      if (record === undefined) await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(record?.state).toBe('SUCCESSFUL');
    expect(b.stats.guard).toBe('shared');
    client.disconnect();
    await server.stop();
  });

  test('with fallbackInstances, each instance sends at most its share of the budget while it is down', async () => {
    const { server, client, clients, ids } = await setUp(2);
    await server.stop();
    const results = await Promise.allSettled(ids.map((id, index) => clients[index % 2]!.getStatus(id)));
    // 6 a minute for the fleet, split between 2 instances: 3 each.
    expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(6);
    expect(provider.stats.statusQueries).toBe(6);
    client.disconnect();
  });
});
