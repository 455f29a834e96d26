import Redis from 'ioredis';
import { createServer, type Server, type Socket } from 'node:net';
import { createClient } from 'redis';
import { createStatusClient, ipnRouter, StatusRateLimitError, type StatusClient } from '../../lib/index.js';
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

  test('ipn.reconcile() goes through the fleet guard: two instances reconciling one id make one query', async () => {
    const [a, b] = fleet(2);
    const routers = [a, b].map((client) => ipnRouter({ verify: client!, logger: quiet }));
    const credited: string[] = [];
    for (const router of routers) router.on('successful', (n) => credited.push(n.transaction_id));
    const id = settled('order-5');
    await new Promise((resolve) => setTimeout(resolve, 5));
    const results = await Promise.all(routers.map((router) => router.reconcile(id)));
    expect(results.map((result) => result.record.state)).toEqual(['SUCCESSFUL', 'SUCCESSFUL']);
    expect(provider.statusQueriesFor(id)).toBe(1);
    // Each instance has its own (memory) store here, so each emits once; with a shared store only one would.
    expect(credited).toEqual([id, id]);
    await Promise.all(routers.map((router) => router.close()));
  });

  test('ipn.reconcile() is refused, sending nothing, once the fleet budget is spent', async () => {
    const [a, b] = fleet(2, { maxQueriesPerMinute: 1 });
    const [first, second] = [settled('order-6'), settled('order-7')];
    await new Promise((resolve) => setTimeout(resolve, 5));
    const one = ipnRouter({ verify: a!, logger: quiet });
    const two = ipnRouter({ verify: b!, logger: quiet });
    await one.reconcile(first);
    await expect(two.reconcile(second)).rejects.toBeInstanceOf(StatusRateLimitError);
    expect(provider.stats.statusQueries).toBe(1);
    await Promise.all([one.close(), two.close()]);
  });

  test('an instance that took the lock just after another cached the answer reads it, and asks nothing', async () => {
    const prefix = uniquePrefix();
    const [a] = fleet(1, { prefix });
    const id = settled('order-8');
    await new Promise((resolve) => setTimeout(resolve, 5));
    expect((await a!.getStatus(id)).state).toBe('SUCCESSFUL');
    // B's first read came before A's answer was cached; by the time B takes the lock, A has freed it.
    const guard = redisGuard({ client: redis, prefix });
    let reads = 0;
    const b = createStatusClient({
      baseUrl: provider.statusBaseUrl,
      apiKey: API_KEY,
      logger: quiet,
      shared: { ...guard, read: (key) => (++reads === 1 ? Promise.resolve(undefined) : guard.read(key)) },
    });
    expect((await b.getStatus(id)).state).toBe('SUCCESSFUL');
    expect(reads).toBe(2);
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

  test('killed mid-burst: what each instance already sent this minute counts against its share; recovery after', async () => {
    const { server, client, clients, ids } = await setUp(2);
    const [a, b] = clients as [StatusClient, StatusClient];
    try {
      // The first half of the burst goes through the fleet budget (6 a minute): 2 requests each.
      await Promise.all(ids.slice(0, 4).map((id, index) => (index % 2 ? a : b).getStatus(id)));
      expect(provider.stats.statusQueries).toBe(4);
      await server.stop();
      const rest = await Promise.allSettled(
        ids.slice(4).map((id, index) => (index % 2 ? a : b).getStatus(id)),
      );
      // Each instance's share is 6 / 2 = 3 a minute, and it has sent 2: one more each, 6 in all, never more.
      expect(provider.stats.statusQueries).toBe(6);
      expect(rest.filter((result) => result.status === 'fulfilled')).toHaveLength(2);
      for (const result of rest.filter((r): r is PromiseRejectedResult => r.status === 'rejected')) {
        expect(result.reason).toBeInstanceOf(StatusRateLimitError);
        expect(result.reason.reason).toBe('budget');
      }
      expect([a.stats.guard, b.stats.guard]).toEqual(['fallback', 'fallback']);
      expect([a.stats.budgetLeft, b.stats.budgetLeft]).toEqual([0, 0]);
      // Redis returns (empty: a fresh window): the fleet budget answers again.
      await server.start();
      const more = provider.initiate({
        amount: 1,
        ipnUrl: 'http://127.0.0.1:9/ipn',
        customData: 'x',
        outcome: 'SUCCESSFUL',
        deliver: false,
      }).transactionId;
      await new Promise((resolve) => setTimeout(resolve, 5));
      let record;
      for (let tries = 0; tries < 100 && record === undefined; tries += 1) {
        record = await a.getStatus(more).catch(() => undefined);
        if (record === undefined) await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(record?.state).toBe('SUCCESSFUL');
      expect(a.stats.guard).toBe('shared');
    } finally {
      client.disconnect();
      await server.stop();
    }
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

describe("when the shared guard's Redis hangs (accepts connections, never answers)", () => {
  let provider: FakeProvider;
  let hung: Server;
  const sockets = new Set<Socket>();
  beforeEach(async () => {
    provider = await createFakeProvider({ apiKey: API_KEY });
    hung = createServer((socket) => {
      sockets.add(socket);
      socket.on('error', () => {});
      socket.resume(); // reads every command, answers none
    });
    await new Promise<void>((resolve) => hung.listen(0, '127.0.0.1', resolve));
  });
  afterEach(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => hung.close(resolve));
    await provider.close();
  });

  function make(fallbackInstances?: number) {
    const { port } = hung.address() as { port: number };
    const client = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1, lazyConnect: false });
    client.on('error', () => {});
    const warnings: string[] = [];
    const status = createStatusClient({
      baseUrl: provider.statusBaseUrl,
      apiKey: API_KEY,
      logger: { ...quiet, warn: (_object, message) => warnings.push(message) },
      retries: 0,
      maxQueriesPerMinute: 4,
      shared: redisGuard({ client, fallbackInstances, timeoutMs: 200 }),
    });
    const id = provider.initiate({
      amount: 1,
      ipnUrl: 'http://127.0.0.1:9/ipn',
      customData: 'x',
      outcome: 'SUCCESSFUL',
      deliver: false,
    }).transactionId;
    return { client, status, id, warnings };
  }

  test('by default a call is refused after the time limit, sends nothing, and says so in the log and stats', async () => {
    const { client, status, id, warnings } = make();
    await new Promise((resolve) => setTimeout(resolve, 5));
    await expect(status.getStatus(id)).rejects.toMatchObject({ reason: 'guard_unavailable' });
    expect(provider.stats.statusQueries).toBe(0);
    expect(status.stats.guard).toBe('fallback');
    expect(status.stats.guardFailures).toBeGreaterThanOrEqual(1);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/unreachable.*sending no status query/);
    client.disconnect();
  });

  test('with fallbackInstances the call goes through on the local share once the time limit passes', async () => {
    const { client, status, id, warnings } = make(2);
    await new Promise((resolve) => setTimeout(resolve, 5));
    expect((await status.getStatus(id)).state).toBe('SUCCESSFUL');
    expect(provider.stats.statusQueries).toBe(1);
    expect(status.stats.budgetLeft).toBe(1); // 4 / 2 = 2 a minute, 1 sent
    expect(warnings[0]).toMatch(/using a local budget of 2 a minute/);
    client.disconnect();
  });
});
