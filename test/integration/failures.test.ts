import { join } from 'node:path';
import request from 'supertest';
import * as v from 'valibot';
import { z } from 'zod';
import { ipnRouter, StoreError, type Store } from '../../lib/index.js';
import { uniquePayload } from '../helpers/payloads.js';
import { quiet } from '../helpers/quiet-logger.js';
import { recordEvents } from '../helpers/record-events.js';
import { EXPRESS_VERSIONS, listen, settle, type Running } from '../helpers/servers.js';
import { until } from '../helpers/until.js';

/** A store that claims like a Map, but whose next calls can be made to fail. */
function flakyStore() {
  const keys = new Set<string>();
  const store = {
    failure: undefined as undefined | 'throw' | 'reject' | 'hang' | 'late',
    released: [] as string[],
    /** Lands the claims held back by 'late'. */
    land: () => {},
    claim(key: string): boolean | Promise<boolean> {
      if (store.failure === 'throw') throw new Error('connection refused');
      if (store.failure === 'reject') return Promise.reject(new Error('connection reset'));
      if (store.failure === 'hang') return new Promise<boolean>(() => {});
      const claimed = !keys.has(key);
      keys.add(key);
      // 'late': the claim succeeds, but only when the test lands it, after the router answered 503.
      if (store.failure !== 'late') return claimed;
      return new Promise((resolve) => {
        const before = store.land;
        store.land = () => {
          before();
          resolve(claimed);
        };
      });
    },
    release(key: string): void {
      store.released.push(key);
      keys.delete(key);
    },
  };
  return store;
}

/**
 * Watches the timers ipn-kit's own code (lib/) sets from now on: `pending()` counts those neither fired nor
 * cleared. Not every timer of the process: an earlier test's or the runner's may start or end meanwhile
 * (a count of all of them failed under load, 3 before and 2 after), and an unref'd one is not counted there.
 */
function watchLibTimers() {
  const lib = join(__dirname, '..', '..', 'lib');
  const { setTimeout: set, clearTimeout: clear } = globalThis;
  const live = new Set<NodeJS.Timeout>();
  const setSpy = jest.spyOn(globalThis, 'setTimeout').mockImplementation(((
    callback: (...args: unknown[]) => void,
    ms?: number,
    ...args: unknown[]
  ) => {
    const ours = (new Error().stack ?? '')
      .split('\n')
      .slice(2)
      .some((line) => line.includes(lib));
    const timer = set(
      (...given: unknown[]) => {
        live.delete(timer);
        callback(...given);
      },
      ms,
      ...args,
    );
    if (ours) live.add(timer);
    return timer;
  }) as typeof setTimeout);
  const clearSpy = jest.spyOn(globalThis, 'clearTimeout').mockImplementation((timer) => {
    live.delete(timer as NodeJS.Timeout);
    clear(timer);
  });
  return {
    pending: () => live.size,
    restore: () => {
      setSpy.mockRestore();
      clearSpy.mockRestore();
    },
  };
}

