import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import Redis from 'ioredis';
import {
  createStatusClient,
  ipnRouter,
  MemoryStore,
  StatusRateLimitError,
  type IpnRouter,
  type Options,
  type Store,
} from '../../lib/index.js';
import { RedisStore } from '../../lib/redis.js';
import { MemoryInbox } from '../helpers/memory-inbox.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { listen, settle, type Running } from '../helpers/servers.js';
import { describeWithService, hostAndPort, redisUrl } from '../helpers/services.js';
import { until } from '../helpers/until.js';

/** What the service and the partner see when a part fails: a listener, the store, the status query. */

const servers: Running[] = [];
const routers: IpnRouter<any>[] = [];
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown) => unhandled.push(reason);

beforeAll(() => process.on('unhandledRejection', onUnhandled));
afterAll(() => process.off('unhandledRejection', onUnhandled));
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()));
  await Promise.all(routers.splice(0).map((router) => router.close()));
  await settle();
  expect(unhandled.splice(0)).toEqual([]);
});

async function start(options: Partial<Options> = {}) {
  const ipn = ipnRouter({ logger: quiet, ...options });
  routers.push(ipn);
  const recorder = recordEvents(ipn);
  const running = await listen(ipn);
  servers.push(running);
  const post = async (body: unknown) => {
    const response = await fetch(running.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
    return {
      status: response.status,
      retryAfter: response.headers.get('retry-after'),
      body: (await response.json()) as Record<string, unknown>,
    };
  };
  return { ipn, recorder, post };
}

/** Runs `task` over `items`, `concurrency` at a time, and resolves the results in the items' order. */
async function pool<T, R>(items: T[], concurrency: number, task: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const index = next;
      next += 1;
      results[index] = await task(items[index]!);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return results;
}

const keyOf = (payload: Record<string, unknown>) =>
  `${String(payload.transaction_id)}:${String(payload.state)}`;

describe('at most once: a listener that fails', () => {
  test.each([
    [
      'throws',
      () => {
        throw new Error('ledger down');
      },
    ],
    ['rejects', () => Promise.reject(new Error('ledger timeout'))],
  ])(
    'a listener that %s: the service still gets 200, and error IPN_LISTENER_FAILED carries the notification',
    async (_how, listener) => {
      const { ipn, recorder, post } = await start();
      ipn.on('successful', listener);
      const payload = uniquePayload();

      const answer = await post(payload);
      await until(() => recorder.count('error') === 1, 'the error event');

      expect(answer).toMatchObject({ status: 200, body: { ok: true } });
      const [{ error, notification }] = recorder.of('error');
      expect(error).toMatchObject({ code: 'IPN_LISTENER_FAILED', event: 'successful' });
      expect(notification).toMatchObject({ transaction_id: payload.transaction_id, state: 'SUCCESSFUL' });
      // The service will not resend it: the app must be able to reconcile from the event alone.
      expect(recorder.count('successful')).toBe(1);
      expect((await post(payload)).body).toEqual({ ok: true, duplicate: true });
    },
  );

  test('a listener that never settles delays neither its answer nor the notifications after it', async () => {
    const { ipn, recorder, post } = await start();
    const started: string[] = [];
    ipn.on('successful', (n) => {
      started.push(n.transaction_id);
      return new Promise<void>(() => {}); // a ledger call that never comes back
    });
    const payloads = Array.from({ length: 10 }, () => uniquePayload());

    const sequential = [];
    for (const payload of payloads.slice(0, 5)) sequential.push(await post(payload));
    const concurrent = await Promise.all(payloads.slice(5).map(post));

    expect([...sequential, ...concurrent].map((answer) => answer.status)).toEqual(Array(10).fill(200));
    expect(started).toEqual(payloads.map((payload) => payload.transaction_id));
    expect(recorder.count('notification')).toBe(10);
    expect(recorder.count('error')).toBe(0);

    // close() waits for them at most its timeoutMs, then says so once, naming how many still run.
    await ipn.close({ timeoutMs: 50 });
    expect(recorder.count('error')).toBe(1);
    expect(recorder.of('error')[0]?.error?.message).toMatch(
      /listeners of 10 notification\(s\) already answered were still running after 50 ms \(timeoutMs\)/,
    );
  });
});

test('a close() refused for its timeoutMs closes nothing, and a corrected close() still closes the router', async () => {
  const closed: string[] = [];
  const store = new MemoryStore();
  Object.assign(store, { close: () => void closed.push('store') });
  const { ipn, post } = await start({ store });
  ipn.on('successful', () => {});
  await expect(ipn.close({ timeoutMs: -1 })).rejects.toThrow(TypeError);
  expect((await post(uniquePayload())).status).toBe(200); // still open: the refused call did nothing
  await expect(ipn.close({ timeoutMs: 1_000 })).resolves.toBeUndefined();
  expect(closed).toEqual(['store']);
  expect((await post(uniquePayload())).status).toBe(503);
});

describe('at least once: a listener that hangs', () => {
  test('the attempt fails after leaseMs * 0.9, is retried, and the notification is delivered once', async () => {
    const inbox = new MemoryInbox();
    const { ipn, recorder, post } = await start({
      store: inbox,
      delivery: 'at-least-once',
      leaseMs: 200,
      retryDelayMs: 5,
      recoveryIntervalMs: 20,
    });
    let calls = 0;
    let credited = 0;
    ipn.on('successful', () => {
      calls += 1;
      if (calls === 1) return new Promise<void>(() => {}); // the first attempt hangs for good
      credited += 1;
    });
    const payload = uniquePayload();

    const answer = await post(payload);
    await until(() => inbox.entries.get(keyOf(payload))?.status === 'delivered', 'the delivery');

    expect(answer).toMatchObject({ status: 200, body: { ok: true } });
    expect(calls).toBe(2);
    expect(credited).toBe(1);
    const errors = recorder.of('error');
    expect(errors).toHaveLength(1);
    expect(errors[0].error).toMatchObject({ code: 'IPN_DELIVERY_FAILED' });
    expect(errors[0].error.message).toContain(`within ${Math.floor(200 * 0.9)} ms (leaseMs)`);
    expect(errors[0].notification).toMatchObject({ transaction_id: payload.transaction_id });
    expect(inbox.entries.get(keyOf(payload))).toMatchObject({ attempts: 2, status: 'delivered' });
    expect(recorder.count('dead')).toBe(0);
  });
});

/** A store over a MemoryStore whose every tenth claim fails (a dropped connection), before claiming. */
class OneInTenFailingStore implements Store {
  readonly inner = new MemoryStore();
  calls = 0;
  failures = 0;

  async claim(key: string, ttlMs: number): Promise<boolean> {
    await Promise.resolve(); // a network round trip
    this.calls += 1;
    if (this.calls % 10 === 0) {
      this.failures += 1;
      throw new Error('connection reset by peer (injected)');
    }
    return this.inner.claim(key, ttlMs);
  }

  release(key: string): void {
    this.inner.release(key);
  }
}

describe('a store that fails one call in ten', () => {
  test('each failed call answers 503 with Retry-After and emits IPN_STORE_FAILED; resending them loses nothing', async () => {
    const store = new OneInTenFailingStore();
    const { recorder, post } = await start({ store });
    const distinct = Array.from({ length: 150 }, (_, n) =>
      uniquePayload(n % 3 === 0 ? { state: 'FAILED' } : {}),
    );
    // About 2 in 3 sent twice, side by side: the copies race each other.
    let outstanding = distinct.flatMap((payload, n) => (n % 3 === 1 ? [payload] : [payload, payload]));

    const refused: Array<Record<string, unknown>> = [];
    let answered503 = 0;
    for (let round = 0; outstanding.length > 0; round += 1) {
      if (round === 20) throw new Error(`still ${outstanding.length} notifications refused after 20 rounds`);
      const answers = await pool(outstanding, 10, post);
      for (const answer of answers) {
        expect([200, 503]).toContain(answer.status);
        if (answer.status === 503) {
          expect(answer.retryAfter).toBe('30');
          expect(answer.body).toMatchObject({ error: 'store_unavailable' });
        }
      }
      // What the service does: resend whatever was not answered 200.
      outstanding = outstanding.filter((_, index) => answers[index]!.status === 503);
      refused.push(...outstanding);
      answered503 += outstanding.length;
    }
    await settle();

    expect(answered503).toBeGreaterThan(0);
    // The store also fails some of the router's background re-asks of a failed claim: those answer no one.
    expect(store.failures).toBeGreaterThanOrEqual(answered503);
    const errors = recorder.of('error');
    expect(errors).toHaveLength(answered503);
    for (const { error } of errors) expect(error).toMatchObject({ code: 'IPN_STORE_FAILED' });
    expect(errors.map(({ notification }) => keyOf(notification)).sort()).toEqual(refused.map(keyOf).sort());
    // Every distinct notification emitted exactly once in the end: none lost to a 503, none doubled.
    const emitted = recorder.of('notification').map(keyOf);
    expect(emitted.sort()).toEqual(distinct.map(keyOf).sort());
    expect(recorder.count('successful') + recorder.count('failed')).toBe(distinct.length);
  });
});

describe('a claim that lands but whose answer is lost (a connection reset after the write)', () => {
  test('at most once: the 503 is resent, and the resend is delivered rather than dropped as a duplicate', async () => {
    // The write went through, the reply did not: what Redis or PostgreSQL do when the connection drops
    // between the command and its answer (and what ioredis's default resend of unanswered commands causes).
    // A store that honours the claim's token, as the Store contract asks (RedisStore and PostgresStore do).
    const tokens = new Map<string, string>();
    let loseNextAnswer = true;
    const store: Store = {
      claim: async (key, _ttlMs, token) => {
        await Promise.resolve();
        const claimed = !tokens.has(key) || tokens.get(key) === token;
        if (!tokens.has(key)) tokens.set(key, token);
        if (loseNextAnswer) {
          loseNextAnswer = false;
          throw new Error('connection reset after the write (injected)');
        }
        return claimed;
      },
      release: (key) => void tokens.delete(key),
    };
    const { recorder, post } = await start({ store });
    const payload = uniquePayload();

    expect((await post(payload)).status).toBe(503);
    // The router asks the store again with the same token: it was this claim's, so it is delivered.
    await until(() => recorder.count('successful') === 1, 'the late delivery');
    const resend = await post(payload);
    expect(resend.status).toBe(200);
    expect(resend.body).toEqual({ ok: true, duplicate: true });
    await settle();
    expect(recorder.count('successful')).toBe(1);
  });

  test('at least once: the stored notification is delivered by recovery, and the resend is a duplicate', async () => {
    class LosingInbox extends MemoryInbox {
      loseNextAnswer = true;
      override async receive(...args: Parameters<MemoryInbox['receive']>): Promise<boolean> {
        const stored = await super.receive(...args);
        if (this.loseNextAnswer) {
          this.loseNextAnswer = false;
          throw new Error('connection reset after the write (injected)');
        }
        return stored;
      }
    }
    const inbox = new LosingInbox();
    const { ipn, recorder, post } = await start({
      store: inbox,
      delivery: 'at-least-once',
      leaseMs: 100,
      retryDelayMs: 5,
      recoveryIntervalMs: 20,
    });
    const credited: string[] = [];
    ipn.on('successful', (n) => void credited.push(n.transaction_id));
    const payload = uniquePayload();

    expect((await post(payload)).status).toBe(503);
    expect((await post(payload)).body).toEqual({ ok: true, duplicate: true });
    await until(() => inbox.entries.get(keyOf(payload))?.status === 'delivered', 'the delivery by recovery');

    expect(credited).toEqual([payload.transaction_id]);
    expect(recorder.of('error').map(({ error }) => error.code)).toEqual(['IPN_STORE_FAILED']);
  });
});

describe('the status service fails while notifications are verified', () => {
  const baseUrl = 'https://status.invalid/api_v1/transaction';
  /** The id a status query asks about, from the body the client sends. */
  const queriedId = (init: RequestInit | undefined): string =>
    typeof init?.body === 'string'
      ? String((JSON.parse(init.body) as Record<string, unknown>).transaction_ids)
      : '';

  test('a status query that hangs until it times out: answered 200, never emitted, then IPN_VERIFY_UNAVAILABLE with the notification', async () => {
    const queried: string[] = [];
    const hanging: typeof fetch = (_url, init) => {
      queried.push(queriedId(init));
      return new Promise<Response>((_resolve, reject) => {
        const signal = init?.signal;
        signal?.addEventListener('abort', () => reject(new Error('aborted', { cause: signal.reason })));
      });
    };
    const client = createStatusClient({
      baseUrl,
      apiKey: 'test-key',
      fetch: hanging,
      timeoutMs: 50,
      retries: 0,
      logger: quiet,
    });
    const { recorder, post } = await start({ verify: client, verifyAttempts: 2, verifyRetryDelayMs: 5 });
    const payload = uniquePayload();

    const answer = await post(payload);
    await until(() => recorder.count('error') === 1, 'the error event');

    expect(answer).toMatchObject({ status: 200, body: { ok: true } });
    const [{ error, notification }] = recorder.of('error');
    expect(error).toMatchObject({ code: 'IPN_VERIFY_UNAVAILABLE' });
    expect(error.message).toContain('after 2 attempts');
    expect(notification).toMatchObject({ transaction_id: payload.transaction_id, state: 'SUCCESSFUL' });
    expect(recorder.count('notification')).toBe(0);
    expect(recorder.count('successful')).toBe(0);
    expect(queried).toEqual([payload.transaction_id, payload.transaction_id]); // one per attempt
  });

  test('a status service that answers 429: answered 200, never emitted, IPN_VERIFY_UNAVAILABLE, and nothing more is sent during the cool-down', async () => {
    const queried: string[] = [];
    const blocking: typeof fetch = (_url, init) => {
      queried.push(queriedId(init));
      return Promise.resolve(new Response('{"message":"Too Many Requests"}', { status: 429 }));
    };
    const client = createStatusClient({ baseUrl, apiKey: 'test-key', fetch: blocking, logger: quiet });
    const { recorder, post } = await start({ verify: client, verifyAttempts: 2, verifyRetryDelayMs: 5 });
    const first = uniquePayload();

    const answer = await post(first);
    await until(() => recorder.count('error') === 1, 'the error event');

    expect(answer).toMatchObject({ status: 200, body: { ok: true } });
    const [{ error, notification }] = recorder.of('error');
    expect(error).toMatchObject({ code: 'IPN_VERIFY_UNAVAILABLE' });
    // The second attempt was refused locally: the cool-down had started.
    expect(error.cause).toBeInstanceOf(StatusRateLimitError);
    expect(error.cause).toMatchObject({ reason: 'blocked' });
    expect(notification).toMatchObject({ transaction_id: first.transaction_id });

    // More notifications during the cool-down: each answered 200, none emitted, none queried.
    const more = Array.from({ length: 5 }, () => uniquePayload());
    const answers = await Promise.all(more.map(post));
    await until(() => client.stats.refused >= 1 + more.length, 'the refusals');

    expect(answers.map((a) => a.status)).toEqual(Array(5).fill(200));
    expect(queried).toEqual([first.transaction_id]); // once, for the whole cool-down
    expect(client.stats.queries).toBe(1);
    expect(recorder.count('notification')).toBe(0);
    expect(recorder.count('successful')).toBe(0);
  });
});

/**
 * A TCP proxy to a real service that, once armed, swallows the next reply and cuts the connection: the
 * command has run on the server, its answer never reaches the client.
 */
class ReplyDroppingProxy {
  readonly sockets = new Set<Socket>();
  armed = false;
  private constructor(readonly server: Server) {}

  static async open(target: { host: string; port: number }): Promise<ReplyDroppingProxy> {
    const proxy: ReplyDroppingProxy = new ReplyDroppingProxy(
      createServer((client) => {
        const upstream = connect(target.port, target.host);
        for (const socket of [client, upstream]) {
          proxy.sockets.add(socket);
          socket.on('error', () => {});
          socket.on('close', () => {
            client.destroy();
            upstream.destroy();
            proxy.sockets.delete(socket);
          });
        }
        client.pipe(upstream);
        upstream.on('data', (chunk: Buffer) => {
          if (!proxy.armed) return void client.write(chunk);
          proxy.armed = false;
          client.destroy();
        });
      }),
    );
    await new Promise<void>((resolve) => proxy.server.listen(0, '127.0.0.1', resolve));
    return proxy;
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

describeWithService('Redis', 'RedisStore: a claim whose reply is lost', () => {
  const prefix = `ipn-kit-test:failure-injection:${process.pid}:`;
  let proxy: ReplyDroppingProxy;
  let redis: Redis;

  beforeAll(async () => {
    proxy = await ReplyDroppingProxy.open(hostAndPort(redisUrl(), 6379));
    // ioredis with its default options, as the README's example creates it.
    redis = new Redis(proxy.port, '127.0.0.1', { lazyConnect: true });
    redis.on('error', () => {});
    await redis.connect();
  });
  afterAll(async () => {
    const keys = await redis.keys(`${prefix}*`);
    if (keys.length > 0) await redis.del(...keys);
    redis.disconnect();
    await proxy.close();
  });

  test('a first delivery whose SET NX ran but whose reply was lost is still emitted, never taken for a resend', async () => {
    const { recorder, post } = await start({ store: new RedisStore({ client: redis, prefix }) });
    const payload = uniquePayload();

    proxy.armed = true; // the connection drops between SET NX and its reply
    const answers = [await post(payload)];
    // The service resends whatever was not answered 200.
    while (answers.at(-1)!.status !== 200 && answers.length < 3) answers.push(await post(payload));
    await settle();

    expect(answers.at(-1)).toMatchObject({ status: 200, body: { ok: true } });
    expect(answers.at(-1)!.body.duplicate).toBeUndefined();
    expect(recorder.count('successful')).toBe(1);
  });
});
