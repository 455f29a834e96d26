import Redis from 'ioredis';
import { createClient } from 'redis';
import { ipnRouter, type IpnRouter } from 'ipn-kit';
import { RedisStore } from 'ipn-kit/redis';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, type Running } from '../helpers/servers.js';
import { describeWithService, redisUrl } from '../helpers/services.js';
import { until } from '../helpers/until.js';

type Client = ConstructorParameters<typeof RedisStore>[0]['client'];

async function ioredis(): Promise<{ client: Client; quit: () => Promise<void> }> {
  const client = new Redis(redisUrl(), { lazyConnect: true });
  client.on('error', () => {});
  await client.connect();
  return { client, quit: async () => void (await client.quit()) };
}
async function nodeRedis(): Promise<{ client: Client; quit: () => Promise<void> }> {
  const client = createClient({ url: redisUrl() });
  client.on('error', () => {});
  await client.connect();
  return { client, quit: () => client.close() };
}

const lease = (id: string, ms = 60_000) => ({ id, ms });

describeWithService('Redis', "RedisStore as a durable inbox (delivery: 'at-least-once')", () => {
  describe.each([
    ['ioredis', ioredis],
    ['node-redis', nodeRedis],
  ] as const)('with %s', (kind, connect) => {
    let connection: Awaited<ReturnType<typeof connect>>;
    let cleanup: Redis;
    let round = 0;
    const prefixes: string[] = [];
    /** A store on keys no other test (here or in another process) uses. */
    const fresh = () => {
      const prefix = `ipn-kit-test:inbox:${process.pid}:${kind}:${(round += 1)}:`;
      prefixes.push(prefix);
      return new RedisStore({ client: connection.client, prefix });
    };
    const servers: Running[] = [];
    const routers: IpnRouter[] = [];

    beforeAll(async () => {
      connection = await connect();
      cleanup = new Redis(redisUrl());
    });
    afterEach(async () => {
      await Promise.all(servers.splice(0).map((server) => server.close()));
      await Promise.all(routers.splice(0).map((router) => router.close()));
    });
    afterAll(async () => {
      for (const prefix of prefixes) {
        const keys = await cleanup.keys(`${prefix}*`);
        if (keys.length > 0) await cleanup.del(...keys);
      }
      cleanup.disconnect();
      await connection.quit();
    });

    test('receive stores once; lease is exclusive until it runs out; settle needs the lease', async () => {
      const store = fresh();
      const record = { transaction_id: 'T1', state: 'SUCCESSFUL', custom_data: 'Order-42 \u00e9', amount: 5 };
      expect(await store.receive('T1:SUCCESSFUL', record, lease('a', 150))).toBe(true);
      expect(await store.receive('T1:SUCCESSFUL', record, lease('b'))).toBe(false);
      expect(await store.lease(lease('b'), 10)).toEqual([]);
      let taken: Awaited<ReturnType<RedisStore['lease']>> = [];
      const deadline = Date.now() + 5_000;
      while (taken.length === 0 && Date.now() < deadline) taken = await store.lease(lease('b'), 10);
      expect(taken).toMatchObject([{ key: 'T1:SUCCESSFUL', attempts: 2, status: 'received', record }]);
      expect(await store.settle('T1:SUCCESSFUL', 'a', { status: 'delivered' })).toBe(false);
      expect(await store.settle('T1:SUCCESSFUL', 'b', { status: 'delivered' })).toBe(true);
      const entry = await store.get('T1:SUCCESSFUL');
      expect(entry).toMatchObject({
        status: 'delivered',
        transactionId: 'T1',
        state: 'SUCCESSFUL',
        leaseUntil: null,
      });
      expect(entry?.deliveredAt).toBeInstanceOf(Date);
      expect(await store.get('NONE:SUCCESSFUL')).toBeUndefined();
    });

    test('failed is due again at its next attempt; dead is replayed; list filters; purge deletes delivered', async () => {
      const store = fresh();
      await store.receive('A:SUCCESSFUL', { custom_data: 'order-a' }, lease('1'));
      await store.receive('B:FAILED', { custom_data: 'ORDER-b' }, lease('2'));
      await store.receive('C:SUCCESSFUL', { custom_data: 'x' }, lease('3'));
      expect(
        await store.settle('A:SUCCESSFUL', '1', {
          status: 'failed',
          error: 'e1',
          nextAttemptAt: new Date(0),
        }),
      ).toBe(true);
      expect(await store.settle('B:FAILED', '2', { status: 'dead', error: 'gone' })).toBe(true);
      expect(await store.settle('C:SUCCESSFUL', '3', { status: 'delivered' })).toBe(true);
      expect(await store.countByStatus()).toEqual({ received: 0, delivered: 1, failed: 1, dead: 1 });
      expect((await store.list({ customDataContains: 'order' })).map((e) => e.key)).toEqual([
        'A:SUCCESSFUL',
        'B:FAILED',
      ]);
      expect((await store.list({ status: 'dead' })).map((e) => e.key)).toEqual(['B:FAILED']);
      expect((await store.list({ transactionId: 'C' })).map((e) => e.key)).toEqual(['C:SUCCESSFUL']);
      expect((await store.list({ order: 'newest', limit: 1, offset: 1 })).map((e) => e.key)).toEqual([
        'B:FAILED',
      ]);
      expect((await store.lease(lease('4'), 10)).map((e) => e.key)).toEqual(['A:SUCCESSFUL']);
      expect(await store.replayDead()).toBe(1);
      expect(await store.get('B:FAILED')).toMatchObject({
        status: 'received',
        attempts: 0,
        lastError: 'gone',
      });
      expect((await store.lease(lease('5'), 10)).map((e) => e.key)).toEqual(['B:FAILED']);
      expect(await store.replay('NONE:SUCCESSFUL')).toBe(false);
      expect(await store.purge(new Date(Date.now() + 60_000))).toBe(1);
      expect(await store.get('C:SUCCESSFUL')).toBeUndefined();
      // A release forgets an entry whatever its status: its next receive is new.
      await store.release('A:SUCCESSFUL');
      expect(await store.receive('A:SUCCESSFUL', {}, lease('6'))).toBe(true);
    });

    test('replace puts a record in place of the entry only for its lease holder; release with a lease is guarded', async () => {
      const store = fresh();
      await store.receive('F:SUCCESSFUL', { amount: 1 }, lease('held'));
      await store.settle('F:SUCCESSFUL', 'held', { status: 'failed', error: 'x', nextAttemptAt: new Date() });
      const [taken] = await store.lease(lease('held2'), 1);
      expect(taken?.key).toBe('F:SUCCESSFUL');
      expect(await store.replace('F:SUCCESSFUL', 'held', { amount: 2 }, lease('new'))).toBe(false);
      expect(await store.replace('F:SUCCESSFUL', 'held2', { amount: 5 }, lease('new'))).toBe(true);
      expect(await store.get('F:SUCCESSFUL')).toMatchObject({
        record: { amount: 5 },
        status: 'received',
        attempts: 1,
        lastError: null,
      });
      await store.release('F:SUCCESSFUL', 'held2'); // a lost lease deletes nothing
      expect(await store.get('F:SUCCESSFUL')).toBeDefined();
      await store.release('F:SUCCESSFUL', 'new');
      expect(await store.get('F:SUCCESSFUL')).toBeUndefined();
    });

    test('an empty lease id holds nothing: it settles, replaces and releases no entry, a settled one included', async () => {
      const store = fresh();
      await store.receive('E:SUCCESSFUL', { amount: 1 }, lease('held'));
      await store.release('E:SUCCESSFUL', '');
      expect(await store.get('E:SUCCESSFUL')).toMatchObject({ status: 'received' });
      expect(await store.settle('E:SUCCESSFUL', 'held', { status: 'delivered' })).toBe(true);
      // Settled, the entry keeps an empty lease_id: an empty id must not pass for its holder.
      expect(await store.settle('E:SUCCESSFUL', '', { status: 'dead', error: 'late' })).toBe(false);
      expect(await store.replace('E:SUCCESSFUL', '', { amount: 2 }, lease('new'))).toBe(false);
      await store.release('E:SUCCESSFUL', '');
      expect(await store.get('E:SUCCESSFUL')).toMatchObject({ status: 'delivered', record: { amount: 1 } });
    });

    test.each([
      ['a NUL', 'order\u0000-7'],
      ['a lone surrogate (half an emoji)', 'Awa \ud83d'],
      ['a lone low surrogate and a whole emoji', '\ude00 \ud83d\ude00'],
    ])(
      'a record holding %s in a string round-trips exactly, leased and replaced too',
      async (_what, text) => {
        const store = fresh();
        const record = {
          transaction_id: 'N1',
          state: 'SUCCESSFUL',
          custom_data: `order ${text}`,
          [`k${text}`]: [text],
        };
        expect(await store.receive('N1:SUCCESSFUL', record, lease('a'))).toBe(true);
        expect((await store.get('N1:SUCCESSFUL'))?.record).toEqual(record);
        expect((await store.list({ customDataContains: 'ORDER' })).map((e) => e.key)).toEqual([
          'N1:SUCCESSFUL',
        ]);
        const replaced = { ...record, amount: 7 };
        expect(await store.replace('N1:SUCCESSFUL', 'a', replaced, lease('b', 1))).toBe(true);
        let taken: Awaited<ReturnType<RedisStore['lease']>> = [];
        const deadline = Date.now() + 5_000;
        while (taken.length === 0 && Date.now() < deadline) taken = await store.lease(lease('c'), 10);
        expect(taken.map((entry) => entry.record)).toEqual([replaced]);
      },
    );

    test('a retried delivery carries the same extra fields: the inbox keeps them beside the listed ones', async () => {
      const store = fresh();
      const ipn = ipnRouter({
        store,
        delivery: 'at-least-once',
        logger: quiet,
        retryDelayMs: 5,
        recoveryIntervalMs: 20,
      });
      routers.push(ipn);
      const seen: unknown[] = [];
      ipn.on('successful', (n) => {
        seen.push(n.extra);
        if (seen.length === 1) throw new Error('busy');
      });
      const running = await listen(ipn);
      servers.push(running);
      const payload = uniquePayload({ currency: 'XOF', transaction_channel: 'wave' });
      const response = await fetch(running.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(payload),
      });
      expect(response.status).toBe(200);
      const key = `${String(payload.transaction_id)}:SUCCESSFUL`;
      let status: string | undefined;
      const deadline = Date.now() + 5_000;
      while (status !== 'delivered' && Date.now() < deadline) status = (await ipn.inbox.get(key))?.status;
      expect(status).toBe('delivered');
      const extra = { currency: 'XOF', transaction_channel: 'wave' };
      expect(seen).toEqual([extra, extra]);
      const stored = await store.get(key);
      expect(stored?.record).toMatchObject(extra);
      expect(stored?.record).not.toHaveProperty('extra');
    });

    test('the router at least once: a failing listener is retried and delivered once; a resend is a duplicate', async () => {
      const store = fresh();
      const ipn = ipnRouter({
        store,
        delivery: 'at-least-once',
        logger: quiet,
        retryDelayMs: 5,
        recoveryIntervalMs: 20,
      });
      routers.push(ipn);
      const recorder = recordEvents(ipn);
      const attempts: number[] = [];
      ipn.on('successful', (n, { attempt }) => {
        attempts.push(attempt);
        if (attempt === 1) throw new Error('busy');
      });
      const running = await listen(ipn);
      servers.push(running);
      const payload = uniquePayload();
      const post = () =>
        fetch(running.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(payload),
        });
      expect((await post()).status).toBe(200);
      const key = `${String(payload.transaction_id)}:SUCCESSFUL`;
      await until(() => attempts.length === 2, 'the retry');
      await until(() => recorder.count('successful') === 2, 'two successful events');
      let status: string | undefined;
      const deadline = Date.now() + 5_000;
      while (status !== 'delivered' && Date.now() < deadline) status = (await ipn.inbox.get(key))?.status;
      expect(status).toBe('delivered');
      expect(await (await post()).json()).toEqual({ ok: true, duplicate: true });
      expect(attempts).toEqual([1, 2]);
    });
  });
});