describe.each(EXPRESS_VERSIONS)('failures under %s', (_version, express) => {
  let running: Running;
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => unhandled.push(reason);

  beforeAll(() => process.on('unhandledRejection', onUnhandled));
  afterAll(() => process.off('unhandledRejection', onUnhandled));
  afterEach(async () => {
    await running.close();
    await settle();
    expect(unhandled).toEqual([]);
  });

  async function start(options: Parameters<typeof ipnRouter>[0]) {
    const ipn = ipnRouter({ logger: quiet, ...options });
    const recorder = recordEvents(ipn);
    const app = express();
    app.use('/ipn', ipn);
    running = await listen(app);
    return { ipn, recorder, post: (body: object) => request(running.url).post('/ipn').send(body) };
  }

  test.each(['throw', 'reject', 'hang'] as const)(
    'a store that fails (%s) answers 503 with Retry-After and emits error, never successful',
    async (failure) => {
      const store = flakyStore();
      store.failure = failure;
      const { recorder, post } = await start({ store, storeTimeoutMs: 50 });
      const payload = uniquePayload();

      const response = await post(payload);

      expect(response.status).toBe(503);
      expect(response.headers['retry-after']).toBe('30');
      expect(response.body).toMatchObject({ error: 'store_unavailable' });
      expect(recorder.names()).toEqual(['error']);
      const [{ error, notification }] = recorder.of('error');
      expect(error).toBeInstanceOf(StoreError);
      expect(error.code).toBe('IPN_STORE_FAILED');
      expect(notification).toMatchObject({ transaction_id: payload.transaction_id });
    },
  );

  test('after the store recovers, the resend of a notification that got 503 is delivered', async () => {
    const store = flakyStore();
    store.failure = 'reject';
    const { recorder, post } = await start({ store });
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(503);

    store.failure = undefined;
    expect((await post(payload)).status).toBe(200);
    expect(recorder.names()).toEqual(['error', 'notification', 'successful']);
  });

  test('a claim that lands after the timeout is delivered then, and the resend is a duplicate', async () => {
    const store = flakyStore();
    store.failure = 'late';
    const { recorder, post } = await start({ store, storeTimeoutMs: 20 });
    const payload = uniquePayload();
    expect((await post(payload)).status).toBe(503);
    store.land();
    while (recorder.count('successful') === 0) await new Promise((resolve) => setTimeout(resolve, 10));

    store.failure = undefined;
    expect((await post(payload)).body).toEqual({ ok: true, duplicate: true });
    expect(recorder.names()).toEqual(['error', 'notification', 'successful', 'duplicate']);
    expect(store.released).toEqual([]);
  });

  test('a late claim is delivered even when the logger throws', async () => {
    const store = flakyStore();
    store.failure = 'late';
    const logger = {
      ...quiet,
      warn: () => {
        throw new Error('log sink down');
      },
    };
    const { recorder, post } = await start({ store, storeTimeoutMs: 20, logger });

    expect((await post(uniquePayload())).status).toBe(503);
    store.land();
    while (recorder.count('successful') === 0) await new Promise((resolve) => setTimeout(resolve, 10));

    expect(recorder.names()).toEqual(['error', 'notification', 'successful']);
  });

  test('a claim that answers false after the timeout delivers nothing: the other copy owns it', async () => {
    let land = () => {};
    const store: Store = {
      claim: () => new Promise<boolean>((resolve) => (land = () => resolve(false))),
      release: () => {},
    };
    const { recorder, post } = await start({ store, storeTimeoutMs: 10 });

    expect((await post(uniquePayload())).status).toBe(503);
    land();
    await new Promise((resolve) => setTimeout(resolve, 20));

    expect(recorder.names()).toEqual(['error']);
  });

  test('an asynchronous claim that answers in time leaves no timer behind', async () => {
    const store: Store = { claim: () => Promise.resolve(true), release: () => {} };
    const { post } = await start({ store, storeTimeoutMs: 60_000 });
    const timers = watchLibTimers();
    try {
      expect((await post(uniquePayload())).status).toBe(200);

      expect(timers.pending()).toBe(0);
    } finally {
      timers.restore();
    }
  });

  test('a resend queued behind a late claim (a store that queues while down) is delivered exactly once', async () => {
    // Like ioredis's offline queue: commands wait while the backend is down, then run in order.
    const keys = new Set<string>();
    let backendUp!: () => void;
    const up = new Promise<void>((resolve) => (backendUp = resolve));
    const store: Store = {
      claim: async (key) => {
        await up;
        return !keys.has(key) && Boolean(keys.add(key));
      },
      release: (key) => void keys.delete(key),
    };
    const { recorder, post } = await start({ store, storeTimeoutMs: 20 });
    const payload = uniquePayload();

    expect((await post(payload)).status).toBe(503);
    const resend = post(payload);
    await new Promise((resolve) => setTimeout(resolve, 5));
    backendUp();
    expect((await resend).body).toEqual({ ok: true, duplicate: true });
    await settle();

    expect(recorder.count('successful')).toBe(1);
    expect(recorder.count('duplicate')).toBe(1);
  });

  test('a slow init is started once: requests answer 503 meanwhile, and the first one is delivered when it lands', async () => {
    let attempts = 0;
    let ready = () => {};
    const store: Store = {
      init: () => {
        attempts += 1;
        return new Promise<void>((resolve) => (ready = resolve));
      },
      claim: () => true,
      release: () => {},
    };
    const { recorder, post } = await start({ store, storeTimeoutMs: 20 });

    expect((await post(uniquePayload())).status).toBe(503);
    expect((await post(uniquePayload())).status).toBe(503);
    ready();
    while (recorder.count('successful') < 2) await new Promise((resolve) => setTimeout(resolve, 10));
    expect((await post(uniquePayload())).status).toBe(200);

    expect(attempts).toBe(1);
    expect(recorder.count('successful')).toBe(3);
  });

  test('a claim whose answer is lost while init was pending is asked again, and delivered once', async () => {
    const tokens = new Map<string, string>();
    let loseNext = true;
    const store: Store = {
      init: () => Promise.resolve(),
      claim: (key, _ttl, token) => {
        const mine = !tokens.has(key) || tokens.get(key) === token;
        if (!tokens.has(key)) tokens.set(key, token);
        if (loseNext) {
          loseNext = false;
          return Promise.reject(new Error('connection reset after the write'));
        }
        return Promise.resolve(mine);
      },
      release: (key) => void tokens.delete(key),
    };
    const { recorder, post } = await start({ store, storeTimeoutMs: 1_000 });
    const payload = uniquePayload();

    expect((await post(payload)).status).toBe(503);
    while (recorder.count('successful') === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    expect((await post(payload)).body).toEqual({ ok: true, duplicate: true });
    expect(recorder.count('successful')).toBe(1);
  });

  test('a store whose init fails answers 503, and init is tried again on the next request', async () => {
    let attempts = 0;
    const keys = new Set<string>();
    const store: Store = {
      init: () => {
        attempts += 1;
        if (attempts === 1) throw new Error('database starting up');
      },
      claim: (key) => !keys.has(key) && Boolean(keys.add(key)),
      release: (key) => void keys.delete(key),
    };
    const { recorder, post } = await start({ store });

    expect((await post(uniquePayload())).status).toBe(503);
    expect((await post(uniquePayload())).status).toBe(200);
    expect((await post(uniquePayload())).status).toBe(200);
    expect(attempts).toBe(2);
    expect(recorder.count('successful')).toBe(2);
  });

  test('a store whose claim returns neither true nor false answers 503: it is never taken for a resend', async () => {
    const store = { claim: () => undefined as unknown as boolean, release: () => {} };
    const { recorder, post } = await start({ store });

    const response = await post(uniquePayload());

    expect(response.status).toBe(503);
    expect(recorder.names()).toEqual(['error']);
    expect(recorder.of('error')[0].error.message).toContain('store.claim must return true or false');
  });

  test('a store whose init never finishes answers 503 after storeTimeoutMs', async () => {
    const store: Store = { init: () => new Promise<void>(() => {}), claim: () => true, release: () => {} };
    const { recorder, post } = await start({ store, storeTimeoutMs: 30 });

    const response = await post(uniquePayload());

    expect(response.status).toBe(503);
    expect(recorder.of('error')).toEqual([expect.objectContaining({ error: expect.any(StoreError) })]);
  });

  test('a customData schema that throws still emits the payment, with customDataError', async () => {
    const customData = z.string().transform(() => {
      throw new Error('schema bug');
    });
    const { recorder, post } = await start({ customData });

    const response = await post(uniquePayload());

    expect(response.status).toBe(200);
    expect(recorder.names()).toEqual(['notification', 'successful']);
    expect(recorder.of('successful')[0].customDataError.message).toContain('schema bug');
  });

  test('a valibot customData schema: a matching custom_data is parsed, one that does not match still emits', async () => {
    const customData = v.object({ orderId: v.string() });
    const { recorder, post } = await start({ customData });

    const good = uniquePayload({ custom_data: '{"orderId":"order-5"}' });
    const bad = uniquePayload({ custom_data: '{"orderId":5}' });
    expect((await post(good)).status).toBe(200);
    expect((await post(bad)).status).toBe(200);

    await until(() => recorder.count('successful') === 2, 'both payments');
    const [first, second] = recorder.of('successful');
    expect(first.customData).toEqual({ orderId: 'order-5' });
    expect(first.customDataError).toBeUndefined();
    expect(second.customData).toBeUndefined();
    expect(second.customDataError.issues).toEqual([{ path: 'orderId', message: expect.any(String) }]);
  });

  test('a listener that throws: the answer is unchanged, error is emitted, other listeners and the app go on', async () => {
    const { ipn, recorder, post } = await start({});
    const seen: string[] = [];
    ipn.on('successful', () => {
      throw new Error('ledger down');
    });
    ipn.on('successful', (n) => void seen.push(n.transaction_id));

    const response = await post(uniquePayload());

    expect(response.status).toBe(200);
    expect(seen).toHaveLength(1);
    const [{ error, notification }] = recorder.of('error');
    expect(error).toMatchObject({
      code: 'IPN_LISTENER_FAILED',
      event: 'successful',
      cause: new Error('ledger down'),
    });
    expect(notification.transaction_id).toBe(seen[0]);
    expect((await post(uniquePayload())).status).toBe(200);
  });

  test('a listener whose promise rejects: error is emitted, no unhandled rejection', async () => {
    const { ipn, recorder, post } = await start({});
    ipn.on('failed', async () => {
      await settle();
      throw new Error('refund service timeout');
    });

    const response = await post(uniquePayload({ state: 'FAILED' }));
    await settle();
    await settle();

    expect(response.status).toBe(200);
    expect(recorder.of('error')).toEqual([
      {
        error: expect.objectContaining({ event: 'failed', cause: new Error('refund service timeout') }),
        notification: expect.anything(),
      },
    ]);
  });

  test('a logger whose every method throws costs nothing: events and answers are unchanged', async () => {
    const throwing = () => {
      throw new Error('log sink down');
    };
    const logger = { debug: throwing, info: throwing, warn: throwing, error: throwing };
    const store = flakyStore();
    const { recorder, post } = await start({ logger, store });

    expect((await post(uniquePayload())).status).toBe(200);
    store.failure = 'reject';
    expect((await post(uniquePayload())).status).toBe(503);
    expect(recorder.names()).toEqual(['notification', 'successful', 'error']);
  });

  test('a failure inside ipn-kit answers 500 internal_error and emits error, instead of crashing', async () => {
    const ipn = ipnRouter({ logger: quiet });
    const recorder = recordEvents(ipn);
    const app = express();
    app.use((req: object, _res: unknown, next: () => void) => {
      Object.defineProperty(req, 'headers', {
        get: () => {
          throw new Error('broken request object');
        },
      });
      next();
    });
    app.use('/ipn', ipn);
    running = await listen(app);

    const response = await request(running.url).post('/ipn').send(uniquePayload());

    expect(response.status).toBe(500);
    expect(response.body).toMatchObject({ error: 'internal_error' });
    expect(recorder.of('error')).toEqual([
      { error: expect.objectContaining({ code: 'IPN_INTERNAL', cause: new Error('broken request object') }) },
    ]);
  });

  test('an error listener that throws is logged, not rethrown, with the error it was handed', async () => {
    const logged: string[] = [];
    const logger = {
      ...quiet,
      error: (fields: { handling?: string }, message: string) =>
        void logged.push(`${message} ${fields.handling ?? ''}`),
    };
    const { ipn, post } = await start({ logger });
    ipn.on('successful', () => {
      throw new Error('first');
    });
    ipn.on('error', () => {
      throw new Error('second');
    });

    expect((await post(uniquePayload())).status).toBe(200);
    // 'first' went to the app's error listener (ipn-kit logs it at debug), which failed: its line names both.
    expect(logged).toEqual([expect.stringMatching(/second.*first/)]);
  });
});
